package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// IndexHost is a host entry of the index (spec 2.2), as index_hosts keeps
// it. A nil field was not measured; 0 is only a measured zero.
type IndexHost struct {
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
	// for its networks, or not read yet). The index sets it.
	Evidence *Evidence `json:"evidence"`
	HostHistory
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

// HostHistory is what the event log says of a host over time (its probes
// by hour and its changes). Uptime is the share of probes that found the
// host live, 0 to 1, over the last 24 hours, 7 and 30 days counted by whole
// hours; nil when no probe gave a verdict then (a 429 gives none). The
// latency percentiles are over 30 days, nil when none was measured.
type HostHistory struct {
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

// hostSorts are the hosts list's sorts, in the order they are offered,
// each with its order, or the column of the hosts' kept on-chain figures
// (index_host_evidence) it is by, the highest first. A figure not measured
// (null) sorts last.
var hostSorts = []struct{ key, order, evidence string }{
	{"services", "services DESC, host", ""},
	{"price", "price_min_usdc ASC NULLS LAST, host", ""},
	{"latency", "latency_p50_ms ASC NULLS LAST, latency_ms ASC NULLS LAST, host", ""},
	{"uptime", "uptime_30d DESC NULLS LAST, probes_30d DESC, host", ""},
	{"calls", "calls_30d DESC NULLS LAST, host", ""},
	{"host", "host", ""},
	{"checked", "checked_at DESC NULLS LAST, host", ""},
	{"volume_24h", "", "volume_24h"},
	{"volume_7d", "", "volume_7d"},
	{"volume_30d", "", "volume_30d"},
	{"transactions_30d", "", "transactions_30d"},
	{"payers_30d", "", "payers_30d"},
}

// evidenceOrder is the order of a sort by a column of the hosts' kept
// on-chain figures, the highest first, those not measured last: of the
// host named by host, ties in the order of tie: the resources search's
// sorts by its host's figures (resourceSorts), named after their columns
// as the hosts list's are (hostSorts, which reads the measured hosts in
// the order of the column's index instead).
func evidenceOrder(column, host, tie string) string {
	return "(SELECT e." + column + " FROM index_host_evidence e WHERE e.host = " + host + ") DESC NULLS LAST, " + tie
}

// EvidenceMinPayers is the condition on a host's kept on-chain figures
// (index_host_evidence e) of the hosts list's and the resources search's
// min_payers: at least n distinct payers over 30 days, those not measured
// left out.
func EvidenceMinPayers(n int) string {
	return fmt.Sprintf("e.payers_30d >= %d", n)
}

// HostSortKeys returns the sorts of the hosts list, in the order they are
// offered.
func HostSortKeys() []string {
	keys := make([]string, len(hostSorts))
	for i, s := range hostSorts {
		keys[i] = s.key
	}
	return keys
}

// hostQuoteFilters are the values of the hosts list's
// quote_matches_listing filter and their condition.
var hostQuoteFilters = map[string]string{
	"true":  "quote_matches_listing",
	"false": "NOT quote_matches_listing",
	"null":  "quote_matches_listing IS NULL",
}

// HostQuoteFilterKnown reports whether v is a value of the hosts list's
// quote_matches_listing filter ("true", "false", "null").
func HostQuoteFilterKnown(v string) bool {
	_, ok := hostQuoteFilters[v]
	return ok
}

// HostListParams selects hosts with services.
type HostListParams struct {
	// Q matches, case-insensitively, the host name, its sample, and the
	// URL and description of any of its live resources.
	Q string
	// Sort is one of HostSortKeys.
	Sort string
	// QuoteMatchesListing is a HostQuoteFilterKnown value, or empty.
	QuoteMatchesListing string
	// PricedOnly keeps the hosts with a priced service.
	PricedOnly bool
	// Evidence is a condition on the host's kept on-chain figures
	// (index_host_evidence e), built by the caller from checked values
	// only; empty: none.
	Evidence string
	Limit    int
}

// indexHostColumns are the columns of an IndexHost, of index_hosts h.
const indexHostColumns = `h.host, h.services, h.priced_services, h.price_min_usdc::float8, h.price_max_usdc::float8, h.networks,
	h.sample_resource, h.sample, h.discoverable, h.live, h.status, h.latency_ms, h.checked_at, h.updated_at,
	h.uptime_24h, h.uptime_7d, h.uptime_30d, h.probes_24h, h.probes_7d, h.probes_30d, h.latency_p50_ms, h.latency_p95_ms,
	h.first_seen, h.last_change, h.quote_matches_listing, h.quality_services, h.calls_30d, h.unique_payers_30d_max, h.last_called_at`

func scanIndexHosts(rows pgx.Rows) ([]IndexHost, error) {
	defer rows.Close()
	hosts := []IndexHost{}
	for rows.Next() {
		var h IndexHost
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

// likePattern returns the LIKE pattern matching text anywhere, lower-case.
func likePattern(text string) string {
	return "%" + strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(strings.ToLower(text)) + "%"
}

// HostList returns up to p.Limit hosts with services, in p.Sort's order.
//
// A sort by an on-chain figure reads the measured hosts in the order of
// the figure's index (index_host_evidence_<figure>, migration 033), then,
// when fewer than p.Limit are, the hosts not measured by name: ordering
// every host by a figure looked up for each read all of them (10,000 at
// the scale: 90 ms). The two are read by two statements: a host
// measured or forgotten between them may be missing from the page, or in
// it once.
func HostList(ctx context.Context, db DBTX, p *HostListParams) ([]IndexHost, error) {
	i := slices.IndexFunc(hostSorts, func(s struct{ key, order, evidence string }) bool { return s.key == p.Sort })
	if i < 0 {
		return nil, fmt.Errorf("hosts: unknown sort %q", p.Sort)
	}
	sort := hostSorts[i]
	where := " WHERE h.services > 0"
	args := []any{p.Limit}
	if cond, ok := hostQuoteFilters[p.QuoteMatchesListing]; ok {
		where += " AND " + cond
	}
	if p.PricedOnly {
		where += " AND h.price_min_usdc IS NOT NULL"
	}
	if text := strings.TrimSpace(p.Q); text != "" {
		where += ` AND (h.search LIKE $2 OR h.host IN (SELECT r.host FROM index_resources r WHERE NOT r.retired AND r.search LIKE $2))`
		args = append(args, likePattern(text))
	}
	list := func(query string, args ...any) ([]IndexHost, error) {
		rows, err := db.Query(ctx, query, args...)
		if err != nil {
			return nil, fmt.Errorf("hosts: %w", err)
		}
		hosts, err := scanIndexHosts(rows)
		if err != nil {
			return nil, fmt.Errorf("hosts: %w", err)
		}
		return hosts, nil
	}
	if sort.evidence == "" {
		if p.Evidence != "" {
			where += " AND h.host IN (SELECT e.host FROM index_host_evidence e WHERE " + p.Evidence + ")"
		}
		return list("SELECT "+indexHostColumns+" FROM index_hosts h"+where+" ORDER BY "+sort.order+" LIMIT $1", args...)
	}
	measured := where
	if p.Evidence != "" {
		measured += " AND " + p.Evidence
	}
	hosts, err := list("SELECT "+indexHostColumns+" FROM index_hosts h JOIN index_host_evidence e ON e.host = h.host"+measured+
		" ORDER BY e."+sort.evidence+" DESC, h.host LIMIT $1", args...)
	if err != nil || len(hosts) == p.Limit || p.Evidence != "" {
		return hosts, err
	}
	args[0] = p.Limit - len(hosts)
	rest, err := list("SELECT "+indexHostColumns+" FROM index_hosts h"+where+
		" AND NOT EXISTS (SELECT 1 FROM index_host_evidence e WHERE e.host = h.host) ORDER BY h.host LIMIT $1", args...)
	if err != nil {
		return nil, err
	}
	for _, h := range rest {
		if !slices.ContainsFunc(hosts, func(m IndexHost) bool { return m.Host == h.Host }) {
			hosts = append(hosts, h)
		}
	}
	return hosts, nil
}

// HostGet returns the entry of host, or ErrNotFound.
func HostGet(ctx context.Context, db DBTX, host string) (*IndexHost, error) {
	rows, err := db.Query(ctx, "SELECT "+indexHostColumns+" FROM index_hosts h WHERE h.host = $1", host)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", host, err)
	}
	hosts, err := scanIndexHosts(rows)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", host, err)
	}
	if len(hosts) == 0 {
		return nil, ErrNotFound
	}
	return &hosts[0], nil
}

// HostQuoteDifferencesGet returns how the sample resource's 402 of host
// differed from its listing at the last probe that compared them.
func HostQuoteDifferencesGet(ctx context.Context, db DBTX, host string) ([]QuoteDifference, error) {
	var d []QuoteDifference
	if err := db.QueryRow(ctx, "SELECT coalesce(quote_differences, '[]') FROM index_hosts WHERE host = $1", host).Scan(&d); err != nil {
		return nil, fmt.Errorf("quote of %s: %w", host, err)
	}
	return d, nil
}

// IndexTotals are the figures the hosts list answers beside its hosts.
type IndexTotals struct {
	ServicesIndexed int        `json:"services_indexed"`
	HostsKnown      int        `json:"hosts_known"`
	LastAt          *time.Time `json:"last_at"`
}

// IndexTotalsGet returns the numbers of services and hosts and the time of
// the last crawl.
func IndexTotalsGet(ctx context.Context, db DBTX) (*IndexTotals, error) {
	var t IndexTotals
	// A host's services are the count of its live resources: the hosts'
	// sum is the services indexed, read from a tenth of the rows.
	err := db.QueryRow(ctx, `SELECT coalesce(sum(services), 0), count(*), (SELECT max(last_at) FROM index_sources)
		FROM index_hosts WHERE services > 0`).
		Scan(&t.ServicesIndexed, &t.HostsKnown, &t.LastAt)
	if err != nil {
		return nil, fmt.Errorf("index totals: %w", err)
	}
	return &t, nil
}

// IndexLiveness counts hosts by measurement.
type IndexLiveness struct {
	Measured   int `json:"measured"`
	Live       int `json:"live"`
	Dead       int `json:"dead"`
	Unmeasured int `json:"unmeasured"`
}

// IndexCounts are the summary's counts over the hosts with services.
type IndexCounts struct {
	Services, Hosts int
	Liveness        IndexLiveness
	// PriceBands counts priced services by band: free, under_1m,
	// under_10m, under_100m, under_1, over_1 (USDC).
	PriceBands map[string]int
}

// IndexCountsGet returns the summary's counts, in one pass over the
// hosts: each keeps the count of its live services and of its priced ones
// by band (refreshHosts, index_host_price_bands), recounted in the
// transaction that changes its resources.
func IndexCountsGet(ctx context.Context, db DBTX) (*IndexCounts, error) {
	var c IndexCounts
	var free, m1, m10, m100, u1, o1 int
	err := db.QueryRow(ctx, `SELECT coalesce(sum(services), 0), count(*),
		count(live), count(*) FILTER (WHERE live), count(*) FILTER (WHERE NOT live), count(*) FILTER (WHERE live IS NULL),
		coalesce(sum(band_free), 0), coalesce(sum(band_under_1m), 0), coalesce(sum(band_under_10m), 0),
		coalesce(sum(band_under_100m), 0), coalesce(sum(band_under_1), 0), coalesce(sum(band_over_1), 0)
		FROM index_hosts WHERE services > 0`).Scan(
		&c.Services, &c.Hosts, &c.Liveness.Measured, &c.Liveness.Live, &c.Liveness.Dead, &c.Liveness.Unmeasured,
		&free, &m1, &m10, &m100, &u1, &o1)
	if err != nil {
		return nil, fmt.Errorf("index summary: %w", err)
	}
	c.PriceBands = map[string]int{"free": free, "under_1m": m1, "under_10m": m10, "under_100m": m100, "under_1": u1, "over_1": o1}
	return &c, nil
}

// IndexCrawl is the crawl's state over all sources.
type IndexCrawl struct {
	Cursor     int        `json:"cursor"`
	Total      int        `json:"total"`
	PagesDone  int        `json:"pages_done"`
	LastAt     *time.Time `json:"last_at"`
	LastFullAt *time.Time `json:"last_full_at"`
	FullScans  int        `json:"full_scans"`
}

// IndexCrawlGet returns the crawl's state over the listing URLs sources
// (with none, over every listing, origins left out). A full scan of the
// market is a full pass of every source: the slowest source counts.
func IndexCrawlGet(ctx context.Context, db DBTX, sources []string) (*IndexCrawl, error) {
	var c IndexCrawl
	err := db.QueryRow(ctx, `SELECT coalesce(sum(cursor), 0), coalesce(sum(total), 0), coalesce(sum(pages_done), 0), max(last_at),
		CASE WHEN bool_and(last_full_at IS NOT NULL) THEN min(last_full_at) END, coalesce(min(full_scans), 0)
		FROM index_sources WHERE (coalesce(cardinality($1::text[]), 0) = 0 AND url NOT LIKE 'origin:%') OR url = ANY($1)`, sources).
		Scan(&c.Cursor, &c.Total, &c.PagesDone, &c.LastAt, &c.LastFullAt, &c.FullScans)
	if err != nil {
		return nil, fmt.Errorf("crawl state: %w", err)
	}
	return &c, nil
}

// IndexService is one live resource of a host as its page shows it.
type IndexService struct {
	Resource     string   `json:"resource"`
	Method       string   `json:"method"`
	Description  string   `json:"description"`
	PriceUSDC    *float64 `json:"price_usdc"`
	Networks     []string `json:"networks"`
	Discoverable bool     `json:"discoverable"`
	// Sources are the listings (or origins) that list it now.
	Sources []string `json:"sources"`
	// Accepts are the payment options its listing asks; empty when the
	// listing was read before they were recorded.
	Accepts []Accept `json:"accepts"`
	// UpdatedAt is when its listing last changed.
	UpdatedAt time.Time `json:"updated_at"`
	// Quality is the use its listing reports (Bazaar's quality figures);
	// null when no listing of it reports any.
	Quality *Quality `json:"quality"`
	// VerifiedPayTo are the receivers of its options its origin proved it
	// controls; empty when none.
	VerifiedPayTo []string `json:"verified_pay_to"`
}

// HostServiceList returns the live resources of host, the cheapest first,
// at most limit.
func HostServiceList(ctx context.Context, db DBTX, host string, limit int) ([]IndexService, error) {
	rows, err := db.Query(ctx, `SELECT r.resource, r.method, r.description, r.price_usdc::float8, r.networks, r.discoverable,
			coalesce((SELECT array_agg(l.source ORDER BY l.source) FROM index_listings l WHERE l.resource = r.resource), '{}'),
			coalesce(r.accepts, '[]'), r.updated_at, r.quality_calls_30d, r.quality_unique_payers_30d, r.quality_last_called_at,
			`+resourceVerified+`
		FROM index_resources r WHERE r.host = $1 AND NOT r.retired ORDER BY r.price_usdc NULLS LAST, r.resource LIMIT $2`, host, limit)
	if err != nil {
		return nil, fmt.Errorf("services of %s: %w", host, err)
	}
	services, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (IndexService, error) {
		var s IndexService
		var q Quality
		err := row.Scan(&s.Resource, &s.Method, &s.Description, &s.PriceUSDC, &s.Networks, &s.Discoverable, &s.Sources, &s.Accepts, &s.UpdatedAt,
			&q.Calls30d, &q.UniquePayers30d, &q.LastCalledAt, &s.VerifiedPayTo)
		if q.Calls30d != nil || q.UniquePayers30d != nil || q.LastCalledAt != nil {
			s.Quality = &q
		}
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("services of %s: %w", host, err)
	}
	if services == nil {
		services = []IndexService{}
	}
	return services, nil
}

// ProbeHour is what the probes of one hour found: how many gave a verdict,
// how many found the host live, and the median latency measured (nil when
// none was).
type ProbeHour struct {
	Hour         time.Time `json:"hour"`
	Probes       int       `json:"probes"`
	Live         int       `json:"live"`
	LatencyP50MS *int      `json:"latency_p50_ms"`
}

// HostProbeHourList returns the probes of host by hour over 30 days (only
// the hours with probes), oldest first.
func HostProbeHourList(ctx context.Context, db DBTX, host string) ([]ProbeHour, error) {
	rows, err := db.Query(ctx, `SELECT hour, probes, live,
			(SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY l) FROM unnest(latencies) l)
		FROM index_probe_hours WHERE host = $1 AND hour > date_trunc('hour', now()) - interval '30 days' ORDER BY hour`, host)
	if err != nil {
		return nil, fmt.Errorf("probes of %s: %w", host, err)
	}
	hours, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ProbeHour])
	if err != nil {
		return nil, fmt.Errorf("probes of %s: %w", host, err)
	}
	if hours == nil {
		hours = []ProbeHour{}
	}
	return hours, nil
}

