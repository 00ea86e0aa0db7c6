package metrics_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
)

// scrape serves m's handler once and parses the answer with the Prometheus
// text parser.
func scrape(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(rec.Body.Bytes()))
	require.NoError(t, err)
	return fams
}

// value returns the counter, gauge or histogram sample count of the series
// of name with exactly labels, and whether it exists.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	fam, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range fam.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func TestNilMetricsRecordNothing(t *testing.T) {
	t.Parallel()
	var m *metrics.Metrics
	m.ObserveRequest("GET", "/", 200, time.Millisecond)
	m.QuoteServed("diff")
	m.PaymentVerified("diff", "eip155:8453")
	m.PaymentRefused("diff", "invalid_exact_evm_signature")
	m.Settlement("eip155:8453", metrics.SettlementConfirmed)
	m.JobDone("diff", metrics.JobCompleted, time.Millisecond)
	m.CrawlPage("ok")
	m.LivenessProbe("live", time.Millisecond)
	m.UnpaidWork("regex", "operation_failed", time.Second)
	m.UnpaidWorkLimited("regex", "payer")
	rpc := m.RPCEndpoint("eip155:8453", "https://rpc.example")
	require.Nil(t, rpc)
	rpc.ObserveCall(time.Millisecond, "429")
	rpc.SetLag(3)
	rpc.SetIn(false)
	require.Nil(t, m.Registry())

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusNotFound, rec.Code)

	called := false
	h := m.Middleware()(func(c echo.Context) error { called = true; return nil })
	require.NoError(t, h(echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())))
	require.True(t, called)

	mw := m.JobMiddleware().(rivertype.WorkerMiddleware)
	inner := errors.New("inner")
	require.ErrorIs(t, mw.Work(context.Background(), &rivertype.JobRow{Kind: "k"}, func(context.Context) error { return inner }), inner)
}

// TestUnpaidWorkFigures records runs that ended unpaid and calls limited
// for them, and reads them back.
func TestUnpaidWorkFigures(t *testing.T) {
	t.Parallel()
	m := metrics.New(&metrics.Config{})
	m.UnpaidWork("regex", "operation_failed", 200*time.Millisecond)
	m.UnpaidWork("regex", "operation_failed", 300*time.Millisecond)
	m.UnpaidWork("diff", "payment_expired", 2*time.Second)
	m.UnpaidWorkLimited("regex", "payer")
	m.UnpaidWorkLimited("regex", "client")
	m.UnpaidWorkLimited("regex", "payer")
	fams := scrape(t, m)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"x402d_unpaid_work_total", map[string]string{"op": "regex", "reason": "operation_failed"}, 2},
		{"x402d_unpaid_work_seconds_total", map[string]string{"op": "regex", "reason": "operation_failed"}, 0.5},
		{"x402d_unpaid_work_total", map[string]string{"op": "diff", "reason": "payment_expired"}, 1},
		{"x402d_unpaid_work_seconds_total", map[string]string{"op": "diff", "reason": "payment_expired"}, 2},
		{"x402d_unpaid_work_limited_total", map[string]string{"op": "regex", "by": "payer"}, 2},
		{"x402d_unpaid_work_limited_total", map[string]string{"op": "regex", "by": "client"}, 1},
	} {
		got, ok := value(fams, tc.name, tc.labels)
		require.True(t, ok, "%s%v missing", tc.name, tc.labels)
		require.InDelta(t, tc.want, got, 1e-9, "%s%v", tc.name, tc.labels)
	}
}

