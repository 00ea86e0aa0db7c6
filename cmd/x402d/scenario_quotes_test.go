//go:build scenario

package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
)

// TestQuotesAgainstBareServer measures unpaid quotes of `x402d serve` beside
// a bare net/http server that answers every request with the same 402 (the
// same quote header and body), with wrk (1 thread, 32 connections, 8 s),
// alternating the two three times: the quote path should answer at least
// 90% of what the bare server does on the same machine. Each round also
// measures the official @x402/express guarding the same route
// (compat/official_seller.mjs without RPC_URL: quotes only). `go tool task load:quotes` runs it;
// wrk comes from Debian (apt-get install -y wrk).
func TestQuotesAgainstBareServer(t *testing.T) {
	ctx := context.Background()
	wrk, err := exec.LookPath("wrk")
	require.NoError(t, err, "wrk is needed: apt-get install -y wrk")
	script, err := filepath.Abs("../../scripts/post.lua")
	require.NoError(t, err)
	db := dbtest.Schema(ctx, t)
	base := startChild(t, "serve", map[string]string{"DATABASE_URL": db.URL, "LISTEN_ADDR": "127.0.0.1:0",
		"DEVCHAIN_RPC_ADDR": freeAddr(t), "TEST_REAL_PAYMENTS": "1"}).addr

	resp, err := http.Post(base+"/api/x402/diff", "application/json", nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
	header := resp.Header.Clone()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	bare := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		for _, k := range []string{"Payment-Required", "Www-Authenticate", "Content-Type"} {
			h[k] = header[k]
		}
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = w.Write(body)
	})}
	go func() { _ = bare.Serve(ln) }()
	t.Cleanup(func() { _ = bare.Close() })

	official := startCompatServer(t, "official_seller.mjs")

	rate := regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	measure := func(url string) float64 {
		out, err := exec.CommandContext(ctx, wrk, "-t1", "-c32", "-d8s", "-s", script, url).CombinedOutput()
		require.NoError(t, err, string(out))
		m := rate.FindSubmatch(out)
		require.NotNil(t, m, string(out))
		r, err := strconv.ParseFloat(string(m[1]), 64)
		require.NoError(t, err)
		return r
	}
	var ratios []float64
	for range 3 {
		b := measure("http://" + ln.Addr().String() + "/api/x402/diff")
		x := measure(base + "/api/x402/diff")
		o := measure(official + "/api/x402/diff")
		ratios = append(ratios, x/b)
		t.Logf("bare net/http %.0f quotes/s, x402d %.0f quotes/s: %.1f%%; official @x402/express %.0f quotes/s", b, x, 100*x/b, o)
		require.Greater(t, x, o, "x402d answers more quotes a second than the official seller")
	}
	t.Logf("x402d's quotes against the bare server, alternated: %.1f%%, %.1f%%, %.1f%%", 100*ratios[0], 100*ratios[1], 100*ratios[2])
}
