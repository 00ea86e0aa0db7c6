package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// IndexResource is one live resource of the index with what its listing
// (or its origin's 402) says of it, its host's liveness, whether its
// origin proved ownership of its receivers, and its on-chain evidence. A
// nil figure was not measured.
type IndexResource struct {
	Resource    string   `json:"resource"`
	Host        string   `json:"host"`
	Method      string   `json:"method"`
	Description string   `json:"description"`
	Tags        []string `json:"tags"`
	// Accepts are the payment options as listed (scheme, network, asset,
	// amount, payTo, extra).
	Accepts   []Accept `json:"accepts"`
	PriceUSDC *float64 `json:"price_usdc"`
	Networks  []string `json:"networks"`
	// InputSchema and OutputSchema are the call contract as listed; null
	// when the listing gives none.
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema"`
	// Extensions are the listing item's extensions, as given.
	Extensions  json.RawMessage `json:"extensions"`
	X402Version int             `json:"x402_version"`
	MimeType    string          `json:"mime_type"`
	UpdatedAt   time.Time       `json:"updated_at"`
	Quality     *Quality        `json:"quality"`
	// VerifiedPayTo are the receivers of its options its origin proved it
	// controls (ReceiverKey); empty when none.
	VerifiedPayTo []string `json:"verified_pay_to"`
	// HostLiveness is its host's measured liveness.
	HostLiveness ResourceHost `json:"host_liveness"`
	// Evidence is what the chain says of its host's receivers.
	Evidence ResourceEvidence `json:"evidence"`
	// Score is its rank: text relevance times the evidence (see
	// resourceScore); 0 without a text.
	Score float64 `json:"score"`
}

// ResourceHost is the liveness of a resource's host.
type ResourceHost struct {
	Live                *bool      `json:"live"`
	Uptime30d           *float64   `json:"uptime_30d"`
	LatencyP50MS        *int       `json:"latency_p50_ms"`
	CheckedAt           *time.Time `json:"checked_at"`
	QuoteMatchesListing *bool      `json:"quote_matches_listing"`
}

// ResourceEvidence is what the chain says of its host's receivers over
// 30 days: settlements, their volume in USDC and distinct payers, and
// whether the 30 days were read whole (EvidenceWindow.Complete). Null
// where not measured (resourceEvidence).
type ResourceEvidence struct {
	Transactions30d *int64   `json:"transactions_30d"`
	VolumeUSDC30d   *float64 `json:"volume_usdc_30d"`
	Payers30d       *int64   `json:"payers_30d"`
	Complete30d     *bool    `json:"complete_30d"`
}

// resourceEvidence are the columns of ResourceEvidence: its host's
// on-chain figures over 30 days (index_host_evidence, volume in USDC from
// atomic units) and when they were counted and read whole from, read per
// row of the page. Null where the host's evidence
// is not measured (never 0). Its distinct payers also rank
// (resourceEvidenceBoost).
const resourceEvidence = `e.transactions_30d, (e.volume_30d / 1e6)::float8, e.payers_30d, e.fully_measured_since, e.refreshed_at`

// resourceEvidenceBoost is the on-chain part of a resource's evidence: up
// to 0.5 for its host's distinct payers over 30 days, growing with their
// logarithm and reaching 0.5 at 100 payers; 0 where not measured. Distinct
// payers rather than volume or transactions, as one wash trader inflates
// those by paying itself again and again, while each payer more is another
// funded address. It is computed for every match of a text, so it reads
// the column index_resource_search r keeps in step with
// index_host_evidence (its triggers, migrations 024 and 025).
const resourceEvidenceBoost = `0.5 * least(1, ln(1 + coalesce(r.host_payers_30d, 0)) / ln(101))`

// resourceVerified is whether the origin of r proved ownership of one of
// its receivers.
const resourceVerified = `coalesce((SELECT array_agg(o.pay_to ORDER BY o.pay_to) FROM index_ownership o
	WHERE o.origin = substring(r.resource FROM '^https?://[^/]+') AND o.pay_to = ANY(r.pay_tos)), '{}')`

