package api

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// admission is a paid call to record and queue: its job, and its call.paid
// event naming the job.
type admission struct {
	callID   string
	verified store.PaymentVerified
	job      river.InsertManyParams
	// reserve, when set, is the payment's reservation against its
	// payer's balance (store.Reserve): the call is recorded and queued
	// only when it is held. reserved is its outcome, set by the
	// admission's transaction.
	reserve  *store.Reservation
	reserved store.Reserved
	// identified, when set, binds the payment identifier the payment
	// carried to the call (payment.identified): a payer's id already
	// bound refuses the admission with store.ErrConflict.
	identified *store.PaymentIdentified
	// hold, when set, is the channel a batch-settlement payment on network
	// is charged to: the call is recorded and queued only when the
	// admission's transaction holds it busy (store.ChannelHold), which
	// unheld then tells.
	hold    *x402.ChannelHold
	network string
	unheld  bool
}

// admissionLinger is the Linger of the admission's group commit, shorter
// than the others' (store.CommitLinger): a call that leads its group waits
// it whole before its job is even queued, so a shorter linger takes its
// time off every call's latency, for about the same database CPU per call
// (docs/performance.md, Tuning choices).
const admissionLinger = 20 * time.Millisecond

// newAdmitter returns what records and queues paid calls: the calls that
// arrive together share one transaction (store.GroupCommitter), with one
// River InsertMany for their jobs and one insert for their events. A payment
// already used refuses the shared transaction; the calls are then written
// again in halves and only that one gets store.ErrConflict. The payments
// with a reservation are first reserved against their payers' balances in
// the same transaction (store.Reserve): a call whose reservation is not held
// is neither recorded nor queued, its outcome in its admission.
//
// Nothing is charged before the settlement, and the run's result, which
// commits durably, makes these records durable too (WAL is flushed in
// order): they need not wait for the disk (store.InRelaxedTx). form1
// writes call.paid in ledger form 1 (Config.LedgerForm1); clk is the
// clock reservations are weighed by, and the group commit's (nil:
// clock.Real()).
func newAdmitter(pool *pgxpool.Pool, rc *river.Client[pgx.Tx], m *metrics.Metrics, form1 bool, clk clock.Clock) *store.GroupCommitter[*admission] {
	clk = clock.Or(clk)
	cfg := store.GroupCommitConfig{Relaxed: true, Linger: admissionLinger, Observe: m.GroupCommitObserver("admission"), Clock: clk}
	return store.NewGroupCommitter(pool, &cfg, func(ctx context.Context, tx pgx.Tx, batch []*admission) error {
		batch, err := holdChannels(ctx, tx, batch)
		if err != nil || len(batch) == 0 {
			return err
		}
		batch, err = reserve(ctx, tx, clk.Now(), batch)
		if err != nil || len(batch) == 0 {
			return err
		}
		params := make([]river.InsertManyParams, len(batch))
		for i, adm := range batch {
			params[i] = adm.job
		}
		res, err := rc.InsertManyTx(ctx, tx, params)
		if err != nil {
			return fmt.Errorf("insert %d jobs: %w", len(batch), err)
		}
		events := make([]store.NewEvent, 0, len(batch))
		for i, adm := range batch {
			events = append(events, store.NewEvent{Stream: store.CallStream(adm.callID), Type: store.EventCallPaid,
				Data: store.PaidCall{PaymentVerified: adm.verified, JobID: res[i].Job.ID, Form1: form1}})
			if adm.identified != nil {
				events = append(events, store.NewEvent{Stream: store.CallStream(adm.callID), Type: store.EventPaymentIdentified, Data: *adm.identified})
			}
		}
		return store.Append(ctx, tx, events...)
	})
}

// holdChannels holds busy, in tx, the channels the batch-settlement
// payments of batch are charged to (store.ChannelHoldMany), and returns
// the admissions to record: the others, and those whose channel is held.
// Each admission's unheld is set (again: a transaction refused is written
// again).
func holdChannels(ctx context.Context, tx pgx.Tx, batch []*admission) ([]*admission, error) {
	var holds []store.ChannelHoldRequest
	for _, adm := range batch {
		adm.unheld = false
		if adm.hold != nil {
			holds = append(holds, store.ChannelHoldRequest{Network: adm.network, ID: adm.hold.ChannelID, CallID: adm.callID, Charged: adm.hold.Charged})
		}
	}
	if len(holds) == 0 {
		return batch, nil
	}
	held, err := store.ChannelHoldMany(ctx, tx, holds)
	if err != nil {
		return nil, err
	}
	out := batch[:0:0]
	i := 0
	for _, adm := range batch {
		if adm.hold != nil {
			adm.unheld = !held[i]
			i++
			if adm.unheld {
				continue
			}
		}
		out = append(out, adm)
	}
	return out, nil
}

// reserve reserves the payments of batch that have a reservation and
// returns the admissions to record: those without one, and those whose
// reservation is held. Each admission's reserved is set (again: a
// transaction refused is written again).
func reserve(ctx context.Context, tx pgx.Tx, now time.Time, batch []*admission) ([]*admission, error) {
	var rs []store.Reservation
	for _, adm := range batch {
		adm.reserved = store.Reserved{}
		if adm.reserve != nil {
			rs = append(rs, *adm.reserve)
		}
	}
	if len(rs) == 0 {
		return batch, nil
	}
	out, err := store.Reserve(ctx, tx, now, rs)
	if err != nil {
		return nil, err
	}
	admitted := make([]*admission, 0, len(batch))
	i := 0
	for _, adm := range batch {
		if adm.reserve != nil {
			adm.reserved = out[i]
			i++
			if adm.reserved.Outcome != store.ReserveHeld {
				continue
			}
		}
		admitted = append(admitted, adm)
	}
	return admitted, nil
}
