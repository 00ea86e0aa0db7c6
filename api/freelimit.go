package api

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/x402d/x402d/internal/bounded"
	"github.com/x402d/x402d/internal/clock"
)

// freeLimiter limits, per client address, the requests of the free
// surfaces (/mcp, /api/xindex/*, /x402-index*): a token bucket per address
// of burst tokens, refilled at rate a second, one token taken by each
// request (by each message of an MCP request but paid tool calls, up to
// burst). Paid calls (/api/x402/*) are not limited by it.
type freeLimiter struct {
	rate, burst float64
	clock       clock.Clock
	buckets     *bounded.Map[string, freeBucket]
}

// freeBucket is an address's tokens as of at.
type freeBucket struct {
	tokens float64
	at     time.Time
}

func newFreeLimiter(rate float64, burst int, clk clock.Clock) *freeLimiter {
	return &freeLimiter{rate: rate, burst: float64(burst), clock: clock.Or(clk), buckets: bounded.New[string, freeBucket](clientAddresses)}
}

// take takes n tokens (at most burst) from addr's bucket: 0 when it held
// them, otherwise how long until it will (nothing is taken then).
func (l *freeLimiter) take(addr string, n int) time.Duration {
	cost := math.Min(float64(max(n, 1)), l.burst)
	var wait time.Duration
	l.buckets.Update(addr, func(b freeBucket, found bool) freeBucket {
		now := l.clock.Now()
		if !found {
			b = freeBucket{tokens: l.burst, at: now}
		}
		b.tokens = refill(b.tokens, b.at, now, l.rate, l.burst)
		b.at = now
		if b.tokens >= cost {
			b.tokens -= cost
		} else {
			wait = time.Duration((cost - b.tokens) / l.rate * float64(time.Second))
		}
		return b
	})
	return wait
}

// refill returns a token bucket's tokens at now, from tokens at at,
// refilled at rate a second up to burst.
func refill(tokens float64, at, now time.Time, rate, burst float64) float64 {
	return math.Min(burst, tokens+now.Sub(at).Seconds()*rate)
}

// retrySeconds is a wait as Retry-After's whole seconds, at least 1.
func retrySeconds(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}

// tooManyRequests is the answer to a free request from an address past its
// rate: 429 rate_limited with Retry-After.
func tooManyRequests(wait time.Duration) *Error {
	secs := retrySeconds(wait)
	return &Error{Status: http.StatusTooManyRequests, Code: "rate_limited", RetryAfter: secs,
		Message: "too many requests from this address (FREE_REQUESTS_PER_SECOND): send again after " + strconv.Itoa(secs) + " s"}
}

// limitFree is the middleware of the free HTTP surfaces: a client past its
// rate gets 429 with Retry-After, as JSON, or as a short page on the index's
// HTML pages.
func (s *Server) limitFree(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		wait := s.free.take(clientBucket(c.RealIP()), 1)
		if wait == 0 {
			return next(c)
		}
		s.cfg.Metrics.FreeRefused(surfaceOf(c.Request().URL.Path), "rate_limited")
		err := tooManyRequests(wait)
		if !strings.HasPrefix(c.Request().URL.Path, "/x402-index") {
			return err
		}
		c.Response().Header().Set("Retry-After", strconv.Itoa(err.RetryAfter))
		c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
		return c.HTML(http.StatusTooManyRequests, "<!doctype html><title>429 Too many requests</title><p>Too many requests from this address. Try again in "+
			strconv.Itoa(err.RetryAfter)+" s.</p>\n")
	}
}

// admitMCP is the MCP endpoint's Admit: a request takes a token per
// message that is not a paid tool call; past its rate the client gets 429
// with Retry-After and the JSON error.
func (s *Server) admitMCP(w http.ResponseWriter, r *http.Request, free int) bool {
	wait := s.free.take(clientOf(r.Context()), free)
	if wait == 0 {
		return true
	}
	s.cfg.Metrics.FreeRefused("mcp", "rate_limited")
	err := tooManyRequests(wait)
	w.Header().Set("Retry-After", strconv.Itoa(err.RetryAfter))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(echo.HeaderCacheControl, "no-store")
	w.WriteHeader(err.Status)
	body, _ := json.Marshal(err)
	_, _ = w.Write(body)
	return false
}

// surfaceOf names the free surface of path, for the metrics: xindex or
// page.
func surfaceOf(path string) string {
	if strings.HasPrefix(path, "/x402-index") {
		return "page"
	}
	return "xindex"
}
