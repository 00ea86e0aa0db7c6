package api

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/startstop"
	"github.com/x402d/x402d/store"
)

// unpaidLimiter limits the paid calls of the payers and client addresses
// whose calls' runs ended unpaid (failed, or past their payment's
// validBefore; for the payer, also a result whose settlement was refused:
// work done and never charged): a token bucket per payer and
// per client address of burst tokens, refilled at rate a second, one token
// taken by each such run. A payer or address without a token has its
// further paid calls answered 429 with Retry-After after their payment is
// verified and before any work is queued; nothing is charged.
//
// The workers record those runs in Postgres (store.RecordUnpaidWork, in the
// transaction that fails the call or records its refused settlement), so every api process sharing it limits
// alike: each reads the runs of the last burst/rate seconds at start, again
// whenever one is recorded (a notification on store.UnpaidWorkStream, at
// most once every minReread), and every reread, when it also deletes the
// records older than store.UnpaidWorkKept. A call admitted in the
// moment between a run's end and that read is let through; its own run is
// bounded all the same (its operation's budget, JOB_TIMEOUT).
type unpaidLimiter struct {
	rate, burst float64
	pool        *pgxpool.Pool
	listener    *store.Listener
	logger      *slog.Logger
	clock       clock.Clock

	// maxWait is the longest a call can run (Config.ToolWait): a call
	// counted in flight is no more after it.
	maxWait time.Duration
	// base is the span of run (start) and of the calls followed
	// (followLater): they are no more once it stops.
	base startstop.Base

	mu sync.Mutex
	// runs are the ends of the unpaid runs of the last window, oldest
	// first, by key (store.UnpaidPayerKey, store.UnpaidClientKey).
	runs map[string][]time.Time
	// inflight counts, by key with runs, the calls admitted and not ended.
	inflight map[string]int
}

const (
	// minReread is the shortest time between two reads of the unpaid
	// runs: the notifications of a burst of them are read together.
	minReread = 50 * time.Millisecond
	// reread is how often the unpaid runs are read without a
	// notification.
	reread = 30 * time.Second
)

func newUnpaidLimiter(rate float64, burst int, maxWait time.Duration, pool *pgxpool.Pool, listener *store.Listener, logger *slog.Logger, clk clock.Clock) *unpaidLimiter {
	return &unpaidLimiter{rate: rate, burst: float64(burst), maxWait: maxWait, pool: pool, listener: listener, logger: logger, clock: clock.Or(clk)}
}

// start runs the limiter (run) until stop or until ctx ends.
func (l *unpaidLimiter) start(ctx context.Context) { l.base.Start(ctx, l.run) }

// stop ends run and the calls followed, and waits for them.
func (l *unpaidLimiter) stop() { l.base.Stop() }

// window is how far back a run can still weigh: a bucket is full again
// burst/rate seconds after its last run.
func (l *unpaidLimiter) window() time.Duration {
	return time.Duration(l.burst / l.rate * float64(time.Second))
}

