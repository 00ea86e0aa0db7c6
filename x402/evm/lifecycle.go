package evm

import (
	"context"
	"errors"
	"sync"
)

// errNotRunning is a settlement asked of a relayer not started, or
// stopped.
var errNotRunning = errors.New("the relayer is not running (Start it first)")

// lifecycle is the span between a Relayer's Start and Stop, and every
// goroutine that works in it: the keepers, the settlements in flight and
// the goroutines they start (batches and their receipt waits). Stop ends
// the span's context and waits for them all.
//
// mu guards ctx, cancel and running; wg counts the goroutines and
// settlements in the span.
type lifecycle struct {
	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	running bool
	wg      sync.WaitGroup
}

// start begins a span under parent and runs each of runs on a goroutine of
// its own with its context. It reports false, and runs nothing, when a
// span is running already.
func (l *lifecycle) start(parent context.Context, runs ...func(ctx context.Context)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		return false
	}
	l.ctx, l.cancel = context.WithCancel(parent)
	l.running = true
	for _, run := range runs {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			run(l.ctx)
		}()
	}
	return true
}

// stop ends the span and waits for everything in it. Stopping a stopped
// lifecycle does nothing.
func (l *lifecycle) stop() {
	l.mu.Lock()
	if !l.running {
		l.mu.Unlock()
		return
	}
	l.running = false
	l.cancel()
	l.mu.Unlock()
	l.wg.Wait()
}

// enter counts a settlement in the span: it returns ctx, which also ends
// when the span does, and leave, to call when the settlement is over. It
// fails when no span runs.
func (l *lifecycle) enter(ctx context.Context) (context.Context, func(), error) {
	l.mu.Lock()
	if !l.running {
		l.mu.Unlock()
		return nil, nil, errNotRunning
	}
	l.wg.Add(1)
	span := l.ctx
	l.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(span, cancel)
	return ctx, func() {
		stop()
		cancel()
		l.wg.Done()
	}, nil
}

// goDetached runs f on a goroutine of the span with ctx's values, not
// ended when ctx is but when the span is. Only a settlement entered or a
// goroutine of the span calls it: the span's count is then above zero, so
// Stop, if waiting already, waits for this one too.
func (l *lifecycle) goDetached(ctx context.Context, f func(ctx context.Context)) {
	l.mu.Lock()
	span := l.ctx
	l.wg.Add(1)
	l.mu.Unlock()
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(span, cancel)
	go func() {
		defer l.wg.Done()
		defer cancel()
		defer stop()
		f(ctx)
	}()
}