// resourceEvidenceFactor is what a resource's text relevance is
// multiplied by: one plus its evidence: its host live now (0.5), its
// uptime over 30 days (up to 0.5) and its on-chain figures
// (resourceEvidenceBoost). It reads only the match's row of the narrow
// side table index_resource_search (which carries its host's liveness): a
// proof of ownership is shown (verified_pay_to), not ranked, as a lookup
// per match costs a third of a search at 100,000 resources.
const resourceEvidenceFactor = `(1 + CASE WHEN r.host_live THEN 0.5 ELSE 0 END + 0.5 * coalesce(r.host_uptime_30d, 0)
	+ ` + resourceEvidenceBoost + `)`

// resourceScore ranks a resource: its text relevance (ts_rank of the
// query) times its evidence (resourceEvidenceFactor). It is computed for
// each candidate match (ResourceRankCap).
const resourceScore = `ts_rank(r.document, q.query) * ` + resourceEvidenceFactor

// ResourceRankCap is the most matches of a text the relevance sort reads
// and ranks (its candidates): the first the text's index hands out, in the
// table's order, which says nothing of their rank. Reading a match is most
// of the search's cost, ranking it the rest: a common word matches ~8,400
// of 100,000 resources, and reading them all kept the Bazaar search's p95
// over its 30 ms goal (docs/performance.md). No index hands the matches
// out in an order of rank without reading more: scanned in the order of
// their evidence, 2,001 matches of such a word read nine times the buffers
// of all 8,400 off the text's index. 2,000 is ten times the deepest Bazaar
// page and twenty times the largest page of the resources search. When
// more match, the answer says it is partial (ResourcePage.Capped): a
// narrower query ranks them all.
const ResourceRankCap = 2000

// resourceSorts are the resources search's sorts and their orders.
var resourceSorts = []struct{ key, order string }{
	{"relevance", "score DESC, r.updated_at DESC, r.resource"},
	{"price", "r.price_usdc ASC NULLS LAST, r.resource"},
	{"updated", "r.updated_at DESC, r.resource"},
	{"uptime", "h.uptime_30d DESC NULLS LAST, r.resource"},
	{"latency", "h.latency_p50_ms ASC NULLS LAST, r.resource"},
	{"url", "r.resource"},
	// The hosts list's sorts by on-chain figures over 30 days, of the
	// resource's host.
	{"payers_30d", evidenceOrder("payers_30d", "r.host", "r.resource")},
	{"volume_30d", evidenceOrder("volume_30d", "r.host", "r.resource")},
	{"transactions_30d", evidenceOrder("transactions_30d", "r.host", "r.resource")},
}

// ResourceSortKeys returns the resources search's sorts, in the order
// they are offered.
func ResourceSortKeys() []string {
	keys := make([]string, len(resourceSorts))
	for i, s := range resourceSorts {
		keys[i] = s.key
	}
	return keys
}

// ResourceSearchParams selects live resources. Empty fields do not
// filter.
type ResourceSearchParams struct {
	// Q is a text in web-search syntax (words, "a phrase", -word, or),
	// matched against the tags, description and URL.
	Q string
	// Network is a CAIP-2 network one of its options is on.
	Network string
	// Asset, Scheme and PayTo match one of its options (an EVM address
	// in any case).
	Asset, Scheme, PayTo string
	// MaxUSDC keeps the priced resources at most this price.
	MaxUSDC *float64
	// Tags keeps those carrying every one of them (any case).
	Tags []string
	// Live is "true", "false" or "null" (not measured): its host's
	// liveness.
	Live string
	// Extension keeps those whose listing carries this extension key.
	Extension string
	// Evidence is a condition on the kept on-chain figures of their host
	// (index_host_evidence e, as HostListParams.Evidence), built by the
	// caller from checked values only; empty: none.
	Evidence string
	// Sort is one of ResourceSortKeys; relevance without Q is by the
	// evidence alone.
	Sort          string
	Limit, Offset int
	// RankCap is the most matches of Q the relevance sort ranks; 0 is
	// ResourceRankCap.
	RankCap int
}

