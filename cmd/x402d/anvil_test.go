package main

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
	"github.com/x402d/x402d/model/modeltest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
)

// anvilEnv is the environment of the service settling in rpc mode on node,
// batched through Multicall3, with the development relayer and receiver,
// and testOpsToken as its operator token.
func anvilEnv(t *testing.T, node *anviltest.Node, db *dbtest.DB) map[string]string {
	t.Helper()
	relayer, err := devchain.DeriveKey(devchain.Mnemonic, devchain.RelayerAccount)
	require.NoError(t, err)
	return map[string]string{
		"DATABASE_URL": db.URL, "LISTEN_ADDR": "127.0.0.1:0",
		"SETTLEMENT": "rpc", "SETTLEMENT_BATCH": "on", "RPC_URL_EIP155_8453": node.URL,
		"RELAYER_KEY": common.Bytes2Hex(crypto.FromECDSA(relayer)),
		"PAY_TO_EVM":  devAddress(t, devchain.PayToAccount).Hex(),
		"OPS_TOKEN":   testOpsToken,
	}
}

// anvilChannelEnv is anvilEnv with the receiver authorizer of
// batch-settlement channels (devchain.ReceiverAuthorizerAccount's key),
// the tests' pool size and warn logs.
func anvilChannelEnv(t *testing.T, node *anviltest.Node, db *dbtest.DB) map[string]string {
	t.Helper()
	env := anvilEnv(t, node, db)
	authorizer, err := devchain.DeriveKey(devchain.Mnemonic, devchain.ReceiverAuthorizerAccount)
	require.NoError(t, err)
	env["RECEIVER_AUTHORIZER_KEY"] = common.Bytes2Hex(crypto.FromECDSA(authorizer))
	env["DB_MAX_CONNS"], env["LOG_LEVEL"] = testMaxConns, "warn"
	return env
}

// requireNodeClean requires the node to hold none of the relayer's
// transactions once the chain caught up: none pending, none queued behind
// a nonce gap.
func requireNodeClean(t *testing.T, node *anviltest.Node) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := node.TxPool(context.Background())
		return err == nil && st.Pending == 0 && st.Queued == 0
	}, 30*time.Second, 100*time.Millisecond, "the node still holds the relayer's transactions")
}

// TestAnvil_OfficialClientPaysEveryOperation has the official x402 client
// pay each operation of `x402d serve` settling in rpc mode on anvil, a node
// that is not ours, with Base's 2-second blocks: every call answered 200
// with its settlement, the payer's and the receiver's balances moved by the
// prices, and each settlement's gas recorded.
func TestAnvil_OfficialClientPaysEveryOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	compat, err := filepath.Abs("../../compat")
	require.NoError(t, err)
	node := anviltest.Start(t, nil)
	db := dbtest.Schema(ctx, t)
	fake := modeltest.NewServer(t)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><head><title>Page</title></head><body>x</body></html>")
	}))
	defer page.Close()
	env := anvilEnv(t, node, db)
	env["DB_MAX_CONNS"], env["LOG_LEVEL"] = testMaxConns, "warn"
	env["GEMINI_API_KEY"], env["GEMINI_BASE_URL"], env["FETCH_ALLOW_CIDRS"] = modeltest.APIKey, fake.URL, "127.0.0.1/32"
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})

	const account = 3
	payer, payTo := devAddress(t, account), devAddress(t, devchain.PayToAccount)
	payerBefore, payToBefore := usdcBalance(ctx, t, node.Client, payer), usdcBalance(ctx, t, node.Client, payTo)
	out := payWithOfficialClient(ctx, t, compat, base, account, sellableCalls(page.URL+"/"))
	require.Len(t, out.Calls, 7)
	total := new(big.Int)
	for _, c := range out.Calls {
		require.Equal(t, http.StatusOK, c.Status, "%s: %s", c.Op, c.Body)
		require.NotNil(t, c.Settlement, c.Op)
		require.True(t, c.Settlement.Success, c.Op)
		amount, ok := new(big.Int).SetString(c.Amount, 10)
		require.True(t, ok, c.Op)
		total.Add(total, amount)
	}
	require.Equal(t, big.NewInt(1_570_000), total)
	require.Equal(t, total, new(big.Int).Sub(payerBefore, usdcBalance(ctx, t, node.Client, payer)))
	require.Equal(t, total, new(big.Int).Sub(usdcBalance(ctx, t, node.Client, payTo), payToBefore))

	// Each settlement recorded the gas it spent.
	var costed int
	for _, c := range settlementCosts(ctx, t, db.Pool) {
		if c.GasUsed > 0 && c.FeeWei().Sign() > 0 {
			costed++
		}
	}
	require.Equal(t, 7, costed)
	requireNodeClean(t, node)
}

