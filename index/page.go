package index

import (
	"embed"
	"fmt"
	"html/template"
	"io"
	"net/url"
	"strconv"
)

//go:embed templates/page.html
var templates embed.FS

// HTMLPage renders /x402-index: the summary, a searchable and sortable host
// table with liveness badges, and the honesty note; no JavaScript needed.
type HTMLPage struct {
	tmpl *template.Template
}

// NewHTMLPage parses the page's template.
func NewHTMLPage() (*HTMLPage, error) {
	t, err := template.New("page.html").Funcs(template.FuncMap{
		"isTrue": func(b *bool) bool { return b != nil && *b },
		"priceRange": func(lo, hi *float64) string {
			if lo == nil {
				return "unpriced"
			}
			if hi == nil || *hi == *lo {
				return formatUSDC(lo)
			}
			return formatUSDC(lo) + " – " + formatUSDC(hi)
		},
	}).ParseFS(templates, "templates/page.html")
	if err != nil {
		return nil, fmt.Errorf("index page: %w", err)
	}
	return &HTMLPage{tmpl: t}, nil
}

// formatUSDC writes a price in USDC with the digits it needs ("0.002").
func formatUSDC(v *float64) string {
	if v == nil {
		return "–"
	}
	return strconv.FormatFloat(*v, 'f', -1, 64)
}

// Band is one price band as the page shows it.
type Band struct {
	Label string
	Count int
}

// PageData is what the page shows.
type PageData struct {
	Summary *Summary
	Hosts   []Host
	Q, Sort string
	// Limit is the most hosts shown; the page says when it was reached.
	Limit int
	Bands []Band
}

// SortLink returns the page URL sorted by key, keeping the search.
func (d *PageData) SortLink(key string) string {
	v := url.Values{}
	if d.Q != "" {
		v.Set("q", d.Q)
	}
	v.Set("sort", key)
	return "/x402-index?" + v.Encode()
}

// Render writes the page.
func (p *HTMLPage) Render(w io.Writer, d *PageData) error {
	d.Bands = []Band{
		{"free", d.Summary.PriceBands["free"]}, {"< 0.001", d.Summary.PriceBands["under_1m"]},
		{"< 0.01", d.Summary.PriceBands["under_10m"]}, {"< 0.1", d.Summary.PriceBands["under_100m"]},
		{"< 1", d.Summary.PriceBands["under_1"]}, {"≥ 1 USDC", d.Summary.PriceBands["over_1"]},
	}
	return p.tmpl.Execute(w, d)
}
