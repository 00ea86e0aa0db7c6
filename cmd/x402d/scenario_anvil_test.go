//go:build scenario

package main

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
)

// TestLoadOnAnvil measures paid calls settled in rpc mode on anvil with
// Base's shape (2-second blocks of 30M gas), batched through Multicall3: the
// calls per second at saturation (LOAD_C calls in flight, default 1,000,
// for LOAD_T, default 20 s) and the latency at a steady 150 calls/s, with
// one `x402d serve` and with the compose layout (one api, two workers
// sharing RELAYER_KEY; LOAD_LAYOUT=serve or split runs one of them alone);
// then the gas of a settlement batched and alone. LOAD_ENDPOINTS=lagging
// measures instead the steady 150/s through one RPC endpoint and through
// two, one of them lagging (loadEndpoints).
// Every call must be answered 200. `go tool task load:anvil` runs it; the
// figures are in docs/performance.md.
func TestLoadOnAnvil(t *testing.T) {
	ctx := context.Background()
	c, dur := 1000, 20*time.Second
	if v := os.Getenv("LOAD_C"); v != "" {
		_, err := fmt.Sscan(v, &c)
		require.NoError(t, err)
	}
	if v := os.Getenv("LOAD_T"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		dur = d
	}
	payer := devPayer(t, 5)
	request := []loadgen.Request{{Op: "diff", Body: `{"a":"one\ntwo\n","b":"one\n2\n"}`}}

	run := func(t *testing.T, base string, cfg loadgen.Config) *loadgen.Report {
		t.Helper()
		cfg.BaseURL, cfg.Requests, cfg.Payer, cfg.Retry, cfg.RetryFor = base, request, payer, true, 120*time.Second
		rep, err := loadgen.Run(ctx, cfg)
		require.NoError(t, err)
		t.Logf("%s", rep)
		require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
		return rep
	}
	if mode := os.Getenv("LOAD_ENDPOINTS"); mode != "" {
		require.Equal(t, "lagging", mode, "LOAD_ENDPOINTS: lagging is the one option")
		loadEndpoints(t, dur, run)
		return
	}
	for _, layout := range []string{"serve", "split"} {
		if only := os.Getenv("LOAD_LAYOUT"); only != "" && only != layout {
			continue
		}
		t.Run(layout, func(t *testing.T) {
			node := anviltest.Start(t, nil)
			db := dbtest.Schema(ctx, t)
			env := anvilEnv(t, node, db)
			env["TEST_REAL_PAYMENTS"], env["DB_MAX_CONNS"] = "1", "20"
			var base string
			if layout == "serve" {
				base = startChild(t, "serve", env).addr
			} else {
				base = startChild(t, "api", env).addr
				startChild(t, "worker", env)
				startChild(t, "worker", env)
			}
			first, err := node.Client.BlockNumber(ctx)
			require.NoError(t, err)
			sat := run(t, base, loadgen.Config{Concurrency: c, Duration: dur, Presign: true, MaxCalls: 400 * int(dur/time.Second)})
			logPhases(ctx, t, db.Pool)
			logBlocks(ctx, t, node, first)
			steady := run(t, base, loadgen.Config{Concurrency: 1000, Rate: 150, Duration: dur, Presign: true})
			t.Logf("anvil %s: saturation %d in flight: %.1f paid calls/s (%.1f sustained), p50 %s; steady 150/s: p50 %s p99 %s",
				layout, c, sat.Throughput, sat.Sustained, sat.P50.Round(time.Millisecond), steady.P50.Round(time.Millisecond), steady.P99.Round(time.Millisecond))
			// The chain's pace: 300 calls/s offered, about 90% of what its
			// blocks hold, whether every call is answered and how fast.
			pace := run(t, base, loadgen.Config{Concurrency: 3000, Rate: 300, Duration: dur, Presign: true})
			logPhases(ctx, t, db.Pool)
			t.Logf("anvil %s: steady 300/s: %.1f paid calls/s (%.1f sustained), p50 %s p99 %s",
				layout, pace.Throughput, pace.Sustained, pace.P50.Round(time.Millisecond), pace.P99.Round(time.Millisecond))
			requireNodeClean(t, node)
			var gas, batch float64
			costs := settlementCosts(ctx, t, db.Pool)
			for _, c := range costs {
				gas += float64(c.GasUsed) / float64(len(costs))
				batch += float64(c.Batch) / float64(len(costs))
			}
			t.Logf("anvil %s: gas per batched settlement %.0f (%.1f transfers a batch on average)", layout, gas, batch)
			logBatches(ctx, t, db.Pool)
		})
	}
	t.Run("official", func(t *testing.T) {
		// x402d serve and a seller built from the official packages on
		// the same node in the same run, 256 in flight each.
		node := anviltest.Start(t, nil)
		db := dbtest.Schema(ctx, t)
		env := anvilEnv(t, node, db)
		env["TEST_REAL_PAYMENTS"], env["DB_MAX_CONNS"] = "1", "20"
		ours := run(t, startChild(t, "serve", env).addr, loadgen.Config{Concurrency: 256, Duration: dur, Presign: true, MaxCalls: 400 * int(dur/time.Second)})
		theirPayer := devPayer(t, 6)
		theirs, err := loadgen.Run(ctx, loadgen.Config{BaseURL: startOfficialSeller(t, node.URL), Requests: request, Payer: theirPayer,
			Concurrency: 256, Duration: dur, Presign: true, MaxCalls: 400 * int(dur/time.Second)})
		require.NoError(t, err)
		t.Logf("official seller: %s", theirs)
		require.Positive(t, theirs.Statuses[http.StatusOK], "the official seller was paid")
		t.Logf("anvil, 256 in flight: x402d serve %.1f paid calls/s (%.1f sustained), p50 %s; official seller %.1f (%.1f sustained), p50 %s",
			ours.Throughput, ours.Sustained, ours.P50.Round(time.Millisecond), theirs.Throughput, theirs.Sustained, theirs.P50.Round(time.Millisecond))
	})
	t.Run("single", func(t *testing.T) {
		node := anviltest.Start(t, nil)
		db := dbtest.Schema(ctx, t)
		env := anvilEnv(t, node, db)
		env["TEST_REAL_PAYMENTS"], env["SETTLEMENT_BATCH"] = "1", "off"
		base := startChild(t, "serve", env).addr
		run(t, base, loadgen.Config{Concurrency: 20, Duration: 5 * time.Second})
		// Read as the store reads them (every form of the event).
		costs := settlementCosts(ctx, t, db.Pool)
		require.NotEmpty(t, costs)
		var gas float64
		for _, c := range costs {
			gas += float64(c.GasUsed) / float64(len(costs))
		}
		t.Logf("anvil: gas per settlement alone %.0f", gas)
	})
}

