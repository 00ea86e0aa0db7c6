package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
)

// Op binds a sold operation to the function that computes it. Build one with
// Bind.
type Op interface {
	// Name is the operation's name.
	Name() string
	register(workers *river.Workers, deps *Deps, commits *commits) error
}

// Bind returns the Op that computes operation o with work. When retry is
// true a failed run is retried by River with backoff (operations that call
// outside services); otherwise the first failure is final (deterministic
// operations would only fail the same way again).
func Bind[In jobs.Input, Out any](o jobs.Operation, work func(ctx context.Context, in In) (Out, error), retry bool) Op {
	return &binding[In, Out]{op: o, work: work, retry: retry}
}

type binding[In jobs.Input, Out any] struct {
	op    jobs.Operation
	work  func(ctx context.Context, in In) (Out, error)
	retry bool
}

func (b *binding[In, Out]) Name() string { return b.op.Name }

func (b *binding[In, Out]) register(workers *river.Workers, deps *Deps, commits *commits) error {
	return river.AddWorkerSafely(workers, &opWorker[In, Out]{binding: b, deps: deps, commits: commits})
}

// opWorker is the River worker of one operation.
type opWorker[In jobs.Input, Out any] struct {
	river.WorkerDefaults[jobs.Args[In]]
	binding *binding[In, Out]
	deps    *Deps
	commits *commits
}

// Work runs the operation for one paid call.
func (w *opWorker[In, Out]) Work(ctx context.Context, job *river.Job[jobs.Args[In]]) error {
	clk := w.commits.clock
	start := clk.Now()
	callID := job.Args.CallID
	stream := store.CallStream(callID)
	log := w.deps.Logger.With("call_id", callID, "op", w.binding.op.Name, "job_id", job.ID, "attempt", job.Attempt)
	if w.expired(clk.Now(), job) {
		// Its payment could not be settled after this run: the call ends
		// unpaid now rather than with a result nobody can be charged for.
		return w.fail(ctx, job, errPaymentExpired, log, start, nil)
	}

	// job.started moves the call to running; a call already past running
	// (a duplicate or a retried job whose call is final) needs nothing.
	// Most runs end within milliseconds: their start is recorded with
	// their outcome, one transaction fewer per paid call (and a success
	// records it in its job.succeeded, one event fewer). A run still going
	// after startedDelay records job.started at once, so that operators see
	// it running, and is stopped if its call is already past running.
	started := store.NewEvent{Stream: stream, Type: store.EventJobStarted, Data: store.JobStarted{JobID: job.ID, Attempt: job.Attempt}}
	var pending []store.NewEvent
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if vb := job.Args.ValidBefore; vb != 0 {
		// The run ends in time for its settlement, or not at all.
		var cancel context.CancelFunc
		runCtx, cancel = context.WithDeadlineCause(runCtx, time.Unix(vb, 0).Add(-w.commits.expiry), errPaymentExpired)
		defer cancel()
	}
	done := make(chan runResult[Out], 1)
	go func() { done <- w.run(runCtx, job.Args.Input) }()
	var run runResult[Out]
	startedTimer := clk.NewTimer(startedDelay)
	defer startedTimer.Stop()
	select {
	case run = <-done:
		pending = append(pending, started)
	case <-startedTimer.C():
		err := store.InRelaxedTx(ctx, w.deps.Pool, func(tx pgx.Tx) error { return store.Append(ctx, tx, started) })
		if err != nil {
			stop(err)
			await(runCtx, clk, done)
			if errors.Is(err, store.ErrConflict) {
				log.InfoContext(ctx, "job stopped: call already past running")
				return nil
			}
			return fmt.Errorf("start call %s: %w", callID, err)
		}
		run = await(runCtx, clk, done)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The job's timeout (JOB_TIMEOUT) passed: the run's outcome is
		// recorded all the same, so that the job ends now, with its call,
		// rather than be tried again or rescued.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), recordAfterTimeout)
		defer cancel()
	}
	out, err := run.out, run.err
	if err != nil {
		return w.fail(ctx, job, err, log, start, pending)
	}
	result, err := resultObject(callID, w.binding.op.Name, out)
	if err != nil {
		return w.fail(ctx, job, err, log, start, pending)
	}

	// The result and its settlement job, with those of other runs ending
	// at the same time (commits.results). The job itself is completed by
	// River's batched completer once Work returns: a run repeated because
	// its completion was lost finds the call past running and stops.
	succeeded := &completed{callID: callID, succeeded: store.JobSucceeded{JobID: job.ID, Result: result,
		Op: w.binding.op.Name, Form1: w.commits.form1}}
	if len(pending) > 0 {
		// The start of a run that ended before it was recorded commits
		// with its success: one event.
		succeeded.succeeded.Attempt = job.Attempt
	}
	err = w.commits.results.Commit(ctx, succeeded)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			log.InfoContext(ctx, "job result dropped: call already final")
			return nil
		}
		return fmt.Errorf("complete call %s: %w", callID, err)
	}
	log.InfoContext(ctx, "job succeeded", "duration_ms", clk.Now().Sub(start).Milliseconds())
	if succeeded.settled != nil {
		// Settled off chain with the result.
		w.deps.Metrics.Settlement(succeeded.payment.Network, metrics.SettlementConfirmed)
		w.deps.Metrics.RevenueFinal(succeeded.payment.Network, succeeded.payment.Amount)
		return nil
	}
	w.settleRun(ctx, succeeded, log)
	return nil
}

