package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// DefaultReconcileEvery is Config.ReconcileEvery's default.
const DefaultReconcileEvery = time.Minute

// reconcileBatch is the most calls one reconciliation looks at.
const reconcileBatch = 100

// ReconcileArgs is the periodic job (Config.ReconcileEvery) that
// reconciles from the chain the calls whose settlement jobs are exhausted:
// still settling, every settle job discarded after its last attempt.
// What the settler's x402.Reconciler shows decides each: paid (the
// transaction that moved the payment found: settlement.confirmed, the
// result released), lost (the authorization used by no transfer found:
// settlement.lost with its amount, the result released), refused (never
// used, now expired: settlement.failed, nothing charged, the result
// withheld), or pending (unused and still valid: one more attempt at
// settling it, whose outcome is recorded as a settle job's).
type ReconcileArgs struct{}

// Kind is "settle.reconcile".
func (ReconcileArgs) Kind() string { return "settle.reconcile" }

// InsertOpts puts the job on the maintenance queue, one at a time.
func (ReconcileArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueMaintenance, MaxAttempts: 3, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning, rivertype.JobStateRetryable, rivertype.JobStateScheduled,
	}}}
}

type reconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]
	deps    *Deps
	commits *commits
}

// Work reconciles each call whose settlement jobs are exhausted; a call the
// chain cannot tell about now is looked at again by the next run.
func (w *reconcileWorker) Work(ctx context.Context, job *river.Job[ReconcileArgs]) error {
	calls, err := store.CallListExhausted(ctx, w.deps.Pool, SettleArgs{}.Kind(), reconcileBatch)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	var errs []error
	for _, call := range calls {
		if err := w.reconcile(ctx, job, call); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		w.deps.Logger.WarnContext(ctx, "reconciliation of exhausted settlements incomplete; looked at again next run", "error", errors.Join(errs...))
	}
	return nil
}

// reconcile reconciles call (ReconcileArgs).
func (w *reconcileWorker) reconcile(ctx context.Context, job *river.Job[ReconcileArgs], call *store.Call) error {
	log := w.deps.Logger.With("call_id", call.ID, "job_id", job.ID, "job", "settle.reconcile", "network", call.Network)
	outcome, resp := x402.ReconcilePending, (*x402.SettleResponse)(nil)
	if r, ok := w.deps.Settler.(x402.Reconciler); ok {
		var err error
		if outcome, resp, err = r.Reconcile(ctx, &call.Payment); err != nil {
			return fmt.Errorf("reconcile %s: %w", call.ID, err)
		}
	}
	switch outcome {
	case x402.ReconcilePending:
		// Unused and still valid: settled once more, as a settle job's
		// later attempt is (its submission recorded first).
		submitted := store.NewEvent{Stream: store.CallStream(call.ID), Type: store.EventSettlementSubmitted, Data: store.SettlementSubmitted{
			JobID: job.ID, Network: call.Network, Attempt: job.Attempt,
		}}
		if err := w.commits.submissions.Commit(ctx, submitted); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return nil
			}
			return fmt.Errorf("reconcile %s: record submission: %w", call.ID, err)
		}
		log.InfoContext(ctx, "exhausted settlement still possible: settling again")
		return settle(ctx, w.deps, w.commits, log, call.ID, &call.Payment, 0, "")
	case x402.ReconcileLost:
		err := pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
			return store.Append(ctx, tx, store.NewEvent{Stream: store.CallStream(call.ID), Type: store.EventSettlementLost,
				Data: store.SettlementLost{Network: call.Network, Amount: call.Amount, Reason: resp.ErrorReason}})
		})
		if errors.Is(err, store.ErrConflict) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reconcile %s: record lost: %w", call.ID, err)
		}
		log.ErrorContext(ctx, "exhausted settlement lost: the authorization was used by no transfer found; the result is released",
			"amount", call.Amount, "reason", resp.ErrorReason)
	default:
		// Paid or refused: recorded as a settlement's outcome is.
		typ := store.EventSettlementConfirmed
		if outcome == x402.ReconcileRefused {
			typ = store.EventSettlementFailed
		}
		err := w.commits.outcomes.Commit(ctx, settled{event: store.NewEvent{Stream: store.CallStream(call.ID), Type: typ,
			Data: store.SettlementDone{Response: *resp, Block: resp.Block, Form1: w.commits.form1}}})
		if errors.Is(err, store.ErrConflict) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reconcile %s: record %s: %w", call.ID, outcome, err)
		}
		if outcome == x402.ReconcilePaid {
			w.deps.Metrics.Settlement(call.Network, metrics.SettlementConfirmed)
			if resp.Block == nil {
				w.deps.Metrics.RevenueFinal(call.Network, call.Amount)
			}
		} else {
			w.deps.Metrics.Settlement(call.Network, metrics.SettlementFailed)
		}
		log.WarnContext(ctx, "exhausted settlement reconciled from the chain", "outcome", outcome.String(),
			"transaction", resp.Transaction, "reason", resp.ErrorReason)
	}
	w.deps.Metrics.SettlementReconciled(call.Network, outcome.String())
	return nil
}
