//go:build scenario

package main

import (
	"context"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
)

// TestLoadFloodOnAnvil measures what a flood of payments signed by empty
// wallets costs honest paid load: `x402d serve` settling on anvil (Base's
// 2-second blocks) takes a steady 100 paid calls/s for LOAD_T (default
// 10 s) alone, then the same beside 800 payments/s signed by fresh empty
// wallets from another client address (127.0.0.2). Every honest call must
// be answered 200, the honest p50 beside the flood within 20% of the
// quiet run's, and the RPC calls the flood causes at most one per 100
// refused payments (x402d_rpc_calls_total). `go tool task load:flood` runs
// it; the figures are in docs/performance.md.
func TestLoadFloodOnAnvil(t *testing.T) {
	ctx := context.Background()
	dur := 10 * time.Second
	if v := os.Getenv("LOAD_T"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		dur = d
	}
	node := anviltest.Start(t, nil)
	db := dbtest.Schema(ctx, t)
	env := anvilEnv(t, node, db)
	env["TEST_REAL_PAYMENTS"], env["DB_MAX_CONNS"] = "1", "20"
	base := startChild(t, "serve", env).addr
	request := []loadgen.Request{{Op: "diff", Body: `{"a":"one\ntwo\n","b":"one\n2\n"}`}}
	payer := devPayer(t, 5)
	honest := func() *loadgen.Report {
		rep, err := loadgen.Run(ctx, loadgen.Config{BaseURL: base, Requests: request, Payer: payer,
			Concurrency: 1000, Rate: 100, Duration: dur, Presign: true, Retry: true, RetryFor: 120 * time.Second})
		require.NoError(t, err)
		require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
		return rep
	}

	quiet := honest()
	t.Logf("quiet: %s", quiet)

	rpc := func(labels ...string) float64 { return scrapeSum(ctx, t, base, "x402d_rpc_calls_total", labels...) }
	verifyBefore, verifiedBefore := rpc(`purpose="verify"`), scrapeSum(ctx, t, base, "x402d_payments_verified_total")
	settleBefore := rpc(`purpose="settle"`)
	var wg sync.WaitGroup
	var beside, flood *loadgen.Report
	wg.Go(func() { beside = honest() })
	wg.Go(func() {
		var err error
		flood, err = loadgen.Run(ctx, loadgen.Config{BaseURL: base, Requests: request, Payer: emptyWallets{network: "eip155:8453"},
			Concurrency: 256, Rate: 800, Duration: dur, Presign: true, Client: clientFrom("127.0.0.2")})
		require.NoError(t, err)
	})
	wg.Wait()
	t.Logf("beside the flood: %s", beside)
	t.Logf("flood: %s", flood)

	refused := flood.Statuses[http.StatusPaymentRequired] + flood.Statuses[http.StatusTooManyRequests]
	require.Equal(t, flood.Calls, refused, flood.String())
	verified := scrapeSum(ctx, t, base, "x402d_payments_verified_total") - verifiedBefore
	var resent int
	for _, o := range beside.Outcomes {
		resent += o.Tries - 1
	}
	// Each honest verification is one simulation; a resent one at most a
	// simulation and a read of its authorization's state.
	floodRPC := rpc(`purpose="verify"`) - verifyBefore - verified - 2*float64(resent)
	t.Logf("anvil flood: honest 100/s p50 %s quiet, %s beside %d payments from empty wallets (%.0f/s; %d answered 402, %d 429): p50 %+.1f%%; RPC calls caused by the flood %.0f (%.4f a refused payment); settlement's RPC calls %.0f",
		quiet.P50.Round(time.Millisecond), beside.P50.Round(time.Millisecond), flood.Calls, float64(flood.Calls)/dur.Seconds(),
		flood.Statuses[http.StatusPaymentRequired], flood.Statuses[http.StatusTooManyRequests],
		100*(beside.P50.Seconds()/quiet.P50.Seconds()-1), floodRPC, floodRPC/float64(refused), rpc(`purpose="settle"`)-settleBefore)
	require.LessOrEqual(t, floodRPC, float64(refused)/100, "RPC calls caused by the flood")
	require.LessOrEqual(t, beside.P50.Seconds(), 1.2*quiet.P50.Seconds(), "honest p50 beside the flood within 20%% of the quiet run's")
	requireNodeClean(t, node)
}
