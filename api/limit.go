package api

import (
	"context"
	"math"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/x402d/x402d/internal/bounded"
)

// clientAddresses bounds the client addresses whose refused payments are
// counted (refusedLimiter): about 100 bytes each. Past it the addresses
// seen least recently are forgotten, and start again with a full bucket.
const clientAddresses = 100_000

// refusedLimiter limits, per client address, the payments checked on
// chain that end refused: a token bucket per address of burst tokens,
// refilled at rate a second. A payment may be checked on chain while the
// address's bucket holds a token (allow); one that ends refused takes one
// (charge), so that payments that verify never use the bucket. Payments
// checked at the same time may take it below zero: the debt is paid back
// before the address is allowed again, so the rate holds on average.
type refusedLimiter struct {
	rate, burst float64
	now         func() time.Time
	buckets     *bounded.Map[string, bucket]
}

// bucket is an address's tokens as of at.
type bucket struct {
	tokens float64
	at     time.Time
}

func newRefusedLimiter(rate float64, burst int, now func() time.Time) *refusedLimiter {
	return &refusedLimiter{rate: rate, burst: float64(burst), now: now, buckets: bounded.New[string, bucket](clientAddresses)}
}

// level returns b's tokens at now.
func (l *refusedLimiter) level(b bucket, ok bool, now time.Time) float64 {
	if !ok {
		return l.burst
	}
	return math.Min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
}

// allow reports whether addr may have a payment checked on chain now and,
// when it may not, how long until it may.
func (l *refusedLimiter) allow(addr string) (bool, time.Duration) {
	b, ok := l.buckets.Get(addr)
	tokens := l.level(b, ok, l.now())
	if tokens >= 1 {
		return true, 0
	}
	return false, time.Duration((1 - tokens) / l.rate * float64(time.Second))
}

// charge takes a token from addr's bucket: a payment checked on chain was
// refused.
func (l *refusedLimiter) charge(addr string) {
	now := l.now()
	l.buckets.Update(addr, func(b bucket, ok bool) bucket {
		return bucket{tokens: l.level(b, ok, now) - 1, at: now}
	})
}

// rateLimited is the answer to a payment from an address past its limit:
// 429 with Retry-After, nothing charged.
func rateLimited(wait time.Duration) *Error {
	secs := max(1, int(math.Ceil(wait.Seconds())))
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

// refusedGuard returns the chain guard (x402.WithChainGuard) of a payment
// from addr, and the function that reports whether the guard let the chain
// be read.
func (l *refusedLimiter) guard(addr string) (guard func() error, checked func() bool) {
	var mu sync.Mutex
	var read bool
	return func() error {
			if ok, wait := l.allow(addr); !ok {
				return rateLimited(wait)
			}
			mu.Lock()
			read = true
			mu.Unlock()
			return nil
		}, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return read
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