// TestRPCEndpointFigures records calls of two endpoints and reads them back
// by network and endpoint name.
func TestRPCEndpointFigures(t *testing.T) {
	t.Parallel()
	m := metrics.New(&metrics.Config{})
	a := m.RPCEndpoint("eip155:8453", "https://a.example")
	b := m.RPCEndpoint("eip155:8453", "https://b.example:8545")
	a.ObserveCall(time.Millisecond, "")
	a.ObserveCall(2*time.Millisecond, "429")
	a.ObserveCall(time.Second, "timeout")
	b.ObserveCall(time.Millisecond, "other")
	a.SetLag(0)
	b.SetLag(7)
	a.SetIn(true)
	b.SetIn(false)
	fams := scrape(t, m)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"x402d_rpc_endpoint_calls_total", map[string]string{"network": "eip155:8453", "endpoint": "https://a.example"}, 3},
		{"x402d_rpc_endpoint_call_duration_seconds", map[string]string{"network": "eip155:8453", "endpoint": "https://a.example"}, 3},
		{"x402d_rpc_endpoint_errors_total", map[string]string{"network": "eip155:8453", "endpoint": "https://a.example", "kind": "429"}, 1},
		{"x402d_rpc_endpoint_errors_total", map[string]string{"network": "eip155:8453", "endpoint": "https://a.example", "kind": "timeout"}, 1},
		{"x402d_rpc_endpoint_errors_total", map[string]string{"network": "eip155:8453", "endpoint": "https://b.example:8545", "kind": "other"}, 1},
		{"x402d_rpc_endpoint_calls_total", map[string]string{"network": "eip155:8453", "endpoint": "https://b.example:8545"}, 1},
		{"x402d_rpc_endpoint_head_lag_blocks", map[string]string{"network": "eip155:8453", "endpoint": "https://b.example:8545"}, 7},
		{"x402d_rpc_endpoint_in", map[string]string{"network": "eip155:8453", "endpoint": "https://a.example"}, 1},
		{"x402d_rpc_endpoint_in", map[string]string{"network": "eip155:8453", "endpoint": "https://b.example:8545"}, 0},
	} {
		got, ok := value(fams, tc.name, tc.labels)
		require.True(t, ok, "%s %v", tc.name, tc.labels)
		require.Equal(t, tc.want, got, "%s %v", tc.name, tc.labels)
	}
}

func TestMiddlewareCountsByRouteAndStatus(t *testing.T) {
	t.Parallel()
	m := metrics.New(&metrics.Config{})
	e := echo.New()
	e.Use(m.Middleware())
	e.GET("/items/:id", func(c echo.Context) error { return c.String(http.StatusOK, c.Param("id")) })
	e.GET("/teapot", func(c echo.Context) error { return echo.NewHTTPError(http.StatusTeapot, "short and stout") })
	e.GET("/boom", func(c echo.Context) error { return errors.New("unexpected") })

	for _, path := range []string{"/items/1", "/items/2", "/items/3", "/teapot", "/boom", "/nowhere/1", "/nowhere/2"} {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	}
	fams := scrape(t, m)
	for _, tc := range []struct {
		route, status string
		want          float64
	}{
		{"/items/:id", "200", 3},
		{"/teapot", "418", 1},
		{"/boom", "500", 1},
		{"unmatched", "404", 2},
	} {
		labels := map[string]string{"method": "GET", "route": tc.route, "status": tc.status}
		got, ok := value(fams, "x402d_http_requests_total", labels)
		require.True(t, ok, "%v", labels)
		require.Equal(t, tc.want, got, "%v", labels)
		got, ok = value(fams, "x402d_http_request_duration_seconds", labels)
		require.True(t, ok, "%v", labels)
		require.Equal(t, tc.want, got, "%v", labels)
	}
	// Raw paths never become labels.
	_, ok := value(fams, "x402d_http_requests_total", map[string]string{"method": "GET", "route": "/items/1", "status": "200"})
	require.False(t, ok)
}

// TestMiddlewareMethodsBounded sends requests with a thousand made-up
// methods: they share one series, so a client cannot grow the label sets
// kept for the life of the process.
func TestMiddlewareMethodsBounded(t *testing.T) {
	t.Parallel()
	m := metrics.New(&metrics.Config{})
	e := echo.New()
	e.Use(m.Middleware())
	e.GET("/items/:id", func(c echo.Context) error { return c.String(http.StatusOK, c.Param("id")) })
	for i := range 1000 {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(fmt.Sprintf("M%d", i), "/items/1", nil))
	}
	e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/items/1", nil))
	fams := scrape(t, m)
	require.Equal(t, 2, len(fams["x402d_http_requests_total"].GetMetric()), "series of x402d_http_requests_total")
	got, ok := value(fams, "x402d_http_requests_total", map[string]string{"method": "other", "route": "/items/:id", "status": "405"})
	require.True(t, ok)
	require.Equal(t, 1000.0, got)
}

