//go:build scenario

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
	"github.com/x402d/x402d/x402/devchain"
)

// TestLoadSoak checks that memory stays flat under sustained paid load:
// SOAK_WARM paid calls (default 35,000) warm the processes up, their live
// heaps and resident sizes are read, SOAK_CALLS more (default 20,000) are
// made at a steady SOAK_RATE a second (default 200), and they are read
// again, with the bytes the devchain keeps on disk (DEVCHAIN_DATA_DIR) and
// the relayer's transactions kept in the database. The service's live heap,
// and the devchain's, must be within 30% of where they were.
//
// The warm-up fills the caches bounded by a count rather than by bytes, so
// that the second reading measures what is kept per call and not caches
// still filling: the largest, go-ethereum's cache of the hashes of the
// last 32,768 mined transactions, needs as many settlement transactions (at
// most one a paid call; at the rates this machine sustains a batch carries
// about one payment), and its caches of the last 256 blocks and the
// freezer's buffers fill sooner. Each reading is taken when the service is idle (every call
// answered and settled, no settlement awaiting finality, no job waiting or
// running) and after two forced collections (the second empties what
// sync.Pool keeps through the first).
//
// Layouts (SOAK_LAYOUT, default both): rpc, `x402d serve` settling on an
// `x402d devchain` process; embedded, `x402d serve` with its devchain in
// process (the service's heap then holds the chain's). `go tool task
// load:soak` runs it; the figures are in docs/performance.md.
func TestLoadSoak(t *testing.T) {
	warm, calls := soakEnv(t, "SOAK_WARM", 35_000), soakEnv(t, "SOAK_CALLS", 20_000)
	rate := float64(soakEnv(t, "SOAK_RATE", 200))
	for _, layout := range []string{"rpc", "embedded"} {
		if only := os.Getenv("SOAK_LAYOUT"); only != "" && only != layout {
			continue
		}
		t.Run(layout, func(t *testing.T) {
			ctx := context.Background()
			db := dbtest.Schema(ctx, t)
			rpc, svcProf := freeAddr(t), freeAddr(t)
			env := map[string]string{
				"DATABASE_URL": db.URL, "LISTEN_ADDR": "127.0.0.1:0", "DB_MAX_CONNS": "20",
				"TEST_REAL_PAYMENTS": "1", "PPROF_ADDR": svcProf, "DEVCHAIN_RPC_ADDR": rpc,
				"DEVCHAIN_DATA_DIR": t.TempDir(),
			}
			var chain *child
			chainProf := svcProf
			if layout == "rpc" {
				chainProf = freeAddr(t)
				chain = startChild(t, "devchain", map[string]string{"DEVCHAIN_RPC_ADDR": rpc, "TEST_REAL_PAYMENTS": "1", "PPROF_ADDR": chainProf,
					"DEVCHAIN_DATA_DIR": env["DEVCHAIN_DATA_DIR"]})
				relayer, err := devchain.DeriveKey(devchain.Mnemonic, devchain.RelayerAccount)
				require.NoError(t, err)
				env["SETTLEMENT"], env["RPC_URL_EIP155_8453"] = "rpc", "http://"+rpc
				env["RELAYER_KEY"] = common.Bytes2Hex(crypto.FromECDSA(relayer))
				env["PAY_TO_EVM"] = devAddress(t, devchain.PayToAccount).Hex()
				// Base's default finality, safe: the devchain tags its
				// head safe, and the service follows its settlements to it.
			}
			svc := startChild(t, "serve", env)
			payer := devPayer(t, 5)
			// The generator's connections are closed before each reading:
			// the service's buffers of a thousand open connections are not
			// state kept per call.
			client := &http.Client{Timeout: 70 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1000, MaxConnsPerHost: 1000}}
			run := func(n int) *loadgen.Report {
				t.Helper()
				rep, err := loadgen.Run(ctx, loadgen.Config{
					BaseURL: svc.addr, Requests: []loadgen.Request{{Op: "diff", Body: `{"a":"one\ntwo\n","b":"one\n2\n"}`}},
					Payer: payer, Concurrency: 1000, Rate: rate, MaxCalls: n, Duration: 10 * time.Minute,
					Retry: true, RetryFor: 120 * time.Second, Client: client,
				})
				client.CloseIdleConnections()
				require.NoError(t, err)
				t.Logf("%s", rep)
				require.Equal(t, n, rep.Calls, "the run ended before its calls")
				require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
				return rep
			}
			read := func(name string) (svcHeap, chainHeap, svcRSS, rss uint64) {
				t.Helper()
				waitIdle(ctx, t, db.Pool)
				svcHeap, svcRSS = liveHeap(t, svcProf), residentSize(t, svc.cmd.Process.Pid)
				saveHeapProfile(t, svcProf, layout+"-serve-"+name)
				chainHeap, rss = svcHeap, svcRSS
				if chain != nil {
					chainHeap, rss = liveHeap(t, chainProf), residentSize(t, chain.cmd.Process.Pid)
					saveHeapProfile(t, chainProf, layout+"-devchain-"+name)
				}
				var nonces int
				require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM relayer_txs").Scan(&nonces))
				t.Logf("%s: relayer transactions kept in the database: %d", name, nonces)
				t.Logf("%s: service live heap %.1f MB, resident %.1f MB; devchain live heap %.1f MB, resident %.1f MB, on disk %.1f MB",
					name, mb(svcHeap), mb(svcRSS), mb(chainHeap), mb(rss), mb(dirSize(t, env["DEVCHAIN_DATA_DIR"])))
				return svcHeap, chainHeap, svcRSS, rss
			}
			run(warm)
			heap0, chainHeap0, svcRSS0, rss0 := read("warm")
			rep := run(calls)
			heap1, chainHeap1, svcRSS1, rss1 := read("soaked")
			t.Logf("soak %s: %d paid calls at %.0f/s offered (%.1f answered/s, p50 %s, p99 %s): service live heap %.1f → %.1f MB (%+.0f bytes a call), resident %.1f → %.1f MB; devchain live heap %.1f → %.1f MB, resident %.1f → %.1f MB",
				layout, calls, rate, rep.Throughput, rep.P50.Round(time.Millisecond), rep.P99.Round(time.Millisecond),
				mb(heap0), mb(heap1), (float64(heap1)-float64(heap0))/float64(calls), mb(svcRSS0), mb(svcRSS1),
				mb(chainHeap0), mb(chainHeap1), mb(rss0), mb(rss1))
			require.LessOrEqual(t, float64(heap1), 1.3*float64(heap0), "the service's live heap grew by more than 30%")
			if chain != nil {
				require.LessOrEqual(t, float64(chainHeap1), 1.3*float64(chainHeap0), "the devchain's live heap grew by more than 30%")
			}
		})
	}
}

