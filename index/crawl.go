package index

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
)

// DefaultSources are the public listings crawled when INDEX_SOURCES is
// unset: the CDP Bazaar discovery list and PayAI's facilitator list.
var DefaultSources = []string{
	"https://api.cdp.coinbase.com/platform/v2/x402/discovery/resources",
	"https://facilitator.payai.network/discovery/resources",
}

// CrawlerConfig configures a Crawler.
type CrawlerConfig struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Client fetches the listings. Sources are operator-configured and
	// trusted (contract.md), so this is a plain client. Defaults to one
	// with a 30 s timeout.
	Client *http.Client
	// Sources are the listing URLs.
	Sources []string
	// PageSize is the limit asked of each page. Defaults to 100.
	PageSize int
	// PagesPerRun is how many pages of each source one run reads.
	// Defaults to 5.
	PagesPerRun int
	// Gap is the polite pause between two pages of a source. Defaults to
	// 1 s.
	Gap time.Duration
	// Backoff is the first pause after a 429, a 5xx or a network error;
	// it doubles with each failure, up to an hour. Defaults to 1 minute.
	Backoff time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics counts pages by outcome. Nil counts nothing.
	Metrics *metrics.Metrics
}

// Crawler reads discovery listings from their saved cursors.
type Crawler struct {
	cfg CrawlerConfig
}

// NewCrawler returns a Crawler for cfg.
func NewCrawler(cfg CrawlerConfig) *Crawler {
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 100
	}
	if cfg.PagesPerRun <= 0 {
		cfg.PagesPerRun = 5
	}
	if cfg.Gap == 0 {
		cfg.Gap = time.Second
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Crawler{cfg: cfg}
}

// ErrBackingOff is returned for a source that is waiting after failures.
var ErrBackingOff = errors.New("source is backing off")

// Step is the outcome of reading one page.
type Step struct {
	Source   string
	Cursor   int
	Total    int
	Count    int
	Changed  int
	PassDone bool
	Retired  int
}

