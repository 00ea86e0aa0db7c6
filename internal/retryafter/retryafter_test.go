package retryafter

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParse reads seconds and HTTP dates, bounds both by Max (a number of
// seconds past time.Duration's range does not wrap around), gives no wait
// for a date past, and refuses what is neither.
func TestParse(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name, v string
		want    time.Duration
		ok      bool
	}{
		{"Seconds", "120", 2 * time.Minute, true},
		{"Spaces", " 7 ", 7 * time.Second, true},
		{"Zero", "0", 0, true},
		{"Date", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"DatePast", now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"SecondsHuge", "9223372036854775807", Max, true},
		{"SecondsPastDuration", "10000000000", Max, true},
		{"DateFar", now.AddDate(5, 0, 0).Format(http.TimeFormat), Max, true},
		{"Empty", "", 0, false},
		{"Negative", "-5", 0, false},
		{"Fraction", "1.5", 0, false},
		{"Words", "soon", 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := Parse(tt.v, now)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
		})
	}
}
