package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/x402"
)

func TestCheckLoopback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		base string
		ok   bool
	}{
		{"http://127.0.0.1:8080", true},
		{"http://127.0.0.2:8080", true},
		{"http://localhost:8080", true},
		{"http://[::1]:8080", true},
		{"http://10.0.0.1:8080", false},
		{"http://192.168.1.10", false},
		{"http://example.com", false},
		{"http://[::ffff:8.8.8.8]:80", false},
		{"://bad", false},
	} {
		err := checkLoopback(tc.base)
		require.Equal(t, tc.ok, err == nil, "%s: %v", tc.base, err)
	}
}

func TestSummarise(t *testing.T) {
	t.Parallel()
	var outcomes []Outcome
	for i := 1; i <= 100; i++ {
		status := http.StatusOK
		if i%10 == 0 {
			status = http.StatusPaymentRequired
		}
		outcomes = append(outcomes, Outcome{Status: status, Latency: time.Duration(i) * time.Millisecond})
	}
	outcomes = append(outcomes, Outcome{Err: "dial tcp: connection refused", Latency: time.Hour})
	r := summarise(outcomes, 2*time.Second, 0)
	require.Equal(t, 101, r.Calls)
	require.Equal(t, 1, r.Errors)
	require.Equal(t, map[int]int{200: 90, 402: 10}, r.Statuses)
	require.InDelta(t, 50.5, r.Throughput, 1e-9)
	// Errors without a status have no latency worth counting.
	require.Equal(t, 51*time.Millisecond, r.P50)
	require.Equal(t, 96*time.Millisecond, r.P95)
	require.Equal(t, 100*time.Millisecond, r.P99)
	require.Equal(t, 100*time.Millisecond, r.Max)
	require.Equal(t, "calls 101 in 2s: 50.5 calls/s\nlatency p50 51.00ms p95 96.00ms p99 100.00ms max 100.00ms\nstatuses 200:90 402:10 errors:1\n", r.String())
}

// TestSummarise_Sustained runs a closed loop on paper: 100 calls in flight,
// each answered in 1 s, their first starts spread over the first second,
// each slot starting 8 calls. The service answers 100 calls/s; the run's
// Throughput also counts the first second's wait and the last's drain.
func TestSummarise_Sustained(t *testing.T) {
	t.Parallel()
	var outcomes []Outcome
	for slot := range 100 {
		for k := range 8 {
			outcomes = append(outcomes, Outcome{Status: http.StatusOK,
				Offset: time.Duration(slot)*10*time.Millisecond + time.Duration(k)*time.Second, Latency: time.Second})
		}
	}
	outcomes = append(outcomes, Outcome{Err: "connection refused", Offset: 3 * time.Second, Latency: time.Millisecond})
	r := summarise(outcomes, 8990*time.Millisecond, 0)
	require.InDelta(t, 89.1, r.Throughput, 0.1)
	require.InDelta(t, 100, r.Sustained, 0.1, "599 calls answered from 1.9975 s to 7.99 s")
	require.Contains(t, r.String(), "calls/s, 100.0 sustained\n")

	// Answers released in bursts, as a chain's blocks release them: 200
	// every 2 s, from calls started at 100/s. A 15-s window holds 7 or 8
	// bursts; the fit gives the rate either way.
	for _, shift := range []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond} {
		outcomes = outcomes[:0]
		for i := range 2000 {
			start := time.Duration(i) * 10 * time.Millisecond
			block := (start+shift)/(2*time.Second)*(2*time.Second) + 4*time.Second - shift
			outcomes = append(outcomes, Outcome{Status: http.StatusOK, Offset: start, Latency: block - start})
		}
		require.InDelta(t, 100, summarise(outcomes, 24*time.Second, 0).Sustained, 5, "shift %s", shift)
	}
}

func TestSummarise_Intervals(t *testing.T) {
	t.Parallel()
	// Calls every 10 ms for 2.5 s; those started in the second second take
	// 200 ms, the others 10 ms, and one of the last half second failed
	// without an answer.
	var outcomes []Outcome
	for i := range 250 {
		o := Outcome{Status: http.StatusOK, Offset: time.Duration(i) * 10 * time.Millisecond, Latency: 10 * time.Millisecond}
		if o.Offset >= time.Second && o.Offset < 2*time.Second {
			o.Latency = 200 * time.Millisecond
		}
		if i == 249 {
			o = Outcome{Err: "connection refused", Offset: o.Offset, Latency: time.Hour}
		}
		outcomes = append(outcomes, o)
	}
	r := summarise(outcomes, 2500*time.Millisecond, time.Second)
	require.Equal(t, []Interval{
		{Start: 0, End: time.Second, Calls: 100, P50: 10 * time.Millisecond, P99: 10 * time.Millisecond, Max: 10 * time.Millisecond},
		{Start: time.Second, End: 2 * time.Second, Calls: 100, P50: 200 * time.Millisecond, P99: 200 * time.Millisecond, Max: 200 * time.Millisecond},
		{Start: 2 * time.Second, End: 3 * time.Second, Calls: 50, P50: 10 * time.Millisecond, P99: 10 * time.Millisecond, Max: 10 * time.Millisecond},
	}, r.Intervals)
	require.Contains(t, r.String(), "\n  1s-2s: 100 calls, p50 200.00ms p99 200.00ms max 200.00ms\n")
	require.Empty(t, summarise(outcomes, 2500*time.Millisecond, 0).Intervals)
}

