//go:build scenario

package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm/channel"
)

// The development accounts of the channel scenarios: the receiver
// authorizer x402d signs claims with, the account that funds the payers
// (each payer is an account of the test mnemonic from index 100 on, which
// holds no ETH: deposits are gasless for payers), and the official seller's
// facilitator sender and receiver authorizer (official_batch_seller.mjs's
// defaults).
const (
	channelAuthorizerAccount = 4
	channelFunderAccount     = 1
)

// TestLoadChannelsOnAnvil measures voucher-paid calls (x402's
// batch-settlement scheme) on anvil with Base's shape (2-second blocks of
// 30M gas, Circle's USDC, the channel and deposit-collector contracts at
// their canonical addresses), all in one run, each load LOAD_T long
// (default 10 s):
//
//	(a) exact paid calls/s on `x402d serve` (1,000 in flight, signed
//	    before the run), the chain's ceiling;
//	(e) the official batch-settlement seller's paid calls/s
//	    (compat/official_batch_seller.mjs, @x402/express with the official
//	    server and facilitator in-process, on the same node), 100 payers'
//	    channels paid by the official client (compat/batch_load.mjs), one
//	    call in flight each;
//	(b) voucher-paid calls/s on x402d from 100 payers' channels, the same
//	    client and shape;
//	(c) p50/p99 of vouchers at a steady 150/s on x402d (100 other payers);
//	(d) on a node and service of their own, 100 channels each making 100
//	    calls: the gas of the claim and settle transactions (claimed on
//	    time, CHANNEL_CLAIM_INTERVAL = LOAD_CLAIM_INTERVAL, default 30 s,
//	    the amount threshold out of reach) over the paid calls, once every channel's claimed total on chain equals the
//	    charges its client was answered and all is settled to payTo.
//
// Every payer's deposit must succeed on x402d and each voucher be
// answered 200. The goals (issue 44): (b) ≥ 3×(a), (c) p50 ≤ 50 ms, (d) ≤
// 1,000 gas a call, (b) ≥ 5×(e); they are logged, not required (the
// figures move with the machine's load). `go tool task load:channels` runs
// it; the figures are in docs/performance.md.
func TestLoadChannelsOnAnvil(t *testing.T) {
	ctx := context.Background()
	dur := 10 * time.Second
	if v := os.Getenv("LOAD_T"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		dur = d
	}
	secs := strconv.Itoa(int(dur / time.Second))
	// Each payer's payments made before a run: perSecond of them a second
	// of it (a payer that runs out pays live).
	presign := func(perSecond int) string { return "PRESIGN=" + strconv.Itoa(perSecond*int(dur/time.Second)) }
	var exact *loadgen.Report
	var official, vouchers, steady *batchReport

	t.Run("throughput", func(t *testing.T) {
		node := anviltest.Start(t, nil)
		db := dbtest.Database(ctx, t) // its own: the CPU of its backends is the run's
		env := channelEnv(t, node, db)
		if os.Getenv("LOAD_PG_LOG") != "" {
			var name string
			require.NoError(t, db.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&name))
			_, err := db.Pool.Exec(ctx, "ALTER DATABASE "+name+" SET log_min_duration_statement = 0")
			require.NoError(t, err)
			t.Logf("statements logged for database %s", name)
		}
		if addr := os.Getenv("LOAD_PPROF_ADDR"); addr != "" {
			env["PPROF_ADDR"] = addr
		}
		serve := startChild(t, "serve", env)
		base := serve.addr

		// (a) exact, as TestLoadOnAnvil measures it.
		t.Logf("machine load before (a): %s", loadAverage(t))
		var err error
		exact, err = loadgen.Run(ctx, loadgen.Config{
			BaseURL: base, Requests: []loadgen.Request{{Op: "diff", Body: diffBody}}, Payer: devPayer(t, 5),
			Concurrency: 1000, Duration: dur, Presign: true, MaxCalls: 400 * int(dur/time.Second), Retry: true, RetryFor: 120 * time.Second,
		})
		require.NoError(t, err)
		t.Logf("(a) exact on x402d: %s", exact)
		require.Equal(t, exact.Calls, exact.Statuses[http.StatusOK], exact.String())
		requireNodeClean(t, node)

		// (e) the official seller on the same node, the same client.
		t.Logf("machine load before (e): %s", loadAverage(t))
		port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
		sellerCmd := runCompatServer(t, "official_batch_seller.mjs", port, "RPC_URL="+node.URL)
		t.Cleanup(func() { _ = sellerCmd.Process.Kill(); _ = sellerCmd.Wait() })
		official = measureBatchLoad(ctx, t, db, map[string][]int{"seller": {sellerCmd.Process.Pid}, "anvil": {node.PID()}}, "",
			"http://127.0.0.1:"+port, node.URL, "FIRST_PAYER=400", "DURATION="+secs, presign(3))
		t.Logf("(e) official batch-settlement seller: %s", official)
		require.Positive(t, official.OK, "the official seller was paid")

		// (b) and (c) on x402d.
		t.Logf("machine load before (b): %s", loadAverage(t))
		vouchers = measureBatchLoad(ctx, t, db, map[string][]int{"x402d": {serve.cmd.Process.Pid}, "anvil": {node.PID()}}, os.Getenv("LOAD_PPROF_ADDR"),
			base, node.URL, "FIRST_PAYER=100", "DURATION="+secs, presign(15))
		t.Logf("(b) vouchers on x402d: %s", vouchers)
		vouchers.requireAllPaid(t)
		vouchers.requireNoServerError(t)
		t.Logf("machine load before (c): %s", loadAverage(t))
		steady = runBatchLoad(t, base, node.URL, "FIRST_PAYER=200", "RATE=150", "DURATION="+secs, presign(2))
		t.Logf("(c) vouchers on x402d at 150/s: %s", steady)
		steady.requireAllPaid(t)
		steady.requireNoServerError(t)
		requireChargedAsAnswered(ctx, t, db, vouchers, steady)
		t.Logf("machine load after (c): %s", loadAverage(t))
	})

	var gasPerCall float64
	t.Run("gas", func(t *testing.T) {
		// (d) 100 channels of 100 calls each, claimed and settled.
		node := anviltest.Start(t, nil)
		db := dbtest.Schema(ctx, t)
		env := channelEnv(t, node, db)
		// Claimed on time only (the amount threshold above the run's
		// 100 USDC): each channel's calls in one claim, or two if the run
		// outlasts the interval.
		env["CHANNEL_CLAIM_INTERVAL"], env["CHANNEL_CLAIM_MIN_AMOUNT"] = "30s", "1000000000"
		if v := os.Getenv("LOAD_CLAIM_INTERVAL"); v != "" {
			env["CHANNEL_CLAIM_INTERVAL"] = v
		}
		base := startChild(t, "serve", env).addr
		first, err := node.Client.BlockNumber(ctx)
		require.NoError(t, err)
		rep := runBatchLoad(t, base, node.URL, "FIRST_PAYER=500", "CALLS_PER_PAYER=100", "PRESIGN=99")
		t.Logf("(d) 100 channels of 100 calls: %s", rep)
		rep.requireAllPaid(t)
		rep.requireNoServerError(t)
		calls := 0
		for _, c := range rep.Channels {
			require.Equal(t, 100, c.Calls, "channel %s", c.ChannelID)
			calls += c.Calls
		}
		requireChargedAsAnswered(ctx, t, db, rep)
		awaitClaimedAsAnswered(ctx, t, node, rep, 3*time.Minute)
		g := channelGas(ctx, t, node, first)
		gasPerCall = float64(g.claims+g.settles) / float64(calls)
		t.Logf("(d) %d paid calls: %d claim transactions (%d gas), %d settle transactions (%d gas): %.0f gas a call; deposits %d (%d gas, %.0f a call besides)",
			calls, g.claimTxs, g.claims, g.settleTxs, g.settles, gasPerCall, g.depositTxs, g.deposits, float64(g.deposits)/float64(calls))
	})

	if exact != nil && official != nil && vouchers != nil && steady != nil {
		t.Logf("anvil, 2-second blocks of 30M gas, %s each: (a) exact %.1f paid calls/s (%.1f sustained); (b) vouchers from 100 channels %.1f (%.1f sustained), %.1f× exact (goal ≥ 3×); "+
			"(c) vouchers at a steady 150/s: p50 %.1f ms p99 %.1f ms (goal p50 ≤ 50 ms); (d) %.0f gas of claims and settlement a call (goal ≤ 1,000); "+
			"(e) the official batch-settlement seller %.1f (%.1f sustained), x402d %.1f× it (goal ≥ 5×)",
			dur, exact.Throughput, exact.Sustained, vouchers.Throughput, vouchers.Sustained, vouchers.Sustained/exact.Sustained,
			steady.P50, steady.P99, gasPerCall, official.Throughput, official.Sustained, vouchers.Sustained/official.Sustained)
	}
}

