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
	Pass         int    `json:"pass"`
}

// ResourceRetired is a resource missing from a full pass of its source.
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

// CrawlPage is one page of a source read: the cursor moves to Offset+Count.
type CrawlPage struct {
	Source    string   `json:"source"`
	Pass      int      `json:"pass"`
	Offset    int      `json:"offset"`
	Count     int      `json:"count"`
	Total     int      `json:"total"`
	Resources []string `json:"resources"`
	Hosts     []string `json:"hosts"`
}

// CrawlPassDone ends a full pass of a source: the cursor goes back to 0.
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
const refreshHosts = `
INSERT INTO index_hosts AS h (host, services, priced_services, price_min_usdc, price_max_usdc, networks,
	sample_resource, sample_method, sample, discoverable, search, updated_at)
SELECT r.host, count(*), count(r.price_usdc), min(r.price_usdc), max(r.price_usdc),
	coalesce((SELECT array_agg(DISTINCT n ORDER BY n) FROM index_resources r2, unnest(r2.networks) n
	          WHERE r2.host = r.host AND NOT r2.retired), '{}'),
	(array_agg(r.resource ORDER BY r.price_usdc IS NULL, r.resource))[1],
	(array_agg(r.method ORDER BY r.price_usdc IS NULL, r.resource))[1],
	left((array_agg(r.description ORDER BY r.price_usdc IS NULL, r.resource))[1], 240),
	bool_or(r.discoverable),
	left(lower(r.host || ' ' || string_agg(r.resource || ' ' || r.description, ' ')), 8000),
	$2
FROM index_resources r WHERE r.host = ANY($1) AND NOT r.retired GROUP BY r.host
ON CONFLICT (host) DO UPDATE SET services = EXCLUDED.services, priced_services = EXCLUDED.priced_services,
	price_min_usdc = EXCLUDED.price_min_usdc, price_max_usdc = EXCLUDED.price_max_usdc, networks = EXCLUDED.networks,
	sample_resource = EXCLUDED.sample_resource, sample_method = EXCLUDED.sample_method, sample = EXCLUDED.sample,
	discoverable = EXCLUDED.discoverable, search = EXCLUDED.search, updated_at = EXCLUDED.updated_at`

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
		b.Queue(`INSERT INTO index_resources (resource, host, source, description, method, networks, price_usdc, discoverable, seen_pass, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7::numeric, $8, $9, $10)
			ON CONFLICT (resource) DO UPDATE SET host = $2, source = $3, description = $4, method = $5, networks = $6,
				price_usdc = $7::numeric, discoverable = $8, seen_pass = $9, retired = false, updated_at = $10`,
			v.Resource, host, v.Source, v.Description, v.Method, networks, price, v.Discoverable, v.Pass, now)
		return false, nil
	case ResourceRetired:
		b.Queue("UPDATE index_resources SET retired = true, updated_at = $2 WHERE resource = $1", v.Resource, now)
		b.Queue(refreshHosts, []string{host}, now)
		b.Queue(emptyHosts, []string{host}, now)
		return false, nil
	case HostProbed:
		b.Queue(`INSERT INTO index_hosts AS h (host, live, status, latency_ms, checked_at, probe_error)
			VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''))
			ON CONFLICT (host) DO UPDATE SET
				live = CASE WHEN $3::integer = 429 THEN h.live ELSE $2 END,
				status = $3, latency_ms = $4, checked_at = $5, probe_error = NULLIF($6, '')`,
			host, v.Live, v.Status, v.LatencyMS, v.CheckedAt, v.Error)
		return false, nil
	}
	return false, fmt.Errorf("no projection of %s with %T", e.Type, e.Data)
}

// projectCrawl updates index_sources (and the resources seen) for a crawl
// event.
func projectCrawl(b *pgx.Batch, e *NewEvent, _ []byte, now time.Time) (bool, error) {
	switch v := e.Data.(type) {
	case CrawlPage:
		b.Queue(`INSERT INTO index_sources (url, cursor, total, pages_done, pass, last_at)
			VALUES ($1, $2, $3, 1, $4, $5)
			ON CONFLICT (url) DO UPDATE SET cursor = $2, total = $3, pages_done = index_sources.pages_done + 1,
				pass = $4, last_at = $5, failures = 0, backoff_until = NULL, last_error = NULL`,
			v.Source, v.Offset+v.Count, v.Total, v.Pass, now)
		if len(v.Resources) > 0 {
			b.Queue("UPDATE index_resources SET seen_pass = $2 WHERE resource = ANY($1) AND seen_pass <> $2", v.Resources, v.Pass)
		}
		if len(v.Hosts) > 0 {
			b.Queue(refreshHosts, v.Hosts, now)
		}
		return false, nil
	case CrawlPassDone:
		b.Queue(`INSERT INTO index_sources (url, pass, full_scans, last_at, last_full_at) VALUES ($1, $2 + 1, 1, $3, $3)
			ON CONFLICT (url) DO UPDATE SET cursor = 0, pages_done = 0, pass = $2 + 1,
				full_scans = index_sources.full_scans + 1, last_at = $3, last_full_at = $3`,
			v.Source, v.Pass, now)
		return false, nil
	case CrawlFailed:
		b.Queue(`INSERT INTO index_sources (url, failures, backoff_until, last_error, last_at) VALUES ($1, 1, $2, $3, $4)
			ON CONFLICT (url) DO UPDATE SET failures = index_sources.failures + 1, backoff_until = $2, last_error = $3, last_at = $4`,
			v.Source, v.BackoffUntil, v.Error, now)
		return false, nil
	}
	return false, fmt.Errorf("no projection of %s with %T", e.Type, e.Data)
}
