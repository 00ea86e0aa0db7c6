package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402"
)

// pendingSettler leaves every settlement pending in transaction tx, as a
// facilitator that answers settlement_pending and then, asked again by a
// process that does not know of its transaction, the same; it settles a
// payment in tx once told of it (SettlePending), as a facilitator client
// that follows the transaction does.
type pendingSettler struct {
	tx       string
	mu       sync.Mutex
	followed []string
}

func (s *pendingSettler) Settle(context.Context, *x402.Payment) (*x402.SettleResponse, error) {
	return nil, &x402.PendingError{Transaction: s.tx}
}

func (s *pendingSettler) SettlePending(_ context.Context, p *x402.Payment, tx string) (*x402.SettleResponse, error) {
	s.mu.Lock()
	s.followed = append(s.followed, tx)
	s.mu.Unlock()
	return &x402.SettleResponse{Success: true, Transaction: tx, Network: p.Network, Payer: p.Payer}, nil
}

// TestSettlePendingRecorded runs a paid call whose settlement is left
// pending: the transaction is recorded with the call (settlement.submitted)
// and the settlement job follows it, and the call is paid in that
// transaction, its result released.
func TestSettlePendingRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const tx = "0x7e57000000000000000000000000000000000000000000000000000000000001"
	settler := &pendingSettler{tx: tx}
	client, err := worker.NewClient(&worker.Deps{
		Pool: db.Pool, Settler: settler, Logger: slog.New(slog.DiscardHandler),
		Ops: []worker.Op{worker.Bind(napOp, nap, false)},
	}, &worker.Config{Work: true, FetchPollInterval: 50 * time.Millisecond, SettleGrace: time.Minute})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, worker.Stop(client, 5*time.Second)) })

	const id = "pending"
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(dbtx pgx.Tx) error {
		payment := x402.Payment{Network: "eip155:8453", Payer: "0xpayer", Nonce: id, Amount: "10000", Payload: json.RawMessage(`{}`)}
		verified := store.PaymentVerified{Op: "nap", Token: "tok", RequestHash: []byte(id), Payment: payment}
		res, err := client.InsertTx(ctx, dbtx, jobs.Args[napInput]{CallID: id, Network: "eip155:8453", Input: napInput{}}, &river.InsertOpts{Queue: jobs.QueuePure, MaxAttempts: 1})
		if err != nil {
			return err
		}
		return store.Append(ctx, dbtx, store.NewEvent{Stream: store.CallStream(id), Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: verified, JobID: res.Job.ID}})
	}))
	var call *store.Call
	require.Eventually(t, func() bool {
		c, err := store.CallGetByID(ctx, db.Pool, id)
		require.NoError(t, err)
		call = c
		return store.IsFinal(c.State)
	}, 30*time.Second, 20*time.Millisecond, "the call never ended")
	require.Equal(t, store.CallPaid, call.State)
	require.NotNil(t, call.Settlement)
	require.Equal(t, tx, call.Settlement.Transaction)
	settler.mu.Lock()
	require.Equal(t, []string{tx}, settler.followed)
	settler.mu.Unlock()

	events, err := store.EventListByStream(ctx, db.Pool, store.CallStream(id))
	require.NoError(t, err)
	recorded := false
	for _, e := range events {
		var s store.SettlementSubmitted
		if e.Type == store.EventSettlementSubmitted && e.Decode(&s) == nil && s.Transaction == tx {
			recorded = true
		}
	}
	require.True(t, recorded, "the pending transaction is recorded with the call")
}
