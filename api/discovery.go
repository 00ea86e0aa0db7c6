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
	"github.com/x402d/x402d/x402"
)

// discovery holds the discovery documents, built once at start-up from the
// quotes: the catalogue is their one source.
type discovery struct {
	wellKnown []byte
	items     []discoveryItem
	openAPI   []byte
}

// discoveryItem is one resource of the Bazaar list (x402.md §8).
type discoveryItem struct {
	Resource    string              `json:"resource"`
	Type        string              `json:"type"`
	X402Version int                 `json:"x402Version"`
	Accepts     []x402.Requirements `json:"accepts"`
	LastUpdated string              `json:"lastUpdated"`
	Metadata    map[string]any      `json:"metadata"`
}

// resourceDoc describes one operation in /.well-known/x402.json.
type resourceDoc struct {
	Name          string            `json:"name"`
	Resource      string            `json:"resource"`
	Method        string            `json:"method"`
	Description   string            `json:"description"`
	Price         map[string]string `json:"price"`
	MimeType      string            `json:"mime_type"`
	Sellable      bool              `json:"sellable"`
	BlockedReason *string           `json:"blocked_reason"`
	InputSchema   json.RawMessage   `json:"input_schema,omitempty"`
}

// newDiscovery builds the documents of ops from their quotes.
func newDiscovery(ops []jobs.Operation, payments x402.Verifier, publicURL string, now time.Time) (*discovery, error) {
	networks := make([]string, 0, 7)
	for _, n := range x402.Networks() {
		networks = append(networks, n.ID)
	}
	d := &discovery{}
	resources := make([]resourceDoc, 0, len(ops))
	for _, op := range ops {
		doc := resourceDoc{
			Name: op.Name, Resource: publicURL + "/api/x402/" + op.Name, Method: http.MethodPost,
			Description: op.Description, MimeType: "application/json", Sellable: true, InputSchema: op.InputSchema,
			Price: map[string]string{"mode": "fixed", "currency": "USD", "amount": op.Price},
		}
		q, err := payments.Quote(op.Name)
		if errors.Is(err, x402.ErrNotSellable) {
			reason := "not sold now: the service's receiving or model configuration is incomplete"
			if op.UsesModel {
				reason = "model not configured (GEMINI_API_KEY unset)"
			}
			doc.Sellable, doc.BlockedReason = false, &reason
			resources = append(resources, doc)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("discovery: quote %s: %w", op.Name, err)
		}
		var required x402.PaymentRequired
		if err := x402.DecodeHeader(q.PaymentRequired, &required); err != nil {
			return nil, fmt.Errorf("discovery: own quote of %s: %w", op.Name, err)
		}
		if required.Resource.URL != "" {
			doc.Resource = required.Resource.URL
		}
		resources = append(resources, doc)
		d.items = append(d.items, discoveryItem{
			Resource: doc.Resource, Type: "http", X402Version: x402.Version, Accepts: required.Accepts,
			LastUpdated: now.UTC().Format(time.RFC3339),
			Metadata: map[string]any{
				"name": op.Name, "description": op.Description, "method": http.MethodPost,
				"mimeType": "application/json", "price": doc.Price, "extensions": required.Extensions,
			},
		})
	}
	var err error
	d.wellKnown, err = json.Marshal(map[string]any{
		"x402Version": x402.Version,
		"name":        "x402d",
		"description": "Pay-per-call utility operations over x402 (no accounts, no API keys), and a free index of x402 sellers.",
		"facilitator": nil,
		"networks":    networks,
		"resources":   resources,
		"discovery":   publicURL + "/api/x402/discovery/resources",
		"openapi":     publicURL + "/openapi.json",
		"index":       publicURL + "/api/xindex/summary",
	})
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	if d.openAPI, err = openAPIDocument(ops, publicURL); err != nil {
		return nil, err
	}
	return d, nil
}

func (s *Server) wellKnown(c echo.Context) error {
	return c.JSONBlob(http.StatusOK, s.discovery.wellKnown)
}

func (s *Server) openAPI(c echo.Context) error {
	return c.JSONBlob(http.StatusOK, s.discovery.openAPI)
}

// discoveryResources is GET /api/x402/discovery/resources in the Bazaar list
// format: type (http), limit (1-100, default 20) and offset.
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
	if page == nil {
		page = []discoveryItem{}
	}
	return c.JSON(http.StatusOK, map[string]any{
		"x402Version": x402.Version,
		"items":       page,
		"pagination":  map[string]int{"limit": limit, "offset": offset, "total": total},
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
