package index

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/fetch"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

const usdc = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"

// listing is a discovery source on loopback serving items in pages; fail
// maps a request number (1-based) to a status to answer instead.
type listing struct {
	mu       sync.Mutex
	items    []map[string]any
	fail     map[int]int
	requests int
	block    chan struct{} // when set, requests at offset >= blockAt wait on it
	blockAt  int
}

func (l *listing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.requests++
	n := l.requests
	status := l.fail[n]
	items := l.items
	block, blockAt := l.block, l.blockAt
	l.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
		return
	}
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
	if block != nil && offset >= blockAt {
		select {
		case <-block:
		case <-r.Context().Done():
			return
		}
	}
	end := min(offset+limit, len(items))
	page := items[min(offset, len(items)):end]
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"x402Version": 2, "items": page,
		"pagination": map[string]int{"limit": limit, "offset": offset, "total": len(items)}})
}

func item(resource string, amount string, extra ...string) map[string]any {
	it := map[string]any{"resource": resource, "type": "http", "x402Version": 2,
		"accepts": []any{map[string]any{"scheme": "exact", "network": "eip155:8453", "amount": amount, "asset": usdc, "payTo": "0x1"}}}
	if len(extra) > 0 {
		it["metadata"] = map[string]any{"description": extra[0]}
	}
	return it
}

func newCrawler(db *dbtest.DB, src string, pages int) *Crawler {
	return NewCrawler(&CrawlerConfig{Pool: db.Pool, Sources: []string{src}, PageSize: 10, PagesPerRun: pages, Gap: -1, Backoff: time.Millisecond})
}

