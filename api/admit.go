package api

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
)

// admission is a paid call to record and queue: its payment.verified event
// and its job.
type admission struct {
	callID   string
	verified store.PaymentVerified
	job      river.InsertManyParams
}

// admissionLinger is the Linger of the admission's group commit, shorter
// than the others' (store.CommitLinger): a call that leads its group waits
// it whole before its job is even queued. At a steady 300 paid calls/s on
// a 2-core machine (docs/performance.md), 20 ms against 30, alternated in
// three pairs of 30 s runs, gave p50 44.9-50.3 ms against 55.9-62.9 and
// p99 74.8-83.4 ms against 85.9-101.5, Postgres's CPU per call within the
// runs' spread; at 1,000 calls/s offered both kept up. Where a paid call
// costs more CPU (the payment's signature recovered at verification), 20
// ms cost Postgres more CPU per call than 30 for no better tail.
const admissionLinger = 20 * time.Millisecond

// newAdmitter returns what records and queues paid calls: the calls that
// arrive together share one transaction (store.GroupCommitter), with one
// River InsertMany for their jobs and one insert for their events. A payment
// already used refuses the shared transaction; the calls are then written
// again in halves and only that one gets store.ErrConflict.
//
// Nothing is charged before the settlement, and the run's result, which
// commits durably, makes these records durable too (WAL is flushed in
// order): they need not wait for the disk (store.InRelaxedTx).
func newAdmitter(pool *pgxpool.Pool, rc *river.Client[pgx.Tx], m *metrics.Metrics) *store.GroupCommitter[*admission] {
	cfg := store.GroupCommitConfig{Relaxed: true, Linger: admissionLinger, Observe: m.GroupCommitObserver("admission")}
	return store.NewGroupCommitter(pool, cfg, func(ctx context.Context, tx pgx.Tx, batch []*admission) error {
		params := make([]river.InsertManyParams, len(batch))
		for i, adm := range batch {
			params[i] = adm.job
		}
		res, err := rc.InsertManyTx(ctx, tx, params)
		if err != nil {
			return fmt.Errorf("insert %d jobs: %w", len(batch), err)
		}
		events := make([]store.NewEvent, 0, 2*len(batch))
		for i, adm := range batch {
			stream := store.CallStream(adm.callID)
			events = append(events,
				store.NewEvent{Stream: stream, Type: store.EventPaymentVerified, Data: adm.verified},
				store.NewEvent{Stream: stream, Type: store.EventJobQueued, Data: store.JobQueued{JobID: res[i].Job.ID, Queue: res[i].Job.Queue}})
		}
		return store.Append(ctx, tx, events...)
	})
}
