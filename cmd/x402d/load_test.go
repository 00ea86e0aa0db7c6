package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/loadgen"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402/devchain"
)

// These tests run the load generator against real processes with the
// payment double and check, after each run, the ledger rules of the issue:
// every settled payment has exactly one delivered result, no payment is
// settled twice, no result is delivered without settlement, and the service
// recovers by itself.

// fakePayer pays with fresh headers of the payment double.
type fakePayer struct {
	payer string
	n     atomic.Int64
}

func (p *fakePayer) Pay(context.Context, string) (string, error) {
	return fmt.Sprintf("test:%s:n%d", p.payer, p.n.Add(1)), nil
}

var loadRequests = []loadgen.Request{
	{Op: "diff", Body: `{"a":"one\ntwo\nthree\n","b":"one\n2\nthree\n"}`},
	{Op: "sleep", Body: `{"ms":20}`},
}

// checkLedger waits for every call to reach a final state and checks the
// ledger rules against the run's outcomes, settled by the payment double.
func checkLedger(ctx context.Context, t *testing.T, db *dbtest.DB, rep *loadgen.Report) {
	t.Helper()
	checkCalls(ctx, t, db, rep)
	var paid, chain, paidWithoutTx int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls WHERE state = $1", store.CallPaid).Scan(&paid))
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+paytest.LedgerTable).Scan(&chain))
	// A call keeps its payment's key as its digest (store.PaymentDigest).
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM calls c WHERE c.state = $1 AND NOT EXISTS (
		SELECT 1 FROM `+paytest.LedgerTable+` tc WHERE c.payment_key IN (tc.payment_key,
			encode(substring(sha256(convert_to(tc.payment_key, 'UTF8')) FROM 1 FOR 16), 'base64')))`, store.CallPaid).Scan(&paidWithoutTx))
	require.Zero(t, paidWithoutTx, "a call released without its payment on chain")
	require.Equal(t, paid, chain, "payments on chain and paid calls differ")
}

// awaitCallsFinal waits until every call on db is paid, failed or unpaid.
func awaitCallsFinal(ctx context.Context, t *testing.T, db *dbtest.DB) {
	t.Helper()
	require.Eventually(t, func() bool {
		var open int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls WHERE state NOT IN ($1, $2, $3)",
			store.CallPaid, store.CallFailed, store.CallUnpaid).Scan(&open))
		return open == 0
	}, 90*time.Second, 200*time.Millisecond, "calls still open")
}

// checkCalls waits for every call to reach a final state and checks the
// ledger rules that hold whatever settles the payments: every 200 carries
// a settled PAYMENT-RESPONSE and its call is paid, no header made two
// calls, no call is settled twice.
func checkCalls(ctx context.Context, t *testing.T, db *dbtest.DB, rep *loadgen.Report) {
	t.Helper()
	awaitCallsFinal(ctx, t, db)

	logStages(ctx, t, db)

	headers := map[string]int{}
	delivered := map[string]string{} // header -> call id of its 200
	for _, o := range rep.Outcomes {
		headers[o.Header]++
		if o.Status == http.StatusOK {
			require.True(t, o.Settled, "a 200 without a settled PAYMENT-RESPONSE: %+v", o)
			require.NotEmpty(t, o.CallID)
			delivered[o.Header] = o.CallID
		}
	}
	for h, n := range headers {
		require.Equal(t, 1, n, "header %s used by two calls of the generator", h)
	}

	var calls, doubleConfirmed int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls").Scan(&calls))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT stream FROM events WHERE type = $1 GROUP BY stream HAVING count(*) > 1) d`, store.EventSettlementConfirmed).Scan(&doubleConfirmed))
	require.Zero(t, doubleConfirmed, "a call settled twice")
	require.LessOrEqual(t, calls, len(headers), "more calls than payments")
	// Every answered payment's call is paid, and was delivered once.
	for h, id := range delivered {
		c, err := store.CallGetByID(ctx, db.Pool, id)
		require.NoError(t, err, h)
		require.Equal(t, store.CallPaid, c.State, h)
	}
}

// TestLoadSteady runs paid load on one `serve` process.
func TestLoadSteady(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	base := startInProcess(ctx, t, "serve", testEnv(db, nil))
	rep, err := loadgen.Run(ctx, loadgen.Config{
		BaseURL: base, Requests: loadRequests, Payer: &fakePayer{payer: "0xsteady"},
		Concurrency: 16, Duration: 4 * time.Second,
	})
	require.NoError(t, err)
	t.Log(rep)
	require.Greater(t, rep.Calls, 50)
	require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
	checkLedger(ctx, t, db, rep)
}

