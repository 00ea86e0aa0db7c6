package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/mcp"
	"github.com/x402d/x402d/x402"
)

// discovery holds the discovery documents, built once at start-up from the
// quotes: the catalogue is their one source.
type discovery struct {
	wellKnown []byte
	// fanOut is /.well-known/x402: the URLs of the operations sold.
	fanOut []byte
	// front is the front page's HTML (frontPage).
	front   []byte
	items   []discoveryItem
	openAPI []byte
}

// discoveryItem is one resource of the Bazaar list (x402.md §8).
type discoveryItem struct {
	Resource    string              `json:"resource"`
	Type        string              `json:"type"`
	X402Version int                 `json:"x402Version"`
	Accepts     []x402.Requirements `json:"accepts"`
	LastUpdated string              `json:"lastUpdated"`
	Metadata    discoveryMetadata   `json:"metadata"`
}

// discoveryMetadata is an item's metadata: what a buyer needs to call it.
type discoveryMetadata struct {
	Name        string                     `json:"name"`
	Description string                     `json:"description"`
	Method      string                     `json:"method"`
	MimeType    string                     `json:"mimeType"`
	Price       price                      `json:"price"`
	Extensions  map[string]json.RawMessage `json:"extensions,omitempty"`
}

type price struct {
	Mode     string `json:"mode"`
	Currency string `json:"currency"`
	Amount   string `json:"amount"`
}

// discoveryList is the answer of GET /api/x402/discovery/resources.
type discoveryList struct {
	X402Version int             `json:"x402Version"`
	Items       []discoveryItem `json:"items"`
	Pagination  pagination      `json:"pagination"`
}

type pagination struct {
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
	Total  int `json:"total"`
}

// resourceDoc describes one operation in /.well-known/x402.json.
type resourceDoc struct {
	Name          string              `json:"name"`
	Resource      string              `json:"resource"`
	Method        string              `json:"method"`
	Description   string              `json:"description"`
	Price         price               `json:"price"`
	MimeType      string              `json:"mime_type"`
	Sellable      bool                `json:"sellable"`
	BlockedReason *string             `json:"blocked_reason"`
	Accepts       []x402.Requirements `json:"accepts"`
	InputSchema   json.RawMessage     `json:"input_schema,omitempty"`
}

// wellKnownDoc is /.well-known/x402.json: the service manifest.
type wellKnownDoc struct {
	X402Version int           `json:"x402Version"`
	Name        string        `json:"name"`
	Description string        `json:"description"`
	Facilitator *string       `json:"facilitator"`
	Networks    []string      `json:"networks"`
	Resources   []resourceDoc `json:"resources"`
	Discovery   string        `json:"discovery"`
	OpenAPI     string        `json:"openapi"`
	Index       string        `json:"index"`
	MCP         mcpDoc        `json:"mcp"`
}

// fanOutDoc is /.well-known/x402 (the discovery extension's, and x402scan's
// fan-out): {"version": 1, "resources": [URL...]}.
type fanOutDoc struct {
	Version   int      `json:"version"`
	Resources []string `json:"resources"`
}

// mcpDoc names the MCP endpoint in the manifest.
type mcpDoc struct {
	Endpoint  string `json:"endpoint"`
	Transport string `json:"transport"`
	Payment   string `json:"payment"`
	// Tools are the tools listed now: the operations sold, then the free
	// index tools.
	Tools []string `json:"tools"`
}

const serviceDescription = "Pay-per-call utility operations over x402 v2 (no accounts, no API keys), and a free index of x402 sellers."

