package index

import (
	"embed"
	"fmt"
	"html/template"
	"io"
	"net/url"
	"strconv"
	"time"
)

//go:embed templates/page.html templates/host.html templates/changes.html
var templates embed.FS

// HTMLPage renders /x402-index: the summary, a searchable and sortable host
// table with liveness badges, and the honesty note; and each host's page
// (/x402-index/hosts/<host>), and the latest changes (/x402-index/changes).
// No JavaScript needed.
type HTMLPage struct {
	tmpl    *template.Template
	host    *template.Template
	changes *template.Template
}

// NewHTMLPage parses the page's template.
func NewHTMLPage() (*HTMLPage, error) {
	funcs := template.FuncMap{
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
		"price": formatUSDC,
		"percent": func(v *float64) string {
			if v == nil {
				return "–"
			}
			return strconv.FormatFloat(*v*100, 'f', 1, 64) + " %"
		},
		"hostPath":       HostPath,
		"partialWindows": partialWindows,
	}
	t, err := template.New("page.html").Funcs(funcs).ParseFS(templates, "templates/page.html")
	if err != nil {
		return nil, fmt.Errorf("index page: %w", err)
	}
	h, err := template.New("host.html").Funcs(funcs).ParseFS(templates, "templates/host.html")
	if err != nil {
		return nil, fmt.Errorf("index host page: %w", err)
	}
	c, err := template.New("changes.html").Funcs(funcs).ParseFS(templates, "templates/changes.html")
	if err != nil {
		return nil, fmt.Errorf("index changes page: %w", err)
	}
	return &HTMLPage{tmpl: t, host: h, changes: c}, nil
}

// partialWindows names the windows of e not read whole
// (EvidenceWindow.Complete), the shortest first.
func partialWindows(e *Evidence) []string {
	var out []string
	for _, w := range []struct {
		name   string
		window EvidenceWindow
	}{{"24 h", e.Last24h}, {"7 d", e.Last7d}, {"30 d", e.Last30d}} {
		if !w.window.Complete {
			out = append(out, w.name)
		}
	}
	return out
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
	// Quote is the quote_matches_listing filter ("", true, false, null).
	Quote string
	// MinPayers, MinVolumeUSDC and MaxTopPayerShare are the filters on
	// the on-chain figures as asked (HostQuery's), empty when not.
	MinPayers, MinVolumeUSDC, MaxTopPayerShare string
	// Limit is the most hosts shown; the page says when it was reached.
	Limit int
	Bands []Band
}

// PageDataOf returns what the page shows of hosts found by q (which Check
// has accepted), with the index's summary: the search and its filters as
// asked, for the form and the sort links.
func PageDataOf(s *Summary, hosts []Host, q HostQuery) *PageData {
	d := &PageData{Summary: s, Hosts: hosts, Q: q.Q, Sort: q.Sort, Quote: q.QuoteMatchesListing, Limit: q.Limit,
		MinVolumeUSDC: q.MinVolumeUSDC}
	if q.MinPayers > 0 {
		d.MinPayers = strconv.Itoa(q.MinPayers)
	}
	if q.MaxTopPayerShare != nil {
		d.MaxTopPayerShare = strconv.FormatFloat(*q.MaxTopPayerShare, 'f', -1, 64)
	}
	return d
}

// SortLink returns the page URL sorted by key, keeping the search and its
// filters.
func (d *PageData) SortLink(key string) string {
	v := url.Values{}
	for _, f := range []struct{ name, value string }{
		{"q", d.Q}, {"quote_matches_listing", d.Quote},
		{"min_payers", d.MinPayers}, {"min_volume_usdc", d.MinVolumeUSDC}, {"max_top_payer_share", d.MaxTopPayerShare},
	} {
		if f.value != "" {
			v.Set(f.name, f.value)
		}
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

// HostPageData is what a host's page shows.
type HostPageData struct {
	*HostDetail
	// Chart is the probes of 30 days as SVG (ProbeChart).
	Chart template.HTML
	// Honesty is the index's note.
	Honesty string
}

// RenderHost writes the page of a host.
func (p *HTMLPage) RenderHost(w io.Writer, d *HostDetail, now time.Time) error {
	return p.host.Execute(w, &HostPageData{HostDetail: d, Chart: ProbeChart(d.Probes, now), Honesty: Honesty})
}

// RenderChanges writes the page of the latest changes (newest first).
func (p *HTMLPage) RenderChanges(w io.Writer, changes []Change) error {
	return p.changes.Execute(w, struct{ Changes []Change }{changes})
}
