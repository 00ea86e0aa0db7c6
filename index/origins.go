package index

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/fetch"
	"github.com/x402d/x402d/store"
)

// TXTResolver looks up DNS TXT records. *net.Resolver implements it.
type TXTResolver interface {
	LookupTXT(ctx context.Context, name string) ([]string, error)
}

// DiscovererConfig configures a Discoverer.
type DiscovererConfig struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Fetch is the guarded client: origins and what they declare are not
	// trusted. Required.
	Fetch *fetch.Client
	// TXT looks up the _x402 records. Defaults to net.DefaultResolver.
	TXT TXTResolver
	// Origins are read besides those of the listed resources
	// (INDEX_ORIGINS): scheme://host[:port].
	Origins []string
	// PerRun is how many origins one periodic run reads, those read
	// longest ago first. Defaults to 50.
	PerRun int
	// Concurrency bounds the origins read at once; one origin's requests
	// are one at a time. Defaults to 4.
	Concurrency int
	// MaxResources caps the resources read from one origin. Defaults to
	// 100.
	MaxResources int
	// Gap is the polite pause between two requests to one origin.
	// Defaults to DefaultPageGap; negative means none (tests).
	Gap time.Duration
	// Backoff is the pause after an origin that failed (a 5xx, a 429, a
	// network error). Defaults to 6 hours; a longer Retry-After is
	// honoured.
	Backoff time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Discoverer finds resources from their sellers' own origins, in x402scan's
// order: an OpenAPI document (/openapi.json, then
// /.well-known/openapi.json) whose operations carry x-payment-info, else
// /.well-known/x402 ({"resources": [URL...]}), else the DNS TXT record
// _x402.<host> ("v=x4021;url=<URL of such a document>"). Each resource found
// on the origin's host is asked once without payment; one answering a 402
// with a valid quote is indexed from the quote (its USDC options at the
// fixed price its OpenAPI operation lists, if it lists one), with the source
// "origin:<origin>". A read is one pass of that source: a resource its origin
// no longer declares is retired unless a listing lists it, and what a
// listing says of a resource stands over what its origin's quote says.
type Discoverer struct {
	cfg     DiscovererConfig
	crawler *Crawler
}

