package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/fetch"
	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/browsertest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

// TestIndexCrawlCommandAndPage runs `x402d index crawl` on a local listing
// that includes the service's own discovery resources, then checks the
// /api/xindex endpoints and drives /x402-index in headless Chromium: it
// renders, search and sort work; a screenshot is kept.
func TestIndexCrawlCommandAndPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)

	usdc := "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
	var items []map[string]any
	for i := range 24 {
		items = append(items, map[string]any{
			"resource": fmt.Sprintf("https://seller%d.example/api/%d", i%6, i), "type": "http", "x402Version": 2,
			"metadata": map[string]any{"description": fmt.Sprintf("weather service %d", i)},
			"accepts":  []any{map[string]any{"scheme": "exact", "network": "eip155:8453", "amount": strconv.Itoa(2000 * (i + 1)), "asset": usdc, "payTo": "0x1"}},
		})
	}
	listing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		end := min(offset+limit, len(items))
		_ = json.NewEncoder(w).Encode(map[string]any{"x402Version": 2, "items": items[min(offset, end):end],
			"pagination": map[string]int{"limit": limit, "offset": offset, "total": len(items)}})
	}))
	defer listing.Close()
	// The service's crawl at start (it runs unless a crawl ran within the
	// schedule's interval) must not race the command's: its source counts
	// as crawled a moment ago, so that what is counted below is the
	// command's pass.
	_, err := db.Pool.Exec(ctx, `INSERT INTO index_sources (url, last_at) VALUES ($1, now())`, listing.URL)
	require.NoError(t, err)
	base := startInProcess(ctx, t, "serve", testEnv(db, map[string]string{"INDEX_SOURCES": listing.URL}))

	// The service's own discovery list is a valid source.
	env := map[string]string{"DATABASE_URL": db.URL, "DB_MAX_CONNS": testMaxConns, "INDEX_SOURCES": listing.URL + "," + base + "/api/x402/discovery/resources"}
	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"index", "crawl"}, func(k string) string { return env[k] }, &out, io.Discard, &options{}))
	require.Contains(t, out.String(), "services indexed 29, hosts 7, full scans 1", out.String())

	var s index.Summary
	getJSON(t, base+"/api/xindex/summary", &s)
	require.Equal(t, "xindex-1.0", s.Version)
	require.Equal(t, 29, s.ServicesIndexed, "24 listed + our own 5 sellable (4 pure, the test op)")
	require.Equal(t, 7, s.HostsKnown)
	require.Equal(t, "/x402-index", s.Read["page"])

	var hosts struct {
		OK    bool
		Hosts []index.Host
	}
	getJSON(t, base+"/api/xindex/hosts?q=SELLER3&sort=price&limit=5", &hosts)
	require.True(t, hosts.OK)
	require.Len(t, hosts.Hosts, 1)
	require.Equal(t, "seller3.example", hosts.Hosts[0].Host)
	for _, bad := range []string{"sort=cost", "limit=0", "limit=501", "limit=ten"} {
		resp, err := http.Get(base + "/api/xindex/hosts?" + bad)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
	}

	// Without JavaScript: the HTML itself carries the table.
	resp, err := http.Get(base + "/x402-index?q=seller1&sort=host")
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(page), "seller1.example")
	require.NotContains(t, string(page), "seller2.example")
	require.Contains(t, string(page), "not measured")

	// In Chromium.
	b := browsertest.New(t).Timeout(60 * time.Second)
	p := b.MustPage(base + "/x402-index").MustWaitLoad()
	require.Len(t, p.MustElements("tr.host-row"), 7)
	require.Contains(t, p.MustElement("#honesty").MustText(), "null means not measured")
	p.MustElement(`input[name=q]`).MustInput("seller4")
	wait := p.MustWaitNavigation()
	p.MustElement(`#search button`).MustClick()
	wait()
	require.Equal(t, []string{"seller4.example"}, hostsShown(t, p, 1))

	p.MustNavigate(base + "/x402-index").MustWaitLoad()
	wait = p.MustWaitNavigation()
	p.MustElement(`th a[href*="sort=price"]`).MustClick()
	wait()
	first := hostsShown(t, p, 7)[0]
	require.Equal(t, "seller0.example", first, "cheapest first: seller0 lists the 0.002 USDC service")
	require.Contains(t, p.MustInfo().URL, "sort=price")
	p.MustSetViewport(1280, 900, 1, false)
	pageScreenshot(t, p, "x402-index.png")

	// A host's page, reached from the table: 30 days of probes every six
	// hours (dead for two days, slower for a week) drawn, its services, its
	// timeline.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	now := time.Now().UTC()
	for h := 30*24 - 1; h > 0; h -= 6 {
		at := now.Add(-time.Duration(h) * time.Hour)
		live, status, latency := true, 402, 120+(h%48)
		if h > 20*24 && h <= 22*24 {
			live, status = false, 503
		}
		if h > 7*24 && h <= 14*24 {
			latency += 300
		}
		require.NoError(t, store.Append(ctx, tx, store.NewEvent{Stream: store.HostStream("seller1.example"), Type: store.EventHostProbed,
			Data: store.HostProbed{Live: &live, Status: &status, LatencyMS: &latency, CheckedAt: at}}))
	}
	require.NoError(t, tx.Commit(ctx))
	p.MustNavigate(base + "/x402-index?q=seller1").MustWaitLoad()
	wait = p.MustWaitNavigation()
	p.MustElement(`td.host a`).MustClick()
	wait()
	require.Eventually(t, func() bool { return strings.HasSuffix(p.MustInfo().URL, "/x402-index/hosts/seller1.example") }, 20*time.Second, 50*time.Millisecond)
	p.MustElement("svg.chart").MustWaitVisible()
	require.Len(t, p.MustElements("svg.chart rect.probe"), 120, "one column an hour probed")
	require.Len(t, p.MustElements("tr.service"), 4)
	require.Contains(t, p.MustElement("#history").MustText(), "uptime 30 d")
	require.Contains(t, p.MustElement("#uptime-30d").MustText(), "93.3 %", "8 of 120 probes dead")
	timeline := p.MustElement("#timeline").MustText()
	require.Contains(t, timeline, "seller1.example went dead")
	require.Contains(t, timeline, "seller1.example went live")
	p.MustSetViewport(1280, 1000, 1, false)
	pageScreenshot(t, p, "x402-index-host.png")

	// The changes of the market, from the index page.
	p.MustNavigate(base + "/x402-index").MustWaitLoad()
	wait = p.MustWaitNavigation()
	p.MustElement("#changes-link").MustClick()
	wait()
	require.Eventually(t, func() bool { return strings.HasSuffix(p.MustInfo().URL, "/x402-index/changes") }, 20*time.Second, 50*time.Millisecond)
	rows := p.MustElements("#changes tr.change")
	require.Len(t, rows, 32, "29 services added; seller1 live, dead, live again")
	require.Contains(t, rows[0].MustText(), "added", "newest first: the crawl's, after seller1's past probes")
	require.Contains(t, rows[len(rows)-1].MustText(), "seller1.example went live", "its first probe, 30 days ago")
	pageScreenshot(t, p, "x402-index-changes.png")

	// The front page: what is sold and how to pay, with its links.
	p.MustNavigate(base + "/").MustWaitLoad()
	require.GreaterOrEqual(t, len(p.MustElements("#operations tbody tr")), 7)
	require.Contains(t, p.MustElement("#operations").MustText(), "0.010000")
	wait = p.MustWaitNavigation()
	p.MustElement(`#links a[href="/x402-index"]`).MustClick()
	wait()
	require.Contains(t, p.MustInfo().URL, "/x402-index")
	p.MustNavigate(base + "/").MustWaitLoad()
	pageScreenshot(t, p, "front.png")
}

