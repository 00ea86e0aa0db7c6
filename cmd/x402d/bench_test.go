package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
)

// BenchmarkPaidRoundTrip measures a paid pure-operation call from the
// request to the delivered result: verify (test double), one transaction
// that records the call and inserts the job, the worker's run and completion,
// the settlement job (test double settling in Postgres), and the wake-up of
// the waiting request by NOTIFY. It reports the p50 and p99 latencies.
func BenchmarkPaidRoundTrip(b *testing.B) {
	ctx := context.Background()
	db := dbtest.Schema(ctx, b)
	base := startInProcess(ctx, b, "serve", testEnv(db, nil))
	client := &http.Client{Timeout: 30 * time.Second}
	body := `{"a":"one\ntwo\nthree\n","b":"one\n2\nthree\n"}`

	// Warm up connections and River's producers.
	for i := range 20 {
		post(b, client, base+"/api/x402/diff", fmt.Sprintf("test:0xwarm:w%d", i), body)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		resp, out := post(b, client, base+"/api/x402/diff", fmt.Sprintf("test:0xbench:n%d", i), body)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d: %s", resp.StatusCode, out)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
}

// BenchmarkPaidSteady offers 300 paid calls a second for 10 s (open loop,
// x402d load's -rate) to one serve process paying with the payment double:
// the service's own latency at the rate, everything but a chain's
// blocks (docs/performance.md). It reports the calls answered per second and
// the p50 and p99 latencies; each run also checks that every call was
// answered 200.
func BenchmarkPaidSteady(b *testing.B) {
	ctx := context.Background()
	db := dbtest.Schema(ctx, b)
	base := startInProcess(ctx, b, "serve", testEnv(db, map[string]string{"DB_MAX_CONNS": "20"}))
	for run := 0; b.Loop(); run++ {
		rep, err := loadgen.Run(ctx, loadgen.Config{
			BaseURL: base, Requests: loadRequests[:1], Payer: &fakePayer{payer: fmt.Sprintf("0xsteady%d", run)},
			Concurrency: 1000, Rate: 300, Duration: 10 * time.Second,
		})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Statuses[http.StatusOK] != rep.Calls {
			b.Fatalf("not every call answered 200: %s", rep)
		}
		b.ReportMetric(rep.Throughput, "calls/s")
		b.ReportMetric(float64(rep.P50.Microseconds())/1000, "p50_ms")
		b.ReportMetric(float64(rep.P99.Microseconds())/1000, "p99_ms")
	}
}

// BenchmarkPaidTransports pays diff calls, 32 in flight, to one serve
// process paying with the payment double, over each transport: "http"
// (POST /api/x402/diff with PAYMENT-SIGNATURE) and "mcp" (a tools/call of
// diff on /mcp with the payment in _meta, through the official Go MCP
// client, a session per caller). Both go through the same pipeline; the
// difference is what each transport costs. It reports the paid calls
// answered per second and the p50 latency.
func BenchmarkPaidTransports(b *testing.B) {
	ctx := context.Background()
	db := dbtest.Schema(ctx, b)
	base := startInProcess(ctx, b, "serve", testEnv(db, map[string]string{"DB_MAX_CONNS": "20"}))
	httpClient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	body := `{"a":"one\ntwo\nthree\n","b":"one\n2\nthree\n"}`
	var args map[string]any
	if err := json.Unmarshal([]byte(body), &args); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	payment := func(transport string) string { return fmt.Sprintf("test:0xbench%s:n%d", transport, seq.Add(1)) }

	b.Run("http", func(b *testing.B) {
		benchPaid(b, func() (func() error, func()) {
			return func() error {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/x402/diff", strings.NewReader(body))
				if err != nil {
					return err
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("PAYMENT-SIGNATURE", payment("http"))
				resp, err := httpClient.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				out, err := io.ReadAll(resp.Body)
				if err != nil {
					return err
				}
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("status %d: %s", resp.StatusCode, out)
				}
				return nil
			}, func() {}
		})
	})
	b.Run("mcp", func(b *testing.B) {
		benchPaid(b, func() (func() error, func()) {
			client := mcp.NewClient(&mcp.Implementation{Name: "x402d-bench", Version: "1"}, nil)
			session, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: httpClient, DisableStandaloneSSE: true}, nil)
			if err != nil {
				return func() error { return err }, func() {}
			}
			return func() error {
				res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "diff", Arguments: args, Meta: mcp.Meta{"x402/payment": payment("mcp")}})
				if err != nil {
					return err
				}
				if res.IsError {
					return fmt.Errorf("tool error: %v", res.Content)
				}
				return nil
			}, func() { _ = session.Close() }
		})
	})
}

// benchPaid runs b.N paid calls, 32 in flight, each caller made by
// newCaller (and closed after), and reports calls/s and the p50 latency.
func benchPaid(b *testing.B, newCaller func() (call func() error, done func())) {
	const inFlight = 32
	warm, done := newCaller()
	for range 20 {
		if err := warm(); err != nil {
			b.Fatal(err)
		}
	}
	done()
	var mu sync.Mutex
	lat := make([]time.Duration, 0, b.N)
	b.SetParallelism(max(1, inFlight/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		call, done := newCaller()
		defer done()
		mine := make([]time.Duration, 0, 64)
		for pb.Next() {
			start := time.Now()
			if err := call(); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(start))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
}
