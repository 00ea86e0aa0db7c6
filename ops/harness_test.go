package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/api"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/logtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/diff"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/ops"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
)

// This file runs the real service in-process for the dashboard's tests: the
// api with the dashboard and metrics mounted, a River client working the
// jobs, Postgres in a schema of its own. Only the payment's chain is a
// double (payments "test:<payer>:<nonce>"), as there is no chain here.

// testToken is the operator token of the tests.
const testToken = "ops-test-token-7c1f0e9a4b2d5e8f31a6c0d4"

// flakyArgs is a job that fails on its first attempt and succeeds on any
// later one: inserted with one attempt, it ends discarded until an operator
// retries it.
type flakyArgs struct {
	Note string `json:"note"`
}

func (flakyArgs) Kind() string { return "flaky" }

type flakyWorker struct {
	river.WorkerDefaults[flakyArgs]
}

func (flakyWorker) Work(_ context.Context, job *river.Job[flakyArgs]) error {
	if job.Attempt == 1 {
		return errors.New("upstream unavailable on the first attempt")
	}
	return nil
}

// service is the running service of one test.
type service struct {
	URL     string
	DB      *dbtest.DB
	River   *worker.Client
	Metrics *metrics.Metrics
	Logs    *logtest.Buffer
	HTTP    *http.Client
}

// trustLoopback has the service trust loopback as its reverse proxy: a
// test speaks as any client address (X-Forwarded-For), over HTTPS or not
// (X-Forwarded-Proto).
func trustLoopback(c *ops.Config) {
	c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
}

// startService runs api + workers with the dashboard behind token (empty:
// disabled).
func startService(ctx context.Context, t testing.TB, token string) *service {
	t.Helper()
	return startServiceWith(ctx, t, token, &paytest.Payments{}, nil)
}

// startServiceWith is startService settling with payments and with the
// dashboard's configuration changed by configure (when set).
func startServiceWith(ctx context.Context, t testing.TB, token string, payments *paytest.Payments, configure func(*ops.Config)) *service {
	t.Helper()
	db := dbtest.Schema(ctx, t)
	logs := &logtest.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m := metrics.New(&metrics.Config{Pool: db.Pool})
	client, err := worker.NewClient(&worker.Deps{
		Pool:     db.Pool,
		Settler:  payments,
		Logger:   logger,
		Ops:      []worker.Op{worker.Bind(diff.Op, diff.Work, false)},
		Register: []func(*river.Workers) error{func(w *river.Workers) error { return river.AddWorkerSafely(w, flakyWorker{}) }},
		Metrics:  m,
	}, &worker.Config{Work: true, FetchPollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = worker.Stop(client, 5*time.Second) })

	listener := store.NewListener(db.Pool.Config().ConnConfig, logger)
	require.NoError(t, listener.Start(ctx))
	t.Cleanup(listener.Stop)

	dashboard := &ops.Config{Token: token, Refresh: 300 * time.Millisecond}
	if configure != nil {
		configure(dashboard)
	}
	srv, err := api.New(&api.Config{
		Ops:       []jobs.Operation{diff.Op},
		Payments:  &paytest.Payments{},
		Pool:      db.Pool,
		River:     client,
		Listener:  listener,
		CallWait:  10 * time.Second,
		Logger:    logger,
		Metrics:   m,
		Dashboard: dashboard,
		// The api reads client addresses from the proxies the dashboard
		// trusts (trustLoopback: any address a test names).
		TrustedProxies: dashboard.TrustedProxies,
	})
	require.NoError(t, err)
	hs := httptest.NewServer(srv.Echo())
	t.Cleanup(hs.Close)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service logs:\n%s", logs.String())
		}
	})
	return &service{
		URL: hs.URL, DB: db, River: client, Metrics: m, Logs: logs,
		HTTP: &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
}

// pay makes a call of diff with payment header payment ("" for none).
func (s *service) pay(t testing.TB, payment, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/api/x402/diff", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if payment != "" {
		req.Header.Set("PAYMENT-SIGNATURE", payment)
	}
	return s.do(t, req)
}

// get fetches path with extra headers.
func (s *service) get(t testing.TB, path string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return s.do(t, req)
}

func (s *service) do(t testing.TB, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := s.HTTP.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// paidCallID pays a diff call and returns its call id.
func (s *service) paidCallID(t testing.TB, payment string) string {
	t.Helper()
	resp, body := s.pay(t, payment, `{"a":"one\ntwo\n","b":"one\nthree\n"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var res struct {
		CallID string `json:"call_id"`
	}
	require.NoError(t, json.Unmarshal(body, &res))
	require.NotEmpty(t, res.CallID)
	return res.CallID
}
