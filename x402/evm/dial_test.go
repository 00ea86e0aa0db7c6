package evm_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

func TestDialChains(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = chain.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()

	clients, err := evm.DialChains(ctx, map[string][]string{"eip155:8453": {url}}, nil)
	require.NoError(t, err)
	t.Cleanup(clients["eip155:8453"].Stop)
	code, err := clients["eip155:8453"].CodeAt(ctx, devchain.USDC, nil)
	require.NoError(t, err)
	require.NotEmpty(t, code)

	// Two endpoints, one of them down: it starts out, the other serves.
	clients, err = evm.DialChains(ctx, map[string][]string{"eip155:8453": {"http://127.0.0.1:1", url}}, nil)
	require.NoError(t, err)
	t.Cleanup(clients["eip155:8453"].Stop)
	code, err = clients["eip155:8453"].CodeAt(ctx, devchain.USDC, nil)
	require.NoError(t, err)
	require.NotEmpty(t, code)

	_, err = evm.DialChains(ctx, map[string][]string{"eip155:84532": {url}}, nil)
	require.ErrorContains(t, err, "serves chain 8453")
	_, err = evm.DialChains(ctx, map[string][]string{"eip155:8453": {"http://127.0.0.1:1"}}, nil)
	require.ErrorContains(t, err, "none answers")
	_, err = evm.DialChains(ctx, map[string][]string{"eip155:8453": {"http://127.0.0.1:1/v2/SECRETKEY"}}, nil)
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
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(chain.Handler())
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := evm.Dial(ctx, srv.URL)
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

func TestParseKey(t *testing.T) {
	t.Parallel()
	// Development account 8, the devchain's relayer.
	for _, s := range []string{
		"0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
		"dbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97\n",
	} {
		key, err := evm.ParseKey(s)
		require.NoError(t, err)
		require.Equal(t, chain.Account(devchain.RelayerAccount).Address, crypto.PubkeyToAddress(key.PublicKey))
	}
	_, err := evm.ParseKey("0x1234")
	require.Error(t, err)
}
