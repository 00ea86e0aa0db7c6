package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/x402"
)

// TestGroupCommitter queues items that arrive while every writer is busy,
// one of them conflicting: the first MaxBatch share one transaction, the
// batch holding the conflict is written again in halves, and only that item
// is refused.
func TestGroupCommitter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	var mu sync.Mutex
	var batches []int
	var observed []string
	observe := func(items int, outcome string) {
		mu.Lock()
		observed = append(observed, fmt.Sprint(items, " ", outcome))
		mu.Unlock()
	}
	g := NewGroupCommitter(db.Pool, &GroupCommitConfig{MaxBatch: 50, Relaxed: true, Observe: observe}, func(ctx context.Context, tx pgx.Tx, items []int) error {
		mu.Lock()
		batches = append(batches, len(items))
		mu.Unlock()
		events := make([]NewEvent, len(items))
		for i, n := range items {
			nonce := fmt.Sprintf("n%d", n)
			if n == 80 {
				nonce = "n70" // the payment of item 70, again
			}
			events[i] = NewEvent{Stream: CallStream(fmt.Sprint(n)), Type: EventPaymentVerified, Data: PaymentVerified{
				Op: "diff", Token: "tok", RequestHash: []byte{1},
				Payment: x402.Payment{Network: "eip155:8453", Payer: "0xabc", Nonce: nonce, Amount: "1", Payload: json.RawMessage(`{}`)},
			}}
		}
		return Append(ctx, tx, events...)
	})

	// Every writer's place is taken: the items wait, in this order, until
	// the writers come back.
	const n = 90
	items := make([]int, n)
	for i := range items {
		items[i] = i
	}
	errs := commitQueued(ctx, t, g, items)
	for i, err := range errs {
		if i == 80 {
			require.ErrorIs(t, err, ErrConflict)
			continue
		}
		require.NoError(t, err, "item %d", i)
	}
	require.Zero(t, g.inFlight)
	// 50 together; then 40 refused for item 80, written again in halves
	// down to item 80 alone: 50-69, 70-89 (refused), 70-79, 80-89
	// (refused), 80-84 (refused), 80-81 (refused), 80 (refused), 81,
	// 82-84, 85-89.
	require.Equal(t, []int{50, 40, 20, 20, 10, 10, 5, 2, 1, 1, 3, 5}, batches)
	require.Equal(t, []string{"50 committed", "40 conflict", "20 committed", "20 conflict", "10 committed", "10 conflict",
		"5 conflict", "2 conflict", "1 conflict", "1 committed", "3 committed", "5 committed"}, observed)
	var calls int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls").Scan(&calls))
	require.Equal(t, n-1, calls)
}

// TestGroupCommitterLockWait: a batch whose transaction a deadlock ends
// (Postgres's deadlock_detected, raised by the server) wrote nothing and is
// written again, its callers told nothing of it; one that deadlocks on
// every try fails after groupLockWaitTries.
func TestGroupCommitterLockWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		deadlocks int
		observed  []string
		rows      int
	}{
		{"Once", 1, []string{"2 lock_wait", "2 committed"}, 2},
		{"EveryTry", groupLockWaitTries, []string{"2 lock_wait", "2 lock_wait", "2 error"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.Schema(ctx, t)
			_, err := db.Pool.Exec(ctx, "CREATE TABLE lock_wait_items (n int PRIMARY KEY)")
			require.NoError(t, err)
			var observed []string
			tries := 0
			g := NewGroupCommitter(db.Pool, &GroupCommitConfig{Observe: func(items int, outcome string) {
				observed = append(observed, fmt.Sprint(items, " ", outcome))
			}}, func(ctx context.Context, tx pgx.Tx, items []int) error {
				tries++
				if _, err := tx.Exec(ctx, "INSERT INTO lock_wait_items SELECT unnest($1::int[])", items); err != nil {
					return err
				}
				if tries <= tc.deadlocks {
					_, err := tx.Exec(ctx, "DO $$ BEGIN RAISE EXCEPTION 'a deadlock' USING ERRCODE = 'deadlock_detected'; END $$")
					return err
				}
				return nil
			})
			errs := commitQueued(ctx, t, g, []int{1, 2})
			for _, err := range errs {
				if tc.rows == 0 {
					require.True(t, IsLockWait(err), "%v", err)
				} else {
					require.NoError(t, err)
				}
			}
			require.Equal(t, tc.observed, observed)
			var rows int
			require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM lock_wait_items").Scan(&rows))
			require.Equal(t, tc.rows, rows, "a try a deadlock ended wrote nothing")
		})
	}
}

