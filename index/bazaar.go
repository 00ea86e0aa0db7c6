package index

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// The index as the official Bazaar discovery API (x402's bazaar extension:
// GET {facilitator}/discovery/resources and /discovery/search), so that an
// official client (withBazaar from @x402/extensions, given the base URL
// /api/xindex/bazaar) lists and searches the whole index.

// BazaarVersion is the x402Version of the discovery answers.
const BazaarVersion = 2

// The bounds of a Bazaar page.
const (
	// DefaultBazaarLimit is a page's number of resources when none is
	// asked.
	DefaultBazaarLimit = 20
	// MaxBazaarLimit is the most resources a page holds (as the CDP
	// Bazaar serves).
	MaxBazaarLimit = 100
)

// BazaarResource is a discovered resource in the Bazaar's shape
// (DiscoveryResource).
type BazaarResource struct {
	Resource    string          `json:"resource"`
	Type        string          `json:"type"`
	X402Version int             `json:"x402Version"`
	Accepts     []BazaarAccept  `json:"accepts"`
	LastUpdated string          `json:"lastUpdated"`
	Description string          `json:"description,omitempty"`
	MimeType    string          `json:"mimeType,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	Extensions  json.RawMessage `json:"extensions,omitempty"`
}

// BazaarAccept is a payment option in the shape of x402's
// PaymentRequirements (v2; a v1 resource's also carries maxAmountRequired
// and resource). Its Extra is the option's extra as its listing (or its
// origin's 402) gives it, {} when none is kept, so that a buyer pays from
// the listing alone.
type BazaarAccept struct {
	x402.Requirements
	MaxAmountRequired string `json:"maxAmountRequired,omitempty"`
	Resource          string `json:"resource,omitempty"`
}

// defaultMaxTimeout is the maxTimeoutSeconds of an option listed without
// one.
const defaultMaxTimeout = 60

// bazaarResource converts an indexed resource to the Bazaar's shape. A
// listing without extensions but with a call contract gets the bazaar
// extension's info from it.
func bazaarResource(r *store.IndexResource) BazaarResource {
	b := BazaarResource{Resource: r.Resource, Type: "http", X402Version: max(r.X402Version, 1), Accepts: []BazaarAccept{},
		LastUpdated: r.UpdatedAt.UTC().Format(time.RFC3339), Description: r.Description, MimeType: r.MimeType, Tags: r.Tags,
		Extensions: r.Extensions}
	for _, a := range r.Accepts {
		ba := BazaarAccept{Requirements: x402.Requirements{Scheme: a.Scheme, Network: a.Network, Amount: a.Amount, Asset: a.Asset, PayTo: a.PayTo,
			MaxTimeoutSeconds: a.MaxTimeoutSeconds, Extra: a.Extra}}
		if len(ba.Extra) == 0 {
			ba.Extra = json.RawMessage(`{}`)
		}
		if ba.Scheme == "" {
			ba.Scheme = "exact"
		}
		if ba.MaxTimeoutSeconds == 0 {
			ba.MaxTimeoutSeconds = defaultMaxTimeout
		}
		if b.X402Version == 1 {
			ba.MaxAmountRequired, ba.Resource = a.Amount, r.Resource
		}
		b.Accepts = append(b.Accepts, ba)
	}
	if len(b.Extensions) == 0 && (r.InputSchema != nil || r.OutputSchema != nil) {
		info := map[string]json.RawMessage{}
		if r.InputSchema != nil {
			info["input"] = r.InputSchema
		}
		if r.OutputSchema != nil {
			info["output"] = r.OutputSchema
		}
		if raw, err := json.Marshal(map[string]any{"bazaar": map[string]any{"info": info}}); err == nil {
			b.Extensions = raw
		}
	}
	return b
}

// BazaarListQuery is the Bazaar's list query (ListDiscoveryResourcesParams).
type BazaarListQuery struct {
	Type, PayTo, Scheme, Network, Extensions string
	Limit, Offset                            int

	resources ResourceQuery
}

// Check fills the defaults of q and checks its bounds, returning a
// *QueryError for the first field out of them.
func (q *BazaarListQuery) Check() error {
	if q.Type != "" && q.Type != "http" && q.Type != "mcp" {
		return &QueryError{Field: "type", Message: "type must be http or mcp"}
	}
	if q.Limit == 0 {
		q.Limit = DefaultBazaarLimit
	}
	if q.Limit < 1 || q.Limit > MaxBazaarLimit {
		return &QueryError{Field: "limit", Message: fmt.Sprintf("limit must be between 1 and %d", MaxBazaarLimit)}
	}
	if q.Offset < 0 {
		return &QueryError{Field: "offset", Message: "offset must be at least 0"}
	}
	q.resources = ResourceQuery{Network: q.Network, Scheme: q.Scheme, PayTo: q.PayTo, Extension: q.Extensions, Sort: "url", Limit: q.Limit}
	if err := q.resources.Check(); err != nil {
		return bazaarField(err)
	}
	q.resources.params.Offset = q.Offset
	return nil
}

// bazaarField names a refused field as the Bazaar's query names it.
func bazaarField(err error) error {
	if qe, ok := err.(*QueryError); ok && qe.Field == "pay_to" {
		return &QueryError{Field: "payTo", Message: strings.Replace(qe.Message, "pay_to", "payTo", 1)}
	}
	return err
}

// BazaarPagination is the list's pagination.
type BazaarPagination struct {
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
	Total  int `json:"total"`
}

// BazaarList is the Bazaar's list answer (DiscoveryResourcesResponse).
type BazaarList struct {
	X402Version int              `json:"x402Version"`
	Items       []BazaarResource `json:"items"`
	Pagination  BazaarPagination `json:"pagination"`
}

// BazaarList answers q, which Check has accepted: the index's live
// resources by URL. The index holds http resources only: type mcp lists
// none.
func (r *Reader) BazaarList(ctx context.Context, q BazaarListQuery) (*BazaarList, error) {
	a := &BazaarList{X402Version: BazaarVersion, Items: []BazaarResource{}, Pagination: BazaarPagination{Limit: q.Limit, Offset: q.Offset}}
	if q.Type == "mcp" {
		return a, nil
	}
	// The page and the total are read at once, on two connections: the
	// total counts every selected resource, the page may skip as many.
	type counted struct {
		n   int
		err error
	}
	total := make(chan counted, 1)
	go func() {
		n, err := store.ResourceCount(ctx, r.pool, &q.resources.params)
		total <- counted{n, err}
	}()
	page, err := store.ResourceSearch(ctx, r.pool, &q.resources.params)
	c := <-total
	if err != nil {
		return nil, fmt.Errorf("index: bazaar list: %w", err)
	}
	if c.err != nil {
		return nil, fmt.Errorf("index: bazaar list: %w", c.err)
	}
	a.Pagination.Total = c.n
	for i := range page.Resources {
		a.Items = append(a.Items, bazaarResource(&page.Resources[i]))
	}
	return a, nil
}

// BazaarSearchQuery is the Bazaar's search query
// (SearchDiscoveryResourcesParams).
type BazaarSearchQuery struct {
	Query, Type, PayTo, Scheme, Network, Extensions string
	Limit                                           int
	Cursor                                          string

	resources ResourceQuery
}

// Check fills the defaults of q and checks its bounds, returning a
// *QueryError for the first field out of them.
func (q *BazaarSearchQuery) Check() error {
	if strings.TrimSpace(q.Query) == "" {
		return &QueryError{Field: "query", Message: "query is required"}
	}
	if q.Type != "" && q.Type != "http" && q.Type != "mcp" {
		return &QueryError{Field: "type", Message: "type must be http or mcp"}
	}
	if q.Limit == 0 {
		q.Limit = DefaultBazaarLimit
	}
	if q.Limit < 1 || q.Limit > MaxBazaarLimit {
		return &QueryError{Field: "limit", Message: fmt.Sprintf("limit must be between 1 and %d", MaxBazaarLimit)}
	}
	q.resources = ResourceQuery{Q: q.Query, Network: q.Network, Scheme: q.Scheme, PayTo: q.PayTo, Extension: q.Extensions,
		Sort: "relevance", Limit: q.Limit, Cursor: q.Cursor}
	if err := q.resources.Check(); err != nil {
		if e, ok := err.(*QueryError); ok && e.Field == "q" {
			return &QueryError{Field: "query", Message: strings.Replace(e.Message, "q ", "query ", 1)}
		}
		return bazaarField(err)
	}
	return nil
}

// BazaarSearchPagination is the search's pagination: the page's limit and
// the cursor of the next page (null at the last).
type BazaarSearchPagination struct {
	Limit  int     `json:"limit"`
	Cursor *string `json:"cursor"`
}

// BazaarSearch is the Bazaar's search answer
// (SearchDiscoveryResourcesResponse). PartialResults is set when more
// matched than the deepest page the cursor reaches, or than are ranked
// (store.ResourceRankCap).
type BazaarSearch struct {
	X402Version    int                    `json:"x402Version"`
	Resources      []BazaarResource       `json:"resources"`
	PartialResults bool                   `json:"partialResults"`
	Pagination     BazaarSearchPagination `json:"pagination"`
}

// BazaarSearch answers q, which Check has accepted: the live resources
// matching its text, the most relevant first (relevance and evidence, as
// the resources search ranks them, among its candidates when more match
// than store.ResourceRankCap).
func (r *Reader) BazaarSearch(ctx context.Context, q BazaarSearchQuery) (*BazaarSearch, error) {
	a := &BazaarSearch{X402Version: BazaarVersion, Resources: []BazaarResource{}, Pagination: BazaarSearchPagination{Limit: q.Limit}}
	if q.Type == "mcp" {
		return a, nil
	}
	page, err := r.Resources(ctx, q.resources)
	if err != nil {
		return nil, err
	}
	for i := range page.Resources {
		a.Resources = append(a.Resources, bazaarResource(&page.Resources[i]))
	}
	a.Pagination.Cursor, a.PartialResults = page.Next, page.Partial
	return a, nil
}
