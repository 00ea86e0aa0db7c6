package codereview_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/codereview"
	"github.com/x402d/x402d/model/modeltest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402"
)

// countingSettler settles every payment and counts the settlements: a
// payment settled is a caller charged.
type countingSettler struct{ n atomic.Int32 }

func (s *countingSettler) Settle(_ context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	s.n.Add(1)
	return &x402.SettleResponse{Success: true, Transaction: "0x" + p.Nonce, Network: p.Network, Payer: p.Payer}, nil
}

// TestRiverRetryAndCharge runs code-review calls through River workers on a
// real database, with the model behind the fake Gemini server: a 429 is
// retried by River and the call is charged once it succeeds; a model that
// keeps failing makes the call fail, and nothing is settled.
func TestRiverRetryAndCharge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	fake := modeltest.NewServer(t)
	client := fake.Client(t)
	w, err := codereview.NewWorker(client, nil)
	require.NoError(t, err)

	settler := &countingSettler{}
	rc, err := worker.NewClient(&worker.Deps{
		Pool:    db.Pool,
		Settler: settler,
		Logger:  slog.New(slog.DiscardHandler),
		Ops:     []worker.Op{worker.Bind(codereview.Op, w.Work, true)},
	}, &worker.Config{Work: true, FetchPollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, rc.Start(ctx))
	t.Cleanup(func() { require.NoError(t, worker.Stop(rc, 10*time.Second)) })

	start := func(id string, maxAttempts int) {
		t.Helper()
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			stream := store.CallStream(id)
			if err := store.Append(ctx, tx, store.NewEvent{Stream: stream, Type: store.EventPaymentVerified, Data: store.PaymentVerified{
				Op: codereview.Kind, Token: "token-" + id, RequestHash: []byte(id),
				Payment: x402.Payment{Network: "eip155:8453", Payer: "0x00000000000000000000000000000000000000aa", Nonce: id, Amount: "750000"},
			}}); err != nil {
				return err
			}
			res, err := rc.InsertTx(ctx, tx, jobs.Args[codereview.Input]{CallID: id, Input: codereview.Input{Code: "eval(x)\n", Language: "python"}},
				&river.InsertOpts{Queue: jobs.QueueModel, MaxAttempts: maxAttempts})
			if err != nil {
				return err
			}
			return store.Append(ctx, tx, store.NewEvent{Stream: stream, Type: store.EventJobQueued, Data: store.JobQueued{JobID: res.Job.ID, Queue: jobs.QueueModel}})
		})
		require.NoError(t, err)
	}
	listener := store.NewListener(db.Pool.Config().ConnConfig, slog.New(slog.DiscardHandler))
	require.NoError(t, listener.Start(ctx))
	t.Cleanup(listener.Stop)
	// waitFinal reads the call again each time its stream is appended to,
	// until it is final.
	waitFinal := func(id string) *store.Call {
		t.Helper()
		sub := listener.Subscribe(store.CallStream(id))
		defer sub.Close()
		timeout := time.After(30 * time.Second)
		for {
			call, err := store.CallGetByID(ctx, db.Pool, id)
			require.NoError(t, err)
			if store.IsFinal(call.State) {
				return call
			}
			select {
			case <-sub.C:
			case <-timeout:
				t.Fatalf("call %s did not finish", id)
			}
		}
	}

	// A rate limit, then an answer: retried, delivered, charged once.
	fake.Enqueue(modeltest.ErrorReply(http.StatusTooManyRequests, "Resource has been exhausted (e.g. check quota)."))
	start("ratelimited", 3)
	call := waitFinal("ratelimited")
	require.Equal(t, store.CallPaid, call.State)
	require.Len(t, fake.Requests(), 2, "one failed request, one retried")
	require.Equal(t, int32(1), settler.n.Load())
	var result map[string]any
	require.NoError(t, json.Unmarshal(call.Result, &result))
	require.Equal(t, "code-review", result["op"])
	require.Equal(t, "ratelimited", result["call_id"])

	// A model that keeps failing: the call fails after its attempts and the
	// payment is never settled.
	fake.SetHandler(func(*modeltest.Request) modeltest.Reply {
		return modeltest.ErrorReply(http.StatusServiceUnavailable, "The model is overloaded. Please try again later.")
	})
	start("overloaded", 2)
	call = waitFinal("overloaded")
	require.Equal(t, store.CallFailed, call.State)
	require.Len(t, fake.Requests(), 4, "two attempts")
	require.Equal(t, int32(1), settler.n.Load(), "nothing settled for the failed call")
}
