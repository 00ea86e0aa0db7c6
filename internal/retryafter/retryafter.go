// Package retryafter reads the Retry-After header of an HTTP answer (RFC
// 9110 §10.2.3): the one reading of it for every HTTP client of the
// service (the RPC endpoints, the index's listings and origins).
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Max is the longest wait Parse gives: a year, whatever the header says.
const Max = 365 * 24 * time.Hour

// Parse reads v, a number of seconds or an HTTP date, as the time to wait
// from now, at most Max (a date already past is no wait). ok is false when
// v is empty, a negative number, or neither form.
func Parse(v string, now time.Time) (wait time.Duration, ok bool) {
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