// TestCrawl crawls a listing of many pages with duplicates of one host,
// a 429 and a 500 on the way, then a second pass after the listing changed.
func TestCrawl(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	var items []map[string]any
	for i := range 35 {
		items = append(items, item(fmt.Sprintf("https://host%d.example/api/%d", i%7, i), strconv.Itoa((i+1)*1000), fmt.Sprintf("service %d", i)))
	}
	// Variants of one resource: case, default port, trailing slash.
	items = append(items, item("https://HOST0.example:443/api/0/", "1000"), item("HTTPS://host0.example/api/0", "1000"))
	// Odd ones: a v1 item with maxAmountRequired and a legacy network, an
	// unpriced one.
	items = append(items,
		map[string]any{"url": "https://legacy.example/x", "lastUpdated": 1767322800, "accepts": []any{
			map[string]any{"scheme": "exact", "network": "base", "maxAmountRequired": "500000", "asset": usdc, "payTo": "0x1"}}},
		item("https://unpriced.example/y", "0.05"),
		// Another port of host0: another resource of the same host.
		item("https://host0.example:8443/api/0", "1000"))
	// Each option with its extra, which jsonb keeps with its keys in
	// another order and spaced: read again, it is unchanged.
	for _, it := range items {
		for _, a := range it["accepts"].([]any) {
			a.(map[string]any)["extra"] = map[string]any{"version": "2", "name": "USD Coin", "assetTransferMethod": "eip3009"}
		}
	}
	src := &listing{items: items, fail: map[int]int{2: http.StatusTooManyRequests, 4: http.StatusInternalServerError}}
	srv := httptest.NewServer(src)
	defer srv.Close()

	c := newCrawler(db, srv.URL, 100)
	require.NoError(t, c.FullPass(ctx, nil))
	r := NewReader(db.Pool, nil)
	s, err := r.Summary(ctx)
	require.NoError(t, err)
	require.NotNil(t, s.Crawl.LastAt)
	require.NotNil(t, s.Crawl.LastFullAt)
	// 40 items in pages of 10: the cursor is back at 0 for the next pass.
	require.Equal(t, Crawl{Cursor: 0, Total: 40, PagesDone: 0, LastAt: s.Crawl.LastAt, LastFullAt: s.Crawl.LastFullAt, FullScans: 1}, s.Crawl)
	require.Equal(t, "xindex-1.0", s.Version)
	require.Equal(t, 38, s.ServicesIndexed, "35 + legacy + unpriced + another port; the variants are one resource")
	require.Equal(t, 9, s.HostsKnown)
	require.Equal(t, Liveness{Unmeasured: 9}, s.Liveness)
	// Prices 0.001 ... 0.035 USDC, legacy 0.5, unpriced not banded.
	require.Equal(t, map[string]int{"free": 0, "under_1m": 0, "under_10m": 10, "under_100m": 26, "under_1": 1, "over_1": 0}, s.PriceBands)
	top := []string{}
	for _, h := range s.TopBySize {
		top = append(top, fmt.Sprintf("%s:%d", h.Host, h.Services))
	}
	require.Equal(t, []string{"host0.example:6", "host1.example:5", "host2.example:5", "host3.example:5", "host4.example:5",
		"host5.example:5", "host6.example:5", "legacy.example:1", "unpriced.example:1"}, top)
	cheap := []string{}
	for _, h := range s.Cheapest {
		cheap = append(cheap, fmt.Sprintf("%s:%.3f-%.3f", h.Host, *h.PriceMinUSDC, *h.PriceMaxUSDC))
	}
	require.Equal(t, []string{"host0.example:0.001-0.029", "host1.example:0.002-0.030", "host2.example:0.003-0.031",
		"host3.example:0.004-0.032", "host4.example:0.005-0.033", "host5.example:0.006-0.034", "host6.example:0.007-0.035",
		"legacy.example:0.500-0.500"}, cheap, "the unpriced host is not among the cheapest")
	unpriced, err := r.Hosts(ctx, "unpriced", "services", 10)
	require.NoError(t, err)
	require.Len(t, unpriced, 1)
	require.Nil(t, unpriced[0].PriceMinUSDC, "no price is null, not 0")
	require.Equal(t, 0, unpriced[0].PricedServices)
	require.Equal(t, 1, unpriced[0].Services)
	var failed int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE type = $1", store.EventCrawlFailed).Scan(&failed))
	require.Equal(t, 2, failed, "the 429 and the 500 were recorded and backed off from")

	// The listing changes: one resource gone, one price changed, one new.
	src.mu.Lock()
	src.items = append(append(slices.Clone(items[1:35]), items[37:]...), item("https://new.example/z", "0"))
	src.items[0] = item("https://host1.example/api/1", "700", "cheaper now")
	src.fail = nil
	src.mu.Unlock()
	require.NoError(t, c.FullPass(ctx, nil))
	s, err = r.Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, s.Crawl.FullScans)
	require.Equal(t, 38, s.ServicesIndexed, "one retired, one new")
	require.Equal(t, 1, s.PriceBands["free"])
	require.Equal(t, 1, s.PriceBands["under_1m"])
	hosts, err := r.Hosts(ctx, "host0.example", "services", 10)
	require.NoError(t, err)
	require.Len(t, hosts, 1)
	require.Equal(t, 5, hosts[0].Services, "https://host0.example/api/0 was retired")
	hosts, err = r.Hosts(ctx, "CHEAPER", "price", 10)
	require.NoError(t, err)
	require.Len(t, hosts, 1)
	require.Equal(t, "host1.example", hosts[0].Host)

	// Every change is one event: 38 resources, then one changed and one
	// new; one retired; the unchanged ones are not written again.
	var indexed, retired int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE type = $1), count(*) FILTER (WHERE type = $2) FROM events",
		store.EventResourceIndexed, store.EventResourceRetired).Scan(&indexed, &retired))
	require.Equal(t, 40, indexed)
	require.Equal(t, 1, retired)
	var gone bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT retired FROM index_resources WHERE resource = 'https://host0.example/api/0'").Scan(&gone))
	require.True(t, gone)
}

// TestCrawlResumesAfterCrash stops a crawl in the middle of a pass (its
// context cancelled while a page is in flight, as a killed process would
// leave it) and resumes with a new crawler: every resource is counted once.
func TestCrawlResumesAfterCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	var items []map[string]any
	for i := range 95 {
		items = append(items, item(fmt.Sprintf("https://h%d.example/r%d", i%13, i), "1000"))
	}
	src := &listing{items: items, block: make(chan struct{}), blockAt: 50}
	srv := httptest.NewServer(src)
	defer srv.Close()

	crashCtx, crash := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- newCrawler(db, srv.URL, 100).Run(crashCtx, nil) }()
	require.Eventually(t, func() bool {
		var cursor int
		_ = db.Pool.QueryRow(ctx, "SELECT cursor FROM index_sources").Scan(&cursor)
		return cursor == 50
	}, 10*time.Second, 10*time.Millisecond)
	crash()
	require.ErrorIs(t, <-done, context.Canceled)
	close(src.block)

	require.NoError(t, newCrawler(db, srv.URL, 100).FullPass(ctx, nil))
	s, err := NewReader(db.Pool, nil).Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, 95, s.ServicesIndexed)
	require.Equal(t, 1, s.Crawl.FullScans)
	var indexed, pages int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE type = $1), count(*) FILTER (WHERE type = $2) FROM events",
		store.EventResourceIndexed, store.EventCrawlPage).Scan(&indexed, &pages))
	require.Equal(t, 95, indexed, "every resource indexed once")
	require.Equal(t, 10, pages, "the pass resumed at its cursor: pages 0-4, then 5-9")
}