// TestLoadSteadySplit runs paid load on two api and two worker processes
// sharing one Postgres: half the clients call each api.
func TestLoadSteadySplit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	apis := startTwoAPIsTwoWorkers(t, db)

	payer := &fakePayer{payer: "0xsplit"}
	reps := make([]*loadgen.Report, len(apis))
	var g errgroup.Group
	for i, api := range apis {
		g.Go(func() error {
			rep, err := loadgen.Run(ctx, loadgen.Config{
				BaseURL: api.addr, Requests: loadRequests, Payer: payer,
				Concurrency: 8, Duration: 4 * time.Second,
			})
			reps[i] = rep
			return err
		})
	}
	require.NoError(t, g.Wait())
	all := &loadgen.Report{Statuses: map[int]int{}}
	for i, rep := range reps {
		t.Logf("api %d: %s", i, rep)
		require.Greater(t, rep.Calls, 20, "api %d", i)
		require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
		all.Calls += rep.Calls
		all.Outcomes = append(all.Outcomes, rep.Outcomes...)
		for code, n := range rep.Statuses {
			all.Statuses[code] += n
		}
	}
	checkLedger(ctx, t, db, all)
}

// TestLoadWorkersKilled kills a worker process with SIGKILL every two seconds
// during load, with two api and two worker processes; clients retry a lost
// answer with the same header.
func TestLoadWorkersKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	env := map[string]string{
		"DATABASE_URL": db.URL, "LISTEN_ADDR": "127.0.0.1:0", "CALL_WAIT": "2s",
		"JOB_TIMEOUT": "3s", "JOB_RESCUE_AFTER": "4s", "RIVER_POLL_INTERVAL": "100ms",
	}
	api := startChild(t, "api", env)
	stopKilling := killWorkers(t, env, 2*time.Second)
	rep, err := loadgen.Run(ctx, loadgen.Config{
		BaseURL: api.addr, Requests: loadRequests, Payer: &fakePayer{payer: "0xkill"},
		// River looks for stuck jobs every 30 s: a call whose job and then
		// settlement job were both on killed workers takes over a minute.
		Concurrency: 16, Duration: 7 * time.Second, Retry: true, RetryFor: 150 * time.Second,
	})
	t.Logf("%d workers killed", stopKilling(2))
	require.NoError(t, err)
	t.Log(rep)
	require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
	checkLedger(ctx, t, db, rep)
}

