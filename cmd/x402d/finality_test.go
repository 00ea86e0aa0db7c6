package main

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/payclient"
)

// payDiffs makes n paid diff calls at once with payer and requires each
// answered 200 with its settlement.
func payDiffs(ctx context.Context, t *testing.T, base string, payer *payclient.Client, n int) {
	t.Helper()
	var wg sync.WaitGroup
	results := make([]*payclient.Result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = payer.Do(ctx, &payclient.Request{Method: http.MethodPost, URL: base + "/api/x402/diff",
				Body: []byte(`{"a":"one\ntwo\n","b":"one\n2\n"}`)})
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, http.StatusOK, results[i].Status, string(results[i].Body))
		require.NotNil(t, results[i].Settlement)
		require.True(t, results[i].Settlement.Success)
	}
}

// followDepth is the finality depth of startFollowing's service.
const followDepth = 12

// startFollowing starts `x402d serve` settling on a fresh anvil with
// 1-second blocks, its settlements final followDepth blocks deep.
func startFollowing(ctx context.Context, t *testing.T) (*anviltest.Node, *dbtest.DB, string) {
	t.Helper()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: time.Second})
	db := dbtest.Schema(ctx, t)
	env := anvilEnv(t, node, db)
	env["DB_MAX_CONNS"], env["LOG_LEVEL"], env["FINALITY_EIP155_8453"] = testMaxConns, "warn", fmt.Sprintf("depth:%d", followDepth)
	return node, db, startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})
}

// reorgWatched replaces with empty blocks every block of node from the
// oldest one holding a settlement that awaits finality: anvil forgets the
// transactions of the blocks it replaces, as a node may after a
// reorganisation. It requires the depth to stay under followDepth (past
// it the settlements would be final already).
func reorgWatched(ctx context.Context, t *testing.T, node *anviltest.Node, db *dbtest.DB) {
	t.Helper()
	var oldest int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT min(block) FROM settlement_watch`).Scan(&oldest))
	head, err := node.Client.BlockNumber(ctx)
	require.NoError(t, err)
	depth := head - uint64(oldest) + 1
	require.Less(t, depth, uint64(followDepth), "the settlements took too long: they are final before the reorganisation")
	require.NoError(t, node.Call(ctx, nil, "anvil_reorg", depth, []any{}))
	t.Logf("reorganised %d blocks from block %d", depth, oldest)
}

// TestAnvil_ReorganisationUndoesSettlements pays 40 calls of `x402d serve`
// settling on anvil (Circle's USDC, 1-second blocks, final followDepth blocks deep),
// then, while 16 more calls at a time are being paid (after the first 16
// of them are answered), replaces every block holding those settlements
// with empty ones (anvil forgets their transactions) and has the node
// forget its pending transactions too: every call is answered 200 (a
// payment verified while the node's chain shrinks is not refused for the
// node's error, isRevert), every settlement is made again and becomes
// final, the receiver holds every price once and the payer paid each once,
// the ledger says that each of the 40 was undone and made again and that
// every call's settlement is final (each settlement.confirmed finding its
// block in its transaction's settlement.mined), and the node holds nothing
// behind a nonce gap.
func TestAnvil_ReorganisationUndoesSettlements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node, db, base := startFollowing(ctx, t)

	const first = 40
	price := big.NewInt(10_000)
	payer := devPayer(t, 6)
	payTo := devAddress(t, devchain.PayToAccount)
	payerBefore, payToBefore := usdcBalance(ctx, t, node.Client, payer.Address()), usdcBalance(ctx, t, node.Client, payTo)
	payDiffs(ctx, t, base, payer, first)
	require.Equal(t, new(big.Int).Mul(price, big.NewInt(first)), new(big.Int).Sub(usdcBalance(ctx, t, node.Client, payTo), payToBefore))
	var pending int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(sum(cardinality(calls)), 0) FROM settlement_watch`).Scan(&pending))
	require.Equal(t, first, pending, "every settlement awaits finality")

	// Paid load goes on through the reorganisation.
	type result struct {
		rep *loadgen.Report
		err error
	}
	done := make(chan result, 1)
	client, recorder := loadClient(16)
	go func() {
		rep, err := loadgen.Run(ctx, loadgen.Config{BaseURL: base, Requests: []loadgen.Request{{Op: "diff", Body: `{"a":"one\ntwo\n","b":"one\n2\n"}`}},
			Payer: payer, Client: client, Concurrency: 16, Duration: 5 * time.Second, Retry: true, RetryFor: 90 * time.Second})
		done <- result{rep, err}
	}()
	awaitAnswers(t, recorder, http.StatusOK, 16)
	reorgWatched(ctx, t, node, db)
	require.NoError(t, node.Call(ctx, nil, "anvil_dropAllTransactions"))
	res := <-done
	require.NoError(t, res.err)
	t.Log(res.rep)
	if res.rep.Statuses[http.StatusOK] != res.rep.Calls {
		logUnpaid(ctx, t, db, res.rep)
	}
	require.Equal(t, res.rep.Calls, res.rep.Statuses[http.StatusOK], res.rep.String())
	calls := first + res.rep.Calls

	require.Eventually(t, func() bool {
		var left int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM settlement_watch`).Scan(&left))
		return left == 0
	}, 90*time.Second, 200*time.Millisecond, "settlements still await finality")
	total := new(big.Int).Mul(price, big.NewInt(int64(calls)))
	require.Equal(t, total, new(big.Int).Sub(usdcBalance(ctx, t, node.Client, payTo), payToBefore), "the receiver holds every price once")
	require.Equal(t, total, new(big.Int).Sub(payerBefore, usdcBalance(ctx, t, node.Client, payer.Address())), "the payer paid every price once")

	// The ledger: each call confirmed once and never lost, the first 40
	// undone and settled again (the same transaction mined again, or
	// another), and settlement.final events naming every call.
	var paid, confirmedOnce, resent, lost, final int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM calls WHERE state = 'paid'`).Scan(&paid))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT stream FROM events WHERE type = $1 GROUP BY stream HAVING count(*) = 1) c`,
		store.EventSettlementConfirmed).Scan(&confirmedOnce))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(DISTINCT stream) FROM events WHERE type = $1`, store.EventSettlementResent).Scan(&resent))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = $1`, store.EventSettlementLost).Scan(&lost))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(sum((data->>'calls')::int), 0) FROM events WHERE type = $1 AND stream = $2`,
		store.EventSettlementFinal, store.ChainStream("eip155:8453")).Scan(&final))
	require.Equal(t, calls, paid)
	require.Equal(t, calls, confirmedOnce)
	require.GreaterOrEqual(t, resent, first, "every settlement undone was made again")
	require.Zero(t, lost)
	require.Equal(t, calls, final)
	require.Equal(t, calls, settlementBlocks(ctx, t, db.Pool).Confirmed, "each call's block in its transaction's settlement.mined")
	requireNodeClean(t, node)
}

