package store

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Index event types. Resources and liveness are on host/<name> streams,
// crawl progress on crawl/<source URL> streams.
const (
	EventResourceIndexed = "resource.indexed"
	EventResourceRetired = "resource.retired"
	EventHostProbed      = "host.probed"
	EventCrawlPage       = "crawl.page"
	EventCrawlPassDone   = "crawl.pass_done"
	EventCrawlFailed     = "crawl.failed"
)

// HostStream returns the event stream of an index host.
func HostStream(host string) string { return "host/" + host }

// CrawlStream returns the event stream of a discovery source's crawl.
func CrawlStream(source string) string { return "crawl/" + source }

// ResourceIndexed is a resource seen in a listing, new or changed.
type ResourceIndexed struct {
	Resource    string   `json:"resource"`
	Host        string   `json:"host"`
	Source      string   `json:"source"`
	Description string   `json:"description"`
	Method      string   `json:"method"`
	Networks    []string `json:"networks"`
	// PriceUSDC is the lowest price as decimal text, empty when unpriced.
	PriceUSDC    string `json:"price_usdc,omitempty"`
	Discoverable bool   `json:"discoverable"`
}

// ResourceRetired is a resource that a full pass of a source no longer
// listed and that no other source lists.
type ResourceRetired struct {
	Resource string `json:"resource"`
	Host     string `json:"host"`
}

// HostProbed is one liveness measurement of a host. A nil field was not
// measured. Status 429 means "try later": it does not change Live.
type HostProbed struct {
	Live      *bool     `json:"live"`
	Status    *int      `json:"status"`
	LatencyMS *int      `json:"latency_ms"`
	Error     string    `json:"error,omitempty"`
	CheckedAt time.Time `json:"checked_at"`
}

// CrawlPage is one page of a source read: the cursor moves from Offset to
// Offset+Count (a page read by another crawler meanwhile makes the append
// fail with ErrConflict), and Resources were seen in the source's Pass.
// Hosts are the hosts whose aggregates the page's resource events changed.
type CrawlPage struct {
	Source    string   `json:"source"`
	Pass      int      `json:"pass"`
	Offset    int      `json:"offset"`
	Count     int      `json:"count"`
	Total     int      `json:"total"`
	Resources []string `json:"resources"`
	Hosts     []string `json:"hosts"`
}

// CrawlPassDone ends a full pass of a source: its listings not seen in Pass
// are dropped, the cursor goes back to 0 and the next pass begins.
type CrawlPassDone struct {
	Source  string `json:"source"`
	Pass    int    `json:"pass"`
	Retired int    `json:"retired"`
}

// CrawlFailed is a page that could not be read; the source backs off.
type CrawlFailed struct {
	Source       string    `json:"source"`
	Status       int       `json:"status,omitempty"`
	Error        string    `json:"error"`
	BackoffUntil time.Time `json:"backoff_until"`
}

// refreshHosts recomputes the aggregates of hosts from their live resources.
// The sample is the cheapest priced resource (else the first by URL).
const refreshHosts = `
INSERT INTO index_hosts AS h (host, services, priced_services, price_min_usdc, price_max_usdc, networks,
	sample_resource, sample_method, sample, discoverable, updated_at)
SELECT r.host, count(*), count(r.price_usdc), min(r.price_usdc), max(r.price_usdc),
	coalesce((SELECT array_agg(DISTINCT n ORDER BY n) FROM index_resources r2, unnest(r2.networks) n
	          WHERE r2.host = r.host AND NOT r2.retired), '{}'),
	(array_agg(r.resource ORDER BY r.price_usdc NULLS LAST, r.resource))[1],
	(array_agg(r.method ORDER BY r.price_usdc NULLS LAST, r.resource))[1],
	left((array_agg(r.description ORDER BY r.price_usdc NULLS LAST, r.resource))[1], 240),
	bool_or(r.discoverable),
	$2
FROM index_resources r WHERE r.host = ANY($1) AND NOT r.retired GROUP BY r.host
ON CONFLICT (host) DO UPDATE SET services = EXCLUDED.services, priced_services = EXCLUDED.priced_services,
	price_min_usdc = EXCLUDED.price_min_usdc, price_max_usdc = EXCLUDED.price_max_usdc, networks = EXCLUDED.networks,
	sample_resource = EXCLUDED.sample_resource, sample_method = EXCLUDED.sample_method, sample = EXCLUDED.sample,
	discoverable = EXCLUDED.discoverable, updated_at = EXCLUDED.updated_at`