// TestLoadWorkersKilledOnDevchain is TestLoadWorkersKilled with real
// EIP-3009 payments settled in batches on a devchain of its own process
// (the split layout): a worker SIGKILLed between sending a batch and
// recording its outcome leaves settlements that the other worker finds
// settled on chain. Every 200 names a transaction that moved its price, no
// payment moves twice, and the payer paid exactly the calls answered.
func TestLoadWorkersKilledOnDevchain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	env, chain := startDevchainProcess(ctx, t, db)
	api := startChild(t, "api", env)
	stopKilling := killWorkers(t, env, 1500*time.Millisecond)
	payer := devPayer(t, 5)
	payTo := devAddress(t, devchain.PayToAccount)
	payerBefore := usdcBalance(ctx, t, chain, payer.Address())
	rep, err := loadgen.Run(ctx, loadgen.Config{
		BaseURL: api.addr, Requests: []loadgen.Request{{Op: "diff", Body: `{"a":"one\ntwo\n","b":"one\n2\n"}`}},
		Payer: payer, Concurrency: 16, Duration: 6 * time.Second, Retry: true, RetryFor: 150 * time.Second,
	})
	t.Logf("%d workers killed", stopKilling(2))
	require.NoError(t, err)
	t.Log(rep)
	require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())

	price := big.NewInt(10_000) // diff: $0.01
	txs := checkChainPayments(ctx, t, chain, rep, payer.Address(), payTo, price)
	requirePaidOnce(ctx, t, db, rep, price, new(big.Int).Sub(payerBefore, usdcBalance(ctx, t, chain, payer.Address())))
	var resettled int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(DISTINCT stream) FROM events WHERE type = $1 AND (data->>'attempt')::int > 1`,
		store.EventSettlementSubmitted).Scan(&resettled))
	t.Logf("%d calls settled in %d transactions; %d settlements attempted again after a kill", rep.Calls, txs, resettled)
}

// startDevchainProcess starts an `x402d devchain` process and returns the
// environment of api and worker processes on db that settle on it, with
// short job timeouts for tests that kill them, and a client of the chain.
func startDevchainProcess(ctx context.Context, t *testing.T, db *dbtest.DB) (map[string]string, *ethclient.Client) {
	t.Helper()
	rpc := freeAddr(t)
	env := map[string]string{
		"DATABASE_URL": db.URL, "LISTEN_ADDR": "127.0.0.1:0", "CALL_WAIT": "2s",
		"JOB_TIMEOUT": "3s", "JOB_RESCUE_AFTER": "4s", "RIVER_POLL_INTERVAL": "100ms",
		"TEST_REAL_PAYMENTS": "1", "SETTLEMENT": "devchain", "DEVCHAIN_RPC_ADDR": rpc,
	}
	startChild(t, "devchain", env)
	chain, err := ethclient.DialContext(ctx, "http://"+rpc)
	require.NoError(t, err)
	t.Cleanup(chain.Close)
	return env, chain
}

// requirePaidOnce checks the calls of rep against the ledger and the
// chain, whichever it is: every call answered is paid, none is settled
// twice, and the payer paid price for each call answered, no more (spent
// is how much its balance went down during the run).
func requirePaidOnce(ctx context.Context, t *testing.T, db *dbtest.DB, rep *loadgen.Report, price, spent *big.Int) {
	t.Helper()
	var paid, doubleConfirmed int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls WHERE state = $1", store.CallPaid).Scan(&paid))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT stream FROM events WHERE type = $1 GROUP BY stream HAVING count(*) > 1) d`, store.EventSettlementConfirmed).Scan(&doubleConfirmed))
	require.Zero(t, doubleConfirmed, "a call settled twice")
	require.Equal(t, rep.Calls, paid)
	require.Equal(t, new(big.Int).Mul(price, big.NewInt(int64(rep.Calls))), spent, "the payer paid exactly the calls answered")
}

// killWorkers starts two worker processes with env and SIGKILLs one of
// them every interval, starting another in its place, until the function it
// returns is called and at least atLeast were killed (a loaded machine
// starts workers slowly, so the kills are counted, not timed); that
// function returns how many were killed.
func killWorkers(t *testing.T, env map[string]string, every time.Duration) func(atLeast int) int {
	t.Helper()
	workers := []*child{startChild(t, "worker", env), startChild(t, "worker", env)}
	stop := make(chan int, 1)
	killed := make(chan int)
	go func() {
		n, atLeast, stopping := 0, 0, false
		defer func() { killed <- n }()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for !stopping || n < atLeast {
			select {
			case atLeast = <-stop:
				stopping = true
				continue
			case <-tick.C:
			}
			workers[n%2].kill()
			workers[n%2] = startChild(t, "worker", env)
			n++
		}
	}()
	return func(atLeast int) int {
		stop <- atLeast
		return <-killed
	}
}

// checkChainPayments checks the answered calls of rep against the chain:
// every 200 names a successful transaction that moved price from payer to
// payTo once for each call naming it (calls share batch transactions). It
// returns the number of transactions.
func checkChainPayments(ctx context.Context, t *testing.T, chain *ethclient.Client, rep *loadgen.Report, payer, payTo common.Address, price *big.Int) int {
	t.Helper()
	transfer := crypto.Keccak256Hash([]byte("Transfer(address,address,uint256)"))
	calls := map[string]int64{}
	for _, o := range rep.Outcomes {
		require.True(t, o.Settled, "a 200 without a settled PAYMENT-RESPONSE: %+v", o)
		calls[o.Tx]++
	}
	for tx, n := range calls {
		receipt, err := chain.TransactionReceipt(ctx, common.HexToHash(tx))
		require.NoError(t, err, tx)
		require.Equal(t, types.ReceiptStatusSuccessful, receipt.Status)
		moved := new(big.Int)
		for _, l := range receipt.Logs {
			if l.Address == devchain.USDC && len(l.Topics) == 3 && l.Topics[0] == transfer &&
				common.BytesToAddress(l.Topics[1].Bytes()) == payer && common.BytesToAddress(l.Topics[2].Bytes()) == payTo {
				moved.Add(moved, new(big.Int).SetBytes(l.Data))
			}
		}
		require.Equal(t, new(big.Int).Mul(price, big.NewInt(n)), moved, "transaction %s answered %d calls", tx, n)
	}
	return len(calls)
}

