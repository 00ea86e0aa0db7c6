package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// TestCallRowForms: a worker writes a settled call's row in ledger form 2
// (the result without its call_id and op, the response packed in receipt)
// or, with Form1, in form 1 (the result whole, the response as the
// settlement column's JSON object, which an api of a release before
// migration 016 answers from); every reader reads both alike, and a refused settlement keeps its JSON object in either.
func TestCallRowForms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const hash = "0x6e903cbc43593f02da852e18c9d8988cf9e22542bde8e1e4356ff630739b092c"
	const moved = "0x1111111111111111111111111111111111111111111111111111111111111111"
	settled := x402.SettleResponse{Success: true, Payer: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f", Transaction: hash, Network: "eip155:8453"}
	refused := x402.SettleResponse{ErrorReason: "invalid_exact_evm_nonce_used", Payer: "0xabc", Network: "eip155:8453"}

	// row is a call's row as stored, and as read.
	type row struct {
		result, settlement string
		receipt            []byte
	}
	stored := func(t *testing.T, id string) row {
		t.Helper()
		var r row
		var result, settlement *string
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT result::text, settlement::text, receipt FROM calls WHERE id = $1", id).Scan(&result, &settlement, &r.receipt))
		if result != nil {
			r.result = *result
		}
		if settlement != nil {
			r.settlement = *settlement
		}
		return r
	}
	run := func(t *testing.T, id string, form1 bool, outcome string, response x402.SettleResponse) *store.Call {
		t.Helper()
		s := store.CallStream(id)
		require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: s, Type: store.EventPaymentVerified, Data: verified(id)}))
		require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: s, Type: store.EventJobSucceeded,
			Data: store.JobSucceeded{JobID: 1, Result: resultOf(id, `"x":[1,2]`), Op: "diff", Form1: form1}}))
		require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: s, Type: outcome,
			Data: store.SettlementDone{Response: response, Form1: form1}}))
		c, err := store.CallGetByID(ctx, db.Pool, id)
		require.NoError(t, err)
		a, err := store.CallGetAnswer(ctx, db.Pool, id)
		require.NoError(t, err)
		require.Equal(t, c.Result, a.Result)
		require.Equal(t, c.Settlement, a.Settlement)
		return c
	}

	for _, form1 := range []bool{false, true} {
		id := map[bool]string{false: "form2", true: "form1"}[form1]
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			c := run(t, id, form1, store.EventSettlementConfirmed, settled)
			require.Equal(t, store.CallPaid, c.State)
			require.Equal(t, string(resultOf(id, `"x":[1,2]`)), string(c.Result), "the result, byte for byte")
			require.Equal(t, &settled, c.Settlement)

			r := stored(t, id)
			if form1 {
				require.Equal(t, string(resultOf(id, `"x":[1,2]`)), r.result)
				var s x402.SettleResponse
				require.NoError(t, json.Unmarshal([]byte(r.settlement), &s))
				require.Equal(t, settled, s, "the settlement column answers as before")
				require.Nil(t, r.receipt)
			} else {
				require.Equal(t, `{"x":[1,2]}`, r.result)
				require.Empty(t, r.settlement)
				require.Len(t, r.receipt, 61)
			}

			// A reorganisation's new settlement replaces the old in either form.
			again := settled
			again.Transaction = moved
			require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: store.CallStream(id), Type: store.EventSettlementResent,
				Data: store.SettlementResent{Previous: hash, Response: again, Form1: form1}}))
			c, err := store.CallGetAnswer(ctx, db.Pool, id)
			require.NoError(t, err)
			require.Equal(t, &again, c.Settlement)

			refusedID := id + "-refused"
			c = run(t, refusedID, form1, store.EventSettlementFailed, refused)
			require.Equal(t, store.CallUnpaid, c.State)
			require.Equal(t, &refused, c.Settlement)
			require.Nil(t, stored(t, refusedID).receipt, "a refusal keeps its JSON object, whose reason /ops lists")
		})
	}

	// A row written whole reads back whole (form 1).
	t.Run("resent over form 1", func(t *testing.T) {
		t.Parallel()
		id := "mixed"
		run(t, id, true, store.EventSettlementConfirmed, settled)
		again := settled
		again.Transaction = moved
		require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: store.CallStream(id), Type: store.EventSettlementResent,
			Data: store.SettlementResent{Previous: hash, Response: again}}))
		c, err := store.CallGetByID(ctx, db.Pool, id)
		require.NoError(t, err)
		require.Equal(t, &again, c.Settlement, "the packed response replaces the JSON object")
		require.Empty(t, stored(t, id).settlement)
	})
}

// TestCallPaidWithResult: calls whose result and settlement one Append
// records (a voucher's charge settled in the results transaction) are
// moved from running to paid by one update each, the row as the two
// Appends of TestCallRowForms write it; one no longer running refuses the
// Append.
func TestCallPaidWithResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	settled := x402.SettleResponse{Success: true, Payer: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f", Network: "eip155:8453",
		Extra: json.RawMessage(`{"chargedAmount":"10000"}`)}
	ids := []string{"apart", "together-1", "together-2"}
	for _, id := range ids {
		require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: store.CallStream(id), Type: store.EventPaymentVerified, Data: verified(id)}))
	}
	succeeded := func(id string) store.NewEvent {
		return store.NewEvent{Stream: store.CallStream(id), Type: store.EventJobSucceeded,
			Data: store.JobSucceeded{JobID: 1, Result: resultOf(id, `"x":[1,2]`), Op: "diff"}}
	}
	confirmed := func(id string) store.NewEvent {
		return store.NewEvent{Stream: store.CallStream(id), Type: store.EventSettlementConfirmed, Data: store.SettlementDone{Response: settled}}
	}
	require.NoError(t, appendTx(ctx, t, db, succeeded("apart")))
	require.NoError(t, appendTx(ctx, t, db, confirmed("apart")))

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// The view counts the connection's updates not yet reported, of this
	// transaction and of those before it.
	updates := func() (n int64) {
		require.NoError(t, tx.QueryRow(ctx, "SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relid = 'calls'::regclass").Scan(&n))
		return n
	}
	before := updates()
	require.NoError(t, store.Append(ctx, tx, succeeded("together-1"), succeeded("together-2"), confirmed("together-1"), confirmed("together-2")))
	require.Equal(t, int64(2), updates()-before, "one update a call")
	require.NoError(t, tx.Commit(ctx))

	type row struct {
		State   string
		Result  string
		Receipt []byte
	}
	read := func(id string) row {
		var r row
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT state, result::text, receipt FROM calls WHERE id = $1", id).Scan(&r.State, &r.Result, &r.Receipt))
		return r
	}
	apart := read("apart")
	require.Equal(t, store.CallPaid, apart.State)
	for _, id := range ids[1:] {
		require.Equal(t, apart, read(id), id)
		c, err := store.CallGetAnswer(ctx, db.Pool, id)
		require.NoError(t, err)
		require.Equal(t, &settled, c.Settlement)
		require.Equal(t, string(resultOf(id, `"x":[1,2]`)), string(c.Result))
	}

	// Paid already: the pair finds no running call.
	require.ErrorIs(t, appendTx(ctx, t, db, succeeded("apart"), confirmed("apart")), store.ErrConflict)
}