// seller is a loopback service speaking x402's headers: 402 with
// PAYMENT-REQUIRED without a payment, 200 with PAYMENT-RESPONSE with one. The
// first answer to each header in lose is a 503, as if it were lost.
type seller struct {
	mu    sync.Mutex
	seen  map[string]int
	lose  map[string]bool
	calls atomic.Int64
}

func (s *seller) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	header := r.Header.Get("Payment-Signature")
	if header == "" {
		w.Header().Set("Payment-Required", "quote-of-"+strings.TrimPrefix(r.URL.Path, "/api/x402/"))
		w.WriteHeader(http.StatusPaymentRequired)
		return
	}
	s.calls.Add(1)
	s.mu.Lock()
	s.seen[header]++
	n := s.seen[header]
	s.mu.Unlock()
	if s.lose[header] && n == 1 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	resp, err := x402.EncodeHeader(x402.SettleResponse{Success: true, Transaction: "tx-" + header, Network: "eip155:8453"})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Payment-Response", resp)
	fmt.Fprintf(w, `{"call_id":"call-%s"}`, header)
}

// countingPayer numbers its headers and checks the quote it is given.
type countingPayer struct {
	n      atomic.Int64
	quotes sync.Map
}

func (p *countingPayer) Pay(_ context.Context, paymentRequired string) (string, error) {
	p.quotes.Store(paymentRequired, true)
	return fmt.Sprintf("h%d", p.n.Add(1)), nil
}

// quotingPayer is a countingPayer whose headers name the quote they pay.
type quotingPayer struct{ countingPayer }

func (p *quotingPayer) Pay(ctx context.Context, paymentRequired string) (string, error) {
	h, err := p.countingPayer.Pay(ctx, paymentRequired)
	return paymentRequired + "/" + h, err
}

func TestRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &seller{seen: map[string]int{}, lose: map[string]bool{"h1": true, "h2": true}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	payer := &countingPayer{}

	rep, err := Run(ctx, Config{
		BaseURL: srv.URL, Payer: payer, Concurrency: 4, Duration: 10 * time.Second, MaxCalls: 40, Retry: true,
		Requests: []Request{{Op: "diff", Body: `{}`}, {Op: "regex", Body: `{}`}},
	})
	require.NoError(t, err)
	require.Equal(t, 40, rep.Calls, rep.String())
	require.Equal(t, map[int]int{200: 40}, rep.Statuses)
	// Two lost answers were resent with the same header: 42 paid requests.
	require.Equal(t, int64(42), s.calls.Load())
	ops := map[string]int{}
	for _, o := range rep.Outcomes {
		require.True(t, o.Settled)
		require.Equal(t, "tx-"+o.Header, o.Tx)
		require.Equal(t, "call-"+o.Header, o.CallID)
		want := 1
		if o.Header == "h1" || o.Header == "h2" {
			want = 2
		}
		require.Equal(t, want, o.Tries, o.Header)
		ops[o.Op]++
	}
	require.Equal(t, map[string]int{"diff": 20, "regex": 20}, ops)
	for _, q := range []string{"quote-of-diff", "quote-of-regex"} {
		_, ok := payer.quotes.Load(q)
		require.True(t, ok, "the payer never saw %s", q)
	}

	// Without Retry a lost answer is counted as it came.
	s2 := &seller{seen: map[string]int{}, lose: map[string]bool{"h1": true}}
	srv2 := httptest.NewServer(s2)
	t.Cleanup(srv2.Close)
	rep, err = Run(ctx, Config{BaseURL: srv2.URL, Payer: &countingPayer{}, Concurrency: 1, MaxCalls: 3, Requests: []Request{{Op: "diff"}}})
	require.NoError(t, err)
	require.Equal(t, map[int]int{200: 2, 503: 1}, rep.Statuses)

	// Presigned: every payment is signed before the first request, each
	// call carries its own, and the run ends when they are used up.
	var signedAtFirst atomic.Int64
	presigner := &quotingPayer{}
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Payment-Signature") != "" {
			signedAtFirst.CompareAndSwap(0, presigner.n.Load())
		}
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(first.Close)
	rep, err = Run(ctx, Config{BaseURL: first.URL, Payer: presigner, Concurrency: 4, Rate: 1000, Duration: 10 * time.Second, MaxCalls: 12, Presign: true, Requests: []Request{{Op: "diff"}, {Op: "regex"}}})
	require.NoError(t, err)
	require.Equal(t, 12, rep.Calls, rep.String())
	require.Equal(t, map[int]int{200: 12}, rep.Statuses)
	require.EqualValues(t, 12, signedAtFirst.Load(), "signatures made before the first paid request")
	require.EqualValues(t, 12, presigner.n.Load(), "no payment signed during the run")
	headers := map[string]string{}
	for _, o := range rep.Outcomes {
		headers[o.Header] = o.Op
	}
	require.Len(t, headers, 12, "a payment per call")
	for h, op := range headers {
		// Each was signed for its own call's quote.
		require.True(t, strings.HasPrefix(h, "quote-of-"+op+"/"), "%s paid %s", h, op)
	}
	_, err = Run(ctx, Config{BaseURL: first.URL, Payer: presigner, Presign: true, Requests: []Request{{Op: "diff"}}})
	require.ErrorContains(t, err, "presigning needs a rate or a number of calls")
	_, err = Run(ctx, Config{BaseURL: first.URL, Payer: presigner, Presign: true, Rate: 1e6, Duration: time.Second, Requests: []Request{{Op: "diff"}}})
	require.ErrorContains(t, err, "at most 100000 calls")

	// A rate spaces the calls out.
	start := time.Now()
	rep, err = Run(ctx, Config{BaseURL: srv.URL, Payer: &countingPayer{}, Concurrency: 8, Rate: 50, MaxCalls: 10, Requests: []Request{{Op: "diff"}}, Interval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, 10, rep.Calls)
	require.GreaterOrEqual(t, time.Since(start), 180*time.Millisecond, "10 calls at 50/s take at least 9 intervals of 20 ms")
	// Each call's start is its due time: five in each 100 ms.
	require.Len(t, rep.Intervals, 2, rep.String())
	require.Equal(t, 5, rep.Intervals[0].Calls, rep.String())
	require.Equal(t, 5, rep.Intervals[1].Calls, rep.String())

	// At a rate the service cannot keep up with, latency counts from the
	// time each call was due: one slot, calls due every 10 ms, answers
	// taking 40 ms of the run's clock (the service moves it). The fifth
	// call was due at 40 ms and answered at 200 ms; measured from its own
	// start it would take 40 ms like the others.
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Payment-Signature") != "" {
			clk.Advance(40 * time.Millisecond)
		}
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(slow.Close)
	rep, err = Run(ctx, Config{BaseURL: slow.URL, Payer: &countingPayer{}, Concurrency: 1, Rate: 100, MaxCalls: 5, Requests: []Request{{Op: "diff"}}, Clock: clk})
	require.NoError(t, err)
	require.Equal(t, 5, rep.Calls)
	require.Equal(t, 160*time.Millisecond, rep.Max, rep.String())
	require.Equal(t, 40*time.Millisecond, rep.Outcomes[0].Latency, "the first call was due when it started")

	// Without a rate (closed loop) a call starts when a slot frees, and its
	// latency counts from then: one slot, 100 ms answers, every call 100 ms
	// (counted from before the wait for the slot, up to 500).
	closed := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	slower := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Payment-Signature") != "" {
			closed.Advance(100 * time.Millisecond)
		}
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(slower.Close)
	rep, err = Run(ctx, Config{BaseURL: slower.URL, Payer: &countingPayer{}, Concurrency: 1, MaxCalls: 5, Requests: []Request{{Op: "diff"}}, Clock: closed})
	require.NoError(t, err)
	require.Equal(t, 5, rep.Calls)
	for _, o := range rep.Outcomes {
		require.Equal(t, 100*time.Millisecond, o.Latency, rep.String())
	}

	// A service that does not quote is an error, and so is a distant one.
	bare := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(bare.Close)
	_, err = Run(ctx, Config{BaseURL: bare.URL, Payer: payer, Requests: []Request{{Op: "diff"}}})
	require.ErrorContains(t, err, "without a PAYMENT-REQUIRED header")
	_, err = Run(ctx, Config{BaseURL: "http://203.0.113.7", Payer: payer, Requests: []Request{{Op: "diff"}}})
	require.ErrorContains(t, err, "not a loopback address")
}
