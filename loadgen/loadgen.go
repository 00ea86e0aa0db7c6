// Package loadgen drives paid calls against a running x402d on loopback and
// reports throughput, latency percentiles and the count of every status.
//
// Each call is a real paid call: the generator fetches an operation's quote
// once (an unpaid request), asks its Payer for a PAYMENT-SIGNATURE per call,
// and sends the request with it. With Retry set, a call whose answer was
// lost (connection error, 5xx, 202) is sent again with the same header, as a
// careful client does, so that the service's replay handling is exercised.
package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/x402d/x402d/internal/clock"
)

// Request is one kind of call the generator makes.
type Request struct {
	// Op is the operation's name ("diff").
	Op string
	// Body is the JSON request body.
	Body string
}

// Payer pays calls.
type Payer interface {
	// Pay returns a PAYMENT-SIGNATURE header value for one call, given the
	// operation's PAYMENT-REQUIRED header value. Each call gets a new one.
	Pay(ctx context.Context, paymentRequired string) (string, error)
}

// Config configures a run.
type Config struct {
	// BaseURL is the service, e.g. http://127.0.0.1:8080. Loopback only.
	BaseURL string
	// Requests are the calls to make, in turn.
	Requests []Request
	// Payer pays every call. Required.
	Payer Payer
	// Concurrency is the number of calls in flight (closed loop). Defaults
	// to 16.
	Concurrency int
	// Rate, when set, starts calls at this many per second (open loop),
	// still at most Concurrency in flight. Call n is due n/Rate seconds
	// after the start, whatever happened to the calls before it: a
	// generator that falls behind (its cores busy, its slots taken) starts
	// the calls due at once to catch up, and a call's latency counts from
	// the time it was due, so that a service too slow for the rate is seen
	// to be (no coordinated omission).
	Rate float64
	// Duration bounds the run. Defaults to 10 s; at most 10 minutes.
	Duration time.Duration
	// MaxCalls, when set, stops the run after that many calls.
	MaxCalls int
	// Retry resends a call whose answer was lost with the same header,
	// until it is answered or RetryFor has passed.
	Retry bool
	// RetryFor bounds the retries of one call. Defaults to 60 s.
	RetryFor time.Duration
	// Client sends the requests. Defaults to a client with a 70 s timeout.
	Client *http.Client
	// Interval, when set, breaks the report down by the time calls started:
	// one row per Interval of the run (the first seconds after a start, a
	// stall, a recovery show apart from the steady state).
	Interval time.Duration
	// Presign has the Payer sign every call's payment before the run
	// starts (Rate × Duration of them, or MaxCalls if fewer; at most
	// MaxPresigned), rather than each call just before it is sent: the
	// generator, which shares the machine with the service it measures,
	// then does not spend the run's CPU on signing, as clients on their own
	// machines would not. Each call still carries its own payment, and the
	// run ends when they are used up.
	Presign bool
	// Clock times the calls: when each is due, and its latency. Defaults
	// to clock.Real().
	Clock clock.Clock
}

// MaxPresigned bounds the payments Config.Presign signs ahead, each held in
// memory until its call is made.
const MaxPresigned = 100_000

// Outcome is one call's end.
type Outcome struct {
	Op      string
	Header  string
	Status  int
	Err     string
	CallID  string
	Latency time.Duration
	// Offset is when the call started (was due, at a rate) after the run
	// began.
	Offset time.Duration
	Tries  int
	// Settled is whether a PAYMENT-RESPONSE with success true came back.
	Settled bool
	Tx      string
}

// Report sums a run up.
type Report struct {
	Calls      int
	Elapsed    time.Duration
	Throughput float64
	// Sustained is the rate at which calls were answered once the run was
	// under way: fitted to the answers between a quarter of the way to the
	// last call's start and that start. Throughput counts
	// the run's first answers' wait and its last calls' drain as well; at
	// a given rate the two differ by about latency over duration.
	Sustained float64
	P50, P95  time.Duration
	P99, Max  time.Duration
	Statuses  map[int]int
	Errors    int
	Outcomes  []Outcome
	// Intervals break the run down by Config.Interval, in order; empty
	// without one.
	Intervals []Interval
}

// Interval sums up the calls started in one interval of a run. Latencies
// are those of the calls answered with a status.
type Interval struct {
	Start, End time.Duration
	Calls      int
	P50, P99   time.Duration
	Max        time.Duration
}