// loadEndpoints measures the latency of `x402d serve` at a steady 150
// paid calls/s for dur with one RPC endpoint, then with two (RPC_URL_<CHAIN>
// listing both), one of them three blocks behind the node: each a proxy on
// loopback in front of the one anvil, so that both runs pay the same hop;
// each after 5 s of the same load to warm up. The second's p50 should be
// within a tenth of the first's.
func loadEndpoints(t *testing.T, dur time.Duration, run func(t *testing.T, base string, cfg loadgen.Config) *loadgen.Report) {
	ctx := context.Background()
	var steady []*loadgen.Report
	for _, layout := range []string{"one", "lagging"} {
		t.Run(layout, func(t *testing.T) {
			node := anviltest.Start(t, nil)
			db := dbtest.Schema(ctx, t)
			env := anvilEnv(t, node, db)
			env["TEST_REAL_PAYMENTS"], env["DB_MAX_CONNS"] = "1", "20"
			urls := []string{anviltest.NewProxy(t, node.URL).URL}
			if layout == "lagging" {
				lagging := anviltest.NewProxy(t, node.URL)
				lagging.Lag.Store(3)
				urls = append([]string{lagging.URL}, urls...)
			}
			env["RPC_URL_EIP155_8453"] = strings.Join(urls, ",")
			base := startChild(t, "serve", env).addr
			// Warmed up first: the first calls' wait for a block and the
			// process's start are not what is compared.
			run(t, base, loadgen.Config{Concurrency: 1000, Rate: 150, Duration: 5 * time.Second, Presign: true})
			rep := run(t, base, loadgen.Config{Concurrency: 1000, Rate: 150, Duration: dur, Presign: true})
			t.Logf("anvil, endpoints %s: steady 150/s: %.1f paid calls/s, p50 %s p99 %s",
				layout, rep.Throughput, rep.P50.Round(time.Millisecond), rep.P99.Round(time.Millisecond))
			requireNodeClean(t, node)
			steady = append(steady, rep)
		})
	}
	if len(steady) == 2 {
		t.Logf("anvil, steady 150/s: p50 with two endpoints, one lagging, %s against %s with one (%+.1f%%)",
			steady[1].P50.Round(time.Millisecond), steady[0].P50.Round(time.Millisecond),
			100*(steady[1].P50.Seconds()/steady[0].P50.Seconds()-1))
	}
}

