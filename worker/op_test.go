package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402"
)

// napInput is a test operation that takes Ms milliseconds, or panics.
type napInput struct {
	Ms    int  `json:"ms"`
	Panic bool `json:"panic"`
}

func (napInput) Kind() string                { return "nap" }
func (napInput) Validate(*jobs.Limits) error { return nil }

var napOp = jobs.Define[napInput](jobs.Spec{Name: "nap", Price: "0.010000", Queue: jobs.QueuePure})

// flakyInput is a test operation, retried on failure, that fails its first
// run.
type flakyInput struct{}

func (flakyInput) Kind() string                { return "flaky" }
func (flakyInput) Validate(*jobs.Limits) error { return nil }

var flakyOp = jobs.Define[flakyInput](jobs.Spec{Name: "flaky", Price: "0.010000", Queue: jobs.QueuePure})

func nap(ctx context.Context, in napInput) (map[string]int, error) {
	if in.Panic {
		panic("nap went wrong")
	}
	select {
	case <-time.After(time.Duration(in.Ms) * time.Millisecond):
		return map[string]int{"ms": in.Ms}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// flakySettler fails the first settlement of the calls named in fail (by
// payment nonce, the call id in these tests), as an unreachable chain would,
// and holds the first of those named in stall until its context ends, as a
// chain that does not mine would.
type flakySettler struct {
	x402.Settler
	mu    sync.Mutex
	fail  map[string]bool
	stall map[string]bool
	tries map[string]int
}

func (s *flakySettler) Settle(ctx context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	s.mu.Lock()
	if s.tries == nil {
		s.tries = map[string]int{}
	}
	s.tries[p.Nonce]++
	failed := s.fail[p.Nonce] && s.tries[p.Nonce] == 1
	stalled := s.stall[p.Nonce] && s.tries[p.Nonce] == 1
	s.mu.Unlock()
	if failed {
		return nil, errors.New("chain unreachable")
	}
	if stalled {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Settler.Settle(ctx, p)
}

func (s *flakySettler) calls(nonce string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tries[nonce]
}

// TestOpRecordsItsStart checks when job.started is written: with the outcome
// for a quick run, on its own while a slow run still goes (the call shows as
// running), and a panicking operation fails its call instead of the process.
func TestOpRecordsItsStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	var flakyRuns atomic.Int32
	settler := &flakySettler{Settler: &paytest.Payments{}, fail: map[string]bool{"retried": true}, stall: map[string]bool{"stalled": true}}
	client, err := worker.NewClient(&worker.Deps{
		Pool: db.Pool, Settler: settler, Logger: slog.New(slog.DiscardHandler),
		Ops: []worker.Op{worker.Bind(napOp, nap, false), worker.Bind(flakyOp, func(context.Context, flakyInput) (map[string]int, error) {
			if flakyRuns.Add(1) == 1 {
				return nil, errors.New("upstream down")
			}
			return map[string]int{"runs": int(flakyRuns.Load())}, nil
		}, true)},
	}, &worker.Config{Work: true, FetchPollInterval: 50 * time.Millisecond, SettleGrace: 2 * time.Second})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, worker.Stop(client, 5*time.Second)) })

	// queue records a paid call as the api does (call.paid) and queues its
	// job; queueOld as an api of a release before migration 011 did
	// (payment.verified, job.queued).
	queueAs := func(t *testing.T, id string, in napInput, old bool) {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			stream := store.CallStream(id)
			payment := x402.Payment{Network: "eip155:8453", Payer: "0xpayer", Nonce: id, Amount: "10000", Payload: json.RawMessage(`{}`)}
			verified := store.PaymentVerified{Op: "nap", Token: "tok", RequestHash: []byte(id), Payment: payment}
			res, err := client.InsertTx(ctx, tx, jobs.Args[napInput]{CallID: id, Network: "eip155:8453", Input: in}, &river.InsertOpts{Queue: jobs.QueuePure, MaxAttempts: 1})
			if err != nil {
				return err
			}
			if !old {
				return store.Append(ctx, tx, store.NewEvent{Stream: stream, Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: verified, JobID: res.Job.ID}})
			}
			return store.Append(ctx, tx, store.NewEvent{Stream: stream, Type: store.EventPaymentVerified, Data: verified},
				store.NewEvent{Stream: stream, Type: store.EventJobQueued, Data: store.JobQueued{JobID: res.Job.ID, Queue: jobs.QueuePure}})
		}))
	}
	queue := func(t *testing.T, id string, in napInput) { queueAs(t, id, in, false) }
	// final waits for the call to end and returns its events.
	final := func(t *testing.T, id string, within ...time.Duration) (*store.Call, []store.Event) {
		t.Helper()
		wait := 10 * time.Second
		if len(within) > 0 {
			wait = within[0]
		}
		var call *store.Call
		require.Eventually(t, func() bool {
			c, err := store.CallGetByID(ctx, db.Pool, id)
			require.NoError(t, err)
			call = c
			return store.IsFinal(c.State)
		}, wait, 10*time.Millisecond, "call %s never ended", id)
		events, err := store.EventListByStream(ctx, db.Pool, store.CallStream(id))
		require.NoError(t, err)
		return call, events
	}
	types := func(events []store.Event) []string {
		out := make([]string, len(events))
		for i, e := range events {
			out[i] = e.Type
		}
		return out
	}
	paidSequence := []string{store.EventCallPaid, store.EventJobSucceeded, store.EventSettlementConfirmed}
	// settleJobs counts the settlement jobs of the calls whose ids are
	// like pattern.
	settleJobs := func(t *testing.T, pattern string) int {
		t.Helper()
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'settle' AND args->>'call_id' LIKE $1", pattern).Scan(&n))
		return n
	}

	t.Run("Quick", func(t *testing.T) {
		queue(t, "quick", napInput{Ms: 0})
		call, events := final(t, "quick")
		require.Equal(t, store.CallPaid, call.State)
		require.Equal(t, paidSequence, types(events))
		// job.succeeded records the run's start (its attempt) and the
		// first attempt's submission: it names the settlement job the
		// result inserted, which the run's own settlement deleted with its
		// outcome, well before its grace.
		var succeeded store.JobSucceeded
		require.NoError(t, events[1].Decode(&succeeded))
		require.Equal(t, 1, succeeded.Attempt)
		require.NotZero(t, succeeded.SettleJobID)
		require.NotEqual(t, succeeded.JobID, succeeded.SettleJobID)
		require.Less(t, events[2].CreatedAt.Sub(events[1].CreatedAt), time.Second, "the run did not settle its payment itself")
		_, err := client.JobGet(ctx, succeeded.SettleJobID)
		require.ErrorIs(t, err, river.ErrNotFound, "the settlement job outlived its settlement")
		require.Equal(t, 1, settler.calls("quick"))
	})

	// A call admitted by an api of a release before migration 011
	// (payment.verified, job.queued) is run and settled by this worker, which reads its
	// payment from payment.verified.
	t.Run("AdmittedUnfolded", func(t *testing.T) {
		queueAs(t, "oldapi", napInput{Ms: 0}, true)
		call, events := final(t, "oldapi")
		require.Equal(t, store.CallPaid, call.State)
		require.Equal(t, paytest.TxHash("oldapi"), call.Settlement.Transaction)
		require.Equal(t, []string{store.EventPaymentVerified, store.EventJobQueued,
			store.EventJobSucceeded, store.EventSettlementConfirmed}, types(events))
		require.Equal(t, "0xpayer", call.Payer)
		require.Equal(t, []byte("oldapi"), call.RequestHash)
		require.Equal(t, 1, settler.calls("oldapi"))
	})

	// A settlement attempted again (its first attempt's transfer failed)
	// records its own settlement.submitted, durably, before trying again:
	// the run hands it to its settlement job at once, not after the grace.
	t.Run("SettlementRetried", func(t *testing.T) {
		queue(t, "retried", napInput{Ms: 0})
		call, events := final(t, "retried", 30*time.Second)
		require.Equal(t, store.CallPaid, call.State)
		require.Equal(t, []string{store.EventCallPaid, store.EventJobSucceeded,
			store.EventSettlementSubmitted, store.EventSettlementConfirmed}, types(events))
		require.Less(t, events[3].CreatedAt.Sub(events[1].CreatedAt), 2*time.Second, "the retry waited for the grace")
		var first store.JobSucceeded
		var second store.SettlementSubmitted
		require.NoError(t, events[1].Decode(&first))
		require.NoError(t, events[2].Decode(&second))
		require.NotZero(t, first.SettleJobID)
		require.Equal(t, store.SettlementSubmitted{JobID: first.SettleJobID, Network: "eip155:8453", Attempt: 2}, second)
		require.Equal(t, 2, settler.calls("retried"))
	})

	// A settlement still going when its grace ends is left to its
	// settlement job, which tries again.
	t.Run("SettlementStalled", func(t *testing.T) {
		queue(t, "stalled", napInput{Ms: 0})
		call, events := final(t, "stalled", 30*time.Second)
		require.Equal(t, store.CallPaid, call.State)
		require.Equal(t, []string{store.EventCallPaid, store.EventJobSucceeded,
			store.EventSettlementSubmitted, store.EventSettlementConfirmed}, types(events))
		require.GreaterOrEqual(t, events[2].CreatedAt.Sub(events[1].CreatedAt), 2*time.Second, "the run gave up before its grace")
		require.Equal(t, 2, settler.calls("stalled"))
	})

	// A call whose worker died after recording its result, before its
	// settlement, is settled by its settlement job once the grace ends.
	t.Run("WorkerDied", func(t *testing.T) {
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			stream := store.CallStream("died")
			res, err := client.InsertTx(ctx, tx, worker.SettleArgs{CallID: "died"}, &river.InsertOpts{ScheduledAt: time.Now().Add(300 * time.Millisecond)})
			if err != nil {
				return err
			}
			return store.Append(ctx, tx,
				store.NewEvent{Stream: stream, Type: store.EventPaymentVerified, Data: store.PaymentVerified{
					Op: "nap", Token: "tok", RequestHash: []byte("died"),
					Payment: x402.Payment{Network: "eip155:8453", Payer: "0xpayer", Nonce: "died", Amount: "10000", Payload: json.RawMessage(`{}`)},
				}},
				store.NewEvent{Stream: stream, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 1, Result: json.RawMessage(`{"call_id":"died","op":"nap"}`)}},
				store.NewEvent{Stream: stream, Type: store.EventSettlementSubmitted, Data: store.SettlementSubmitted{JobID: res.Job.ID, Network: "eip155:8453", Attempt: 1}})
		}))
		call, events := final(t, "died", 15*time.Second)
		require.Equal(t, store.CallPaid, call.State)
		require.Equal(t, paytest.TxHash("died"), call.Settlement.Transaction)
		var second store.SettlementSubmitted
		require.NoError(t, events[3].Decode(&second))
		require.Equal(t, 2, second.Attempt)
		require.Equal(t, 1, settler.calls("died"))
	})

	t.Run("Slow", func(t *testing.T) {
		queue(t, "slow", napInput{Ms: 600})
		require.Eventually(t, func() bool {
			c, err := store.CallGetByID(ctx, db.Pool, "slow")
			require.NoError(t, err)
			return c.State == store.CallRunning
		}, 5*time.Second, 5*time.Millisecond, "a slow run never showed as running")
		call, events := final(t, "slow")
		require.Equal(t, store.CallPaid, call.State)
		require.Equal(t, []string{store.EventCallPaid, store.EventJobStarted, store.EventJobSucceeded, store.EventSettlementConfirmed}, types(events))
		var succeeded store.JobSucceeded
		require.NoError(t, events[2].Decode(&succeeded))
		require.Zero(t, succeeded.Attempt, "the start is recorded once")
		require.GreaterOrEqual(t, events[2].CreatedAt.Sub(events[1].CreatedAt), 400*time.Millisecond,
			"job.started was written when the run began, not with its end")
	})

	// A job run again after its result was recorded (its completion was
	// lost with its worker) finds the call past running: no second result,
	// settlement job or settlement.
	t.Run("RunAgain", func(t *testing.T) {
		queue(t, "again", napInput{Ms: 0})
		_, before := final(t, "again")
		res, err := client.Insert(ctx, jobs.Args[napInput]{CallID: "again", Input: napInput{Ms: 0}}, &river.InsertOpts{Queue: jobs.QueuePure, MaxAttempts: 1})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			j, err := client.JobGet(ctx, res.Job.ID)
			require.NoError(t, err)
			return j.State == rivertype.JobStateCompleted
		}, 10*time.Second, 10*time.Millisecond, "the repeated job was never completed")
		_, after := final(t, "again")
		require.Equal(t, types(before), types(after))
		require.Zero(t, settleJobs(t, "again"))
		require.Equal(t, 1, settler.calls("again"))
	})

	// Runs and settlements ending together share transactions
	// (commits): every call of a burst still gets its own result,
	// settlement job and settlement, in order.
	t.Run("Burst", func(t *testing.T) {
		const n = 120
		for i := range n {
			queue(t, fmt.Sprintf("burst%d", i), napInput{Ms: 0})
		}
		times := map[time.Time]bool{}
		for i := range n {
			id := fmt.Sprintf("burst%d", i)
			call, events := final(t, id)
			require.Equal(t, store.CallPaid, call.State, id)
			require.Equal(t, paytest.TxHash(id), call.Settlement.Transaction)
			require.Equal(t, paidSequence, types(events), id)
			times[events[1].CreatedAt] = true
		}
		require.Zero(t, settleJobs(t, "burst%"), "settlement jobs outlived their settlements")
		t.Logf("%d results written in %d transactions", n, len(times))
	})

	// An operation run again after a failure keeps the job.started of its
	// failed attempt: the call's events show both attempts, the second in
	// its job.succeeded.
	t.Run("RunRetried", func(t *testing.T) {
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			stream := store.CallStream("flaky")
			payment := x402.Payment{Network: "eip155:8453", Payer: "0xpayer", Nonce: "flaky", Amount: "10000", Payload: json.RawMessage(`{}`)}
			if err := store.Append(ctx, tx, store.NewEvent{Stream: stream, Type: store.EventPaymentVerified, Data: store.PaymentVerified{
				Op: "flaky", Token: "tok", RequestHash: []byte("flaky"), Payment: payment,
			}}); err != nil {
				return err
			}
			_, err := client.InsertTx(ctx, tx, jobs.Args[flakyInput]{CallID: "flaky", Network: "eip155:8453"}, &river.InsertOpts{Queue: jobs.QueuePure, MaxAttempts: 3})
			return err
		}))
		call, events := final(t, "flaky", 30*time.Second)
		require.Equal(t, store.CallPaid, call.State)
		require.Equal(t, []string{store.EventPaymentVerified, store.EventJobStarted, store.EventJobSucceeded,
			store.EventSettlementConfirmed}, types(events))
		var started store.JobStarted
		var succeeded store.JobSucceeded
		require.NoError(t, events[1].Decode(&started))
		require.NoError(t, events[2].Decode(&succeeded))
		require.Equal(t, []int{1, 2}, []int{started.Attempt, succeeded.Attempt})
		require.JSONEq(t, `{"call_id":"flaky","op":"flaky","runs":2}`, string(call.Result))
	})

	t.Run("Panics", func(t *testing.T) {
		queue(t, "panic", napInput{Panic: true})
		call, events := final(t, "panic")
		require.Equal(t, store.CallFailed, call.State)
		require.Equal(t, []string{store.EventCallPaid, store.EventJobStarted, store.EventJobFailed}, types(events))
		var failed store.JobFailed
		require.NoError(t, events[2].Decode(&failed))
		require.Contains(t, failed.Message, "nap went wrong")
		require.Nil(t, call.Settlement, fmt.Sprintf("a failed call was settled: %+v", call.Settlement))
	})
}

