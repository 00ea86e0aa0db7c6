package ops

import (
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
)

// timeGuesses measures check on guesses a and b, interleaved so that the
// machine's changing load falls on both alike, and returns the median time
// of one check of each.
func timeGuesses(check func(string) bool, a, b string) (time.Duration, time.Duration) {
	const rounds, perRound = 301, 64
	ta := make([]time.Duration, 0, rounds)
	tb := make([]time.Duration, 0, rounds)
	sink := false
	for i := range rounds {
		first, second, t1, t2 := a, b, &ta, &tb
		if i%2 == 1 {
			first, second, t1, t2 = b, a, &tb, &ta
		}
		start := time.Now()
		for range perRound {
			sink = sink != check(first)
		}
		*t1 = append(*t1, time.Since(start)/perRound)
		start = time.Now()
		for range perRound {
			sink = sink != check(second)
		}
		*t2 = append(*t2, time.Since(start)/perRound)
	}
	_ = sink
	slices.Sort(ta)
	slices.Sort(tb)
	return ta[rounds/2], tb[rounds/2]
}

// relDiff is |a-b| relative to the smaller of the two.
func relDiff(a, b time.Duration) float64 {
	return math.Abs(float64(a-b)) / float64(max(min(a, b), 1))
}

// leaks reports whether check takes measurably different times for guesses a
// and b: in three measurements in a row, the medians differ by more than
// limit. A leak shows every time; a noisy machine rarely three times.
func leaks(check func(string) bool, a, b string, limit float64) (bool, time.Duration, time.Duration) {
	var ma, mb time.Duration
	for range 3 {
		ma, mb = timeGuesses(check, a, b)
		if relDiff(ma, mb) <= limit {
			return false, ma, mb
		}
	}
	return true, ma, mb
}

func randomToken(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n/2)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// TestTokenTiming checks that the time a token check takes tells nothing
// about the token: neither how many leading bytes a guess got right nor
// how long the token is. Each check is run against a comparison known to
// leak, to show that the measurement would see a leak.
func TestTokenTiming(t *testing.T) {
	// Not parallel: timing wants the CPU to itself as far as the test
	// binary goes. Long tokens make a leaking comparison slow enough to see.
	const limit = 0.15

	t.Run("Prefix", func(t *testing.T) {
		token := randomToken(t, 4096)
		nearMiss := token[:len(token)-1] + "g" // right but for the last byte
		farMiss := "g" + token[1:]             // wrong from the first byte
		a := newAuth(token, time.Hour, nil, nil, nil)
		require.False(t, a.tokenOK(nearMiss))
		require.False(t, a.tokenOK(farMiss))

		naive := func(g string) bool { return g == token }
		leak, near, far := leaks(naive, nearMiss, farMiss, limit)
		require.True(t, leak, "the measurement must see a naive comparison leak (near %v, far %v)", near, far)

		t.Logf("naive: near miss %v, far miss %v", near, far)
		leak, near, far = leaks(a.tokenOK, nearMiss, farMiss, limit)
		t.Logf("tokenOK: near miss %v, far miss %v", near, far)
		require.False(t, leak, "a guess right but for its last byte took %v, one wrong from the first %v", near, far)
	})

	t.Run("Length", func(t *testing.T) {
		short, long := randomToken(t, 16), randomToken(t, 4096)
		guess := randomToken(t, 4096)
		as, al := newAuth(short, time.Hour, nil, nil, nil), newAuth(long, time.Hour, nil, nil, nil)
		// One guess checked against a short and a long token: the same time.
		twoTokens := func(check func(*auth, string) bool) func(string) bool {
			return func(g string) bool {
				if g == "short" {
					return check(as, guess)
				}
				return check(al, guess)
			}
		}
		raw := twoTokens(func(a *auth, g string) bool {
			if a == as {
				return subtle.ConstantTimeCompare([]byte(g), []byte(short)) == 1
			}
			return subtle.ConstantTimeCompare([]byte(g), []byte(long)) == 1
		})
		leak, ts, tl := leaks(raw, "short", "long", limit)
		require.True(t, leak, "the measurement must see a raw comparison leak the length (short %v, long %v)", ts, tl)

		t.Logf("raw: short token %v, long token %v", ts, tl)
		leak, ts, tl = leaks(twoTokens((*auth).tokenOK), "short", "long", limit)
		t.Logf("tokenOK: short token %v, long token %v", ts, tl)
		require.False(t, leak, "checking against a short token took %v, a long one %v", ts, tl)
	})
}

func TestSession(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(now)
	a := newAuth("token-one", time.Hour, clk, nil, nil)
	v, exp := a.newSession()
	require.Equal(t, now.Add(time.Hour), exp)

	for _, tc := range []struct {
		name  string
		auth  *auth
		value string
		at    time.Time
		want  bool
	}{
		{"ok, fresh", a, v, now, true},
		{"ok, just before expiry", a, v, now.Add(time.Hour - time.Second), true},
		{"nok, expired", a, v, now.Add(time.Hour), false},
		{"nok, token changed", newAuth("token-two", time.Hour, clk, nil, nil), v, now, false},
		{"nok, expiry moved", a, tamperExpiry(v), now, false},
		{"nok, signature cut", a, v[:len(v)-2], now, false},
		{"nok, empty", a, "", now, false},
		{"nok, no separator", a, "abc", now, false},
		{"nok, the token itself", a, "token-one", now, false},
	} {
		tc.auth.clock = clock.NewFake(tc.at)
		require.Equal(t, tc.want, tc.auth.sessionOK(tc.value), tc.name)
		tc.auth.clock = clk
	}
}