// logBlocks logs how full the node's blocks after first were: the share
// of its gas limit each used, and the transactions it held. A block well
// under full while calls wait is a gap in the relayer's nonces, or a
// batcher that sent too little.
func logBlocks(ctx context.Context, t *testing.T, node *anviltest.Node, first uint64) {
	t.Helper()
	last, err := node.Client.BlockNumber(ctx)
	require.NoError(t, err)
	var line []string
	for n := first + 1; n <= last; n++ {
		h, err := node.Client.HeaderByNumber(ctx, new(big.Int).SetUint64(n))
		require.NoError(t, err)
		txs, err := node.Client.TransactionCount(ctx, h.Hash())
		require.NoError(t, err)
		line = append(line, fmt.Sprintf("%d%%/%d", h.GasUsed*100/h.GasLimit, txs))
	}
	t.Logf("blocks %d-%d, share of the gas limit used/transactions: %s", first+1, last, strings.Join(line, " "))
}

// logPhases logs where the paid calls' time went, from their events: the
// median time from one event of a call to the next.
func logPhases(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	rows, err := pool.Query(ctx, `WITH e AS (
		SELECT stream, type, created_at,
			lag(type) OVER w AS prev, created_at - lag(created_at) OVER w AS took
		FROM events WHERE stream LIKE 'call/%' WINDOW w AS (PARTITION BY stream ORDER BY id))
		SELECT prev || ' → ' || type, count(*),
			percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM took)),
			percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM took))
		FROM e WHERE prev IS NOT NULL GROUP BY 1 ORDER BY 3 DESC`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var step string
		var n int
		var p50, p90 float64
		require.NoError(t, rows.Scan(&step, &n, &p50, &p90))
		t.Logf("phase %s: %d calls, p50 %.3fs p90 %.3fs", step, n, p50, p90)
	}
	require.NoError(t, rows.Err())
}

// logBatches logs the gas of the settlements by the size of their batch.
func logBatches(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	type group struct {
		lo, hi, n int
		gas       uint64
	}
	bounds := []int{2, 5, 10, 20, 40, 80}
	groups := make([]group, len(bounds)+1)
	for _, c := range settlementCosts(ctx, t, pool) {
		g := &groups[sort.SearchInts(bounds, c.Batch+1)]
		if g.n == 0 || c.Batch < g.lo {
			g.lo = c.Batch
		}
		g.hi = max(g.hi, c.Batch)
		g.n++
		g.gas += c.GasUsed
	}
	for _, g := range groups {
		if g.n > 0 {
			t.Logf("batches of %d-%d: %d settlements, %d gas each", g.lo, g.hi, g.n, g.gas/uint64(g.n))
		}
	}
}
