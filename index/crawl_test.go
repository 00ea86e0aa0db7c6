package index

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	return NewCrawler(CrawlerConfig{Pool: db.Pool, Sources: []string{src}, PageSize: 10, PagesPerRun: pages, Gap: -1, Backoff: time.Millisecond})
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
		item("https://unpriced.example/y", "0.05"))
	src := &listing{items: items, fail: map[int]int{2: http.StatusTooManyRequests, 4: http.StatusInternalServerError}}
	srv := httptest.NewServer(src)
	defer srv.Close()

	c := newCrawler(db, srv.URL, 100)
	require.NoError(t, c.FullPass(ctx, nil))
	r := NewReader(db.Pool)
	s, err := r.Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, 37, s.ServicesIndexed, "35 + legacy + unpriced; the variants are one resource")
	require.Equal(t, 9, s.HostsKnown)
	require.Equal(t, 1, s.Crawl.FullScans)
	require.Equal(t, 39, s.Crawl.Total)
	require.Equal(t, Liveness{Unmeasured: 9}, s.Liveness)
	// Prices 0.001 ... 0.035 USDC, legacy 0.5, unpriced not banded.
	require.Equal(t, map[string]int{"free": 0, "under_1m": 0, "under_10m": 9, "under_100m": 26, "under_1": 1, "over_1": 0}, s.PriceBands)
	require.Equal(t, "host0.example", s.TopBySize[0].Host)
	require.Equal(t, 5, s.TopBySize[0].Services)
	require.Equal(t, "host0.example", s.Cheapest[0].Host)
	require.InDelta(t, 0.001, *s.Cheapest[0].PriceMinUSDC, 1e-9)
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
	require.Equal(t, 37, s.ServicesIndexed, "one retired, one new")
	require.Equal(t, 1, s.PriceBands["free"])
	require.Equal(t, 1, s.PriceBands["under_1m"])
	hosts, err := r.Hosts(ctx, "host0.example", "services", 10)
	require.NoError(t, err)
	require.Len(t, hosts, 1)
	require.Equal(t, 4, hosts[0].Services, "https://host0.example/api/0 was retired")
	hosts, err = r.Hosts(ctx, "CHEAPER", "price", 10)
	require.NoError(t, err)
	require.Len(t, hosts, 1)
	require.Equal(t, "host1.example", hosts[0].Host)
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
	s, err := NewReader(db.Pool).Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, 95, s.ServicesIndexed)
	require.Equal(t, 1, s.Crawl.FullScans)
	var indexed, pages int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE type = $1), count(*) FILTER (WHERE type = $2) FROM events",
		store.EventResourceIndexed, store.EventCrawlPage).Scan(&indexed, &pages))
	require.Equal(t, 95, indexed, "every resource indexed once")
	require.Equal(t, 10, pages, "the pass resumed at its cursor: pages 0-4, then 5-9")
}

// sellers answers as the resources of hosts named after their behaviour.
func sellers(t *testing.T) (*httptest.Server, *fetch.Client) {
	quote := base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"resource":{"url":"x"},"accepts":[{"scheme":"exact","network":"eip155:8453","amount":"10","asset":"` + usdc + `","payTo":"0x1","maxTimeoutSeconds":60}]}`))
	var tooMany atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.Host)
		if r.Method == http.MethodPost && r.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		switch {
		case host == "paid.test" || (len(host) > 4 && host[:4] == "live"):
			w.Header().Set("PAYMENT-REQUIRED", quote)
			w.WriteHeader(http.StatusPaymentRequired)
			_, _ = w.Write([]byte("{}"))
		case host == "v1.test":
			w.WriteHeader(http.StatusPaymentRequired)
			_, _ = w.Write([]byte(`{"x402Version":1,"accepts":[{"scheme":"exact","network":"base","maxAmountRequired":"10","payTo":"0x1"}]}`))
		case host == "bogus402.test":
			w.WriteHeader(http.StatusPaymentRequired)
			_, _ = w.Write([]byte("pay me"))
		case host == "missing.test":
			w.WriteHeader(http.StatusNotFound)
		case host == "broken.test":
			w.WriteHeader(http.StatusInternalServerError)
		case host == "busy.test":
			tooMany.Add(1)
			w.WriteHeader(http.StatusTooManyRequests)
		case host == "slow.test" || (len(host) > 5 && host[:5] == "never"):
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, fetch.New(&fetch.Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Resolver: loopbackResolver{}})
}

// loopbackResolver resolves every .test name to 127.0.0.1 and
// private.test to a private address the guard refuses.
type loopbackResolver struct{}

func (loopbackResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "private.test" {
		return []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

func TestLiveness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	srv, client := sellers(t)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	var items []map[string]any
	for _, h := range []string{"paid", "v1", "bogus402", "missing", "broken", "busy", "slow", "private"} {
		it := item(fmt.Sprintf("http://%s.test:%s/r", h, port), "10")
		if h == "paid" {
			it["extensions"] = map[string]any{"bazaar": map[string]any{"info": map[string]any{"input": map[string]any{"method": "POST"}}}}
		}
		items = append(items, it)
	}
	src := httptest.NewServer(&listing{items: items})
	defer src.Close()
	require.NoError(t, newCrawler(db, src.URL, 100).FullPass(ctx, nil))

	// A first measurement makes busy.test live; a 429 later leaves it so.
	require.NoError(t, pgxAppend(ctx, db, "busy.test", true))
	p := NewProber(ProberConfig{Pool: db.Pool, Fetch: client, Timeout: 500 * time.Millisecond})
	rep, err := p.ProbeAll(ctx)
	require.NoError(t, err)
	require.Equal(t, ProbeReport{Probed: 8, Live: 2, Dead: 5, Later: 1}, *rep)

	r := NewReader(db.Pool)
	hosts, err := r.Hosts(ctx, "", "host", 50)
	require.NoError(t, err)
	got := map[string]Host{}
	for _, h := range hosts {
		got[h.Host] = h
	}
	check := func(host string, live bool, status int) {
		h := got[host]
		require.NotNil(t, h.Live, host)
		require.Equal(t, live, *h.Live, host)
		require.NotNil(t, h.CheckedAt, host)
		if status == 0 {
			require.Nil(t, h.Status, host)
			require.Nil(t, h.LatencyMS, host)
			return
		}
		require.Equal(t, status, *h.Status, host)
		require.NotNil(t, h.LatencyMS, host)
	}
	check("paid.test", true, 402)
	check("v1.test", true, 402)
	check("bogus402.test", false, 402)
	check("missing.test", false, 404)
	check("broken.test", false, 500)
	check("busy.test", true, 429)
	check("slow.test", false, 0)
	check("private.test", false, 0)
	var probeError string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT probe_error FROM index_hosts WHERE host = 'private.test'").Scan(&probeError))
	require.Equal(t, "refused", probeError)

	s, err := r.Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, Liveness{Measured: 8, Live: 3, Dead: 5}, s.Liveness)
}

// pgxAppend records a first liveness measurement of host.
func pgxAppend(ctx context.Context, db *dbtest.DB, host string, live bool) error {
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	status := 402
	if err := store.Append(ctx, tx, store.NewEvent{Stream: store.HostStream(host), Type: store.EventHostProbed,
		Data: store.HostProbed{Live: &live, Status: &status, CheckedAt: time.Now()}}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
