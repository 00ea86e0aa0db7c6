package clock

import (
	"context"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case at := <-c:
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestFakeTimer(t *testing.T) {
	tests := []struct {
		name    string
		after   time.Duration
		advance []time.Duration
		want    bool
		wantAt  time.Time
	}{
		{"not yet", 10 * time.Second, []time.Duration{9 * time.Second}, false, time.Time{}},
		{"exactly due", 10 * time.Second, []time.Duration{10 * time.Second}, true, t0.Add(10 * time.Second)},
		{"fires at its own time when passed", 10 * time.Second, []time.Duration{time.Minute}, true, t0.Add(10 * time.Second)},
		{"in steps", 10 * time.Second, []time.Duration{4 * time.Second, 4 * time.Second, 4 * time.Second}, true, t0.Add(10 * time.Second)},
		{"zero fires at once", 0, nil, true, t0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake(t0)
			tm := f.NewTimer(tt.after)
			for _, d := range tt.advance {
				f.Advance(d)
			}
			at, ok := fired(tm.C())
			if ok != tt.want || (ok && !at.Equal(tt.wantAt)) {
				t.Fatalf("fired %v at %v, want %v at %v", ok, at, tt.want, tt.wantAt)
			}
		})
	}
}

func TestFakeTimerStopReset(t *testing.T) {
	f := NewFake(t0)
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	f.Advance(time.Hour)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("a stopped timer fired")
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a stopped timer reported it pending")
	}
	f.Advance(time.Second)
	if _, ok := fired(tm.C()); !ok {
		t.Fatal("a reset timer did not fire")
	}
	if f.Waiters() != 0 {
		t.Fatalf("waiters = %d after the timer fired", f.Waiters())
	}
}

// TestFakeStopResetDrain: a tick not taken before Stop or Reset is not
// received after them, as with the runtime's timers (Go 1.23 on), so that
// a timer made with 0 and reset (a linger's) does not fire at once.
func TestFakeStopResetDrain(t *testing.T) {
	tests := []struct {
		name string
		// ticked returns a channel holding a tick, and what to do then.
		ticked func(f *Fake) (<-chan time.Time, func())
	}{
		{"timer reset", func(f *Fake) (<-chan time.Time, func()) {
			tm := f.NewTimer(0)
			return tm.C(), func() { tm.Reset(time.Second) }
		}},
		{"timer stop", func(f *Fake) (<-chan time.Time, func()) {
			tm := f.NewTimer(0)
			return tm.C(), func() { tm.Stop() }
		}},
		{"ticker reset", func(f *Fake) (<-chan time.Time, func()) {
			tk := f.NewTicker(time.Second)
			f.Advance(time.Second)
			return tk.C(), func() { tk.Reset(time.Minute) }
		}},
		{"ticker stop", func(f *Fake) (<-chan time.Time, func()) {
			tk := f.NewTicker(time.Second)
			f.Advance(time.Second)
			return tk.C(), tk.Stop
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, then := tt.ticked(NewFake(t0))
			then()
			if at, ok := fired(c); ok {
				t.Fatalf("a tick of before received: %v", at)
			}
		})
	}
}

func TestFakeTicker(t *testing.T) {
	f := NewFake(t0)
	tk := f.NewTicker(time.Second)
	var got []time.Time
	for range 3 {
		f.Advance(time.Second)
		at, ok := fired(tk.C())
		if !ok {
			t.Fatal("the ticker did not fire")
		}
		got = append(got, at)
	}
	for i, at := range got {
		if want := t0.Add(time.Duration(i+1) * time.Second); !at.Equal(want) {
			t.Fatalf("tick %d at %v, want %v", i, at, want)
		}
	}
	f.Advance(5 * time.Second) // ticks not taken are dropped, one is kept
	if _, ok := fired(tk.C()); !ok {
		t.Fatal("no tick kept")
	}
	if _, ok := fired(tk.C()); ok {
		t.Fatal("more than one tick kept")
	}
	tk.Reset(time.Minute)
	f.Advance(time.Second)
	if _, ok := fired(tk.C()); ok {
		t.Fatal("the reset ticker fired at its old interval")
	}
	tk.Stop()
	if f.Waiters() != 0 {
		t.Fatal("a stopped ticker still waits")
	}
}

func TestFakeWaitAndSleep(t *testing.T) {
	f := NewFake(t0)
	done := make(chan error, 1)
	go func() { done <- Sleep(t.Context(), f, time.Minute) }()
	if err := f.Wait(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if next, ok := f.Next(); !ok || !next.Equal(t0.Add(time.Minute)) {
		t.Fatalf("next = %v %v", next, ok)
	}
	f.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Sleep(ctx, f, time.Hour); err == nil {
		t.Fatal("Sleep on an ended context returned nil")
	}
	if err := f.Wait(ctx, 5); err == nil {
		t.Fatal("Wait on an ended context returned nil")
	}
}

func TestReal(t *testing.T) {
	c := Or(nil)
	if d := time.Since(c.Now()); d < 0 || d > time.Minute {
		t.Fatalf("Real().Now() is %v from time.Now()", d)
	}
	tm := c.NewTimer(0)
	<-tm.C()
	tk := c.NewTicker(time.Millisecond)
	<-tk.C()
	tk.Stop()
}
