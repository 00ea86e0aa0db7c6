package ethrpc_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/x402d/x402d/x402/evm/ethrpc"
)

func TestDialChains(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	node := newFakeNode(t, 7)

	clients, err := ethrpc.DialChains(ctx, map[string][]string{"eip155:8453": {node.URL}}, nil)
	require.NoError(t, err)
	t.Cleanup(clients["eip155:8453"].Stop)
	head, err := clients["eip155:8453"].BlockNumber(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(7), head)

	// Two endpoints, one of them down: it starts out, the other serves.
	clients, err = ethrpc.DialChains(ctx, map[string][]string{"eip155:8453": {"http://127.0.0.1:1", node.URL}}, nil)
	require.NoError(t, err)
	t.Cleanup(clients["eip155:8453"].Stop)
	head, err = clients["eip155:8453"].BlockNumber(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(7), head)
	require.False(t, clients["eip155:8453"].Status()[0].In)

	_, err = ethrpc.DialChains(ctx, map[string][]string{"eip155:84532": {node.URL}}, nil)
	require.ErrorContains(t, err, "serves chain 8453")
	_, err = ethrpc.DialChains(ctx, map[string][]string{"eip155:8453": {"http://127.0.0.1:1"}}, nil)
	require.ErrorContains(t, err, "none answers")
	_, err = ethrpc.DialChains(ctx, map[string][]string{"eip155:8453": {"http://127.0.0.1:1/v2/SECRETKEY"}}, nil)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "SECRETKEY", "an endpoint's URL is never in an error")
}

// TestDialKeepsConnections sends rounds of concurrent requests through Dial:
// they reuse the connections the first round opened (go-ethereum's default
// HTTP client keeps two idle per host and opens a new one for nearly every
// request beyond two: some 140 connections here). A connection or two more
// than the first round's may open when a request dials just as another
// connection comes free (seen in CI: 17).
func TestDialKeepsConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := newFakeNode(t, 7)
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(node.serve))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := ethrpc.Dial(ctx, srv.URL)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	const concurrent, rounds = 16, 10
	for range rounds {
		var g errgroup.Group
		for range concurrent {
			g.Go(func() error {
				_, err := c.BlockNumber(ctx)
				return err
			})
		}
		require.NoError(t, g.Wait())
	}
	require.LessOrEqual(t, opened.Load(), int64(2*concurrent), "%d rounds of %d requests", rounds, concurrent)
}