// ResourcePage is a page of the resources search.
type ResourcePage struct {
	// Resources are the page's, in the search's order.
	Resources []IndexResource
	// More is whether more follow (among the ranked candidates when
	// Capped).
	More bool
	// Capped is whether more matched the text than the relevance sort
	// ranks (RankCap): the page is of the best ranked among the candidates.
	// It is read from the page's rows: false on an empty page.
	Capped bool
}

// ResourceSearch returns the page of the live resources p selects, in
// its order.
func ResourceSearch(ctx context.Context, db DBTX, p *ResourceSearchParams) (*ResourcePage, error) {
	order := ""
	for _, s := range resourceSorts {
		if s.key == p.Sort {
			order = s.order
		}
	}
	if order == "" {
		return nil, fmt.Errorf("resources: unknown sort %q", p.Sort)
	}
	// A text is matched and ranked over the narrow side table
	// index_resource_search (the live resources, with their host's
	// liveness); without, the page is chosen from index_resources' narrow
	// columns (the Bazaar list's order is read from its index alone). The
	// hosts are joined only when the live filter or the sort reads them,
	// then the page's rows are read whole. The relevance of a text ranks
	// only its candidates (ResourceRankCap): one more match than the cap is
	// read, to tell whether more matched.
	text := strings.TrimSpace(p.Q)
	where, args := resourceWhere(p, text != "")
	score := "0::float8"
	from := "index_resources r"
	capped, with := "false", "WITH "
	if text != "" {
		args = append(args, text)
		tsq := "(SELECT websearch_to_tsquery('english', $" + strconv.Itoa(len(args)) + ") AS query) q"
		from = tsq + " CROSS JOIN index_resource_search r"
		where += " AND r.document @@ q.query"
		score = resourceScore
		if p.Sort == "relevance" {
			rankCap := p.RankCap
			if rankCap <= 0 {
				rankCap = ResourceRankCap
			}
			args = append(args, rankCap)
			n := "$" + strconv.Itoa(len(args)) + "::integer"
			with += `matched AS (
				SELECT r.resource, r.document, r.host_live, r.host_uptime_30d, r.host_payers_30d, r.updated_at
				FROM ` + from + ` WHERE ` + where + ` LIMIT ` + n + ` + 1), `
			from = tsq + " CROSS JOIN (SELECT * FROM matched LIMIT " + n + ") r"
			where = "true"
			capped = "(SELECT count(*) FROM matched) > " + n
		}
	}
	args = append(args, p.Limit+1, p.Offset)
	if (text == "" && p.Live != "") || strings.Contains(order, "h.") {
		from += " LEFT JOIN index_hosts h ON h.host = r.host"
	}
	query := with + `page AS (
			SELECT r.resource, ` + score + ` AS score FROM ` + from + `
			WHERE ` + where + `
			ORDER BY ` + order + `
			LIMIT $` + strconv.Itoa(len(args)-1) + ` OFFSET $` + strconv.Itoa(len(args)) + `)
		SELECT ` + capped + `, r.resource, r.host, r.method, r.description, r.tags, coalesce(r.accepts, '[]'), r.price_usdc::float8, r.networks,
			r.input_schema, r.output_schema, r.extensions, r.x402_version, r.mime_type, r.updated_at,
			r.quality_calls_30d, r.quality_unique_payers_30d, r.quality_last_called_at,
			` + resourceVerified + `,
			h.live, h.uptime_30d, h.latency_p50_ms, h.checked_at, h.quote_matches_listing,
			` + resourceEvidence + `,
			page.score AS score
		FROM page JOIN index_resources r ON r.resource = page.resource LEFT JOIN index_hosts h ON h.host = r.host
			LEFT JOIN index_host_evidence e ON e.host = r.host
		ORDER BY ` + order
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("resources: %w", err)
	}
	page := &ResourcePage{}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (IndexResource, error) {
		var r IndexResource
		var q Quality
		e := &r.Evidence
		h := &r.HostLiveness
		var fully, counted *time.Time
		err := row.Scan(&page.Capped, &r.Resource, &r.Host, &r.Method, &r.Description, &r.Tags, &r.Accepts, &r.PriceUSDC, &r.Networks,
			&r.InputSchema, &r.OutputSchema, &r.Extensions, &r.X402Version, &r.MimeType, &r.UpdatedAt,
			&q.Calls30d, &q.UniquePayers30d, &q.LastCalledAt, &r.VerifiedPayTo,
			&h.Live, &h.Uptime30d, &h.LatencyP50MS, &h.CheckedAt, &h.QuoteMatchesListing,
			&e.Transactions30d, &e.VolumeUSDC30d, &e.Payers30d, &fully, &counted, &r.Score)
		if fully != nil && counted != nil {
			e.Complete30d = new((&EvidenceRaw{FullySince: *fully, CountedAt: *counted}).Complete(EvidenceSpan30d))
		}
		if q.Calls30d != nil || q.UniquePayers30d != nil || q.LastCalledAt != nil {
			r.Quality = &q
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("resources: %w", err)
	}
	page.More = len(list) > p.Limit
	if page.More {
		list = list[:p.Limit]
	}
	if list == nil {
		list = []IndexResource{}
	}
	page.Resources = list
	return page, nil
}