// TestGroupCommitterConcurrent commits from many goroutines with the
// writers free: every item is written once, in fewer transactions than
// items.
func TestGroupCommitterConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	var mu sync.Mutex
	var txs int
	g := NewGroupCommitter(db.Pool, &GroupCommitConfig{}, func(ctx context.Context, tx pgx.Tx, items []string) error {
		mu.Lock()
		txs++
		mu.Unlock()
		events := make([]NewEvent, len(items))
		for i, id := range items {
			events[i] = NewEvent{Stream: "crawl/" + id, Type: EventCrawlFailed, Data: CrawlFailed{Source: id, Error: "x"}}
		}
		_, err := tx.Exec(ctx, "SELECT pg_sleep(0.002)")
		if err != nil {
			return err
		}
		return Append(ctx, tx, events...)
	})
	const n = 400
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { require.NoError(t, g.Commit(ctx, fmt.Sprintf("s%d", i))) })
	}
	wg.Wait()
	var sources int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM index_sources").Scan(&sources))
	require.Equal(t, n, sources)
	t.Logf("%d items in %d transactions", n, txs)
	require.Less(t, txs, n)

	// A caller whose context ends while it waits returns; its item is
	// still written by the next writer.
	g.mu.Lock()
	g.inFlight = g.cfg.InFlight
	g.mu.Unlock()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, g.Commit(cctx, "late"), context.Canceled)
	for range g.cfg.InFlight {
		for g.writeNext(ctx) {
		}
	}
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM index_sources").Scan(&sources))
	require.Equal(t, n+1, sources)
}

// BenchmarkAdmission records paid calls (payment.verified, as the api does)
// from 64 concurrent callers, each call in its own transaction and through a
// GroupCommitter: b.N calls, ns/op per call, and the calls per transaction.
func BenchmarkAdmission(b *testing.B) {
	ctx := context.Background()
	db := dbtest.Schema(ctx, b)
	var seq atomic.Int64
	verified := func() NewEvent {
		n := seq.Add(1)
		return NewEvent{Stream: CallStream(fmt.Sprint("b", n)), Type: EventPaymentVerified, Data: PaymentVerified{
			Op: "diff", Token: "tok", RequestHash: []byte{1},
			Payment: x402.Payment{Network: "eip155:8453", Payer: "0xabc", Nonce: fmt.Sprint("n", n), Amount: "1", Payload: json.RawMessage(`{}`)},
		}}
	}
	run := func(b *testing.B, commit func(NewEvent) error) {
		b.SetParallelism(32) // 64 callers on 2 cores
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := commit(verified()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("TransactionEach", func(b *testing.B) {
		run(b, func(e NewEvent) error {
			return InRelaxedTx(ctx, db.Pool, func(tx pgx.Tx) error { return Append(ctx, tx, e) })
		})
	})
	b.Run("GroupCommit", func(b *testing.B) {
		var items, txs atomic.Int64
		g := NewGroupCommitter(db.Pool, &GroupCommitConfig{Relaxed: true, Observe: func(n int, _ string) {
			items.Add(int64(n))
			txs.Add(1)
		}}, func(ctx context.Context, tx pgx.Tx, events []NewEvent) error { return Append(ctx, tx, events...) })
		run(b, func(e NewEvent) error { return g.Commit(ctx, e) })
		if txs.Load() > 0 {
			b.ReportMetric(float64(items.Load())/float64(txs.Load()), "calls/tx")
		}
	})
}

// recordingCommitter returns a GroupCommitter of ints over a database of its
// own, and a function that returns the items of every transaction it wrote
// so far; before, when set, runs first in each transaction with its items.
func recordingCommitter(t *testing.T, cfg GroupCommitConfig, before func(items []int)) (*GroupCommitter[int], func() [][]int) {
	t.Helper()
	db := dbtest.Schema(context.Background(), t)
	var mu sync.Mutex
	var batches [][]int
	g := NewGroupCommitter(db.Pool, &cfg, func(_ context.Context, _ pgx.Tx, items []int) error {
		if before != nil {
			before(items)
		}
		mu.Lock()
		batches = append(batches, items)
		mu.Unlock()
		return nil
	})
	return g, func() [][]int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(batches)
	}
}

// waitUntil waits until cond holds of g's state, read under g's lock.
func waitUntil[T any](t *testing.T, g *GroupCommitter[T], cond func() bool, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return cond()
	}, 5*time.Second, time.Millisecond, msgAndArgs...)
}

