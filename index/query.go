package index

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Host is a host entry of the index (spec 2.2). A nil field was not
// measured; 0 is only a measured zero.
type Host struct {
	Host           string     `json:"host"`
	Services       int        `json:"services"`
	PricedServices int        `json:"priced_services"`
	PriceMinUSDC   *float64   `json:"price_min_usdc"`
	PriceMaxUSDC   *float64   `json:"price_max_usdc"`
	Networks       []string   `json:"networks"`
	SampleResource string     `json:"sample_resource"`
	Sample         string     `json:"sample"`
	Discoverable   bool       `json:"discoverable"`
	Live           *bool      `json:"live"`
	Status         *int       `json:"status"`
	LatencyMS      *int       `json:"latency_ms"`
	CheckedAt      *time.Time `json:"checked_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	// QuoteMatchesListing says whether the 402 of the sample resource, at
	// the last probe that had a verdict, asked what its listing says
	// (network, asset, amount and payTo of every listed option); nil when
	// not compared (no valid quote, or a listing without options).
	QuoteMatchesListing *bool `json:"quote_matches_listing"`
	// Quality sums up the use its listings report of its live services
	// (Bazaar's quality figures); null when none of them reports any.
	Quality *HostQuality `json:"quality"`
	// Evidence is what the chain says of its payTo addresses (the USDC
	// transfers into them); null when none of them is read (no endpoint
	// for its networks, or not read yet).
	Evidence *Evidence `json:"evidence"`
	History
}

// HostQuality is what the listings of a host's live services report of
// their use, over the services that report any (Services of them). A nil
// figure was reported by none.
type HostQuality struct {
	// Services is how many of the host's services report their use.
	Services int `json:"services"`
	// Calls30d is their paid calls over 30 days, summed.
	Calls30d *int64 `json:"calls_30d"`
	// UniquePayers30dMax is the most distinct payers over 30 days of any
	// one of them: payers are not summed, one payer may call many.
	UniquePayers30dMax *int64 `json:"unique_payers_30d_max"`
	// LastCalledAt is the latest call of any of them.
	LastCalledAt *time.Time `json:"last_called_at"`
}

// History is what the event log says of a host over time (its probes by
// hour and its changes). Uptime is the share of probes that found the host
// live, 0 to 1, over the last 24 hours, 7 and 30 days counted by whole
// hours; nil when no probe gave a verdict then (a 429 gives none). The
// latency percentiles are over 30 days, nil when none was measured.
type History struct {
	Uptime24h    *float64   `json:"uptime_24h"`
	Uptime7d     *float64   `json:"uptime_7d"`
	Uptime30d    *float64   `json:"uptime_30d"`
	Probes24h    int        `json:"probes_24h"`
	Probes7d     int        `json:"probes_7d"`
	Probes30d    int        `json:"probes_30d"`
	LatencyP50MS *int       `json:"latency_p50_ms"`
	LatencyP95MS *int       `json:"latency_p95_ms"`
	FirstSeen    *time.Time `json:"first_seen"`
	LastChange   *time.Time `json:"last_change"`
}

// Liveness counts hosts by measurement.
type Liveness struct {
	Measured   int `json:"measured"`
	Live       int `json:"live"`
	Dead       int `json:"dead"`
	Unmeasured int `json:"unmeasured"`
}

// Crawl is the crawl's state over all sources.
type Crawl struct {
	Cursor     int        `json:"cursor"`
	Total      int        `json:"total"`
	PagesDone  int        `json:"pages_done"`
	LastAt     *time.Time `json:"last_at"`
	LastFullAt *time.Time `json:"last_full_at"`
	FullScans  int        `json:"full_scans"`
}

// Summary is the summary record (spec 2.3).
type Summary struct {
	OK              bool              `json:"ok"`
	Version         string            `json:"version"`
	What            string            `json:"what"`
	Read            map[string]string `json:"read"`
	ServicesIndexed int               `json:"services_indexed"`
	HostsKnown      int               `json:"hosts_known"`
	Liveness        Liveness          `json:"liveness"`
	PriceBands      map[string]int    `json:"price_bands"`
	Crawl           Crawl             `json:"crawl"`
	TopBySize       []Host            `json:"top_by_size"`
	Cheapest        []Host            `json:"cheapest_entries"`
	Honesty         string            `json:"honesty"`
}

// Honesty is the note the summary and the page carry.
const Honesty = "null means not measured; 0 is used only for a measured zero. Live means an unpaid request to the host's sample resource answered 402 with a valid x402 quote; nothing was paid. Prices are the listings' own, in USDC; entries without a USDC atomic amount are unpriced."

// hostSorts are the hosts query's sorts, in the order they are offered,
// each with its order. A figure not measured (null) sorts last.
var hostSorts = []struct{ key, order string }{
	{"services", "services DESC, host"},
	{"price", "price_min_usdc ASC NULLS LAST, host"},
	{"latency", "latency_p50_ms ASC NULLS LAST, latency_ms ASC NULLS LAST, host"},
	{"uptime", "uptime_30d DESC NULLS LAST, probes_30d DESC, host"},
	{"calls", "calls_30d DESC NULLS LAST, host"},
	{"host", "host"},
	{"checked", "checked_at DESC NULLS LAST, host"},
	{"volume_24h", evidenceOrder("volume_24h")},
	{"volume_7d", evidenceOrder("volume_7d")},
	{"volume_30d", evidenceOrder("volume_30d")},
	{"transactions_30d", evidenceOrder("transactions_30d")},
	{"payers_30d", evidenceOrder("payers_30d")},
}

// evidenceOrder is the order of a sort by a column of the hosts' kept
// on-chain figures, the highest first, the hosts not measured last.
func evidenceOrder(column string) string {
	return "(SELECT e." + column + " FROM index_host_evidence e WHERE e.host = h.host) DESC NULLS LAST, host"
}

// SortKeys are the values of the hosts query's sort, in the order they are
// offered (the API, its OpenAPI document, the MCP tool and the page).
var SortKeys = func() []string {
	keys := make([]string, len(hostSorts))
	for i, s := range hostSorts {
		keys[i] = s.key
	}
	return keys
}()

// sortOrder returns the ORDER BY of the hosts query's sort key.
func sortOrder(key string) (string, bool) {
	for _, s := range hostSorts {
		if s.key == key {
			return s.order, true
		}
	}
	return "", false
}

// Reader answers the index's queries.
type Reader struct {
	pool    *pgxpool.Pool
	sources []string
}

// NewReader returns a Reader on pool whose crawl state counts the listing
// URLs of sources (the crawler's): a source no longer configured keeps its
// row in index_sources, its passes stopped, and would hold the count of
// full scans of the market for ever. With no sources, every row counts.
func NewReader(pool *pgxpool.Pool, sources []string) *Reader {
	return &Reader{pool: pool, sources: sources}
}

const hostColumns = `host, services, priced_services, price_min_usdc::float8, price_max_usdc::float8, networks,
	sample_resource, sample, discoverable, live, status, latency_ms, checked_at, updated_at,
	uptime_24h, uptime_7d, uptime_30d, probes_24h, probes_7d, probes_30d, latency_p50_ms, latency_p95_ms, first_seen, last_change,
	quote_matches_listing, quality_services, calls_30d, unique_payers_30d_max, last_called_at`

func scanHosts(rows pgx.Rows) ([]Host, error) {
	defer rows.Close()
	hosts := []Host{}
	for rows.Next() {
		var h Host
		var q HostQuality
		if err := rows.Scan(&h.Host, &h.Services, &h.PricedServices, &h.PriceMinUSDC, &h.PriceMaxUSDC, &h.Networks,
			&h.SampleResource, &h.Sample, &h.Discoverable, &h.Live, &h.Status, &h.LatencyMS, &h.CheckedAt, &h.UpdatedAt,
			&h.Uptime24h, &h.Uptime7d, &h.Uptime30d, &h.Probes24h, &h.Probes7d, &h.Probes30d, &h.LatencyP50MS, &h.LatencyP95MS,
			&h.FirstSeen, &h.LastChange, &h.QuoteMatchesListing, &q.Services, &q.Calls30d, &q.UniquePayers30dMax, &q.LastCalledAt); err != nil {
			return nil, err
		}
		if q.Services > 0 {
			h.Quality = &q
		}
		hosts = append(hosts, h)
	}
	return hosts, rows.Err()
}

// Hosts returns up to limit hosts matching q, in sort order (a key of
// SortKeys). q matches, case-insensitively, the host name, its sample, and the
// URL and description of any of its resources.
func (r *Reader) Hosts(ctx context.Context, q, sort string, limit int) ([]Host, error) {
	return r.Find(ctx, HostQuery{Q: q, Sort: sort, Limit: limit})
}

// quoteFilters are the values of the hosts query's quote_matches_listing
// filter and their condition.
var quoteFilters = map[string]string{
	"true":  "quote_matches_listing",
	"false": "NOT quote_matches_listing",
	"null":  "quote_matches_listing IS NULL",
}

// Find returns the hosts q asks for (see Hosts), which Check has accepted.
func (r *Reader) Find(ctx context.Context, q HostQuery) ([]Host, error) {
	order, ok := sortOrder(q.Sort)
	if !ok {
		return nil, fmt.Errorf("index: unknown sort %q", q.Sort)
	}
	query := "SELECT " + hostColumns + " FROM index_hosts h WHERE services > 0"
	args := []any{q.Limit}
	if cond, ok := quoteFilters[q.QuoteMatchesListing]; ok {
		query += " AND " + cond
	}
	if cond, ok := q.evidenceFilter(); ok {
		query += " AND h.host IN (SELECT e.host FROM index_host_evidence e WHERE " + cond + ")"
	}
	if text := strings.ToLower(strings.TrimSpace(q.Q)); text != "" {
		pattern := "%" + strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(text) + "%"
		query += ` AND (h.search LIKE $2 OR h.host IN (SELECT r.host FROM index_resources r WHERE NOT r.retired AND r.search LIKE $2))`
		args = append(args, pattern)
	}
	rows, err := r.pool.Query(ctx, query+" ORDER BY "+order+" LIMIT $1", args...)
	if err != nil {
		return nil, fmt.Errorf("index: hosts: %w", err)
	}
	hosts, err := scanHosts(rows)
	if err != nil {
		return nil, fmt.Errorf("index: hosts: %w", err)
	}
	if err := r.withEvidence(ctx, hosts); err != nil {
		return nil, err
	}
	return hosts, nil
}

// Totals are the figures the hosts query answers beside its hosts.
type Totals struct {
	ServicesIndexed int        `json:"services_indexed"`
	HostsKnown      int        `json:"hosts_known"`
	LastAt          *time.Time `json:"last_at"`
}

// Totals returns the numbers of services and hosts and the time of the
// last crawl.
func (r *Reader) Totals(ctx context.Context) (*Totals, error) {
	var t Totals
	// A host's services are the count of its live resources: the hosts'
	// sum is the services indexed, read from a tenth of the rows.
	err := r.pool.QueryRow(ctx, `SELECT coalesce(sum(services), 0), count(*), (SELECT max(last_at) FROM index_sources)
		FROM index_hosts WHERE services > 0`).
		Scan(&t.ServicesIndexed, &t.HostsKnown, &t.LastAt)
	if err != nil {
		return nil, fmt.Errorf("index: totals: %w", err)
	}
	return &t, nil
}

// Summary returns the summary record.
func (r *Reader) Summary(ctx context.Context) (*Summary, error) {
	s := &Summary{
		OK: true, Version: "xindex-1.0",
		What: "A public index of x402 sellers: every resource listed by the x402 discovery listings, grouped by host, with measured liveness.",
		Read: map[string]string{
			"summary": "/api/xindex/summary",
			"hosts":   "/api/xindex/hosts?q={text}&limit={1-500}&sort={" + strings.Join(SortKeys, "|") + "}&quote_matches_listing={true|false|null}&min_payers={n}&min_volume_usdc={USDC}&max_top_payer_share={0-1}",
			"host":    "/api/xindex/hosts/{host}",
			"changes": "/api/xindex/changes?since={cursor|time}&limit={1-500}",
			"atom":    "/api/xindex/changes.atom",
			"page":    "/x402-index",
		},
		PriceBands: map[string]int{},
		Honesty:    Honesty,
	}
	var free, m1, m10, m100, u1, o1 int
	// One pass over the hosts: each keeps the count of its live services
	// and of its priced ones by band (store: refreshHosts,
	// index_host_price_bands), recounted in the transaction that changes
	// its resources.
	err := r.pool.QueryRow(ctx, `SELECT coalesce(sum(services), 0), count(*),
		count(live), count(*) FILTER (WHERE live), count(*) FILTER (WHERE NOT live), count(*) FILTER (WHERE live IS NULL),
		coalesce(sum(band_free), 0), coalesce(sum(band_under_1m), 0), coalesce(sum(band_under_10m), 0),
		coalesce(sum(band_under_100m), 0), coalesce(sum(band_under_1), 0), coalesce(sum(band_over_1), 0)
		FROM index_hosts WHERE services > 0`).Scan(
		&s.ServicesIndexed, &s.HostsKnown, &s.Liveness.Measured, &s.Liveness.Live, &s.Liveness.Dead, &s.Liveness.Unmeasured,
		&free, &m1, &m10, &m100, &u1, &o1)
	if err != nil {
		return nil, fmt.Errorf("index: summary: %w", err)
	}
	s.PriceBands = map[string]int{"free": free, "under_1m": m1, "under_10m": m10, "under_100m": m100, "under_1": u1, "over_1": o1}
	// A full scan of the market is a full pass of every source: the
	// slowest source counts.
	err = r.pool.QueryRow(ctx, `SELECT coalesce(sum(cursor), 0), coalesce(sum(total), 0), coalesce(sum(pages_done), 0), max(last_at),
		CASE WHEN bool_and(last_full_at IS NOT NULL) THEN min(last_full_at) END, coalesce(min(full_scans), 0)
		FROM index_sources WHERE (coalesce(cardinality($1::text[]), 0) = 0 AND url NOT LIKE 'origin:%') OR url = ANY($1)`, r.sources).Scan(&s.Crawl.Cursor, &s.Crawl.Total, &s.Crawl.PagesDone, &s.Crawl.LastAt, &s.Crawl.LastFullAt, &s.Crawl.FullScans)
	if err != nil {
		return nil, fmt.Errorf("index: crawl state: %w", err)
	}
	if s.TopBySize, err = r.Hosts(ctx, "", "services", 10); err != nil {
		return nil, err
	}
	rows, err := r.pool.Query(ctx, "SELECT "+hostColumns+" FROM index_hosts WHERE services > 0 AND price_min_usdc IS NOT NULL ORDER BY price_min_usdc, host LIMIT 10")
	if err != nil {
		return nil, fmt.Errorf("index: cheapest: %w", err)
	}
	if s.Cheapest, err = scanHosts(rows); err != nil {
		return nil, fmt.Errorf("index: cheapest: %w", err)
	}
	if err := r.withEvidence(ctx, s.Cheapest); err != nil {
		return nil, err
	}
	return s, nil
}

// The bounds of a page of hosts.
const (
	// DefaultHostsLimit is a page's number of hosts when none is asked.
	DefaultHostsLimit = 50
	// MaxHostsLimit is the most hosts a page holds.
	MaxHostsLimit = 500
)

// HostQuery is a query of the hosts list, as the HTTP API
// (/api/xindex/hosts) and the MCP tool index_search take it.
type HostQuery struct {
	// Q filters hosts by text (at most 200 characters).
	Q string `json:"q,omitempty"`
	// Sort is one of SortKeys. Defaults to "services".
	Sort string `json:"sort,omitempty"`
	// Limit is the number of hosts, 1 to MaxHostsLimit. Defaults to
	// DefaultHostsLimit.
	Limit int `json:"limit,omitempty"`
	// QuoteMatchesListing keeps the hosts whose last quote matched their
	// listing ("true"), did not ("false"), or was not compared ("null").
	// Empty: every host.
	QuoteMatchesListing string `json:"quote_matches_listing,omitempty"`
	// MinPayers keeps the hosts with at least this many distinct payers on
	// chain over 30 days (hosts not measured are left out). 0: every host.
	MinPayers int `json:"min_payers,omitempty"`
	// MinVolumeUSDC keeps the hosts that received at least this much USDC
	// on chain over 30 days (decimal text; hosts not measured are left
	// out). Empty: every host.
	MinVolumeUSDC string `json:"min_volume_usdc,omitempty"`
	// MaxTopPayerShare keeps the hosts whose top payer paid at most this
	// share (0 to 1) of their 30 days' volume on chain (hosts not measured,
	// or without volume, are left out). Nil: every host.
	MaxTopPayerShare *float64 `json:"max_top_payer_share,omitempty"`
}

// evidenceFilter returns the condition on index_host_evidence e of q's
// filters on the on-chain figures, which Check has accepted; false when q
// has none.
func (q *HostQuery) evidenceFilter() (string, bool) {
	var conds []string
	if q.MinPayers > 0 {
		conds = append(conds, fmt.Sprintf("e.payers_30d >= %d", q.MinPayers))
	}
	if q.MinVolumeUSDC != "" {
		// Checked to be a decimal number: atomic units of USDC.
		conds = append(conds, "e.volume_30d >= "+q.MinVolumeUSDC+" * 1000000")
	}
	if q.MaxTopPayerShare != nil {
		conds = append(conds, fmt.Sprintf("e.top_payer_share_30d <= %g", *q.MaxTopPayerShare))
	}
	return strings.Join(conds, " AND "), len(conds) > 0
}

// usdcAmount is a decimal amount of USDC: at most 12 digits and 6
// decimals.
var usdcAmount = regexp.MustCompile(`^[0-9]{1,12}(\.[0-9]{1,6})?$`)

// QueryError names the field of a HostQuery that is out of bounds.
type QueryError struct {
	Field, Message string
}

func (e *QueryError) Error() string { return e.Field + ": " + e.Message }

// Check fills the defaults of q and checks its bounds, returning a
// *QueryError for the first field out of them.
func (q *HostQuery) Check() error {
	if q.Sort == "" {
		q.Sort = "services"
	}
	if _, ok := sortOrder(q.Sort); !ok {
		return &QueryError{Field: "sort", Message: "sort must be one of " + strings.Join(SortKeys, ", ")}
	}
	if q.Limit == 0 {
		q.Limit = DefaultHostsLimit
	}
	if q.Limit < 1 || q.Limit > MaxHostsLimit {
		return &QueryError{Field: "limit", Message: fmt.Sprintf("limit must be between 1 and %d", MaxHostsLimit)}
	}
	if len(q.Q) > 200 {
		return &QueryError{Field: "q", Message: "q is at most 200 characters"}
	}
	if _, ok := quoteFilters[q.QuoteMatchesListing]; q.QuoteMatchesListing != "" && !ok {
		return &QueryError{Field: "quote_matches_listing", Message: "quote_matches_listing must be true, false or null"}
	}
	if q.MinPayers < 0 {
		return &QueryError{Field: "min_payers", Message: "min_payers must be 0 or more"}
	}
	if q.MinVolumeUSDC != "" && !usdcAmount.MatchString(q.MinVolumeUSDC) {
		return &QueryError{Field: "min_volume_usdc", Message: "min_volume_usdc must be a decimal number of USDC, at most 6 decimals"}
	}
	if s := q.MaxTopPayerShare; s != nil && !(*s >= 0 && *s <= 1) {
		return &QueryError{Field: "max_top_payer_share", Message: "max_top_payer_share must be between 0 and 1"}
	}
	return nil
}

// HostsAnswer is the answer to a hosts query: the hosts with the index's
// totals.
type HostsAnswer struct {
	OK      bool    `json:"ok"`
	Hosts   []Host  `json:"hosts"`
	Summary *Totals `json:"summary"`
}

// Search answers q, which Check has accepted.
func (r *Reader) Search(ctx context.Context, q HostQuery) (*HostsAnswer, error) {
	hosts, err := r.Find(ctx, q)
	if err != nil {
		return nil, err
	}
	totals, err := r.Totals(ctx)
	if err != nil {
		return nil, err
	}
	if hosts == nil {
		hosts = []Host{}
	}
	return &HostsAnswer{OK: true, Hosts: hosts, Summary: totals}, nil
}
