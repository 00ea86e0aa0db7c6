package ops_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/ops"
)

// TestLoginThrottled: a client address that sent five wrong tokens (the
// login form, a bearer header or ?token=) gets 429 with Retry-After, its
// next tokens not checked, the right one included; another address logs in
// as before. /metrics counts both.
func TestLoginThrottled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startServiceWith(ctx, t, testToken, &paytest.Payments{}, trustLoopback)

	// login posts the login form with token from the client address from.
	login := func(t *testing.T, from, token string) (*http.Response, []byte) {
		t.Helper()
		resp, body := s.get(t, "/ops/login", map[string]string{"X-Forwarded-For": from})
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var csrf *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == "x402d_ops_csrf" {
				csrf = c
			}
		}
		require.NotNil(t, csrf)
		field := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(string(body))
		require.Len(t, field, 2)
		req, err := http.NewRequest(http.MethodPost, s.URL+"/ops/login", strings.NewReader(url.Values{"token": {token}, "csrf": {field[1]}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Cookie", csrf.Name+"="+csrf.Value)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.Header.Set("X-Forwarded-For", from)
		return s.do(t, req)
	}
	bearer := func(from, token string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + token, "X-Forwarded-For": from}
	}

	guesser, operator := "203.0.113.7", "198.51.100.7"
	resp, _ := login(t, guesser, "guess-1")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = s.get(t, "/ops/calls", bearer(guesser, "guess-2"))
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = s.get(t, "/ops/calls?token=guess-3", map[string]string{"X-Forwarded-For": guesser})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	for i := 4; i <= 5; i++ {
		resp, _ = login(t, guesser, "guess")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "wrong token %d", i)
	}

	// Past five, the address waits, whatever it sends.
	resp, body := login(t, guesser, testToken)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", body)
	require.Equal(t, "60", resp.Header.Get("Retry-After"))
	require.Contains(t, string(body), "Too many wrong tokens")
	for _, c := range resp.Cookies() {
		require.NotEqual(t, "x402d_ops", c.Name, "no session for a throttled address")
	}
	resp, body = s.get(t, "/ops/calls", bearer(guesser, testToken))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "60", resp.Header.Get("Retry-After"))
	require.JSONEq(t, `{"error":"rate_limited","message":"too many wrong operator tokens from this address: try again after 60 s"}`, string(body))
	resp, _ = s.get(t, "/ops/calls?token="+url.QueryEscape(testToken), map[string]string{"X-Forwarded-For": guesser})
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)

	// Another address is not affected.
	resp, _ = login(t, operator, testToken)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = s.get(t, "/ops/calls", bearer(operator, testToken))
	require.Equal(t, http.StatusOK, resp.StatusCode)

	fams := scrape(t, s)
	require.Equal(t, 5.0, sample(fams, "x402d_ops_auth_failures_total", map[string]string{"outcome": "wrong_token"}))
	require.Equal(t, 3.0, sample(fams, "x402d_ops_auth_failures_total", map[string]string{"outcome": "throttled"}))
}

// TestMetricsOperatorOnly: the api's /metrics (revenue, relayer balances)
// answers the operator's token only.
func TestMetricsOperatorOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(ctx, t, testToken)
	for _, h := range []map[string]string{nil, {"Authorization": "Bearer " + testToken + "x"}} {
		resp, body := s.get(t, "/metrics", h)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%v", h)
		require.NotContains(t, string(body), "x402d_")
	}
	resp, body := s.get(t, "/metrics", map[string]string{"Authorization": "Bearer " + testToken})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "x402d_http_requests_total")
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
}

// TestMountRefusesShortToken: an operator token shorter than
// ops.MinTokenBytes mounts nothing and says why.
func TestMountRefusesShortToken(t *testing.T) {
	t.Parallel()
	e := echo.New()
	err := ops.Mount(e, &ops.Config{Token: strings.Repeat("t", ops.MinTokenBytes-1)})
	require.ErrorContains(t, err, "the operator token has 31 bytes, fewer than 32")
	require.Empty(t, e.Routes())
}