// String renders the report for people.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "calls %d in %s: %.1f calls/s", r.Calls, r.Elapsed.Round(time.Millisecond), r.Throughput)
	if r.Sustained > 0 {
		fmt.Fprintf(&b, ", %.1f sustained", r.Sustained)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "latency p50 %s p95 %s p99 %s max %s\n", ms(r.P50), ms(r.P95), ms(r.P99), ms(r.Max))
	codes := make([]int, 0, len(r.Statuses))
	for c := range r.Statuses {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	b.WriteString("statuses")
	for _, c := range codes {
		fmt.Fprintf(&b, " %d:%d", c, r.Statuses[c])
	}
	fmt.Fprintf(&b, " errors:%d\n", r.Errors)
	for _, in := range r.Intervals {
		fmt.Fprintf(&b, "  %s-%s: %d calls, p50 %s p99 %s max %s\n", in.Start, in.End, in.Calls, ms(in.P50), ms(in.P99), ms(in.Max))
	}
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

// Run makes the calls of cfg and reports on them.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := checkLoopback(cfg.BaseURL); err != nil {
		return nil, err
	}
	if cfg.Payer == nil || len(cfg.Requests) == 0 {
		return nil, errors.New("loadgen: a Payer and at least one Request are required")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	cfg.Duration = min(cfg.Duration, 10*time.Minute)
	if cfg.RetryFor <= 0 {
		cfg.RetryFor = 60 * time.Second
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 70 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: cfg.Concurrency, MaxConnsPerHost: cfg.Concurrency,
		}}
	}
	quotes := make([]string, len(cfg.Requests))
	for i, r := range cfg.Requests {
		q, err := quote(ctx, cfg.Client, cfg.BaseURL, r)
		if err != nil {
			return nil, err
		}
		quotes[i] = q
	}

	var signed []string
	if cfg.Presign {
		var err error
		if signed, err = presign(ctx, &cfg, quotes); err != nil {
			return nil, err
		}
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var (
		mu       sync.Mutex
		outcomes []Outcome
		started  atomic.Int64
		wg       sync.WaitGroup
	)
	slots := make(chan struct{}, cfg.Concurrency)
	clk := cfg.Clock
	var wait clock.Timer
	if cfg.Rate > 0 {
		wait = clk.NewTimer(0)
		defer wait.Stop()
	}
	begin := clk.Now()
loop:
	for {
		n := int(started.Load())
		if cfg.MaxCalls > 0 && n >= cfg.MaxCalls || signed != nil && n >= len(signed) {
			break
		}
		var due time.Time
		if wait != nil {
			due = begin.Add(time.Duration(float64(n) * float64(time.Second) / cfg.Rate))
			if d := due.Sub(clk.Now()); d > 0 {
				wait.Reset(d)
				select {
				case <-wait.C():
				case <-runCtx.Done():
					break loop
				}
			}
		}
		select {
		case slots <- struct{}{}:
		case <-runCtx.Done():
			break loop
		}
		if wait == nil {
			// Closed loop: a call starts when a slot frees.
			due = clk.Now()
		}
		started.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			k := n % len(cfg.Requests)
			header := ""
			if signed != nil {
				header = signed[n]
			}
			o := call(ctx, &cfg, cfg.Requests[k], quotes[k], header, due)
			o.Offset = due.Sub(begin)
			mu.Lock()
			outcomes = append(outcomes, o)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return summarise(outcomes, clk.Now().Sub(begin), cfg.Interval), nil
}

func summarise(outcomes []Outcome, elapsed, interval time.Duration) *Report {
	r := &Report{Calls: len(outcomes), Elapsed: elapsed, Statuses: map[int]int{}, Outcomes: outcomes}
	lat := make([]time.Duration, 0, len(outcomes))
	var lats [][]time.Duration // per interval
	for _, o := range outcomes {
		k := -1
		if interval > 0 {
			k = int(o.Offset / interval)
			for len(r.Intervals) <= k {
				n := time.Duration(len(r.Intervals))
				r.Intervals = append(r.Intervals, Interval{Start: n * interval, End: (n + 1) * interval})
				lats = append(lats, nil)
			}
			r.Intervals[k].Calls++
		}
		if o.Err != "" && o.Status == 0 {
			r.Errors++
			continue
		}
		r.Statuses[o.Status]++
		lat = append(lat, o.Latency)
		if k >= 0 {
			lats[k] = append(lats[k], o.Latency)
		}
	}
	if elapsed > 0 {
		r.Throughput = float64(len(outcomes)) / elapsed.Seconds()
	}
	r.Sustained = sustained(outcomes)
	r.P50, r.P95, r.P99, r.Max = percentiles(lat)
	for k := range r.Intervals {
		in := &r.Intervals[k]
		in.P50, _, in.P99, in.Max = percentiles(lats[k])
	}
	return r
}

// sustained returns the rate at which calls were answered over the loaded
// part of a run, from a quarter of the way to the last call's start (the
// first answers have come) to that start (the drain begins): the slope of
// the count of answers against their time, fitted by least squares. A
// count over the window alone would be off by the answers of a whole block
// when a chain's blocks release them in bursts; the fit is not.
func sustained(outcomes []Outcome) float64 {
	var last time.Duration
	for _, o := range outcomes {
		last = max(last, o.Offset)
	}
	from := last / 4
	var ends []time.Duration
	for _, o := range outcomes {
		if o.Status == 0 {
			continue
		}
		if end := o.Offset + o.Latency; end >= from && end < last {
			ends = append(ends, end)
		}
	}
	if len(ends) < 2 {
		return 0
	}
	slices.Sort(ends)
	var st float64
	for _, e := range ends {
		st += e.Seconds()
	}
	// The counts are 0 to n-1: their mean is (n-1)/2.
	n := float64(len(ends))
	mt, mn := st/n, (n-1)/2
	var cov, v float64
	for i, e := range ends {
		dt := e.Seconds() - mt
		cov += dt * (float64(i) - mn)
		v += dt * dt
	}
	if v == 0 {
		return 0
	}
	return cov / v
}

// percentiles sorts lat and returns its 50th, 95th and 99th percentiles
// and its maximum (zero when it is empty).
func percentiles(lat []time.Duration) (p50, p95, p99, maximum time.Duration) {
	if len(lat) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(lat)
	at := func(p int) time.Duration { return lat[min(len(lat)-1, len(lat)*p/100)] }
	return at(50), at(95), at(99), lat[len(lat)-1]
}

// presign has cfg.Payer sign the payments of the calls cfg will make, in
// their order (call n pays quotes[n % len(quotes)]), on as many goroutines
// as there are cores.
func presign(ctx context.Context, cfg *Config, quotes []string) ([]string, error) {
	n := cfg.MaxCalls
	if cfg.Rate > 0 {
		if due := int(math.Ceil(cfg.Rate * cfg.Duration.Seconds())); n == 0 || due < n {
			n = due
		}
	}
	if n <= 0 || n > MaxPresigned {
		return nil, fmt.Errorf("loadgen: presigning needs a rate or a number of calls, and at most %d calls (%d asked)", MaxPresigned, n)
	}
	signed := make([]string, n)
	var next atomic.Int64
	errs := make([]error, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				h, err := cfg.Payer.Pay(ctx, quotes[i%len(quotes)])
				if err != nil {
					errs[w] = fmt.Errorf("loadgen: presign call %d: %w", i, err)
					return
				}
				signed[i] = h
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return signed, nil
}

// call pays (unless header was signed ahead) and makes one call, retrying a
// lost answer with the same header when cfg.Retry is set. Its latency
// counts from start, the time it was due.
func call(ctx context.Context, cfg *Config, req Request, paymentRequired, header string, start time.Time) (o Outcome) {
	o.Op = req.Op
	defer func() { o.Latency = cfg.Clock.Now().Sub(start) }()
	if header == "" {
		var err error
		if header, err = cfg.Payer.Pay(ctx, paymentRequired); err != nil {
			o.Err = "pay: " + err.Error()
			return o
		}
	}
	o.Header = header
	deadline := start.Add(cfg.RetryFor)
	for {
		o.Tries++
		o.Status, o.Err = 0, ""
		resp, err := send(ctx, cfg.Client, cfg.BaseURL+"/api/x402/"+req.Op, header, req.Body)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			o.Status = resp.StatusCode
			if rerr != nil {
				o.Err = rerr.Error()
			} else {
				o.CallID = callID(body)
				o.Settled, o.Tx = settled(resp.Header.Get("Payment-Response"))
			}
		} else {
			o.Err = err.Error()
		}
		lost := o.Status == 0 || o.Status >= 500 || o.Status == http.StatusAccepted
		if !cfg.Retry || !lost || cfg.Clock.Now().After(deadline) || ctx.Err() != nil {
			return o
		}
		if clock.Sleep(ctx, cfg.Clock, 100*time.Millisecond) != nil {
			return o
		}
	}
}

func send(ctx context.Context, client *http.Client, target, header, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if header != "" {
		req.Header.Set("Payment-Signature", header)
	}
	return client.Do(req)
}

// quote fetches the PAYMENT-REQUIRED header of r's operation.
func quote(ctx context.Context, client *http.Client, base string, r Request) (string, error) {
	resp, err := send(ctx, client, base+"/api/x402/"+r.Op, "", r.Body)
	if err != nil {
		return "", fmt.Errorf("quote %s: %w", r.Op, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	q := resp.Header.Get("Payment-Required")
	if resp.StatusCode != http.StatusPaymentRequired || q == "" {
		return "", fmt.Errorf("quote %s: status %d without a PAYMENT-REQUIRED header", r.Op, resp.StatusCode)
	}
	return q, nil
}

func checkLoopback(base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("loadgen: base URL: %w", err)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("loadgen: %s is not a loopback address: the generator only loads this machine", host)
	}
	return nil
}

// callID reads the call id of a result or 202 body.
func callID(body []byte) string {
	var v struct {
		CallID string `json:"call_id"`
	}
	_ = json.Unmarshal(body, &v)
	return v.CallID
}
