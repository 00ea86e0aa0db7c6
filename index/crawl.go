package index

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/fetch"
	"github.com/x402d/x402d/internal/retryafter"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
)

// DefaultSources are the public listings crawled when INDEX_SOURCES is
// unset: the CDP Bazaar discovery list and PayAI's facilitator list.
var DefaultSources = []string{
	"https://api.cdp.coinbase.com/platform/v2/x402/discovery/resources",
	"https://facilitator.payai.network/discovery/resources",
}

// DefaultPageGap is the polite pause between two pages of a listing, or two
// requests to an origin, unless configured (INDEX_PAGE_GAP).
const DefaultPageGap = time.Second

// CrawlerConfig configures a Crawler.
type CrawlerConfig struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Client fetches the listings. Sources are operator-configured and
	// trusted (contract.md): a request to the origin (scheme, host and
	// port) of a source goes out through the client's own transport,
	// which may reach private addresses. Any other URL, a source's
	// redirect to another origin, goes through Guard, as every URL that
	// comes from outside does. Defaults to a client with a 30 s timeout.
	Client *http.Client
	// Guard fetches what is not a source's origin. Defaults to
	// fetch.New(nil): public addresses only.
	Guard *fetch.Client
	// Sources are the listing URLs.
	Sources []string
	// PageSize is the limit asked of each page. Defaults to 100, the
	// largest the Bazaar list serves.
	PageSize int
	// PagesPerRun is how many pages of each source one periodic run reads.
	// Defaults to 10.
	PagesPerRun int
	// Gap is the polite pause between two pages of a source. Defaults to
	// DefaultPageGap; negative means none (tests).
	Gap time.Duration
	// Backoff is the first pause after a 429, a 5xx or a network error;
	// it doubles with each further failure, up to MaxBackoff. A longer
	// Retry-After is honoured. Defaults to 30 s.
	Backoff time.Duration
	// MaxBackoff caps the pause. Defaults to 1 hour.
	MaxBackoff time.Duration
	// Attempts is how many failures in a row FullPass accepts from a
	// source (waiting out each backoff) before it gives the source up.
	// Defaults to 4.
	Attempts int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics counts pages by outcome. Nil counts nothing.
	Metrics *metrics.Metrics
}

// Crawler reads discovery listings page by page from their saved cursors.
// Each page is recorded in its own short transaction, so a crawl resumes
// where it stopped after any crash, and two crawlers on one source never
// record the same page twice.
type Crawler struct {
	cfg CrawlerConfig
}

