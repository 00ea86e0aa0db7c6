package index

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/store"
)

// Host is a host entry of the index (spec 2.2). A nil field was not
// measured; 0 is only a measured zero.
type Host = store.IndexHost

// HostQuality is what the listings of a host's live services report of
// their use.
type HostQuality = store.HostQuality

// History is what the event log says of a host over time.
type History = store.HostHistory

// Liveness counts hosts by measurement.
type Liveness = store.IndexLiveness

// Crawl is the crawl's state over all sources.
type Crawl = store.IndexCrawl

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

// SortKeys are the values of the hosts query's sort, in the order they are
// offered (the API, its OpenAPI document, the MCP tool and the page).
var SortKeys = store.HostSortKeys()

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

// Hosts returns up to limit hosts matching q, in sort order (a key of
// SortKeys). q matches, case-insensitively, the host name, its sample, and the
// URL and description of any of its resources.
func (r *Reader) Hosts(ctx context.Context, q, sort string, limit int) ([]Host, error) {
	return r.Find(ctx, HostQuery{Q: q, Sort: sort, Limit: limit})
}

// Find returns the hosts q asks for (see Hosts), which Check has accepted.
func (r *Reader) Find(ctx context.Context, q HostQuery) ([]Host, error) {
	evidence, _ := q.evidenceFilter()
	hosts, err := store.HostList(ctx, r.pool, &store.HostListParams{Q: q.Q, Sort: q.Sort, QuoteMatchesListing: q.QuoteMatchesListing, Evidence: evidence, Limit: q.Limit})
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if err := r.withEvidence(ctx, hosts); err != nil {
		return nil, err
	}
	return hosts, nil
}

// Totals are the figures the hosts query answers beside its hosts.
type Totals = store.IndexTotals

// Totals returns the numbers of services and hosts and the time of the
// last crawl.
func (r *Reader) Totals(ctx context.Context) (*Totals, error) {
	t, err := store.IndexTotalsGet(ctx, r.pool)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	return t, nil
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
			"resources": "/api/xindex/resources?q={text}&network=&asset=&scheme=&pay_to=&max_usd=&tags=&live=&min_payers={n}&sort={" +
				strings.Join(ResourceSortKeys, "|") + "}&limit=&cursor=",
			"bazaar":  "/api/xindex/bazaar (the Bazaar discovery API: /discovery/resources, /discovery/search)",
			"changes": "/api/xindex/changes?since={cursor|time}&limit={1-500}",
			"atom":    "/api/xindex/changes.atom",
			"page":    "/x402-index",
		},
		PriceBands: map[string]int{},
		Honesty:    Honesty,
	}
	counts, err := store.IndexCountsGet(ctx, r.pool)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	s.ServicesIndexed, s.HostsKnown, s.Liveness, s.PriceBands = counts.Services, counts.Hosts, counts.Liveness, counts.PriceBands
	crawl, err := store.IndexCrawlGet(ctx, r.pool, r.sources)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	s.Crawl = *crawl
	if s.TopBySize, err = r.Hosts(ctx, "", "services", 10); err != nil {
		return nil, err
	}
	if s.Cheapest, err = store.HostList(ctx, r.pool, &store.HostListParams{Sort: "price", PricedOnly: true, Limit: 10}); err != nil {
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
		conds = append(conds, store.EvidenceMinPayers(q.MinPayers))
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
	if !slices.Contains(SortKeys, q.Sort) {
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
	if q.QuoteMatchesListing != "" && !store.HostQuoteFilterKnown(q.QuoteMatchesListing) {
		return &QueryError{Field: "quote_matches_listing", Message: "quote_matches_listing must be true, false or null"}
	}
	if err := checkMinPayers(q.MinPayers); err != nil {
		return err
	}
	if q.MinVolumeUSDC != "" && !usdcAmount.MatchString(q.MinVolumeUSDC) {
		return &QueryError{Field: "min_volume_usdc", Message: "min_volume_usdc must be a decimal number of USDC, at most 6 decimals"}
	}
	if s := q.MaxTopPayerShare; s != nil && !(*s >= 0 && *s <= 1) {
		return &QueryError{Field: "max_top_payer_share", Message: "max_top_payer_share must be between 0 and 1"}
	}
	return nil
}

// checkMinPayers checks the min_payers of the hosts list and the
// resources search.
func checkMinPayers(n int) error {
	if n < 0 {
		return &QueryError{Field: "min_payers", Message: "min_payers must be 0 or more"}
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
