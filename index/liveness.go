package index

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"slices"
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
	// Origins reads again, at once, the listing of a resource that only its
	// origin lists when its 402 differs from it (Discoverer.Listing). Nil:
	// such a 402 waits for the origin's next read, as one a whole listing
	// lists waits for the next pass.
	Origins *Discoverer
}

// Prober measures the liveness of indexed hosts: an unpaid request to the
// host's sample resource in its declared method (never HEAD; a JSON {} body
// for POST, PUT and PATCH); live means a 402 carrying a valid x402 quote.
type Prober struct {
	cfg ProberConfig
}

// NewProber returns a Prober for config, of which it keeps a copy.
func NewProber(config *ProberConfig) *Prober {
	cfg := *config
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
	targets, err := store.ProbeTargetList(ctx, p.cfg.Pool)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}

	rep := &ProbeReport{}
	var mu sync.Mutex
	var errs []error
	if err := eachBounded(ctx, p.cfg.Concurrency, targets, func(t store.ProbeTarget) {
		began := time.Now()
		m := p.Probe(ctx, t.URL, t.Method, t.Accepts)
		if ctx.Err() != nil {
			return
		}
		p.cfg.Metrics.LivenessProbe(outcome(m), time.Since(began))
		read, err := p.listingNow(ctx, t, m.QuoteAccepts)
		if err != nil {
			// Not read: the 402 waits for the origin's next read.
			p.cfg.Logger.InfoContext(ctx, "index: listing not read again", "resource", t.URL, "error", err)
		}
		err = pgx.BeginFunc(ctx, p.cfg.Pool, func(tx pgx.Tx) error {
			// Compared with the listing as it stands when the verdict is
			// written, not as it stood when the run began: a crawl that
			// read a new listing meanwhile compared it with the 402
			// before this one.
			if err := store.QuoteLock(ctx, tx, []string{t.Host}); err != nil {
				return err
			}
			listing, last, pending, err := store.ProbeQuoteState(ctx, tx, t.Host, t.URL)
			if err != nil {
				return err
			}
			if read != nil {
				// Read after the 402: compared, never waiting.
				listing, pending = read.accepts, false
			}
			probeVerdict(&m, t.URL, listing, last, pending, read != nil)
			return store.Append(ctx, tx, store.NewEvent{Stream: store.HostStream(t.Host), Type: store.EventHostProbed, Data: m})
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
	}); err != nil {
		return rep, err
	}
	return rep, errors.Join(errs...)
}

// listingRead is a resource's listing read again after its 402: the
// options it lists, none when it is no longer listed.
type listingRead struct {
	accepts []store.Accept
}

// listingNow reads again the listing of t's resource, once its 402 asked
// quote, when the two differ and a targeted read of it is possible: only
// its origin lists it (store.ResourceOriginListed), read by Origins. Nil
// when not read: the comparison goes on with the listing as last read.
func (p *Prober) listingNow(ctx context.Context, t store.ProbeTarget, quote []store.Accept) (*listingRead, error) {
	if p.cfg.Origins == nil || len(quote) == 0 {
		return nil, nil
	}
	if matches, _ := compareQuote(t.URL, t.Accepts, quote); matches == nil || *matches {
		return nil, nil
	}
	only, err := store.ResourceOriginListed(ctx, p.cfg.Pool, t.URL)
	if err != nil || !only {
		return nil, err
	}
	// Bounded as a probe is.
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	accepts, listed, err := p.cfg.Origins.Listing(ctx, t.URL, quote)
	if err != nil {
		return nil, err
	}
	if !listed {
		return &listingRead{}, nil
	}
	return &listingRead{accepts: accepts}, nil
}

// eachBounded calls fn for each item, at most n at a time, and waits for
// the calls it started. Once ctx is done it starts no more and returns
// ctx.Err().
func eachBounded[T any](ctx context.Context, n int, items []T, fn func(T)) error {
	slots := make(chan struct{}, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, item := range items {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-slots }()
			fn(item)
		})
	}
	return nil
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

// Probe measures one resource, and compares the quote of its 402 with the
// options its listing asks (listing; none: not compared).
func (p *Prober) Probe(ctx context.Context, rawURL, method string, listing []store.Accept) store.HostProbed {
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
		var quote []store.Accept
		quote, live = quoteOf(resp.Header, resp.Body)
		if !live {
			m.Error = "402 without a valid x402 quote"
		}
		m.QuoteMatchesListing, m.QuoteDifferences = compareQuote(rawURL, listing, quote)
		m.QuoteAccepts = quote
	}
	return m
}

