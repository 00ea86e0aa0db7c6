package startstop

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBase(t *testing.T) {
	tests := []struct {
		name string
		do   func(t *testing.T, b *Base)
	}{
		{"stop before start does nothing", func(t *testing.T, b *Base) {
			b.Stop()
			if b.Running() || b.Done() != nil {
				t.Fatal("a Base never started reports running or a done channel")
			}
		}},
		{"start twice runs once", func(t *testing.T, b *Base) {
			var runs atomic.Int32
			run := func(ctx context.Context) { runs.Add(1); <-ctx.Done() }
			if !b.Start(t.Context(), run) {
				t.Fatal("first Start refused")
			}
			if b.Start(t.Context(), run) {
				t.Fatal("second Start accepted")
			}
			b.Stop()
			if got := runs.Load(); got != 1 {
				t.Fatalf("runs = %d, want 1", got)
			}
		}},
		{"stop waits for runs, entered work and goroutines; twice is a no-op", func(t *testing.T, b *Base) {
			var ended atomic.Int32
			release := make(chan struct{})
			b.Start(t.Context(), func(ctx context.Context) { <-ctx.Done(); <-release; ended.Add(1) })
			ctx, leave, err := b.Enter(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			b.Go(ctx, func(ctx context.Context) { <-ctx.Done(); ended.Add(1) })
			stopped := make(chan struct{})
			go func() { b.Stop(); close(stopped) }()
			<-ctx.Done() // the entered work's context ends with the span
			select {
			case <-stopped:
				t.Fatal("Stop returned with work still entered")
			default:
			}
			leave()
			close(release)
			<-stopped
			<-b.Done()
			if got := ended.Load(); got != 2 {
				t.Fatalf("ended = %d, want 2", got)
			}
			b.Stop()
		}},
		{"enter refused when not running", func(t *testing.T, b *Base) {
			if _, _, err := b.Enter(t.Context()); !errors.Is(err, ErrNotRunning) {
				t.Fatalf("Enter before Start: %v, want ErrNotRunning", err)
			}
			b.Start(t.Context())
			b.Stop()
			if _, _, err := b.Enter(t.Context()); !errors.Is(err, ErrNotRunning) {
				t.Fatalf("Enter after Stop: %v, want ErrNotRunning", err)
			}
		}},
		{"restart after stop", func(t *testing.T, b *Base) {
			b.Start(t.Context())
			b.Stop()
			if !b.Start(t.Context()) {
				t.Fatal("Start after Stop refused")
			}
			b.Stop()
		}},
		{"a restart while stopping keeps the spans apart", func(t *testing.T, b *Base) {
			ended, release := make(chan struct{}), make(chan struct{})
			b.Start(t.Context(), func(ctx context.Context) {
				<-ctx.Done()
				close(ended)
				<-release
				// Work of the first span, started while the second runs,
				// is the first span's.
				b.Go(ctx, func(context.Context) { <-release })
			})
			first := b.Done()
			stopped := make(chan struct{})
			go func() { b.Stop(); close(stopped) }()
			<-ended
			if !b.Start(t.Context(), func(ctx context.Context) { <-ctx.Done() }) {
				t.Fatal("Start refused while the last span stops")
			}
			second := b.Done()
			close(release)
			select {
			case <-stopped:
			case <-time.After(5 * time.Second):
				t.Fatal("the first span's Stop waits for the second span")
			}
			<-first
			select {
			case <-second:
				t.Fatal("the second span done before its Stop")
			default:
			}
			if !b.Running() {
				t.Fatal("the second span does not run")
			}
			b.Stop()
			<-second
		}},
		{"parent's end ends the span", func(t *testing.T, b *Base) {
			ctx, cancel := context.WithCancel(t.Context())
			seen := make(chan struct{})
			b.Start(ctx, func(ctx context.Context) { <-ctx.Done(); close(seen) })
			cancel()
			<-seen
			b.Stop()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.do(t, &Base{}) })
	}
}

type recorder struct {
	name string
	fail bool
	log  *[]string
}

func (r *recorder) Start(context.Context) error {
	if r.fail {
		return errors.New(r.name + " failed")
	}
	*r.log = append(*r.log, "start "+r.name)
	return nil
}

func (r *recorder) Stop() { *r.log = append(*r.log, "stop "+r.name) }

func TestGroup(t *testing.T) {
	var log []string
	var g Group
	err := g.Start(t.Context(), &recorder{"a", false, &log}, &recorder{"b", false, &log}, &recorder{"c", true, &log})
	if err == nil {
		t.Fatal("a failing service did not fail the group")
	}
	want := []string{"start a", "start b", "stop b", "stop a"}
	if len(log) != len(want) {
		t.Fatalf("log = %v, want %v", log, want)
	}
	for i := range want {
		if log[i] != want[i] {
			t.Fatalf("log = %v, want %v", log, want)
		}
	}
	g.Stop()
	if len(log) != len(want) {
		t.Fatalf("a second Stop stopped again: %v", log)
	}
}

func TestFunc(t *testing.T) {
	var ran atomic.Bool
	f := NewFunc(func(ctx context.Context) { <-ctx.Done(); ran.Store(true) })
	if err := f.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.Stop()
	if !ran.Load() {
		t.Fatal("Stop returned before the function did")
	}
	f.Stop()
}

// TestBaseStress starts, stops, enters and goes on a Base from many
// goroutines at once (run it with -race): nothing entered or gone outlives
// the Stop of its span, and every Stop returns.
func TestBaseStress(t *testing.T) {
	var b Base
	var live atomic.Int32 // work of a span not yet left
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				b.Start(t.Context(), func(ctx context.Context) {
					live.Add(1)
					defer live.Add(-1)
					b.Go(ctx, func(ctx context.Context) {
						live.Add(1)
						defer live.Add(-1)
						<-ctx.Done()
					})
					<-ctx.Done()
				})
				if ctx, leave, err := b.Enter(t.Context()); err == nil {
					live.Add(1)
					b.Go(ctx, func(context.Context) {})
					live.Add(-1)
					leave()
				}
				b.Stop()
			}
		})
	}
	wg.Wait()
	b.Stop()
	if n := live.Load(); n != 0 {
		t.Fatalf("%d pieces of work outlived their span's Stop", n)
	}
}