// TestAnvil_ReorganisationAfterExpiryIsLost pays a call, moves anvil's
// clock an hour on (past the authorization's validBefore) and undoes the
// block of its settlement: the settlement cannot be made again, and the
// call is recorded lost with its amount, its result still delivered.
func TestAnvil_ReorganisationAfterExpiryIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node, db, base := startFollowing(ctx, t)

	payer := devPayer(t, 7)
	payTo := devAddress(t, devchain.PayToAccount)
	payToBefore := usdcBalance(ctx, t, node.Client, payTo)
	payDiffs(ctx, t, base, payer, 1)
	reorgWatched(ctx, t, node, db)
	// After the reorganisation, which sets the clock back to its blocks'.
	require.NoError(t, node.Call(ctx, nil, "evm_increaseTime", 3600))

	var state string
	require.Eventually(t, func() bool {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM calls`).Scan(&state))
		return state == store.CallLost
	}, 60*time.Second, 200*time.Millisecond, "the call is not recorded lost")
	var amount, reason string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT data->>'amount', data->>'reason' FROM events WHERE type = $1`, store.EventSettlementLost).Scan(&amount, &reason))
	require.Equal(t, "10000", amount)
	require.Equal(t, "invalid_exact_evm_payload_authorization_valid_before", reason)
	require.Equal(t, payToBefore, usdcBalance(ctx, t, node.Client, payTo), "the receiver got nothing")
	list, err := store.FinalityList(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, int64(1), list[0].LostCalls)
	require.Equal(t, "10000", list[0].LostAmount)
	require.Zero(t, list[0].PendingCalls)
	requireNodeClean(t, node)
}

// logUnpaid logs the calls of rep not answered 200 and the events of each
// call that did not end paid.
func logUnpaid(ctx context.Context, t *testing.T, db *dbtest.DB, rep *loadgen.Report) {
	t.Helper()
	for _, o := range rep.Outcomes {
		if o.Status != http.StatusOK {
			t.Logf("not 200: %+v", o)
		}
	}
	rows, err := db.Pool.Query(ctx, `SELECT e.stream, e.type, e.data::text FROM events e JOIN calls c ON e.stream = 'call/' || c.id
		WHERE c.state <> 'paid' ORDER BY e.id`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var stream, typ, data string
		require.NoError(t, rows.Scan(&stream, &typ, &data))
		t.Logf("%s %s %s", stream, typ, data)
	}
}
