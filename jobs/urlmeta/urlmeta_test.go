package urlmeta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/japanese"

	"github.com/x402d/x402d/browser"
	"github.com/x402d/x402d/fetch"
	"github.com/x402d/x402d/jobs"
)

// testPool is the package's one browser, for the rendering tests.
var testPool *browser.Pool

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

func TestMain(m *testing.M) {
	code := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		testPool, err = browser.New(ctx, &browser.Config{
			Fetch:         fetch.New(&fetch.Config{AllowCIDRs: loopback}),
			MaxPages:      2,
			RenderTimeout: 10 * time.Second,
			IdleWait:      2 * time.Second,
			Logger:        quiet(),
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: start the test browser: %v\n(url-meta's rendering tests need the system Chromium: apt-get update && apt-get install -y chromium)\n", err)
			return 1
		}
		profile := testPool.ProfileDir()
		code := m.Run()
		if err := testPool.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: close the test browser: %v\n", err)
			return 1
		}
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range procs {
			if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), profile) {
				fmt.Fprintf(os.Stderr, "FAIL: Chromium process %s left behind\n", f)
				return 1
			}
		}
		return code
	}()
	os.Exit(code)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// worker returns a Worker whose guard allows loopback (the test servers).
func worker(pool *browser.Pool, cfg fetch.Config) *Worker {
	cfg.AllowCIDRs = loopback
	w := &Worker{Fetch: fetch.New(&cfg), Logger: quiet()}
	if pool != nil {
		w.Browser = pool
	}
	return w
}

func serve(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestValidate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		body  string
		field string // "" = valid
	}{
		{name: "Public", body: `{"url":"https://example.com/page?q=1"}`},
		{name: "PublicIP", body: `{"url":"http://93.184.215.14/"}`},
		{name: "Missing", body: `{}`, field: "url"},
		{name: "Empty", body: `{"url":""}`, field: "url"},
		{name: "NotString", body: `{"url":5}`, field: "url"},
		{name: "Unknown", body: `{"url":"https://example.com/","x":1}`, field: "x"},
		{name: "Loopback", body: `{"url":"http://127.0.0.1:8080/"}`, field: "url"},
		{name: "LoopbackHex", body: `{"url":"http://0x7f.1/"}`, field: "url"},
		{name: "Private", body: `{"url":"http://192.168.0.1/"}`, field: "url"},
		{name: "Metadata", body: `{"url":"http://169.254.169.254/latest/meta-data/"}`, field: "url"},
		{name: "MetadataName", body: `{"url":"http://metadata.google.internal/"}`, field: "url"},
		{name: "IPv6Mapped", body: `{"url":"http://[::ffff:10.0.0.1]/"}`, field: "url"},
		{name: "Localhost", body: `{"url":"http://localhost/"}`, field: "url"},
		{name: "LocalhostLocaldomain", body: `{"url":"http://localhost.localdomain/"}`, field: "url"},
		{name: "SubLocalhost", body: `{"url":"http://a.localhost/"}`, field: "url"},
		{name: "MDNS", body: `{"url":"http://printer.local/"}`, field: "url"},
		{name: "Internal", body: `{"url":"https://db.internal/"}`, field: "url"},
		{name: "HomeArpa", body: `{"url":"http://router.home.arpa/"}`, field: "url"},
		{name: "SingleLabel", body: `{"url":"http://intranet/"}`, field: "url"},
		{name: "FileScheme", body: `{"url":"file:///etc/passwd"}`, field: "url"},
		{name: "Credentials", body: `{"url":"https://user:pw@example.com/"}`, field: "url"},
		{name: "NoScheme", body: `{"url":"example.com"}`, field: "url"},
		{name: "TooLong", body: `{"url":"https://example.com/` + strings.Repeat("a", 5000) + `"}`, field: "url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args, err := Op.Decode("call-1", []byte(tt.body), &jobs.DefaultLimits)
			if tt.field == "" {
				require.NoError(t, err)
				require.Equal(t, Kind, args.Kind())
				return
			}
			var inv *jobs.InvalidError
			require.True(t, errors.As(err, &inv), "want *jobs.InvalidError, got %v", err)
			require.Equal(t, tt.field, inv.Field)
		})
	}
}

func TestOpSpec(t *testing.T) {
	t.Parallel()

	require.Equal(t, "url-meta", Op.Name)
	require.Equal(t, "0.030000", Op.Price)
	require.Equal(t, jobs.QueueBrowser, Op.Queue)
	require.True(t, json.Valid(Op.InputSchema))

	body, err := json.Marshal(Op.InputExample)
	require.NoError(t, err)
	_, err = Op.Decode("c", body, &jobs.DefaultLimits)
	require.NoError(t, err)

	requireContractKeys(t, Op.OutputExample)
}

// requireContractKeys checks that v marshals to exactly the contract's
// url-meta keys (plus error when set), og and twitter being objects.
func requireContractKeys(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	want := []string{"url", "final_url", "status", "content_type", "title", "description",
		"canonical", "lang", "og", "twitter", "link_count", "text_sample", "rendered", "elapsed_ms"}
	if _, ok := m["error"]; ok {
		want = append(want, "error")
	}
	got := make([]string, 0, len(m))
	for k := range m {
		got = append(got, k)
	}
	require.ElementsMatch(t, want, got)
	require.IsType(t, map[string]any{}, m["og"])
	require.IsType(t, map[string]any{}, m["twitter"])
	return m
}

const staticPage = `<!DOCTYPE html>
<html lang="en-GB">
<head>
  <meta charset="utf-8">
  <title>
     The   Static Page
  </title>
  <meta name="Description" content="A page with every kind of metadata.">
  <meta property="og:title" content="OG title">
  <meta property="og:description" content="OG description">
  <meta property="og:image" content="/img/card.png">
  <meta property="og:type" content="article">
  <meta property="og:title" content="second og:title is ignored">
  <meta name="twitter:card" content="summary_large_image">
  <meta name="twitter:site" content="@example">
  <link rel="stylesheet" href="/s.css">
  <link rel="canonical" href="../canonical/page?x=1">
  <style>body { color: red }</style>
  <script>var hidden = "not text";</script>
</head>
<body>
  <nav><a href="/">Home</a> <a href="/about">About</a></nav>
  <h1>Hello</h1><p>First   paragraph with <b>bold</b>
  text.</p><p>Second</p>
  <noscript>enable JS</noscript>
  <div hidden>secret hidden text</div>
  <a href="https://other.example/">out</a>
  <a name="anchor-without-href">x</a>
</body>
</html>`

func TestWorkStaticPage(t *testing.T) {
	t.Parallel()

	srv := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, staticPage)
	})
	res, err := worker(nil, fetch.Config{}).Work(t.Context(), Input{URL: srv.URL + "/articles/one"})
	require.NoError(t, err)

	require.Equal(t, srv.URL+"/articles/one", res.URL)
	require.Equal(t, srv.URL+"/articles/one", *res.FinalURL)
	require.Equal(t, 200, *res.Status)
	require.Equal(t, "text/html; charset=utf-8", *res.ContentType)
	require.Equal(t, "The Static Page", *res.Title)
	require.Equal(t, "A page with every kind of metadata.", *res.Description)
	require.Equal(t, srv.URL+"/canonical/page?x=1", *res.Canonical)
	require.Equal(t, "en-GB", *res.Lang)
	require.Equal(t, map[string]string{
		"title":       "OG title",
		"description": "OG description",
		"image":       srv.URL + "/img/card.png",
		"type":        "article",
	}, res.OG)
	require.Equal(t, map[string]string{"card": "summary_large_image", "site": "@example"}, res.Twitter)
	require.Equal(t, 3, res.LinkCount)
	require.Equal(t, "Home About Hello First paragraph with bold text. Second out x", res.TextSample)
	require.False(t, res.Rendered)
	require.Empty(t, res.Error)
	require.GreaterOrEqual(t, res.ElapsedMS, int64(0))
	requireContractKeys(t, res)
}

func TestWorkFallbacks(t *testing.T) {
	t.Parallel()

	srv := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Language", "de-DE, en")
		_, _ = io.WriteString(w, `<html><head><base href="https://cdn.example/base/">
<meta property="og:description" content="only og">
<link rel="alternate canonical" href="c.html"></head><body>`+strings.Repeat("word ", 200)+`</body></html>`)
	})
	res, err := worker(nil, fetch.Config{}).Work(t.Context(), Input{URL: srv.URL})
	require.NoError(t, err)
	require.Nil(t, res.Title)
	require.Equal(t, "only og", *res.Description)
	require.Equal(t, "https://cdn.example/base/c.html", *res.Canonical)
	require.Equal(t, "de-DE", *res.Lang)
	require.Equal(t, "text/html; charset=utf-8", *res.ContentType) // sniffed by the server
	require.LessOrEqual(t, len([]rune(res.TextSample)), textSampleChars)
	require.Greater(t, len([]rune(res.TextSample)), textSampleChars-10)
	require.True(t, strings.HasSuffix(res.TextSample, "word"))
}

func TestWorkStatusIsData(t *testing.T) {
	t.Parallel()

	for _, code := range []int{http.StatusNotFound, http.StatusInternalServerError, http.StatusGone} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			t.Parallel()
			srv := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(code)
				_, _ = fmt.Fprintf(w, "<title>Error %d</title><p>sorry</p>", code)
			})
			res, err := worker(testPool, fetch.Config{}).Work(t.Context(), Input{URL: srv.URL + "/missing"})
			require.NoError(t, err)
			require.Equal(t, code, *res.Status)
			require.Equal(t, fmt.Sprintf("Error %d", code), *res.Title)
			require.Equal(t, "sorry", res.TextSample)
			require.Empty(t, res.Error)
		})
	}
}

func TestWorkRedirectChain(t *testing.T) {
	t.Parallel()

	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/a":
			http.Redirect(w, r, "/b", http.StatusMovedPermanently)
		case "/b":
			http.Redirect(w, r, "/c?from=b", http.StatusFound)
		case "/c":
			_, _ = io.WriteString(w, `<title>C</title><link rel=canonical href="/c">`)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		}
	})
	w := worker(nil, fetch.Config{})

	res, err := w.Work(t.Context(), Input{URL: srv.URL + "/a"})
	require.NoError(t, err)
	require.Equal(t, srv.URL+"/a", res.URL)
	require.Equal(t, srv.URL+"/c?from=b", *res.FinalURL)
	require.Equal(t, "C", *res.Title)
	require.Equal(t, srv.URL+"/c", *res.Canonical)

	res, err = w.Work(t.Context(), Input{URL: srv.URL + "/loop"})
	require.NoError(t, err)
	require.Nil(t, res.Status)
	require.Nil(t, res.FinalURL)
	require.Contains(t, res.Error, "too many redirects")
	requireContractKeys(t, res)
}

func TestWorkRefusedRedirect(t *testing.T) {
	t.Parallel()

	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	w := worker(nil, fetch.Config{})
	for _, to := range []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/",
		"http://[fd00::1]/",
		"http://metadata.google.internal/",
		"file:///etc/passwd",
	} {
		res, err := w.Work(t.Context(), Input{URL: srv.URL + "/?to=" + to})
		require.NoError(t, err)
		require.Nil(t, res.Status, to)
		require.True(t, strings.HasPrefix(res.Error, "refused: "), "%s: %q", to, res.Error)
		requireContractKeys(t, res)
	}
}

func TestWorkRefusedWithoutAllowance(t *testing.T) {
	t.Parallel()

	var hits atomic.Int64
	srv := serve(t, func(http.ResponseWriter, *http.Request) { hits.Add(1) })
	w := &Worker{Fetch: fetch.New(nil), Logger: quiet()}
	res, err := w.Work(t.Context(), Input{URL: srv.URL})
	require.NoError(t, err)
	require.Nil(t, res.Status)
	require.True(t, strings.HasPrefix(res.Error, "refused: "), res.Error)
	require.Zero(t, hits.Load())
}

func TestWorkCharsets(t *testing.T) {
	t.Parallel()

	cp1252, err := charmap.Windows1252.NewEncoder().String(
		`<html><head><meta charset="windows-1252"><title>Café “Crème” – naïve</title>` +
			`<meta name="description" content="Prix: 5 € – déjà vu"></head><body>Œuvre complète</body></html>`)
	require.NoError(t, err)
	sjis, err := japanese.ShiftJIS.NewEncoder().String(
		`<html lang="ja"><head><meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">` +
			`<title>日本語のページ</title></head><body><p>こんにちは、世界</p></body></html>`)
	require.NoError(t, err)
	latin1Header, err := charmap.ISO8859_1.NewEncoder().String(`<title>Grüße</title>`)
	require.NoError(t, err)

	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/1252":
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, cp1252)
		case "/sjis":
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, sjis)
		case "/header":
			w.Header().Set("Content-Type", "text/html; charset=ISO-8859-1")
			_, _ = io.WriteString(w, latin1Header)
		}
	})
	w := worker(nil, fetch.Config{})

	res, err := w.Work(t.Context(), Input{URL: srv.URL + "/1252"})
	require.NoError(t, err)
	require.Equal(t, "Café “Crème” – naïve", *res.Title)
	require.Equal(t, "Prix: 5 € – déjà vu", *res.Description)
	require.Equal(t, "Œuvre complète", res.TextSample)

	res, err = w.Work(t.Context(), Input{URL: srv.URL + "/sjis"})
	require.NoError(t, err)
	require.Equal(t, "日本語のページ", *res.Title)
	require.Equal(t, "こんにちは、世界", res.TextSample)
	require.Equal(t, "ja", *res.Lang)

	res, err = w.Work(t.Context(), Input{URL: srv.URL + "/header"})
	require.NoError(t, err)
	require.Equal(t, "Grüße", *res.Title)
}

func TestWorkHugePage(t *testing.T) {
	t.Parallel()

	srv := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, `<html lang="en"><head><title>Huge</title></head><body><p>start</p>`)
		chunk := strings.Repeat(`<p>filler <a href="/x">link</a></p>`, 1000)
		for range 300 { // about 10 MB
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, `<a href="/never">never read</a></body></html>`)
	})
	res, err := worker(nil, fetch.Config{MaxBodyBytes: 1 << 20}).Work(t.Context(), Input{URL: srv.URL})
	require.NoError(t, err)
	require.Equal(t, 200, *res.Status)
	require.Equal(t, "Huge", *res.Title)
	require.Equal(t, "en", *res.Lang)
	require.True(t, strings.HasPrefix(res.TextSample, "start filler link filler link"))
	// Only the first MiB was parsed: about 1 MiB / 35 bytes of links.
	require.Greater(t, res.LinkCount, 25_000)
	require.Less(t, res.LinkCount, 35_000)
}

func TestWorkNeverAnswers(t *testing.T) {
	t.Parallel()

	release := make(chan struct{})
	srv := serve(t, func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)

	res, err := worker(nil, fetch.Config{Timeout: 300 * time.Millisecond}).Work(t.Context(), Input{URL: srv.URL})
	require.NoError(t, err)
	require.Nil(t, res.Status)
	require.Nil(t, res.FinalURL)
	require.True(t, strings.HasPrefix(res.Error, "timeout: "), res.Error)
	requireContractKeys(t, res)
}

func TestWorkUnreachable(t *testing.T) {
	t.Parallel()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now

	res, err := worker(nil, fetch.Config{}).Work(t.Context(), Input{URL: "http://" + addr + "/"})
	require.NoError(t, err)
	require.Nil(t, res.Status)
	require.True(t, strings.HasPrefix(res.Error, "unreachable: "), res.Error)
	require.Contains(t, res.Error, "connection refused")
}

func TestWorkCancelledJob(t *testing.T) {
	t.Parallel()

	srv := serve(t, func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := worker(nil, fetch.Config{}).Work(ctx, Input{URL: srv.URL})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestWorkNotHTML(t *testing.T) {
	t.Parallel()

	srv := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"title":"<title>not a page</title>"}`)
	})
	res, err := worker(testPool, fetch.Config{}).Work(t.Context(), Input{URL: srv.URL})
	require.NoError(t, err)
	require.Equal(t, 200, *res.Status)
	require.Equal(t, "application/json", *res.ContentType)
	require.Nil(t, res.Title)
	require.Empty(t, res.TextSample)
	require.False(t, res.Rendered)
}

const appPage = `<!doctype html><html><head><meta charset="utf-8"></head>
<body><div id="root"></div>
<script src="/app.js"></script></body></html>`

const appScript = `
document.title = "Rendered App";
document.documentElement.lang = "fr";
const m = document.createElement("meta");
m.name = "description"; m.content = "Written by JavaScript";
document.head.appendChild(m);
document.getElementById("root").innerHTML = '<h1>Bonjour</h1><a href="/one">one</a> <a href="/two">two</a>';
`

func TestWorkRendersJavaScriptPages(t *testing.T) {
	t.Parallel()

	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/app.js":
			w.Header().Set("Content-Type", "text/javascript")
			_, _ = io.WriteString(w, appScript)
		case "/static":
			_, _ = io.WriteString(w, `<title>Static</title><div id="root"></div><script src="/app.js"></script>`)
		default:
			_, _ = io.WriteString(w, appPage)
		}
	})

	res, err := worker(testPool, fetch.Config{}).Work(t.Context(), Input{URL: srv.URL + "/app"})
	require.NoError(t, err)
	require.True(t, res.Rendered)
	require.Equal(t, 200, *res.Status)
	require.Equal(t, "Rendered App", *res.Title)
	require.Equal(t, "Written by JavaScript", *res.Description)
	require.Equal(t, "fr", *res.Lang)
	require.Equal(t, 2, res.LinkCount)
	require.Equal(t, "Bonjour one two", res.TextSample)
	require.Equal(t, srv.URL+"/app", *res.FinalURL)

	// Without a browser the same page is described as served.
	res, err = worker(nil, fetch.Config{}).Work(t.Context(), Input{URL: srv.URL + "/app"})
	require.NoError(t, err)
	require.False(t, res.Rendered)
	require.Nil(t, res.Title)
	require.Zero(t, res.LinkCount)

	// A page with static metadata is not rendered.
	res, err = worker(testPool, fetch.Config{}).Work(t.Context(), Input{URL: srv.URL + "/static"})
	require.NoError(t, err)
	require.False(t, res.Rendered)
	require.Equal(t, "Static", *res.Title)
}

func TestNeedsRender(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		html string
		want bool
	}{
		{"EmptyBodyWithScripts", `<html><body><script src="/a.js"></script></body></html>`, true},
		{"EmptyRootWithText", `<body><div id="__next"></div><footer>` + strings.Repeat("footer text ", 10) + `</footer><script></script></body>`, true},
		{"NoScripts", `<body></body>`, false},
		{"HasTitle", `<title>t</title><body><div id="root"></div><script></script></body>`, false},
		{"HasDescription", `<meta name="description" content="d"><div id="app"></div><script></script>`, false},
		{"TextAndScripts", `<body><p>` + strings.Repeat("real content ", 10) + `</p><script></script></body>`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := parseHTML([]byte(tt.html), "text/html", mustURL(t, "https://example.com/"))
			require.NoError(t, err)
			require.Equal(t, tt.want, p.needsRender())
		})
	}
}

func BenchmarkParseHTML(b *testing.B) {
	base := mustURL(b, "https://example.com/articles/one")
	body := []byte(strings.Replace(staticPage, "<h1>Hello</h1>", strings.Repeat("<p>Some paragraph text with a <a href=\"/x\">link</a>.</p>", 2000), 1))
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := parseHTML(body, "text/html; charset=utf-8", base); err != nil {
			b.Fatal(err)
		}
	}
}

func mustURL(tb testing.TB, s string) *url.URL {
	tb.Helper()
	u, err := url.Parse(s)
	require.NoError(tb, err)
	return u
}
