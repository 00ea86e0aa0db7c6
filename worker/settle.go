package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// SettleArgs are the args of the job that settles a call's payment when the
// run that recorded its result did not: the result's transaction inserts it
// scheduled SettleGrace ahead, the run settles at once and deletes it with
// the outcome, so it only runs after a crash, a failed attempt or a
// settlement slower than the grace.
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
	callID := job.Args.CallID
	log := w.deps.Logger.With("call_id", callID, "job_id", job.ID, "job", "settle", "attempt", job.Attempt)

	call, err := store.CallGetToSettle(ctx, w.deps.Pool, callID)
	if err != nil {
		return fmt.Errorf("settle %s: %w", callID, err)
	}
	if call.State != store.CallSettling {
		log.InfoContext(ctx, "settle skipped", "state", call.State)
		return nil
	}
	// The settlement's first attempt was the run's, recorded with its
	// result (commits.results); each run of this job is a later one, and
	// records its settlement.submitted durably before its transfer, with
	// those of the other settlements starting again (commits.submissions).
	// A call found past settling is left alone. The call's records that a
	// Postgres crash must not lose once its payment moves (its admission,
	// its result and this job) are durable already: the result's commit
	// waited for the disk, which flushed the admission before it.
	// The transaction it sends, when named beforehand, is recorded with
	// it: the same as the first attempt's (JobSucceeded.Transaction), which
	// the settler looks up before sending anything.
	namer, _ := w.deps.Settler.(x402.TransactionNamer)
	submitted := store.NewEvent{Stream: store.CallStream(callID), Type: store.EventSettlementSubmitted, Data: store.SettlementSubmitted{
		JobID: job.ID, Network: call.Network, Attempt: job.Attempt + 1, Transaction: transactionOf(namer, &call.Payment),
	}}
	if err := w.commits.submissions.Commit(ctx, submitted); err != nil {
		if errors.Is(err, store.ErrConflict) {
			log.InfoContext(ctx, "settle skipped: call no longer settling")
			return nil
		}
		return fmt.Errorf("settle %s: record submission: %w", callID, err)
	}
	// An earlier attempt's settlement left pending in a transaction
	// (x402.PendingError) is followed, in whatever process it was sent.
	pending, err := pendingTransaction(ctx, w.deps.Pool, callID)
	if err != nil {
		return fmt.Errorf("settle %s: %w", callID, err)
	}
	err = settle(ctx, w.deps, w.commits, log, callID, &call.Payment, 0, pending)
	recordPending(ctx, w.commits, log, callID, call.Network, job.ID, job.Attempt+1, err)
	return err
}

// pendingTransaction returns the last transaction recorded in a
// settlement.submitted of call callID ("" for none): the transaction an
// earlier attempt sent or left pending.
func pendingTransaction(ctx context.Context, db store.DBTX, callID string) (string, error) {
	events, err := store.EventListByStream(ctx, db, store.CallStream(callID))
	if err != nil {
		return "", fmt.Errorf("read the submissions: %w", err)
	}
	tx := ""
	for _, e := range events {
		if e.Type != store.EventSettlementSubmitted {
			continue
		}
		var s store.SettlementSubmitted
		if err := e.Decode(&s); err != nil {
			return "", fmt.Errorf("read the submissions: %w", err)
		}
		tx = cmp.Or(s.Transaction, tx)
	}
	return tx, nil
}

// recordPending records durably, in a settlement.submitted of call callID,
// the transaction of a settlement attempt (by settlement job jobID, its
// attempt-th) that ended pending (err an x402.PendingError), so that the
// next attempt follows it. Other outcomes record nothing.
func recordPending(ctx context.Context, commits *commits, log *slog.Logger, callID, network string, jobID int64, attempt int, err error) {
	var pending *x402.PendingError
	if !errors.As(err, &pending) || pending.Transaction == "" {
		return
	}
	event := store.NewEvent{Stream: store.CallStream(callID), Type: store.EventSettlementSubmitted, Data: store.SettlementSubmitted{
		JobID: jobID, Network: network, Attempt: attempt, Transaction: pending.Transaction,
	}}
	if rerr := commits.submissions.Commit(context.WithoutCancel(ctx), event); rerr != nil {
		log.WarnContext(ctx, "record a pending settlement's transaction", "transaction", pending.Transaction, "error", rerr)
	}
}

