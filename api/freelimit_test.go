package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/diff"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
)

func TestFreeLimiter(t *testing.T) {
	t.Parallel()
	type step struct {
		at   time.Duration
		addr string
		n    int
		// wantWait is the wait answered (0: the tokens were taken).
		wantWait time.Duration
	}
	testCases := []struct {
		name  string
		rate  float64
		burst int
		steps []step
	}{
		{
			name: "ok, a new address has its burst", rate: 1, burst: 3,
			steps: []step{{addr: "a", n: 1}, {addr: "a", n: 1}, {addr: "a", n: 1}},
		},
		{
			name: "nok, past the burst until a token comes back", rate: 2, burst: 2,
			steps: []step{
				{addr: "a", n: 1}, {addr: "a", n: 1},
				{addr: "a", n: 1, wantWait: 500 * time.Millisecond},
				{at: 250 * time.Millisecond, addr: "a", n: 1, wantWait: 250 * time.Millisecond},
				{at: 500 * time.Millisecond, addr: "a", n: 1},
			},
		},
		{
			name: "ok, another address is not affected", rate: 1, burst: 1,
			steps: []step{{addr: "a", n: 1}, {addr: "a", n: 1, wantWait: time.Second}, {addr: "b", n: 1}},
		},
		{
			name: "ok, a request of n messages takes n tokens", rate: 1, burst: 10,
			steps: []step{{addr: "a", n: 7}, {addr: "a", n: 4, wantWait: time.Second}, {addr: "a", n: 3}},
		},
		{
			name: "ok, at most the burst is asked, so that a full bucket always admits", rate: 1, burst: 5,
			steps: []step{{addr: "a", n: 50}, {addr: "a", n: 50, wantWait: 5 * time.Second}, {at: 5 * time.Second, addr: "a", n: 50}},
		},
		{
			name: "ok, tokens come back up to the burst only", rate: 10, burst: 2,
			steps: []step{{addr: "a", n: 2}, {at: time.Hour, addr: "a", n: 2}, {at: time.Hour, addr: "a", n: 1, wantWait: 100 * time.Millisecond}},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clk := clock.NewFake(start)
			l := newFreeLimiter(tc.rate, tc.burst, clk)
			for i, s := range tc.steps {
				clk.Set(start.Add(s.at))
				require.InDelta(t, s.wantWait, l.take(s.addr, s.n), float64(time.Millisecond), "step %d", i)
			}
		})
	}
}

// freeServer serves the api for cfg over a new database holding
// smallIndex, trusting X-Forwarded-For from loopback (so that a test
// speaks as any client address), and returns its URL.
func freeServer(ctx context.Context, t *testing.T, cfg Config) string {
	t.Helper()
	db := dbtest.Schema(ctx, t)
	smallIndex(ctx, t, db)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	cfg.Ops = []jobs.Operation{diff.Op}
	cfg.Payments = &paytest.Payments{}
	cfg.Pool, cfg.River = db.Pool, rc
	cfg.Listener = store.NewListener(db.Pool.Config().ConnConfig, slog.New(slog.DiscardHandler))
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	s, err := New(&cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL
}

// freeRequest is a request of a free surface from the client address from.
func freeRequest(ctx context.Context, t testing.TB, method, url, from, body string) *http.Request {
	t.Helper()
	req, err := newFreeRequest(ctx, method, url, from, body)
	require.NoError(t, err)
	return req
}

// newFreeRequest is freeRequest for a goroutine of its own.
func newFreeRequest(ctx context.Context, method, url, from, body string) (*http.Request, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Forwarded-For", from)
	if strings.HasSuffix(url, "/mcp") {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	return req, nil
}

// do sends req and returns its response with its body read.
func do(t testing.TB, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// toolCall is a JSON-RPC tools/call of tool with id.
func toolCall(id int, tool string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, id, tool)
}

// batch is a JSON-RPC batch of n calls of tool.
func batch(n int, tool string) string {
	calls := make([]string, n)
	for i := range calls {
		calls[i] = toolCall(i+1, tool)
	}
	return "[" + strings.Join(calls, ",") + "]"
}

// rpcAnswers returns the JSON-RPC responses of an MCP answer, a JSON body
// or an event stream.
func rpcAnswers(t testing.TB, resp *http.Response, body []byte) []map[string]any {
	t.Helper()
	var datas [][]byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				datas = append(datas, []byte(d))
			}
		}
	} else {
		datas = [][]byte{body}
	}
	var out []map[string]any
	for _, d := range datas {
		var many []map[string]any
		if json.Unmarshal(d, &many) == nil {
			out = append(out, many...)
			continue
		}
		var one map[string]any
		require.NoError(t, json.Unmarshal(d, &one), "%s", d)
		out = append(out, one)
	}
	return out
}