// TestAnvil_SharedKeyWorkersKilled runs the compose layout on anvil (one
// api, two worker processes sharing RELAYER_KEY, its nonces in the one
// database) under paid load with 1,000 calls in flight, SIGKILLing a
// worker every 3 s for 10 s (between a batch's send and its receipt, on
// 2-second blocks) and starting another: every call is answered 200
// within the clients' 150 s of retries although JOB_TIMEOUT is ten minutes
// (the jobs of a process gone are taken up after JOB_RECLAIM_AFTER, not by
// River's rescue after the timeout; the slowest call's timeline is logged),
// none is settled twice, the payer paid exactly the calls answered, the node holds no
// transaction behind a nonce gap, and each transaction's block is recorded
// once for many of its calls (settlementBlocks).
func TestAnvil_SharedKeyWorkersKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, nil)
	db := dbtest.Schema(ctx, t)
	env := anvilEnv(t, node, db)
	env["CALL_WAIT"], env["JOB_TIMEOUT"], env["RIVER_POLL_INTERVAL"] = "5s", "10m", "100ms"
	env["SETTLE_GRACE"], env["TEST_REAL_PAYMENTS"] = "10s", "1"
	api := startChild(t, "api", env)
	stopKilling := killWorkers(t, env, 3*time.Second)
	// Kills during the load; then the calls left are finished by the
	// two workers standing.
	kills := make(chan int, 1)
	var lastKill atomic.Int64
	time.AfterFunc(10*time.Second, func() {
		n := stopKilling(2)
		lastKill.Store(time.Now().UnixNano())
		kills <- n
	})
	start := time.Now()

	payer := devPayer(t, 5)
	payTo := devAddress(t, devchain.PayToAccount)
	payerBefore := usdcBalance(ctx, t, node.Client, payer.Address())
	rep, err := loadgen.Run(ctx, loadgen.Config{
		BaseURL: api.addr, Requests: []loadgen.Request{{Op: "diff", Body: `{"a":"one\ntwo\n","b":"one\n2\n"}`}},
		Payer: payer, Concurrency: 1000, Duration: 6 * time.Second, Retry: true, RetryFor: 150 * time.Second,
	})
	t.Logf("%d workers killed", <-kills)
	require.NoError(t, err)
	t.Log(rep)
	require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
	var last time.Time
	var slowest loadgen.Outcome
	for _, o := range rep.Outcomes {
		if end := start.Add(o.Offset + o.Latency); end.After(last) {
			last, slowest = end, o
		}
	}
	afterKill := last.Sub(time.Unix(0, lastKill.Load()))
	t.Logf("last call answered %s after the last kill: %s", afterKill.Round(time.Millisecond), slowest.CallID)
	logCallEvents(ctx, t, db, slowest.CallID)

	price := big.NewInt(10_000)
	txs := checkChainPayments(ctx, t, node.Client, rep, payer.Address(), payTo, price)
	requirePaidOnce(ctx, t, db, rep, price, new(big.Int).Sub(payerBefore, usdcBalance(ctx, t, node.Client, payer.Address())))
	requireNodeClean(t, node)
	t.Logf("%d calls settled in %d transactions on anvil with two workers sharing one key", rep.Calls, txs)
	blocks := settlementBlocks(ctx, t, db.Pool)
	require.Equal(t, rep.Calls, blocks.Confirmed)
	// A transaction's block is recorded once for the calls settled
	// together; a settlement made again after a kill records it again, so
	// how far below the calls this stays depends on how many calls a
	// transaction carries, which the machine's load sets (logged above).
	require.Less(t, blocks.Mined, blocks.Confirmed, "a transaction's block recorded once for its calls, not once a call")
}

