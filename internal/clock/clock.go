// Package clock is the one clock of the service's long-running parts:
// Real reads the system's, and a test gives a part a Fake that it moves
// forward itself (Advance), so a test of timing drives time instead of
// sleeping. A part takes a Clock in its configuration and uses it for
// every Now, timer and ticker; nil means Real.
package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers and tickers that follow it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once d has passed.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that fires every d; d must be positive.
	NewTicker(d time.Duration) Ticker
}

// Timer is a time.Timer of a Clock.
type Timer interface {
	// C is the channel the timer fires on.
	C() <-chan time.Time
	// Stop stops the timer; it reports whether the timer was pending.
	Stop() bool
	// Reset sets the timer to fire once d has passed from now; it reports
	// whether the timer was pending.
	Reset(d time.Duration) bool
}

// Ticker is a time.Ticker of a Clock.
type Ticker interface {
	// C is the channel the ticker fires on.
	C() <-chan time.Time
	// Stop stops the ticker.
	Stop()
	// Reset stops the ticker and makes it fire every d from now.
	Reset(d time.Duration)
}

// Or returns c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real()
	}
	return c
}

// Sleep waits d on c, or until ctx ends, whose error it then returns.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// Real returns the system's clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time   { return t.t.C }
func (t realTicker) Stop()                 { t.t.Stop() }
func (t realTicker) Reset(d time.Duration) { t.t.Reset(d) }

// Fake is a Clock that moves only when told: Advance and Set fire, in
// time order, every timer and ticker whose time has come. Its channels
// hold one tick, like the runtime's, and a tick not taken is dropped;
// Stop and Reset drop the tick not taken, like the runtime's.
// Wait lets a test know a part is waiting on the clock before it moves it.
//
// mu guards every field; changed is closed and replaced whenever a timer
// is added or removed.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeTimer
	changed chan struct{}
}

// NewFake returns a Fake reading now.
func NewFake(now time.Time) *Fake {
	return &Fake{now: now, changed: make(chan struct{})}
}

// Now returns the Fake's time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer firing once the Fake has moved d forward.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// NewTicker returns a ticker firing each time the Fake has moved d.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), every: d}
	t.Reset(d)
	return fakeTicker{t}
}

// Advance moves the Fake d forward, firing what comes due on the way.
func (f *Fake) Advance(d time.Duration) { f.Set(f.Now().Add(d)) }

// Set moves the Fake to t (never back), firing what comes due on the way,
// each at its own time.
func (f *Fake) Set(t time.Time) {
	for {
		f.mu.Lock()
		if t.Before(f.now) {
			f.mu.Unlock()
			return
		}
		var next *fakeTimer
		for _, w := range f.waiters {
			if !w.at.After(t) && (next == nil || w.at.Before(next.at)) {
				next = w
			}
		}
		if next == nil {
			f.now = t
			f.mu.Unlock()
			return
		}
		if next.at.After(f.now) {
			f.now = next.at
		}
		f.remove(next)
		if next.every > 0 {
			next.at = next.at.Add(next.every)
			f.add(next)
		}
		// Sent under mu, so that a Stop or Reset that drains the channel
		// leaves no tick of the time before.
		select {
		case next.c <- f.now:
		default:
		}
		f.mu.Unlock()
	}
}

// Waiters returns how many timers and tickers are pending.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// Wait returns once at least n timers and tickers are pending, or with
// ctx's error: a test calls it to know the part it drives is waiting on
// the clock before it Advances it.
func (f *Fake) Wait(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		if len(f.waiters) >= n {
			f.mu.Unlock()
			return nil
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// Next returns the time the next pending timer or ticker fires, and false
// when none is pending.
func (f *Fake) Next() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.waiters) == 0 {
		return time.Time{}, false
	}
	ws := append([]*fakeTimer(nil), f.waiters...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].at.Before(ws[j].at) })
	return ws[0].at, true
}

func (f *Fake) add(t *fakeTimer) {
	f.waiters = append(f.waiters, t)
	close(f.changed)
	f.changed = make(chan struct{})
}

// remove reports whether t was pending.
func (f *Fake) remove(t *fakeTimer) bool {
	for i, w := range f.waiters {
		if w == t {
			f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
			close(f.changed)
			f.changed = make(chan struct{})
			return true
		}
	}
	return false
}

// fakeTimer is a timer (every 0) or a ticker of a Fake.
type fakeTimer struct {
	f     *Fake
	c     chan time.Time
	at    time.Time
	every time.Duration
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

// Stop and Reset drain the channel, as the runtime's timers do: no tick
// of the time before is received after they return.
func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.drain()
	return t.f.remove(t)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.drain()
	pending := t.f.remove(t)
	if t.every > 0 {
		t.every = d
	}
	t.at = t.f.now.Add(d)
	if d > 0 {
		t.f.add(t)
	} else {
		t.c <- t.f.now // drained above: there is room
	}
	return pending
}

// drain drops the tick waiting in the channel, if any; t.f.mu is held.
func (t *fakeTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}

// fakeTicker is the Ticker face of a fakeTimer with an interval.
type fakeTicker struct{ t *fakeTimer }

func (t fakeTicker) C() <-chan time.Time { return t.t.c }
func (t fakeTicker) Stop()               { t.t.Stop() }
func (t fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset")
	}
	t.t.Reset(d)
}
