package api

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/x402d/x402d/store"
)

// admission is a paid call to record and queue: its payment.verified event
// and its job.
type admission struct {
	callID   string
	verified store.PaymentVerified
	job      river.InsertManyParams

	err  error
	done chan struct{}
}

// admitter records and queues paid calls, several in one transaction when
// requests arrive together (group commit): a request that finds fewer than
// maxInFlight transactions being written writes one itself, with every call
// waiting by then; the others wait for a writer to take them. At low load
// every call has its own transaction at once; under load, one transaction,
// one job insert and one event insert serve many calls.
type admitter struct {
	pool  *pgxpool.Pool
	river *river.Client[pgx.Tx]

	mu       sync.Mutex
	pending  []*admission
	inFlight int
}

const (
	// admitInFlight is how many admission transactions are written at once.
	admitInFlight = 4
	// admitBatch is the most calls one admission transaction holds.
	admitBatch = 128
)

// admit records and queues a, alone or with other calls. It returns
// store.ErrConflict when a's payment was already used.
func (a *admitter) admit(ctx context.Context, adm *admission) error {
	adm.done = make(chan struct{})
	a.mu.Lock()
	a.pending = append(a.pending, adm)
	lead := a.inFlight < admitInFlight
	if lead {
		a.inFlight++
	}
	a.mu.Unlock()
	if lead {
		// The transaction serves other requests too: it is not cut short
		// when this one's client goes away.
		wctx := context.WithoutCancel(ctx)
		if a.writeNext(wctx) {
			// Calls came in meanwhile: a writer of its own takes them, so
			// that this request answers without waiting for them.
			go func() {
				for a.writeNext(wctx) {
				}
			}()
		}
	}
	select {
	case <-adm.done:
		return adm.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// writeNext writes the calls waiting, up to admitBatch, and reports whether
// more are waiting; when none are, it gives its writer's place up.
func (a *admitter) writeNext(ctx context.Context) bool {
	a.mu.Lock()
	n := min(len(a.pending), admitBatch)
	batch := a.pending[:n:n]
	a.pending = a.pending[n:]
	a.mu.Unlock()
	if n > 0 {
		a.write(ctx, batch)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) > 0 {
		return true
	}
	a.inFlight--
	return false
}

// write records and queues batch in one transaction. When one of its
// payments was already used (the unique payment key refuses the whole
// transaction), each call is written on its own, so that only that one is
// refused.
func (a *admitter) write(ctx context.Context, batch []*admission) {
	err := a.insertSafely(ctx, batch)
	if errors.Is(err, store.ErrConflict) && len(batch) > 1 {
		for _, adm := range batch {
			a.write(ctx, []*admission{adm})
		}
		return
	}
	for _, adm := range batch {
		adm.err = err
		close(adm.done)
	}
}

// insertSafely is insert with a panic turned into an error: the calls of
// other requests wait on it.
func (a *admitter) insertSafely(ctx context.Context, batch []*admission) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("admit %d calls: panic: %v", len(batch), p)
		}
	}()
	return a.insert(ctx, batch)
}

// insert writes the jobs of batch and then each call's payment.verified and
// job.queued events, in one transaction. Nothing is charged before the
// settlement, whose durable commit makes this one durable too: the calls'
// records need not wait for the disk (store.InRelaxedTx).
func (a *admitter) insert(ctx context.Context, batch []*admission) error {
	return store.InRelaxedTx(ctx, a.pool, func(tx pgx.Tx) error {
		params := make([]river.InsertManyParams, len(batch))
		for i, adm := range batch {
			params[i] = adm.job
		}
		res, err := a.river.InsertManyTx(ctx, tx, params)
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