// settle makes one attempt at settling the payment of call callID, whose
// submission is recorded (the first in its job.succeeded, a later one in a
// settlement.submitted), and records its outcome durably with
// the outcomes of the other settlements mined in the same block
// (commits.outcomes); the outcome's transaction deletes the settlement job
// safetyNet (0: none) unless it is running; pending is the transaction an
// earlier attempt left pending ("": none), followed by a settler that is an
// x402.PendingFollower. It returns the settler's error
// when the attempt failed and can be tried again. The job running settle is
// completed by River's batched completer once Work returns; a run repeated
// because that completion was lost finds the call final.
func settle(ctx context.Context, deps *Deps, commits *commits, log *slog.Logger, callID string, payment *x402.Payment, safetyNet int64, pending string) error {
	start := commits.clock.Now()
	var resp *x402.SettleResponse
	var err error
	// A settler whose records name the call (a channel's charge) reads it
	// from ctx.
	ctx = x402.WithCall(ctx, callID)
	if follower, ok := deps.Settler.(x402.PendingFollower); ok && pending != "" {
		resp, err = follower.SettlePending(ctx, payment, pending)
	} else {
		resp, err = deps.Settler.Settle(ctx, payment)
	}
	if err != nil {
		log.WarnContext(ctx, "settlement attempt failed", "error", err)
		deps.Metrics.Settlement(payment.Network, metrics.SettlementError)
		return fmt.Errorf("settle %s: %w", callID, err)
	}
	typ, outcome := store.EventSettlementConfirmed, metrics.SettlementConfirmed
	if !resp.Success {
		typ, outcome = store.EventSettlementFailed, metrics.SettlementFailed
	}
	out := settled{
		event: store.NewEvent{Stream: store.CallStream(callID), Type: typ, Data: store.SettlementDone{Response: *resp, Cost: resp.Cost, Block: resp.Block,
			Form1: commits.form1}},
		safetyNet: safetyNet,
	}
	if resp.Ledger != nil {
		ledger, ok := resp.Ledger.([]store.NewEvent)
		if !ok {
			return fmt.Errorf("settle %s: the settler's ledger records are %T", callID, resp.Ledger)
		}
		out.ledger = ledger
	}
	if !resp.Success {
		// Work done and never paid (the authorization expired, the
		// balance was spent meanwhile): it weighs on its payer.
		out.unpaid = store.UnpaidPayerKey(payment.Network, payment.Payer)
	}
	err = commits.outcomes.Commit(ctx, out)
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("settle %s: record outcome: %w", callID, err)
	}
	deps.Metrics.Settlement(payment.Network, outcome)
	if resp.Success && resp.Block == nil {
		// Final at its receipt: nothing follows it.
		deps.Metrics.RevenueFinal(payment.Network, payment.Amount)
	}
	if resp.Cost != nil {
		deps.Metrics.SettlementGas(payment.Network, resp.Cost.FeeWei())
	}
	log.InfoContext(ctx, "settlement done", "success", resp.Success, "reason", resp.ErrorReason, "transaction", resp.Transaction, "duration_ms", commits.clock.Now().Sub(start).Milliseconds())
	return nil
}

// settled is a settlement's outcome and the settlement job its
// transaction deletes (0: none), and, when it was refused, the unpaid-work
// key of its payer.
type settled struct {
	event     store.NewEvent
	safetyNet int64
	unpaid    string
	// ledger are the settler's own records of the settlement (a
	// channel's charge: x402.SettleResponse.Ledger), appended with it.
	ledger []store.NewEvent
}

// writeOutcomes appends the outcomes of a group of settlements and deletes
// their settlement jobs that are not running (a running one finds its call
// final and stops). The block of a transaction to follow until final is
// recorded once for the group's calls it settled, in a settlement.mined
// appended before their settlement.confirmed events, which then leave it
// out; its projection adds the calls to the transaction's row of
// settlement_watch. The refused settlements' unpaid work is recorded at
// now.
func writeOutcomes(ctx context.Context, tx pgx.Tx, now time.Time, outcomes []settled) error {
	ids := make([]int64, 0, len(outcomes))
	// mined are the group's settlement.mined, one a transaction (network,
	// hash) in the order first seen.
	type minedTx struct {
		network string
		data    store.SettlementMined
	}
	var mined []minedTx
	at := map[[2]string]int{}
	calls := make([]store.NewEvent, 0, len(outcomes))
	var unpaid []string
	var ledger []store.NewEvent
	for _, o := range outcomes {
		ledger = append(ledger, o.ledger...)
		if o.safetyNet != 0 {
			ids = append(ids, o.safetyNet)
		}
		if o.unpaid != "" {
			unpaid = append(unpaid, o.unpaid)
		}
		// A settlement whose block is to be followed until final.
		if done, ok := o.event.Data.(store.SettlementDone); ok && done.Response.Success && done.Block != nil {
			key := [2]string{done.Response.Network, done.Response.Transaction}
			i, ok := at[key]
			if !ok {
				i = len(mined)
				at[key] = i
				mined = append(mined, minedTx{network: done.Response.Network,
					data: store.SettlementMined{Transaction: done.Response.Transaction, Block: *done.Block}})
			}
			mined[i].data.Calls = append(mined[i].data.Calls, store.CallOfStream(o.event.Stream))
			done.Block = nil
			o.event.Data = done
		}
		calls = append(calls, o.event)
	}
	events := make([]store.NewEvent, 0, len(ledger)+len(mined)+len(calls))
	events = append(events, ledger...)
	for _, m := range mined {
		events = append(events, store.NewEvent{Stream: store.ChainStream(m.network), Type: store.EventSettlementMined, Data: m.data})
	}
	if err := store.Append(ctx, tx, append(events, calls...)...); err != nil {
		return err
	}
	if err := store.RecordUnpaidWork(ctx, tx, now, unpaid...); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	// The workers' client, from the context of the job whose settlement
	// writes this transaction.
	client := river.ClientFromContext[pgx.Tx](ctx)
	if _, err := client.JobDeleteManyTx(ctx, tx, river.NewJobDeleteManyParams().IDs(ids...).First(len(ids))); err != nil {
		return fmt.Errorf("delete %d settlement jobs: %w", len(ids), err)
	}
	return nil
}