// quoteOf reads the x402 quote of a 402: a v2 PAYMENT-REQUIRED header, or
// a v1 JSON body. valid is set when at least one payment option names a
// scheme, a network, an amount and a receiver; accepts are its options on
// the networks the index knows.
func quoteOf(h http.Header, body []byte) (accepts []store.Accept, valid bool) {
	var doc struct {
		X402Version int         `json:"x402Version"`
		Accepts     []rawAccept `json:"accepts"`
	}
	read := func() bool {
		if doc.X402Version < 1 || len(doc.Accepts) == 0 {
			return false
		}
		for _, a := range doc.Accepts {
			if a.Scheme != "" && a.Network != "" && a.PayTo != "" && (present(a.Amount) || present(a.MaxAmountRequired)) {
				valid = true
			}
			if acc, ok := a.accept(); ok {
				accepts = append(accepts, acc)
			}
		}
		return valid
	}
	if v := h.Get("Payment-Required"); v != "" {
		if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v)); err == nil && json.Unmarshal(raw, &doc) == nil && read() {
			return accepts, true
		}
	}
	doc.X402Version, doc.Accepts, accepts = 0, nil, nil
	if json.Unmarshal(body, &doc) == nil && read() {
		return accepts, true
	}
	return nil, false
}

// present reports whether a JSON value is there and not null.
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// compareQuote compares the options a listing asks with those its
// resource's 402 asks: each listed option must be offered on its network
// and asset, for the same amount, to the same receiver. It returns nil
// when there is nothing to compare (no listed option, or no quote).
func compareQuote(resource string, listing, quote []store.Accept) (*bool, []store.QuoteDifference) {
	if len(listing) == 0 || len(quote) == 0 {
		return nil, nil
	}
	var diffs []store.QuoteDifference
	for _, l := range listing {
		var best []store.QuoteDifference
		found := false
		for _, q := range quote {
			if q.Network != l.Network || !strings.EqualFold(q.Asset, l.Asset) {
				continue
			}
			var d []store.QuoteDifference
			if !sameAmount(q.Amount, l.Amount) {
				d = append(d, store.QuoteDifference{Resource: resource, Network: l.Network, Asset: l.Asset, Field: "amount", Listing: l.Amount, Quote: q.Amount})
			}
			if !sameReceiver(q.PayTo, l.PayTo) {
				d = append(d, store.QuoteDifference{Resource: resource, Network: l.Network, Asset: l.Asset, Field: "pay_to", Listing: l.PayTo, Quote: q.PayTo})
			}
			if !found || len(d) < len(best) {
				best, found = d, true
			}
		}
		if !found {
			best = []store.QuoteDifference{{Resource: resource, Network: l.Network, Asset: l.Asset, Field: "network", Listing: l.Network, Quote: ""}}
		}
		diffs = append(diffs, best...)
	}
	matches := len(diffs) == 0
	return &matches, diffs
}

// probeVerdict compares the 402 of m (a probe of resource) with listing,
// the options its listing asks as last read (fresh: read again after the
// 402; none: no longer listed, not compared). A 402 that differs from a
// listing not read fresh and moved since the last one (last), or whose
// comparison was already pending, is not compared: the seller may have
// moved its listing too, which the crawl has not read yet; m is marked
// pending, and the crawl compares the two when it next reads the listing,
// changed or not (Crawler.changes), or ends a pass no longer listing it
// (not compared). So a seller moving both is never shown asking other than
// it lists, and one that moved only its 402 is shown so once its listing is
// read again: at once when its origin alone lists it (Prober.listingNow),
// else within the next pass of the listings that list it.
func probeVerdict(m *store.HostProbed, resource string, listing, last []store.Accept, pending, fresh bool) {
	if len(m.QuoteAccepts) == 0 {
		return
	}
	m.QuoteMatchesListing, m.QuoteDifferences = compareQuote(resource, listing, m.QuoteAccepts)
	m.QuotePending = false
	if fresh {
		return
	}
	if m.QuoteMatchesListing != nil && !*m.QuoteMatchesListing && (pending || len(last) > 0 && !slices.EqualFunc(last, m.QuoteAccepts, store.Accept.Equal)) {
		m.QuoteMatchesListing, m.QuoteDifferences, m.QuotePending = nil, nil, true
	}
}

// sameAmount compares atomic amounts as integers ("010" is 10).
func sameAmount(a, b string) bool {
	x, ok1 := new(big.Int).SetString(a, 10)
	y, ok2 := new(big.Int).SetString(b, 10)
	if ok1 && ok2 {
		return x.Cmp(y) == 0
	}
	return a == b
}

// sameReceiver compares addresses: EVM hex case-insensitively, others
// (base58) exactly.
func sameReceiver(a, b string) bool {
	if strings.HasPrefix(a, "0x") && strings.HasPrefix(b, "0x") {
		return strings.EqualFold(a, b)
	}
	return a == b
}