// TestGroupCommitterLinger checks Linger: an item after a quiet spell is
// written at once, alone; items arriving less than Linger after the one
// before wait for the others and share a transaction.
func TestGroupCommitterLinger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, written := recordingCommitter(t, GroupCommitConfig{Linger: time.Second}, nil)
	require.NoError(t, g.Commit(ctx, 0))
	require.Equal(t, [][]int{{0}}, written(), "the first item is written at once")

	// The next ones follow within the linger: the first of them waits for
	// the others.
	var wg sync.WaitGroup
	for i := 1; i <= 5; i++ {
		wg.Go(func() { require.NoError(t, g.Commit(ctx, i)) })
		waitUntil(t, g, func() bool { return len(g.pending) == i }, "item %d waits", i)
	}
	wg.Wait()
	batches := written()
	require.Len(t, batches, 2)
	require.ElementsMatch(t, []int{1, 2, 3, 4, 5}, batches[1])
	require.Zero(t, g.inFlight)
}

// TestGroupCommitterLingerKeepsItsItems checks that a writer finishing its
// transaction leaves the items that came in meanwhile to the writer
// lingering for them: they are written together when the linger ends, not
// in the transactions that happen to end first.
func TestGroupCommitterLingerKeepsItsItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	release := make(chan struct{})
	g, written := recordingCommitter(t, GroupCommitConfig{Linger: time.Minute, LingerIdle: 200 * time.Millisecond}, func(items []int) {
		if items[0] == 0 {
			<-release
		}
	})
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, g.Commit(ctx, 0)) })
	waitUntil(t, g, func() bool { return g.inFlight == 1 && len(g.pending) == 0 }, "item 0 is being written")

	// Item 1 comes during item 0's transaction: it lingers, and item 2
	// waits for it.
	wg.Go(func() { require.NoError(t, g.Commit(ctx, 1)) })
	waitUntil(t, g, func() bool { return g.lingering }, "item 1 lingers")
	wg.Go(func() { require.NoError(t, g.Commit(ctx, 2)) })
	waitUntil(t, g, func() bool { return len(g.pending) == 2 }, "item 2 waits")

	// Item 0's transaction ends; its writer leaves, and item 3 joins the
	// linger.
	close(release)
	waitUntil(t, g, func() bool { return g.inFlight == 1 }, "item 0's writer leaves")
	wg.Go(func() { require.NoError(t, g.Commit(ctx, 3)) })
	wg.Wait()
	batches := written()
	require.Len(t, batches, 2, "%v", batches)
	require.Equal(t, []int{0}, batches[0])
	require.ElementsMatch(t, []int{1, 2, 3}, batches[1])
	require.Zero(t, g.inFlight)
}

// TestGroupCommitterLingerEndsWithCaller checks that a writer lingering for
// more items writes them at once when its caller gives up.
func TestGroupCommitterLingerEndsWithCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, written := recordingCommitter(t, GroupCommitConfig{Linger: time.Minute}, nil)
	require.NoError(t, g.Commit(ctx, 0))
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		// Written either way; its caller may hear that it gave up.
		if err := g.Commit(cctx, 1); err != nil {
			require.ErrorIs(t, err, context.Canceled)
		}
	})
	waitUntil(t, g, func() bool { return g.lingering }, "no writer lingered")
	wg.Go(func() { require.NoError(t, g.Commit(ctx, 2)) })
	waitUntil(t, g, func() bool { return len(g.pending) == 2 }, "item 2 never waited")
	start := time.Now()
	cancel()
	wg.Wait()
	require.Less(t, time.Since(start), 5*time.Second, "the linger outlived its caller")
	require.Equal(t, [][]int{{0}, {1, 2}}, written())
}