// waitIdle returns once the service is idle: every call answered and
// settled, no settlement awaiting finality, no job waiting or running (a
// job scheduled later, River's periodic ones, is not waited for), then
// waits a second more for what the last ones left to end.
func waitIdle(ctx context.Context, t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	const query = `SELECT
		(SELECT count(*) FROM calls WHERE state IN ('queued', 'running', 'settling')),
		(SELECT count(*) FROM settlement_watch),
		(SELECT count(*) FROM river_job WHERE state IN ('available', 'running', 'retryable'))`
	// Three tables written by several parts, none notifying: polled.
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		var calls, watched, jobs int
		require.NoError(t, db.QueryRow(ctx, query).Scan(&calls, &watched, &jobs))
		if calls == 0 && watched == 0 && jobs == 0 {
			t.Logf("idle after %s", time.Since(start).Round(time.Second))
			break
		}
		select {
		case <-tick.C:
		case <-wctx.Done():
			require.FailNowf(t, "not idle", "%d calls unsettled, %d settlements awaiting finality, %d jobs waiting or running after %s",
				calls, watched, jobs, time.Since(start).Round(time.Second))
		}
	}
	time.Sleep(time.Second)
}

// saveHeapProfile writes the heap profile of the process serving pprof at
// addr to SOAK_PROFILES/name.pb.gz when SOAK_PROFILES names a directory
// (compare two with go tool pprof -base).
func saveHeapProfile(t *testing.T, addr, name string) {
	t.Helper()
	dir := os.Getenv("SOAK_PROFILES")
	if dir == "" {
		return
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?gc=1")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pb.gz"), b, 0o644))
}

// dirSize returns the bytes of the files under dir.
func dirSize(t *testing.T, dir string) uint64 {
	t.Helper()
	var n uint64
	require.NoError(t, filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += uint64(info.Size())
		}
		return err
	}))
	return n
}

// soakEnv reads a whole number from the environment, def when unset.
func soakEnv(t *testing.T, key string, def int) int {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, key)
	return n
}

// liveHeap returns the live heap of the process serving pprof at addr: the
// heap profile's HeapAlloc right after the second of two forced collections
// (what sync.Pool keeps survives one).
func liveHeap(t *testing.T, addr string) uint64 {
	t.Helper()
	heapAfterGC(t, addr)
	return heapAfterGC(t, addr)
}

// heapAfterGC returns the heap profile's HeapAlloc of the process serving
// pprof at addr right after the forced collection it asks for.
func heapAfterGC(t *testing.T, addr string) uint64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?gc=1&debug=1")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			return n
		}
	}
	require.NoError(t, sc.Err())
	t.Fatal("no HeapAlloc in the heap profile")
	return 0
}

// residentSize returns the resident set size of process pid (VmRSS).
func residentSize(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }
