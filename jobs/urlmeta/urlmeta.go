// Package urlmeta implements the url-meta operation: fetch one public URL
// through the guarded client and report the page's metadata (status, title,
// description, canonical URL, language, Open Graph and Twitter cards, link
// count, a text sample). Pages whose metadata is written by JavaScript are
// rendered in headless Chromium.
//
// A page's 4xx or 5xx status is data, and so is a host that cannot be
// reached or a redirect the guard refuses (status null, error set). A URL
// that is not public http(s) is refused by Validate, before any payment.
package urlmeta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/x402d/x402d/browser"
	"github.com/x402d/x402d/fetch"
	"github.com/x402d/x402d/jobs"
)

// Kind is the operation's name and River job kind.
const Kind = "url-meta"

// maxURLChars bounds the url field.
const maxURLChars = 4096

// Input is the request body of url-meta.
type Input struct {
	// URL is the page to describe: public http or https.
	URL string `json:"url"`
}

// Kind returns "url-meta".
func (Input) Kind() string { return Kind }

// Validate refuses a missing URL and any URL the fetch guard refuses before
// I/O (other schemes, credentials, private or loopback address literals,
// metadata host names), unless lim.FetchAllow lets the address through.
func (in Input) Validate(lim *jobs.Limits) error {
	if in.URL == "" {
		return jobs.Invalid("url", "is required")
	}
	if utf8.RuneCountInString(in.URL) > maxURLChars {
		return jobs.Invalid("url", "is longer than %d characters", maxURLChars)
	}
	if err := fetch.CheckURLAllowing(in.URL, lim.FetchAllow); err != nil {
		return jobs.Invalid("url", "must be a public http(s) URL: %v", err)
	}
	return nil
}

// Result is url-meta's result object (contract.md, "Results per operation").
// Strings the page does not provide are null.
type Result struct {
	URL         string            `json:"url"`
	FinalURL    *string           `json:"final_url"`
	Status      *int              `json:"status"`
	ContentType *string           `json:"content_type"`
	Title       *string           `json:"title"`
	Description *string           `json:"description"`
	Canonical   *string           `json:"canonical"`
	Lang        *string           `json:"lang"`
	OG          map[string]string `json:"og"`
	Twitter     map[string]string `json:"twitter"`
	LinkCount   int               `json:"link_count"`
	TextSample  string            `json:"text_sample"`
	Rendered    bool              `json:"rendered"`
	ElapsedMS   int64             `json:"elapsed_ms"`
	// Error says why there is no page: unreachable host, timeout, a refused
	// redirect ("refused: ..."). Set only when Status is null.
	Error string `json:"error,omitempty"`
}

// Renderer loads a page in a browser and returns its DOM as HTML and the URL
// it ended on. *browser.Pool and *browser.Lazy implement it.
type Renderer interface {
	Render(ctx context.Context, rawURL string) (html, finalURL string, err error)
}

var _ Renderer = (*browser.Pool)(nil)

// Worker computes url-meta results.
type Worker struct {
	// Fetch is the guarded client. Required.
	Fetch *fetch.Client
	// Browser renders JavaScript-driven pages (a *browser.Pool or a
	// *browser.Lazy). Nil means never render.
	Browser Renderer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Work fetches in.URL and describes the page. Only a cancelled ctx (the job
// itself stopped) is an error; everything that happens to the page is data.
func (w *Worker) Work(ctx context.Context, in Input) (*Result, error) {
	if w.Fetch == nil {
		return nil, errors.New("url-meta: Worker.Fetch is nil")
	}
	logger := w.Logger
	if logger == nil {
		logger = slog.Default()
	}
	start := time.Now()
	res := &Result{URL: in.URL, OG: map[string]string{}, Twitter: map[string]string{}}
	defer func() { res.ElapsedMS = time.Since(start).Milliseconds() }()

	resp, err := w.Fetch.Get(ctx, in.URL)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("fetch %s: %w", in.URL, ctx.Err())
		}
		res.Error = describeError(err)
		return res, nil
	}
	res.Status = &resp.StatusCode
	res.FinalURL = ptr(resp.URL.String())
	ct := resp.Header.Get("Content-Type")
	res.ContentType = nonEmpty(ct)

	if !isHTML(ct, resp.Body) {
		return res, nil
	}
	page, err := parseHTML(resp.Body, ct, resp.URL)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", resp.URL.Redacted(), err)
	}
	if page.Lang == "" {
		page.Lang = firstLanguage(resp.Header.Get("Content-Language"))
	}

	if w.Browser != nil && resp.StatusCode < 400 && page.needsRender() {
		html, final, err := w.Browser.Render(ctx, resp.URL.String())
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("render %s: %w", resp.URL.Redacted(), ctx.Err())
		case err != nil:
			logger.WarnContext(ctx, "url-meta: render failed, keeping the static page", "url", resp.URL.Redacted(), "err", err)
		default:
			base, perr := url.Parse(final)
			if perr != nil {
				base = resp.URL
			}
			rendered, perr := parseHTML([]byte(html), "text/html; charset=utf-8", base)
			if perr == nil {
				if rendered.Lang == "" {
					rendered.Lang = page.Lang
				}
				page = rendered
				res.Rendered = true
				res.FinalURL = ptr(base.String())
			}
		}
	}

	res.Title = nonEmpty(page.Title)
	res.Description = nonEmpty(page.Description)
	res.Canonical = nonEmpty(page.Canonical)
	res.Lang = nonEmpty(page.Lang)
	res.OG = page.OG
	res.Twitter = page.Twitter
	res.LinkCount = page.LinkCount
	res.TextSample = page.TextSample
	return res, nil
}

// describeError turns a fetch error into the result's error text. A refusal
// reads "refused: ...", as the contract's callers expect.
func describeError(err error) string {
	var re *fetch.RefusedError
	if errors.As(err, &re) {
		return re.Error()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout: " + err.Error()
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "unreachable: " + dnsErr.Error()
	}
	return "unreachable: " + err.Error()
}

func ptr[T any](v T) *T { return &v }

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// firstLanguage returns the first tag of a Content-Language header.
func firstLanguage(h string) string {
	tag, _, _ := strings.Cut(h, ",")
	return strings.TrimSpace(tag)
}

// inputSchema is the JSON Schema of url-meta's request body.
const inputSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "url-meta request",
  "type": "object",
  "properties": {
    "url": {
      "type": "string",
      "format": "uri",
      "minLength": 1,
      "maxLength": 4096,
      "description": "One public http(s) URL. Private, loopback, link-local and metadata addresses, other schemes and URLs with credentials are refused."
    }
  },
  "required": ["url"],
  "additionalProperties": false
}`

// Op is url-meta's catalogue entry and request decoder.
var Op = jobs.Define[Input](jobs.Spec{
	Name:        Kind,
	Price:       "0.030000",
	Queue:       jobs.QueueBrowser,
	ReadsWeb:    true,
	Description: "Page metadata of one public URL: HTTP status, title, meta/og description, canonical URL, language, Open Graph and Twitter cards, link count and a short text sample; pages built by JavaScript are rendered in headless Chromium.",
	InputExample: Input{
		URL: "https://example.com/",
	},
	InputSchema: json.RawMessage(inputSchema),
	OutputExample: Result{
		URL:         "https://example.com/",
		FinalURL:    ptr("https://example.com/"),
		Status:      ptr(200),
		ContentType: ptr("text/html; charset=UTF-8"),
		Title:       ptr("Example Domain"),
		Description: nil,
		Canonical:   nil,
		Lang:        ptr("en"),
		OG:          map[string]string{},
		Twitter:     map[string]string{},
		LinkCount:   1,
		TextSample:  "Example Domain This domain is for use in documentation examples without needing permission. Avoid use in operations. Learn more",
		Rendered:    false,
		ElapsedMS:   184,
	},
})
