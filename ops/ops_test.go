package ops_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/ops"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

func TestDashboardAccess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startServiceWith(ctx, t, testToken, &paytest.Payments{}, trustLoopback)
	callID := s.paidCallID(t, "test:0xa11ce5ecret:access-1")
	data := []string{callID, "0xa11ce5ecret"}

	html := map[string]string{"Accept": "text/html,application/xhtml+xml"}
	paths := []string{
		"/ops", "/ops/", "/ops/calls", "/ops/calls?op=diff", "/ops/calls/" + callID, "/ops/index",
		"/ops/jobs", "/ops/jobs/", "/ops/jobs/jobs", "/ops/jobs/api/jobs?state=completed", "/ops/jobs/api/states",
		"/ops/jobs/api/queues",
	}

	// refused checks that an answer gives nothing away: 401, 429 (too
	// many wrong tokens), or a redirect to the login form, and none of the
	// call's data.
	refused := func(t *testing.T, resp *http.Response, body []byte) {
		t.Helper()
		switch resp.StatusCode {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			require.NotEmpty(t, resp.Header.Get("Retry-After"))
		case http.StatusSeeOther:
			loc, err := url.Parse(resp.Header.Get("Location"))
			require.NoError(t, err)
			require.Equal(t, "/ops/login", loc.Path)
		default:
			t.Fatalf("status %d, want 401 or 303 to the login form: %s", resp.StatusCode, body)
		}
		for _, d := range data {
			require.NotContains(t, string(body), d)
		}
	}

	t.Run("NoCredentials", func(t *testing.T) {
		t.Parallel()
		for _, p := range paths {
			for _, h := range []map[string]string{nil, html} {
				resp, body := s.get(t, p, h)
				refused(t, resp, body)
				if h == nil {
					require.Equal(t, http.StatusUnauthorized, resp.StatusCode, p)
					require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
				} else {
					require.Equal(t, http.StatusSeeOther, resp.StatusCode, p)
					loc, _ := url.Parse(resp.Header.Get("Location"))
					require.Equal(t, p, loc.Query().Get("next"))
				}
			}
		}
	})

	t.Run("WrongCredentials", func(t *testing.T) {
		t.Parallel()
		// From an address of its own: its wrong tokens soon throttle it.
		from := "203.0.113.50"
		for _, p := range paths {
			for _, h := range []map[string]string{
				{"Authorization": "Bearer " + testToken + "x"},
				{"Authorization": "Bearer " + testToken[:len(testToken)-1]},
				{"Authorization": "Bearer "},
				{"Authorization": "Basic " + testToken},
				{"Cookie": "x402d_ops=" + testToken},
				{"Cookie": "x402d_ops=AAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
			} {
				h["X-Forwarded-For"] = from
				resp, body := s.get(t, p, h)
				refused(t, resp, body)
			}
			resp, body := s.get(t, p+sep(p)+"token=wrong", map[string]string{"X-Forwarded-For": from})
			refused(t, resp, body)
		}
		// River UI's actions are refused too.
		req, err := http.NewRequest(http.MethodPost, s.URL+"/ops/jobs/api/jobs/retry", strings.NewReader(`{"ids":["1"]}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", from)
		resp, body := s.do(t, req)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, string(body))
	})

	t.Run("BearerSeesData", func(t *testing.T) {
		t.Parallel()
		auth := map[string]string{"Authorization": "Bearer " + testToken}
		resp, body := s.get(t, "/ops/calls", auth)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, string(body), callID[:12])
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")

		resp, body = s.get(t, "/ops/calls/"+callID, auth)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, string(body), "0xa11ce5ecret")
		require.Contains(t, string(body), paytest.TxHash("access-1"))

		// River's completer marks jobs completed in batches, a few
		// milliseconds after the call answered.
		require.Eventually(t, func() bool {
			resp, body = s.get(t, "/ops/jobs/api/jobs?state=completed", auth)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			return strings.Contains(string(body), callID)
		}, 5*time.Second, 20*time.Millisecond, "the call's jobs never showed as completed")
	})

	t.Run("CallsFilter", func(t *testing.T) {
		t.Parallel()
		auth := map[string]string{"Authorization": "Bearer " + testToken}
		for _, tc := range []struct {
			query string
			shown bool
		}{
			{"", true},
			{"?op=diff", true},
			{"?state=paid", true},
			{"?op=diff&state=paid", true},
			{"?state=failed", false},
			{"?op=regex", false},
			{"?state=no-such-state", true},
		} {
			resp, body := s.get(t, "/ops/calls"+tc.query, auth)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, tc.shown, strings.Contains(string(body), callID[:12]), tc.query)
		}
		resp, _ := s.get(t, "/ops/calls?before=nonsense", auth)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		resp, body := s.get(t, "/ops/calls/no-such-call", auth)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		require.Contains(t, string(body), "No such call")
	})

	t.Run("QueryTokenBecomesASession", func(t *testing.T) {
		t.Parallel()
		resp, _ := s.get(t, "/ops/calls?op=diff&token="+url.QueryEscape(testToken), nil)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/ops/calls?op=diff", resp.Header.Get("Location"))
		session := sessionCookie(t, resp)
		resp, body := s.get(t, "/ops/calls?op=diff", map[string]string{"Cookie": session.Name + "=" + session.Value})
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, string(body), callID[:12])
	})
}

func TestDashboardDisabledWithoutToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(ctx, t, "")
	s.paidCallID(t, "test:0xa11ce:disabled-1")
	for _, p := range []string{"/ops", "/ops/calls", "/ops/login", "/ops/jobs/", "/ops/jobs/api/jobs"} {
		for _, h := range []map[string]string{nil, {"Authorization": "Bearer "}, {"Authorization": "Bearer x"}} {
			resp, body := s.get(t, p, h)
			require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s: %s", p, body)
		}
	}
}

func TestLoginForm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(ctx, t, testToken)

	// form fetches the login form and returns its anti-forgery cookie and
	// field.
	form := func(t *testing.T) (*http.Cookie, string) {
		t.Helper()
		resp, body := s.get(t, "/ops/login?next=%2Fops%2Fcalls", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var ck *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == "x402d_ops_csrf" {
				ck = c
			}
		}
		require.NotNil(t, ck)
		require.True(t, ck.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(string(body))
		require.Len(t, m, 2)
		require.Equal(t, ck.Value, m[1])
		return ck, m[1]
	}
	post := func(t *testing.T, path string, values url.Values, header map[string]string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(values.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return s.do(t, req)
	}

	t.Run("LogsIn", func(t *testing.T) {
		t.Parallel()
		ck, csrf := form(t)
		resp, _ := post(t, "/ops/login", url.Values{"token": {testToken}, "csrf": {csrf}, "next": {"/ops/calls"}},
			map[string]string{"Cookie": ck.Name + "=" + ck.Value, "Sec-Fetch-Site": "same-origin", "Origin": s.URL})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/ops/calls", resp.Header.Get("Location"))
		session := sessionCookie(t, resp)
		require.True(t, session.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, session.SameSite)
		require.Equal(t, "/ops", session.Path)
		require.NotContains(t, session.Value, testToken)
		cookie := map[string]string{"Cookie": session.Name + "=" + session.Value}

		resp, _ = s.get(t, "/ops", cookie)
		require.Equal(t, http.StatusOK, resp.StatusCode)

		// A cross-site request carrying the cookie cannot act.
		for _, h := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}} {
			h["Cookie"] = cookie["Cookie"]
			req, err := http.NewRequest(http.MethodPost, s.URL+"/ops/jobs/api/jobs/retry", strings.NewReader(`{"ids":["1"]}`))
			require.NoError(t, err)
			for k, v := range h {
				req.Header.Set(k, v)
			}
			resp, body := s.do(t, req)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, string(body))
		}

		// Logging out clears the cookie.
		resp, _ = post(t, "/ops/logout", nil, map[string]string{"Cookie": cookie["Cookie"], "Sec-Fetch-Site": "same-origin"})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		cleared := sessionCookie(t, resp)
		require.Empty(t, cleared.Value)
	})

	t.Run("WrongToken", func(t *testing.T) {
		t.Parallel()
		ck, csrf := form(t)
		resp, body := post(t, "/ops/login", url.Values{"token": {"guess"}, "csrf": {csrf}},
			map[string]string{"Cookie": ck.Name + "=" + ck.Value})
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Contains(t, string(body), "Wrong token")
		for _, c := range resp.Cookies() {
			require.NotEqual(t, "x402d_ops", c.Name)
		}
	})

	t.Run("CrossSitePostRefused", func(t *testing.T) {
		t.Parallel()
		ck, csrf := form(t)
		for _, h := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}} {
			h["Cookie"] = ck.Name + "=" + ck.Value
			resp, _ := post(t, "/ops/login", url.Values{"token": {testToken}, "csrf": {csrf}}, h)
			require.Equal(t, http.StatusForbidden, resp.StatusCode)
			for _, c := range resp.Cookies() {
				require.NotEqual(t, "x402d_ops", c.Name)
			}
		}
	})

	t.Run("ForgedFormRefused", func(t *testing.T) {
		t.Parallel()
		ck, csrf := form(t)
		for _, tc := range []struct {
			name   string
			cookie string
			field  string
		}{
			{"NoCookie", "", csrf},
			{"NoField", ck.Value, ""},
			{"Mismatch", ck.Value, csrf[:len(csrf)-2] + "xx"},
		} {
			h := map[string]string{}
			if tc.cookie != "" {
				h["Cookie"] = ck.Name + "=" + tc.cookie
			}
			resp, _ := post(t, "/ops/login", url.Values{"token": {testToken}, "csrf": {tc.field}}, h)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, tc.name)
			for _, c := range resp.Cookies() {
				require.NotEqual(t, "x402d_ops", c.Name, tc.name)
			}
		}
	})

	t.Run("NoOpenRedirect", func(t *testing.T) {
		t.Parallel()
		for _, next := range []string{"//evil.example/ops", "https://evil.example/ops", "/elsewhere", `/\evil.example`, "/ops/login"} {
			ck, csrf := form(t)
			resp, _ := post(t, "/ops/login", url.Values{"token": {testToken}, "csrf": {csrf}, "next": {next}},
				map[string]string{"Cookie": ck.Name + "=" + ck.Value})
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			require.Equal(t, "/ops", resp.Header.Get("Location"), next)
		}
	})
}

func TestLogsCarryCallID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(ctx, t, testToken)
	callID := s.paidCallID(t, "test:0xa11ce:logs-1")

	// The settlement's line may be written just after the answer left.
	var request, job, settle bool
	require.Eventually(t, func() bool {
		request, job, settle = false, false, false
		for _, line := range strings.Split(strings.TrimSpace(s.Logs.String()), "\n") {
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
			if rec["call_id"] != callID {
				continue
			}
			switch {
			case rec["msg"] == "request" && rec["path"] == "/api/x402/diff" && rec["status"] == float64(200):
				request = true
			case rec["msg"] == "job succeeded" && rec["op"] == "diff":
				job = true
			case rec["msg"] == "settlement done":
				settle = true
			}
		}
		return request && job && settle
	}, 5*time.Second, 20*time.Millisecond)
	require.True(t, request, "a request line with the call id")
	require.True(t, job, "a job line with the call id")
	require.True(t, settle, "a settlement job line with the call id")

	// Unpaid quotes are counted in /metrics, not logged at info; a refused
	// payment (402 too) is logged.
	for range 3 {
		resp, _ := s.pay(t, "", `{}`)
		require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
	}
	resp, _ := s.pay(t, "bad:0xa11ce:logs-2", `{"a":"1\n","b":"2\n"}`)
	require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
	var quotes, refusals int
	for _, line := range strings.Split(strings.TrimSpace(s.Logs.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		if rec["msg"] == "request" && rec["status"] == float64(http.StatusPaymentRequired) {
			refusals++
		}
	}
	require.Equal(t, 1, refusals, "the refused payment's line, and no line for the unpaid quotes")
	_, metricsBody := s.get(t, "/metrics", map[string]string{"Authorization": "Bearer " + testToken})
	for _, line := range strings.Split(string(metricsBody), "\n") {
		if strings.HasPrefix(line, `x402d_quotes_served_total{op="diff"}`) {
			_, err := fmt.Sscanf(strings.TrimPrefix(line, `x402d_quotes_served_total{op="diff"}`), "%d", &quotes)
			require.NoError(t, err)
		}
	}
	require.GreaterOrEqual(t, quotes, 3, "quotes are counted")
}

func sep(p string) string {
	if strings.Contains(p, "?") {
		return "&"
	}
	return "?"
}

func sessionCookie(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == "x402d_ops" {
			return c
		}
	}
	t.Fatalf("no session cookie in %v", resp.Header.Values("Set-Cookie"))
	return nil
}

// TestOverviewRelayer shows, beside the revenue per network, the gas its
// settlements spent, and the relayer's state: its balance with a warning
// when low, and settlements waiting while the base fee is above the cap.
func TestOverviewRelayer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	payments := &paytest.Payments{Cost: &x402.SettleCost{GasUsed: 44_000, GasPriceWei: "2000000000", Batch: 10}}
	s := startServiceWith(ctx, t, testToken, payments, func(c *ops.Config) {
		c.RelayerLowWei = big.NewInt(1e16)
		c.Relayer = func(context.Context) ([]ops.RelayerChain, error) {
			return []ops.RelayerChain{
				{Network: "eip155:8453", BalanceWei: big.NewInt(5e15), BaseFeeWei: big.NewInt(1e9)},
				{Network: "eip155:42161", BalanceWei: big.NewInt(3e18), BaseFeeWei: big.NewInt(80e9), MaxFeeWei: big.NewInt(50e9), FeeWait: true},
			}, nil
		}
	})
	s.paidCallID(t, "test:0xa11ce:relayer-1")
	s.paidCallID(t, "test:0xa11ce:relayer-2")
	resp, body := s.get(t, "/ops", map[string]string{"Authorization": "Bearer " + testToken})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	page := string(body)
	// Two settlements of 44,000 gas at 2 gwei: 0.000176 of the native token.
	require.Contains(t, page, `<td class="n gas">0.000176</td>`)
	require.Contains(t, page, "balance low: top up the relayer")
	require.Contains(t, page, "settlements wait: the base fee is above SETTLEMENT_MAX_FEE_GWEI")
	require.Contains(t, page, "<td class=\"n\">80.000</td>")
	require.Contains(t, page, "<td class=\"n\">3.000000</td>")
}

// TestOverviewFinality shows, per network, the paid calls whose settlement
// awaits finality and those a reorganisation lost, with their amounts.
func TestOverviewFinality(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(ctx, t, testToken)
	pending := s.paidCallID(t, "test:0xa11ce:finality-1")
	lost := s.paidCallID(t, "test:0xa11ce:finality-2")
	tx, err := s.DB.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, store.WatchAdd(ctx, tx, []store.Watched{{CallID: pending, Network: "eip155:8453", Transaction: "0x01", Block: x402.SettledBlock{Number: 7, Hash: "0x07"}}}))
	require.NoError(t, store.Append(ctx, tx, store.NewEvent{Stream: store.CallStream(lost), Type: store.EventSettlementLost,
		Data: store.SettlementLost{Previous: "0x02", Network: "eip155:8453", Amount: "10000", Reason: "invalid_exact_evm_payload_authorization_valid_before"}}))
	require.NoError(t, tx.Commit(ctx))

	resp, body := s.get(t, "/ops", map[string]string{"Authorization": "Bearer " + testToken})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	page := string(body)
	require.Contains(t, page, "Settlement finality")
	require.Contains(t, page, `<tr><td>eip155:8453</td><td class="n">1</td><td class="n">0.010000</td><td class="n"><span class="warn">1</span></td><td class="n">0.010000</td></tr>`)
}

// TestCallTimelineLost shows a lost call's settlement.lost in its timeline
// with the amount lost and the reason: the transaction a reorganisation
// undid, or, for a call reconciled after its settlement jobs were
// exhausted, that.
func TestCallTimelineLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(ctx, t, testToken)
	for i, tt := range []struct{ previous, shown string }{
		{"0xdead", "0xdead"},
		{"", "settlement jobs exhausted"},
	} {
		id := s.paidCallID(t, fmt.Sprintf("test:0xa11ce:lost-%d", i))
		tx, err := s.DB.Pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, store.Append(ctx, tx, store.NewEvent{Stream: store.CallStream(id), Type: store.EventSettlementLost,
			Data: store.SettlementLost{Previous: tt.previous, Network: "eip155:8453", Amount: "10000", Reason: "invalid_exact_evm_nonce_already_used"}}))
		require.NoError(t, tx.Commit(ctx))
		resp, body := s.get(t, "/ops/calls/"+id, map[string]string{"Authorization": "Bearer " + testToken})
		require.Equal(t, http.StatusOK, resp.StatusCode)
		page := string(body)
		require.Contains(t, page, store.EventSettlementLost)
		require.Contains(t, page, "0.010000 USDC")
		require.Contains(t, page, "invalid_exact_evm_nonce_already_used")
		require.Contains(t, page, tt.shown)
	}
}

// TestTimelineOldAndFoldedStreams: a call whose stream was written before
// call.paid (payment.verified, job.queued, settlement.submitted of its
// own) and a call paid now (call.paid, and job.succeeded naming its
// settlement job) show the same facts in their timelines, and the api
// answers the old call's poll with its result and PAYMENT-RESPONSE.
func TestTimelineOldAndFoldedStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(ctx, t, testToken)
	auth := map[string]string{"Authorization": "Bearer " + testToken}

	// The old call, unfolded as before migration 011, event by event.
	const old = "0ldc0ffee0ldc0ffee0ldc0ffee0ldc0"
	stream := store.CallStream(old)
	payment := x402.Payment{Network: "eip155:8453", Payer: "0xa11ce01d", Nonce: "n-old", Amount: "10000", Payload: json.RawMessage(`{}`)}
	result := json.RawMessage(`{"call_id":"` + old + `","op":"diff","identical":true}`)
	for _, events := range [][]store.NewEvent{
		{{Stream: stream, Type: store.EventPaymentVerified, Data: store.PaymentVerified{Op: "diff", Token: "old-token", RequestHash: []byte{1}, Payment: payment}},
			{Stream: stream, Type: store.EventJobQueued, Data: store.JobQueued{JobID: 71, Queue: jobs.QueuePure}}},
		{{Stream: stream, Type: store.EventJobStarted, Data: store.JobStarted{JobID: 71, Attempt: 1}},
			{Stream: stream, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 71, Result: result}},
			{Stream: stream, Type: store.EventSettlementSubmitted, Data: store.SettlementSubmitted{JobID: 72, Network: "eip155:8453", Attempt: 1}}},
		{{Stream: stream, Type: store.EventSettlementConfirmed, Data: store.SettlementDone{Response: x402.SettleResponse{
			Success: true, Payer: "0xa11ce01d", Transaction: "0x01dtx", Network: "eip155:8453"}}}},
	} {
		tx, err := s.DB.Pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, store.Append(ctx, tx, events...))
		require.NoError(t, tx.Commit(ctx))
	}
	resp, body := s.get(t, "/api/x402/calls/"+old+"?token=old-token", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.JSONEq(t, string(result), string(body))
	settled, err := base64.StdEncoding.DecodeString(resp.Header.Get("Payment-Response"))
	require.NoError(t, err)
	require.JSONEq(t, `{"success":true,"payer":"0xa11ce01d","transaction":"0x01dtx","network":"eip155:8453"}`, string(settled))

	resp, body = s.get(t, "/ops/calls/"+old, auth)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	page := string(body)
	for _, want := range []string{`data-event="payment.verified"`, `data-event="job.queued"`, `data-event="settlement.submitted"`,
		"0xa11ce01d", "/ops/jobs/jobs/72", "0x01dtx"} {
		require.Contains(t, page, want)
	}

	// The folded call, paid through the api.
	id := s.paidCallID(t, "test:0xa11cef01d:folded-1")
	events, err := store.EventListByStream(ctx, s.DB.Pool, store.CallStream(id))
	require.NoError(t, err)
	var paid store.PaidCall
	var succeeded store.JobSucceeded
	require.NoError(t, events[0].Decode(&paid))
	require.NoError(t, events[1].Decode(&succeeded))
	resp, body = s.get(t, "/ops/calls/"+id, auth)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	page = string(body)
	for _, want := range []string{`data-event="call.paid"`, "0xa11cef01d", fmt.Sprintf("/ops/jobs/jobs/%d", paid.JobID),
		fmt.Sprintf("/ops/jobs/jobs/%d", succeeded.SettleJobID), paytest.TxHash("folded-1")} {
		require.Contains(t, page, want)
	}
	require.NotContains(t, page, `data-event="job.queued"`)
	require.NotContains(t, page, `data-event="job.started"`, "a quick run's start is in its job.succeeded")
}

// TestTimelineCallPaidForms: a call.paid kept in its binary form (bin,
// migration 017) and one in the form written before ({"p": base64} in
// data) show the same fields in their calls' timelines.
func TestTimelineCallPaidForms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(ctx, t, testToken)
	auth := map[string]string{"Authorization": "Bearer " + testToken}
	const payer = "0xB1Ba000000000000000000000000000000000001"
	paid := func(nonce string, job int64) store.PaidCall {
		return store.PaidCall{PaymentVerified: store.PaymentVerified{Op: "diff", Token: "tok-" + nonce, RequestHash: []byte{1},
			Payment: paytest.ExactEVM(payer, nonce)}, JobID: job}
	}

	binary := paid("binary-1", 81)
	tx, err := s.DB.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, store.Append(ctx, tx, store.NewEvent{Stream: store.CallStream("binary1"), Type: store.EventCallPaid, Data: binary}))
	require.NoError(t, tx.Commit(ctx))
	var hasBin bool
	require.NoError(t, s.DB.Pool.QueryRow(ctx, "SELECT bin IS NOT NULL FROM events WHERE stream = 'call/binary1'").Scan(&hasBin))
	require.True(t, hasBin)

	// In ledger form 1, as an api of a release before migration 017
	// wrote it: the data, and the row.
	form1 := paid("form1-1", 82)
	data, err := json.Marshal(form1)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(data), `{"p":"`), string(data))
	at := time.Now().UTC()
	_, err = s.DB.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ('call/form1call', 'call.paid', $1, $2)`, data, at)
	require.NoError(t, err)
	p := form1.Payment
	_, err = s.DB.Pool.Exec(ctx, `INSERT INTO calls (id, op, state, token, request_hash, payment_key, network, payer, amount, created_at, updated_at)
		VALUES ('form1call', 'diff', 'queued', 'tok', '', $1, $2, '', $3, $4, $4)`, store.PaymentDigest(p.Key()), p.Network, p.Amount, at)
	require.NoError(t, err)

	for id, v := range map[string]store.PaidCall{"binary1": binary, "form1call": form1} {
		resp, body := s.get(t, "/ops/calls/"+id, auth)
		require.Equal(t, http.StatusOK, resp.StatusCode, id)
		page := string(body)
		for _, want := range []string{`data-event="call.paid"`, payer, v.Payment.Nonce, "0.010000 USDC", "eip155:8453",
			fmt.Sprintf("/ops/jobs/jobs/%d", v.JobID)} {
			require.Contains(t, page, want, id)
		}
	}
}

// TestCallTimelineBlock shows the block of a settlement followed until
// final in the call's timeline: the one its settlement.confirmed keeps (as
// releases before settlement.mined wrote it), or, when its transaction's
// settlement.mined keeps it, the one its transaction awaits finality in;
// once final, its transaction alone.
func TestCallTimelineBlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(ctx, t, testToken)
	const network = "eip155:8453"
	tests := []struct {
		name, id, tx string
		mined, final bool
		block        uint64
		want         string
	}{
		{name: "in its settlement.confirmed", id: "b10cc0ffee0b10cc0ffee0b10cc0ffee", tx: "0xb1", block: 4711, want: "<dt>block</dt><dd>4711</dd>"},
		{name: "awaiting finality", id: "b10cc0ffee0b10cc0ffee0b10cc0ffef", tx: "0x5e7a11ed00000000000000000000000000000000000000000000000000c0ffee",
			mined: true, block: 4712, want: "<dt>block</dt><dd>4712 (awaiting finality)</dd>"},
		{name: "final", id: "b10cc0ffee0b10cc0ffee0b10cc0ff00", tx: "0x5e7a11ed00000000000000000000000000000000000000000000000000c0ff00",
			mined: true, final: true, block: 4713},
	}
	for i, tt := range tests {
		stream := store.CallStream(tt.id)
		payment := x402.Payment{Network: network, Payer: "0xa11ce", Nonce: fmt.Sprintf("n-block-%d", i), Amount: "10000", Payload: json.RawMessage(`{}`)}
		block := &x402.SettledBlock{Number: tt.block, Hash: fmt.Sprintf("0xh%d", tt.block)}
		settled := []store.NewEvent{{Stream: stream, Type: store.EventSettlementConfirmed,
			Data: store.SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: tt.tx, Network: network}, Block: block}}}
		if tt.mined {
			settled[0].Data = store.SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: tt.tx, Network: network}}
			settled = append([]store.NewEvent{{Stream: store.ChainStream(network), Type: store.EventSettlementMined,
				Data: store.SettlementMined{Transaction: tt.tx, Block: *block, Calls: []string{tt.id}}}}, settled...)
		}
		for _, events := range [][]store.NewEvent{
			{{Stream: stream, Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: store.PaymentVerified{Op: "diff", Token: "tok", RequestHash: []byte{1}, Payment: payment}, JobID: 81}},
				{Stream: stream, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 81, Attempt: 1, Op: "diff", Result: json.RawMessage(`{"call_id":"` + tt.id + `","op":"diff"}`), SettleJobID: 82}}},
			settled,
		} {
			tx, err := s.DB.Pool.Begin(ctx)
			require.NoError(t, err)
			require.NoError(t, store.Append(ctx, tx, events...))
			require.NoError(t, tx.Commit(ctx))
		}
		if tt.final {
			tx, err := s.DB.Pool.Begin(ctx)
			require.NoError(t, err)
			require.NoError(t, store.WatchFinal(ctx, tx, network, tt.block+10, []store.WatchedTx{{FollowedTx: x402.FollowedTx{Transaction: tt.tx}, Network: network}}))
			require.NoError(t, tx.Commit(ctx))
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := s.get(t, "/ops/calls/"+tt.id, map[string]string{"Authorization": "Bearer " + testToken})
			require.Equal(t, http.StatusOK, resp.StatusCode)
			page := string(body)
			require.Contains(t, page, tt.tx)
			if tt.want == "" {
				require.NotContains(t, page, "<dt>block</dt>")
				return
			}
			require.Contains(t, page, tt.want)
			require.Equal(t, 1, strings.Count(page, "<dt>block</dt>"))
		})
	}
}
