package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402"
)

// scriptedFinality is a chain whose settlement transactions go through the
// states of its rounds, one round a Follow; Carried answers carried for
// each payment, by payer.
type scriptedFinality struct {
	rounds  []x402.FollowedTx
	carried map[string]bool
}

func (f *scriptedFinality) Follow(_ context.Context, _ string, txs []x402.FollowedTx) (uint64, error) {
	next := f.rounds[0]
	f.rounds = f.rounds[1:]
	for i := range txs {
		txs[i].State, txs[i].Block = next.State, next.Block
	}
	return next.Block.Number, nil
}

func (f *scriptedFinality) Carried(_ context.Context, _, _ string, payments []*x402.Payment) ([]bool, error) {
	out := make([]bool, len(payments))
	for i, p := range payments {
		out[i] = f.carried[p.Payer]
	}
	return out, nil
}

func (f *scriptedFinality) Keep(context.Context, string) {}

// TestFinalityReadsBothStreams follows a settlement transaction that
// carried two calls, one whose stream is unfolded, as before migration 011
// (payment.verified … settlement.submitted) and one written now (call.paid,
// folded job.succeeded, its block recorded once for the transaction in a
// settlement.mined): a reorganisation mines it again elsewhere, still
// carrying the first call's transfer (settlement.resent names it there, with
// the payer read from payment.verified) but not the second's, which is
// settled again with the payment read from call.paid; the transaction's
// next round finds it final. The watch holds one row for the transaction
// throughout, none a call.
func TestFinalityReadsBothStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network, batch = "eip155:8453", "0xbatch"
	confirmed := store.SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: batch, Network: network}, Block: &x402.SettledBlock{Number: 10, Hash: "0xb10"}}
	payment := func(payer, nonce string) x402.Payment {
		return x402.Payment{Network: network, Payer: payer, Nonce: nonce, Amount: "10000", Payload: json.RawMessage(`{"header":"test:` + payer + `:` + nonce + `"}`)}
	}
	old, folded := store.CallStream("old"), store.CallStream("folded")
	verifiedOld := store.PaymentVerified{Op: "nap", Token: "t1", RequestHash: []byte{1}, Payment: payment("0xold", "n-old")}
	verifiedNew := store.PaymentVerified{Op: "nap", Token: "t2", RequestHash: []byte{2}, Payment: payment("0xnew", "n-new")}
	result := func(id string) json.RawMessage { return json.RawMessage(`{"call_id":"` + id + `","op":"nap"}`) }
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return store.Append(ctx, tx,
			store.NewEvent{Stream: old, Type: store.EventPaymentVerified, Data: verifiedOld},
			store.NewEvent{Stream: old, Type: store.EventJobQueued, Data: store.JobQueued{JobID: 1, Queue: "pure"}},
			store.NewEvent{Stream: old, Type: store.EventJobStarted, Data: store.JobStarted{JobID: 1, Attempt: 1}},
			store.NewEvent{Stream: old, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 1, Result: result("old")}},
			store.NewEvent{Stream: old, Type: store.EventSettlementSubmitted, Data: store.SettlementSubmitted{JobID: 2, Network: network, Attempt: 1}},
			store.NewEvent{Stream: folded, Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: verifiedNew, JobID: 3}},
			store.NewEvent{Stream: folded, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 3, Attempt: 1, Result: result("folded"), SettleJobID: 4}})
	}))
	// The old call's settlement as releases before settlement.mined
	// recorded it (its
	// block in its settlement.confirmed, its row written by WatchAdd), the
	// other's as recorded now (the block in the transaction's
	// settlement.mined).
	minedNow := confirmed
	minedNow.Block = nil
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := store.Append(ctx, tx,
			store.NewEvent{Stream: store.ChainStream(network), Type: store.EventSettlementMined,
				Data: store.SettlementMined{Transaction: batch, Block: *confirmed.Block, Calls: []string{"folded"}}},
			store.NewEvent{Stream: old, Type: store.EventSettlementConfirmed, Data: confirmed},
			store.NewEvent{Stream: folded, Type: store.EventSettlementConfirmed, Data: minedNow}); err != nil {
			return err
		}
		return store.WatchAdd(ctx, tx, []store.Watched{{CallID: "old", Network: network, Transaction: batch, Block: *confirmed.Block}})
	}))
	watchRows := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM settlement_watch").Scan(&n))
		return n
	}
	require.Equal(t, 1, watchRows(), "one row for the transaction's two calls")

	moved := x402.SettledBlock{Number: 11, Hash: "0xb11"}
	chain := &scriptedFinality{
		rounds:  []x402.FollowedTx{{State: x402.TxMoved, Block: moved}, {State: x402.TxFinal, Block: moved}},
		carried: map[string]bool{"0xold": true},
	}
	f, err := worker.NewFollower(&worker.FollowerConfig{Pool: db.Pool, Finality: chain, Settler: &paytest.Payments{}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, f.Round(ctx))
	require.Equal(t, 1, watchRows())

	last := func(stream string) (string, store.SettlementResent) {
		events, err := store.EventListByStream(ctx, db.Pool, stream)
		require.NoError(t, err)
		e := events[len(events)-1]
		var v store.SettlementResent
		require.NoError(t, e.Decode(&v))
		return e.Type, v
	}
	typ, resent := last(old)
	require.Equal(t, store.EventSettlementResent, typ)
	require.Equal(t, x402.SettleResponse{Success: true, Transaction: batch, Network: network, Payer: "0xold"}, resent.Response)
	require.Equal(t, &moved, resent.Block)
	typ, resent = last(folded)
	require.Equal(t, store.EventSettlementResent, typ)
	require.Equal(t, batch, resent.Previous)
	require.Equal(t, paytest.TxHash("n-new"), resent.Response.Transaction, "settled again with the payment call.paid holds")
	require.Equal(t, "0xnew", resent.Response.Payer)

	require.NoError(t, f.Round(ctx))
	require.Zero(t, watchRows())
	var final store.SettlementFinal
	var data []byte
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT data FROM events WHERE stream = $1 AND type = $2",
		store.ChainStream(network), store.EventSettlementFinal).Scan(&data))
	require.NoError(t, json.Unmarshal(data, &final))
	require.Equal(t, store.SettlementFinal{Block: 11, Transactions: []string{batch}, Calls: 1, Amount: "10000"}, final)
	for _, id := range []string{"old", "folded"} {
		c, err := store.CallGetByID(ctx, db.Pool, id)
		require.NoError(t, err)
		require.Equal(t, store.CallPaid, c.State, id)
	}
}
