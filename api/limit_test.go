package api

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
)

// refuse has n payments of addr checked and refused.
func refuse(t *testing.T, l *refusedLimiter, addr string, n int) {
	t.Helper()
	for range n {
		reserved, err := l.begin(context.Background(), addr)
		require.NoError(t, err)
		l.end(addr, reserved, true, false)
	}
}

func TestRefusedLimiter(t *testing.T) {
	t.Parallel()
	type step struct {
		// at is the time of the step from the start.
		at time.Duration
		// refuse is how many of the address's payments are refused first.
		refuse int
		// verify, when set, has one of its payments verify first.
		verify bool
		// wantRetry is the Retry-After of the next payment (0: it is
		// checked).
		wantRetry int
	}
	testCases := []struct {
		name  string
		rate  float64
		burst int
		steps []step
	}{
		{
			name: "ok, a new address has its burst", rate: 1, burst: 3,
			steps: []step{{at: 0}, {at: 0, refuse: 2}},
		},
		{
			name: "nok, past the burst until a token comes back", rate: 1, burst: 3,
			steps: []step{
				{at: 0, refuse: 3, wantRetry: 1},
				{at: 500 * time.Millisecond, wantRetry: 1},
				{at: time.Second},
			},
		},
		{
			name: "nok, a slow refill", rate: 0.1, burst: 2,
			steps: []step{{at: 0, refuse: 2, wantRetry: 10}, {at: 5 * time.Second, wantRetry: 5}, {at: 10 * time.Second}},
		},
		{
			name: "ok, tokens come back up to the burst only", rate: 10, burst: 2,
			steps: []step{
				{at: 0, refuse: 2, wantRetry: 1},
				{at: time.Hour, refuse: 2, wantRetry: 1},
			},
		},
		{
			name: "ok, payments that verify take nothing", rate: 1, burst: 2,
			steps: []step{{at: 0, refuse: 1, verify: true}, {at: 0, verify: true}, {at: 0, refuse: 1, wantRetry: 1}},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clk := clock.NewFake(start)
			l := newRefusedLimiter(tc.rate, tc.burst, clk)
			for i, s := range tc.steps {
				clk.Set(start.Add(s.at))
				refuse(t, l, "192.0.2.1", s.refuse)
				if s.verify {
					reserved, err := l.begin(ctx, "192.0.2.1")
					require.NoError(t, err)
					l.end("192.0.2.1", reserved, false, true)
				}
				reserved, err := l.begin(ctx, "192.0.2.1")
				if s.wantRetry == 0 {
					require.NoError(t, err, "step %d", i)
					l.end("192.0.2.1", reserved, false, false)
				} else {
					var e *Error
					require.ErrorAs(t, err, &e, "step %d", i)
					require.Equal(t, 429, e.Status)
					require.Equal(t, "rate_limited", e.Code)
					require.Equal(t, s.wantRetry, e.RetryAfter, "step %d", i)
				}
				other, err := l.begin(ctx, "192.0.2.2")
				require.NoError(t, err, "another address is not limited")
				l.end("192.0.2.2", other, false, false)
			}
		})
	}
}

// TestRefusedLimiter_AtOnce sends many payments of one address at once:
// from an address whose payments end refused, no more are checked than its
// tokens, the others answered 429; from one whose payments verify, all are
// checked. The checks under way end only once every other payment waits
// for them (on the clock, which stands still meanwhile).
func TestRefusedLimiter_AtOnce(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		name        string
		refused     bool
		wantChecked int
	}{
		{name: "nok, refused", refused: true, wantChecked: 3},
		{name: "ok, verified", refused: false, wantChecked: 50},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			l := newRefusedLimiter(0.001, 3, clk)
			var checked atomic.Int32
			read := make(chan struct{})      // closed: the chain reads end
			ended := make(chan struct{}, 50) // a check ended
			var wg sync.WaitGroup
			for range 50 {
				wg.Go(func() {
					reserved, err := l.begin(context.Background(), "192.0.2.1")
					if err != nil {
						return
					}
					checked.Add(1)
					<-read
					l.end("192.0.2.1", reserved, tc.refused, !tc.refused)
					ended <- struct{}{}
				})
			}
			// The burst's three are checked, the other 47 wait for them.
			wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			require.NoError(t, clk.Wait(wctx, 47), "%d checked at once", checked.Load())
			require.EqualValues(t, 3, checked.Load())
			close(read)
			for range 3 {
				<-ended
			}
			// The waiting payments look again.
			clk.Advance(pendingPoll)
			wg.Wait()
			require.EqualValues(t, tc.wantChecked, checked.Load())
		})
	}
}

// TestRefusedLimiter_Waited: a payment waiting for the checks under way of
// its address is checked once it has waited pendingWait if the address
// still has a token, never answered 429 for the time alone; when the check
// it waits for ends refused and takes the last token, it is answered 429.
func TestRefusedLimiter_Waited(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		name string
		// refuse ends the check under way refused (else the clock passes
		// pendingWait while it runs).
		refuse  bool
		wantErr bool
	}{
		{name: "ok, waited with a token left"},
		{name: "nok, the last token taken", refuse: true, wantErr: true},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Unix(1_800_000_000, 0))
			// One token, refilled too slowly to matter (one a day).
			l := newRefusedLimiter(1.0/86400, 1, clk)
			first, err := l.begin(context.Background(), "192.0.2.1")
			require.NoError(t, err)
			require.True(t, first)
			done := make(chan error, 1)
			go func() {
				reserved, err := l.begin(context.Background(), "192.0.2.1")
				if err == nil {
					l.end("192.0.2.1", reserved, false, false)
				}
				done <- err
			}()
			// It waits on the clock, unanswered.
			wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			require.NoError(t, clk.Wait(wctx, 1))
			select {
			case err := <-done:
				t.Fatalf("answered while the check under way holds the token: %v", err)
			default:
			}
			if tc.refuse {
				l.end("192.0.2.1", first, true, false)
				clk.Advance(pendingPoll)
			} else {
				clk.Advance(pendingWait + time.Millisecond)
			}
			select {
			case err := <-done:
				if tc.wantErr {
					var e *Error
					require.ErrorAs(t, err, &e)
					require.Equal(t, 429, e.Status)
				} else {
					require.NoError(t, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("still waiting")
			}
			if !tc.refuse {
				l.end("192.0.2.1", first, false, false)
			}
		})
	}
}

func TestRefusedLimiter_Bounded(t *testing.T) {
	t.Parallel()
	l := newRefusedLimiter(0.001, 1, nil)
	for i := range 3 * clientAddresses {
		refuse(t, l, fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), 1)
	}
	require.LessOrEqual(t, l.buckets.Len(), clientAddresses)
	// An address refused without end keeps its bucket through a flood of
	// others.
	refuse(t, l, "192.0.2.1", 1)
	for i := range 2 * clientAddresses {
		refuse(t, l, fmt.Sprintf("2001:db8:%x::1", i), 1)
		if i%1000 == 0 {
			_, err := l.begin(context.Background(), "192.0.2.1")
			require.Error(t, err)
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