// TestCrawlOverlappingSources lists one resource in two sources crawled at
// different rates: it is retired only when neither lists it any more.
func TestCrawlOverlappingSources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	shared := item("https://shared.example/x", "1000")
	a := &listing{items: []map[string]any{item("https://a.example/1", "1000"), shared}}
	b := &listing{items: []map[string]any{shared, item("https://b.example/1", "1000")}}
	srvA, srvB := httptest.NewServer(a), httptest.NewServer(b)
	defer srvA.Close()
	defer srvB.Close()
	both := NewCrawler(&CrawlerConfig{Pool: db.Pool, Sources: []string{srvA.URL, srvB.URL}, Gap: -1})
	onlyA := NewCrawler(&CrawlerConfig{Pool: db.Pool, Sources: []string{srvA.URL}, Gap: -1})
	r := NewReader(db.Pool, nil)
	indexed := func() []string {
		t.Helper()
		rows, err := db.Pool.Query(ctx, "SELECT resource FROM index_resources WHERE NOT retired ORDER BY 1")
		require.NoError(t, err)
		list, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return list
	}

	require.NoError(t, both.FullPass(ctx, nil))
	require.Equal(t, []string{"https://a.example/1", "https://b.example/1", "https://shared.example/x"}, indexed())
	// A runs three passes more while B stays in its second.
	for range 3 {
		require.NoError(t, onlyA.FullPass(ctx, nil))
	}
	a.mu.Lock()
	a.items = a.items[:1]
	a.mu.Unlock()
	require.NoError(t, onlyA.FullPass(ctx, nil))
	require.Equal(t, []string{"https://a.example/1", "https://b.example/1", "https://shared.example/x"}, indexed(),
		"B still lists the shared resource")

	b.mu.Lock()
	b.items = b.items[1:]
	b.mu.Unlock()
	require.NoError(t, both.FullPass(ctx, nil))
	require.Equal(t, []string{"https://a.example/1", "https://b.example/1"}, indexed())
	s, err := r.Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, s.ServicesIndexed)
	require.Equal(t, 2, s.HostsKnown, "shared.example has no service left")
	require.Equal(t, 2, s.Crawl.FullScans, "a full scan of the market is a pass of every source: B did 2")
}

// TestSummaryCountsConfiguredSources drops a source from the configuration:
// its row stays in index_sources with its passes stopped, and a reader given
// the crawler's sources no longer counts it.
func TestSummaryCountsConfiguredSources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	srvA := httptest.NewServer(&listing{items: []map[string]any{item("https://a.example/1", "1000")}})
	srvB := httptest.NewServer(&listing{items: []map[string]any{item("https://b.example/1", "1000")}})
	defer srvA.Close()
	defer srvB.Close()
	both := NewCrawler(&CrawlerConfig{Pool: db.Pool, Sources: []string{srvA.URL, srvB.URL}, Gap: -1})
	onlyA := NewCrawler(&CrawlerConfig{Pool: db.Pool, Sources: []string{srvA.URL}, Gap: -1})
	require.NoError(t, both.FullPass(ctx, nil))
	for range 2 {
		require.NoError(t, onlyA.FullPass(ctx, nil))
	}
	for _, tc := range []struct {
		name    string
		sources []string
		scans   int
	}{
		{"configured", onlyA.Sources(), 3},
		{"with the dropped source", both.Sources(), 1},
		{"every row", nil, 1},
	} {
		s, err := NewReader(db.Pool, tc.sources).Summary(ctx)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.scans, s.Crawl.FullScans, tc.name)
	}
}

