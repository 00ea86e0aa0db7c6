package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/startstop"
)

// Listener holds one LISTEN connection for the whole process and fans the
// notifications of Append out to the goroutines waiting on a stream.
//
// A subscriber must subscribe before the change it waits for can commit, then
// re-read the state it cares about after every wake-up: a notification says
// only that something happened. When the connection is lost and re-opened,
// every subscriber is woken once so that nothing committed meanwhile is
// missed.
type Listener struct {
	startstop.Base
	config *pgx.ConnConfig
	logger *slog.Logger
	// clock times the reconnections.
	clock clock.Clock

	mu   sync.Mutex
	subs map[string]map[*Subscription]struct{}
}

// Subscription receives the event types appended to one stream.
type Subscription struct {
	// C receives the type of each event appended to the stream, or "" after
	// a reconnect. It is buffered; when it is full, further wake-ups are
	// dropped (the subscriber re-reads state anyway).
	C <-chan string

	c        chan string
	stream   string
	listener *Listener
}

// NewListener returns a Listener that connects with config (a copy is made).
func NewListener(config *pgx.ConnConfig, logger *slog.Logger) *Listener {
	return &Listener{
		config: config.Copy(),
		logger: logger,
		clock:  clock.Real(),
		subs:   map[string]map[*Subscription]struct{}{},
	}
}

// Start connects and listens in a goroutine until Stop, which closes the
// connection and waits for it; stopping twice does nothing. It returns once
// the first LISTEN is in place, or with the error of the first connection.
// Starting a started Listener does nothing.
func (l *Listener) Start(ctx context.Context) error {
	if l.Running() {
		return nil
	}
	conn, err := l.connect(ctx)
	if err != nil {
		return err
	}
	if !l.Base.Start(context.WithoutCancel(ctx), func(ctx context.Context) { l.run(ctx, conn) }) {
		_ = conn.Close(ctx)
	}
	return nil
}

func (l *Listener) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.config)
	if err != nil {
		return nil, fmt.Errorf("listener: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("listener: listen: %w", err)
	}
	return conn, nil
}

func (l *Listener) run(ctx context.Context, conn *pgx.Conn) {
	backoff := 50 * time.Millisecond
	for {
		for conn == nil {
			if clock.Sleep(ctx, l.clock, backoff) != nil {
				return
			}
			var err error
			if conn, err = l.connect(ctx); err != nil {
				l.logger.WarnContext(ctx, "listener reconnect failed", "error", err, "retry_in", backoff)
				backoff = min(backoff*2, 5*time.Second)
				continue
			}
			backoff = 50 * time.Millisecond
			l.logger.InfoContext(ctx, "listener reconnected")
			l.wakeAll()
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			_ = conn.Close(context.Background())
			conn = nil
			if ctx.Err() != nil {
				return
			}
			l.logger.WarnContext(ctx, "listener lost its connection", "error", err)
			continue
		}
		stream, typ, _ := strings.Cut(n.Payload, "\t")
		l.deliver(stream, typ)
	}
}

// Subscribe returns a subscription to stream. Close it when done.
func (l *Listener) Subscribe(stream string) *Subscription {
	c := make(chan string, 16)
	s := &Subscription{C: c, c: c, stream: stream, listener: l}
	l.mu.Lock()
	set := l.subs[stream]
	if set == nil {
		set = map[*Subscription]struct{}{}
		l.subs[stream] = set
	}
	set[s] = struct{}{}
	l.mu.Unlock()
	return s
}

// Close ends the subscription.
func (s *Subscription) Close() {
	l := s.listener
	l.mu.Lock()
	defer l.mu.Unlock()
	if set := l.subs[s.stream]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(l.subs, s.stream)
		}
	}
}

func (l *Listener) deliver(stream, typ string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.subs[stream] {
		select {
		case s.c <- typ:
		default:
		}
	}
}

func (l *Listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, set := range l.subs {
		for s := range set {
			select {
			case s.c <- "":
			default:
			}
		}
	}
}