// TestAnvil_ServeThroughEndpoints runs `x402d serve` settling on anvil
// through four RPC endpoints in RPC_URL_EIP155_8453, proxies on loopback in
// front of the one node: one lagging three blocks behind, one answering 429
// with Retry-After in bursts, one that dies 3 s into the paid load, and one
// that behaves. Every call is answered 200 once, paid once, its settlement
// on chain; the node holds no transaction behind a nonce gap; /metrics
// shows each endpoint by host, the dead one out, the lagging one behind.
func TestAnvil_ServeThroughEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: time.Second})
	db := dbtest.Schema(ctx, t)
	lagging, limited, dying, healthy := anviltest.NewProxy(t, node.URL), anviltest.NewProxy(t, node.URL), anviltest.NewProxy(t, node.URL), anviltest.NewProxy(t, node.URL)
	lagging.Lag.Store(3)
	limited.Burst.Store(true)
	env := anvilEnv(t, node, db)
	env["RPC_URL_EIP155_8453"] = strings.Join([]string{lagging.URL + "/v2/SECRETKEY", limited.URL + "/v2/SECRETKEY",
		dying.URL + "/v2/SECRETKEY", healthy.URL + "/v2/SECRETKEY"}, ",")
	env["LOG_LEVEL"] = "warn"
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})

	time.AfterFunc(3*time.Second, dying.Die)
	payer := devPayer(t, 6)
	payTo := devAddress(t, devchain.PayToAccount)
	payerBefore := usdcBalance(ctx, t, node.Client, payer.Address())
	rep, err := loadgen.Run(ctx, loadgen.Config{
		BaseURL: base, Requests: []loadgen.Request{{Op: "diff", Body: `{"a":"one\ntwo\n","b":"one\n2\n"}`}},
		Payer: payer, Concurrency: 100, Rate: 20, Duration: 8 * time.Second, Retry: true, RetryFor: 60 * time.Second,
	})
	require.NoError(t, err)
	t.Log(rep)
	require.Positive(t, rep.Calls)
	require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
	price := big.NewInt(10_000)
	checkChainPayments(ctx, t, node.Client, rep, payer.Address(), payTo, price)
	requirePaidOnce(ctx, t, db, rep, price, new(big.Int).Sub(payerBefore, usdcBalance(ctx, t, node.Client, payer.Address())))
	requireNodeClean(t, node)

	require.True(t, dying.Dead.Load())
	require.Positive(t, limited.Limited.Load(), "429s were answered")
	require.Positive(t, lagging.Served.Load())
	figures := string(getMetrics(ctx, t, base))
	require.NotContains(t, figures, "SECRETKEY", "metrics name the host, never the URL")
	name := func(p *anviltest.Proxy) string { return strings.TrimSuffix(p.URL, "/") }
	require.Contains(t, figures, `x402d_rpc_endpoint_in{endpoint="`+name(dying)+`",network="eip155:8453"} 0`)
	require.Contains(t, figures, `x402d_rpc_endpoint_in{endpoint="`+name(healthy)+`",network="eip155:8453"} 1`)
	require.Contains(t, figures, `x402d_rpc_endpoint_errors_total{endpoint="`+name(limited)+`",kind="429",network="eip155:8453"}`)
	require.Regexp(t, `x402d_rpc_endpoint_head_lag_blocks\{endpoint="`+regexp.QuoteMeta(name(lagging))+`",network="eip155:8453"\} [2-9]`, figures)
}