// TestCrawlConcurrentCrawlers starts two crawlers on one source at the same
// moment: each page is recorded once and each resource indexed once.
func TestCrawlConcurrentCrawlers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	var items []map[string]any
	for i := range 30 {
		items = append(items, item(fmt.Sprintf("https://c%d.example/r%d", i%4, i), "1000"))
	}
	// The first page is answered only when both crawlers asked for it.
	arrived := make(chan struct{}, 2)
	release := make(chan struct{})
	inner := &listing{items: items}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("offset") == "0" {
			arrived <- struct{}{}
			<-release
		}
		inner.ServeHTTP(w, r)
	}))
	defer srv.Close()
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- newCrawler(db, srv.URL, 100).Run(ctx, nil) }()
	}
	<-arrived
	<-arrived
	close(release)
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)

	var indexed, pages, passes int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE type = $1), count(*) FILTER (WHERE type = $2), count(*) FILTER (WHERE type = $3) FROM events",
		store.EventResourceIndexed, store.EventCrawlPage, store.EventCrawlPassDone).Scan(&indexed, &pages, &passes))
	require.Equal(t, 30, indexed)
	require.Equal(t, 3, pages)
	require.Equal(t, 1, passes)
	s, err := NewReader(db.Pool, nil).Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, 30, s.ServicesIndexed)
	require.Equal(t, 1, s.Crawl.FullScans)
}

// TestCrawlGivesUp gives up a source that answers 404 at once and one that
// keeps answering 503 after Attempts tries, and still crawls the others.
func TestCrawlGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	var missing, down atomic.Int64
	srvMissing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		missing.Add(1)
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srvMissing.Close()
	srvDown := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		down.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srvDown.Close()
	good := httptest.NewServer(&listing{items: []map[string]any{item("https://g.example/1", "1000"), item("https://g.example/2", "2000")}})
	defer good.Close()

	c := NewCrawler(&CrawlerConfig{Pool: db.Pool, Sources: []string{srvMissing.URL, srvDown.URL, good.URL}, Gap: -1,
		Backoff: time.Millisecond, Attempts: 3})
	err := c.FullPass(ctx, nil)
	require.Error(t, err)
	var pageErr *PageError
	require.ErrorAs(t, err, &pageErr)
	require.Contains(t, err.Error(), srvMissing.URL)
	require.Contains(t, err.Error(), srvDown.URL)
	require.Equal(t, int64(1), missing.Load(), "a 404 is not retried")
	require.Equal(t, int64(3), down.Load(), "a 503 is retried up to Attempts")
	s, err := NewReader(db.Pool, nil).Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, s.ServicesIndexed)
}

// TestCrawlRetryAfter backs off from a 429 for as long as its Retry-After
// asks: a periodic run in that time does not ask the source again.
func TestCrawlRetryAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	src := &listing{items: []map[string]any{item("https://ra.example/1", "1000")}}
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		src.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := NewCrawler(&CrawlerConfig{Pool: db.Pool, Sources: []string{srv.URL}, Gap: -1, Backoff: time.Millisecond})
	err := c.Run(ctx, nil)
	var pageErr *PageError
	require.ErrorAs(t, err, &pageErr)
	require.Equal(t, http.StatusTooManyRequests, pageErr.Status)
	require.True(t, pageErr.Retryable)
	require.NoError(t, c.Run(ctx, nil), "backing off is no error")
	require.Equal(t, int64(1), requests.Load(), "not asked again while backing off")

	start := time.Now()
	require.NoError(t, c.FullPass(ctx, nil))
	require.Greater(t, time.Since(start), 500*time.Millisecond, "FullPass waited out the Retry-After")
	require.Equal(t, int64(2), requests.Load())
	var data []byte
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT data FROM events WHERE type = $1", store.EventCrawlFailed).Scan(&data))
	var failed store.CrawlFailed
	require.NoError(t, json.Unmarshal(data, &failed))
	require.Equal(t, 429, failed.Status)
}

