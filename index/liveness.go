package index

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/fetch"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
)

// ProberConfig configures a Prober.
type ProberConfig struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Fetch is the guarded client: listed URLs are not trusted. Required.
	Fetch *fetch.Client
	// Concurrency bounds the probes in flight. Defaults to 150: 1,500
	// hosts of which a tenth time out are probed in about 11 s.
	Concurrency int
	// Timeout bounds one probe. Defaults to 10 s.
	Timeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics counts probes by outcome. Nil counts nothing.
	Metrics *metrics.Metrics
}

// Prober measures the liveness of indexed hosts: an unpaid request to the
// host's sample resource in its declared method (never HEAD; a JSON {} body
// for POST, PUT and PATCH); live means a 402 carrying a valid x402 quote.
type Prober struct {
	cfg ProberConfig
}

// NewProber returns a Prober for cfg.
func NewProber(cfg ProberConfig) *Prober {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 150
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Prober{cfg: cfg}
}

// ProbeReport sums a run up.
type ProbeReport struct {
	Probed, Live, Dead, Later int
}

// ProbeAll probes every host with services, at most Concurrency at once,
// and records each measurement as a host.probed event.
func (p *Prober) ProbeAll(ctx context.Context) (*ProbeReport, error) {
	rows, err := p.cfg.Pool.Query(ctx, "SELECT host, sample_resource, sample_method FROM index_hosts WHERE services > 0 ORDER BY checked_at NULLS FIRST, host")
	if err != nil {
		return nil, fmt.Errorf("index: hosts to probe: %w", err)
	}
	type target struct{ host, url, method string }
	var targets []target
	for rows.Next() {
		var t target
		if err := rows.Scan(&t.host, &t.url, &t.method); err != nil {
			rows.Close()
			return nil, err
		}
		targets = append(targets, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	rep := &ProbeReport{}
	var mu sync.Mutex
	var errs []error
	slots := make(chan struct{}, p.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, t := range targets {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return rep, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			began := time.Now()
			m := p.Probe(ctx, t.url, t.method)
			if ctx.Err() != nil {
				return
			}
			p.cfg.Metrics.LivenessProbe(outcome(m), time.Since(began))
			err := pgx.BeginFunc(ctx, p.cfg.Pool, func(tx pgx.Tx) error {
				return store.Append(ctx, tx, store.NewEvent{Stream: store.HostStream(t.host), Type: store.EventHostProbed, Data: m})
			})
			mu.Lock()
			defer mu.Unlock()
			rep.Probed++
			switch {
			case err != nil:
				errs = append(errs, err)
			case m.Status != nil && *m.Status == http.StatusTooManyRequests:
				rep.Later++
			case m.Live != nil && *m.Live:
				rep.Live++
			default:
				rep.Dead++
			}
		}()
	}
	wg.Wait()
	return rep, errors.Join(errs...)
}

// outcome names a measurement for metrics: live, dead or later (429).
func outcome(m store.HostProbed) string {
	switch {
	case m.Status != nil && *m.Status == http.StatusTooManyRequests:
		return "later"
	case m.Live != nil && *m.Live:
		return "live"
	}
	return "dead"
}

// Probe measures one resource.
func (p *Prober) Probe(ctx context.Context, rawURL, method string) store.HostProbed {
	m := store.HostProbed{CheckedAt: time.Now().UTC()}
	live := false
	m.Live = &live
	method = strings.ToUpper(method)
	if method == "" || method == http.MethodHead {
		method = http.MethodGet
	}
	var body io.Reader
	if method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		body = strings.NewReader("{}")
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	if err != nil {
		m.Error = "bad url: " + err.Error()
		return m
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	start := time.Now()
	resp, err := p.cfg.Fetch.Do(ctx, req)
	if err != nil {
		switch {
		case errors.Is(err, fetch.ErrRefused):
			m.Error = "refused"
		case ctx.Err() != nil:
			m.Error = "timeout"
		default:
			m.Error = "unreachable: " + err.Error()
		}
		return m
	}
	latency := int(time.Since(start).Milliseconds())
	m.Status, m.LatencyMS = &resp.StatusCode, &latency
	if resp.StatusCode == http.StatusPaymentRequired {
		live = validQuote(resp.Header, resp.Body)
		if !live {
			m.Error = "402 without a valid x402 quote"
		}
	}
	return m
}

// validQuote reports whether a 402 carries an x402 quote: a v2
// PAYMENT-REQUIRED header, or a v1 JSON body, with at least one payment
// option naming a network, an amount and a receiver.
func validQuote(h http.Header, body []byte) bool {
	type accept struct {
		Scheme            string `json:"scheme"`
		Network           string `json:"network"`
		Amount            any    `json:"amount"`
		MaxAmountRequired any    `json:"maxAmountRequired"`
		PayTo             string `json:"payTo"`
	}
	var doc struct {
		X402Version int      `json:"x402Version"`
		Accepts     []accept `json:"accepts"`
	}
	ok := func() bool {
		if doc.X402Version < 1 || len(doc.Accepts) == 0 {
			return false
		}
		for _, a := range doc.Accepts {
			if a.Scheme != "" && a.Network != "" && a.PayTo != "" && (a.Amount != nil || a.MaxAmountRequired != nil) {
				return true
			}
		}
		return false
	}
	if v := h.Get("Payment-Required"); v != "" {
		if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v)); err == nil && json.Unmarshal(raw, &doc) == nil && ok() {
			return true
		}
	}
	doc.X402Version, doc.Accepts = 0, nil
	return json.Unmarshal(body, &doc) == nil && ok()
}
