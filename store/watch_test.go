package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// paidCall appends the events of a paid call id, settled by transaction tx:
// folded (call.paid, job.succeeded with its start and submission) as
// written since migration 011, or unfolded as before it.
func paidCall(ctx context.Context, t *testing.T, db *dbtest.DB, id, tx string, folded bool) {
	t.Helper()
	s := store.CallStream(id)
	confirmed := store.NewEvent{Stream: s, Type: store.EventSettlementConfirmed, Data: store.SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: tx, Network: "eip155:8453"}}}
	if folded {
		require.NoError(t, appendTx(ctx, t, db,
			store.NewEvent{Stream: s, Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: verified(id), JobID: 1}},
			store.NewEvent{Stream: s, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 1, Attempt: 1, Result: resultOf(id, ""), SettleJobID: 2}},
			confirmed))
		return
	}
	require.NoError(t, appendTx(ctx, t, db,
		store.NewEvent{Stream: s, Type: store.EventPaymentVerified, Data: verified(id)},
		store.NewEvent{Stream: s, Type: store.EventJobQueued, Data: store.JobQueued{JobID: 1, Queue: "pure"}},
		store.NewEvent{Stream: s, Type: store.EventJobStarted, Data: store.JobStarted{JobID: 1, Attempt: 1}},
		store.NewEvent{Stream: s, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 1, Result: resultOf(id, "")}},
		store.NewEvent{Stream: s, Type: store.EventSettlementSubmitted, Data: store.SettlementSubmitted{JobID: 2, Network: "eip155:8453", Attempt: 1}},
		confirmed))
}

// inTx runs f in a transaction of db and commits it.
func inTx(ctx context.Context, t *testing.T, db *dbtest.DB, f func(tx pgx.Tx) error) {
	t.Helper()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, f(tx))
	require.NoError(t, tx.Commit(ctx))
}