// run keeps the limiter's runs read until ctx ends.
func (l *unpaidLimiter) run(ctx context.Context) {
	sub := l.listener.Subscribe(store.UnpaidWorkStream)
	defer sub.Close()
	tick := l.clock.NewTicker(reread)
	defer tick.Stop()
	for {
		if err := l.read(ctx); err != nil && ctx.Err() == nil {
			l.logger.WarnContext(ctx, "read unpaid work", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-sub.C:
		case <-tick.C():
			// The records no limit reads any more go, should no new
			// one come to delete them (store.RecordUnpaidWork).
			if err := store.ForgetUnpaidWork(ctx, l.pool, l.clock.Now().Add(-store.UnpaidWorkKept)); err != nil && ctx.Err() == nil {
				l.logger.WarnContext(ctx, "forget unpaid work", "error", err)
			}
		}
		if clock.Sleep(ctx, l.clock, minReread) != nil {
			return
		}
	}
}

// read replaces the runs with those recorded in the last window.
func (l *unpaidLimiter) read(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	recorded, err := store.UnpaidWorkSince(ctx, l.pool, l.clock.Now().Add(-l.window()))
	if err != nil {
		return err
	}
	runs := make(map[string][]time.Time)
	for _, r := range recorded {
		runs[r.Key] = append(runs[r.Key], r.At)
	}
	l.mu.Lock()
	l.runs = runs
	l.mu.Unlock()
	return nil
}

// tokens returns the tokens left at now to a key whose unpaid runs ended
// at times (oldest first).
func (l *unpaidLimiter) tokens(times []time.Time, now time.Time) float64 {
	tokens := l.burst
	for i, at := range times {
		if i > 0 {
			tokens = math.Min(l.burst, tokens+at.Sub(times[i-1]).Seconds()*l.rate)
		}
		tokens--
	}
	if n := len(times); n > 0 {
		tokens = math.Min(l.burst, tokens+now.Sub(times[n-1]).Seconds()*l.rate)
	}
	return tokens
}

// admit is asked before a paid call of payer (an unpaid-work key) from
// client (another, "" for none) is admitted: the 429 answer when either has
// no token left, with by, what was limited ("payer" or "client"). A key
// whose runs ended unpaid lately also counts its calls this process
// admitted that have not ended, each as a token spent, so that calls sent
// at once when a token comes back run one, not all: held are the keys the
// call counts under, to give back with release once it ends (follow).
// Keys without unpaid runs count nothing: an honest client's calls in
// flight at once never wait for each other.
func (l *unpaidLimiter) admit(payer, client string) (held []string, by string, err *Error) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.runs) == 0 {
		return nil, "", nil
	}
	for _, k := range []struct{ by, key string }{{"payer", payer}, {"client", client}} {
		times := l.runs[k.key]
		if k.key == "" || len(times) == 0 {
			continue
		}
		if tokens := l.tokens(times, now) - float64(l.inflight[k.key]); tokens < 1 {
			return nil, k.by, unpaidLimited(k.by, time.Duration((1-tokens)/l.rate*float64(time.Second)))
		}
		held = append(held, k.key)
	}
	if l.inflight == nil {
		l.inflight = map[string]int{}
	}
	for _, k := range held {
		l.inflight[k]++
	}
	return held, "", nil
}

// release gives back the tokens a call held (admit).
func (l *unpaidLimiter) release(held []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range held {
		if l.inflight[k]--; l.inflight[k] <= 0 {
			delete(l.inflight, k)
		}
	}
}

// followLater follows call callID (follow) on a goroutine of the limiter's
// span; when the limiter does not run, the tokens are released at once.
func (l *unpaidLimiter) followLater(callID string, held []string, sub *store.Subscription) {
	ctx, leave, err := l.base.Enter(context.Background())
	if err != nil {
		sub.Close()
		l.release(held)
		return
	}
	go func() {
		defer leave()
		l.follow(ctx, callID, held, sub)
	}()
}

// follow releases the tokens call callID held (admit) once it ends, as sub
// (its stream's subscription, made before it was recorded) tells, after
// l.maxWait at most, or when ctx ends; it closes sub.
func (l *unpaidLimiter) follow(ctx context.Context, callID string, held []string, sub *store.Subscription) {
	defer sub.Close()
	defer l.release(held)
	timer := l.clock.NewTimer(l.maxWait)
	defer timer.Stop()
	for {
		select {
		case typ := <-sub.C:
			if store.IsFinalEvent(typ) {
				return
			}
			if typ == "" {
				// A reconnect: what ended meanwhile is read.
				call, err := store.CallGetAnswer(ctx, l.pool, callID)
				if err == nil && store.IsFinal(call.State) {
					return
				}
			}
		case <-timer.C():
			return
		case <-ctx.Done():
			return
		}
	}
}

// unpaidLimited is the answer to a paid call of a payer or client address
// (by) past its unpaid-work limit: 429 with Retry-After, nothing charged.
func unpaidLimited(by string, wait time.Duration) *Error {
	secs := max(1, int(math.Ceil(wait.Seconds())))
	who := "this payer"
	if by == "client" {
		who = "this address"
	}
	return &Error{Status: 429, Code: "unpaid_work_limited", RetryAfter: secs,
		Message: "too many paid calls of " + who + " ended unpaid (their operation failed or ran past the payment's validBefore); nothing was charged and nothing was run: call again after " + strconv.Itoa(secs) + " s"}
}
