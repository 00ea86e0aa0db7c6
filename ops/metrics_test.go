package ops_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
)

// scrape reads /metrics with the Prometheus text parser.
func scrape(t *testing.T, s *service) map[string]*dto.MetricFamily {
	t.Helper()
	resp, body := s.get(t, "/metrics", map[string]string{"Authorization": "Bearer " + testToken})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(t, err)
	return fams
}

// sample returns the value of the counter (or the sample count of the
// histogram) name whose labels include labels; 0 when there is none.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	fam, ok := fams[name]
	if !ok {
		return 0
	}
	var total float64
next:
	for _, m := range fam.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

func TestMetricsMoveWithCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(ctx, t, testToken)

	type probe struct {
		name   string
		labels map[string]string
		want   float64
	}
	probes := []probe{
		{"x402d_quotes_served_total", map[string]string{"op": "diff"}, 2},
		{"x402d_payments_verified_total", map[string]string{"op": "diff", "network": "eip155:8453"}, 2},
		{"x402d_payments_refused_total", map[string]string{"op": "diff", "reason": "invalid_exact_evm_signature"}, 1},
		{"x402d_payments_refused_total", map[string]string{"op": "diff", "reason": "invalid_payload"}, 1},
		{"x402d_settlements_total", map[string]string{"network": "eip155:8453", "outcome": "confirmed"}, 1},
		{"x402d_settlements_total", map[string]string{"network": "eip155:8453", "outcome": "failed"}, 1},
		{"x402d_jobs_total", map[string]string{"kind": "diff", "outcome": "completed"}, 2},
		// The calls' own jobs settled them: no settlement job ran.
		{"x402d_jobs_total", map[string]string{"kind": "settle", "outcome": "completed"}, 0},
		{"x402d_job_duration_seconds", map[string]string{"kind": "diff"}, 2},
		{"x402d_http_requests_total", map[string]string{"method": "POST", "route": "/api/x402/:op", "status": "402"}, 5},
		{"x402d_http_requests_total", map[string]string{"method": "POST", "route": "/api/x402/:op", "status": "200"}, 1},
		{"x402d_http_requests_total", map[string]string{"method": "GET", "route": "/ops/calls", "status": "401"}, 1},
		{"x402d_http_request_duration_seconds", map[string]string{"method": "POST", "route": "/api/x402/:op"}, 6},
		// Group commits: two calls admitted, two results (each with its
		// settlement's first submission and its settlement job), no
		// settlement attempted again, and two outcomes (each deleting its
		// settlement job).
		{"x402d_group_commit_items_total", map[string]string{"committer": "admission", "outcome": "committed"}, 2},
		{"x402d_group_commit_items_total", map[string]string{"committer": "results", "outcome": "committed"}, 2},
		{"x402d_group_commit_items_total", map[string]string{"committer": "submission", "outcome": "committed"}, 0},
		{"x402d_group_commit_items_total", map[string]string{"committer": "settlement", "outcome": "committed"}, 2},
	}
	completed, stop := s.River.Subscribe(river.EventKindJobCompleted)
	t.Cleanup(stop)
	before := scrape(t, s)
	for _, p := range probes {
		require.Zero(t, sample(before, p.name, p.labels), "%s %v before any call", p.name, p.labels)
	}
	// The figures read from the database are there from the start.
	require.Equal(t, 1.0, sample(before, "x402d_database_scrape_ok", nil))
	require.Contains(t, before, "go_goroutines")

	const body = `{"a":"x\n","b":"y\n"}`
	for _, payment := range []string{"", ""} {
		resp, _ := s.pay(t, payment, "")
		require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
	}
	resp, _ := s.pay(t, "bad:0xmallory:m1", body)
	require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
	resp, _ = s.pay(t, "garbage", body)
	require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
	s.paidCallID(t, "test:0xa11ce:m2")
	resp, _ = s.pay(t, "test:0xbroke02:m3", body)
	require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
	resp, _ = s.get(t, "/ops/calls", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// Job and settlement counters are recorded when the job's run returns,
	// which may be just after the answer went out: both diff jobs have
	// completed before the figures are read.
	for n := 0; n < 2; {
		select {
		case e := <-completed:
			if e.Job.Kind == "diff" {
				n++
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of the 2 diff jobs completed", n)
		}
	}
	after := scrape(t, s)
	for _, p := range probes {
		if got := sample(after, p.name, p.labels) - sample(before, p.name, p.labels); got != p.want {
			t.Errorf("%s %v moved by %v, want %v", p.name, p.labels, got, p.want)
		}
	}
}
