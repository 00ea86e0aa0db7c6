package api

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

type admitTestArgs struct {
	N int `json:"n"`
}

func (admitTestArgs) Kind() string { return "admit_test" }

// TestAdmitter queues calls that arrive while every writer is busy, one of
// them paying with a payment already used: the others are written together
// (one transaction, one job insert), the reused payment alone is refused, and
// every call has its job and its two events.
func TestAdmitter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	a := &admitter{pool: db.Pool, river: rc}

	call := func(i int, nonce string) *admission {
		return &admission{
			callID: fmt.Sprintf("call%03d", i),
			verified: store.PaymentVerified{Op: "diff", Token: "tok", RequestHash: []byte{1},
				Payment: x402.Payment{Network: "eip155:8453", Payer: "0xabc", Nonce: nonce, Amount: "1", Payload: json.RawMessage(`{}`)}},
			job: river.InsertManyParams{Args: admitTestArgs{N: i}, InsertOpts: &river.InsertOpts{Queue: "pure"}},
		}
	}
	// Every writer's place is taken: the calls wait, in this order.
	a.inFlight = admitInFlight
	const n = 200
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		nonce := fmt.Sprintf("n%d", i)
		if i == n {
			nonce = "n150" // the payment of call 150, again
		}
		wg.Go(func() { errs[i] = a.admit(ctx, call(i, nonce)) })
		require.Eventually(t, func() bool {
			a.mu.Lock()
			defer a.mu.Unlock()
			return len(a.pending) == i+1
		}, 5*time.Second, time.Millisecond)
	}
	// The writers come back: the first takes admitBatch calls, then the rest.
	for range admitInFlight {
		for a.writeNext(ctx) {
		}
	}
	wg.Wait()
	for i, err := range errs {
		if i == n {
			require.ErrorIs(t, err, store.ErrConflict, "the payment of call 150, used again")
			continue
		}
		require.NoError(t, err, "call %d", i)
	}
	require.Zero(t, a.inFlight)

	var calls, jobs, firstBatch int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls").Scan(&calls))
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'admit_test'").Scan(&jobs))
	require.Equal(t, n, calls)
	require.Equal(t, n, jobs, "the refused call's job was rolled back")
	// The first admitBatch calls were one transaction (one event time).
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM events
		WHERE type = 'payment.verified' AND created_at = (SELECT created_at FROM events WHERE stream = 'call/call000' LIMIT 1)`).Scan(&firstBatch))
	require.Equal(t, admitBatch, firstBatch)
	for i := range n {
		events, err := store.EventListByStream(ctx, db.Pool, store.CallStream(fmt.Sprintf("call%03d", i)))
		require.NoError(t, err)
		require.Len(t, events, 2)
		require.Equal(t, store.EventPaymentVerified, events[0].Type)
		require.Equal(t, store.EventJobQueued, events[1].Type)
		var queued store.JobQueued
		require.NoError(t, json.Unmarshal(events[1].Data, &queued))
		var arg int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT (args->>'n')::int FROM river_job WHERE id = $1", queued.JobID).Scan(&arg))
		require.Equal(t, i, arg, "call %d names its own job", i)
	}
}