// TestCrawlShortPages reads a listing that serves fewer items per page than
// asked and gives no total: the cursor moves by what each page carried.
func TestCrawlShortPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	var items []map[string]any
	for i := range 8 {
		items = append(items, item(fmt.Sprintf("https://short.example/%d", i), "1000"))
	}
	var offsets []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		mu.Lock()
		offsets = append(offsets, r.URL.Query().Get("offset"))
		mu.Unlock()
		end := min(offset+3, len(items))
		_ = json.NewEncoder(w).Encode(map[string]any{"x402Version": 1, "items": items[min(offset, end):end],
			"pagination": map[string]int{"limit": 3, "offset": offset}})
	}))
	defer srv.Close()
	require.NoError(t, newCrawler(db, srv.URL, 100).FullPass(ctx, nil))
	require.Equal(t, []string{"0", "3", "6"}, offsets)
	s, err := NewReader(db.Pool, nil).Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, 8, s.ServicesIndexed)
	require.Equal(t, 1, s.Crawl.FullScans)
}

// TestCrawlOnce draws the progress and prints the summary.
func TestCrawlOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	var items []map[string]any
	for i := range 25 {
		items = append(items, item(fmt.Sprintf("https://once%d.example/%d", i%3, i), strconv.Itoa(500*(i+1))))
	}
	srv := httptest.NewServer(&listing{items: items})
	defer srv.Close()
	var out strings.Builder
	s, err := CrawlOnce(ctx, newCrawler(db, srv.URL, 100), NewReader(db.Pool, nil), &out)
	require.NoError(t, err)
	require.Equal(t, 25, s.ServicesIndexed)
	require.Contains(t, out.String(), srv.URL)
	require.Contains(t, out.String(), "25/25")
	require.Contains(t, out.String(), "services indexed 25, hosts 3, full scans 1\n")
	require.Contains(t, out.String(), "priced: free 0, <0.001 1, <0.01 18, <0.1 6, <1 0, >=1 0 USDC\n")
}

// TestCrawlListingIgnoresOffset ends the pass of a listing without a total
// that serves its first page whatever the offset.
func TestCrawlListingIgnoresOffset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	items := []map[string]any{item("https://same.example/1", "1000"), item("https://same.example/2", "1000")}
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"items": items})
	}))
	defer srv.Close()
	c := NewCrawler(&CrawlerConfig{Pool: db.Pool, Sources: []string{srv.URL}, PageSize: 2, Gap: -1})
	require.NoError(t, c.FullPass(ctx, nil))
	require.Equal(t, int64(2), requests.Load())
	s, err := NewReader(db.Pool, nil).Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, s.ServicesIndexed)
	require.Equal(t, 1, s.Crawl.FullScans)
}