func TestJobMiddleware(t *testing.T) {
	t.Parallel()
	m := metrics.New(&metrics.Config{})
	mw := m.JobMiddleware().(rivertype.WorkerMiddleware)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		attempt int
		err     error
		want    string
	}{
		{"Completed", 1, nil, metrics.JobCompleted},
		{"ErrorRetried", 1, errors.New("down"), metrics.JobError},
		{"ErrorOnLastAttempt", 3, errors.New("down"), metrics.JobDiscarded},
		{"Cancelled", 1, river.JobCancel(errors.New("give up")), metrics.JobCancelled},
		{"Snoozed", 1, river.JobSnooze(time.Minute), metrics.JobSnoozed},
	} {
		job := &rivertype.JobRow{Kind: "k_" + tc.name, Attempt: tc.attempt, MaxAttempts: 3}
		err := mw.Work(ctx, job, func(context.Context) error { return tc.err })
		require.Equal(t, tc.err, err, tc.name)
		require.Equal(t, tc.want, metrics.JobOutcome(job, tc.err), tc.name)
		got, ok := value(scrape(t, m), "x402d_jobs_total", map[string]string{"kind": job.Kind, "outcome": tc.want})
		require.True(t, ok, tc.name)
		require.Equal(t, 1.0, got, tc.name)
	}

	job := &rivertype.JobRow{Kind: "k_panic", Attempt: 1, MaxAttempts: 3}
	require.Panics(t, func() { _ = mw.Work(ctx, job, func(context.Context) error { panic("bug") }) })
	got, ok := value(scrape(t, m), "x402d_job_duration_seconds", map[string]string{"kind": "k_panic", "outcome": metrics.JobPanic})
	require.True(t, ok)
	require.Equal(t, 1.0, got)
}

func TestDatabaseFigures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{SkipUnknownJobCheck: true})
	require.NoError(t, err)
	for range 3 {
		_, err := client.Insert(ctx, kindArgs{}, &river.InsertOpts{Queue: "alpha"})
		require.NoError(t, err)
	}
	_, err = client.Insert(ctx, kindArgs{}, &river.InsertOpts{Queue: "beta", ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	// The oldest waiting job of alpha has waited about a minute.
	_, err = db.Pool.Exec(ctx, "UPDATE river_job SET scheduled_at = now() - interval '61 seconds' WHERE id = (SELECT min(id) FROM river_job WHERE queue = 'alpha')")
	require.NoError(t, err)

	m := metrics.New(&metrics.Config{Pool: db.Pool})
	fams := scrape(t, m)
	for _, tc := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"queue": "alpha", "state": "available"}, 3},
		{map[string]string{"queue": "alpha", "state": "scheduled"}, 0},
		{map[string]string{"queue": "beta", "state": "scheduled"}, 1},
		{map[string]string{"queue": "beta", "state": "available"}, 0},
	} {
		got, ok := value(fams, "x402d_queue_jobs", tc.labels)
		require.True(t, ok, "%v", tc.labels)
		require.Equal(t, tc.want, got, "%v", tc.labels)
	}
	age, ok := value(fams, "x402d_queue_oldest_available_seconds", map[string]string{"queue": "alpha"})
	require.True(t, ok)
	require.InDelta(t, 61, age, 5)
	up, _ := value(fams, "x402d_database_scrape_ok", map[string]string{})
	require.Equal(t, 1.0, up)

	// The index figures are there when the index is installed, and agree
	// with the store's.
	figures, err := store.IndexFiguresGet(ctx, db.Pool)
	require.NoError(t, err)
	_, hasHosts := value(fams, "x402d_index_hosts", map[string]string{"liveness": "live"})
	require.Equal(t, figures != nil, hasHosts)
	if figures != nil {
		got, _ := value(fams, "x402d_index_resources", map[string]string{})
		require.Equal(t, float64(figures.Resources), got)
	}

	// A database that does not answer is a figure, not a failed scrape.
	db.Pool.Close()
	fams = scrape(t, m)
	up, _ = value(fams, "x402d_database_scrape_ok", map[string]string{})
	require.Equal(t, 0.0, up)
}

type kindArgs struct{}

func (kindArgs) Kind() string { return "metrics_test_kind" }

// BenchmarkRequestFigures is what metrics add to an unpaid quote: the
// request's counter and latency, and the quote's counter.
func BenchmarkRequestFigures(b *testing.B) {
	m := metrics.New(&metrics.Config{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.ObserveRequest(http.MethodPost, "/api/x402/:op", http.StatusPaymentRequired, 40*time.Microsecond)
			m.QuoteServed("diff")
		}
	})
}