// NewDiscoverer returns a Discoverer for config, of which it keeps a copy.
func NewDiscoverer(config *DiscovererConfig) *Discoverer {
	cfg := *config
	if cfg.TXT == nil {
		cfg.TXT = net.DefaultResolver
	}
	if cfg.PerRun <= 0 {
		cfg.PerRun = 50
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.MaxResources <= 0 {
		cfg.MaxResources = 100
	}
	if cfg.Gap == 0 {
		cfg.Gap = DefaultPageGap
	}
	var origins []string
	for _, o := range cfg.Origins {
		if n, ok := originOf(o); ok && !slices.Contains(origins, n) {
			origins = append(origins, n)
		}
	}
	cfg.Origins = origins
	if cfg.Backoff <= 0 {
		cfg.Backoff = 6 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Discoverer{cfg: cfg, crawler: NewCrawler(&CrawlerConfig{Pool: cfg.Pool, Logger: cfg.Logger, Backoff: cfg.Backoff, MaxBackoff: cfg.Backoff})}
}

// OriginSource is the source name of what an origin declares.
func OriginSource(origin string) string { return "origin:" + origin }

// ParseOrigins reads INDEX_ORIGINS: comma-separated http(s) origins (a path
// is dropped), normalised as resource URLs are.
func ParseOrigins(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		o, ok := originOf(f)
		if !ok {
			return nil, fmt.Errorf("INDEX_ORIGINS: %q is not an http(s) origin", f)
		}
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out, nil
}

// originOf returns scheme://host[:port] of a URL, normalised.
func originOf(raw string) (string, bool) {
	n, _, ok := NormaliseURL(raw)
	if !ok {
		return "", false
	}
	u, err := url.Parse(n)
	if err != nil {
		return "", false
	}
	return u.Scheme + "://" + u.Host, true
}

// DiscoverReport sums a run up.
type DiscoverReport struct {
	// Origins is how many origins were read; Found how many of them
	// declared resources, by way (openapi, well-known, dns).
	Origins int
	Found   map[string]int
	// Indexed is how many resources answered a valid quote.
	Indexed int
}

// Run reads up to PerRun origins: INDEX_ORIGINS and those of the listed
// resources, read longest ago first; an origin backing off is left.
func (d *Discoverer) Run(ctx context.Context) (*DiscoverReport, error) {
	origins, err := store.OriginListToRead(ctx, d.cfg.Pool, d.cfg.Origins, d.cfg.PerRun)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}

	rep := &DiscoverReport{Found: map[string]int{}}
	var mu sync.Mutex
	var errs []error
	if err := eachBounded(ctx, d.cfg.Concurrency, origins, func(o string) {
		via, indexed, err := d.Origin(ctx, o)
		mu.Lock()
		defer mu.Unlock()
		rep.Origins++
		if err != nil && ctx.Err() == nil && !errors.Is(err, store.ErrConflict) {
			d.cfg.Logger.WarnContext(ctx, "index: origin not read", "origin", o, "error", err)
			var oe *originError
			if !errors.As(err, &oe) {
				errs = append(errs, err)
			}
		}
		if via != "" {
			rep.Found[via]++
		}
		rep.Indexed += indexed
	}); err != nil {
		return rep, err
	}
	return rep, errors.Join(errs...)
}

// originError is an origin that could not be read (it backs off).
type originError struct {
	status     int
	retryAfter time.Duration
	err        error
}

func (e *originError) Error() string { return e.err.Error() }
func (e *originError) Unwrap() error { return e.err }

// declared is a resource an origin declares, with its method when known
// and the price its discovery document lists (USDC as decimal text, from
// an OpenAPI operation's fixed x-payment-info price; empty when it lists
// none).
type declared struct {
	url, method, price string
}

// Origin reads one origin now: it finds what the origin declares, asks each
// resource for its quote, and records the pass. via says where the
// resources were found ("openapi", "well-known", "dns"; empty: nowhere).
func (d *Discoverer) Origin(ctx context.Context, origin string) (via string, indexed int, err error) {
	src := OriginSource(origin)
	st, err := d.crawler.state(ctx, src)
	if err != nil {
		return "", 0, err
	}
	if st.BackoffUntil != nil && time.Now().Before(*st.BackoffUntil) {
		return "", 0, &BackoffError{Source: src, Until: *st.BackoffUntil}
	}
	p := &politeClient{fetch: d.cfg.Fetch, gap: d.cfg.Gap}
	found, via, proofs, err := d.find(ctx, p, origin)
	if err != nil {
		if ctx.Err() != nil {
			return "", 0, ctx.Err()
		}
		var oe *originError
		status, retryAfter := 0, time.Duration(0)
		if errors.As(err, &oe) {
			status, retryAfter = oe.status, oe.retryAfter
		}
		ferr := d.crawler.append(ctx, store.NewEvent{Stream: store.CrawlStream(src), Type: store.EventCrawlFailed, Data: store.CrawlFailed{
			Source: src, Status: status, Error: err.Error(), BackoffUntil: time.Now().Add(max(d.cfg.Backoff, retryAfter)).UTC(),
		}})
		return "", 0, errors.Join(err, ferr)
	}
	page := &Page{Total: -1, Limit: -1}
	for _, r := range found {
		if res, ok := d.quote(ctx, p, r); ok {
			page.Items = append(page.Items, res.listedAt(r.price))
		}
		if ctx.Err() != nil {
			return via, 0, ctx.Err()
		}
	}
	page.Count = len(page.Items)
	page.Total = st.Cursor + page.Count
	if _, err := d.crawler.record(ctx, src, st, page); err != nil {
		return via, 0, err
	}
	if err := d.ownership(ctx, origin, via, proofs, page); err != nil {
		return via, len(page.Items), err
	}
	return via, len(page.Items), nil
}

// ownership checks the ownership proofs origin served against the
// receivers of the resources it declared, and records the receivers
// proved when they differ from those recorded.
func (d *Discoverer) ownership(ctx context.Context, origin, via string, proofs []string, page *Page) error {
	var payTos []string
	for _, r := range page.Items {
		for _, a := range r.Accepts {
			payTos = append(payTos, a.PayTo)
		}
	}
	verified := verifiedReceivers(origin, proofs, payTos)
	recorded, err := store.OriginOwnershipList(ctx, d.cfg.Pool, origin)
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	if slices.Equal(recorded, verified) {
		return nil
	}
	host := hostOf(origin)
	return d.crawler.append(ctx, store.NewEvent{Stream: store.HostStream(host), Type: store.EventOwnershipChecked,
		Data: store.OwnershipChecked{Origin: origin, Verified: verified, Via: via, CheckedAt: time.Now().UTC()}})
}

// politeClient makes one origin's requests one at a time, a gap apart.
type politeClient struct {
	fetch *fetch.Client
	gap   time.Duration
	last  time.Time
}

func (p *politeClient) do(ctx context.Context, req *http.Request) (*fetch.Response, error) {
	if !p.last.IsZero() && !sleep(ctx, time.Until(p.last.Add(p.gap))) {
		return nil, ctx.Err()
	}
	defer func() { p.last = time.Now() }()
	req.Header.Set("User-Agent", "x402d-index/1 (+https://github.com/x402d/x402d)")
	return p.fetch.Do(ctx, req)
}

// getDoc reads a JSON document. absent is set when the origin answered that
// it has none (a 4xx other than 429, or a body that is not JSON); an error
// is returned for what waiting may cure.
func (p *politeClient) getDoc(ctx context.Context, rawURL string, v any) (absent bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return true, nil
	}
	req.Header.Set("Accept", "application/json")
	resp, err := p.do(ctx, req)
	if err != nil {
		var dnsErr *net.DNSError
		if errors.Is(err, fetch.ErrRefused) || (errors.As(err, &dnsErr) && dnsErr.IsNotFound) {
			return true, nil
		}
		return false, &originError{err: fmt.Errorf("%s: %w", rawURL, err)}
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return false, &originError{status: resp.StatusCode, retryAfter: retryWait(resp.Header),
			err: fmt.Errorf("%s: status %d", rawURL, resp.StatusCode)}
	case resp.StatusCode != http.StatusOK:
		return true, nil
	}
	return json.Unmarshal(resp.Body, v) != nil, nil
}