// TestLoadChannelsServeKilled pays vouchers of 20 payers' channels with the
// official client (compat/batch_load.mjs, 20 in flight for 15 s once each
// payer's deposit is made; a call whose answer was lost is sent again with
// the same voucher) while `x402d serve` is SIGKILLed 2.5 s after each of
// its starts for 10 s and started again on the same address:
// every call is answered 200 in the end, x402d records for each channel the
// sum of the charges its client was answered, and once the claim job ran
// each channel's claimed total on chain equals it: no voucher lost, none
// charged twice. `go tool task load:channels` runs it.
func TestLoadChannelsServeKilled(t *testing.T) {
	ctx := context.Background()
	node := anviltest.Start(t, nil)
	db := dbtest.Schema(ctx, t)
	env := channelEnv(t, node, db)
	env["LISTEN_ADDR"], env["CHANNEL_CLAIM_INTERVAL"] = freeAddr(t), "5s"
	env["CALL_WAIT"], env["JOB_TIMEOUT"], env["JOB_RESCUE_AFTER"], env["RIVER_POLL_INTERVAL"] = "2s", "3s", "4s", "100ms"
	serve := startChild(t, "serve", env)
	base := serve.addr

	load := startBatchLoad(t, base, node.URL, "PAYERS=20", "FIRST_PAYER=600", "DURATION=15", "RETRY_FOR=120", "PRESIGN=150")
	<-load.loading
	// Killed 2.5 s after each start, while the load runs.
	kills := 0
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); kills++ {
		<-time.After(2500 * time.Millisecond)
		serve.kill()
		serve = startChild(t, "serve", env)
	}
	rep := load.wait(t)
	t.Logf("serve killed %d times under voucher load: %s", kills, rep)
	rep.requireAllPaid(t)
	requireChargedAsAnswered(ctx, t, db, rep)
	awaitClaimedAsAnswered(ctx, t, node, rep, 2*time.Minute)
}

