package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/model/modeltest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	Field   string `json:"field"`
	CallID  string `json:"call_id"`
}

func decodeJSON[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(b, &v), string(b))
	return v
}

func eventTypes(ctx context.Context, t testing.TB, db *dbtest.DB, callID string) []string {
	t.Helper()
	events, err := store.EventListByStream(ctx, db.Pool, store.CallStream(callID))
	require.NoError(t, err)
	types := make([]string, len(events))
	for i, e := range events {
		types[i] = e.Type
	}
	return types
}

func TestPaidCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	type testBundle struct {
		base   string
		db     *dbtest.DB
		client *http.Client
	}
	setup := func(t *testing.T, env map[string]string) *testBundle {
		t.Helper()
		db := dbtest.Schema(ctx, t)
		base := startInProcess(ctx, t, "serve", testEnv(db, env))
		return &testBundle{base: base, db: db, client: &http.Client{Timeout: 30 * time.Second}}
	}
	const diffBody = `{"a":"one\ntwo\n","b":"one\nthree\n"}`

	t.Run("UnpaidGetsQuote", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		resp, body := post(t, b.client, b.base+"/api/x402/diff", "", "")
		require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
		require.NotEmpty(t, resp.Header.Get("PAYMENT-REQUIRED"))
		require.NotEmpty(t, resp.Header.Get("WWW-Authenticate"))
		raw, err := base64.StdEncoding.DecodeString(resp.Header.Get("PAYMENT-REQUIRED"))
		require.NoError(t, err)
		require.JSONEq(t, string(raw), string(body))
		// The start-up crawl of the index writes host events of its own:
		// only calls' streams are the quote's to leave empty.
		var count int
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE stream LIKE $1", store.CallStream("%")).Scan(&count))
		require.Zero(t, count, "a quote writes nothing")
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls").Scan(&count))
		require.Zero(t, count, "a quote records no call")
	})

	t.Run("PaidURLMetaRendersAJavaScriptPage", func(t *testing.T) {
		t.Parallel()
		page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = io.WriteString(w, `<html><head></head><body><div id=app></div>`+
				`<script>document.title="Rendered title";document.getElementById("app").innerHTML='<a href="/x">x</a>'</script></body></html>`)
		}))
		defer page.Close()
		b := setup(t, map[string]string{"FETCH_ALLOW_CIDRS": "127.0.0.1/32"})
		resp, body := post(t, b.client, b.base+"/api/x402/url-meta", "test:0xpayer:um1", `{"url":"`+page.URL+`/"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		result := decodeJSON[map[string]any](t, body)
		require.Equal(t, "url-meta", result["op"])
		require.Equal(t, float64(200), result["status"])
		require.Equal(t, "Rendered title", result["title"])
		require.Equal(t, true, result["rendered"])

		// Without the test allowance, loopback is refused before payment.
		b2 := setup(t, nil)
		resp, body = post(t, b2.client, b2.base+"/api/x402/url-meta", "test:0xpayer:um2", `{"url":"`+page.URL+`/"}`)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
	})

	t.Run("EveryPureOperationEndToEnd", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		for i, tc := range []struct {
			op, body, field string
			want            any
		}{
			{"regex", `{"pattern":"(?<d>\\d+)","text":"a1b22","flags":"g"}`, "match_count", float64(2)},
			{"csv-json", `{"data":"a,b\n1,x\n2,y\n","to":"json"}`, "row_count", float64(2)},
			{"csv-json", `{"data":"[{\"a\":1}]","to":"tsv"}`, "output", "a\r\n1\r\n"},
			{"diff", diffBody, "identical", false},
		} {
			resp, body := post(t, b.client, b.base+"/api/x402/"+tc.op, fmt.Sprintf("test:0xpure:p%d", i), tc.body)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", tc.op, body)
			result := decodeJSON[map[string]any](t, body)
			require.Equal(t, tc.op, result["op"])
			require.Equal(t, tc.want, result[tc.field], "%s: %s", tc.op, body)
		}
	})

	t.Run("ModelOperationsAreSoldOnlyWithAKey", func(t *testing.T) {
		t.Parallel()
		unsold := setup(t, nil)
		for _, op := range []string{"brief", "data-clean", "code-review"} {
			resp, body := post(t, unsold.client, unsold.base+"/api/x402/"+op, "", "{}")
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s: %s", op, body)
			require.Empty(t, resp.Header.Get("PAYMENT-REQUIRED"))
		}

		fake := modeltest.NewServer(t)
		b := setup(t, map[string]string{"GEMINI_API_KEY": modeltest.APIKey, "GEMINI_BASE_URL": fake.URL})
		for i, tc := range []struct{ op, body, field string }{
			{"code-review", `{"code":"import os\nos.system('ls ' + name)\n","language":"python"}`, "findings"},
			{"data-clean", `{"data":"a,b\n1, x\n1, x\n,\n"}`, "cleaned_csv"},
			{"brief", `{"question":"What is the x402 protocol?"}`, "sources"},
		} {
			resp, body := post(t, b.client, b.base+"/api/x402/"+tc.op, fmt.Sprintf("test:0xmodel:m%d", i), tc.body)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", tc.op, body)
			result := decodeJSON[map[string]any](t, body)
			require.Equal(t, tc.op, result["op"])
			require.NotEmpty(t, result[tc.field], "%s: %s", tc.op, body)
		}
	})

	t.Run("PaidDiffDeliversResultAfterSettlement", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		resp, body := post(t, b.client, b.base+"/api/x402/diff", "test:0xpayer:n1", diffBody)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		result := decodeJSON[map[string]any](t, body)
		require.Equal(t, "diff", result["op"])
		callID, _ := result["call_id"].(string)
		require.NotEmpty(t, callID)
		require.Equal(t, false, result["identical"])
		require.Contains(t, result["unified"], "-two\n+three\n")

		settle, err := base64.StdEncoding.DecodeString(resp.Header.Get("PAYMENT-RESPONSE"))
		require.NoError(t, err)
		sr := decodeJSON[x402.SettleResponse](t, settle)
		require.True(t, sr.Success)
		require.Equal(t, paytest.TxHash("n1"), sr.Transaction)

		require.Equal(t, []string{
			store.EventCallPaid, store.EventJobSucceeded, store.EventSettlementConfirmed,
		}, eventTypes(ctx, t, b.db, callID))
		// The result's event names the settlement job of its first
		// submission.
		var e store.Event
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT data, bin FROM events WHERE stream = $1 AND type = $2",
			store.CallStream(callID), store.EventJobSucceeded).Scan(&e.Data, &e.Bin))
		var succeeded store.JobSucceeded
		require.NoError(t, e.Decode(&succeeded))
		require.NotZero(t, succeeded.SettleJobID)
	})

	t.Run("ReplaySameRequestGetsStoredResult", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		resp1, body1 := post(t, b.client, b.base+"/api/x402/diff", "test:0xpayer:r1", diffBody)
		require.Equal(t, http.StatusOK, resp1.StatusCode, string(body1))
		resp2, body2 := post(t, b.client, b.base+"/api/x402/diff", "test:0xpayer:r1", diffBody)
		require.Equal(t, http.StatusOK, resp2.StatusCode, string(body2))
		require.JSONEq(t, string(body1), string(body2))

		resp3, body3 := post(t, b.client, b.base+"/api/x402/diff", "test:0xpayer:r1", `{"a":"x","b":"y"}`)
		require.Equal(t, http.StatusPaymentRequired, resp3.StatusCode)
		require.Equal(t, "payment_already_used", decodeJSON[errorBody](t, body3).Error)
		require.NotEmpty(t, resp3.Header.Get("PAYMENT-REQUIRED"))

		// A forged header naming the same payer and nonce gets nothing.
		resp4, body4 := post(t, b.client, b.base+"/api/x402/diff", "bad:0xpayer:r1", diffBody)
		require.Equal(t, http.StatusPaymentRequired, resp4.StatusCode)
		require.Equal(t, "invalid_exact_evm_signature", decodeJSON[errorBody](t, body4).Error)
		require.NotContains(t, string(body4), "unified")

		var calls, settled int
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls").Scan(&calls))
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+paytest.LedgerTable).Scan(&settled))
		require.Equal(t, 1, calls)
		require.Equal(t, 1, settled)
	})

	t.Run("ConcurrentReplaysMakeOneCall", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		var wg sync.WaitGroup
		bodies := make([]string, 8)
		for i := range bodies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, body := post(t, b.client, b.base+"/api/x402/diff", "test:0xpayer:same", diffBody)
				if resp.StatusCode == http.StatusOK {
					bodies[i] = string(body)
				}
			}()
		}
		wg.Wait()
		for _, body := range bodies {
			require.JSONEq(t, bodies[0], body)
		}
		var calls int
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls").Scan(&calls))
		require.Equal(t, 1, calls)
	})

	t.Run("InvalidBodyIsRefusedWithoutCharge", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		for _, tc := range []struct{ body, field string }{
			{`{"a":"x"}`, "b"},
			{`{"a":1,"b":"x"}`, "a"},
			{`{"a":"x","b":"y","c":"z"}`, "c"},
			{`[1,2]`, ""},
			{`not json`, ""},
			{``, ""},
		} {
			resp, body := post(t, b.client, b.base+"/api/x402/diff", "test:0xpayer:inv", tc.body)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, tc.body)
			eb := decodeJSON[errorBody](t, body)
			require.Equal(t, "invalid_request", eb.Error, tc.body)
			require.Equal(t, tc.field, eb.Field, tc.body)
			require.NotEmpty(t, eb.Message)
		}
		var calls int
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls").Scan(&calls))
		require.Zero(t, calls)
	})

	t.Run("RefusedPaymentGetsFreshQuoteWithReason", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		resp, body := post(t, b.client, b.base+"/api/x402/diff", "bad:0xpayer:n", diffBody)
		require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
		require.Equal(t, "invalid_exact_evm_signature", decodeJSON[errorBody](t, body).Error)
		raw, err := base64.StdEncoding.DecodeString(resp.Header.Get("PAYMENT-REQUIRED"))
		require.NoError(t, err)
		require.Equal(t, "invalid_exact_evm_signature", decodeJSON[errorBody](t, raw).Error)
	})

	t.Run("SettlementFailureWithholdsResult", func(t *testing.T) {
		t.Parallel()
		b := setup(t, map[string]string{"TEST_SETTLE_FAIL": "1"})
		resp, body := post(t, b.client, b.base+"/api/x402/diff", "test:0xpayer:sf", diffBody)
		require.Equal(t, http.StatusPaymentRequired, resp.StatusCode, string(body))
		require.Equal(t, "invalid_exact_evm_insufficient_balance", decodeJSON[errorBody](t, body).Error)
		require.NotContains(t, string(body), "unified", "the result is withheld")
		var callID string
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT id FROM calls").Scan(&callID))
		require.Equal(t, []string{
			store.EventCallPaid, store.EventJobSucceeded, store.EventSettlementFailed,
		}, eventTypes(ctx, t, b.db, callID))
	})

	t.Run("SlowCallAnswers202ThenPolls", func(t *testing.T) {
		t.Parallel()
		b := setup(t, map[string]string{"CALL_WAIT": "200ms"})
		resp, body := post(t, b.client, b.base+"/api/x402/sleep", "test:0xpayer:slow", `{"ms":1500}`)
		require.Equal(t, http.StatusAccepted, resp.StatusCode, string(body))
		accepted := decodeJSON[map[string]string](t, body)
		require.Equal(t, "running", accepted["status"])
		poll := accepted["poll"]
		require.True(t, strings.HasPrefix(poll, "/api/x402/calls/"+accepted["call_id"]+"?token="), poll)

		for _, bad := range []string{"/api/x402/calls/" + accepted["call_id"], "/api/x402/calls/" + accepted["call_id"] + "?token=wrong"} {
			r, err := b.client.Get(b.base + bad)
			require.NoError(t, err)
			r.Body.Close()
			require.Equal(t, http.StatusNotFound, r.StatusCode, bad)
		}

		r, err := b.client.Get(b.base + poll + "&wait=20")
		require.NoError(t, err)
		defer r.Body.Close()
		require.Equal(t, http.StatusOK, r.StatusCode)
		var result map[string]any
		require.NoError(t, json.NewDecoder(r.Body).Decode(&result))
		require.Equal(t, float64(1500), result["slept_ms"])
		require.Equal(t, accepted["call_id"], result["call_id"])
	})

	t.Run("ErrorsAreJSON", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		resp, body := post(t, b.client, b.base+"/api/x402/nope", "", "{}")
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		require.Equal(t, "unknown_operation", decodeJSON[errorBody](t, body).Error)

		big := `{"a":"` + strings.Repeat("x", 2<<20) + `","b":""}`
		resp, body = post(t, b.client, b.base+"/api/x402/diff", "test:0xpayer:big", big)
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
		require.Equal(t, "body_too_large", decodeJSON[errorBody](t, body).Error)

		// GET answers the quote, as the official batch-settlement client
		// probes it (and sends its cooperative refund by GET).
		r, err := b.client.Get(b.base + "/api/x402/diff")
		require.NoError(t, err)
		defer r.Body.Close()
		require.Equal(t, http.StatusPaymentRequired, r.StatusCode)
		require.NotEmpty(t, r.Header.Get("Payment-Required"))
		require.Equal(t, "application/json", strings.Split(r.Header.Get("Content-Type"), ";")[0])

		for _, path := range []string{"/healthz", "/readyz"} {
			r, err := b.client.Get(b.base + path)
			require.NoError(t, err)
			r.Body.Close()
			require.Equal(t, http.StatusOK, r.StatusCode, path)
		}
	})
}

// TestWorkerKilledMidRun kills a real worker process while it runs a job:
// River rescues the job, another worker runs it, and the caller that waits
// on the poll URL gets the result; the payment is settled once.
func TestWorkerKilledMidRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	env := map[string]string{
		"DATABASE_URL":        db.URL,
		"LISTEN_ADDR":         "127.0.0.1:0",
		"CALL_WAIT":           "1s",
		"JOB_TIMEOUT":         "4s",
		"JOB_RESCUE_AFTER":    "5s",
		"RIVER_POLL_INTERVAL": "100ms",
	}
	apiProc := startChild(t, "api", env)
	w1 := startChild(t, "worker", env)

	client := &http.Client{Timeout: 90 * time.Second}
	resp, body := post(t, client, apiProc.addr+"/api/x402/sleep", "test:0xpayer:kill", `{"ms":3000}`)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, string(body))
	accepted := decodeJSON[map[string]string](t, body)
	callID := accepted["call_id"]

	require.Eventually(t, func() bool {
		types := eventTypes(ctx, t, db, callID)
		return len(types) >= 2 && types[1] == store.EventJobStarted
	}, 10*time.Second, 20*time.Millisecond, "job never started")
	w1.kill()

	w2 := startChild(t, "worker", env)
	_ = w2

	r, err := client.Get(apiProc.addr + accepted["poll"] + "&wait=60")
	require.NoError(t, err)
	defer r.Body.Close()
	require.Equal(t, http.StatusOK, r.StatusCode)
	var result map[string]any
	require.NoError(t, json.NewDecoder(r.Body).Decode(&result))
	require.Equal(t, float64(3000), result["slept_ms"])

	types := eventTypes(ctx, t, db, callID)
	started := 0
	for _, typ := range types {
		if typ == store.EventJobStarted {
			started++
		}
	}
	require.Equal(t, 2, started, "the job ran twice: killed, then rescued: %v", types)
	require.Equal(t, store.EventSettlementConfirmed, types[len(types)-1])
	var settled int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+paytest.LedgerTable).Scan(&settled))
	require.Equal(t, 1, settled)
}

// TestTwoAPIsTwoWorkers runs two api and two worker processes on one
// database and delivers each of 200 paid calls exactly once.
func TestTwoAPIsTwoWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	apis := startTwoAPIsTwoWorkers(t, db)

	const n = 200
	client := &http.Client{Timeout: 60 * time.Second}
	type outcome struct {
		status int
		callID string
		text   string
	}
	outcomes := make([]outcome, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			body := fmt.Sprintf(`{"a":"same\n","b":"same\ncall %d\n"}`, i)
			resp, b := post(t, client, apis[i%2].addr+"/api/x402/diff", fmt.Sprintf("test:0xpayer%d:n%d", i%7, i), body)
			o := outcome{status: resp.StatusCode}
			if resp.StatusCode == http.StatusOK {
				var r struct {
					CallID string `json:"call_id"`
					Added  []struct {
						Text string `json:"text"`
					} `json:"added"`
				}
				if json.Unmarshal(b, &r) == nil && len(r.Added) == 1 {
					o.callID, o.text = r.CallID, r.Added[0].Text
				}
			}
			outcomes[i] = o
		}()
	}
	wg.Wait()

	seen := map[string]bool{}
	for i, o := range outcomes {
		require.Equal(t, http.StatusOK, o.status, "call %d", i)
		require.Equal(t, fmt.Sprintf("call %d", i), o.text, "call %d got another call's result", i)
		require.False(t, seen[o.callID], "call id %s delivered twice", o.callID)
		seen[o.callID] = true
	}
	var confirmed, settled, paid int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE type = 'settlement.confirmed'").Scan(&confirmed))
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+paytest.LedgerTable).Scan(&settled))
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls WHERE state = 'paid'").Scan(&paid))
	require.Equal(t, n, confirmed)
	require.Equal(t, n, settled)
	require.Equal(t, n, paid)
}

// TestWorkerServesMetrics checks that a worker-only process serves /metrics
// on METRICS_ADDR.
func TestWorkerServesMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	addr := freeAddr(t)
	startInProcess(ctx, t, "worker", testEnv(db, map[string]string{"METRICS_ADDR": addr}))
	var body []byte
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond)
	require.Contains(t, string(body), "# TYPE")
}

// TestAPIMetricsPrivate: an api serves /metrics (revenue, relayer
// balances) to its operator only: with METRICS_ADDR on that listener alone,
// without it on LISTEN_ADDR to the OPS_TOKEN bearer, and nowhere without
// either.
func TestAPIMetricsPrivate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	get := func(t *testing.T, url, token string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	t.Run("on METRICS_ADDR alone", func(t *testing.T) {
		t.Parallel()
		addr := freeAddr(t)
		base := startInProcess(ctx, t, "serve", testEnv(dbtest.Schema(ctx, t), map[string]string{"METRICS_ADDR": addr}))
		require.Equal(t, http.StatusNotFound, get(t, base+"/metrics", testOpsToken))
		require.Equal(t, http.StatusOK, get(t, "http://"+addr+"/metrics", ""))
	})
	t.Run("behind the token", func(t *testing.T) {
		t.Parallel()
		base := startInProcess(ctx, t, "serve", testEnv(dbtest.Schema(ctx, t), nil))
		require.Equal(t, http.StatusUnauthorized, get(t, base+"/metrics", ""))
		require.Equal(t, http.StatusOK, get(t, base+"/metrics", testOpsToken))
	})
	t.Run("nowhere without a token", func(t *testing.T) {
		t.Parallel()
		base := startInProcess(ctx, t, "serve", testEnv(dbtest.Schema(ctx, t), map[string]string{"OPS_TOKEN": ""}))
		require.Equal(t, http.StatusNotFound, get(t, base+"/metrics", ""))
	})
}

// TestPprofOffLoopbackRefused: a process asked to serve its profiles off
// loopback does not start, and says which setting is wrong.
func TestPprofOffLoopbackRefused(t *testing.T) {
	t.Parallel()
	// Bounded, should the process start after all.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env := map[string]string{"PPROF_ADDR": "0.0.0.0:0"}
	err := run(ctx, []string{"serve"}, func(k string) string { return env[k] }, io.Discard, io.Discard, nil)
	require.ErrorContains(t, err, `PPROF_ADDR: "0.0.0.0:0" is not a loopback address`)
}