// newDiscovery builds the documents of ops from their quotes: every
// operation is in the manifest (those not sold with their blocked reason),
// the sold ones in the Bazaar list, with their quote's accepts and bazaar
// extension.
func newDiscovery(ops []jobs.Operation, payments x402.Verifier, publicURL string, now time.Time, withOps bool) (*discovery, error) {
	d := &discovery{items: []discoveryItem{}}
	resources := make([]resourceDoc, 0, len(ops))
	quotes := make(map[string]*x402.Quote, len(ops))
	var sold []string
	for _, op := range ops {
		doc := resourceDoc{
			Name: op.Name, Resource: publicURL + "/api/x402/" + op.Name, Method: http.MethodPost,
			Description: op.Description, MimeType: "application/json", Sellable: true,
			Price:   price{Mode: "fixed", Currency: "USD", Amount: op.Price},
			Accepts: []x402.Requirements{},
		}
		if len(op.InputSchema) > 0 {
			doc.InputSchema = op.InputSchema
		}
		q, err := payments.Quote(op.Name)
		if errors.Is(err, x402.ErrNotSellable) {
			reason := "the service's receiving or model configuration is incomplete"
			var ns *x402.NotSellableError
			if errors.As(err, &ns) && ns.Reason != "" {
				reason = ns.Reason
			}
			doc.Sellable, doc.BlockedReason = false, &reason
			resources = append(resources, doc)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("discovery: quote %s: %w", op.Name, err)
		}
		quotes[op.Name] = q
		sold = append(sold, op.Name)
		var required x402.PaymentRequired
		if err := x402.DecodeHeader(q.PaymentRequired, &required); err != nil {
			return nil, fmt.Errorf("discovery: own quote of %s: %w", op.Name, err)
		}
		if required.Resource.URL != "" {
			doc.Resource = required.Resource.URL
		}
		doc.Accepts = required.Accepts
		resources = append(resources, doc)
		d.items = append(d.items, discoveryItem{
			Resource: doc.Resource, Type: "http", X402Version: x402.Version, Accepts: required.Accepts,
			LastUpdated: now.UTC().Format(time.RFC3339),
			Metadata: discoveryMetadata{
				Name: op.Name, Description: op.Description, Method: http.MethodPost,
				MimeType: "application/json", Price: doc.Price, Extensions: required.Extensions,
			},
		})
	}
	var err error
	d.wellKnown, err = json.Marshal(wellKnownDoc{
		X402Version: x402.Version,
		Name:        "x402d",
		Description: serviceDescription,
		Facilitator: nil,
		Networks:    x402.NetworkIDs(),
		Resources:   resources,
		Discovery:   publicURL + "/api/x402/discovery/resources",
		OpenAPI:     publicURL + "/openapi.json",
		Index:       publicURL + "/api/xindex/summary",
		MCP: mcpDoc{
			Endpoint:  publicURL + mcp.Path,
			Transport: "streamable-http",
			Payment:   `x402 v2 over MCP (specs/transports-v2/mcp.md): the PaymentPayload in the tool call's _meta["x402/payment"], the settlement in the result's _meta["x402/payment-response"]`,
			Tools:     append(sold, mcp.FreeTools()...),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	fanOut := fanOutDoc{Version: 1, Resources: []string{}}
	for _, item := range d.items {
		fanOut.Resources = append(fanOut.Resources, item.Resource)
	}
	if d.fanOut, err = json.Marshal(fanOut); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	if d.front, err = frontPage(publicURL, resources, withOps); err != nil {
		return nil, err
	}
	if d.openAPI, err = openAPIDocument(ops, quotes, publicURL); err != nil {
		return nil, err
	}
	return d, nil
}

// registerDiscovery adds the discovery routes to e: the front page, the
// manifest, the Bazaar list and the OpenAPI document.
func (s *Server) registerDiscovery(e *echo.Echo) {
	e.GET("/", s.front)
	e.GET("/.well-known/x402.json", s.wellKnown)
	e.GET("/.well-known/x402", s.wellKnownFanOut)
	e.GET("/api/x402/discovery/resources", s.discoveryResources)
	e.GET("/openapi.json", s.openAPI)
}

// The manifest, the Bazaar list and the OpenAPI document carry the quotes
// (accepts: receiving address, networks, amounts), which change with the
// configuration: they are not stored by caches (noStore), as a 402 is not.

func (s *Server) wellKnown(c echo.Context) error {
	c.Response().Header()[headerCacheControl] = noStore
	return c.JSONBlob(http.StatusOK, s.discovery.wellKnown)
}

func (s *Server) wellKnownFanOut(c echo.Context) error {
	return c.JSONBlob(http.StatusOK, s.discovery.fanOut)
}

func (s *Server) openAPI(c echo.Context) error {
	c.Response().Header()[headerCacheControl] = noStore
	return c.JSONBlob(http.StatusOK, s.discovery.openAPI)
}

// discoveryResources is GET /api/x402/discovery/resources in the Bazaar list
// format: type (http), limit (1-100, default 20) and offset (default 0).
// Values out of range are a 400.
func (s *Server) discoveryResources(c echo.Context) error {
	limit, err := queryInt(c, "limit", 20, 1, 100)
	if err != nil {
		return err
	}
	offset, err := queryInt(c, "offset", 0, 0, 1<<31-1)
	if err != nil {
		return err
	}
	items := s.discovery.items
	if t := c.QueryParam("type"); t != "" && t != "http" {
		items = nil
	}
	total := len(items)
	page := items[min(offset, total):min(offset+limit, total)]
	c.Response().Header()[headerCacheControl] = noStore
	if page == nil {
		page = []discoveryItem{}
	}
	return c.JSON(http.StatusOK, discoveryList{
		X402Version: x402.Version,
		Items:       page,
		Pagination:  pagination{Limit: limit, Offset: offset, Total: total},
	})
}

// queryInt reads an integer query parameter within [lo, hi], or answers 400.
func queryInt(c echo.Context, name string, def, lo, hi int) (int, error) {
	v := c.QueryParam(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, &Error{Status: http.StatusBadRequest, Code: "invalid_request", Field: name,
			Message: fmt.Sprintf("%s must be an integer from %d to %d", name, lo, hi)}
	}
	return n, nil
}