// diffBody is the request of the diff calls the scenarios pay.
const diffBody = `{"a":"one\ntwo\n","b":"one\n2\n"}`

// channelEnv is anvilEnv with real payments, the receiver authorizer of
// batch-settlement channels and a pool for load.
func channelEnv(t *testing.T, node *anviltest.Node, db *dbtest.DB) map[string]string {
	t.Helper()
	env := anvilEnv(t, node, db)
	key, err := devchain.DeriveKey(devchain.Mnemonic, channelAuthorizerAccount)
	require.NoError(t, err)
	env["TEST_REAL_PAYMENTS"], env["DB_MAX_CONNS"] = "1", "20"
	env["RECEIVER_AUTHORIZER_KEY"] = common.Bytes2Hex(crypto.FromECDSA(key))
	return env
}

// batchReport is what compat/batch_load.mjs prints.
type batchReport struct {
	Payers   int `json:"payers"`
	Deposits struct {
		OK      int            `json:"ok"`
		Failed  int            `json:"failed"`
		Seconds float64        `json:"seconds"`
		Errors  map[string]int `json:"errors"`
	} `json:"deposits"`
	Mode       string         `json:"mode"`
	Calls      int            `json:"calls"`
	OK         int            `json:"ok"`
	Failed     int            `json:"failed"`
	Seconds    float64        `json:"seconds"`
	Throughput float64        `json:"throughput"`
	Sustained  float64        `json:"sustained"`
	P50        float64        `json:"p50_ms"`
	P95        float64        `json:"p95_ms"`
	P99        float64        `json:"p99_ms"`
	Max        float64        `json:"max_ms"`
	Errors     map[string]int `json:"errors"`
	// ClientCPU is the CPU time the client spent a call, in ms.
	ClientCPU float64 `json:"client_cpu_ms_per_call"`
	Channels  []struct {
		ChannelID string `json:"channelId"`
		Payer     string `json:"payer"`
		Calls     int    `json:"calls"`
		Charged   string `json:"charged"`
	} `json:"channels"`
}

func (r *batchReport) String() string {
	return fmt.Sprintf("%d payers, deposits %d ok %d failed in %.1f s %v; %s: %d calls, %d answered 200 in %.1f s: %.1f paid calls/s (%.1f sustained), p50 %.1f ms p95 %.1f ms p99 %.1f ms max %.1f ms; errors %v; the client's CPU %.2f ms a call",
		r.Payers, r.Deposits.OK, r.Deposits.Failed, r.Deposits.Seconds, r.Deposits.Errors, r.Mode, r.Calls, r.OK, r.Seconds,
		r.Throughput, r.Sustained, r.P50, r.P95, r.P99, r.Max, r.Errors, r.ClientCPU)
}

