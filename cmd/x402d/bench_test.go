package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

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
