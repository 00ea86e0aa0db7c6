package browser

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Lazy is a Pool started on its first Render, so processes that never render
// a page never start Chromium. A failed start is retried on a later Render,
// at most once per RetryAfter.
type Lazy struct {
	cfg        Config
	retryAfter time.Duration

	mu       sync.Mutex
	pool     *Pool
	lastErr  error
	failedAt time.Time
	closed   bool
}

// NewLazy returns a Lazy pool with a copy of cfg. Close it like a Pool.
func NewLazy(cfg *Config) *Lazy {
	return &Lazy{cfg: *cfg, retryAfter: 30 * time.Second}
}

// Render starts the pool if needed and renders rawURL (see Pool.Render).
func (l *Lazy) Render(ctx context.Context, rawURL string) (html, finalURL string, err error) {
	p, err := l.get(ctx)
	if err != nil {
		return "", "", err
	}
	return p.Render(ctx, rawURL)
}

func (l *Lazy) get(ctx context.Context) (*Pool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return nil, errors.New("browser: pool closed")
	case l.pool != nil:
		return l.pool, nil
	case l.lastErr != nil && time.Since(l.failedAt) < l.retryAfter:
		return nil, l.lastErr
	}
	p, err := New(ctx, &l.cfg)
	if err != nil {
		l.lastErr, l.failedAt = err, time.Now()
		return nil, err
	}
	l.pool, l.lastErr = p, nil
	return p, nil
}

// Close closes the pool if it was started.
func (l *Lazy) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.pool == nil {
		return nil
	}
	return l.pool.Close()
}