// TestWatch follows three paid calls in two transactions, one call's stream
// unfolded (as before migration 011): the rows group the calls of a
// transaction with their prices (one row a transaction, none a call), a second worker skips the
// rows a first one holds, a call taken out leaves its row, a final
// transaction is one settlement.final event, and a lost call counts in the
// network's losses.
func TestWatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network = "eip155:8453"
	b1 := x402.SettledBlock{Number: 10, Hash: "0xb1"}
	b2 := x402.SettledBlock{Number: 11, Hash: "0xb2"}
	for i, tx := range []string{"0xt1", "0xt1", "0xt2"} {
		paidCall(ctx, t, db, fmt.Sprintf("c%d", i), tx, i > 0)
	}
	inTx(ctx, t, db, func(tx pgx.Tx) error {
		return store.WatchAdd(ctx, tx, []store.Watched{
			{CallID: "c0", Network: network, Transaction: "0xt1", Block: b1},
			{CallID: "c1", Network: network, Transaction: "0xt1", Block: b1},
		})
	})
	inTx(ctx, t, db, func(tx pgx.Tx) error {
		return store.WatchAdd(ctx, tx, []store.Watched{{CallID: "c2", Network: network, Transaction: "0xt2", Block: b2}})
	})
	var rows int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM settlement_watch").Scan(&rows))
	require.Equal(t, 2, rows, "one row a transaction")
	networks, err := store.WatchNetworkList(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, []string{network}, networks)

	tx1, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx1.Rollback(ctx) }()
	list, err := store.WatchList(ctx, tx1, network, 1)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "0xt1", list[0].Transaction)
	require.Equal(t, b1, list[0].Block)
	require.Equal(t, []string{"c0", "c1"}, list[0].Calls)
	require.Equal(t, "20000", list[0].Amount)
	require.True(t, list[0].GoneSince.IsZero())

	// The list locks nothing (the follower holds a lock of its own): a
	// reader meanwhile gets both rows.
	other, err := store.WatchList(ctx, db.Pool, network, 10)
	require.NoError(t, err)
	require.Len(t, other, 2)

	// c1 is made again elsewhere; t1 is final with c0 alone.
	require.NoError(t, store.WatchGone(ctx, tx1, network, "0xt1", time.Now()))
	require.NoError(t, store.WatchDrop(ctx, tx1, network, "0xt1", "c1"))
	list, err = store.WatchList(ctx, tx1, network, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"c0"}, list[0].Calls)
	require.Equal(t, "10000", list[0].Amount)
	require.False(t, list[0].GoneSince.IsZero())
	require.NoError(t, store.WatchMove(ctx, tx1, network, "0xt1", x402.SettledBlock{Number: 12, Hash: "0xb3"}))
	require.NoError(t, store.WatchFinal(ctx, tx1, network, 20, list[:1]))
	require.NoError(t, tx1.Commit(ctx))

	var data string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT data::text FROM events WHERE stream = $1 AND type = $2`,
		store.ChainStream(network), store.EventSettlementFinal).Scan(&data))
	require.JSONEq(t, `{"block":20,"transactions":["0xt1"],"calls":1,"amount":"10000"}`, data)

	// c2 is lost.
	require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: store.CallStream("c2"), Type: store.EventSettlementLost,
		Data: store.SettlementLost{Previous: "0xt2", Network: network, Amount: "10000", Reason: "invalid_exact_evm_payload_authorization_valid_before"}}))
	inTx(ctx, t, db, func(tx pgx.Tx) error { return store.WatchDrop(ctx, tx, network, "0xt2", "c2") })
	call, err := store.CallGetToSettle(ctx, db.Pool, "c2")
	require.NoError(t, err)
	require.Equal(t, store.CallLost, call.State)
	require.True(t, store.IsFinal(call.State))

	fin, err := store.FinalityList(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, []store.Finality{{Network: network, PendingCalls: 0, PendingAmount: "0", LostCalls: 1, LostAmount: "10000"}}, fin)
	networks, err = store.WatchNetworkList(ctx, db.Pool)
	require.NoError(t, err)
	require.Empty(t, networks)
}

// TestWatchMined records the settlements of four calls carried by one
// transaction: two in one transaction of the database with one
// settlement.mined, one in another with its own (a second group of the same
// batch), one as releases before settlement.mined did (its block in its
// settlement.confirmed, its row written by WatchAdd). The transaction has
// one row, with the first block recorded, the four calls and their prices;
// the confirmed events written with settlement.mined keep no block, the mined events no
// calls, and each confirmed event finds its block in the mined event
// appended with it; WatchBlockGet answers the row's block until the
// transaction is final.
func TestWatchMined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network, hash = "eip155:8453", "0xt1"
	b1 := x402.SettledBlock{Number: 10, Hash: "0xb1"}
	for _, id := range []string{"c0", "c1", "c2", "c3"} {
		s := store.CallStream(id)
		require.NoError(t, appendTx(ctx, t, db,
			store.NewEvent{Stream: s, Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: verified(id), JobID: 1}},
			store.NewEvent{Stream: s, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 1, Attempt: 1, Result: resultOf(id, ""), SettleJobID: 2}}))
	}
	confirmed := func(id string, block *x402.SettledBlock) store.NewEvent {
		return store.NewEvent{Stream: store.CallStream(id), Type: store.EventSettlementConfirmed,
			Data: store.SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: hash, Network: network}, Block: block}}
	}
	mined := func(block x402.SettledBlock, calls ...string) store.NewEvent {
		return store.NewEvent{Stream: store.ChainStream(network), Type: store.EventSettlementMined,
			Data: store.SettlementMined{Transaction: hash, Block: block, Calls: calls}}
	}
	require.NoError(t, appendTx(ctx, t, db, mined(b1, "c1", "c0"), confirmed("c0", nil), confirmed("c1", nil)))
	require.NoError(t, appendTx(ctx, t, db, mined(x402.SettledBlock{Number: 11, Hash: "0xb2"}, "c2"), confirmed("c2", nil)))
	inTx(ctx, t, db, func(tx pgx.Tx) error {
		if err := store.Append(ctx, tx, confirmed("c3", &b1)); err != nil {
			return err
		}
		return store.WatchAdd(ctx, tx, []store.Watched{{CallID: "c3", Network: network, Transaction: hash, Block: b1}})
	})

	inTx(ctx, t, db, func(tx pgx.Tx) error {
		list, err := store.WatchList(ctx, tx, network, 10)
		require.NoError(t, err)
		require.Len(t, list, 1, "one row a transaction")
		require.Equal(t, hash, list[0].Transaction)
		require.Equal(t, b1, list[0].Block, "the first block recorded")
		require.Equal(t, []string{"c0", "c1", "c2", "c3"}, list[0].Calls)
		require.Equal(t, "40000", list[0].Amount)
		return nil
	})

	chain, err := store.EventListByStream(ctx, db.Pool, store.ChainStream(network))
	require.NoError(t, err)
	require.Len(t, chain, 2)
	require.JSONEq(t, `{"transaction":"0xt1","block":10,"block_hash":"0xb1"}`, string(chain[0].Data), "hashes not of 32 bytes kept as they are")
	for id, want := range map[string]*store.Event{"c0": &chain[0], "c2": &chain[1], "c3": nil} {
		events, err := store.EventListByStream(ctx, db.Pool, store.CallStream(id))
		require.NoError(t, err)
		e := events[len(events)-1]
		require.Equal(t, store.EventSettlementConfirmed, e.Type)
		var done store.SettlementDone
		require.NoError(t, json.Unmarshal(e.Data, &done))
		if want == nil {
			require.Equal(t, &b1, done.Block, "%s: the form before settlement.mined keeps its block", id)
			continue
		}
		require.Nil(t, done.Block, id)
		require.Equal(t, want.CreatedAt, e.CreatedAt, "%s: recorded with its transaction's settlement.mined", id)
	}

	block, err := store.WatchBlockGet(ctx, db.Pool, network, hash)
	require.NoError(t, err)
	require.Equal(t, b1, block)
	inTx(ctx, t, db, func(tx pgx.Tx) error {
		list, err := store.WatchList(ctx, tx, network, 10)
		require.NoError(t, err)
		return store.WatchFinal(ctx, tx, network, 20, list)
	})
	_, err = store.WatchBlockGet(ctx, db.Pool, network, hash)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestWatchFollowLock: one session at a time holds a network's follow
// lock; the other networks' are apart; let go, it is another's to take.
func TestWatchFollowLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	one, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer one.Release()
	two, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer two.Release()
	for _, step := range []struct {
		name    string
		take    func() (bool, error)
		mine    bool
		release func() error
	}{
		{name: "free", take: func() (bool, error) { return store.WatchFollowLock(ctx, one, "eip155:8453") }, mine: true},
		{name: "held by the other session", take: func() (bool, error) { return store.WatchFollowLock(ctx, two, "eip155:8453") }},
		{name: "another network", take: func() (bool, error) { return store.WatchFollowLock(ctx, two, "eip155:84532") }, mine: true},
		{name: "let go", release: func() error { return store.WatchFollowUnlock(ctx, one, "eip155:8453") },
			take: func() (bool, error) { return store.WatchFollowLock(ctx, two, "eip155:8453") }, mine: true},
	} {
		if step.release != nil {
			require.NoError(t, step.release(), step.name)
		}
		mine, err := step.take()
		require.NoError(t, err, step.name)
		require.Equal(t, step.mine, mine, step.name)
	}
}

// TestWatchMinedConcurrently has two transactions of the database append,
// at once, the settlement.mined events of the same settlement transactions
// (two workers recording calls of the same batches, one found by the
// "authorization already used" path) in opposite orders, each followed by
// the settlement.confirmed events of its own calls: the rows of
// settlement_watch they both write are taken in one order, so neither
// waits for the other while holding what the other waits for (40P01). A
// third transaction holds the first and the last rows until both
// appenders wait, so that they start together; both then commit, and each
// transaction's row holds both appenders' calls.
func TestWatchMinedConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network, txs, rounds = "eip155:8453", 32, 3
	for round := range rounds {
		hashes := make([]string, txs)
		for i := range hashes {
			hashes[i] = fmt.Sprintf("0x%064x", round*txs+i)
		}
		// events are an appender's: its mined events in order (its call
		// of each transaction), then its calls' confirmed events.
		events := func(who string, order []string) []store.NewEvent {
			var mined, confirmed []store.NewEvent
			for _, h := range order {
				id := fmt.Sprintf("r%d-%s-%s", round, who, h[len(h)-4:])
				s := store.CallStream(id)
				require.NoError(t, appendTx(ctx, t, db,
					store.NewEvent{Stream: s, Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: verified(id), JobID: 1}},
					store.NewEvent{Stream: s, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 1, Attempt: 1, Result: resultOf(id, ""), SettleJobID: 2}}))
				mined = append(mined, store.NewEvent{Stream: store.ChainStream(network), Type: store.EventSettlementMined,
					Data: store.SettlementMined{Transaction: h, Block: x402.SettledBlock{Number: 10, Hash: "0xb1"}, Calls: []string{id}}})
				confirmed = append(confirmed, store.NewEvent{Stream: s, Type: store.EventSettlementConfirmed,
					Data: store.SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: h, Network: network}}})
			}
			return append(mined, confirmed...)
		}
		reversed := slices.Clone(hashes)
		slices.Reverse(reversed)
		appenders := [][]store.NewEvent{events("a", hashes), events("b", reversed)}

		holder, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = holder.Exec(ctx, `INSERT INTO settlement_watch (network, tx_hash, block, block_hash, calls, amount)
			SELECT $1, h, 1, '0xb0', '{}', 0 FROM unnest($2::text[]) AS h`, network, []string{hashes[0], hashes[txs-1]})
		require.NoError(t, err)
		pids := make([]uint32, len(appenders))
		errs := make(chan error, len(appenders))
		for i, evs := range appenders {
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			pids[i] = tx.Conn().PgConn().PID()
			go func() {
				defer func() { _ = tx.Rollback(ctx) }()
				if err := store.Append(ctx, tx, evs...); err != nil {
					errs <- err
					return
				}
				errs <- tx.Commit(ctx)
			}()
		}
		require.Eventually(t, func() bool {
			var waiting int
			require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE NOT granted AND pid = ANY($1)", pids).Scan(&waiting))
			return waiting == len(appenders)
		}, 10*time.Second, time.Millisecond, "both appenders wait for the holder")
		require.NoError(t, holder.Rollback(ctx))
		for range appenders {
			require.NoError(t, <-errs, "round %d", round)
		}

		list, err := store.WatchList(ctx, db.Pool, network, 2*txs*rounds)
		require.NoError(t, err)
		rows := map[string][]string{}
		for _, w := range list {
			rows[w.Transaction] = w.Calls
		}
		for _, h := range hashes {
			require.Len(t, rows[h], len(appenders), "round %d: %s holds both appenders' calls", round, h)
		}
	}
}
