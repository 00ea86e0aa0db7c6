package api

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/diff"
	"github.com/x402d/x402d/jobs/regex"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
)

// TestQuoteFastPath checks that the server answers an unpaid call exactly
// as its router does (status, quote headers, body) without going through
// it, counts it, and leaves every other request to the router: a paid one,
// an unknown or unsold operation, another method.
func TestQuoteFastPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// No database is needed for quotes: a port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "postgres://postgres@" + ln.Addr().String() + "/x?sslmode=disable&connect_timeout=1"
	require.NoError(t, ln.Close())
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	connConfig, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	m := metrics.New(&metrics.Config{})
	s, err := New(&Config{
		Ops:      []jobs.Operation{diff.Op, regex.Op},
		Payments: &paytest.Payments{Unsold: map[string]bool{"regex": true}},
		Pool:     pool, River: rc, Metrics: m,
		Listener: store.NewListener(connConfig, slog.New(slog.DiscardHandler)),
		Logger:   slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	fast := httptest.NewServer(s)
	t.Cleanup(fast.Close)
	routed := httptest.NewServer(s.Echo())
	t.Cleanup(routed.Close)

	do := func(base, method, path, payment string) (*http.Response, string) {
		t.Helper()
		body := `{"a":"x\n","b":"y\n"}`
		if strings.HasSuffix(path, "?large") {
			body = strings.Repeat("x", 2<<20)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		if payment != "" {
			req.Header.Set("Payment-Signature", payment)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(out)
	}
	for _, tt := range []struct {
		name, method, path, payment string
		status                      int
	}{
		{"Quote", http.MethodPost, "/api/x402/diff", "", http.StatusPaymentRequired},
		{"QuoteWithQuery", http.MethodPost, "/api/x402/diff?x=1", "", http.StatusPaymentRequired},
		{"Unsold", http.MethodPost, "/api/x402/regex", "", http.StatusServiceUnavailable},
		{"Unknown", http.MethodPost, "/api/x402/nope", "", http.StatusNotFound},
		// GET answers the quote too: the official batch-settlement
		// client probes a resource so before a refund.
		{"Get", http.MethodGet, "/api/x402/diff", "", http.StatusPaymentRequired},
		{"Unreadable", http.MethodPost, "/api/x402/diff", "garbage", http.StatusPaymentRequired},
		{"TooLarge", http.MethodPost, "/api/x402/diff?large", "", http.StatusRequestEntityTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, abody := do(fast.URL, tt.method, tt.path, tt.payment)
			b, bbody := do(routed.URL, tt.method, tt.path, tt.payment)
			require.Equal(t, tt.status, a.StatusCode, abody)
			require.Equal(t, b.StatusCode, a.StatusCode)
			require.Equal(t, bbody, abody)
			for _, h := range []string{"Payment-Required", "Www-Authenticate", "Content-Type", "Cache-Control"} {
				require.Equal(t, b.Header.Get(h), a.Header.Get(h), h)
			}
			if tt.status == http.StatusPaymentRequired {
				require.Equal(t, "no-store", a.Header.Get("Cache-Control"), "a quote is never stored by a cache")
			}
		})
	}
	// Every quote is counted, through either path.
	var out strings.Builder
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	out.WriteString(rec.Body.String())
	require.Contains(t, out.String(), `x402d_quotes_served_total{op="diff"} 6`)
}

// BenchmarkQuoteFastPath is the server's work for an unpaid call, without
// the network: compare with BenchmarkQuoteRouted, the same through the
// router and its middleware.
func BenchmarkQuoteFastPath(b *testing.B) { benchmarkQuote(b, false) }

// BenchmarkQuoteRouted is BenchmarkQuoteFastPath through the router.
func BenchmarkQuoteRouted(b *testing.B) { benchmarkQuote(b, true) }

func benchmarkQuote(b *testing.B, routed bool) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/x?sslmode=disable")
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(b, err)
	connConfig, err := pgx.ParseConfig("postgres://postgres@127.0.0.1:1/x")
	require.NoError(b, err)
	s, err := New(&Config{
		Ops: []jobs.Operation{diff.Op}, Payments: &paytest.Payments{}, Pool: pool, River: rc,
		Metrics:  metrics.New(&metrics.Config{}),
		Listener: store.NewListener(connConfig, slog.New(slog.DiscardHandler)),
		Logger:   slog.New(slog.DiscardHandler),
	})
	require.NoError(b, err)
	var h http.Handler = s
	if routed {
		h = s.Echo()
	}
	req := httptest.NewRequest(http.MethodPost, "/api/x402/diff", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusPaymentRequired {
			b.Fatal(w.Code)
		}
	}
}