// TestCrawlQuality crawls a listing on loopback whose items carry Bazaar's
// quality figures or not: the figures reach the services and the host's
// sums, null where no listing reports them; a pass that finds the same
// figures writes no event, one that finds them changed or gone does. A
// second listing of the same resource without figures does not erase them.
func TestCrawlQuality(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	withQuality := func(it map[string]any, calls, payers int, last string) map[string]any {
		q := map[string]any{"l30DaysTotalCalls": calls, "l30DaysUniquePayers": payers}
		if last != "" {
			q["lastCalledAt"] = last
		}
		it["quality"] = q
		return it
	}
	src := &listing{items: []map[string]any{
		withQuality(item("https://busy.example/one", "10000"), 1284, 37, "2026-11-24T21:03:11.508Z"),
		withQuality(item("https://busy.example/two", "20000"), 10, 3, "2026-11-25T01:00:00Z"),
		item("https://plain.example/x", "1000"),
	}}
	srv := httptest.NewServer(src)
	defer srv.Close()
	c := newCrawler(db, srv.URL, 100)
	require.NoError(t, c.FullPass(ctx, nil))
	r := NewReader(db.Pool, nil)
	n := func(v int64) *int64 { return &v }
	last := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)

	busy, err := r.HostDetail(ctx, "busy.example")
	require.NoError(t, err)
	require.Len(t, busy.Services, 2)
	one, two := busy.Services[0], busy.Services[1]
	require.Equal(t, "https://busy.example/one", one.Resource)
	at := time.Date(2026, 11, 24, 21, 3, 11, 508_000_000, time.UTC)
	require.True(t, (&store.Quality{Calls30d: n(1284), UniquePayers30d: n(37), LastCalledAt: &at}).Equal(one.Quality), "%+v", one.Quality)
	require.True(t, (&store.Quality{Calls30d: n(10), UniquePayers30d: n(3), LastCalledAt: &last}).Equal(two.Quality), "%+v", two.Quality)
	require.NotNil(t, busy.Host.Quality)
	require.Equal(t, 2, busy.Host.Quality.Services)
	require.Equal(t, int64(1294), *busy.Host.Quality.Calls30d, "calls are summed")
	require.Equal(t, int64(37), *busy.Host.Quality.UniquePayers30dMax, "payers are the most of any one service")
	require.True(t, last.Equal(*busy.Host.Quality.LastCalledAt))

	plain, err := r.HostDetail(ctx, "plain.example")
	require.NoError(t, err)
	require.Nil(t, plain.Host.Quality)
	require.Nil(t, plain.Services[0].Quality)
	raw, err := json.Marshal(plain)
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(string(raw), `"quality":null`), "null, not zero, for the host and its service: %s", raw)
	hosts, err := r.Hosts(ctx, "", "host", 10)
	require.NoError(t, err)
	require.Len(t, hosts, 2)
	for _, h := range hosts {
		require.Equal(t, h.Host == "busy.example", h.Quality != nil, h.Host)
	}

	indexed := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE type = $1", store.EventResourceIndexed).Scan(&n))
		return n
	}
	require.Equal(t, 3, indexed())
	require.NoError(t, c.FullPass(ctx, nil))
	require.Equal(t, 3, indexed(), "the same figures again are no change")

	// The figures move on one service and are gone from the other.
	src.mu.Lock()
	src.items = []map[string]any{
		withQuality(item("https://busy.example/one", "10000"), 1300, 38, "2026-11-25T02:00:00Z"),
		item("https://busy.example/two", "20000"),
		item("https://plain.example/x", "1000"),
	}
	src.mu.Unlock()
	require.NoError(t, c.FullPass(ctx, nil))
	require.Equal(t, 5, indexed())
	busy, err = r.HostDetail(ctx, "busy.example")
	require.NoError(t, err)
	require.Equal(t, int64(1300), *busy.Services[0].Quality.Calls30d)
	require.Nil(t, busy.Services[1].Quality)
	require.Equal(t, 1, busy.Host.Quality.Services)
	require.Equal(t, int64(1300), *busy.Host.Quality.Calls30d)
	require.Equal(t, int64(38), *busy.Host.Quality.UniquePayers30dMax)

	// Another listing of busy.example/one, without figures, leaves them.
	other := &listing{items: []map[string]any{item("https://busy.example/one", "10000")}}
	srv2 := httptest.NewServer(other)
	defer srv2.Close()
	require.NoError(t, newCrawler(db, srv2.URL, 100).FullPass(ctx, nil))
	require.Equal(t, 5, indexed())
	busy, err = r.HostDetail(ctx, "busy.example")
	require.NoError(t, err)
	require.Equal(t, int64(1300), *busy.Services[0].Quality.Calls30d)
}

// TestCrawlRedirectGuarded: a source is operator-configured and read as
// it is, private address included, and so is a redirect within its
// origin; a redirect to another origin goes through the guarded fetcher,
// which refuses a private address unless FETCH_ALLOW_CIDRS allows it, and
// the source is then given up at once, nothing indexed from there.
func TestCrawlRedirectGuarded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// elsewhere is another origin, on loopback: private.
	var elsewhereAsked atomic.Int64
	target := &listing{items: []map[string]any{item("https://elsewhere.example/1", "1000")}}
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhereAsked.Add(1)
		target.ServeHTTP(w, r)
	}))
	defer elsewhere.Close()
	own := &listing{items: []map[string]any{item("https://own.example/1", "1000")}}
	src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, elsewhere.URL+"/list?"+r.URL.RawQuery, http.StatusFound)
		case "/renamed":
			http.Redirect(w, r, "/list?"+r.URL.RawQuery, http.StatusMovedPermanently)
		default:
			own.ServeHTTP(w, r)
		}
	}))
	defer src.Close()

	for _, tc := range []struct {
		name      string
		path      string
		guard     *fetch.Client
		wantHost  string
		wantAsked int64
	}{
		{name: "ok, a source on a private address", path: "/list", wantHost: "own.example"},
		{name: "ok, a redirect within the source's origin", path: "/renamed", wantHost: "own.example"},
		{name: "nok, a redirect to a private address elsewhere is refused", path: "/moved"},
		{name: "ok, unless FETCH_ALLOW_CIDRS allows it", path: "/moved",
			guard: fetch.New(&fetch.Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}), wantHost: "elsewhere.example", wantAsked: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := dbtest.Schema(ctx, t)
			before := elsewhereAsked.Load()
			c := NewCrawler(&CrawlerConfig{Pool: db.Pool, Sources: []string{src.URL + tc.path}, Guard: tc.guard, Gap: -1,
				Backoff: time.Millisecond, Attempts: 3})
			err := c.FullPass(ctx, nil)
			require.Equal(t, tc.wantAsked, elsewhereAsked.Load()-before)
			s, serr := NewReader(db.Pool, nil).Summary(ctx)
			require.NoError(t, serr)
			if tc.wantHost == "" {
				require.ErrorIs(t, err, fetch.ErrRefused)
				var pageErr *PageError
				require.ErrorAs(t, err, &pageErr)
				require.False(t, pageErr.Retryable, "a refusal is not retried")
				require.Zero(t, s.ServicesIndexed)
				return
			}
			require.NoError(t, err)
			require.Equal(t, 1, s.ServicesIndexed)
			hosts, herr := NewReader(db.Pool, nil).Hosts(ctx, "", "host", 10)
			require.NoError(t, herr)
			require.Equal(t, tc.wantHost, hosts[0].Host)
		})
	}
}