// brokenInput is a test operation, retried on failure, that always fails,
// as a brief whose model never cites a source does.
type brokenInput struct{}

func (brokenInput) Kind() string                { return "broken" }
func (brokenInput) Validate(*jobs.Limits) error { return nil }

var brokenOp = jobs.Define[brokenInput](jobs.Spec{Name: "broken", Price: "0.010000", Queue: jobs.QueuePure})

// TestOpValidityWindow checks that a call's retries end inside its
// payment's window: a call whose next retry could not end ExpiryMargin
// before validBefore fails as payment_expired instead of being retried
// past it, and one whose window is already too short is not run. Neither
// is settled.
func TestOpValidityWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	var runs atomic.Int32
	settler := &flakySettler{Settler: &paytest.Payments{}}
	client, err := worker.NewClient(&worker.Deps{
		Pool: db.Pool, Settler: settler, Logger: slog.New(slog.DiscardHandler),
		Ops: []worker.Op{worker.Bind(brokenOp, func(context.Context, brokenInput) (map[string]int, error) {
			runs.Add(1)
			return nil, errors.New("the model cited no source")
		}, true)},
	}, &worker.Config{Work: true, FetchPollInterval: 50 * time.Millisecond, ExpiryMargin: 10 * time.Second})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, worker.Stop(client, 5*time.Second)) })

	queue := func(t *testing.T, id string, validBefore time.Time) {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			payment := x402.Payment{Network: "eip155:8453", Payer: "0xpayer", Nonce: id, Amount: "10000", Payload: json.RawMessage(`{}`), ValidBefore: validBefore}
			if err := store.Append(ctx, tx, store.NewEvent{Stream: store.CallStream(id), Type: store.EventPaymentVerified, Data: store.PaymentVerified{
				Op: "broken", Token: "tok", RequestHash: []byte(id), Payment: payment,
			}}); err != nil {
				return err
			}
			args := jobs.Args[brokenInput]{CallID: id}.PaidOn("eip155:8453", validBefore)
			_, err := client.InsertTx(ctx, tx, args, &river.InsertOpts{Queue: jobs.QueuePure, MaxAttempts: 6})
			return err
		}))
	}
	failure := func(t *testing.T, id string) (store.JobFailed, []store.Event) {
		t.Helper()
		var call *store.Call
		require.Eventually(t, func() bool {
			c, err := store.CallGetByID(ctx, db.Pool, id)
			require.NoError(t, err)
			call = c
			return store.IsFinal(c.State)
		}, 20*time.Second, 20*time.Millisecond, "call %s never ended", id)
		require.Equal(t, store.CallFailed, call.State)
		require.Nil(t, call.Settlement)
		require.Zero(t, settler.calls(id), "a failed call was settled")
		events, err := store.EventListByStream(ctx, db.Pool, store.CallStream(id))
		require.NoError(t, err)
		return *call.Failure, events
	}

	t.Run("RetryPastTheWindow", func(t *testing.T) {
		// River retries the first failure a second later (made available
		// within a few seconds: inside the 20 s window less the 10 s
		// margin); the second failure's retry would come 16 s later, past
		// the window: the call fails there.
		before := runs.Load()
		queue(t, "late", time.Now().Add(20*time.Second))
		f, events := failure(t, "late")
		require.Equal(t, jobs.ErrorPaymentExpired, f.Error)
		require.Contains(t, f.Message, "validBefore")
		require.EqualValues(t, 2, runs.Load()-before, "runs made")
		var started int
		for _, e := range events {
			if e.Type == store.EventJobStarted {
				started++
			}
		}
		require.Equal(t, 2, started)
	})
	t.Run("WindowTooShortToRun", func(t *testing.T) {
		before := runs.Load()
		queue(t, "expired", time.Now().Add(5*time.Second))
		f, _ := failure(t, "expired")
		require.Equal(t, jobs.ErrorPaymentExpired, f.Error)
		require.Equal(t, before, runs.Load(), "an operation ran that could not be settled")
	})
}

