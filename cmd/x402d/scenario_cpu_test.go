//go:build scenario

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
)

// TestLoadCPUOnAnvil measures the CPU a paid call costs each process on
// a chain that is not the limit: anvil with Circle's USDC, 2-second blocks
// of LOAD_GAS gas (default 150M, Base's order), `x402d serve` settling in
// rpc mode with batching, LOAD_CALLS regex calls (default 8,000) with
// LOAD_C in flight (default 2,000), each a real EIP-3009 payment signed
// before the run. It prints, for x402d, Postgres (the backends of the
// run's database), anvil and the client (this process: the load
// generator), the CPU seconds used over the run (scripts/cputicks.sh)
// divided by the paid calls. Every call must be answered 200. `go tool
// task load:cpu` runs it; the figures are in docs/performance.md.
func TestLoadCPUOnAnvil(t *testing.T) {
	ctx := context.Background()
	gas, calls, c := uint64(150_000_000), 8000, 2000
	for name, v := range map[string]any{"LOAD_GAS": &gas, "LOAD_CALLS": &calls, "LOAD_C": &c} {
		if s := os.Getenv(name); s != "" {
			_, err := fmt.Sscan(s, v)
			require.NoError(t, err, name)
		}
	}
	node := anviltest.Start(t, &anviltest.Config{GasLimit: gas})
	db := dbtest.Database(ctx, t)
	env := anvilEnv(t, node, db)
	env["TEST_REAL_PAYMENTS"], env["DB_MAX_CONNS"] = "1", "20"
	if addr := os.Getenv("LOAD_PPROF_ADDR"); addr != "" {
		env["PPROF_ADDR"] = addr
	}
	serve := startChild(t, "serve", env)
	payer := devPayer(t, 5)
	request := []loadgen.Request{{Op: "regex", Body: `{"pattern":"o+","text":"one two four\nfoo boo"}`}}
	run := func(cfg loadgen.Config) *loadgen.Report {
		cfg.BaseURL, cfg.Requests, cfg.Payer, cfg.Presign, cfg.Retry, cfg.RetryFor = serve.addr, request, payer, true, true, 120*time.Second
		rep, err := loadgen.Run(ctx, cfg)
		require.NoError(t, err)
		require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
		return rep
	}
	// A warm-up: the pool's connections open, the gas of a transfer is
	// learnt.
	run(loadgen.Config{Concurrency: 50, Duration: time.Minute, MaxCalls: 200})

	meter := startCPUMeter(ctx, t, db.Pool, map[string][]int{"x402d": {serve.cmd.Process.Pid}, "anvil": {node.PID()}, "client": {os.Getpid()}})
	rep := run(loadgen.Config{Concurrency: c, Duration: time.Hour, Rate: 0, MaxCalls: calls})
	paid := rep.Statuses[http.StatusOK]
	cpu := meter.perCall(ctx, t, paid)
	t.Logf("%s", rep)
	t.Logf("anvil at %dM gas a 2-second block, %d regex calls %d in flight: %.1f paid calls/s (%.1f sustained), p50 %s p99 %s",
		gas/1_000_000, calls, c, rep.Throughput, rep.Sustained, rep.P50.Round(time.Millisecond), rep.P99.Round(time.Millisecond))
	t.Logf("CPU a paid call over %d paid calls: %s", paid, cpu)
	logBatches(ctx, t, db.Pool)
}

// cpuMeter measures the CPU time processes and the Postgres backends of a
// database use from its start.
type cpuMeter struct {
	pool   *pgxpool.Pool
	names  []string
	procs  map[string][]int
	before map[string]map[int]int64
}

// startCPUMeter starts measuring the CPU of procs (a name's process ids)
// and, as "postgres", of the backends connected to pool's database.
func startCPUMeter(ctx context.Context, t *testing.T, pool *pgxpool.Pool, procs map[string][]int) *cpuMeter {
	t.Helper()
	m := &cpuMeter{pool: pool, procs: procs, before: map[string]map[int]int64{}}
	for name, pids := range procs {
		m.names = append(m.names, name)
		m.before[name] = cpuTicks(t, pids...)
	}
	slices.Sort(m.names)
	m.names = append(m.names, "postgres")
	m.before["postgres"] = cpuTicks(t, dbBackends(ctx, t, pool)...)
	return m
}

// perCall returns the CPU each used since the start divided by calls, in
// ms, with the seconds used, as one line.
func (m *cpuMeter) perCall(ctx context.Context, t *testing.T, calls int) string {
	t.Helper()
	// The backends that served the run, those that were there before and
	// those opened since.
	after := map[string]map[int]int64{"postgres": cpuTicks(t, dbBackends(ctx, t, m.pool)...)}
	for name, pids := range m.procs {
		after[name] = cpuTicks(t, pids...)
	}
	hz := clockTicks(t)
	var line []string
	var total float64
	for _, name := range m.names {
		var ticks int64
		for pid, n := range after[name] {
			ticks += n - m.before[name][pid]
		}
		secs := float64(ticks) / hz
		total += secs
		line = append(line, fmt.Sprintf("%s %.3f ms (%.1f s)", name, 1000*secs/float64(calls), secs))
	}
	line = append(line, fmt.Sprintf("all %.3f ms", 1000*total/float64(calls)))
	return strings.Join(line, ", ")
}

// dbBackends returns the process ids of the Postgres backends connected to
// the database of pool, but for the one asking.
func dbBackends(ctx context.Context, t *testing.T, pool *pgxpool.Pool) []int {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	require.NoError(t, err)
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		require.NoError(t, rows.Scan(&pid))
		pids = append(pids, pid)
	}
	require.NoError(t, rows.Err())
	return pids
}

// cpuTicks returns the user and system clock ticks used by each of pids
// still running, as scripts/cputicks.sh reads them.
func cpuTicks(t *testing.T, pids ...int) map[int]int64 {
	t.Helper()
	args := []string{filepath.Join("..", "..", "scripts", "cputicks.sh")}
	for _, p := range pids {
		args = append(args, strconv.Itoa(p))
	}
	out, err := exec.Command("bash", args...).Output()
	require.NoError(t, err)
	ticks := map[int]int64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var pid int
		var n int64
		_, err := fmt.Sscan(sc.Text(), &pid, &n)
		require.NoError(t, err, sc.Text())
		ticks[pid] = n
	}
	return ticks
}

// clockTicks returns the clock ticks a second (getconf CLK_TCK).
func clockTicks(t *testing.T) float64 {
	t.Helper()
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	require.NoError(t, err)
	hz, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	require.NoError(t, err)
	return hz
}