// IndexChange is one row of index_changes: a service added or retired, a
// price or the networks of a service changed, a host gone live or dead.
// From and To are JSON: a price as decimal text in USDC (null: unpriced),
// networks as a list, liveness as a boolean (null: not measured before).
type IndexChange struct {
	ID       int64           `json:"-"`
	At       time.Time       `json:"at"`
	Host     string          `json:"host"`
	Kind     string          `json:"kind"`
	Resource *string         `json:"resource"`
	From     json.RawMessage `json:"from"`
	To       json.RawMessage `json:"to"`
}

const indexChangeColumns = `id, at, host, kind, resource, "from", "to"`

func scanIndexChanges(rows pgx.Rows) ([]IndexChange, error) {
	changes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (IndexChange, error) {
		var c IndexChange
		err := row.Scan(&c.ID, &c.At, &c.Host, &c.Kind, &c.Resource, &c.From, &c.To)
		return c, err
	})
	if changes == nil {
		changes = []IndexChange{}
	}
	return changes, err
}

// ChangeCursorAt returns the id of the last change before t (0: none): the
// cursor of the changes from t. Ids grow with time.
func ChangeCursorAt(ctx context.Context, db DBTX, t time.Time) (int64, error) {
	var after int64
	if err := db.QueryRow(ctx, `SELECT coalesce((SELECT id FROM index_changes WHERE at < $1 ORDER BY at DESC, id DESC LIMIT 1), 0)`,
		t).Scan(&after); err != nil {
		return 0, fmt.Errorf("changes since %s: %w", t.Format(time.RFC3339), err)
	}
	return after, nil
}