// find returns what origin declares, where it was found, and the ownership
// proofs its document carries.
func (d *Discoverer) find(ctx context.Context, p *politeClient, origin string) ([]declared, string, []string, error) {
	host := hostOf(origin)
	keep := func(raw, method, price string, out []declared) []declared {
		n, h, ok := NormaliseURL(raw)
		if !ok || h != host || len(out) >= d.cfg.MaxResources || slices.ContainsFunc(out, func(x declared) bool { return x.url == n }) {
			return out
		}
		return append(out, declared{url: n, method: method, price: price})
	}

	for _, path := range []string{"/openapi.json", "/.well-known/openapi.json"} {
		var doc openAPIDoc
		absent, err := p.getDoc(ctx, origin+path, &doc)
		if err != nil {
			return nil, "", nil, err
		}
		if absent || doc.OpenAPI == "" || doc.Paths == nil {
			continue
		}
		base := origin
		if len(doc.Servers) > 0 {
			if u, err := url.Parse(doc.Servers[0].URL); err == nil {
				if u.IsAbs() {
					base = strings.TrimRight(u.String(), "/")
				} else {
					base = origin + strings.TrimRight(u.Path, "/")
				}
			}
		}
		var out []declared
		for _, path := range sortedKeys(doc.Paths) {
			for _, method := range []string{"get", "post", "put", "patch", "delete"} {
				op, ok := doc.Paths[path][method]
				if !ok || !paidOperation(op) {
					continue
				}
				out = keep(base+path, strings.ToUpper(method), listedPrice(op), out)
			}
		}
		if len(out) > 0 {
			return out, "openapi", doc.XDiscovery.OwnershipProofs, nil
		}
	}

	var wk wellKnownX402
	absent, err := p.getDoc(ctx, origin+"/.well-known/x402", &wk)
	if err != nil {
		return nil, "", nil, err
	}
	if !absent {
		var out []declared
		for _, r := range wk.Resources {
			out = keep(r, "", "", out)
		}
		if len(out) > 0 {
			return out, "well-known", wk.OwnershipProofs, nil
		}
	}

	records, err := d.cfg.TXT.LookupTXT(ctx, "_x402."+host)
	var dnsErr *net.DNSError
	if err != nil && !(errors.As(err, &dnsErr) && dnsErr.IsNotFound) {
		return nil, "", nil, &originError{err: fmt.Errorf("_x402.%s: %w", host, err)}
	}
	for _, rec := range records {
		u, ok := x402Record(rec)
		if !ok {
			continue
		}
		var doc wellKnownX402
		absent, err := p.getDoc(ctx, u, &doc)
		if err != nil {
			return nil, "", nil, err
		}
		if absent {
			continue
		}
		var out []declared
		for _, r := range doc.Resources {
			out = keep(r, "", "", out)
		}
		if len(out) > 0 {
			return out, "dns", doc.OwnershipProofs, nil
		}
	}
	return nil, "", nil, nil
}

