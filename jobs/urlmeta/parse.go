package urlmeta

import (
	"bytes"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/PuerkitoBio/goquery"
	"golang.org/x/net/html"
	"golang.org/x/net/html/charset"
)

// textSampleChars is about how long text_sample is, in characters.
const textSampleChars = 300

// page is the metadata read from one HTML document.
type page struct {
	Title       string
	Description string
	Canonical   string
	Lang        string
	OG          map[string]string
	Twitter     map[string]string
	LinkCount   int
	TextSample  string

	// For needsRender.
	scripts   int
	textChars int
	emptyRoot bool
}

// isHTML reports whether a response is an HTML document, by its media type
// or, when it declares none, by sniffing.
func isHTML(contentType string, body []byte) bool {
	if contentType == "" {
		contentType = http.DetectContentType(body)
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(strings.Split(contentType, ";")[0]))
	}
	return mt == "text/html" || mt == "application/xhtml+xml"
}

// parseHTML decodes body by its declared charset (the Content-Type header,
// a BOM, or a <meta> in the first 1024 bytes, as browsers do) and reads its
// metadata. Relative URLs resolve against base, the document's final URL.
func parseHTML(body []byte, contentType string, base *url.URL) (*page, error) {
	r, err := charset.NewReader(bytes.NewReader(body), contentType)
	if err != nil {
		return nil, fmt.Errorf("decode charset: %w", err)
	}
	doc, err := goquery.NewDocumentFromReader(r)
	if err != nil {
		return nil, fmt.Errorf("parse HTML: %w", err)
	}
	if href, ok := doc.Find("base[href]").First().Attr("href"); ok {
		if b, err := base.Parse(strings.TrimSpace(href)); err == nil {
			base = b
		}
	}

	p := &page{OG: map[string]string{}, Twitter: map[string]string{}}
	title := doc.Find("head title").First()
	if title.Length() == 0 {
		title = doc.Find("title").Not("svg title").First()
	}
	p.Title = collapse(title.Text())

	var nameDescription string
	doc.Find("meta").Each(func(_ int, s *goquery.Selection) {
		content, ok := s.Attr("content")
		if !ok {
			return
		}
		content = collapse(content)
		name := strings.ToLower(strings.TrimSpace(s.AttrOr("name", "")))
		prop := strings.ToLower(strings.TrimSpace(s.AttrOr("property", "")))
		switch {
		case name == "description" && nameDescription == "":
			nameDescription = content
		case strings.EqualFold(s.AttrOr("http-equiv", ""), "content-language") && p.Lang == "":
			p.Lang = firstLanguage(content)
		}
		for _, key := range []string{prop, name} {
			switch {
			case strings.HasPrefix(key, "og:"):
				setFirst(p.OG, strings.TrimPrefix(key, "og:"), content, base)
			case strings.HasPrefix(key, "twitter:"):
				setFirst(p.Twitter, strings.TrimPrefix(key, "twitter:"), content, base)
			}
		}
	})
	p.Description = firstNonEmpty(nameDescription, p.OG["description"], p.Twitter["description"])

	doc.Find("link[rel][href]").EachWithBreak(func(_ int, s *goquery.Selection) bool {
		for rel := range strings.FieldsSeq(strings.ToLower(s.AttrOr("rel", ""))) {
			if rel == "canonical" {
				p.Canonical = resolve(base, s.AttrOr("href", ""))
				return p.Canonical == ""
			}
		}
		return true
	})

	if lang := strings.TrimSpace(doc.Find("html").First().AttrOr("lang", "")); lang != "" {
		p.Lang = lang
	} else if lang := strings.TrimSpace(doc.Find("html").First().AttrOr("xml:lang", "")); lang != "" {
		p.Lang = lang
	}

	p.LinkCount = doc.Find("a[href]").Length()
	p.scripts = doc.Find("script").Length()

	// A little more than the sample, to cut it at a word boundary.
	text := visibleText(doc.Find("body").First().Nodes, textSampleChars+1)
	p.textChars = utf8.RuneCountInString(text)
	p.TextSample = sample(text, textSampleChars)
	doc.Find("#root, #app, #__next, #__nuxt, #svelte, app-root, [data-reactroot]").EachWithBreak(func(_ int, s *goquery.Selection) bool {
		if collapse(s.Text()) == "" {
			p.emptyRoot = true
			return false
		}
		return true
	})
	return p, nil
}