// ChangeList returns up to limit changes after the cursor after, of host
// when it is not empty, oldest first.
func ChangeList(ctx context.Context, db DBTX, after int64, host string, limit int) ([]IndexChange, error) {
	query := "SELECT " + indexChangeColumns + " FROM index_changes WHERE id > $1"
	args := []any{after, limit}
	if host != "" {
		query += " AND host = $3"
		args = append(args, host)
	}
	rows, err := db.Query(ctx, query+" ORDER BY id LIMIT $2", args...)
	if err != nil {
		return nil, fmt.Errorf("changes: %w", err)
	}
	changes, err := scanIndexChanges(rows)
	if err != nil {
		return nil, fmt.Errorf("changes: %w", err)
	}
	return changes, nil
}

// ChangeLatestList returns the latest limit changes by the time they
// happened, newest first, of host when it is not empty.
func ChangeLatestList(ctx context.Context, db DBTX, host string, limit int) ([]IndexChange, error) {
	query := "SELECT " + indexChangeColumns + " FROM index_changes"
	args := []any{limit}
	if host != "" {
		query += " WHERE host = $2"
		args = append(args, host)
	}
	rows, err := db.Query(ctx, query+" ORDER BY at DESC, id DESC LIMIT $1", args...)
	if err != nil {
		return nil, fmt.Errorf("latest changes: %w", err)
	}
	changes, err := scanIndexChanges(rows)
	if err != nil {
		return nil, fmt.Errorf("latest changes: %w", err)
	}
	return changes, nil
}

