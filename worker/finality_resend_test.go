package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402"
)

// interruptedSettler settles as paytest.Payments does and, on its second
// settlement, ends the round's context first: the process stopping while
// the round sends its settlements again.
type interruptedSettler struct {
	paytest.Payments
	stop    context.CancelFunc
	settled []string
}

func (s *interruptedSettler) Settle(ctx context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	if len(s.settled) == 1 {
		s.stop()
	}
	resp, err := s.Payments.Settle(context.WithoutCancel(ctx), p)
	if err == nil && resp.Success {
		s.settled = append(s.settled, p.Nonce)
	}
	return resp, err
}

// TestFollowerRecordsEachResend: a transaction that carried two calls is
// gone after a reorganisation and the follower settles both again; the
// round is interrupted after the first settlement went out (its context
// ends as the second is sent). Each settlement made again is recorded
// (settlement.resent, the call out of the gone transaction's watch and
// into its new one's): a later step failing never takes back the record of
// a settlement already on chain.
func TestFollowerRecordsEachResend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network, batch = "eip155:8453", "0xbatch"
	block := x402.SettledBlock{Number: 10, Hash: "0xb10"}
	ids := []string{"first", "second"}
	for i, id := range ids {
		verified := store.PaymentVerified{Op: "nap", Token: "t-" + id, RequestHash: []byte{byte(i + 1)},
			Payment: x402.Payment{Network: network, Payer: "0x" + id, Nonce: "n-" + id, Amount: "10000",
				Payload: json.RawMessage(`{"header":"test:` + id + `"}`)}}
		stream := store.CallStream(id)
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			return store.Append(ctx, tx,
				store.NewEvent{Stream: stream, Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: verified, JobID: int64(2*i + 1)}},
				store.NewEvent{Stream: stream, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: int64(2*i + 1), Attempt: 1,
					Result: json.RawMessage(`{"call_id":"` + id + `"}`), SettleJobID: int64(2*i + 2)}})
		}))
	}
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		events := []store.NewEvent{{Stream: store.ChainStream(network), Type: store.EventSettlementMined,
			Data: store.SettlementMined{Transaction: batch, Block: block, Calls: ids}}}
		for _, id := range ids {
			events = append(events, store.NewEvent{Stream: store.CallStream(id), Type: store.EventSettlementConfirmed,
				Data: store.SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: batch, Network: network}}})
		}
		return store.Append(ctx, tx, events...)
	}))
	// The transaction has been in no block for long.
	_, err := db.Pool.Exec(ctx, `UPDATE settlement_watch SET gone_since = $1`, time.Now().Add(-time.Hour))
	require.NoError(t, err)

	roundCtx, stop := context.WithCancel(ctx)
	defer stop()
	settler := &interruptedSettler{stop: stop}
	chain := &scriptedFinality{rounds: []x402.FollowedTx{{State: x402.TxGone, Block: block}}}
	f, err := worker.NewFollower(&worker.FollowerConfig{Pool: db.Pool, Finality: chain, Settler: settler, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	_ = f.Round(roundCtx)
	require.Equal(t, []string{"n-first", "n-second"}, settler.settled, "both settlements went out")

	for _, id := range ids {
		events, err := store.EventListByStream(ctx, db.Pool, store.CallStream(id))
		require.NoError(t, err)
		e := events[len(events)-1]
		require.Equal(t, store.EventSettlementResent, e.Type, "%s: its settlement made again is recorded", id)
		var resent store.SettlementResent
		require.NoError(t, e.Decode(&resent))
		require.Equal(t, batch, resent.Previous)
		require.Equal(t, paytest.TxHash("n-"+id), resent.Response.Transaction)
	}
	var calls []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(c ORDER BY c), '{}') FROM settlement_watch, unnest(calls) c WHERE tx_hash = $1`, batch).Scan(&calls))
	require.Empty(t, calls, "no call is left with the gone transaction")
}

// TestFollowerOneProcessANetwork: while another session holds a
// network's follow lock (another worker process following it), a round
// leaves the network alone; once the lock is let go, the next round
// records its final transaction.
func TestFollowerOneProcessANetwork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network = "eip155:8453"
	block := x402.SettledBlock{Number: 10, Hash: "0xb10"}
	_, err := db.Pool.Exec(ctx, `INSERT INTO settlement_watch (network, tx_hash, block, block_hash, calls, amount) VALUES ($1, '0xt', 10, '0xb10', '{c}', 10000)`, network)
	require.NoError(t, err)

	other, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer other.Release()
	mine, err := store.WatchFollowLock(ctx, other, network)
	require.NoError(t, err)
	require.True(t, mine)

	chain := &scriptedFinality{rounds: []x402.FollowedTx{{State: x402.TxFinal, Block: block}}}
	f, err := worker.NewFollower(&worker.FollowerConfig{Pool: db.Pool, Finality: chain, Settler: &paytest.Payments{}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	watched := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM settlement_watch").Scan(&n))
		return n
	}
	require.NoError(t, f.Round(ctx))
	require.Equal(t, 1, watched(), "followed by the other process")
	require.Len(t, chain.rounds, 1, "the chain not asked")

	require.NoError(t, store.WatchFollowUnlock(ctx, other, network))
	require.NoError(t, f.Round(ctx))
	require.Zero(t, watched(), "final")
}
