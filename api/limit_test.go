package api

import (
	"fmt"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRefusedLimiter(t *testing.T) {
	t.Parallel()
	type step struct {
		// at is the time of the step from the start.
		at time.Duration
		// charge is how many refusals the address has first.
		charge int
		// wantAllow and wantWait are allow's answer then.
		wantAllow bool
		wantWait  time.Duration
	}
	testCases := []struct {
		name  string
		rate  float64
		burst int
		steps []step
	}{
		{
			name: "ok, a new address has its burst", rate: 1, burst: 3,
			steps: []step{{at: 0, wantAllow: true}, {at: 0, charge: 2, wantAllow: true}},
		},
		{
			name: "nok, past the burst until a token comes back", rate: 1, burst: 3,
			steps: []step{
				{at: 0, charge: 3, wantAllow: false, wantWait: time.Second},
				{at: 500 * time.Millisecond, wantAllow: false, wantWait: 500 * time.Millisecond},
				{at: time.Second, wantAllow: true},
			},
		},
		{
			name: "nok, a debt from refusals checked at once is paid back first", rate: 2, burst: 2,
			steps: []step{
				{at: 0, charge: 5, wantAllow: false, wantWait: 2 * time.Second},
				{at: 2 * time.Second, wantAllow: true},
			},
		},
		{
			name: "ok, tokens come back up to the burst only", rate: 10, burst: 2,
			steps: []step{
				{at: 0, charge: 2, wantAllow: false, wantWait: 100 * time.Millisecond},
				{at: time.Hour, charge: 2, wantAllow: false, wantWait: 100 * time.Millisecond},
			},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			now := start
			l := newRefusedLimiter(tc.rate, tc.burst, func() time.Time { return now })
			for i, s := range tc.steps {
				now = start.Add(s.at)
				for range s.charge {
					l.charge("192.0.2.1")
				}
				ok, wait := l.allow("192.0.2.1")
				require.Equal(t, s.wantAllow, ok, "step %d", i)
				require.InDelta(t, s.wantWait.Seconds(), wait.Seconds(), 0.001, "step %d", i)
				other, _ := l.allow("192.0.2.2")
				require.True(t, other, "another address is not limited")
			}
		})
	}
}

func TestRefusedLimiter_Bounded(t *testing.T) {
	t.Parallel()
	l := newRefusedLimiter(1, 1, time.Now)
	for i := range 3 * clientAddresses {
		l.charge(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
	}
	require.LessOrEqual(t, l.buckets.Len(), clientAddresses)
	// An address refused without end keeps its bucket through the flood.
	l.charge("192.0.2.1")
	for i := range 2 * clientAddresses {
		l.charge(fmt.Sprintf("2001:db8:%x::1", i))
		if i%1000 == 0 {
			ok, _ := l.allow("192.0.2.1")
			require.False(t, ok)
		}
	}
}

func TestClientBucket(t *testing.T) {
	t.Parallel()
	testCases := []struct{ ip, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"},
		{"not an address", "not an address"},
	}
	for _, tc := range testCases {
		require.Equal(t, tc.want, clientBucket(tc.ip), tc.ip)
	}
}

func TestIPExtractor(t *testing.T) {
	t.Parallel()
	proxy := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	testCases := []struct {
		name    string
		trusted []netip.Prefix
		peer    string
		xff     string
		want    string
	}{
		{name: "no proxy trusted, the header is ignored", peer: "192.0.2.1:1234", xff: "203.0.113.9", want: "192.0.2.1"},
		{name: "no proxy trusted, loopback peer", peer: "127.0.0.1:1234", xff: "203.0.113.9", want: "127.0.0.1"},
		{name: "from a trusted proxy", trusted: proxy, peer: "10.1.2.3:1234", xff: "203.0.113.9", want: "203.0.113.9"},
		{name: "from a trusted proxy, the client's own header ignored", trusted: proxy, peer: "10.1.2.3:1234", xff: "198.51.100.1, 203.0.113.9", want: "203.0.113.9"},
		{name: "from another peer", trusted: proxy, peer: "192.0.2.1:1234", xff: "203.0.113.9", want: "192.0.2.1"},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest("POST", "/", nil)
			req.RemoteAddr = tc.peer
			req.Header.Set("X-Forwarded-For", tc.xff)
			require.Equal(t, tc.want, ipExtractor(tc.trusted)(req))
		})
	}
}