// emptyHosts zeroes the aggregates of hosts left without a live resource.
const emptyHosts = `
UPDATE index_hosts h SET services = 0, priced_services = 0, price_min_usdc = NULL, price_max_usdc = NULL,
	networks = '{}', updated_at = $2
WHERE h.host = ANY($1) AND NOT EXISTS (SELECT 1 FROM index_resources r WHERE r.host = h.host AND NOT r.retired)`

// projectHost updates index_resources and index_hosts for a host event.
func projectHost(b *pgx.Batch, e *NewEvent, _ []byte, now time.Time) (bool, error) {
	host := strings.TrimPrefix(e.Stream, "host/")
	switch v := e.Data.(type) {
	case ResourceIndexed:
		var price any
		if v.PriceUSDC != "" {
			price = v.PriceUSDC
		}
		networks := v.Networks
		if networks == nil {
			networks = []string{}
		}
		b.Queue(`INSERT INTO index_resources (resource, host, description, method, networks, price_usdc, discoverable, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6::numeric, $7, $8)
			ON CONFLICT (resource) DO UPDATE SET host = $2, description = $3, method = $4, networks = $5,
				price_usdc = $6::numeric, discoverable = $7, retired = false, updated_at = $8`,
			v.Resource, host, v.Description, v.Method, networks, price, v.Discoverable, now)
		return false, nil
	case ResourceRetired:
		b.Queue("UPDATE index_resources SET retired = true, updated_at = $2 WHERE resource = $1", v.Resource, now)
		b.Queue(refreshHosts, []string{host}, now)
		b.Queue(emptyHosts, []string{host}, now)
		return false, nil
	case HostProbed:
		// A 429 says "try later": the last verdict stands.
		b.Queue(`INSERT INTO index_hosts AS h (host, live, status, latency_ms, checked_at, probe_error)
			VALUES ($1, CASE WHEN $3::integer = 429 THEN NULL ELSE $2::boolean END, $3, $4, $5, NULLIF($6, ''))
			ON CONFLICT (host) DO UPDATE SET
				live = CASE WHEN $3::integer = 429 THEN h.live ELSE $2::boolean END,
				status = $3, latency_ms = $4, checked_at = $5, probe_error = NULLIF($6, '')`,
			host, v.Live, v.Status, v.LatencyMS, v.CheckedAt, v.Error)
		return false, nil
	}
	return false, fmt.Errorf("no projection of %s with %T", e.Type, e.Data)
}

// projectCrawl updates index_sources, index_listings and the aggregates of
// the hosts a page changed, for a crawl event. Page and pass moves must
// start from the saved cursor and pass: two crawlers reading one source at
// once cannot both record the same page (ErrConflict).
func projectCrawl(b *pgx.Batch, e *NewEvent, _ []byte, now time.Time) (bool, error) {
	switch v := e.Data.(type) {
	case CrawlPage:
		if len(v.Resources) > 0 {
			b.Queue(`INSERT INTO index_listings (source, resource, seen_pass) SELECT $1, unnest($2::text[]), $3
				ON CONFLICT (source, resource) DO UPDATE SET seen_pass = EXCLUDED.seen_pass`, v.Source, v.Resources, v.Pass)
		}
		if len(v.Hosts) > 0 {
			b.Queue(refreshHosts, v.Hosts, now)
			b.Queue(emptyHosts, v.Hosts, now)
		}
		b.Queue("INSERT INTO index_sources (url) VALUES ($1) ON CONFLICT (url) DO NOTHING", v.Source)
		b.Queue(`UPDATE index_sources SET cursor = $2::integer + $3::integer, total = $4, pages_done = pages_done + 1,
				last_at = $6, failures = 0, backoff_until = NULL, last_error = NULL
			WHERE url = $1 AND cursor = $2 AND pass = $5`,
			v.Source, v.Offset, v.Count, v.Total, v.Pass, now)
		return true, nil
	case CrawlPassDone:
		b.Queue("DELETE FROM index_listings WHERE source = $1 AND seen_pass < $2", v.Source, v.Pass)
		b.Queue(`UPDATE index_sources SET cursor = 0, pages_done = 0, pass = $2 + 1,
				full_scans = full_scans + 1, last_at = $3, last_full_at = $3
			WHERE url = $1 AND pass = $2`,
			v.Source, v.Pass, now)
		return true, nil
	case CrawlFailed:
		b.Queue(`INSERT INTO index_sources AS s (url, failures, backoff_until, last_error, last_at) VALUES ($1, 1, $2, $3, $4)
			ON CONFLICT (url) DO UPDATE SET failures = s.failures + 1, backoff_until = $2, last_error = $3, last_at = $4`,
			v.Source, v.BackoffUntil, v.Error, now)
		return false, nil
	}
	return false, fmt.Errorf("no projection of %s with %T", e.Type, e.Data)
}
