package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/store"
)

// TestLoadConfigProbeRetention reads INDEX_PROBE_RETENTION: by default the
// 31 days the index's history reads, in days or a Go duration, 0 to keep
// the probes as long as their partition, never negative.
func TestLoadConfigProbeRetention(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		value   string
		want    time.Duration
		wantErr string
	}{
		{"", store.ProbeHoursKept, ""},
		{"60d", 60 * 24 * time.Hour, ""},
		{"36h", 36 * time.Hour, ""},
		{"0", 0, ""},
		{"-1h", 0, `INDEX_PROBE_RETENTION: "-1h" is not a duration`},
		{"a month", 0, `INDEX_PROBE_RETENTION: "a month" is not a duration`},
	} {
		cfg, err := loadConfig(func(k string) string {
			if k == "INDEX_PROBE_RETENTION" {
				return tt.value
			}
			return ""
		})
		if tt.wantErr != "" {
			require.ErrorContains(t, err, tt.wantErr, tt.value)
			continue
		}
		require.NoError(t, err, tt.value)
		require.Equal(t, tt.want, cfg.IndexProbeRetention, tt.value)
	}
}