// NewCrawler returns a Crawler for config, of which it keeps a copy.
func NewCrawler(config *CrawlerConfig) *Crawler {
	cfg := *config
	client := &http.Client{Timeout: 30 * time.Second}
	if cfg.Client != nil {
		c := *cfg.Client
		client = &c
	}
	if cfg.Guard == nil {
		cfg.Guard = fetch.New(nil)
	}
	client.Transport = &sourcesTransport{origins: sourceOrigins(cfg.Sources),
		trusted: cmp.Or[http.RoundTripper](client.Transport, http.DefaultTransport), guarded: cfg.Guard.Transport()}
	cfg.Client = client
	if cfg.PageSize <= 0 {
		cfg.PageSize = 100
	}
	if cfg.PagesPerRun <= 0 {
		cfg.PagesPerRun = 10
	}
	if cfg.Gap == 0 {
		cfg.Gap = DefaultPageGap
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 30 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = time.Hour
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Crawler{cfg: cfg}
}

// sourcesTransport sends a request to the origin of a source through
// trusted, and any other through guarded.
type sourcesTransport struct {
	origins          map[string]bool
	trusted, guarded http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *sourcesTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.origins[originKey(req.URL)] {
		return t.trusted.RoundTrip(req)
	}
	return t.guarded.RoundTrip(req)
}

// sourceOrigins returns the origins of sources, as originKey spells them.
func sourceOrigins(sources []string) map[string]bool {
	origins := make(map[string]bool, len(sources))
	for _, src := range sources {
		if u, err := url.Parse(src); err == nil && u.Host != "" {
			origins[originKey(u)] = true
		}
	}
	return origins
}

// originKey is u's scheme://host[:port], in lower case.
func originKey(u *url.URL) string {
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// Sources returns the listing URLs the crawler reads.
func (c *Crawler) Sources() []string { return c.cfg.Sources }

// ErrBackingOff is matched by a BackoffError: the source is waiting after
// failures.
var ErrBackingOff = errors.New("source is backing off")

// BackoffError is returned for a source that is waiting after failures.
type BackoffError struct {
	Source string
	// Until is when the source may be read again.
	Until time.Time
}

// Error says which source waits and until when.
func (e *BackoffError) Error() string {
	return fmt.Sprintf("index: %s is backing off until %s", e.Source, e.Until.Format(time.RFC3339))
}

// Is makes a BackoffError match ErrBackingOff.
func (e *BackoffError) Is(target error) bool { return target == ErrBackingOff }

// PageError is a page that could not be read. The source backs off.
type PageError struct {
	Source string
	Offset int
	// Status is the HTTP status, 0 when there was no response.
	Status int
	// Retryable is set for what waiting may cure: a 429, a 5xx, a network
	// error. A 404 or a body that is not a listing is not.
	Retryable bool
	Err       error
}

// Error names the source, the offset and the cause.
func (e *PageError) Error() string {
	return fmt.Sprintf("index: page at %d of %s: %v", e.Offset, e.Source, e.Err)
}

// Unwrap returns the cause.
func (e *PageError) Unwrap() error { return e.Err }

// Step is the outcome of reading one page.
type Step struct {
	Source string
	// Cursor is the offset the page reached (where the next page of the
	// pass begins; a pass that ended starts again at 0).
	Cursor int
	// Total is the listing's total as last reported.
	Total int
	// Count is the number of items the page carried.
	Count int
	// Changed is the number of resources indexed or changed by the page.
	Changed int
	// PassDone is set when the page ended a pass of the source.
	PassDone bool
	// Retired is the number of resources the end of the pass retired.
	Retired int
}

// Run reads up to PagesPerRun pages of each source (the periodic job). A
// source that fails backs off and the others go on; a source another
// crawler is reading is left to it.
func (c *Crawler) Run(ctx context.Context, progress func(Step)) error {
	var errs []error
	for _, src := range c.cfg.Sources {
		for i := 0; i < c.cfg.PagesPerRun; i++ {
			if i > 0 && !sleep(ctx, c.cfg.Gap) {
				return ctx.Err()
			}
			step, err := c.Page(ctx, src)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, ErrBackingOff) {
				break
			}
			if errors.Is(err, store.ErrConflict) {
				c.cfg.Logger.InfoContext(ctx, "index: another crawler read the page first", "source", src)
				break
			}
			if err != nil {
				errs = append(errs, err)
				break
			}
			if progress != nil {
				progress(step)
			}
			if step.PassDone {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// FullPass reads every source until it completes a pass (x402d index
// crawl). It waits out backoffs; a source that fails Attempts times in a
// row, or fails in a way waiting cannot cure, is given up and its error
// returned once the other sources are done.
func (c *Crawler) FullPass(ctx context.Context, progress func(Step)) error {
	var errs []error
	for _, src := range c.cfg.Sources {
		if err := c.passOf(ctx, src, progress); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// passOf reads src until its pass ends, or gives it up.
func (c *Crawler) passOf(ctx context.Context, src string, progress func(Step)) error {
	failures := 0
	for first := true; ; first = false {
		if !first && !sleep(ctx, c.cfg.Gap) {
			return ctx.Err()
		}
		step, err := c.Page(ctx, src)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var backoff *BackoffError
		var pageErr *PageError
		switch {
		case err == nil:
			failures = 0
			if progress != nil {
				progress(step)
			}
			if step.PassDone {
				return nil
			}
		case errors.As(err, &backoff):
			c.cfg.Logger.InfoContext(ctx, "index: waiting for a source that is backing off", "source", src, "until", backoff.Until)
			if !sleep(ctx, time.Until(backoff.Until)) {
				return ctx.Err()
			}
		case errors.Is(err, store.ErrConflict):
			// Another crawler recorded the page: read on from its cursor.
		case errors.As(err, &pageErr):
			failures++
			c.cfg.Logger.WarnContext(ctx, "index: page failed", "source", src, "status", pageErr.Status,
				"failures", failures, "retryable", pageErr.Retryable, "error", pageErr.Err)
			if !pageErr.Retryable || failures >= c.cfg.Attempts {
				return fmt.Errorf("index: gave up %s after %d failures: %w", src, failures, err)
			}
		default:
			return err
		}
	}
}

// sourceState is where the crawl of a source stands.
type sourceState = store.IndexSourceState

func (c *Crawler) state(ctx context.Context, src string) (sourceState, error) {
	st, err := store.IndexSourceStateGet(ctx, c.cfg.Pool, src)
	if err != nil {
		return st, fmt.Errorf("index: %w", err)
	}
	return st, nil
}

// Page reads the next page of src from its saved cursor and records it: the
// resources it adds or changes, the cursor's move and, when the page ends
// the pass, the resources the pass no longer found, all in one transaction.
// It returns a *BackoffError while the source waits, a *PageError when the
// page could not be read, and store.ErrConflict when another crawler
// recorded the page first.
func (c *Crawler) Page(ctx context.Context, src string) (Step, error) {
	st, err := c.state(ctx, src)
	if err != nil {
		return Step{}, err
	}
	step := Step{Source: src, Cursor: st.Cursor}
	if st.BackoffUntil != nil && time.Now().Before(*st.BackoffUntil) {
		return step, &BackoffError{Source: src, Until: *st.BackoffUntil}
	}
	page, status, retryAfter, err := c.fetch(ctx, src, st.Cursor)
	if err != nil {
		if ctx.Err() != nil {
			return step, ctx.Err()
		}
		c.cfg.Metrics.CrawlPage("failed")
		perr := &PageError{Source: src, Offset: st.Cursor, Status: status, Retryable: retryable(status, err), Err: err}
		backoff := min(max(c.cfg.Backoff<<min(st.Failures, 16), retryAfter), c.cfg.MaxBackoff)
		ferr := c.append(ctx, store.NewEvent{Stream: store.CrawlStream(src), Type: store.EventCrawlFailed, Data: store.CrawlFailed{
			Source: src, Status: status, Error: err.Error(), BackoffUntil: time.Now().Add(backoff).UTC(),
		}})
		if ferr != nil {
			return step, errors.Join(perr, ferr)
		}
		return step, perr
	}

	return c.record(ctx, src, st, page)
}

// record records page, read from src at st's cursor: the resources it adds
// or changes, the cursor's move and, when the page ends the pass, the
// resources the pass no longer found, all in one transaction.
func (c *Crawler) record(ctx context.Context, src string, st sourceState, page *Page) (Step, error) {
	step := Step{Source: src, Cursor: st.Cursor}
	events, changedHosts, compare, fresh, err := c.changes(ctx, src, st.Pass, page)
	if err != nil {
		return step, err
	}
	urls := page.urls()
	total := page.Total
	if total < 0 {
		total = st.Cursor + page.Count
	}
	events = append(events, store.NewEvent{Stream: store.CrawlStream(src), Type: store.EventCrawlPage, Data: store.CrawlPage{
		Source: src, Pass: st.Pass, Offset: st.Cursor, Count: page.Count, Total: total, Resources: urls, Hosts: changedHosts,
	}})
	step.Count, step.Total, step.Changed = page.Count, total, len(events)-1
	step.Cursor = st.Cursor + page.Count
	pageSize := c.cfg.PageSize
	if page.Limit > 0 {
		pageSize = min(pageSize, page.Limit)
	}
	if page.Total >= 0 {
		step.PassDone = page.Count == 0 || step.Cursor >= page.Total
	} else {
		// Without a total, a short page ends the pass; so does a page with
		// nothing new in this pass (a listing that ignores the offset would
		// otherwise be read forever).
		step.PassDone = page.Count < pageSize || (len(page.Items) > 0 && fresh == 0)
	}

	err = pgx.BeginFunc(ctx, c.cfg.Pool, func(tx pgx.Tx) error {
		// First, before anything is written: the quote locks.
		compared, err := quoteCompared(ctx, tx, compare)
		if err != nil {
			return err
		}
		events := append(events, compared...)
		if step.PassDone {
			retired, err := store.ResourceUnlistedList(ctx, tx, src, st.Pass, urls)
			if err != nil {
				return err
			}
			step.Retired = len(retired)
			events = append(events, retired...)
			events = append(events, store.NewEvent{Stream: store.CrawlStream(src), Type: store.EventCrawlPassDone,
				Data: store.CrawlPassDone{Source: src, Pass: st.Pass, Retired: len(retired)}})
		}
		return store.Append(ctx, tx, events...)
	})
	if err != nil {
		return step, fmt.Errorf("index: record page at %d of %s: %w", st.Cursor, src, err)
	}
	c.cfg.Metrics.CrawlPage("ok")
	return step, nil
}

// retryable reports whether waiting may cure a failed page: a 429, a 5xx,
// or a network error other than a name that does not exist or an address
// the guard refuses.
func retryable(status int, err error) bool {
	if status != 0 {
		return status == http.StatusTooManyRequests || status >= 500
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return false
	}
	var parseErr *listingError
	return !errors.As(err, &parseErr) && !errors.Is(err, fetch.ErrRefused)
}

// listingError is a 200 whose body is not a listing.
type listingError struct{ err error }

func (e *listingError) Error() string { return e.err.Error() }
func (e *listingError) Unwrap() error { return e.err }

// fetch reads the page at offset of src. retryAfter is the wait a 429 or
// 503 asked for.
func (c *Crawler) fetch(ctx context.Context, src string, offset int) (page *Page, status int, retryAfter time.Duration, err error) {
	u, err := url.Parse(src)
	if err != nil {
		return nil, 0, 0, &listingError{fmt.Errorf("source URL: %w", err)}
	}
	q := u.Query()
	q.Set("limit", strconv.Itoa(c.cfg.PageSize))
	q.Set("offset", strconv.Itoa(offset))
	if q.Get("type") == "" {
		q.Set("type", "http")
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, 0, 0, &listingError{err}
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "x402d-index/1 (+https://github.com/x402d/x402d)")
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		return nil, 0, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, resp.StatusCode, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, retryWait(resp.Header),
			fmt.Errorf("status %d", resp.StatusCode)
	}
	page, err = ParsePage(body)
	if err != nil {
		return nil, resp.StatusCode, 0, &listingError{err}
	}
	return page, resp.StatusCode, 0, nil
}

// changes returns the resource.indexed events of the page's new or changed
// resources, the hosts whose aggregates they change, and how many of the
// page's resources were not seen before in this pass.
//
// A resource listed twice in one pass (the same URL spelt two ways, on two
// pages) keeps what its first listing said, so that duplicates that
// disagree do not flip it back and forth.
func (c *Crawler) changes(ctx context.Context, src string, pass int, page *Page) (events []store.NewEvent, hosts []string, compare []quoteListing, fresh int, err error) {
	existing, err := store.ResourceIndexedList(ctx, c.cfg.Pool, page.urls(), src, pass)
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("index: %w", err)
	}

	seen := map[string]bool{}
	hostSeen := map[string]bool{}
	for _, r := range page.Items {
		if seen[r.URL] {
			continue
		}
		seen[r.URL] = true
		k, ok := existing[r.URL]
		if ok && k.SeenInPass && !k.Retired {
			continue
		}
		fresh++
		if ok && !k.Retired && r.FromOrigin && k.Elsewhere {
			// What a listing says of a resource stands; its origin only
			// keeps it listed.
			continue
		}
		if ok && !k.Retired && (k.QuotePending || !slices.EqualFunc(k.Accepts, r.Accepts, store.Accept.Equal)) {
			// A listing that changed, or read again while its host's
			// comparison waits for it: compared with the resource's last
			// 402 (if it is a host's sample) as the page is recorded.
			compare = append(compare, quoteListing{host: r.Host, resource: r.URL, accepts: r.Accepts})
		}
		quality := r.Quality
		if quality == nil && ok && !k.Retired && k.Elsewhere {
			// A listing that reports no use does not erase what another
			// listing of the resource reports.
			quality = k.Quality
		}
		if ok && !k.Retired && k.Host == r.Host && k.Description == r.Description && k.Method == r.Method &&
			sameStrings(k.Networks, r.Networks) && samePrice(k.Price, r.PriceUSDC) && k.Discoverable == r.Discoverable &&
			slices.EqualFunc(k.Accepts, r.Accepts, store.Accept.Equal) && k.Quality.Equal(quality) && sameStrings(k.Tags, r.Tags) &&
			store.SameJSON(k.InputSchema, r.InputSchema) && store.SameJSON(k.OutputSchema, r.OutputSchema) && store.SameJSON(k.Extensions, r.Extensions) &&
			k.X402Version == r.X402Version && k.MimeType == r.MimeType {
			continue
		}
		events = append(events, store.NewEvent{Stream: store.HostStream(r.Host), Type: store.EventResourceIndexed, Data: store.ResourceIndexed{
			Resource: r.URL, Host: r.Host, Source: src, Description: r.Description, Method: r.Method,
			Networks: r.Networks, PriceUSDC: r.PriceUSDC, Discoverable: r.Discoverable, Accepts: r.Accepts, Quality: quality,
			Tags: r.Tags, InputSchema: r.InputSchema, OutputSchema: r.OutputSchema, Extensions: r.Extensions,
			X402Version: r.X402Version, MimeType: r.MimeType,
		}})
		for _, h := range []string{r.Host, k.Host} {
			if h != "" && !hostSeen[h] {
				hostSeen[h] = true
				hosts = append(hosts, h)
			}
		}
	}
	return events, hosts, compare, fresh, nil
}

// quoteListing is a resource's listing as a page reads it, to compare
// with its last 402.
type quoteListing struct {
	host, resource string
	accepts        []store.Accept
}

// quoteCompared compares each of listings that is its host's sample with
// the host's last 402, in tx under the hosts' quote locks, so that a probe
// writing its verdict at the same time is compared before or after, never
// with the listing this one replaces; it returns the host.quote_compared
// events.
func quoteCompared(ctx context.Context, tx pgx.Tx, listings []quoteListing) ([]store.NewEvent, error) {
	if len(listings) == 0 {
		return nil, nil
	}
	hosts, resources := make([]string, len(listings)), make([]string, len(listings))
	for i, l := range listings {
		hosts[i], resources[i] = l.host, l.resource
	}
	if err := store.QuoteLock(ctx, tx, hosts); err != nil {
		return nil, err
	}
	quotes, err := store.SampleQuotes(ctx, tx, resources)
	if err != nil {
		return nil, err
	}
	var events []store.NewEvent
	for _, l := range listings {
		q, ok := quotes[l.resource]
		if !ok || q.Host != l.host {
			continue
		}
		matches, differences := compareQuote(l.resource, l.accepts, q.Quote)
		events = append(events, store.NewEvent{Stream: store.HostStream(l.host), Type: store.EventHostQuoteCompared,
			Data: store.HostQuoteCompared{Resource: l.resource, QuoteMatchesListing: matches, QuoteDifferences: differences}})
	}
	return events, nil
}

func (c *Crawler) append(ctx context.Context, events ...store.NewEvent) error {
	return pgx.BeginFunc(ctx, c.cfg.Pool, func(tx pgx.Tx) error {
		return store.Append(ctx, tx, events...)
	})
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// samePrice compares numeric text from Postgres with ours.
func samePrice(a, b string) bool {
	if a == "" || b == "" {
		return a == b
	}
	fa, err1 := strconv.ParseFloat(a, 64)
	fb, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && fa == fb
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// urls returns the page's resource URLs, each once.
func (p *Page) urls() []string {
	seen := make(map[string]bool, len(p.Items))
	urls := make([]string, 0, len(p.Items))
	for _, r := range p.Items {
		if !seen[r.URL] {
			seen[r.URL] = true
			urls = append(urls, r.URL)
		}
	}
	return urls
}

// retryWait returns the wait an answer's Retry-After header asks for, 0
// when it asks for none (retryafter.Parse).
func retryWait(h http.Header) time.Duration {
	wait, _ := retryafter.Parse(h.Get("Retry-After"), time.Now())
	return wait
}
