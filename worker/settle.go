package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
)

// SettleArgs are the args of the job that settles a call's payment once its
// result is ready.
type SettleArgs struct {
	// CallID is the call whose payment is settled.
	CallID string `json:"call_id"`
}

// Kind is the River job kind.
func (SettleArgs) Kind() string { return "settle" }

// InsertOpts puts settlement on its own queue, once per call, with enough
// attempts to ride out an unreachable chain.
func (SettleArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       jobs.QueueSettlement,
		MaxAttempts: 12,
		UniqueOpts:  river.UniqueOpts{ByArgs: true},
	}
}

type settleWorker struct {
	river.WorkerDefaults[SettleArgs]
	deps    *Deps
	commits *commits
}

// Work settles the payment of a call in state settling. A settler error is
// retried (settlers are idempotent: a payment already moved on chain by an
// earlier attempt is reported as settled); a refusal is final and the result
// stays withheld.
func (w *settleWorker) Work(ctx context.Context, job *river.Job[SettleArgs]) error {
	start := time.Now()
	callID := job.Args.CallID
	stream := store.CallStream(callID)
	log := w.deps.Logger.With("call_id", callID, "job_id", job.ID, "job", "settle", "attempt", job.Attempt)

	call, err := store.CallGetByID(ctx, w.deps.Pool, callID)
	if err != nil {
		return fmt.Errorf("settle %s: %w", callID, err)
	}
	if call.State != store.CallSettling {
		log.InfoContext(ctx, "settle skipped", "state", call.State)
		return nil
	}
	// settlement.submitted is durable before the transfer is sent: the
	// first attempt's was committed with the result that inserted this job
	// (commits.results), a later attempt's is committed now, with those of
	// the other settlements starting again (commits.submissions); a call
	// found past settling is left alone. The call's records that a
	// Postgres crash must not lose once its payment moves (its admission,
	// its result and this job) are durable already: the result's commit
	// waited for the disk, which flushed the admission before it.
	if job.Attempt > 1 {
		submitted := store.NewEvent{Stream: stream, Type: store.EventSettlementSubmitted, Data: store.SettlementSubmitted{
			JobID: job.ID, Network: call.Network, Attempt: job.Attempt,
		}}
		if err := w.commits.submissions.Commit(ctx, submitted); err != nil {
			if errors.Is(err, store.ErrConflict) {
				log.InfoContext(ctx, "settle skipped: call no longer settling")
				return nil
			}
			return fmt.Errorf("settle %s: record submission: %w", callID, err)
		}
	}

	resp, err := w.deps.Settler.Settle(ctx, &call.Payment)
	if err != nil {
		log.WarnContext(ctx, "settlement attempt failed", "error", err)
		w.deps.Metrics.Settlement(call.Network, metrics.SettlementError)
		return fmt.Errorf("settle %s: %w", callID, err)
	}
	typ := store.EventSettlementConfirmed
	if !resp.Success {
		typ = store.EventSettlementFailed
	}
	// Durable, with the outcomes of other settlements mined in the same
	// block (commits.outcomes). River's batched completer completes the job
	// once Work returns; a run repeated because that completion was lost
	// finds the call final.
	err = w.commits.outcomes.Commit(ctx, store.NewEvent{Stream: stream, Type: typ, Data: store.SettlementDone{Response: *resp}})
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("settle %s: record outcome: %w", callID, err)
	}
	outcome := metrics.SettlementConfirmed
	if !resp.Success {
		outcome = metrics.SettlementFailed
	}
	w.deps.Metrics.Settlement(call.Network, outcome)
	log.InfoContext(ctx, "settlement done", "success", resp.Success, "reason", resp.ErrorReason, "transaction", resp.Transaction, "duration_ms", time.Since(start).Milliseconds())
	return nil
}