// hostsShown returns the hosts of the index page's table once it shows n
// rows. It reads the page again while it is still being replaced (a
// navigation just ended): an element of the page before is gone.
func hostsShown(t *testing.T, p *rod.Page, n int) []string {
	t.Helper()
	var hosts []string
	require.Eventually(t, func() bool {
		hosts = hosts[:0]
		rows, err := p.Elements("tr.host-row td.host")
		if err != nil || len(rows) != n {
			return false
		}
		for _, r := range rows {
			text, err := r.Text()
			if err != nil {
				return false
			}
			hosts = append(hosts, text)
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "the index page did not show %d hosts", n)
	return hosts
}

// pageScreenshot checks that p shows no value a template failed to format,
// and saves its screenshot as name in $ARTIFACTS_DIR/screenshots (default
// artifacts/screenshots at the repository's root, ignored by git; the
// pictures of docs/screenshots come from a running service instead: go tool
// task screenshots).
func pageScreenshot(t *testing.T, p *rod.Page, name string) {
	t.Helper()
	require.NotContains(t, p.MustElement("body").MustText(), "%!", "%s: a template failed to format a value", name)
	img, err := p.Screenshot(true, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
	require.NoError(t, err)
	dir := os.Getenv("ARTIFACTS_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "artifacts")
	}
	dir = filepath.Join(dir, "screenshots")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), img, 0o644))
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.NoError(t, json.Unmarshal(body, v), string(body))
}

// TestIndexCrawlKilledMidPass SIGKILLs a real `x402d index crawl` process in
// the middle of a pass; the next crawl resumes from the saved cursor and
// every resource is indexed once.
func TestIndexCrawlKilledMidPass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	usdc := "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
	var items []map[string]any
	for i := range 250 {
		items = append(items, map[string]any{"resource": fmt.Sprintf("https://k%d.example/r%d", i%17, i), "type": "http", "x402Version": 2,
			"accepts": []any{map[string]any{"scheme": "exact", "network": "eip155:8453", "amount": "1000", "asset": usdc, "payTo": "0x1"}}})
	}
	hold := make(chan struct{})
	listing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		if offset >= 200 {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		end := min(offset+limit, len(items))
		_ = json.NewEncoder(w).Encode(map[string]any{"x402Version": 2, "items": items[min(offset, end):end],
			"pagination": map[string]int{"limit": limit, "offset": offset, "total": len(items)}})
	}))
	defer listing.Close()

	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "index", "crawl")
	cmd.Env = append(os.Environ(), "X402D_TEST_CHILD=1", "DATABASE_URL="+db.URL, "DB_MAX_CONNS="+testMaxConns, "INDEX_SOURCES="+listing.URL)
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	require.Eventually(t, func() bool {
		var cursor int
		_ = db.Pool.QueryRow(ctx, "SELECT cursor FROM index_sources").Scan(&cursor)
		return cursor == 200
	}, 30*time.Second, 20*time.Millisecond, "the crawl never reached offset 200")
	require.NoError(t, cmd.Process.Kill())
	<-done

	close(hold) // the resumed crawl may read the last page
	env := map[string]string{"DATABASE_URL": db.URL, "DB_MAX_CONNS": testMaxConns, "INDEX_SOURCES": listing.URL}
	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"index", "crawl"}, func(k string) string { return env[k] }, &out, io.Discard, &options{}))
	require.Contains(t, out.String(), "services indexed 250, hosts 17, full scans 1")
	var indexed, pages int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE type = 'resource.indexed'), count(*) FILTER (WHERE type = 'crawl.page') FROM events").Scan(&indexed, &pages))
	require.Equal(t, 250, indexed, "every resource indexed once")
	require.Equal(t, 3, pages, "pages at 0 and 100 before the kill, 200 after")
}

// TestIndexDiscoversOwnService: the service declares what it sells where
// sellers' origins are read (x-payment-info on every paid operation of its
// OpenAPI document, /.well-known/x402), and the index's own discovery,
// reading its origin through the guarded client, finds every operation sold
// with its price.
func TestIndexDiscoversOwnService(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	origin := "http://" + addr
	// No crawl at start: the index holds only what discovery finds.
	_, err = db.Pool.Exec(ctx, `INSERT INTO index_sources (url, last_at) VALUES ('none', now())`)
	require.NoError(t, err)
	base := startInProcess(ctx, t, "serve", testEnv(db, map[string]string{"LISTEN_ADDR": addr, "PUBLIC_URL": origin, "INDEX_SOURCES": "http://127.0.0.1:1/none"}))
	require.Equal(t, origin, base)

	var fanOut struct {
		Version   int
		Resources []string
	}
	getJSON(t, base+"/.well-known/x402", &fanOut)
	require.Equal(t, 1, fanOut.Version)
	var list struct{ Items []struct{ Resource string } }
	getJSON(t, base+"/api/x402/discovery/resources", &list)
	require.NotEmpty(t, list.Items)
	var sold []string
	for _, it := range list.Items {
		sold = append(sold, it.Resource)
	}
	require.Equal(t, sold, fanOut.Resources, "the operations sold now")

	var doc struct {
		Paths map[string]map[string]map[string]any
	}
	getJSON(t, base+"/openapi.json", &doc)
	paid := 0
	for path, item := range doc.Paths {
		if !strings.HasPrefix(path, "/api/x402/") || path == "/api/x402/calls/{id}" || path == "/api/x402/discovery/resources" {
			require.NotContains(t, item["get"], "x-payment-info", path)
			continue
		}
		paid++
		require.Contains(t, item["post"], "x-payment-info", path)
	}
	require.Greater(t, paid, len(sold), "every paid path, sold now or not")

	client := fetch.New(&fetch.Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	d := index.NewDiscoverer(&index.DiscovererConfig{Pool: db.Pool, Fetch: client, Gap: -1})
	via, indexed, err := d.Origin(ctx, origin)
	require.NoError(t, err)
	require.Equal(t, "openapi", via)
	require.Equal(t, len(sold), indexed)
	var detail index.HostDetail
	getJSON(t, base+"/api/xindex/hosts/127.0.0.1", &detail)
	require.Len(t, detail.Services, len(sold))
	// The quotes of the test's payment stack name the resources on
	// http://test: what was asked is the origin's, at the same paths.
	var soldPaths []string
	for _, u := range sold {
		soldPaths = append(soldPaths, strings.TrimPrefix(u, "http://test"))
	}
	for _, s := range detail.Services {
		require.Contains(t, soldPaths, strings.TrimPrefix(s.Resource, origin))
		require.Equal(t, "POST", s.Method)
		require.NotNil(t, s.PriceUSDC, s.Resource)
		require.Equal(t, []string{index.OriginSource(origin)}, s.Sources)
	}
}