// TestLoadAPIKilled kills one of two api processes during load; clients
// resend the same payment header to the other one and get their result.
func TestLoadAPIKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	env := map[string]string{"DATABASE_URL": db.URL, "LISTEN_ADDR": "127.0.0.1:0", "CALL_WAIT": "2s", "RIVER_POLL_INTERVAL": "100ms"}
	a1, a2 := startChild(t, "api", env), startChild(t, "api", env)
	startChild(t, "worker", env)

	// A payer whose calls go to a1 first; the proxy below sends a retry of
	// a header to a2 once a1 is gone.
	proxy := &failover{primary: a1.addr, backup: a2.addr, sent: map[string]bool{}}
	srv := newLoopbackServer(t, proxy)
	client, recorder := loadClient(16)
	go func() {
		// Once the load is under way: calls are in flight on a1.
		awaitAnswers(t, recorder, http.StatusOK, 32)
		a1.kill()
	}()
	rep, err := loadgen.Run(ctx, loadgen.Config{
		BaseURL: srv, Requests: loadRequests, Payer: &fakePayer{payer: "0xapi"}, Client: client,
		Concurrency: 16, Duration: 4 * time.Second, Retry: true, RetryFor: 30 * time.Second,
	})
	require.NoError(t, err)
	t.Log(rep)
	require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
	proxy.mu.Lock()
	resents := proxy.resents
	proxy.mu.Unlock()
	require.Positive(t, resents, "no call lost its answer when the api died")
	checkLedger(ctx, t, db, rep)
}

// TestQuoteBurstAndReplays sends 10,000 unpaid quotes and 1,000 replays of
// paid calls' headers.
func TestQuoteBurstAndReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	base := startInProcess(ctx, t, "serve", testEnv(db, nil))
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}

	var wg sync.WaitGroup
	var quotes atomic.Int64
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10_000/32+1; i++ {
				resp, _ := post(t, client, base+"/api/x402/diff", "", "")
				if resp.StatusCode == http.StatusPaymentRequired && resp.Header.Get("PAYMENT-REQUIRED") != "" {
					quotes.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.GreaterOrEqual(t, quotes.Load(), int64(10_000))

	rep, err := loadgen.Run(ctx, loadgen.Config{
		BaseURL: base, Requests: loadRequests[:1], Payer: &fakePayer{payer: "0xreplay"}, Concurrency: 8, MaxCalls: 100, Duration: time.Minute,
	})
	require.NoError(t, err)
	require.Equal(t, 100, rep.Statuses[http.StatusOK])
	// Ten replays of each header, half with the same body, half another.
	var same, other atomic.Int64
	for r := 0; r < 10; r++ {
		for _, o := range rep.Outcomes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := loadRequests[0].Body
				if r%2 == 1 {
					body = `{"a":"x","b":"y"}`
				}
				resp, out := post(t, client, base+"/api/x402/diff", o.Header, body)
				switch {
				case r%2 == 0 && resp.StatusCode == http.StatusOK && callIDOf(t, out) == o.CallID:
					same.Add(1)
				case r%2 == 1 && resp.StatusCode == http.StatusPaymentRequired:
					other.Add(1)
				}
			}()
		}
		wg.Wait()
	}
	require.Equal(t, int64(500), same.Load(), "replays with the same request get the stored result")
	require.Equal(t, int64(500), other.Load(), "replays with another request are refused")
	checkLedger(ctx, t, db, rep)
}

func callIDOf(t *testing.T, body []byte) string {
	m := decodeJSON[map[string]any](t, body)
	id, _ := m["call_id"].(string)
	return id
}

// failover is a tiny load balancer: it sends each request to primary and,
// when primary cannot be reached, to backup.
type failover struct {
	primary, backup string
	client          http.Client

	mu      sync.Mutex
	sent    map[string]bool // payment headers sent to primary
	resents int             // of those, how many were resent to backup
}