// TestGroupCommitterLingerOff checks that lingerOffAfter lingers in a row
// that gather nothing turn lingering off (a caller sending items one after
// the other waits a few times, not every time) until two items are written
// together again or lingerRetry has passed, and that fewer do not (a gap in
// a steady stream). Whether a write lingered is read from the committer's
// count of lingers, not from how long it took; the committer's clock moves
// only when the test moves it.
func TestGroupCommitterLingerOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A linger ends idle after the last item: the next item, sent once
	// the one before is written, comes within linger of it.
	const linger, idle = 900 * time.Millisecond, 300 * time.Millisecond
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	hold := make(chan struct{})
	g, written := recordingCommitter(t, GroupCommitConfig{InFlight: 1, Linger: linger, LingerIdle: idle, Clock: clk}, func(items []int) {
		if items[0] == 10 {
			<-hold
		}
	})
	lingers := func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.lingers
	}
	// lingered commits item i and reports whether it lingered: a writer
	// that lingers waits on the clock, which then moves idle on.
	lingered := func(i int) bool {
		t.Helper()
		before := lingers()
		done := make(chan error, 1)
		go func() { done <- g.Commit(ctx, i) }()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		waiting := make(chan struct{})
		go func() {
			if clk.Wait(wctx, 1) == nil {
				close(waiting)
			}
		}()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-waiting:
			clk.Advance(idle)
			require.NoError(t, <-done)
		}
		return lingers() > before
	}
	// One after the other: the second lingers for nothing, and so do the
	// next ones up to lingerOffAfter; the ones after are written at once.
	require.False(t, lingered(0), "the first item is written at once")
	for i := 1; i <= lingerOffAfter; i++ {
		require.True(t, lingered(i), "item %d lingers", i)
	}
	for i := lingerOffAfter + 1; i <= lingerOffAfter+3; i++ {
		require.False(t, lingered(i), "item %d lingered again", i)
	}

	// Items 11 and 12 wait behind item 10's transaction and are written
	// together: the next items linger again.
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, g.Commit(ctx, 10)) })
	waitUntil(t, g, func() bool { return g.inFlight == 1 && len(g.pending) == 0 })
	for n, i := range []int{11, 12} {
		wg.Go(func() { require.NoError(t, g.Commit(ctx, i)) })
		waitUntil(t, g, func() bool { return len(g.pending) == n+1 }, "item %d waits", i)
	}
	close(hold)
	wg.Wait()
	want := [][]int{}
	for i := 0; i <= lingerOffAfter+3; i++ {
		want = append(want, []int{i})
	}
	want = append(want, []int{10}, []int{11, 12})
	require.Equal(t, want, written())

	// A linger that gathers another item clears the count: item 21 waits
	// for nothing, 22 and 23 are written together, and the count starts
	// again.
	require.True(t, lingered(21), "lingering came back")
	wg.Go(func() { require.NoError(t, g.Commit(ctx, 22)) })
	waitUntil(t, g, func() bool { return g.lingering }, "item 22 lingers")
	wg.Go(func() { require.NoError(t, g.Commit(ctx, 23)) })
	waitUntil(t, g, func() bool { return len(g.pending) == 2 }, "item 23 waits")
	clk.Advance(idle)
	wg.Wait()
	require.Equal(t, []int{22, 23}, written()[len(written())-1])
	for i := 24; i < 24+lingerOffAfter; i++ {
		require.True(t, lingered(i), "item %d lingers", i)
	}
	require.False(t, lingered(30), "lingering is off")
	g.mu.Lock()
	off := g.lingerOff.Add(-lingerRetry) // when it was turned off
	g.mu.Unlock()

	// Off until lingerRetry has passed, items coming idle/3 apart (within
	// linger of each other): the first after it lingers.
	for i := 31; ; i++ {
		clk.Advance(idle / 3)
		past := clk.Now().Sub(off) > lingerRetry
		require.Equal(t, past, lingered(i), "item %d, %s after lingering was turned off", i, clk.Now().Sub(off))
		if past {
			break
		}
	}
}

// TestGroupCommitterLingerIdle checks that a linger lasts while items keep
// coming, up to Linger, and ends once none has come for LingerIdle.
func TestGroupCommitterLingerIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const idle = 200 * time.Millisecond
	g, written := recordingCommitter(t, GroupCommitConfig{Linger: 10 * time.Second, LingerIdle: idle, Clock: clk}, nil)
	require.NoError(t, g.Commit(ctx, 0))
	// Item 1 lingers; items 2 to 8 come 50 ms apart, each extending the
	// linger; idle after the last one, all are written together, long
	// before Linger.
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, g.Commit(ctx, 1)) })
	waitUntil(t, g, func() bool { return g.lingering }, "no writer lingered")
	for i := 2; i <= 8; i++ {
		clk.Advance(50 * time.Millisecond)
		wg.Go(func() { require.NoError(t, g.Commit(ctx, i)) })
		waitUntil(t, g, func() bool { return g.lingering && len(g.pending) == i }, "the linger ended while items were still coming (item %d)", i)
	}
	clk.Advance(idle - time.Millisecond)
	require.Len(t, written(), 1, "the linger ended before its idle time")
	clk.Advance(time.Millisecond)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the linger outlasted its idle time")
	}
	batches := written()
	require.Len(t, batches, 2)
	require.ElementsMatch(t, []int{1, 2, 3, 4, 5, 6, 7, 8}, batches[1])
}