// IndexSourceState is where the crawl of a source stands: its cursor in
// its pass, its failures in a row and the end of its backoff.
type IndexSourceState struct {
	Cursor, Pass, Failures int
	BackoffUntil           *time.Time
}

// IndexSourceStateGet returns the state of the source src (a new source:
// cursor 0 of pass 1).
func IndexSourceStateGet(ctx context.Context, db DBTX, src string) (IndexSourceState, error) {
	st := IndexSourceState{Pass: 1}
	err := db.QueryRow(ctx, "SELECT cursor, pass, failures, backoff_until FROM index_sources WHERE url = $1", src).
		Scan(&st.Cursor, &st.Pass, &st.Failures, &st.BackoffUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("state of %s: %w", src, err)
	}
	return st, nil
}

// IndexListingLastAt returns the time of the last page read of any
// listing (origins left out), nil when none was read.
func IndexListingLastAt(ctx context.Context, db DBTX) (*time.Time, error) {
	var last *time.Time
	if err := db.QueryRow(ctx, `SELECT max(last_at) FROM index_sources WHERE url NOT LIKE 'origin:%'`).Scan(&last); err != nil {
		return nil, fmt.Errorf("last crawl: %w", err)
	}
	return last, nil
}

// IndexedResource is what the index keeps of a resource, as the crawl
// compares a listing with it.
type IndexedResource struct {
	Host, Description, Method string
	// Price is the price in USDC as decimal text, empty when unpriced.
	Price        string
	Networks     []string
	Discoverable bool
	Retired      bool
	// SeenInPass is set when the source asked about listed it in the pass
	// asked about.
	SeenInPass bool
	Accepts    []Accept
	// Elsewhere is set when a source other than the one asked about lists
	// it.
	Elsewhere bool
	Quality   *Quality
	Tags      []string
	// InputSchema, OutputSchema and Extensions are as the projection
	// keeps them (jsonb: compact, keys sorted).
	InputSchema, OutputSchema, Extensions json.RawMessage
	X402Version                           int
	MimeType                              string
	// SampleOf is the host whose sample resource it is ("" when none) and
	// QuoteAccepts the options of that host's last 402 (nil when none was
	// read); QuotePending says that 402's comparison waits for the listing
	// to be read again (HostProbed.QuotePending).
	SampleOf     string
	QuoteAccepts []Accept
	QuotePending bool
}

