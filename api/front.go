package api

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/x402d/x402d/x402"
)

//go:embed templates/front.html
var frontTemplate embed.FS

// frontResource is an operation as the front page lists it.
type frontResource struct {
	Name, Path, Price, Description string
	Sellable                       bool
	BlockedReason                  string
}

// frontAccepted is a network and asset that quotes offer.
type frontAccepted struct {
	Network, Asset string
}

// frontPage renders the front page once: what the service sells, at what
// price, on which networks, and how to pay. withOps adds the operator
// login link.
func frontPage(base string, resources []resourceDoc, withOps bool) ([]byte, error) {
	t, err := template.ParseFS(frontTemplate, "templates/front.html")
	if err != nil {
		return nil, fmt.Errorf("front page: %w", err)
	}
	data := struct {
		Description string
		Base        string
		Ops         bool
		Resources   []frontResource
		Accepted    []frontAccepted
		Supported   []string
	}{Description: serviceDescription, Base: base, Ops: withOps, Supported: x402.NetworkIDs()}
	seen := map[string]bool{}
	for _, r := range resources {
		fr := frontResource{Name: r.Name, Path: "/api/x402/" + r.Name, Price: r.Price.Amount,
			Description: r.Description, Sellable: r.Sellable}
		if r.BlockedReason != nil {
			fr.BlockedReason = *r.BlockedReason
		}
		data.Resources = append(data.Resources, fr)
		for _, a := range r.Accepts {
			if key := a.Network + "/" + a.Asset; !seen[key] {
				seen[key] = true
				data.Accepted = append(data.Accepted, frontAccepted{Network: a.Network, Asset: a.Asset})
			}
		}
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("front page: %w", err)
	}
	return buf.Bytes(), nil
}

// front is GET /: the page for a browser, the discovery manifest
// (/.well-known/x402.json) for a client that asks for JSON.
func (s *Server) front(c echo.Context) error {
	if wantsJSON(c.Request().Header.Get("Accept")) {
		return c.JSONBlob(http.StatusOK, s.discovery.wellKnown)
	}
	return c.HTMLBlob(http.StatusOK, s.discovery.front)
}

// wantsJSON reports whether an Accept header asks for JSON rather than HTML.
func wantsJSON(accept string) bool {
	return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/html")
}
