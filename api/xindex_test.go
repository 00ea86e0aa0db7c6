package api

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/fetch"
	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

const baseUSDC = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"

// xindexServer serves the index routes on loopback, as New mounts them.
func xindexServer(t testing.TB, db *dbtest.DB) string {
	t.Helper()
	page, err := index.NewHTMLPage()
	require.NoError(t, err)
	e := echo.New()
	e.HTTPErrorHandler = errorHandler(slog.New(slog.DiscardHandler))
	srv := httptest.NewUnstartedServer(e)
	xi := &xindex{reader: index.NewReader(db.Pool, nil), page: page, publicURL: "http://" + srv.Listener.Addr().String()}
	xi.register(e)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// pagedListing serves items as a Bazaar discovery list.
func pagedListing(t testing.TB, items []map[string]any) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		limit = min(max(limit, 1), 100)
		end := min(offset+limit, len(items))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"x402Version": 2, "items": items[min(offset, end):end],
			"pagination": map[string]int{"limit": limit, "offset": offset, "total": len(items)}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// loopback resolves every name to 127.0.0.1, where the test sellers are.
type loopback struct{}

func (loopback) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// getBody GETs url, requires the status wantStatus, and returns the body
// and its Content-Type.
func getBody(t testing.TB, url string, wantStatus int) (body []byte, contentType string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, wantStatus, resp.StatusCode, "%s: %s", url, body)
	return body, resp.Header.Get("Content-Type")
}

// getJSON GETs url, requires 200 and decodes the JSON body into v.
func getJSON(t testing.TB, url string, v any) {
	t.Helper()
	body, _ := getBody(t, url, http.StatusOK)
	require.NoError(t, json.Unmarshal(body, v), string(body))
}

// getError GETs url and requires the status wantStatus with the JSON
// error code wantCode.
func getError(t testing.TB, url string, wantStatus int, wantCode string) {
	t.Helper()
	body, _ := getBody(t, url, wantStatus)
	var e map[string]any
	require.NoError(t, json.Unmarshal(body, &e), string(body))
	require.Equal(t, wantCode, e["error"], url)
}

// getHTML GETs url and requires 200 with an HTML page, which it returns.
func getHTML(t testing.TB, url string) string {
	t.Helper()
	body, contentType := getBody(t, url, http.StatusOK)
	require.Equal(t, "text/html; charset=UTF-8", contentType, url)
	return string(body)
}