// TestFreeSurfacesRateLimited: a client address past its rate on /mcp,
// /api/xindex and an index page is answered 429 with Retry-After (JSON, or
// a short page on the HTML pages), nothing run; another address is not
// affected, and the paid path is not limited by it.
func TestFreeSurfacesRateLimited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := metrics.New(&metrics.Config{})
	// A rate of one request every 4 s, a burst of 3, and a clock that
	// stands still: the fourth request of an address is refused.
	base := freeServer(ctx, t, Config{FreeRate: 0.25, FreeBurst: 3, Clock: clk, Metrics: m})
	surfaces := []struct {
		name, method, path, body string
		wantType                 string
	}{
		{"xindex", http.MethodGet, "/api/xindex/summary", "", "application/json"},
		{"mcp", http.MethodPost, "/mcp", toolCall(1, "index_summary"), "application/json"},
		{"page", http.MethodGet, "/x402-index", "", "text/html"},
	}
	for i, sf := range surfaces {
		t.Run(sf.name, func(t *testing.T) {
			limited, other := fmt.Sprintf("203.0.113.%d", i+1), fmt.Sprintf("198.51.100.%d", i+1)
			for n := range 3 {
				resp, body := do(t, freeRequest(ctx, t, sf.method, base+sf.path, limited, sf.body))
				require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %.300s", n, body)
			}
			resp, body := do(t, freeRequest(ctx, t, sf.method, base+sf.path, limited, sf.body))
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%.300s", body)
			require.Equal(t, "4", resp.Header.Get("Retry-After"))
			require.Contains(t, resp.Header.Get("Content-Type"), sf.wantType)
			if sf.wantType == "application/json" {
				var e Error
				require.NoError(t, json.Unmarshal(body, &e))
				require.Equal(t, "rate_limited", e.Code)
				require.Contains(t, e.Message, "4 s")
			}
			resp, body = do(t, freeRequest(ctx, t, sf.method, base+sf.path, other, sf.body))
			require.Equal(t, http.StatusOK, resp.StatusCode, "another address: %s", body)
		})
	}
	t.Run("the surfaces share an address's tokens", func(t *testing.T) {
		from := "203.0.113.9"
		for _, sf := range surfaces {
			resp, _ := do(t, freeRequest(ctx, t, sf.method, base+sf.path, from, sf.body))
			require.Equal(t, http.StatusOK, resp.StatusCode, sf.name)
		}
		resp, _ := do(t, freeRequest(ctx, t, http.MethodGet, base+"/x402-index/changes", from, ""))
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	})
	t.Run("an MCP batch takes a token per message", func(t *testing.T) {
		from := "203.0.113.10"
		resp, body := do(t, freeRequest(ctx, t, http.MethodPost, base+"/mcp", from, batch(2, "index_summary")))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		require.Len(t, rpcAnswers(t, resp, body), 2)
		resp, body = do(t, freeRequest(ctx, t, http.MethodPost, base+"/mcp", from, batch(2, "index_summary")))
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%.300s", body)
	})
	t.Run("paid calls are not limited by it", func(t *testing.T) {
		from := "203.0.113.1" // past its rate above
		req := freeRequest(ctx, t, http.MethodPost, base+"/api/x402/diff", from, `{"a":"x\n","b":"y\n"}`)
		req.Header.Set("Content-Type", "application/json")
		resp, body := do(t, req)
		require.Equal(t, http.StatusPaymentRequired, resp.StatusCode, "%s", body)
		paid := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"diff","arguments":{"a":"x\n","b":"y\n"},"_meta":{"x402/payment":"not a payment"}}}`
		resp, body = do(t, freeRequest(ctx, t, http.MethodPost, base+"/mcp", "203.0.113.2", paid))
		require.Equal(t, http.StatusOK, resp.StatusCode, "a paid tool call from an address past its rate: %s", body)
	})
	text := metricsText(m)
	for _, sf := range []string{"mcp", "xindex", "page"} {
		require.Regexp(t, `x402d_free_requests_refused_total\{reason="rate_limited",surface="`+sf+`"\} [1-9]`, text)
	}
}

// metricsText is m's /metrics.
func metricsText(m *metrics.Metrics) string {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// TestMCPBatchCapped: a JSON-RPC batch of 10,000 index calls to /mcp is
// refused whole, at once, with a JSON-RPC error naming the cap, while
// clients sending such batches do not slow another client's requests; a
// batch at the cap is answered in full.
func TestMCPBatchCapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := metrics.New(&metrics.Config{})
	base := freeServer(ctx, t, Config{MCPMaxBatch: 50, Metrics: m})

	huge := batch(10_000, "index_search")
	start := time.Now()
	resp, body := do(t, freeRequest(ctx, t, http.MethodPost, base+"/mcp", "203.0.113.1", huge))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%.300s", body)
	require.Less(t, time.Since(start), 5*time.Second)
	var answer struct {
		JSONRPC string `json:"jsonrpc"`
		ID      any    `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    struct {
				Error    string `json:"error"`
				MaxBatch int    `json:"max_batch"`
			} `json:"data"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &answer), "%s", body)
	require.Equal(t, "2.0", answer.JSONRPC)
	require.Nil(t, answer.ID)
	require.Equal(t, -32600, answer.Error.Code)
	require.Equal(t, "batch_too_large", answer.Error.Data.Error)
	require.Equal(t, 50, answer.Error.Data.MaxBatch)
	require.Contains(t, answer.Error.Message, "MCP_MAX_BATCH")

	// A batch at the cap is answered, every call.
	resp, body = do(t, freeRequest(ctx, t, http.MethodPost, base+"/mcp", "203.0.113.2", batch(50, "index_search")))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%.300s", body)
	answers := rpcAnswers(t, resp, body)
	require.Len(t, answers, 50)
	for _, a := range answers {
		require.Nil(t, a["error"])
		require.NotEqual(t, true, a["result"].(map[string]any)["isError"], "%v", a)
	}

	// Eight flooders send batches of 10,000 as fast as they are answered,
	// and batches at the cap, each from an address of its own (so that
	// the cap's batches run, past the rate limit): meanwhile another
	// client's requests answer promptly.
	flood, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var ran, refused atomic.Int64
	for c := range 8 {
		wg.Go(func() {
			for i := 0; flood.Err() == nil; i++ {
				body := huge
				if i%2 == 1 {
					body = batch(50, "index_search")
				}
				req, err := newFreeRequest(flood, http.MethodPost, base+"/mcp", fmt.Sprintf("10.%d.%d.%d", c, i/250%250, i%250), body)
				if err != nil {
					return
				}
				if resp, err := http.DefaultClient.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						ran.Add(1)
					case http.StatusBadRequest:
						refused.Add(1)
					}
				}
			}
		})
	}
	t.Cleanup(wg.Wait)
	t.Cleanup(stop)
	for i := range 10 {
		for _, r := range []*http.Request{
			freeRequest(ctx, t, http.MethodGet, base+"/api/xindex/summary", "198.51.100.1", ""),
			freeRequest(ctx, t, http.MethodPost, base+"/mcp", "198.51.100.1", toolCall(1, "index_summary")),
		} {
			start := time.Now()
			resp, body := do(t, r)
			require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i, body)
			require.Less(t, time.Since(start), 3*time.Second, "request %d of another client during the flood", i)
		}
	}
	stop()
	wg.Wait()
	require.Positive(t, ran.Load(), "batches at the cap ran during the flood")
	require.Positive(t, refused.Load(), "batches past the cap were refused during the flood")
	t.Logf("during the flood: %d batches at the cap answered, %d past it refused", ran.Load(), refused.Load())
	require.Regexp(t, `x402d_free_requests_refused_total\{reason="batch_too_large",surface="mcp"\} [1-9]`, metricsText(m))
}