// Run reads up to PagesPerRun pages of each source, each page in its own
// short transaction. A source that fails backs off; others go on.
func (c *Crawler) Run(ctx context.Context, progress func(Step)) error {
	var errs []error
	for _, src := range c.cfg.Sources {
		for i := 0; i < c.cfg.PagesPerRun; i++ {
			if i > 0 && !sleep(ctx, c.cfg.Gap) {
				return ctx.Err()
			}
			step, err := c.Page(ctx, src)
			if err != nil {
				if !errors.Is(err, ErrBackingOff) {
					errs = append(errs, err)
				}
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
// crawl), waiting out backoffs.
func (c *Crawler) FullPass(ctx context.Context, progress func(Step)) error {
	for _, src := range c.cfg.Sources {
		for first := true; ; first = false {
			if !first && !sleep(ctx, c.cfg.Gap) {
				return ctx.Err()
			}
			step, err := c.Page(ctx, src)
			if errors.Is(err, ErrBackingOff) {
				continue
			}
			if err != nil {
				c.cfg.Logger.WarnContext(ctx, "index: page failed, backing off", "source", src, "error", err)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				continue
			}
			if progress != nil {
				progress(step)
			}
			if step.PassDone {
				break
			}
		}
	}
	return nil
}

type sourceState struct {
	cursor, pass, failures int
	backoffUntil           *time.Time
}

func (c *Crawler) state(ctx context.Context, src string) (sourceState, error) {
	st := sourceState{pass: 1}
	err := c.cfg.Pool.QueryRow(ctx, "SELECT cursor, pass, failures, backoff_until FROM index_sources WHERE url = $1", src).
		Scan(&st.cursor, &st.pass, &st.failures, &st.backoffUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("index: state of %s: %w", src, err)
	}
	return st, nil
}

// Page reads the next page of src and records it.
func (c *Crawler) Page(ctx context.Context, src string) (Step, error) {
	st, err := c.state(ctx, src)
	if err != nil {
		return Step{}, err
	}
	step := Step{Source: src, Cursor: st.cursor}
	if st.backoffUntil != nil && time.Now().Before(*st.backoffUntil) {
		return step, ErrBackingOff
	}
	page, status, err := c.fetch(ctx, src, st.cursor)
	if err != nil {
		if ctx.Err() != nil {
			return step, ctx.Err()
		}
		c.cfg.Metrics.CrawlPage("failed")
		backoff := min(c.cfg.Backoff<<min(st.failures, 10), time.Hour)
		ferr := c.append(ctx, store.NewEvent{Stream: store.CrawlStream(src), Type: store.EventCrawlFailed, Data: store.CrawlFailed{
			Source: src, Status: status, Error: err.Error(), BackoffUntil: time.Now().Add(backoff).UTC(),
		}})
		return step, errors.Join(fmt.Errorf("index: page %d of %s: %w", st.cursor, src, err), ferr)
	}

	events, changedHosts, err := c.changes(ctx, src, st.pass, page)
	if err != nil {
		return step, err
	}
	urls := make([]string, 0, len(page.Items))
	for _, r := range page.Items {
		urls = append(urls, r.URL)
	}
	total := page.Total
	if total < 0 {
		total = st.cursor + page.Count
	}
	events = append(events, store.NewEvent{Stream: store.CrawlStream(src), Type: store.EventCrawlPage, Data: store.CrawlPage{
		Source: src, Pass: st.pass, Offset: st.cursor, Count: page.Count, Total: total, Resources: urls, Hosts: changedHosts,
	}})
	if err := c.append(ctx, events...); err != nil {
		return step, err
	}
	c.cfg.Metrics.CrawlPage("ok")
	step.Count, step.Total, step.Changed = page.Count, total, len(events)-1
	step.Cursor = st.cursor + page.Count
	if page.Count == 0 || step.Cursor >= total || (page.Total < 0 && page.Count < c.cfg.PageSize) {
		retired, err := c.endPass(ctx, src, st.pass)
		if err != nil {
			return step, err
		}
		step.PassDone, step.Retired = true, retired
	}
	return step, nil
}

// fetch reads the page at offset of src.
func (c *Crawler) fetch(ctx context.Context, src string, offset int) (*Page, int, error) {
	u, err := url.Parse(src)
	if err != nil {
		return nil, 0, fmt.Errorf("source URL: %w", err)
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
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "x402d-index/1 (+https://github.com/x402d/x402d)")
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, fmt.Errorf("status %d", resp.StatusCode)
	}
	page, err := ParsePage(body)
	return page, resp.StatusCode, err
}

// changes returns the resource.indexed events of the page's new or changed
// resources and their hosts.
func (c *Crawler) changes(ctx context.Context, src string, pass int, page *Page) ([]store.NewEvent, []string, error) {
	urls := make([]string, 0, len(page.Items))
	for _, r := range page.Items {
		urls = append(urls, r.URL)
	}
	type known struct {
		host, description, method, price string
		networks                         []string
		discoverable, retired            bool
	}
	existing := map[string]known{}
	rows, err := c.cfg.Pool.Query(ctx, `SELECT resource, host, description, method, networks, coalesce(price_usdc::text, ''), discoverable, retired
		FROM index_resources WHERE resource = ANY($1)`, urls)
	if err != nil {
		return nil, nil, fmt.Errorf("index: read resources: %w", err)
	}
	for rows.Next() {
		var url string
		var k known
		if err := rows.Scan(&url, &k.host, &k.description, &k.method, &k.networks, &k.price, &k.discoverable, &k.retired); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("index: read resources: %w", err)
		}
		existing[url] = k
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("index: read resources: %w", err)
	}

	var events []store.NewEvent
	var hosts []string
	seen := map[string]bool{}
	hostSeen := map[string]bool{}
	for _, r := range page.Items {
		if seen[r.URL] {
			continue
		}
		seen[r.URL] = true
		price := r.PriceUSDC
		k, ok := existing[r.URL]
		if ok && !k.retired && k.host == r.Host && k.description == r.Description && k.method == r.Method &&
			sameStrings(k.networks, r.Networks) && samePrice(k.price, price) && k.discoverable == r.Discoverable {
			continue
		}
		events = append(events, store.NewEvent{Stream: store.HostStream(r.Host), Type: store.EventResourceIndexed, Data: store.ResourceIndexed{
			Resource: r.URL, Host: r.Host, Source: src, Description: r.Description, Method: r.Method,
			Networks: r.Networks, PriceUSDC: price, Discoverable: r.Discoverable, Pass: pass,
		}})
		if !hostSeen[r.Host] {
			hostSeen[r.Host] = true
			hosts = append(hosts, r.Host)
		}
	}
	return events, hosts, nil
}

// endPass retires the resources of src not seen in pass and starts the
// next pass.
func (c *Crawler) endPass(ctx context.Context, src string, pass int) (int, error) {
	rows, err := c.cfg.Pool.Query(ctx, "SELECT resource, host FROM index_resources WHERE source = $1 AND seen_pass < $2 AND NOT retired", src, pass)
	if err != nil {
		return 0, fmt.Errorf("index: find retired resources: %w", err)
	}
	var events []store.NewEvent
	for rows.Next() {
		var r store.ResourceRetired
		if err := rows.Scan(&r.Resource, &r.Host); err != nil {
			rows.Close()
			return 0, err
		}
		events = append(events, store.NewEvent{Stream: store.HostStream(r.Host), Type: store.EventResourceRetired, Data: r})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	retired := len(events)
	events = append(events, store.NewEvent{Stream: store.CrawlStream(src), Type: store.EventCrawlPassDone, Data: store.CrawlPassDone{
		Source: src, Pass: pass, Retired: retired,
	}})
	return retired, c.append(ctx, events...)
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