// TestXIndexScale crawls a simulated source of 20,000 items over 1,500
// hosts, checks the summary against figures computed from the listing,
// answers q queries over HTTP (BenchmarkXIndexHostsQuery times them), and
// probes the 1,500
// hosts with the real 10 s timeout while a tenth of them never answer
// (within 3 minutes).
func TestXIndexScale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	base := xindexServer(t, db)

	quote := base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"resource":{"url":"x"},"accepts":[{"scheme":"exact","network":"eip155:8453","amount":"10","asset":"` + baseUSDC + `","payTo":"0x1","maxTimeoutSeconds":60}]}`))
	sellers := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Host, "never") {
			<-r.Context().Done()
			return
		}
		w.Header().Set("PAYMENT-REQUIRED", quote)
		w.WriteHeader(http.StatusPaymentRequired)
	}))
	defer sellers.Close()
	_, port, _ := net.SplitHostPort(sellers.Listener.Addr().String())

	// The listing, and what the contract says the index must make of it.
	const nItems, nHosts = scaleItems, scaleHosts
	items := scaleListing(port)
	bands := map[string]int{"free": 0, "under_1m": 0, "under_10m": 0, "under_100m": 0, "under_1": 0, "over_1": 0}
	services := map[string]int{}
	minPrice := map[string]float64{}
	for _, item := range items {
		host := hostOf(item)
		services[host]++
		n, err := strconv.Atoi(item["accepts"].([]any)[0].(map[string]any)["amount"].(string))
		if err != nil {
			continue
		}
		usd := float64(n) / 1e6
		switch {
		case usd == 0:
			bands["free"]++
		case usd < 0.001:
			bands["under_1m"]++
		case usd < 0.01:
			bands["under_10m"]++
		case usd < 0.1:
			bands["under_100m"]++
		case usd < 1:
			bands["under_1"]++
		default:
			bands["over_1"]++
		}
		if p, ok := minPrice[host]; !ok || usd < p {
			minPrice[host] = usd
		}
	}
	hostNames := make([]string, 0, len(services))
	for h := range services {
		hostNames = append(hostNames, h)
	}
	slices.SortFunc(hostNames, func(a, b string) int { return cmp.Or(services[b]-services[a], strings.Compare(a, b)) })
	biggest := hostNames[:10]
	slices.SortFunc(hostNames, func(a, b string) int {
		return cmp.Or(cmp.Compare(minPrice[a], minPrice[b]), strings.Compare(a, b))
	})
	cheapest := hostNames[:10]

	source := pagedListing(t, items)
	start := time.Now()
	c := index.NewCrawler(&index.CrawlerConfig{Pool: db.Pool, Sources: []string{source}, Gap: -1})
	require.NoError(t, c.FullPass(ctx, nil))
	crawl := time.Since(start)
	// The reference, in the same run: the same pages read and decoded by a
	// plain client, nothing recorded.
	start = time.Now()
	read := 0
	for offset := 0; offset < nItems; offset += 100 {
		var page struct{ Items []json.RawMessage }
		getJSON(t, fmt.Sprintf("%s?limit=100&offset=%d", source, offset), &page)
		read += len(page.Items)
	}
	plain := time.Since(start)
	require.Equal(t, nItems, read)

	var s index.Summary
	t0 := time.Now()
	getJSON(t, base+"/api/xindex/summary", &s)
	summaryTime := time.Since(t0)
	require.Equal(t, nItems, s.ServicesIndexed)
	require.Equal(t, nHosts, s.HostsKnown)
	require.Equal(t, bands, s.PriceBands)
	require.Equal(t, index.Liveness{Unmeasured: nHosts}, s.Liveness)
	require.Equal(t, 200, s.Crawl.Total/100)
	require.Equal(t, 1, s.Crawl.FullScans)
	require.Equal(t, 0, s.Crawl.Cursor, "a new pass begins")
	require.NotNil(t, s.Crawl.LastFullAt)
	gotBiggest, gotCheapest := []string{}, []string{}
	for i := range 10 {
		gotBiggest = append(gotBiggest, s.TopBySize[i].Host)
		gotCheapest = append(gotCheapest, s.Cheapest[i].Host)
		require.Equal(t, services[s.TopBySize[i].Host], s.TopBySize[i].Services)
	}
	require.Equal(t, biggest, gotBiggest)
	require.Equal(t, cheapest, gotCheapest)

	// q over HTTP: a host, a description word, a resource path, nothing.
	type hostsAnswer struct {
		OK      bool
		Hosts   []index.Host
		Summary index.Totals
	}
	var lat []time.Duration
	sorts := []string{"services", "price", "latency", "host", "checked"}
	for i := range 60 {
		q, want := scaleQuery(i, items, hostNames)
		t0 := time.Now()
		var got hostsAnswer
		getJSON(t, base+"/api/xindex/hosts?limit=500&sort="+sorts[i%len(sorts)]+"&q="+url.QueryEscape(q), &got)
		lat = append(lat, time.Since(t0))
		require.True(t, got.OK)
		require.Equal(t, nItems, got.Summary.ServicesIndexed)
		names := []string{}
		for _, h := range got.Hosts {
			names = append(names, h.Host)
		}
		if want != nil {
			require.Equal(t, want, names, q)
			continue
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(q, "/svc/"))
		require.Contains(t, names, hostOf(items[n]), q)
	}
	// The contract's figure for these queries, a p50 under 20 ms, is
	// BenchmarkXIndexHostsQuery's: measured here, alongside the other
	// packages' tests, it says how busy the machine was.
	slices.Sort(lat)
	p50 := lat[len(lat)/2]

	start = time.Now()
	client := fetch.New(&fetch.Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Resolver: loopback{}})
	p := index.NewProber(&index.ProberConfig{Pool: db.Pool, Fetch: client, Timeout: 10 * time.Second}) // the default concurrency
	rep, err := p.ProbeAll(ctx)
	require.NoError(t, err)
	probe := time.Since(start)
	require.Equal(t, index.ProbeReport{Probed: nHosts, Live: nHosts - nHosts/10, Dead: nHosts / 10}, *rep)
	require.Less(t, probe, 3*time.Minute)
	getJSON(t, base+"/api/xindex/summary", &s)
	require.Equal(t, index.Liveness{Measured: nHosts, Live: nHosts - nHosts/10, Dead: nHosts / 10}, s.Liveness)

	t.Logf("crawl of %d items over %d hosts (pages of 100): %s (the same pages read by a plain client: %s); GET /api/xindex/hosts?q= p50 %s, max %s; "+
		"liveness of %d hosts at the default concurrency, a tenth timing out at 10 s: %s; GET /api/xindex/summary %s",
		nItems, nHosts, crawl.Round(time.Millisecond), plain.Round(time.Millisecond), p50.Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond),
		nHosts, probe.Round(time.Millisecond), summaryTime.Round(10*time.Microsecond))
}

// The simulated source of the contract's scale figures.
const scaleItems, scaleHosts = 20_000, 1_500

// scaleListing is the simulated source's listing: scaleItems items over
// scaleHosts hosts, every tenth host one that never answers ("never…"),
// the others live; resources on 127.0.0.1:port, with prices in atomic units
// and one in seven in decimal dollars (unpriced).
func scaleListing(port string) []map[string]any {
	atomic := []string{"0", "700", "7000", "70000", "700000", "7000000", "0.05"}
	items := make([]map[string]any, scaleItems)
	for i := range items {
		h := i % scaleHosts
		host := fmt.Sprintf("live%04d.test", h)
		if h%10 == 0 {
			host = fmt.Sprintf("never%04d.test", h)
		}
		items[i] = map[string]any{
			"resource": fmt.Sprintf("http://%s:%s/svc/%d", host, port, i), "type": "http", "x402Version": 2,
			"lastUpdated": 1767322800 + i,
			"metadata":    map[string]any{"description": fmt.Sprintf("forecast %d for %s", i, host)},
			"accepts":     []any{map[string]any{"scheme": "exact", "network": "base", "amount": atomic[(i/scaleHosts+h)%len(atomic)], "asset": baseUSDC, "payTo": "0x1"}},
		}
	}
	return items
}

// scaleQuery is the i-th q of the scale figures over items (hosts, their
// host names): in turn a host name in capitals, words of a description, a
// resource path and words nothing matches. want is the hosts it must
// find, in order, or nil for the path, which finds every host with a
// service number starting so.
func scaleQuery(i int, items []map[string]any, hosts []string) (q string, want []string) {
	switch i % 4 {
	case 0:
		h := hosts[(i*37)%len(hosts)]
		return strings.ToUpper(h), []string{h}
	case 1:
		n := (i * 331) % len(items)
		return fmt.Sprintf("forecast %d for", n), []string{hostOf(items[n])}
	case 2:
		return fmt.Sprintf("/svc/%d", (i*997)%len(items)), nil
	default:
		return "no such seller", []string{}
	}
}

// BenchmarkXIndexHostsQuery times GET /api/xindex/hosts?q= over HTTP on
// the index of the simulated source (20,000 items over 1,500 hosts, as
// TestXIndexScale crawls it), the queries in scaleQuery's turn and the
// sorts in theirs. Besides the mean (ns/op) it reports the p50 and the
// p99 of its queries: the contract's figure is a p50 under 20 ms.
//
//	go test ./api -run '^$' -bench XIndexHostsQuery -benchtime 200x
func BenchmarkXIndexHostsQuery(b *testing.B) {
	ctx := context.Background()
	db := dbtest.Schema(ctx, b)
	base := xindexServer(b, db)
	items := scaleListing("9")
	c := index.NewCrawler(&index.CrawlerConfig{Pool: db.Pool, Sources: []string{pagedListing(b, items)}, Gap: -1})
	require.NoError(b, c.FullPass(ctx, nil))
	var hosts []string
	seen := map[string]bool{}
	for _, item := range items {
		if h := hostOf(item); !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	sorts := []string{"services", "price", "latency", "host", "checked"}
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		q, _ := scaleQuery(i, items, hosts)
		t0 := time.Now()
		var got struct{ OK bool }
		getJSON(b, base+"/api/xindex/hosts?limit=500&sort="+sorts[i%len(sorts)]+"&q="+url.QueryEscape(q), &got)
		lat = append(lat, time.Since(t0))
		require.True(b, got.OK)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
}

func hostOf(item map[string]any) string {
	u := item["resource"].(string)
	u = strings.TrimPrefix(u, "http://")
	return u[:strings.Index(u, ":")]
}

// smallIndexServer serves the index API (xindexServer) over a new database
// holding smallIndex, and returns the database and the server's URL.
func smallIndexServer(ctx context.Context, t *testing.T) (*dbtest.DB, string) {
	t.Helper()
	db := dbtest.Schema(ctx, t)
	base := xindexServer(t, db)
	smallIndex(ctx, t, db)
	return db, base
}

// smallIndex crawls a listing of five hosts (one unpriced) and records a
// live and a dead measurement.
func smallIndex(ctx context.Context, t *testing.T, db *dbtest.DB) {
	t.Helper()
	var items []map[string]any
	for i := range 12 {
		items = append(items, map[string]any{
			"resource": fmt.Sprintf("https://shop%d.example/api/%d", i%4, i), "type": "http", "x402Version": 2,
			"metadata": map[string]any{"description": fmt.Sprintf("weather report %d", i)},
			"accepts":  []any{map[string]any{"scheme": "exact", "network": "eip155:8453", "amount": strconv.Itoa(2000 * (i + 1)), "asset": baseUSDC, "payTo": "0x1"}},
		})
	}
	// The token's EIP-712 domain on shop0's first service.
	items[0]["accepts"].([]any)[0].(map[string]any)["extra"] = map[string]any{"name": "USD Coin", "version": "2"}
	// Bazaar's quality figures on two of shop1's three services.
	items[1]["quality"] = map[string]any{"l30DaysTotalCalls": 120, "l30DaysUniquePayers": 9, "lastCalledAt": "2026-11-24T10:00:00Z"}
	items[5]["quality"] = map[string]any{"l30DaysTotalCalls": 30, "l30DaysUniquePayers": 12}
	items = append(items, map[string]any{"url": "https://free-form.example/x", "accepts": []any{
		map[string]any{"scheme": "exact", "network": "solana", "maxAmountRequired": "$0.01", "asset": "x", "payTo": "y", "extra": map[string]any{"feePayer": "z"}}}})
	c := index.NewCrawler(&index.CrawlerConfig{Pool: db.Pool, Sources: []string{pagedListing(t, items)}, Gap: -1})
	require.NoError(t, c.FullPass(ctx, nil))
	live, dead := true, false
	status402, status404, latency := 402, 404, 87
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	require.NoError(t, store.Append(ctx, tx,
		store.NewEvent{Stream: store.HostStream("shop1.example"), Type: store.EventHostProbed,
			Data: store.HostProbed{Live: &live, Status: &status402, LatencyMS: &latency, CheckedAt: time.Now()}},
		store.NewEvent{Stream: store.HostStream("shop2.example"), Type: store.EventHostProbed,
			Data: store.HostProbed{Live: &dead, Status: &status404, LatencyMS: &latency, CheckedAt: time.Now()}}))
	require.NoError(t, tx.Commit(ctx))
}

func TestXIndexHosts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, base := smallIndexServer(ctx, t)

	t.Run("Shape", func(t *testing.T) {
		var doc map[string]any
		getJSON(t, base+"/api/xindex/hosts?sort=host", &doc)
		require.Equal(t, true, doc["ok"])
		require.Equal(t, map[string]any{"services_indexed": 13.0, "hosts_known": 5.0, "last_at": doc["summary"].(map[string]any)["last_at"]}, doc["summary"])
		require.NotNil(t, doc["summary"].(map[string]any)["last_at"])
		hosts := doc["hosts"].([]any)
		require.Len(t, hosts, 5)
		free := hosts[0].(map[string]any)
		require.Equal(t, "free-form.example", free["host"])
		keys := []string{}
		for k := range free {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		require.Equal(t, []string{"checked_at", "discoverable", "evidence", "first_seen", "host", "last_change", "latency_ms", "latency_p50_ms",
			"latency_p95_ms", "live", "networks", "price_max_usdc", "price_min_usdc", "priced_services", "probes_24h", "probes_30d",
			"probes_7d", "quality", "quote_matches_listing", "sample", "sample_resource", "services", "status", "updated_at", "uptime_24h", "uptime_30d", "uptime_7d"}, keys)
		for _, k := range []string{"price_min_usdc", "price_max_usdc", "live", "status", "latency_ms", "checked_at", "quote_matches_listing", "quality", "evidence",
			"uptime_24h", "uptime_7d", "uptime_30d", "latency_p50_ms", "latency_p95_ms"} {
			require.Nil(t, free[k], "%s is null: not measured", k)
		}
		require.Equal(t, 0.0, free["priced_services"])
		require.Equal(t, 0.0, free["probes_30d"], "never probed: a counted zero")
		require.NotNil(t, free["first_seen"])
		require.Equal(t, []any{"solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"}, free["networks"])
		shop1 := hosts[2].(map[string]any)
		require.Equal(t, "shop1.example", shop1["host"])
		require.Equal(t, map[string]any{"services": 2.0, "calls_30d": 150.0, "unique_payers_30d_max": 12.0, "last_called_at": "2026-11-24T10:00:00Z"}, shop1["quality"])
		require.Equal(t, true, shop1["live"])
		require.Equal(t, 402.0, shop1["status"])
		require.Equal(t, 87.0, shop1["latency_ms"])
		require.Equal(t, 0.004, shop1["price_min_usdc"])
		require.Equal(t, 0.02, shop1["price_max_usdc"])
		require.Equal(t, "https://shop1.example/api/1", shop1["sample_resource"], "the cheapest resource is the sample")
	})
	t.Run("Sorts", func(t *testing.T) {
		for sort, want := range map[string][]string{
			"services": {"shop0.example", "shop1.example", "shop2.example", "shop3.example", "free-form.example"},
			"price":    {"shop0.example", "shop1.example", "shop2.example", "shop3.example", "free-form.example"},
			"latency":  {"shop1.example", "shop2.example", "free-form.example", "shop0.example", "shop3.example"},
			"host":     {"free-form.example", "shop0.example", "shop1.example", "shop2.example", "shop3.example"},
			"uptime":   {"shop1.example", "shop2.example", "free-form.example", "shop0.example", "shop3.example"},
			"checked":  {"shop1.example", "shop2.example", "free-form.example", "shop0.example", "shop3.example"},
		} {
			var got struct{ Hosts []index.Host }
			getJSON(t, base+"/api/xindex/hosts?sort="+sort, &got)
			names := []string{}
			for _, h := range got.Hosts {
				names = append(names, h.Host)
			}
			if sort == "checked" { // shop1 and shop2 were measured in one transaction
				require.ElementsMatch(t, want[:2], names[:2])
				names = names[2:]
				want = want[2:]
			}
			require.Equal(t, want, names, sort)
		}
	})
	t.Run("Query", func(t *testing.T) {
		for q, want := range map[string][]string{
			"SHOP2":              {"shop2.example"},
			"weather report 11":  {"shop3.example"},
			"/api/5":             {"shop1.example"},
			"100%":               {},
			"shop_":              {},
			"https://free-form.": {"free-form.example"},
		} {
			var got struct{ Hosts []index.Host }
			getJSON(t, base+"/api/xindex/hosts?q="+url.QueryEscape(q), &got)
			names := []string{}
			for _, h := range got.Hosts {
				names = append(names, h.Host)
			}
			require.Equal(t, want, names, q)
		}
		var got struct{ Hosts []index.Host }
		getJSON(t, base+"/api/xindex/hosts?limit=2", &got)
		require.Len(t, got.Hosts, 2)
	})
	t.Run("Invalid", func(t *testing.T) {
		for _, bad := range []string{"sort=cost", "limit=0", "limit=501", "limit=ten", "q=" + strings.Repeat("x", 201), "quote_matches_listing=maybe"} {
			getError(t, base+"/api/xindex/hosts?"+bad, http.StatusBadRequest, "invalid_request")
		}
	})
}

// TestXIndexChanges reads the changes feed over HTTP: as JSON paged by
// cursor, and as Atom.
func TestXIndexChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, base := smallIndexServer(ctx, t)

	var all map[string]any
	getJSON(t, base+"/api/xindex/changes", &all)
	require.Equal(t, true, all["ok"])
	changes := all["changes"].([]any)
	require.Len(t, changes, 15, "13 services added, shop1 live, shop2 dead")
	first := changes[0].(map[string]any)
	keys := []string{}
	for k := range first {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	require.Equal(t, []string{"at", "from", "host", "kind", "resource", "to"}, keys)
	require.Equal(t, store.ChangeServiceAdded, first["kind"])
	require.Nil(t, first["from"])
	last := changes[14].(map[string]any)
	require.Equal(t, map[string]any{"at": last["at"], "host": "shop2.example", "kind": store.ChangeHostDead, "resource": nil, "from": nil, "to": false}, last)

	var paged []any
	next := ""
	for range 20 {
		var page struct {
			Changes []any
			Next    string
		}
		getJSON(t, base+"/api/xindex/changes?limit=4&since="+url.QueryEscape(next), &page)
		if len(page.Changes) == 0 {
			require.Equal(t, next, page.Next)
			break
		}
		paged = append(paged, page.Changes...)
		next = page.Next
	}
	require.Equal(t, changes, paged)

	var shop2 struct{ Changes []index.Change }
	getJSON(t, base+"/api/xindex/changes?host=shop2.example", &shop2)
	require.Len(t, shop2.Changes, 4, "3 services and the probe")

	for _, bad := range []string{"limit=0", "limit=501", "since=yesterday", "since=-4"} {
		getError(t, base+"/api/xindex/changes?"+bad, http.StatusBadRequest, "invalid_request")
	}
	// The Atom feed and the changes page hold at most index.MaxChangesLimit
	// rows.
	for _, path := range []string{"/api/xindex/changes.atom", "/x402-index/changes"} {
		getError(t, base+path+"?limit=501", http.StatusBadRequest, "invalid_request")
	}

	atom, contentType := getBody(t, base+"/api/xindex/changes.atom?limit=3", http.StatusOK)
	require.Equal(t, "application/atom+xml; charset=utf-8", contentType)
	var feed struct {
		XMLName xml.Name `xml:"http://www.w3.org/2005/Atom feed"`
		ID      string   `xml:"id"`
		Updated string   `xml:"updated"`
		Entries []struct {
			ID      string `xml:"id"`
			Title   string `xml:"title"`
			Updated string `xml:"updated"`
			Link    struct {
				Href string `xml:"href,attr"`
			} `xml:"link"`
		} `xml:"entry"`
	}
	require.NoError(t, xml.Unmarshal(atom, &feed))
	require.Len(t, feed.Entries, 3)
	require.Equal(t, "shop2.example went dead", feed.Entries[0].Title)
	require.Equal(t, "shop1.example went live", feed.Entries[1].Title)
	require.True(t, strings.HasSuffix(feed.Entries[0].Link.Href, "/x402-index/hosts/shop2.example"), feed.Entries[0].Link.Href)
	require.Equal(t, feed.Entries[0].Updated, feed.Updated)
	require.NotEqual(t, feed.Entries[0].ID, feed.Entries[1].ID)

	page := getHTML(t, base+"/x402-index/changes")
	require.Equal(t, 15, strings.Count(page, `<tr class="change">`))
	dead := strings.Index(page, "shop2.example went dead")
	require.Positive(t, dead)
	require.Less(t, dead, strings.Index(page, "shop1.example went live"), "newest first")
	require.Contains(t, page, `<a href="/x402-index/hosts/shop2.example">shop2.example</a>`)
}

// TestXIndexHost reads one host's JSON document and page: its services
// with their sources and listed options, its probes by hour drawn as SVG,
// its timeline.
func TestXIndexHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, base := smallIndexServer(ctx, t)

	var d index.HostDetail
	getJSON(t, base+"/api/xindex/hosts/SHOP1.example", &d)
	require.True(t, d.OK)
	require.Equal(t, "shop1.example", d.Host.Host)
	require.Equal(t, 1, d.Host.Probes30d)
	require.InDelta(t, 1.0, *d.Host.Uptime30d, 1e-9)
	require.Len(t, d.Services, 3)
	var resources []string
	for _, s := range d.Services {
		resources = append(resources, s.Resource)
		require.Len(t, s.Sources, 1)
		require.Equal(t, []string{"eip155:8453"}, s.Networks)
	}
	require.Equal(t, []string{"https://shop1.example/api/1", "https://shop1.example/api/5", "https://shop1.example/api/9"}, resources, "cheapest first")
	require.Equal(t, 0.004, *d.Services[0].PriceUSDC)
	require.Equal(t, []store.Accept{{Scheme: "exact", Network: "eip155:8453", Asset: baseUSDC, Amount: "4000", PayTo: "0x1"}}, d.Services[0].Accepts)
	require.Equal(t, int64(120), *d.Services[0].Quality.Calls30d)
	require.Equal(t, int64(9), *d.Services[0].Quality.UniquePayers30d)
	require.True(t, time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC).Equal(*d.Services[0].Quality.LastCalledAt))
	require.Equal(t, int64(30), *d.Services[1].Quality.Calls30d)
	require.Nil(t, d.Services[1].Quality.LastCalledAt)
	require.Nil(t, d.Services[2].Quality, "no listing reports its use")
	require.Equal(t, &index.HostQuality{Services: 2, Calls30d: new(int64(150)), UniquePayers30dMax: new(int64(12)), LastCalledAt: d.Host.Quality.LastCalledAt}, d.Host.Quality)
	require.Len(t, d.Probes, 1)
	require.Equal(t, index.ProbeHour{Hour: d.Probes[0].Hour, Probes: 1, Live: 1, LatencyP50MS: d.Probes[0].LatencyP50MS}, d.Probes[0])
	require.Equal(t, 87, *d.Probes[0].LatencyP50MS)
	var kinds []string
	for _, c := range d.Timeline {
		kinds = append(kinds, c.Kind)
	}
	require.Equal(t, []string{store.ChangeHostLive, store.ChangeServiceAdded, store.ChangeServiceAdded, store.ChangeServiceAdded}, kinds, "newest first")

	getError(t, base+"/api/xindex/hosts/nowhere.example", http.StatusNotFound, "not_found")

	page := func(host string) string {
		t.Helper()
		return getHTML(t, base+"/x402-index/hosts/"+host)
	}
	shop1 := page("shop1.example")
	require.Contains(t, shop1, `<svg class="chart"`)
	require.Equal(t, 1, strings.Count(shop1, `class="probe"`), "one hour probed")
	require.Equal(t, 1, strings.Count(shop1, `class="latency"`))
	require.Contains(t, shop1, "1 of 1 probes live")
	require.Equal(t, 3, strings.Count(shop1, `<tr class="service">`))
	require.Equal(t, 4, strings.Count(shop1, `<tr class="change `))
	require.Contains(t, shop1, "shop1.example went live")
	require.Contains(t, shop1, `id="uptime-30d">100.0 %`)
	require.Contains(t, shop1, `<div class="card" id="quality"><b>150</b><span>paid calls 30 d, as 2 listed services report them · up to 12 payers · last 2026-11-24 10:00</span>`)
	require.Contains(t, shop1, `<td class="sample quality">120 calls · 9 payers · last 2026-11-24</td>`)
	require.Contains(t, shop1, `<td class="sample quality">–</td>`)
	require.NotContains(t, shop1, "<script")

	// A quote that differs from its listing: on the host's page, and a
	// filter of the list.
	differs, status := false, 402
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, store.Append(ctx, tx, store.NewEvent{Stream: store.HostStream("shop3.example"), Type: store.EventHostProbed,
		Data: store.HostProbed{Live: new(true), Status: &status, LatencyMS: new(40), CheckedAt: time.Now(), QuoteMatchesListing: &differs,
			QuoteDifferences: []store.QuoteDifference{{Resource: "https://shop3.example/api/3", Network: "eip155:8453", Asset: baseUSDC, Field: "amount", Listing: "8000", Quote: "80000"}}}}))
	require.NoError(t, tx.Commit(ctx))
	shop3 := page("shop3.example")
	require.Contains(t, shop3, "quote differs from listing")
	require.Equal(t, 1, strings.Count(shop3, `<tr class="difference">`))
	require.Contains(t, shop3, "<td class=\"sample\">80000</td>")
	var differing struct{ Hosts []index.Host }
	getJSON(t, base+"/api/xindex/hosts?quote_matches_listing=false", &differing)
	require.Len(t, differing.Hosts, 1)
	require.Equal(t, "shop3.example", differing.Hosts[0].Host)

	free := page("free-form.example")
	require.Contains(t, free, "paid calls 30 d: no listing reports them")
	require.Contains(t, free, "not measured in 30 days")
	require.Contains(t, free, `id="uptime-30d">–`)
	require.Contains(t, free, "unpriced")

}

func TestXIndexPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, base := smallIndexServer(ctx, t)

	get := func(query string) string {
		t.Helper()
		return getHTML(t, base+"/x402-index"+query)
	}
	page := get("")
	require.NotContains(t, page, "%!", "no formatting errors")
	require.NotContains(t, page, "<script", "works without JavaScript")
	for _, want := range []string{
		`<b id="services">13</b>`, `<b id="hosts">5</b>`,
		`<td class="num price">0.002 – 0.018</td>`, `<td class="num price">unpriced</td>`,
		`<span class="badge live">live</span> <span class="sample">402</span>`,
		`<span class="badge dead">dead</span> <span class="sample">404</span>`,
		`<span class="badge unmeasured">not measured</span>`,
		"87 ms", html.EscapeString(index.Honesty), `href="/x402-index?sort=price"`,
	} {
		require.Contains(t, page, want)
	}
	require.Equal(t, 5, strings.Count(page, `<tr class="host-row">`))

	page = get("?q=shop3&sort=price")
	require.Equal(t, 1, strings.Count(page, `<tr class="host-row">`))
	require.Contains(t, page, `<td class="host"><a href="/x402-index/hosts/shop3.example">shop3.example</a></td>`)
	require.Contains(t, page, `value="shop3"`, "the search box keeps the query")
	require.Contains(t, page, `href="/x402-index?q=shop3&amp;sort=host"`, "sorting keeps the query")

	page = get("?q=nothing-like-it")
	require.Contains(t, page, "No host matches.")

	getBody(t, base+"/x402-index?sort=cost", http.StatusBadRequest)
}