// TestCrawlHostileItems crawls, for each way a listing item can carry what
// Postgres cannot store (a NUL, a lone surrogate, bytes that are not UTF-8,
// a number beyond numeric's range, an amount no token can hold), a
// listing whose first page holds that item between two good ones and
// whose second page holds one more: the pass completes, every item is
// indexed, the hostile one without the parts the index cannot keep (a
// string without its NUL, a JSON value dropped, the price left out).
func TestCrawlHostileItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	huge := json.Number("1e200000")
	hugeAmount := "1" + strings.Repeat("0", 140_000)
	bazaar := func(input, output any) map[string]any {
		info := map[string]any{"input": input}
		if output != nil {
			info["output"] = output
		}
		return map[string]any{"bazaar": map[string]any{"info": info}}
	}
	option := func(it map[string]any) map[string]any { return it["accepts"].([]any)[0].(map[string]any) }
	// row is what the index keeps of the hostile item.
	type row struct {
		Description, Method, MimeType      string
		Tags                               []string
		Input, Output, Extensions, Accepts []byte
		Price                              *string
		Calls                              *int64
		LastCalled                         *time.Time
	}
	for i, tc := range []struct {
		name  string
		hurt  func(it map[string]any)
		check func(t *testing.T, r row)
	}{
		{"NUL in the description", func(it map[string]any) { it["description"] = "bad\x00text" },
			func(t *testing.T, r row) { require.Equal(t, "badtext", r.Description) }},
		{"NUL in a tag", func(it map[string]any) { it["tags"] = []any{"ok", "t\x00ag", "\x00"} },
			func(t *testing.T, r row) { require.Equal(t, []string{"ok", "tag"}, r.Tags) }},
		{"NUL in the input schema", func(it map[string]any) {
			it["extensions"] = bazaar(map[string]any{"type": "http", "method": "po\x00st", "body": map[string]any{"q": "\x00"}},
				map[string]any{"ok": true})
		}, func(t *testing.T, r row) {
			require.Equal(t, "POST", r.Method)
			require.Nil(t, r.Input)
			require.JSONEq(t, `{"ok":true}`, string(r.Output))
			require.Nil(t, r.Extensions, "the extensions hold the input schema")
		}},
		{"NUL in a v1 output schema", func(it map[string]any) {
			option(it)["outputSchema"] = map[string]any{"input": map[string]any{"type": "http"}, "output": map[string]any{"x": "\x00"}}
		}, func(t *testing.T, r row) {
			require.JSONEq(t, `{"type":"http"}`, string(r.Input))
			require.Nil(t, r.Output)
		}},
		{"NUL in the extensions", func(it map[string]any) {
			it["extensions"] = map[string]any{"bazaar": map[string]any{"info": map[string]any{"input": map[string]any{"type": "http"}}},
				"other": map[string]any{"no\x00te": 1}}
		}, func(t *testing.T, r row) {
			require.Nil(t, r.Extensions)
			require.JSONEq(t, `{"type":"http"}`, string(r.Input), "the schema within is kept")
		}},
		{"NUL in an option's extra", func(it map[string]any) { option(it)["extra"] = map[string]any{"name": "USD\x00Coin"} },
			func(t *testing.T, r row) {
				require.JSONEq(t, `[{"scheme":"exact","network":"eip155:8453","asset":"`+usdc+`","amount":"1000","pay_to":"0x1"}]`, string(r.Accepts))
				require.Equal(t, "0.001000", *r.Price)
			}},
		{"NUL in an option's strings and the mime type", func(it map[string]any) {
			o := option(it)
			o["scheme"], o["payTo"] = "ex\x00act", "0x\x001"
			it["mimeType"] = "application/\x00json"
		}, func(t *testing.T, r row) {
			require.JSONEq(t, `[{"scheme":"exact","network":"eip155:8453","asset":"`+usdc+`","amount":"1000","pay_to":"0x1"}]`, string(r.Accepts))
			require.Equal(t, "application/json", r.MimeType)
		}},
		{"1e200000 in a schema", func(it map[string]any) {
			it["extensions"] = bazaar(map[string]any{"type": "http"}, map[string]any{"max": huge})
		}, func(t *testing.T, r row) {
			require.JSONEq(t, `{"type":"http"}`, string(r.Input))
			require.Nil(t, r.Output)
			require.Nil(t, r.Extensions)
		}},
		{"1e200000 in an option's extra", func(it map[string]any) { option(it)["extra"] = map[string]any{"version": huge} },
			func(t *testing.T, r row) {
				require.NotContains(t, string(r.Accepts), "extra")
				require.Equal(t, "0.001000", *r.Price)
			}},
		{"a huge integer amount", func(it map[string]any) { option(it)["amount"] = hugeAmount },
			func(t *testing.T, r row) {
				require.Nil(t, r.Price, "unpriced")
				require.Contains(t, string(r.Accepts), hugeAmount, "the option as given")
			}},
		{"a lone surrogate in the extensions", func(it map[string]any) {
			it["extensions"] = json.RawMessage(`{"x":"\ud800"}`)
			option(it)["extra"] = json.RawMessage(`{"name":"\udc00\ud83d\ude00"}`)
		}, func(t *testing.T, r row) {
			require.Nil(t, r.Extensions)
			require.NotContains(t, string(r.Accepts), "extra")
		}},
		{"bytes that are not UTF-8 in a schema", func(it map[string]any) {
			it["extensions"] = bazaar(json.RawMessage("{\"type\":\"http\",\"q\":\"\xff\"}"), nil)
		}, func(t *testing.T, r row) {
			require.Nil(t, r.Input)
			require.Nil(t, r.Extensions)
		}},
		{"a time beyond what JSON holds", func(it map[string]any) {
			it["quality"] = map[string]any{"l30DaysTotalCalls": 5, "lastCalledAt": json.Number("1e300")}
		}, func(t *testing.T, r row) {
			require.Equal(t, int64(5), *r.Calls)
			require.Nil(t, r.LastCalled, "not read")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hostile := item(fmt.Sprintf("https://hostile%d.example/x", i), "1000")
			tc.hurt(hostile)
			good := func(n int) map[string]any {
				return item(fmt.Sprintf("https://good%d.example/%d", i, n), "2000", "fine")
			}
			src := &listing{items: []map[string]any{good(1), hostile, good(2), good(3)}}
			srv := httptest.NewServer(src)
			defer srv.Close()
			require.NoError(t, NewCrawler(&CrawlerConfig{Pool: db.Pool, Sources: []string{srv.URL}, PageSize: 3, Gap: -1}).FullPass(ctx, nil))

			var pages, resources int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = $1 AND stream = $2`,
				store.EventCrawlPage, store.CrawlStream(srv.URL)).Scan(&pages))
			require.Equal(t, 2, pages)
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM index_resources WHERE NOT retired AND host LIKE $1`,
				fmt.Sprintf("%%%d.example", i)).Scan(&resources))
			require.Equal(t, 4, resources, "every item indexed")
			var r row
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT description, method, mime_type, tags, input_schema, output_schema, extensions,
				accepts, price_usdc::text, quality_calls_30d, quality_last_called_at FROM index_resources WHERE resource = $1`, hostile["resource"]).
				Scan(&r.Description, &r.Method, &r.MimeType, &r.Tags, &r.Input, &r.Output, &r.Extensions, &r.Accepts, &r.Price, &r.Calls, &r.LastCalled))
			tc.check(t, r)
		})
	}
}