// hostOf returns the host name of an origin.
func hostOf(origin string) string {
	u, err := url.Parse(origin)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

// x402Record reads a _x402 TXT record, "v=x4021;url=https://...", and
// returns its URL.
func x402Record(rec string) (string, bool) {
	version, u := "", ""
	for f := range strings.SplitSeq(rec, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "v":
			version = strings.TrimSpace(v)
		case "url":
			u = strings.TrimSpace(v)
		}
	}
	if version != "x4021" || u == "" {
		return "", false
	}
	return u, true
}

// openAPIDoc is what discovery reads of an OpenAPI document.
type openAPIDoc struct {
	OpenAPI string `json:"openapi"`
	Servers []struct {
		URL string `json:"url"`
	} `json:"servers"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	XDiscovery struct {
		OwnershipProofs []string `json:"ownershipProofs"`
	} `json:"x-discovery"`
}

// paidOperation reports whether an OpenAPI operation declares
// x-payment-info naming x402 (protocols ["x402"] or [{"x402": {}}]), or no
// protocol at all.
func paidOperation(raw json.RawMessage) bool {
	var op struct {
		Info *struct {
			Protocols []json.RawMessage `json:"protocols"`
		} `json:"x-payment-info"`
	}
	if json.Unmarshal(raw, &op) != nil || op.Info == nil {
		return false
	}
	if len(op.Info.Protocols) == 0 {
		return true
	}
	for _, p := range op.Info.Protocols {
		var name string
		var obj map[string]json.RawMessage
		if json.Unmarshal(p, &name) == nil && strings.EqualFold(name, "x402") {
			return true
		}
		if json.Unmarshal(p, &obj) == nil {
			if _, ok := obj["x402"]; ok {
				return true
			}
		}
	}
	return false
}

// listedPrice returns the price an OpenAPI operation's x-payment-info
// lists, as USDC decimal text: a fixed price in USD (or USDC), given as
// {"price": {"mode": "fixed", "currency": "USD", "amount": "0.01"}} or as
// {"pricingMode": "fixed", "price": "0.01"}; empty for a range, another
// currency, or none.
func listedPrice(raw json.RawMessage) string {
	var op struct {
		Info *struct {
			PricingMode string          `json:"pricingMode"`
			Price       json.RawMessage `json:"price"`
		} `json:"x-payment-info"`
	}
	if json.Unmarshal(raw, &op) != nil || op.Info == nil {
		return ""
	}
	var price struct {
		Mode     string `json:"mode"`
		Currency string `json:"currency"`
		Amount   string `json:"amount"`
	}
	if json.Unmarshal(op.Info.Price, &price.Amount) != nil && json.Unmarshal(op.Info.Price, &price) != nil {
		return ""
	}
	mode := cmp.Or(price.Mode, op.Info.PricingMode, "fixed")
	amount := strings.TrimPrefix(strings.TrimSpace(price.Amount), "$")
	if !strings.EqualFold(mode, "fixed") || !usdcAmount.MatchString(amount) {
		return ""
	}
	if c := strings.ToUpper(price.Currency); c != "" && c != "USD" && c != "USDC" {
		return ""
	}
	return amount
}

// listedAt returns r as its origin lists it at price (USDC as decimal
// text, listedPrice): its USDC options asking that amount, the others as
// its 402 asks; r itself when price is empty (the origin lists no price
// but its 402's).
func (r Resource) listedAt(price string) Resource {
	atomic, ok := usdcAtomic(price)
	if !ok {
		return r
	}
	r.Accepts = slices.Clone(r.Accepts)
	var lowest *big.Rat
	for i, a := range r.Accepts {
		if usdcAsset(a.Network, a.Asset) {
			r.Accepts[i].Amount = atomic
		}
		if p, ok := priceUSDC(a.Network, a.Asset, r.Accepts[i].Amount); ok && (lowest == nil || p.Cmp(lowest) < 0) {
			lowest = p
		}
	}
	if lowest != nil {
		r.PriceUSDC = lowest.FloatString(6)
	}
	return r
}

// usdcAtomic returns a decimal amount of USDC (usdcAmount) in atomic
// units.
func usdcAtomic(amount string) (string, bool) {
	if !usdcAmount.MatchString(amount) {
		return "", false
	}
	v, ok := new(big.Rat).SetString(amount)
	if !ok {
		return "", false
	}
	return new(big.Int).Quo(new(big.Int).Mul(v.Num(), big.NewInt(1_000_000)), v.Denom()).String(), true
}

// Listing reads again, at once, what resource's origin lists of it, to
// compare with quote, the options its 402 just asked (Prober): whether
// its discovery document still declares it (listed), and the options it
// lists: its 402's, each USDC option at the price the document lists when
// it lists one. The document is read through the guarded client, as a
// run reads it, without the gap between two requests of a run.
func (d *Discoverer) Listing(ctx context.Context, resource string, quote []store.Accept) (accepts []store.Accept, listed bool, err error) {
	origin, ok := originOf(resource)
	if !ok {
		return nil, false, nil
	}
	found, _, _, err := d.find(ctx, &politeClient{fetch: d.cfg.Fetch}, origin)
	if err != nil {
		return nil, false, fmt.Errorf("index: listing of %s: %w", resource, err)
	}
	for _, r := range found {
		if r.url == resource {
			return Resource{Accepts: quote}.listedAt(r.price).Accepts, true, nil
		}
	}
	return nil, false, nil
}

// wellKnownX402 is /.well-known/x402: {"version": 1, "resources": [URL...],
// "ownershipProofs": [signature...]}.
type wellKnownX402 struct {
	Version         int      `json:"version"`
	Resources       []string `json:"resources"`
	OwnershipProofs []string `json:"ownershipProofs"`
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// quote asks a declared resource for its quote, without payment: in its
// method, else GET then POST ({} as the body), and reads the resource
// from the 402.
func (d *Discoverer) quote(ctx context.Context, p *politeClient, r declared) (Resource, bool) {
	methods := []string{r.method}
	if r.method == "" {
		methods = []string{http.MethodGet, http.MethodPost}
	}
	for _, method := range methods {
		var body io.Reader
		if method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
			body = strings.NewReader("{}")
		}
		req, err := http.NewRequestWithContext(ctx, method, r.url, body)
		if err != nil {
			return Resource{}, false
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Accept", "application/json")
		resp, err := p.do(ctx, req)
		if err != nil || resp.StatusCode != http.StatusPaymentRequired {
			continue
		}
		if res, ok := resourceOfQuote(r.url, method, resp.Header, resp.Body); ok {
			return res, true
		}
	}
	return Resource{}, false
}

// resourceOfQuote reads a resource from its 402: the quote's options, its
// description and declared method, as a listing item of it would say.
func resourceOfQuote(rawURL, method string, h http.Header, body []byte) (Resource, bool) {
	if _, valid := quoteOf(h, body); !valid {
		return Resource{}, false
	}
	doc := body
	if v := h.Get("Payment-Required"); v != "" {
		if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v)); err == nil {
			doc = raw
		}
	}
	var q struct {
		Resource json.RawMessage `json:"resource"`
	}
	_ = json.Unmarshal(doc, &q)
	var described struct {
		Description string `json:"description"`
	}
	_ = json.Unmarshal(q.Resource, &described)
	// A v2 quote's resource is an object, not a listing item's URL: that
	// field is skipped (read above), the others are read.
	var it rawItem
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(doc, &it); err != nil && !errors.As(err, &typeErr) {
		return Resource{}, false
	}
	it.Resource, it.URL, it.Description = rawURL, "", described.Description
	r, ok := it.normalise(doc)
	if !ok {
		return Resource{}, false
	}
	if r.Method == "GET" && method != "" {
		r.Method = method
	}
	r.FromOrigin = true
	return r, true
}
