package api

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/x402d/x402d/internal/bounded"
	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/x402"
)

// clientAddresses bounds the client addresses whose refused payments are
// counted (refusedLimiter): about 100 bytes each. Past it the addresses
// seen least recently are forgotten, and start again with a full bucket.
const clientAddresses = 100_000

// refusedLimiter limits, per client address, the payments checked on
// chain that end refused: a token bucket per address of burst tokens,
// refilled at rate a second, one token taken by each such refusal.
// Payments that verify take nothing.
//
// A check may start while the address's tokens exceed its checks under
// way (each of which may end refused), so that a client sending many
// payments at once cannot go past its tokens: its payments past them wait
// for those under way, and are answered 429 once these are refused. An
// address whose payments verified in the last minute is not held so: an
// honest client's payments in flight at once never wait for each other.
type refusedLimiter struct {
	rate, burst float64
	clock       clock.Clock
	buckets     *bounded.Map[string, bucket]
}

// bucket is an address's tokens as of at, with its checks under way and
// when a payment of its last verified.
type bucket struct {
	tokens   float64
	at       time.Time
	pending  int
	verified time.Time
}

const (
	// trustVerifiedFor is how long after a payment of an address verified
	// its payments are checked without waiting for those under way.
	trustVerifiedFor = time.Minute
	// pendingWait bounds how long a payment waits for the checks under
	// way of its address; then it is checked all the same.
	pendingWait = 2 * time.Second
	// pendingPoll is how often a waiting payment looks again.
	pendingPoll = 5 * time.Millisecond
)

func newRefusedLimiter(rate float64, burst int, clk clock.Clock) *refusedLimiter {
	return &refusedLimiter{rate: rate, burst: float64(burst), clock: clock.Or(clk), buckets: bounded.New[string, bucket](clientAddresses)}
}

// refill returns b with its tokens at now.
func (l *refusedLimiter) refill(b bucket, ok bool, now time.Time) bucket {
	if !ok {
		return bucket{tokens: l.burst, at: now}
	}
	b.tokens = refill(b.tokens, b.at, now, l.rate, l.burst)
	b.at = now
	return b
}

// begin is asked before a payment of addr is checked on chain: nil when it
// may be (reserved: it counts among the checks under way until end), or
// the 429 answer when the address is past its limit.
func (l *refusedLimiter) begin(ctx context.Context, addr string) (reserved bool, err error) {
	deadline := l.clock.Now().Add(pendingWait)
	for {
		var ok bool
		var retry time.Duration
		// Read once: a payment that waited its time is checked if the
		// address has a token, never refused for the time alone.
		waited := l.clock.Now().After(deadline)
		l.buckets.Update(addr, func(b bucket, found bool) bucket {
			now := l.clock.Now()
			b = l.refill(b, found, now)
			switch {
			case b.tokens >= 1 && !b.verified.IsZero() && now.Sub(b.verified) < trustVerifiedFor:
				ok = true
			case b.tokens-float64(b.pending) >= 1 || (b.tokens >= 1 && waited):
				ok, reserved = true, true
				b.pending++
			case b.pending == 0 || b.tokens < 1:
				retry = time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
			}
			return b
		})
		switch {
		case ok:
			return reserved, nil
		case retry > 0:
			return false, rateLimited(retry)
		}
		if err := clock.Sleep(ctx, l.clock, pendingPoll); err != nil {
			return false, err
		}
	}
}

// end records the outcome of a check of addr's payment that began:
// refused takes a token, verified marks the address as one whose payments
// verify.
func (l *refusedLimiter) end(addr string, reserved, refused, verified bool) {
	l.buckets.Update(addr, func(b bucket, found bool) bucket {
		now := l.clock.Now()
		b = l.refill(b, found, now)
		if reserved && b.pending > 0 {
			b.pending--
		}
		if refused {
			b.tokens--
		}
		if verified {
			b.verified = now
		}
		return b
	})
}

// refuse takes a token of addr for a payment refused after its check on
// chain ended: its reservation found the payer short of funds
// (x402.ReasonInsufficientFunds).
func (l *refusedLimiter) refuse(addr string) { l.end(addr, false, true, false) }

// rateLimited is the answer to a payment from an address past its limit:
// 429 with Retry-After, nothing charged.
func rateLimited(wait time.Duration) *Error {
	secs := retrySeconds(wait)
	return &Error{Status: 429, Code: "rate_limited", RetryAfter: secs,
		Message: "too many payments from this address were refused after a check on chain; nothing was charged: pay again after " + strconv.Itoa(secs) + " s, from a wallet that holds the amount"}
}

type clientKey struct{}

// withClient returns ctx naming the request's client address (echo's
// RealIP, which trusts a proxy's header only from TrustedProxies).
func withClient(ctx context.Context, ip string) context.Context {
	return context.WithValue(ctx, clientKey{}, clientBucket(ip))
}

// clientOf returns the client address ctx names, "" when none.
func clientOf(ctx context.Context) string {
	s, _ := ctx.Value(clientKey{}).(string)
	return s
}

// clientBucket returns the key of ip's bucket: the address for IPv4, its
// /64 for IPv6 (one host commonly holds a whole /64).
func clientBucket(ip string) string {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	addr = addr.Unmap()
	if addr.Is6() {
		if p, err := addr.Prefix(64); err == nil {
			return p.String()
		}
	}
	return addr.String()
}

// guard returns the chain guard (x402.WithChainGuard) of a payment from
// addr, and the function to call with the payment's outcome: nil when it
// was accepted (now or before), the refusal or the error answered
// otherwise.
func (l *refusedLimiter) guard(ctx context.Context, addr string) (guard func() error, done func(err error)) {
	var began, reserved bool
	return func() error {
			r, err := l.begin(ctx, addr)
			if err != nil {
				return err
			}
			began, reserved = true, r
			return nil
		}, func(err error) {
			if !began {
				return
			}
			_, refused := errors.AsType[*x402.Refusal](err)
			l.end(addr, reserved, refused, err == nil)
		}
}

// ipExtractor returns how the api reads a request's client address: the
// connection's peer, or, from one of trusted, the address X-Forwarded-For
// names (the last one not itself a trusted proxy). Headers from any other
// peer are ignored: a client cannot pick its own address.
func ipExtractor(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		ipnet := &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
		opts = append(opts, echo.TrustIPRange(ipnet))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}