// settleRun makes the first attempt at settling the payment of the call whose
// result was just recorded (run), before its settlement job's grace ends.
// When that attempt fails, the settlement job is made available at once, to
// settle with River's retries (tried again for retryHandOver while the
// database cannot be reached); should that fail too, the job still runs
// once its grace ends.
func (w *opWorker[In, Out]) settleRun(ctx context.Context, run *completed, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(ctx, graceOf(w.commits.grace, w.commits.slow, run.payment))
	err := settle(sctx, w.deps, w.commits, log, run.callID, run.payment, run.settleJob, "")
	cancel()
	recordPending(ctx, w.commits, log, run.callID, run.payment.Network, run.settleJob, 1, err)
	if err == nil {
		return
	}
	// The attempt often failed because the database went away (a restart):
	// making the job available is tried again for a few seconds, so that
	// the call need not wait for the grace once the database is back.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retryHandOver)
	defer cancel()
	client := river.ClientFromContext[pgx.Tx](ctx)
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		_, rerr := client.JobRetry(rctx, run.settleJob)
		if rerr == nil {
			log.InfoContext(ctx, "settlement handed to its job", "settle_job_id", run.settleJob)
			return
		}
		if errors.Is(rerr, rivertype.ErrNotFound) {
			log.WarnContext(ctx, "settlement job gone", "settle_job_id", run.settleJob)
			return
		}
		if clock.Sleep(rctx, w.commits.clock, pause) != nil {
			log.WarnContext(ctx, "settlement left to its job's grace", "retry_error", rerr, "settle_job_id", run.settleJob)
			return
		}
	}
}

// retryHandOver is how long an operation's job tries to make its
// settlement job available after its own settlement attempt failed, before
// leaving the call to the job's grace.
const retryHandOver = 5 * time.Second

// startedDelay is how long an operation runs before its job.started is
// recorded on its own rather than with its outcome.
const startedDelay = 50 * time.Millisecond

// stopGrace is how long a run whose context ended has to return before its
// job stops waiting for it.
const stopGrace = time.Second

// recordAfterTimeout bounds the recording of the outcome of a run that
// ended at its job's timeout (its failure, or its result and its first
// settlement attempt, which its settlement job takes up after that).
const recordAfterTimeout = 10 * time.Second

// await returns the result of the run sending on done, or, when runCtx ends
// first and the run does not return within stopGrace, a failure with
// runCtx's cause: an operation that ignores its context is left to end
// alone (its goroutine goes on, its result dropped), and the job returns at
// its timeout, so that River never starts a parallel attempt while it runs.
func await[Out any](runCtx context.Context, clk clock.Clock, done <-chan runResult[Out]) runResult[Out] {
	select {
	case run := <-done:
		return run
	case <-runCtx.Done():
	}
	grace := clk.NewTimer(stopGrace)
	defer grace.Stop()
	select {
	case run := <-done:
		return run
	case <-grace.C():
		return runResult[Out]{err: fmt.Errorf("operation did not stop within %v of its end: %w", stopGrace, context.Cause(runCtx))}
	}
}

// runResult is what one run of an operation returned.
type runResult[Out any] struct {
	out Out
	err error
}

// run runs the operation, turning a panic into an error: it runs on its own
// goroutine, out of River's reach.
func (w *opWorker[In, Out]) run(ctx context.Context, in In) (res runResult[Out]) {
	defer func() {
		if p := recover(); p != nil {
			res.err = fmt.Errorf("operation %s panicked: %v", w.binding.op.Name, p)
		}
	}()
	out, err := w.binding.work(ctx, in)
	return runResult[Out]{out: out, err: err}
}