// ResourceCount counts the live resources p selects (its text, sort and
// page aside).
func ResourceCount(ctx context.Context, db DBTX, p *ResourceSearchParams) (int, error) {
	where, args := resourceWhere(p, false)
	from := "index_resources r"
	if p.Live != "" {
		from += " LEFT JOIN index_hosts h ON h.host = r.host"
	}
	var n int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+from+" WHERE "+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count resources: %w", err)
	}
	return n, nil
}

// resourceLive are the values of the live filter and their condition on
// the host's liveness (%[1]s).
var resourceLive = map[string]string{
	"true":  "%[1]s",
	"false": "NOT %[1]s",
	"null":  "%[1]s IS NULL",
}

// ResourceLiveKnown reports whether v is a value of the resources search's
// live filter.
func ResourceLiveKnown(v string) bool {
	_, ok := resourceLive[v]
	return ok
}

// resourceWhere returns the condition of p's filters (its text aside) and
// its arguments, over index_resources r, or over index_resource_search r
// when narrow (its rows are the live resources, with their host's
// liveness).
func resourceWhere(p *ResourceSearchParams, narrow bool) (string, []any) {
	where := []string{"NOT r.retired"}
	live := "h.live"
	if narrow {
		where, live = []string{"true"}, "r.host_live"
	}
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if p.Network != "" {
		where = append(where, arg(p.Network)+" = ANY(r.networks)")
	}
	if p.Asset != "" {
		where = append(where, arg(strings.ToLower(p.Asset))+" = ANY(r.assets)")
	}
	if p.Scheme != "" {
		where = append(where, arg(strings.ToLower(p.Scheme))+" = ANY(r.schemes)")
	}
	if p.PayTo != "" {
		where = append(where, "r.pay_tos @> ARRAY["+arg(ReceiverKey(p.PayTo))+"::text]")
	}
	if p.MaxUSDC != nil {
		where = append(where, "r.price_usdc <= "+arg(*p.MaxUSDC)+"::numeric")
	}
	if len(p.Tags) > 0 {
		tags := make([]string, len(p.Tags))
		for i, t := range p.Tags {
			tags[i] = strings.ToLower(t)
		}
		where = append(where, "r.tag_keys @> "+arg(tags)+"::text[]")
	}
	if cond, ok := resourceLive[p.Live]; ok {
		where = append(where, fmt.Sprintf(cond, live))
	}
	if p.Evidence != "" {
		where = append(where, "r.host IN (SELECT e.host FROM index_host_evidence e WHERE "+p.Evidence+")")
	}
	if p.Extension != "" && narrow {
		where = append(where, "r.extension_keys @> ARRAY["+arg(p.Extension)+"::text]")
	} else if p.Extension != "" {
		where = append(where, "r.extensions ? "+arg(p.Extension))
	}
	return strings.Join(where, " AND "), args
}
