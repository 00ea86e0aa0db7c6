package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/internal/clock"
)

// GroupCommitter writes the items of concurrent callers in shared
// transactions (group commit): a caller that finds fewer than InFlight
// transactions being written writes one itself, with every item waiting by
// then (up to MaxBatch); the others wait for a writer to take theirs. At low
// load every item has its own transaction at once; under load one
// transaction, one commit and one statement of each kind serve many items.
//
// A transaction refused with ErrConflict (an item no longer fits its
// projection's state) is written again in halves, so that only the items at
// fault get ErrConflict.
type GroupCommitter[T any] struct {
	cfg GroupCommitConfig
	// run writes (or reads) items: in a transaction of their own, or as
	// NewGroupReader's read does.
	run func(ctx context.Context, items []T) error
	// writers counts the writers of their own that Commit starts (Wait).
	writers sync.WaitGroup

	mu       sync.Mutex
	pending  []*groupItem[T]
	inFlight int
	// lastArrival is when the newest item came in (a linger lasts while
	// items keep coming); lingering is set while a writer waits for more
	// items (the others then wait for it instead of writing).
	lastArrival time.Time
	lingering   bool
	// lingerOff is until when writers do not linger: set when
	// lingerOffAfter lingers in a row gathered no other item (a caller
	// waiting for each answer before sending the next, however quickly),
	// cleared when two items are written together; emptyLingers counts
	// those lingers.
	lingerOff    time.Time
	emptyLingers int
	// lingers counts the lingers so far (its tests tell from it whether a
	// write lingered, not from how long it took).
	lingers int
}

// lingerRetry is how long lingering stays off after lingerOffAfter lingers
// in a row gathered nothing, when no two items are written together
// meanwhile: a caller sending one item after another waits lingerOffAfter
// times in that time.
const lingerRetry = time.Second

// lingerOffAfter is how many lingers in a row must gather nothing before
// lingering is turned off. One is not enough: in a steady stream a linger
// gathers nothing whenever the next item comes more than LingerIdle later,
// and lingering would then be off most of the time, each transaction
// writing about one item.
const lingerOffAfter = 3

// CommitLinger is the Linger of the service's committers. A longer linger
// writes more items a transaction, so Postgres spends less CPU per call;
// it adds to a call's latency only when the call leads its group. A caller
// sending its calls one after the other lingers at most once a second
// (lingerOffAfter, lingerRetry), and a linger ends LingerIdle after the
// last item came, so that a few clients calling in a closed loop are not
// held. Results and settlement submissions linger this long; admission,
// where the linger is on every call's path, lingers less (api's
// admissionLinger). The figures behind both are in docs/performance.md
// (Tuning choices).
const CommitLinger = 30 * time.Millisecond

// GroupCommitConfig configures a GroupCommitter.
type GroupCommitConfig struct {
	// InFlight is how many transactions are written at once. Defaults
	// to 4.
	InFlight int
	// MaxBatch is the most items one transaction holds. Defaults to 128.
	MaxBatch int
	// Relaxed commits without waiting for the disk (InRelaxedTx).
	Relaxed bool
	// Linger is how long a writer waits for more items before writing
	// when items arrive less than Linger apart (a steady stream, where
	// each item would otherwise have a transaction of its own); an item
	// arriving after a quiet spell is written at once. A linger that
	// gathers no other item three times in a row (one caller sending its
	// items one after the other) turns lingering off for a second, or
	// until two items are written together. Defaults to 0: no wait.
	Linger time.Duration
	// LingerIdle ends a linger early once no item has come for that long
	// (a burst has passed). Defaults to a third of Linger.
	LingerIdle time.Duration
	// Clock times the lingers. Defaults to clock.Real().
	Clock clock.Clock
	// Timeout bounds the writing of one transaction, which no caller's
	// context cuts short. Defaults to 30 s.
	Timeout time.Duration
	// Observe, when set, is told of every transaction written: how many
	// items it held and how it ended ("committed", "conflict" when it was
	// refused and written again in halves, "lock_wait" when a deadlock
	// ended it and it was written again, "error").
	Observe func(items int, outcome string)
}

type groupItem[T any] struct {
	item T
	err  error
	done chan struct{}
}

// NewGroupCommitter returns a GroupCommitter that writes items with write,
// in a transaction of pool, configured by config, of which it keeps a copy.
func NewGroupCommitter[T any](pool *pgxpool.Pool, config *GroupCommitConfig, write func(ctx context.Context, tx pgx.Tx, items []T) error) *GroupCommitter[T] {
	g := newGroup[T](config)
	g.run = func(ctx context.Context, items []T) error {
		fn := func(tx pgx.Tx) error { return write(ctx, tx, items) }
		if g.cfg.Relaxed {
			return InRelaxedTx(ctx, pool, fn)
		}
		return pgx.BeginFunc(ctx, pool, fn)
	}
	return g
}

// NewGroupReader returns a GroupCommitter that reads, with read, what its
// callers ask for, those asking at once together (a statement for many),
// in no transaction of its own: read tells each item its answer; an error
// it returns is every item's. Relaxed is ignored.
func NewGroupReader[T any](config *GroupCommitConfig, read func(ctx context.Context, items []T) error) *GroupCommitter[T] {
	g := newGroup[T](config)
	g.run = read
	return g
}