// fail records a failed run. A final failure appends job.failed, after the
// pending events not yet appended (a pure operation's job.started): the
// caller gets 502 and is never charged, and the job is cancelled. Otherwise
// the pending events are appended alone and River retries.
func (w *opWorker[In, Out]) fail(ctx context.Context, job *river.Job[jobs.Args[In]], cause error, log interface {
	WarnContext(ctx context.Context, msg string, args ...any)
}, start time.Time, pending []store.NewEvent) error {
	code := jobs.ErrorOperationFailed
	final := !w.binding.retry || job.Attempt >= job.MaxAttempts || permanent(cause)
	// A retry whose run could not end before the payment's window closes
	// (River's next attempt, plus as long as this one took) is not made.
	now := w.commits.clock.Now()
	ranOut := errors.Is(cause, context.DeadlineExceeded) && w.expired(now, job)
	if errors.Is(cause, errPaymentExpired) || ranOut || !final && w.expired(retryPolicy.NextRetry(job.JobRow).Add(now.Sub(start)), job) {
		final, code = true, jobs.ErrorPaymentExpired
	}
	log.WarnContext(ctx, "job failed", "error", cause, "final", final, "code", code, "duration_ms", now.Sub(start).Milliseconds())
	if !final {
		// River runs the job again; the held-back job.started of this
		// attempt is kept (relaxed: it only tells the call's history),
		// so that the call's events show every attempt.
		if len(pending) > 0 {
			err := store.InRelaxedTx(ctx, w.deps.Pool, func(tx pgx.Tx) error { return store.Append(ctx, tx, pending...) })
			if err != nil && !errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("record start of call %s: %w (cause: %w)", job.Args.CallID, err, cause)
			}
		}
		return cause
	}
	// Durable: the caller is told at once that it was not charged. The
	// run's work, unpaid, counts against its payer and client address
	// (the api limits their further calls).
	err := pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		msg := cause.Error()
		if code == jobs.ErrorPaymentExpired && !errors.Is(cause, errPaymentExpired) {
			msg += "; no retry could end before the payment's validBefore"
		}
		err := store.Append(ctx, tx, append(pending, store.NewEvent{Stream: store.CallStream(job.Args.CallID), Type: store.EventJobFailed, Data: store.JobFailed{
			JobID: job.ID, Error: code, Message: msg,
		}})...)
		if err != nil {
			return err
		}
		return store.RecordUnpaidWork(ctx, tx, w.commits.clock.Now(),
			store.UnpaidPayerKey(job.Args.Network, job.Args.Payer), store.UnpaidClientKey(job.Args.Client))
	})
	if err != nil && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("record failure of call %s: %w (cause: %w)", job.Args.CallID, err, cause)
	}
	if err == nil {
		w.deps.Metrics.UnpaidWork(w.binding.op.Name, code, w.commits.clock.Now().Sub(start))
	}
	return river.JobCancel(cause)
}

// expired reports whether a run of job ending at end leaves its payment
// too little time to settle (less than the expiry margin before its
// validBefore).
func (w *opWorker[In, Out]) expired(end time.Time, job *river.Job[jobs.Args[In]]) bool {
	vb := job.Args.ValidBefore
	return vb != 0 && end.Add(w.commits.expiry).Unix() >= vb
}

// errPaymentExpired is an attempt not made: its payment's window would
// close before its settlement.
var errPaymentExpired = errors.New("the payment's validity window closes before the operation could finish and be settled")

// retryPolicy is River's retry schedule, which the client uses: the time of
// an attempt's retry is read from it to tell whether the retry fits in the
// payment's window.
var retryPolicy = &river.DefaultClientRetryPolicy{}

// permanent reports whether cause says that trying again cannot help: an
// error with a Retryable() method answering false (a model's 4xx).
func permanent(cause error) bool {
	var r interface{ Retryable() bool }
	return errors.As(cause, &r) && !r.Retryable()
}

// resultObject encodes out as the call's result object: its fields after
// "call_id" and "op" (store.ResultObject).
func resultObject(callID, op string, out any) (json.RawMessage, error) {
	body, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	result, err := store.ResultObject(callID, op, body)
	if err != nil {
		return nil, fmt.Errorf("encode result of %T: %w", out, err)
	}
	return result, nil
}