// requireAllPaid requires every deposit and every call answered 200.
func (r *batchReport) requireAllPaid(t *testing.T) {
	t.Helper()
	require.Zero(t, r.Deposits.Failed, r.String())
	require.Positive(t, r.OK, r.String())
	require.Equal(t, r.Calls, r.OK, r.String())
}

// requireNoServerError requires that no answer, a deposit's or a call's,
// was a 5xx that the client then tried again (a process that stays up
// answers none).
func (r *batchReport) requireNoServerError(t *testing.T) {
	t.Helper()
	for _, errs := range []map[string]int{r.Deposits.Errors, r.Errors} {
		for code := range errs {
			require.False(t, strings.HasPrefix(code, "5"), "a 5xx answer: %s", r)
		}
	}
}

// runBatchLoad runs compat/batch_load.mjs against the seller at base,
// paying on the chain at rpc, with 100 payers funded from
// channelFunderAccount unless env says otherwise, and returns its report.
func runBatchLoad(t *testing.T, base, rpc string, env ...string) *batchReport {
	t.Helper()
	return startBatchLoad(t, base, rpc, env...).wait(t)
}

// measureBatchLoad runs compat/batch_load.mjs as runBatchLoad does and
// logs the CPU a paid call of its load phase used by procs, by the
// Postgres backends of db's database and by the client (as it counts
// itself). With pprof (the
// PPROF_ADDR of an x402d in procs) set, it writes a CPU profile of the
// load phase's first 8 s to $LOAD_PPROF_OUT (default
// /tmp/x402d-vouchers.pprof).
func measureBatchLoad(ctx context.Context, t *testing.T, db *dbtest.DB, procs map[string][]int, pprof string, base, rpc string, env ...string) *batchReport {
	t.Helper()
	b := startBatchLoad(t, base, rpc, env...)
	<-b.loading
	t.Logf("load phase started at %s", time.Now().UTC().Format(time.RFC3339Nano))
	defer func() { t.Logf("load phase ended at %s", time.Now().UTC().Format(time.RFC3339Nano)) }()
	meter := startCPUMeter(ctx, t, db.Pool, procs)
	profiled := make(chan error, 1)
	if pprof != "" {
		go func() {
			profiled <- saveCPUProfile(pprof, cmp.Or(os.Getenv("LOAD_PPROF_OUT"), "/tmp/x402d-vouchers.pprof"))
		}()
	} else {
		profiled <- nil
	}
	rep := b.wait(t)
	// The client's own figure: it has exited by now.
	t.Logf("CPU a paid call over the load phase's %d paid calls: %s; client %.3f ms", rep.OK, meter.perCall(ctx, t, rep.OK), rep.ClientCPU)
	require.NoError(t, <-profiled)
	return rep
}

// saveCPUProfile writes the CPU profile of 8 seconds of the pprof server
// at addr to path.
func saveCPUProfile(addr, path string) error {
	resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=8")
	if err != nil {
		return fmt.Errorf("profile %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s", addr, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("profile %s: %w", addr, err)
	}
	return f.Close()
}

// batchLoad is a running compat/batch_load.mjs.
type batchLoad struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	// loading is closed once its deposits are made and its load phase
	// started (or it ended).
	loading chan struct{}
	done    chan error
}

// startBatchLoad starts compat/batch_load.mjs as runBatchLoad runs it.
func startBatchLoad(t *testing.T, base, rpc string, env ...string) *batchLoad {
	t.Helper()
	compat := compatDir(t, "@x402/core", "@x402/evm", "viem")
	b := &batchLoad{cmd: exec.Command("node", filepath.Join(compat, "batch_load.mjs")), loading: make(chan struct{}), done: make(chan error, 1)}
	b.cmd.Env = append(os.Environ(), "BASE_URL="+base, "RPC_URL="+rpc, "FUND_FROM="+strconv.Itoa(channelFunderAccount))
	b.cmd.Env = append(b.cmd.Env, env...)
	b.cmd.Stdout = &b.stdout
	stderr, err := b.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, b.cmd.Start())
	go func() {
		sc := bufio.NewScanner(stderr)
		started := false
		for sc.Scan() {
			b.stderr.WriteString(sc.Text() + "\n")
			if !started && strings.HasPrefix(sc.Text(), "load phase started") {
				started = true
				close(b.loading)
			}
		}
		if !started {
			close(b.loading)
		}
		b.done <- b.cmd.Wait()
	}()
	return b
}

