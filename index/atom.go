package index

import (
	"encoding/xml"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// atomFeed is an Atom 1.0 feed (RFC 4287).
type atomFeed struct {
	XMLName xml.Name    `xml:"http://www.w3.org/2005/Atom feed"`
	ID      string      `xml:"id"`
	Title   string      `xml:"title"`
	Updated string      `xml:"updated"`
	Links   []atomLink  `xml:"link"`
	Author  atomAuthor  `xml:"author"`
	Entries []atomEntry `xml:"entry"`
}

type atomLink struct {
	Rel  string `xml:"rel,attr,omitempty"`
	Type string `xml:"type,attr,omitempty"`
	Href string `xml:"href,attr"`
}

type atomAuthor struct {
	Name string `xml:"name"`
}

type atomEntry struct {
	ID       string      `xml:"id"`
	Title    string      `xml:"title"`
	Updated  string      `xml:"updated"`
	Link     atomLink    `xml:"link"`
	Category atomCat     `xml:"category"`
	Content  atomContent `xml:"content"`
}

type atomCat struct {
	Term string `xml:"term,attr"`
}

type atomContent struct {
	Type string `xml:"type,attr"`
	Body string `xml:",chardata"`
}

// WriteAtom writes changes (newest first) as an Atom feed whose links are
// under publicURL; self is the feed's own URL.
func WriteAtom(w io.Writer, publicURL, self string, changes []Change) error {
	publicURL = strings.TrimRight(publicURL, "/")
	authority := "x402d"
	if u, err := url.Parse(publicURL); err == nil && u.Host != "" {
		authority = u.Hostname()
	}
	f := atomFeed{
		ID:      "tag:" + authority + ",2026:x402-index/changes",
		Title:   "Changes of the x402 market (x402d index)",
		Updated: time.Unix(0, 0).UTC().Format(time.RFC3339),
		Links: []atomLink{{Rel: "self", Type: "application/atom+xml", Href: self},
			{Rel: "alternate", Type: "text/html", Href: publicURL + "/x402-index"}},
		Author:  atomAuthor{Name: "x402d index"},
		Entries: make([]atomEntry, 0, len(changes)),
	}
	if len(changes) > 0 {
		f.Updated = changes[0].At.UTC().Format(time.RFC3339)
	}
	for _, c := range changes {
		f.Entries = append(f.Entries, atomEntry{
			ID:       fmt.Sprintf("tag:%s,2026:x402-index/change/%d", authority, c.ID),
			Title:    c.Title(),
			Updated:  c.At.UTC().Format(time.RFC3339),
			Link:     atomLink{Rel: "alternate", Type: "text/html", Href: publicURL + HostPath(c.Host)},
			Category: atomCat{Term: c.Kind},
			Content:  atomContent{Type: "text", Body: c.Title() + " at " + c.At.UTC().Format(time.RFC3339)},
		})
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return fmt.Errorf("atom: %w", err)
	}
	enc := xml.NewEncoder(w)
	if err := enc.Encode(f); err != nil {
		return fmt.Errorf("atom: %w", err)
	}
	return nil
}

// HostPath is the path of a host's page.
func HostPath(host string) string { return "/x402-index/hosts/" + url.PathEscape(host) }