// stuckInput is a test operation that ignores its context: it returns only
// when its test ends, or, with Late, a result once its context ended (a
// run that finished just as its job timed out).
type stuckInput struct {
	Late bool `json:"late"`
}

func (stuckInput) Kind() string                { return "stuck" }
func (stuckInput) Validate(*jobs.Limits) error { return nil }

var stuckOp = jobs.Define[stuckInput](jobs.Spec{Name: "stuck", Price: "0.010000", Queue: jobs.QueuePure})

// TestOpStopsAtJobTimeout checks that an operation's job returns at the
// job's timeout even when the operation goes on: its call fails (not
// charged) a moment after JobTimeout, once, and River's job ends, so that
// no rescue starts a parallel attempt. A result that comes just as the
// job times out is kept and paid for, not run again.
func TestOpStopsAtJobTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	release := make(chan struct{})
	var runs atomic.Int32
	settler := &flakySettler{Settler: &paytest.Payments{}}
	const timeout = 2 * time.Second
	client, err := worker.NewClient(&worker.Deps{
		Pool: db.Pool, Settler: settler, Logger: slog.New(slog.DiscardHandler),
		Ops: []worker.Op{worker.Bind(stuckOp, func(ctx context.Context, in stuckInput) (map[string]int, error) {
			runs.Add(1)
			if in.Late {
				<-ctx.Done()
				return map[string]int{"late": 1}, nil
			}
			<-release
			return map[string]int{}, nil
		}, false)},
	}, &worker.Config{Work: true, FetchPollInterval: 50 * time.Millisecond, JobTimeout: timeout})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		close(release)
		require.NoError(t, worker.Stop(client, 5*time.Second))
	})

	queue := func(t *testing.T, id string, in stuckInput) int64 {
		t.Helper()
		var jobID int64
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			payment := x402.Payment{Network: "eip155:8453", Payer: "0xpayer", Nonce: id, Amount: "10000", Payload: json.RawMessage(`{}`)}
			res, err := client.InsertTx(ctx, tx, jobs.Args[stuckInput]{CallID: id, Network: "eip155:8453", Input: in}, &river.InsertOpts{Queue: jobs.QueuePure, MaxAttempts: 3})
			if err != nil {
				return err
			}
			jobID = res.Job.ID
			return store.Append(ctx, tx, store.NewEvent{Stream: store.CallStream(id), Type: store.EventCallPaid, Data: store.PaidCall{
				PaymentVerified: store.PaymentVerified{Op: "stuck", Token: "tok", RequestHash: []byte(id), Payment: payment}, JobID: res.Job.ID,
			}})
		}))
		return jobID
	}
	final := func(t *testing.T, id string) *store.Call {
		t.Helper()
		start := time.Now()
		var call *store.Call
		require.Eventually(t, func() bool {
			c, err := store.CallGetByID(ctx, db.Pool, id)
			require.NoError(t, err)
			call = c
			return store.IsFinal(c.State)
		}, timeout+15*time.Second, 20*time.Millisecond, "the call of an operation past its timeout never ended")
		t.Logf("call %s %s %v after it was queued", id, call.State, time.Since(start))
		return call
	}
	jobEnded := func(t *testing.T, jobID int64, state rivertype.JobState) {
		t.Helper()
		require.Eventually(t, func() bool {
			j, err := client.JobGet(ctx, jobID)
			if errors.Is(err, rivertype.ErrNotFound) {
				return state == rivertype.JobStateCompleted
			}
			require.NoError(t, err)
			return j.State == state
		}, 10*time.Second, 20*time.Millisecond, "the job did not end with its call")
	}

	t.Run("Stuck", func(t *testing.T) {
		before := runs.Load()
		jobID := queue(t, "stuck", stuckInput{})
		call := final(t, "stuck")
		require.Equal(t, store.CallFailed, call.State)
		require.Equal(t, jobs.ErrorOperationFailed, call.Failure.Error)
		require.Contains(t, call.Failure.Message, "deadline exceeded")
		require.Nil(t, call.Settlement)
		require.Zero(t, settler.calls("stuck"))
		jobEnded(t, jobID, rivertype.JobStateCancelled)
		require.EqualValues(t, 1, runs.Load()-before, "the operation was run again")
	})
	t.Run("ResultAtTimeout", func(t *testing.T) {
		before := runs.Load()
		jobID := queue(t, "late", stuckInput{Late: true})
		call := final(t, "late")
		require.Equal(t, store.CallPaid, call.State)
		require.JSONEq(t, `{"call_id":"late","op":"stuck","late":1}`, string(call.Result))
		require.Equal(t, 1, settler.calls("late"))
		jobEnded(t, jobID, rivertype.JobStateCompleted)
		require.EqualValues(t, 1, runs.Load()-before, "the operation was run again")
	})
}