// newGroup returns a GroupCommitter of config, with its defaults, that
// runs nothing yet.
func newGroup[T any](config *GroupCommitConfig) *GroupCommitter[T] {
	cfg := *config
	if cfg.InFlight <= 0 {
		cfg.InFlight = 4
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 128
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.LingerIdle <= 0 {
		cfg.LingerIdle = cfg.Linger / 3
	}
	cfg.Clock = clock.Or(cfg.Clock)
	return &GroupCommitter[T]{cfg: cfg}
}

// Commit writes item, alone or with the items of other callers, and returns
// once its transaction committed or failed. The transaction may serve other
// callers: it is not cut short when ctx ends (its values are kept; Timeout
// bounds it), but Commit then returns at once.
func (g *GroupCommitter[T]) Commit(ctx context.Context, item T) error {
	it := &groupItem[T]{item: item, done: make(chan struct{})}
	g.mu.Lock()
	g.pending = append(g.pending, it)
	now := g.cfg.Clock.Now()
	lead := g.inFlight < g.cfg.InFlight && !g.lingering
	linger := lead && g.cfg.Linger > 0 && now.After(g.lingerOff) && now.Sub(g.lastArrival) < g.cfg.Linger
	if lead {
		g.inFlight++
		g.lingering = linger
	}
	g.lastArrival = now
	g.mu.Unlock()
	if lead {
		if linger {
			g.linger(ctx, now)
		}
		wctx := context.WithoutCancel(ctx)
		if g.writeNext(wctx) {
			// Items came in meanwhile: a writer of its own takes them, so
			// that this caller returns without waiting for them.
			g.writers.Go(func() {
				for g.writeNext(wctx) {
				}
			})
		}
	}
	select {
	case <-it.done:
		return it.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Wait returns once no writer of its own that Commit started still writes:
// its owner calls it on stop, after its last Commit, so that no write
// outlives the process's pool.
func (g *GroupCommitter[T]) Wait() { g.writers.Wait() }

// linger waits for more items, from start up to Linger, and less once none
// has come for LingerIdle or when its caller gives up (the items are then
// written at once). The lingerOffAfter-th linger in a row that gathered no
// other item turns lingering off for lingerRetry.
func (g *GroupCommitter[T]) linger(ctx context.Context, start time.Time) {
	deadline := start.Add(g.cfg.Linger)
	t := g.cfg.Clock.NewTimer(0)
	defer t.Stop()
	for gaveUp := false; !gaveUp; {
		g.mu.Lock()
		until := g.lastArrival.Add(g.cfg.LingerIdle)
		g.mu.Unlock()
		if until.After(deadline) {
			until = deadline
		}
		wait := until.Sub(g.cfg.Clock.Now())
		if wait <= 0 {
			break
		}
		t.Reset(wait)
		select {
		case <-t.C():
		case <-ctx.Done():
			gaveUp = true
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lingering = false
	g.lingers++
	if len(g.pending) >= 2 {
		g.emptyLingers = 0
		return
	}
	if g.emptyLingers++; g.emptyLingers >= lingerOffAfter {
		g.lingerOff = g.cfg.Clock.Now().Add(lingerRetry)
		g.emptyLingers = 0
	}
}

// writeNext writes the items waiting, up to MaxBatch, and reports whether
// more are waiting for it; when none are, or a lingering writer will take
// them, it gives its writer's place up.
func (g *GroupCommitter[T]) writeNext(ctx context.Context) bool {
	g.mu.Lock()
	n := min(len(g.pending), g.cfg.MaxBatch)
	batch := g.pending[:n:n]
	g.pending = g.pending[n:]
	if n > 1 {
		g.lingerOff, g.emptyLingers = time.Time{}, 0
	}
	g.mu.Unlock()
	if n > 0 {
		g.writeBatch(ctx, batch)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// The items that came in meanwhile are this writer's to take, unless
	// a writer lingers for them: it takes them when its linger ends.
	// Taken now, they would end that linger's batch before it began, and
	// under a steady stream every transaction would hold the few items
	// that came in during the one before.
	if len(g.pending) > 0 && !g.lingering {
		return true
	}
	g.inFlight--
	return false
}

// writeBatch writes batch in one transaction and hands each item its
// outcome. A transaction refused with ErrConflict is written again in two
// halves, and so on down to the items at fault: one conflict among n items
// costs about 2·log2(n) more transactions, not n.
func (g *GroupCommitter[T]) writeBatch(ctx context.Context, batch []*groupItem[T]) {
	// A transaction a deadlock ended wrote nothing: it is written again,
	// a few times, rather than failing its callers.
	var err error
	for try := 1; ; try++ {
		err = g.tx(ctx, batch)
		retry := IsLockWait(err) && try < groupLockWaitTries
		if g.cfg.Observe != nil {
			outcome := "committed"
			switch {
			case errors.Is(err, ErrConflict):
				outcome = "conflict"
			case retry:
				outcome = "lock_wait"
			case err != nil:
				outcome = "error"
			}
			g.cfg.Observe(len(batch), outcome)
		}
		if !retry {
			break
		}
	}
	if errors.Is(err, ErrConflict) && len(batch) > 1 {
		mid := len(batch) / 2
		g.writeBatch(ctx, batch[:mid])
		g.writeBatch(ctx, batch[mid:])
		return
	}
	for _, it := range batch {
		it.err = err
		close(it.done)
	}
}

// groupLockWaitTries is how many times a batch is written when deadlocks
// end its transactions.
const groupLockWaitTries = 3

// tx runs batch (its transaction, or its read), with a panic turned into
// an error: other callers wait on it.
func (g *GroupCommitter[T]) tx(ctx context.Context, batch []*groupItem[T]) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("group commit of %d: panic: %v", len(batch), p)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	items := make([]T, len(batch))
	for i, it := range batch {
		items[i] = it.item
	}
	err = g.run(ctx, items)
	if err != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		// The database gave no answer within Timeout (a primary gone
		// before its standby is promoted): unavailable, not a fault.
		err = fmt.Errorf("group commit of %d: %w within %s: %w", len(batch), ErrTimeout, g.cfg.Timeout, err)
	}
	return err
}
