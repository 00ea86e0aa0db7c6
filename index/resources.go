package index

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// IndexedResource is a resource of the resources search.
type IndexedResource = store.IndexResource

// ResourceSortKeys are the values of the resources search's sort.
var ResourceSortKeys = store.ResourceSortKeys()

// The bounds of a page of resources.
const (
	// DefaultResourcesLimit is a page's number of resources when none is
	// asked.
	DefaultResourcesLimit = 50
	// MaxResourcesLimit is the most resources a page holds.
	MaxResourcesLimit = 200
	// maxResourcesOffset bounds how deep a cursor pages: a deeper page is
	// a narrower query.
	maxResourcesOffset = 10_000
	// maxQueryText bounds a text query.
	maxQueryText = 200
)

// ResourceQuery is a query of the resources search
// (/api/xindex/resources), whose parameters it names.
type ResourceQuery struct {
	Q       string   `json:"q,omitempty"`
	Network string   `json:"network,omitempty"`
	Asset   string   `json:"asset,omitempty"`
	Scheme  string   `json:"scheme,omitempty"`
	PayTo   string   `json:"pay_to,omitempty"`
	MaxUSD  string   `json:"max_usd,omitempty"`
	Tags    []string `json:"tags,omitempty"`
	// Live is "true", "false" or "null" (not measured).
	Live string `json:"live,omitempty"`
	// MinPayers keeps the resources whose host has at least this many
	// distinct payers on chain over 30 days, as the hosts list's
	// (HostQuery.MinPayers). 0: every resource.
	MinPayers int `json:"min_payers,omitempty"`
	// Sort is one of ResourceSortKeys; defaults to relevance with a text,
	// updated without. The sorts by on-chain figures (payers_30d,
	// volume_30d, transactions_30d) are the hosts list's, of the
	// resource's host, those not measured last.
	Sort   string `json:"sort,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Cursor string `json:"cursor,omitempty"`
	// Extension keeps resources whose listing carries this extension key
	// (the Bazaar API's extensions).
	Extension string `json:"-"`

	params store.ResourceSearchParams
}

// Check fills the defaults of q and checks its bounds, returning a
// *QueryError for the first field out of them.
func (q *ResourceQuery) Check() error {
	p := store.ResourceSearchParams{Q: strings.TrimSpace(q.Q), Asset: q.Asset, Scheme: q.Scheme, PayTo: strings.TrimSpace(q.PayTo),
		Live: q.Live, Extension: q.Extension}
	if len(p.Q) > maxQueryText {
		return &QueryError{Field: "q", Message: fmt.Sprintf("q is at most %d characters", maxQueryText)}
	}
	if q.Network != "" {
		n, ok := x402.NormalizeNetwork(q.Network)
		if !ok {
			return &QueryError{Field: "network", Message: "network must be a CAIP-2 network (eip155:8453) or a known name (base)"}
		}
		p.Network = n
	}
	for _, f := range []struct{ field, v string }{{"asset", q.Asset}, {"scheme", q.Scheme}, {"pay_to", q.PayTo}, {"extensions", q.Extension}} {
		if len(f.v) > 128 {
			return &QueryError{Field: f.field, Message: f.field + " is at most 128 characters"}
		}
	}
	if q.MaxUSD != "" {
		f, err := strconv.ParseFloat(q.MaxUSD, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return &QueryError{Field: "max_usd", Message: "max_usd must be a number at least 0 (USDC)"}
		}
		p.MaxUSDC = &f
	}
	for _, t := range q.Tags {
		for tag := range strings.SplitSeq(t, ",") {
			if tag = strings.TrimSpace(tag); tag != "" {
				p.Tags = append(p.Tags, tag)
			}
		}
	}
	if len(p.Tags) > maxTags {
		return &QueryError{Field: "tags", Message: fmt.Sprintf("tags are at most %d", maxTags)}
	}
	if q.Live != "" && !store.ResourceLiveKnown(q.Live) {
		return &QueryError{Field: "live", Message: "live must be true, false or null"}
	}
	if err := checkMinPayers(q.MinPayers); err != nil {
		return err
	}
	p.Evidence, _ = (&HostQuery{MinPayers: q.MinPayers}).evidenceFilter()
	if q.Sort == "" {
		q.Sort = "updated"
		if p.Q != "" {
			q.Sort = "relevance"
		}
	}
	if !slices.Contains(ResourceSortKeys, q.Sort) {
		return &QueryError{Field: "sort", Message: "sort must be one of " + strings.Join(ResourceSortKeys, ", ")}
	}
	p.Sort = q.Sort
	if q.Limit == 0 {
		q.Limit = DefaultResourcesLimit
	}
	if q.Limit < 1 || q.Limit > MaxResourcesLimit {
		return &QueryError{Field: "limit", Message: fmt.Sprintf("limit must be between 1 and %d", MaxResourcesLimit)}
	}
	p.Limit = q.Limit
	if q.Cursor != "" {
		offset, ok := decodeCursor(q.Cursor)
		if !ok {
			return &QueryError{Field: "cursor", Message: "cursor must be the next of an earlier page"}
		}
		if p.Q != "" && p.Sort == "relevance" && offset >= store.ResourceRankCap {
			// Past the ranked candidates: no page of them gives it.
			return &QueryError{Field: "cursor", Message: "cursor must be the next of an earlier page"}
		}
		p.Offset = offset
	}
	q.params = p
	return nil
}

// encodeCursor is the opaque cursor of the page at offset.
func encodeCursor(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("o" + strconv.Itoa(offset)))
}

// decodeCursor reads a cursor encodeCursor made.
func decodeCursor(c string) (int, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(raw) < 2 || raw[0] != 'o' {
		return 0, false
	}
	n, err := strconv.Atoi(string(raw[1:]))
	if err != nil || n < 0 || n > maxResourcesOffset {
		return 0, false
	}
	return n, true
}

// ResourcesAnswer is a page of the resources search. Next is the cursor of
// the next page, null at the last.
type ResourcesAnswer struct {
	OK        bool              `json:"ok"`
	Resources []IndexedResource `json:"resources"`
	Next      *string           `json:"next"`
	// Partial is set when more matched than the deepest page a cursor
	// reaches, or than a text's relevance ranks (store.ResourceRankCap):
	// a narrower query finds them.
	Partial bool   `json:"partial"`
	Honesty string `json:"honesty"`
}

// ResourcesHonesty says what the resources answer's figures are.
const ResourcesHonesty = "Resources as their listings (or origins) state them: accepts, description, tags, input and output schema. host_liveness is the host's measured liveness; verified_pay_to lists the receivers whose keys signed the origin's ownership proof; evidence is on-chain and null where not measured, never 0. score is text relevance times (1 + evidence: host live, its uptime, on-chain figures)."

// Resources answers q, which Check has accepted.
func (r *Reader) Resources(ctx context.Context, q ResourceQuery) (*ResourcesAnswer, error) {
	page, err := store.ResourceSearch(ctx, r.pool, &q.params)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	a := &ResourcesAnswer{OK: true, Resources: page.Resources, Partial: page.Capped, Honesty: ResourcesHonesty}
	if next := q.params.Offset + len(page.Resources); page.More && next <= maxResourcesOffset {
		c := encodeCursor(next)
		a.Next = &c
	} else if page.More {
		a.Partial = true
	}
	return a, nil
}