// TestUnpaidWorkRecorded checks that a call whose work ends unpaid is
// recorded under its payer and client address (store.RecordUnpaidWork),
// for the api's limit: a run that fails, under both; a result whose
// settlement is refused, under its payer. A paid call records nothing.
func TestUnpaidWorkRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	client, err := worker.NewClient(&worker.Deps{
		Pool: db.Pool, Settler: &refusingSettler{Settler: &paytest.Payments{}, refuse: "refused"}, Logger: slog.New(slog.DiscardHandler),
		Ops: []worker.Op{worker.Bind(napOp, nap, false)},
	}, &worker.Config{Work: true, FetchPollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, worker.Stop(client, 5*time.Second)) })

	payerKey := func(id string) string { return store.UnpaidPayerKey("eip155:8453", "0x"+id) }
	clientKey := func(id string) string { return store.UnpaidClientKey("192.0.2." + strconv.Itoa(len(id))) }
	queue := func(t *testing.T, id string, in napInput) {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			payment := x402.Payment{Network: "eip155:8453", Payer: "0x" + id, Nonce: id, Amount: "10000", Payload: json.RawMessage(`{}`)}
			args := jobs.Args[napInput]{CallID: id, Input: in}.PaidOn("eip155:8453", time.Time{}).PaidBy("0x"+id, "192.0.2."+strconv.Itoa(len(id)))
			res, err := client.InsertTx(ctx, tx, args, &river.InsertOpts{Queue: jobs.QueuePure, MaxAttempts: 1})
			if err != nil {
				return err
			}
			return store.Append(ctx, tx, store.NewEvent{Stream: store.CallStream(id), Type: store.EventCallPaid, Data: store.PaidCall{
				PaymentVerified: store.PaymentVerified{Op: "nap", Token: "tok", RequestHash: []byte(id), Payment: payment}, JobID: res.Job.ID,
			}})
		}))
	}
	final := func(t *testing.T, id string) string {
		t.Helper()
		var state string
		require.Eventually(t, func() bool {
			c, err := store.CallGetByID(ctx, db.Pool, id)
			require.NoError(t, err)
			state = c.State
			return store.IsFinal(c.State)
		}, 20*time.Second, 10*time.Millisecond, "call %s never ended", id)
		return state
	}
	recorded := func(t *testing.T) map[string]int {
		t.Helper()
		runs, err := store.UnpaidWorkSince(ctx, db.Pool, time.Now().Add(-time.Hour))
		require.NoError(t, err)
		out := map[string]int{}
		for _, r := range runs {
			out[r.Key]++
		}
		return out
	}

	queue(t, "paid", napInput{})
	queue(t, "failed", napInput{Panic: true})
	queue(t, "refused", napInput{})
	require.Equal(t, store.CallPaid, final(t, "paid"))
	require.Equal(t, store.CallFailed, final(t, "failed"))
	require.Equal(t, store.CallUnpaid, final(t, "refused"))
	require.Equal(t, map[string]int{payerKey("failed"): 1, clientKey("failed"): 1, payerKey("refused"): 1}, recorded(t))
}

// refusingSettler refuses the settlement of the payment whose nonce is
// refuse, as a chain does when the payer's authorization expired.
type refusingSettler struct {
	x402.Settler
	refuse string
}

func (s *refusingSettler) Settle(ctx context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	if p.Nonce == s.refuse {
		return &x402.SettleResponse{Success: false, ErrorReason: "invalid_exact_evm_payload_authorization_valid_before", Network: p.Network, Payer: p.Payer}, nil
	}
	return s.Settler.Settle(ctx, p)
}