// ResourceIndexedList returns what the index keeps of the resources urls
// (those it has), by URL, as seen from the source src in its pass.
func ResourceIndexedList(ctx context.Context, db DBTX, urls []string, src string, pass int) (map[string]IndexedResource, error) {
	existing := map[string]IndexedResource{}
	rows, err := db.Query(ctx, `SELECT r.resource, r.host, r.description, r.method, r.networks, coalesce(r.price_usdc::text, ''),
			r.discoverable, r.retired, coalesce(l.seen_pass = $3, false), r.accepts,
			EXISTS (SELECT 1 FROM index_listings o WHERE o.resource = r.resource AND o.source <> $2),
			r.quality_calls_30d, r.quality_unique_payers_30d, r.quality_last_called_at,
			r.tags, r.input_schema, r.output_schema, r.extensions, r.x402_version, r.mime_type,
			coalesce(h.host, ''), h.quote_accepts, coalesce(h.quote_pending, false)
		FROM index_resources r LEFT JOIN index_listings l ON l.resource = r.resource AND l.source = $2
		LEFT JOIN index_hosts h ON h.host = r.host AND h.sample_resource = r.resource
		WHERE r.resource = ANY($1)`, urls, src, pass)
	if err != nil {
		return nil, fmt.Errorf("read resources: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var url string
		var k IndexedResource
		var q Quality
		if err := rows.Scan(&url, &k.Host, &k.Description, &k.Method, &k.Networks, &k.Price, &k.Discoverable, &k.Retired, &k.SeenInPass, &k.Accepts, &k.Elsewhere,
			&q.Calls30d, &q.UniquePayers30d, &q.LastCalledAt,
			&k.Tags, &k.InputSchema, &k.OutputSchema, &k.Extensions, &k.X402Version, &k.MimeType, &k.SampleOf, &k.QuoteAccepts, &k.QuotePending); err != nil {
			return nil, fmt.Errorf("read resources: %w", err)
		}
		if q.Calls30d != nil || q.UniquePayers30d != nil || q.LastCalledAt != nil {
			k.Quality = &q
		}
		existing[url] = k
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read resources: %w", err)
	}
	return existing, nil
}

// retireLock serialises the ends of passes, so that two sources dropping
// the same resource at the same moment cannot each count on the other's
// listing.
const retireLock int64 = 0x7834303269 // "x402i"

// ResourceUnlistedList returns, in tx, the resource.retired events of the
// resources that src's pass no longer listed (neither on an earlier page
// nor on its last one, pageURLs) and that no other source lists. It holds
// the lock of the ends of passes until tx ends.
func ResourceUnlistedList(ctx context.Context, tx pgx.Tx, src string, pass int, pageURLs []string) ([]NewEvent, error) {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", retireLock); err != nil {
		return nil, fmt.Errorf("lock pass end: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT r.resource, r.host FROM index_listings l JOIN index_resources r ON r.resource = l.resource
		WHERE l.source = $1 AND l.seen_pass < $2 AND l.resource <> ALL($3) AND NOT r.retired
		  AND NOT EXISTS (SELECT 1 FROM index_listings o WHERE o.resource = l.resource AND o.source <> $1)
		ORDER BY r.resource`, src, pass, pageURLs)
	if err != nil {
		return nil, fmt.Errorf("find retired resources: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (NewEvent, error) {
		var r ResourceRetired
		err := row.Scan(&r.Resource, &r.Host)
		return NewEvent{Stream: HostStream(r.Host), Type: EventResourceRetired, Data: r}, err
	})
	if err != nil {
		return nil, fmt.Errorf("find retired resources: %w", err)
	}
	return events, nil
}

// OriginListToRead returns up to limit origins to read: origins and those
// of the live resources, read longest ago first, leaving out those backing
// off.
func OriginListToRead(ctx context.Context, db DBTX, origins []string, limit int) ([]string, error) {
	rows, err := db.Query(ctx, `
		WITH o AS (
			SELECT unnest($1::text[]) AS origin
			UNION
			SELECT DISTINCT substring(resource FROM '^https?://[^/]+') FROM index_resources WHERE NOT retired)
		SELECT o.origin FROM o LEFT JOIN index_sources s ON s.url = 'origin:' || o.origin
		WHERE o.origin IS NOT NULL AND (s.backoff_until IS NULL OR s.backoff_until <= now())
		ORDER BY s.last_at NULLS FIRST, o.origin LIMIT $2`, origins, limit)
	if err != nil {
		return nil, fmt.Errorf("origins to read: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("origins to read: %w", err)
	}
	return list, nil
}

// ProbeTarget is a host to probe: its sample resource, in its method, and
// the options its listing asks.
type ProbeTarget struct {
	Host, URL, Method string
	Accepts           []Accept
}

// ProbeTargetList returns every host with services, those checked longest
// ago first.
func ProbeTargetList(ctx context.Context, db DBTX) ([]ProbeTarget, error) {
	rows, err := db.Query(ctx, `SELECT h.host, h.sample_resource, h.sample_method, r.accepts
		FROM index_hosts h LEFT JOIN index_resources r ON r.resource = h.sample_resource
		WHERE h.services > 0 ORDER BY h.checked_at NULLS FIRST, h.host`)
	if err != nil {
		return nil, fmt.Errorf("hosts to probe: %w", err)
	}
	targets, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ProbeTarget])
	if err != nil {
		return nil, fmt.Errorf("hosts to probe: %w", err)
	}
	return targets, nil
}

// OriginOwnershipList returns the receivers origin proved, sorted.
func OriginOwnershipList(ctx context.Context, db DBTX, origin string) ([]string, error) {
	rows, err := db.Query(ctx, "SELECT pay_to FROM index_ownership WHERE origin = $1 ORDER BY pay_to", origin)
	if err != nil {
		return nil, fmt.Errorf("ownership of %s: %w", origin, err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("ownership of %s: %w", origin, err)
	}
	return list, nil
}

// Ownership is a receiver an origin proved it controls: found Via its
// discovery document (well-known, openapi, dns), checked at VerifiedAt.
type Ownership struct {
	Origin     string    `json:"origin"`
	PayTo      string    `json:"pay_to"`
	Via        string    `json:"via"`
	VerifiedAt time.Time `json:"verified_at"`
}

// HostOwnershipList returns the receivers the origins of host proved.
func HostOwnershipList(ctx context.Context, db DBTX, host string) ([]Ownership, error) {
	rows, err := db.Query(ctx, `SELECT origin, pay_to, via, verified_at FROM index_ownership
		WHERE substring(origin FROM '^https?://([^/:]+)') = $1 ORDER BY origin, pay_to`, host)
	if err != nil {
		return nil, fmt.Errorf("ownership of %s: %w", host, err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Ownership])
	if err != nil {
		return nil, fmt.Errorf("ownership of %s: %w", host, err)
	}
	if list == nil {
		list = []Ownership{}
	}
	return list, nil
}

// quoteLock is the first key of the transaction-scoped advisory locks
// under which a host's listing and its 402 are compared ("x4qt" in
// ASCII); the second is the hash of the schema and host.
const quoteLock int32 = 0x78347174

// QuoteLock takes, until tx ends, the lock of each of hosts (in order,
// so that two transactions locking several never wait on each other)
// under which a host's sample listing and its last 402 are compared: a
// probe's verdict and a crawl's comparison read the other side under it,
// so the later of the two always compares what the other wrote.
func QuoteLock(ctx context.Context, tx DBTX, hosts []string) error {
	// One statement: the locks are taken as the sorted hosts come.
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(current_schema() || ' ' || h))
		FROM (SELECT DISTINCT h FROM unnest($2::text[]) h ORDER BY h) sorted`, quoteLock, hosts)
	if err != nil {
		return fmt.Errorf("quote locks of %d hosts: %w", len(hosts), err)
	}
	return nil
}

// ProbeQuoteState returns, as they stand, the options resource's listing
// asks and, while it is host's sample, host's last 402's options and
// whether their comparison is pending.
func ProbeQuoteState(ctx context.Context, db DBTX, host, resource string) (listing, lastQuote []Accept, pending bool, err error) {
	err = db.QueryRow(ctx, `SELECT (SELECT accepts FROM index_resources WHERE resource = $2),
			h.quote_accepts, coalesce(h.quote_pending, false)
		FROM (SELECT 1) one LEFT JOIN index_hosts h ON h.host = $1 AND h.sample_resource = $2`, host, resource).Scan(&listing, &lastQuote, &pending)
	if err != nil {
		return nil, nil, false, fmt.Errorf("quote state of %s: %w", resource, err)
	}
	return listing, lastQuote, pending, nil
}

// ResourceOriginListed reports whether resource is listed now and only by
// origins (sources origin:<origin>): what its own origin declares is all
// that is listed of it, read again in one targeted read, not in a pass of
// a whole listing.
func ResourceOriginListed(ctx context.Context, db DBTX, resource string) (bool, error) {
	var ok bool
	if err := db.QueryRow(ctx, `SELECT coalesce(bool_and(source LIKE 'origin:%'), false) FROM index_listings WHERE resource = $1`,
		resource).Scan(&ok); err != nil {
		return false, fmt.Errorf("listings of %s: %w", resource, err)
	}
	return ok, nil
}

// SampleQuote is the last 402 of the host whose sample a resource is.
type SampleQuote struct {
	Host  string
	Quote []Accept
}

// SampleQuotes returns, of resources, those that are a host's sample and
// whose 402 the index has read, by resource.
func SampleQuotes(ctx context.Context, db DBTX, resources []string) (map[string]SampleQuote, error) {
	rows, err := db.Query(ctx, `SELECT sample_resource, host, quote_accepts FROM index_hosts
		WHERE sample_resource = ANY($1) AND quote_accepts IS NOT NULL`, resources)
	if err != nil {
		return nil, fmt.Errorf("sample quotes: %w", err)
	}
	defer rows.Close()
	out := map[string]SampleQuote{}
	for rows.Next() {
		var resource string
		var q SampleQuote
		if err := rows.Scan(&resource, &q.Host, &q.Quote); err != nil {
			return nil, fmt.Errorf("sample quotes: %w", err)
		}
		out[resource] = q
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sample quotes: %w", err)
	}
	return out, nil
}