// tamperExpiry changes a byte of a session's expiry and keeps its signature.
func tamperExpiry(v string) string {
	b := []byte(v)
	if b[2] == 'A' {
		b[2] = 'B'
	} else {
		b[2] = 'A'
	}
	return string(b)
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ give, want string }{
		{"", "/ops"},
		{"/ops", "/ops"},
		{"/ops/calls?op=diff&state=paid", "/ops/calls?op=diff&state=paid"},
		{"/ops/jobs/jobs/12", "/ops/jobs/jobs/12"},
		{"/ops/login", "/ops"},
		{"/opsx", "/ops"},
		{"/elsewhere", "/ops"},
		{"//evil.example/ops", "/ops"},
		{"https://evil.example/ops", "/ops"},
		{`/\evil.example`, "/ops"},
		{"javascript:alert(1)", "/ops"},
	} {
		require.Equal(t, tc.want, safeNext(tc.give), tc.give)
	}
}

func TestUSDC(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ give, want string }{
		{"0", "0.000000"},
		{"1", "0.000001"},
		{"10000", "0.010000"},
		{"1000000", "1.000000"},
		{"123456789012345678901234567890", "123456789012345678901234.567890"},
		{"-25", "-0.000025"},
		{"n/a", "n/a"},
	} {
		require.Equal(t, tc.want, usdc(tc.give), tc.give)
	}
	require.Equal(t, "30000", addAtomic("10000", "20000"))
}

func TestTable(t *testing.T) {
	t.Parallel()
	tab, err := newTable([]json.RawMessage{
		json.RawMessage(`{"url":"https://a.example/list","cursor":40,"last_at":"2026-11-22T10:00:00Z","done":null}`),
		json.RawMessage(`{"url":"https://b.example/list","cursor":0,"extra":{"k":1}}`),
	})
	require.NoError(t, err)
	require.Equal(t, []string{"url", "cursor", "last_at", "done", "extra"}, tab.Columns)
	require.Equal(t, [][]string{
		{"https://a.example/list", "40", "2026-11-22T10:00:00Z", "—", ""},
		{"https://b.example/list", "0", "", "", `{"k":1}`},
	}, tab.Rows)
	_, err = newTable([]json.RawMessage{json.RawMessage(`[1]`)})
	require.Error(t, err)
}

// TestSecureTrustsProxiesOnly: the session cookie's Secure flag believes
// X-Forwarded-Proto from the trusted proxies only.
func TestSecureTrustsProxiesOnly(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	for _, tc := range []struct {
		name   string
		remote string
		proto  string
		tls    bool
		want   bool
	}{
		{"ok, a trusted proxy says https", "10.1.2.3:40000", "https", false, true},
		{"ok, a trusted IPv6 proxy says https", "[2001:db8::7]:40000", "HTTPS", false, true},
		{"ok, an IPv4-mapped trusted proxy", "[::ffff:10.1.2.3]:40000", "https", false, true},
		{"ok, TLS itself", "192.0.2.1:40000", "", true, true},
		{"nok, anyone else says https", "192.0.2.1:40000", "https", false, false},
		{"nok, loopback is not trusted unless listed", "127.0.0.1:40000", "https", false, false},
		{"nok, a trusted proxy says http", "10.1.2.3:40000", "http", false, false},
		{"nok, a trusted proxy says nothing", "10.1.2.3:40000", "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newAuth(strings.Repeat("t", MinTokenBytes), time.Hour, nil, trusted, nil)
			r := httptest.NewRequest(http.MethodGet, "/ops/login", nil)
			r.RemoteAddr = tc.remote
			if tc.proto != "" {
				r.Header.Set("X-Forwarded-Proto", tc.proto)
			}
			if tc.tls {
				r.TLS = &tls.ConnectionState{}
			}
			require.Equal(t, tc.want, a.secure(r))
		})
	}
}

// TestThrottle: an address has failureBurst wrong tokens, then one more
// each failureRefill; a right token takes nothing; addresses are apart.
func TestThrottle(t *testing.T) {
	t.Parallel()
	token := strings.Repeat("t", MinTokenBytes)
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a := newAuth(token, time.Hour, clk, nil, nil)
	for range failureBurst {
		require.Zero(t, a.throttled("a"))
		require.True(t, a.check("a", token), "a right token takes no try")
		require.False(t, a.check("a", "guess"))
	}
	require.Equal(t, failureRefill, a.throttled("a"))
	require.Zero(t, a.throttled("b"))
	clk.Advance(failureRefill / 2)
	require.Equal(t, failureRefill/2, a.throttled("a"))
	clk.Advance(failureRefill / 2)
	require.Zero(t, a.throttled("a"), "one more try after failureRefill")
	require.False(t, a.check("a", "guess"))
	require.Equal(t, failureRefill, a.throttled("a"))
}
