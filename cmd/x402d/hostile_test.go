package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
)

// clientFrom returns an HTTP client whose connections come from the
// loopback address ip (127.0.0.2 ...): another client address to the api.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 64}}
}

// TestRefusedPaymentsLimitedPerClient floods the api from one client
// address with payments refused after a chain read (empty wallets): past
// the address's burst they are answered 429 with Retry-After and a JSON
// error, while payments refused without the chain are still answered 402
// from that address, another address's honest payments are answered 200,
// and an honest client's many verified payments are never limited.
func TestRefusedPaymentsLimitedPerClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const burst = 5
	base := startInProcess(ctx, t, "serve", testEnv(db, map[string]string{
		"REFUSED_PAYMENTS_BURST":      strconv.Itoa(burst),
		"REFUSED_PAYMENTS_PER_SECOND": "0.2",
		// A forged X-Forwarded-For from an untrusted peer is ignored.
		"TRUSTED_PROXIES": "10.9.9.9",
	}))
	const body = `{"a":"one\ntwo\n","b":"one\nthree\n"}`
	url := base + "/api/x402/diff"
	flooder := clientFrom("127.0.0.2")

	var refused, limited int
	for i := range 60 {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Payment-Signature", fmt.Sprintf("empty:0xempty%d:n%d", i, i))
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i))
		resp, err := flooder.Do(req)
		require.NoError(t, err)
		var e struct{ Error, Message string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusPaymentRequired:
			require.Equal(t, "invalid_exact_evm_insufficient_balance", e.Error)
			refused++
		case http.StatusTooManyRequests:
			require.Equal(t, "rate_limited", e.Error)
			require.NotEmpty(t, e.Message)
			wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
			require.Positive(t, wait)
			limited++
		default:
			t.Fatalf("payment %d: status %d (%s)", i, resp.StatusCode, e.Error)
		}
	}
	require.LessOrEqual(t, refused, burst+1, "refused after a chain read: the burst, and what refilled meanwhile")
	require.GreaterOrEqual(t, refused, burst)
	require.Equal(t, 60-refused, limited)

	// A payment refused without the chain is answered as such from the
	// limited address.
	resp, b := post(t, flooder, url, "bad:0xpayer:x1", body)
	require.Equal(t, http.StatusPaymentRequired, resp.StatusCode, string(b))

	// Another address's honest payments: answered 200, each of them, more
	// than the burst, and at once.
	honest := clientFrom("127.0.0.3")
	var wg sync.WaitGroup
	statuses := make([]int, 3*burst)
	for i := range statuses {
		wg.Go(func() {
			resp, _ := post(t, honest, url, fmt.Sprintf("test:0xhonest:h%d", i), body)
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, s := range statuses {
		require.Equal(t, http.StatusOK, s, "honest payment %d", i)
	}
	// The flood's address is still limited, over MCP as well; another
	// address's tool call is not.
	resp, _ = post(t, flooder, url, "empty:0xempty:again", body)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	args := map[string]any{"a": "x\n", "b": "y\n"}
	res := callTool(ctx, t, mcpSessionFrom(ctx, t, base, flooder), "diff", args, "empty:0xempty:mcp")
	requireToolFailure(t, res, "rate_limited")
	res = callTool(ctx, t, mcpSessionFrom(ctx, t, base, honest), "diff", args, "empty:0xempty:mcp")
	requirePaymentRequired(t, res, "invalid_exact_evm_insufficient_balance")
}

// mcpSessionFrom is an MCP session with base whose requests client sends.
func mcpSessionFrom(ctx context.Context, t *testing.T, base string, client *http.Client) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "x402d-test", Version: "1"}, nil)
	session, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", DisableStandaloneSSE: true, HTTPClient: client}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = session.Close() })
	return session
}

// TestResentPaymentsNotLimited resends accepted payments many times more
// than the refused-payment burst (a client whose answers were lost): each
// is answered with its call's result, never 429.
func TestResentPaymentsNotLimited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	base := startInProcess(ctx, t, "serve", testEnv(db, map[string]string{"REFUSED_PAYMENTS_BURST": "2", "REFUSED_PAYMENTS_PER_SECOND": "0.01"}))
	const body = `{"a":"one\ntwo\n","b":"one\nthree\n"}`
	client := clientFrom("127.0.0.4")
	for i := range 3 {
		header := fmt.Sprintf("test:0xresend:r%d", i)
		for range 4 {
			resp, b := post(t, client, base+"/api/x402/diff", header, body)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		}
	}
}