// TestAnvil_TokenMismatchRefusesStart: a chain whose token does not answer
// the network table's EIP-712 domain refuses to start the service, in rpc
// and in facilitator mode, naming the chain and both values; the same
// chain with Circle's USDC as deployed starts it.
func TestAnvil_TokenMismatchRefusesStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
	db := dbtest.Schema(ctx, t)
	env := anvilEnv(t, node, db)
	env["DB_MAX_CONNS"], env["LOG_LEVEL"] = testMaxConns, "warn"
	startInProcessWith(ctx, t, "api", func(k string) string { return env[k] }, &options{})

	require.NoError(t, node.RenameUSDC(ctx, "USD Coin (bridged)"))
	const want = `check eip155:8453: token 0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913: name() is "USD Coin (bridged)" on chain, "USD Coin" in the network table`
	facilitator := maps.Clone(env)
	facilitator["SETTLEMENT"], facilitator["FACILITATOR_URL"] = "facilitator", "http://127.0.0.1:1"
	for name, env := range map[string]map[string]string{"rpc": env, "facilitator": facilitator} {
		err := run(ctx, []string{"api"}, func(k string) string { return env[k] }, io.Discard, io.Discard, &options{})
		require.ErrorContains(t, err, want, name)
	}
}

// settlementCosts returns the cost each settlement.confirmed event of the
// ledger records, read as the store reads it (either of its forms).
func settlementCosts(ctx context.Context, t *testing.T, pool *pgxpool.Pool) []x402.SettleCost {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT data FROM events WHERE type = $1`, store.EventSettlementConfirmed)
	require.NoError(t, err)
	var costs []x402.SettleCost
	data, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	require.NoError(t, err)
	for _, raw := range data {
		var done store.SettlementDone
		require.NoError(t, json.Unmarshal(raw, &done))
		if done.Cost != nil {
			costs = append(costs, *done.Cost)
		}
	}
	return costs
}

// minedFigures are what settlementBlocks finds of a run's settlements.
type minedFigures struct {
	// Confirmed is the number of settlement.confirmed events, Mined that
	// of settlement.mined, Transactions that of the transactions they name.
	Confirmed, Mined, Transactions int
	// ConfirmedBytes is the mean size of a settlement.confirmed's data as
	// stored (pg_column_size), WithBlockBytes that of the same data with
	// the block inside, as releases before settlement.mined wrote it, and MinedBytes the
	// size of every settlement.mined's data over the confirmed events;
	// ConfirmedRow and MinedRow are the same of their whole rows
	// (pg_column_size of the row: without its tuple header and its index
	// entry).
	ConfirmedBytes, WithBlockBytes, MinedBytes, ConfirmedRow, MinedRow float64
}

// settlementBlocks requires every settlement.confirmed of the ledger to
// find the block of its transaction in the settlement.mined appended with
// it, none keeping it in its own data, and returns the figures.
func settlementBlocks(ctx context.Context, t *testing.T, pool *pgxpool.Pool) minedFigures {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT data, created_at FROM events WHERE type = $1`, store.EventSettlementConfirmed)
	require.NoError(t, err)
	type event struct {
		data []byte
		at   time.Time
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (event, error) {
		var e event
		return e, row.Scan(&e.data, &e.at)
	})
	require.NoError(t, err)
	require.NotEmpty(t, events)
	// The blocks of the settlement.mined events, by transaction and time
	// (the events of one Append share it).
	type key struct {
		tx string
		at time.Time
	}
	rows, err = pool.Query(ctx, `SELECT data, created_at FROM events WHERE type = $1`, store.EventSettlementMined)
	require.NoError(t, err)
	mined, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (event, error) {
		var e event
		return e, row.Scan(&e.data, &e.at)
	})
	require.NoError(t, err)
	blocks := map[key]x402.SettledBlock{}
	for _, e := range mined {
		var m store.SettlementMined
		require.NoError(t, json.Unmarshal(e.data, &m))
		blocks[key{m.Transaction, e.at}] = m.Block
	}
	withBlock := make([]string, len(events))
	txs := map[string]bool{}
	for i, e := range events {
		var done store.SettlementDone
		require.NoError(t, json.Unmarshal(e.data, &done))
		require.Nil(t, done.Block, "a settlement.confirmed keeps its block")
		block, ok := blocks[key{done.Response.Transaction, e.at}]
		require.True(t, ok, "no settlement.mined recorded with the settlement of %s", done.Response.Transaction)
		done.Block = &block
		b, err := json.Marshal(done)
		require.NoError(t, err)
		withBlock[i] = string(b)
		txs[done.Response.Transaction] = true
	}
	f := minedFigures{Confirmed: len(events), Transactions: len(txs)}
	require.NoError(t, pool.QueryRow(ctx, `SELECT avg(pg_column_size(data))::float8, avg(pg_column_size(e.*))::float8 FROM events e WHERE type = $1`,
		store.EventSettlementConfirmed).Scan(&f.ConfirmedBytes, &f.ConfirmedRow))
	require.NoError(t, pool.QueryRow(ctx, `SELECT avg(pg_column_size(d))::float8 FROM unnest($1::jsonb[]) d`, withBlock).Scan(&f.WithBlockBytes))
	var minedData, minedRows int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(pg_column_size(data)), 0), coalesce(sum(pg_column_size(e.*)), 0) FROM events e WHERE type = $1`,
		store.EventSettlementMined).Scan(&f.Mined, &minedData, &minedRows))
	f.MinedBytes, f.MinedRow = float64(minedData)/float64(f.Confirmed), float64(minedRows)/float64(f.Confirmed)
	t.Logf("%d settlement.confirmed of %d transactions, %d settlement.mined; a call: settlement.confirmed %.1f bytes of data (%.1f with the block inside), row %.1f; settlement.mined %.1f of data, rows %.1f",
		f.Confirmed, f.Transactions, f.Mined, f.ConfirmedBytes, f.WithBlockBytes, f.ConfirmedRow, f.MinedBytes, f.MinedRow)
	return f
}

// logCallEvents logs the events of call id with their times and River's
// jobs of the call, for a test that finds the call slow.
func logCallEvents(ctx context.Context, t *testing.T, db *dbtest.DB, id string) {
	t.Helper()
	rows, err := db.Pool.Query(ctx, "SELECT type, created_at FROM events WHERE stream = $1 ORDER BY id", store.CallStream(id))
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var typ string
		var at time.Time
		require.NoError(t, rows.Scan(&typ, &at))
		t.Logf("  %s %s", at.Format("15:04:05.000"), typ)
	}
	require.NoError(t, rows.Err())
	jobs, err := db.Pool.Query(ctx, "SELECT kind, state, attempt, created_at, attempted_at, finalized_at, coalesce(errors::text, '') FROM river_job WHERE args::text LIKE '%' || $1 || '%' ORDER BY id", id)
	require.NoError(t, err)
	defer jobs.Close()
	for jobs.Next() {
		var kind, state string
		var attempt int
		var created time.Time
		var attempted, finalized *time.Time
		var errs string
		require.NoError(t, jobs.Scan(&kind, &state, &attempt, &created, &attempted, &finalized, &errs))
		t.Logf("  job %s %s attempt %d created %s attempted %v finalized %v errors %s", kind, state, attempt, created.Format("15:04:05.000"), attempted, finalized, errs)
	}
	require.NoError(t, jobs.Err())
}
