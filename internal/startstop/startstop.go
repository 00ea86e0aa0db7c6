// Package startstop is the one lifecycle of the service's long-running
// parts: a span between Start and Stop, and every goroutine that works in
// it. Stop ends the span's context and waits for all of them; stopping
// twice, or stopping what never started, does nothing; Done tells when a
// span has ended.
//
// A part embeds a Base (its zero value is ready) and starts its loops with
// Start; work it does on behalf of callers while running (a settlement in
// flight, a request) is counted with Enter, and goroutines it starts later
// with Go, so that Stop returns only once nothing of the part still runs.
//
//	type Follower struct {
//		startstop.Base
//		...
//	}
//
//	func (f *Follower) Start(ctx context.Context) error {
//		f.Base.Start(ctx, f.loop)
//		return nil
//	}
package startstop

import (
	"context"
	"errors"
	"sync"
)

// ErrNotRunning is the error of Enter on a part not started, or stopped.
var ErrNotRunning = errors.New("not running (Start it first)")

// Base is a lifecycle: embed it in a long-running part. Its zero value is
// stopped and ready to Start. A Base may be started again after Stop, even
// while that Stop still waits: each span counts its own work.
//
// mu guards cur, the running span (nil when stopped), and last, the latest
// span started (Go's, Done's).
type Base struct {
	mu   sync.Mutex
	cur  *span
	last *span
}

// span is one run of a Base, from Start to Stop: its context (which
// carries the span under spanKey), the count of its goroutines and entered
// work, and done, closed once they returned.
type span struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{}
}

// Start begins a span under parent and runs each of runs on a goroutine of
// its own with the span's context, which ends at Stop or when parent does.
// It reports false, and runs nothing, when a span is running already.
func (b *Base) Start(parent context.Context, runs ...func(ctx context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur != nil {
		return false
	}
	sp := &span{done: make(chan struct{})}
	sp.ctx, sp.cancel = context.WithCancel(parent)
	sp.ctx = context.WithValue(sp.ctx, spanKey{b}, sp)
	b.cur, b.last = sp, sp
	for _, run := range runs {
		sp.wg.Add(1)
		go func() {
			defer sp.wg.Done()
			run(sp.ctx)
		}()
	}
	return true
}

// Stop ends the span and waits for everything in it: the runs of Start,
// the goroutines of Go and the work entered with Enter. Stopping a stopped
// Base does nothing.
func (b *Base) Stop() {
	b.mu.Lock()
	sp := b.cur
	b.cur = nil
	b.mu.Unlock()
	if sp == nil {
		return
	}
	sp.cancel()
	sp.wg.Wait()
	close(sp.done)
}

// Running reports whether a span has started and not been stopped.
func (b *Base) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cur != nil
}

// Done returns a channel closed once the latest span has stopped and
// everything in it has returned; it is nil before the first Start.
func (b *Base) Done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == nil {
		return nil
	}
	return b.last.done
}

// Context returns the running span's context, and false when no span runs.
func (b *Base) Context() (context.Context, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur == nil {
		return nil, false
	}
	return b.cur.ctx, true
}

// Enter counts a piece of work in the span: it returns ctx, which also
// ends when the span does, and leave, to call when the work is over. Stop
// waits for every leave. It fails with ErrNotRunning when no span runs.
func (b *Base) Enter(ctx context.Context) (context.Context, func(), error) {
	b.mu.Lock()
	sp := b.cur
	if sp == nil {
		b.mu.Unlock()
		return nil, nil, ErrNotRunning
	}
	sp.wg.Add(1)
	b.mu.Unlock()
	ctx, cancel := context.WithCancel(context.WithValue(ctx, spanKey{b}, sp))
	stop := context.AfterFunc(sp.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
		sp.wg.Done()
	}, nil
}

// Go runs f on a goroutine of the span with ctx's values, ended not when
// ctx is but when the span is. Only work of the span calls it (a run of
// Start, work entered with Enter, or a goroutine of Go), with the context
// it was given: the goroutine joins that work's span, even once another
// has started, and that span's count is above zero, so its Stop, if
// already waiting, waits for this one too, and f runs even while the span
// is stopping (its context then ended). Given another context, the
// goroutine joins the latest span. It reports false, and runs nothing,
// before the first Start.
func (b *Base) Go(ctx context.Context, f func(ctx context.Context)) bool {
	b.mu.Lock()
	sp, ok := ctx.Value(spanKey{b}).(*span)
	if !ok {
		sp = b.last
	}
	if sp == nil {
		b.mu.Unlock()
		return false
	}
	sp.wg.Add(1)
	b.mu.Unlock()
	ctx, cancel := context.WithCancel(context.WithValue(context.WithoutCancel(ctx), spanKey{b}, sp))
	stop := context.AfterFunc(sp.ctx, cancel)
	go func() {
		defer sp.wg.Done()
		defer cancel()
		defer stop()
		f(ctx)
	}()
	return true
}

// spanKey is the context key of a Base's span, whose value is the *span
// the context's work belongs to.
type spanKey struct{ b *Base }

// Group starts and stops several parts as one: Start starts them in
// order, and on the first failure stops those started; Stop stops them in
// reverse order. Its zero value is ready.
type Group struct {
	mu      sync.Mutex
	started []Service
}

// Service is a long-running part with the lifecycle of this package.
type Service interface {
	Start(ctx context.Context) error
	Stop()
}

// Start starts each of services in order. On an error it stops those it
// started, in reverse order, and returns the error.
func (g *Group) Start(ctx context.Context, services ...Service) error {
	for _, s := range services {
		if err := s.Start(ctx); err != nil {
			g.Stop()
			return err
		}
		g.mu.Lock()
		g.started = append(g.started, s)
		g.mu.Unlock()
	}
	return nil
}

// Stop stops every service started, the last started first. Stopping
// twice does nothing.
func (g *Group) Stop() {
	g.mu.Lock()
	started := g.started
	g.started = nil
	g.mu.Unlock()
	for i := len(started) - 1; i >= 0; i-- {
		started[i].Stop()
	}
}

// Func is a Service of a function that runs until its context ends: Start
// runs it on a goroutine, Stop ends its context and waits for it.
type Func struct {
	base Base
	run  func(ctx context.Context)
}

// NewFunc returns a Service that runs run between Start and Stop.
func NewFunc(run func(ctx context.Context)) *Func { return &Func{run: run} }

// Start runs the function on a goroutine; starting twice does nothing.
func (f *Func) Start(ctx context.Context) error {
	f.base.Start(ctx, f.run)
	return nil
}

// Stop ends the function's context and waits for it to return.
func (f *Func) Stop() { f.base.Stop() }