// TestGroupCommitterWait: Wait returns only once a writer of its own that
// Commit started has written the items its callers gave up waiting for.
func TestGroupCommitterWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	entered := make(chan string, 2)
	releaseB := sync.OnceFunc(func() { close(release["b"]) })
	t.Cleanup(releaseB) // a failure lets the writer end, and the pool close
	var written sync.Map
	g := NewGroupCommitter(db.Pool, &GroupCommitConfig{InFlight: 1}, func(ctx context.Context, tx pgx.Tx, items []string) error {
		entered <- items[0]
		<-release[items[0]]
		for _, it := range items {
			written.Store(it, true)
		}
		return nil
	})
	first := make(chan error, 1)
	go func() { first <- g.Commit(ctx, "a") }()
	require.Equal(t, "a", <-entered)
	// b waits behind a's transaction; its caller gives up.
	bctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- g.Commit(bctx, "b") }()
	require.Eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.pending) == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	close(release["a"])
	require.NoError(t, <-first)
	require.Equal(t, "b", <-entered, "b is written by a writer of its own")
	waited := make(chan struct{})
	go func() { g.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while b was being written")
	case <-time.After(100 * time.Millisecond):
	}
	releaseB()
	<-waited
	_, ok := written.Load("b")
	require.True(t, ok, "Wait returned before b was written")
}

// TestGroupReader reads the calls asked for while every reader is busy
// with one statement (CallListAnswers), in no transaction: each caller
// gets its own call, or none when it does not exist.
func TestGroupReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	ids := []string{"r1", "r2", "r3"}
	for _, id := range ids {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, Append(ctx, tx, NewEvent{Stream: CallStream(id), Type: EventPaymentVerified, Data: PaymentVerified{
			Op: "diff", Token: "tok-" + id, RequestHash: []byte{1},
			Payment: x402.Payment{Network: "eip155:8453", Payer: "0xabc", Nonce: id, Amount: "1", Payload: json.RawMessage(`{}`)},
		}}))
		require.NoError(t, tx.Commit(ctx))
	}
	type read struct {
		id   string
		call *Call
	}
	var batches []int
	g := NewGroupReader(&GroupCommitConfig{}, func(ctx context.Context, reads []*read) error {
		batches = append(batches, len(reads))
		asked := make([]string, len(reads))
		for i, r := range reads {
			asked[i] = r.id
		}
		calls, err := CallListAnswers(ctx, db.Pool, asked)
		if err != nil {
			return err
		}
		for _, r := range reads {
			for _, c := range calls {
				if c.ID == r.id {
					r.call = c
				}
			}
		}
		return nil
	})
	// Every reader's place is taken: the reads wait, then are read
	// together.
	reads := []*read{{id: "r2"}, {id: "none"}, {id: "r1"}, {id: "r3"}}
	errs := commitQueued(ctx, t, g, reads)
	require.Equal(t, []int{len(reads)}, batches)
	for i, r := range reads {
		require.NoError(t, errs[i])
		if r.id == "none" {
			require.Nil(t, r.call)
			continue
		}
		require.NotNil(t, r.call, r.id)
		require.Equal(t, "tok-"+r.id, r.call.Token)
	}
}

// commitQueued commits items to g while every one of its writers' places
// is taken, so that they wait in g's queue in their order, each queued
// before the next is committed; then the writers come back and write
// what waits. It returns each item's Commit error.
func commitQueued[T any](ctx context.Context, t *testing.T, g *GroupCommitter[T], items []T) []error {
	t.Helper()
	g.inFlight = g.cfg.InFlight
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, item := range items {
		wg.Go(func() { errs[i] = g.Commit(ctx, item) })
		require.Eventually(t, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.pending) == i+1
		}, 5*time.Second, time.Millisecond)
	}
	for range g.cfg.InFlight {
		for g.writeNext(ctx) {
		}
	}
	wg.Wait()
	return errs
}