// needsRender reports whether the static HTML looks like a JavaScript app
// whose metadata only the browser would see: no title and no description,
// scripts, and an empty body or an empty application root element.
func (p *page) needsRender() bool {
	if p.Title != "" || p.Description != "" {
		return false
	}
	if p.scripts == 0 {
		return false
	}
	return p.textChars < 40 || p.emptyRoot
}

// isURLKey reports whether an Open Graph or Twitter property holds a URL,
// resolved against the page's URL when relative.
func isURLKey(key string) bool {
	switch key {
	case "url", "image", "image:url", "image:secure_url", "image:src",
		"video", "video:url", "video:secure_url", "audio", "player":
		return true
	}
	return false
}

// setFirst records key=value in m unless key is already there (the first
// occurrence wins, as consumers of the protocols read them).
func setFirst(m map[string]string, key, value string, base *url.URL) {
	if key == "" || value == "" {
		return
	}
	if _, ok := m[key]; ok {
		return
	}
	if isURLKey(key) {
		if abs := resolve(base, value); abs != "" {
			value = abs
		}
	}
	m[key] = value
}

// resolve returns ref resolved against base, or "" when ref is not a URL.
func resolve(base *url.URL, ref string) string {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return ""
	}
	u, err := base.Parse(ref)
	if err != nil {
		return ""
	}
	return u.String()
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// collapse trims s and folds every run of white space into one space.
func collapse(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// sample returns the first max characters of s, cut back to a word boundary
// when one is near.
func sample(s string, max int) string {
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	cut := max
	for i := max; i > max-40 && i > 0; i-- {
		if r[i] == ' ' {
			cut = i
			break
		}
	}
	return strings.TrimSpace(string(r[:cut]))
}

// isHidden reports whether an element holds no visible text.
func isHidden(name string) bool {
	switch name {
	case "script", "style", "noscript", "template", "head", "title", "svg",
		"math", "iframe", "object", "canvas", "select", "datalist":
		return true
	}
	return false
}

// isInline reports whether an element leaves words together; every other
// element separates them.
func isInline(name string) bool {
	switch name {
	case "a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "dfn", "em",
		"font", "i", "kbd", "mark", "q", "s", "samp", "small", "span", "strong",
		"sub", "sup", "time", "u", "var", "del", "ins", "label":
		return true
	}
	return false
}

// visibleText returns the first max characters or so of the text a reader
// sees in nodes, white space collapsed, block elements separating words. It
// stops walking once it has enough, so huge pages cost no more than small.
func visibleText(nodes []*html.Node, max int) string {
	t := textCollector{max: max}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if t.full() {
			return
		}
		switch n.Type {
		case html.TextNode:
			t.write(n.Data)
			return
		case html.ElementNode:
			if isHidden(n.Data) {
				return
			}
			if _, hidden := attr(n, "hidden"); hidden {
				return
			}
			if v, _ := attr(n, "aria-hidden"); v == "true" {
				return
			}
		}
		block := n.Type == html.ElementNode && !isInline(n.Data)
		if block {
			t.space()
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
		if block {
			t.space()
		}
	}
	for _, n := range nodes {
		walk(n)
	}
	return strings.TrimSpace(t.b.String())
}

// textCollector accumulates text with white space collapsed, up to max
// characters.
type textCollector struct {
	b       strings.Builder
	n       int // characters written
	max     int
	pending bool // a space is due before the next word
}

func (t *textCollector) full() bool { return t.n >= t.max }

func (t *textCollector) space() { t.pending = t.n > 0 }

func (t *textCollector) write(s string) {
	for _, r := range s {
		if t.full() {
			return
		}
		if unicode.IsSpace(r) {
			t.space()
			continue
		}
		if t.pending {
			t.b.WriteByte(' ')
			t.n++
			t.pending = false
		}
		t.b.WriteRune(r)
		t.n++
	}
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}
