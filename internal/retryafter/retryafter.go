// Package retryafter reads the Retry-After header of an HTTP answer (RFC
// 9110 §10.2.3): a number of seconds or an HTTP date, into the time to
// wait. The JSON-RPC client of the chains and the index's crawler both
// read it here.
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Max is the longest wait Parse returns: a number of seconds above it (up
// to the largest int64) is read as Max, so that no header overflows a
// time.Duration.
const Max = 365 * 24 * time.Hour

// Parse returns the wait that v, a Retry-After value, asks for from now:
// its seconds, at most Max, or the time until its HTTP date (zero for a
// date past). It reports false for an empty value, a negative number or
// anything else that is neither form.
func Parse(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, int64(Max/time.Second))) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return min(max(at.Sub(now), 0), Max), true
	}
	return 0, false
}