func (f *failover) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var resp *http.Response
	for i, base := range []string{f.primary, f.backup} {
		f.mu.Lock()
		if h := r.Header.Get("Payment-Signature"); h != "" {
			if i == 0 {
				f.sent[h] = true
			} else if f.sent[h] {
				f.resents++
			}
		}
		f.mu.Unlock()
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
		req.Header = r.Header.Clone()
		if resp, err = f.client.Do(req); err == nil {
			break
		}
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func newLoopbackServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// logStages logs the median time before each event of a call, in the order
// of a call's life. Events appended together (a run's job.started with its
// outcome, the first settlement attempt with its outcome) show 0 ms.
func logStages(ctx context.Context, t *testing.T, db *dbtest.DB) {
	rows, err := db.Pool.Query(ctx, `
		SELECT type, percentile_cont(0.5) WITHIN GROUP (ORDER BY gap), percentile_cont(0.99) WITHIN GROUP (ORDER BY gap), count(*)
		FROM (SELECT type, extract(epoch FROM created_at - lag(created_at) OVER (PARTITION BY stream ORDER BY id)) * 1000 AS gap
		      FROM events WHERE stream LIKE 'call/%') g
		WHERE gap IS NOT NULL GROUP BY type
		ORDER BY array_position(ARRAY['job.queued', 'job.started', 'job.succeeded', 'job.failed',
			'settlement.submitted', 'settlement.confirmed', 'settlement.failed'], type)`)
	require.NoError(t, err)
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var typ string
		var p50, p99 float64
		var n int
		require.NoError(t, rows.Scan(&typ, &p50, &p99, &n))
		fmt.Fprintf(&b, "  -> %-22s p50 %7.2fms p99 %7.2fms (%d)\n", typ, p50, p99, n)
	}
	require.NoError(t, rows.Err())
	t.Logf("time before each event, per call:\n%s", b.String())
}

// TestLoadOnDevchain pays load with real EIP-3009 payments of a development
// account, settled on the embedded devchain, and checks the ledger against
// the chain: every 200 names a successful transaction, each moving the price
// from the payer to the receiver once for every call that names it (calls
// share batch transactions), and the balances moved by exactly the paid
// calls. Then `x402d load` itself runs against the same service.
func TestLoadOnDevchain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, chain, db := startDevchainServiceDB(ctx, t)
	payer := devPayer(t, 6)
	payTo := devAddress(t, devchain.PayToAccount)
	payerBefore, payToBefore := usdcBalance(ctx, t, chain, payer.Address()), usdcBalance(ctx, t, chain, payTo)

	rep, err := loadgen.Run(ctx, loadgen.Config{
		BaseURL: base, Requests: []loadgen.Request{{Op: "diff", Body: `{"a":"one\ntwo\n","b":"one\n2\n"}`}},
		Payer: payer, Concurrency: 16, Duration: 3 * time.Second,
	})
	require.NoError(t, err)
	t.Log(rep)
	require.Greater(t, rep.Calls, 30)
	require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())

	price := big.NewInt(10_000) // diff: $0.01
	txs := checkChainPayments(ctx, t, chain, rep, payer.Address(), payTo, price)
	t.Logf("%d calls settled in %d transactions", rep.Calls, txs)
	var paid, confirmed int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls WHERE state = $1", store.CallPaid).Scan(&paid))
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE type = $1", store.EventSettlementConfirmed).Scan(&confirmed))
	require.Equal(t, rep.Calls, paid)
	require.Equal(t, rep.Calls, confirmed)
	total := new(big.Int).Mul(price, big.NewInt(int64(rep.Calls)))
	require.Equal(t, total, new(big.Int).Sub(payerBefore, usdcBalance(ctx, t, chain, payer.Address())))
	require.Equal(t, total, new(big.Int).Sub(usdcBalance(ctx, t, chain, payTo), payToBefore))

	var out bytes.Buffer
	getenv := func(string) string { return "" }
	require.NoError(t, runLoad(ctx, []string{"-url", base, "-account", "7", "-c", "4", "-t", "1s"}, getenv, &out))
	require.Regexp(t, `calls \d+ in .*calls/s(, [0-9.]+ sustained)?\nlatency p50 .* p99 .*\nstatuses 200:\d+ errors:0`, out.String())
	// Signed ahead: 20 payments at 10/s for 2 s, every one
	// settled.
	out.Reset()
	require.NoError(t, runLoad(ctx, []string{"-url", base, "-account", "7", "-c", "4", "-t", "2s", "-rate", "10", "-presign"}, getenv, &out))
	require.Regexp(t, `calls 20 in .*calls/s(, [0-9.]+ sustained)?\nlatency p50 .* p99 .*\nstatuses 200:20 errors:0`, out.String())
}