// wait waits for the run to end and returns its report.
func (b *batchLoad) wait(t *testing.T) *batchReport {
	t.Helper()
	require.NoError(t, <-b.done, "batch_load.mjs: %s", b.stderr.String())
	rep := &batchReport{}
	require.NoError(t, json.Unmarshal(b.stdout.Bytes(), rep), "batch_load.mjs printed %q", b.stdout.String())
	return rep
}

// requireChargedAsAnswered requires x402d's record of each channel the
// reports paid to hold, as charged, the sum of the charges its client was
// answered.
func requireChargedAsAnswered(ctx context.Context, t *testing.T, db *dbtest.DB, reps ...*batchReport) {
	t.Helper()
	for _, rep := range reps {
		for _, c := range rep.Channels {
			var charged string
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT charged::text FROM channels WHERE channel_id = $1`,
				common.HexToHash(c.ChannelID).Bytes()).Scan(&charged), "channel %s", c.ChannelID)
			require.Equal(t, c.Charged, charged, "channel %s: charged in x402d's record against the charges answered", c.ChannelID)
		}
	}
}

// awaitClaimedAsAnswered waits, up to within, until each channel of rep
// has on chain a claimed total equal to the sum of the charges its client
// was answered, and everything claimed for payTo is settled to it; it
// fails at once if one claimed more.
func awaitClaimedAsAnswered(ctx context.Context, t *testing.T, node *anviltest.Node, rep *batchReport, within time.Duration) {
	t.Helper()
	settlement, err := contracts.Load(contracts.BatchSettlement)
	require.NoError(t, err)
	payTo := devAddress(t, devchain.PayToAccount)
	deadline := time.Now().Add(within)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		behind := 0
		for _, c := range rep.Channels {
			st, err := channel.ReadState(ctx, node.Client, common.HexToHash(c.ChannelID), nil)
			require.NoError(t, err)
			charged, ok := new(big.Int).SetString(c.Charged, 10)
			require.True(t, ok)
			require.LessOrEqual(t, st.TotalClaimed.Cmp(charged), 0, "channel %s: claimed %s, answered %s", c.ChannelID, st.TotalClaimed, charged)
			if st.TotalClaimed.Cmp(charged) < 0 {
				behind++
			}
		}
		input, err := settlement.ABI.Pack("receivers", payTo, devchain.USDC)
		require.NoError(t, err)
		out, err := node.Client.CallContract(ctx, ethereum.CallMsg{To: &channel.SettlementAddress, Data: input}, nil)
		require.NoError(t, err)
		r, err := settlement.ABI.Unpack("receivers", out)
		require.NoError(t, err)
		unsettled := new(big.Int).Sub(r[0].(*big.Int), r[1].(*big.Int))
		if behind == 0 && unsettled.Sign() == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "after %s, %d of %d channels are claimed short of the charges answered; %s claimed for payTo not settled",
			within, behind, len(rep.Channels), unsettled)
		<-tick.C
	}
}

// chanGas is the gas the channel contract's transactions used, by kind.
type chanGas struct {
	claimTxs, settleTxs, depositTxs int
	claims, settles, deposits       uint64
}

// channelGas sums the gas of the transactions to the channel contract in
// the node's blocks after first: claims (claimWithSignature), settlements
// (settle) and deposits.
func channelGas(ctx context.Context, t *testing.T, node *anviltest.Node, first uint64) chanGas {
	t.Helper()
	settlement, err := contracts.Load(contracts.BatchSettlement)
	require.NoError(t, err)
	last, err := node.Client.BlockNumber(ctx)
	require.NoError(t, err)
	var g chanGas
	for n := first + 1; n <= last; n++ {
		b, err := node.Client.BlockByNumber(ctx, new(big.Int).SetUint64(n))
		require.NoError(t, err)
		for _, tx := range b.Transactions() {
			if tx.To() == nil || *tx.To() != channel.SettlementAddress || len(tx.Data()) < 4 {
				continue
			}
			r, err := node.Client.TransactionReceipt(ctx, tx.Hash())
			require.NoError(t, err)
			m, err := settlement.ABI.MethodById(tx.Data()[:4])
			require.NoError(t, err)
			switch m.Name {
			case "claimWithSignature":
				g.claimTxs++
				g.claims += r.GasUsed
			case "settle":
				g.settleTxs++
				g.settles += r.GasUsed
			case "deposit":
				g.depositTxs++
				g.deposits += r.GasUsed
			}
		}
	}
	return g
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes
// (/proc/loadavg): the figures of a run are taken beside whatever else ran.
func loadAverage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/loadavg")
	require.NoError(t, err)
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}
