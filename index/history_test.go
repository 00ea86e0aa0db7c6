package index

import (
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/schema"
	"github.com/x402d/x402d/store"
)

// appendProbe records a measurement of host taken at at, as the prober
// records one.
func appendProbe(ctx context.Context, t *testing.T, db *dbtest.DB, host string, at time.Time, live bool, status int, latency *int) {
	t.Helper()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	require.NoError(t, store.Append(ctx, tx, store.NewEvent{Stream: store.HostStream(host), Type: store.EventHostProbed,
		Data: store.HostProbed{Live: &live, Status: &status, LatencyMS: latency, CheckedAt: at}}))
	require.NoError(t, tx.Commit(ctx))
}

func ms(n int) *int { return &n }

// quoteHeader is a v2 PAYMENT-REQUIRED header offering accepts (JSON
// objects, comma-separated).
func quoteHeader(accepts string) string {
	return base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"resource":{"url":"x"},"accepts":[` + accepts + `]}`))
}

// TestHistory reads each host's uptime, probe counts and latency
// percentiles over 24 hours, 7 and 30 days from its probes (recorded in
// the past, then measured now over HTTP), and sorts by them.
func TestHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	listed := newListedSellers(t)
	var items []map[string]any
	for _, h := range []string{"live1", "missing", "busy", "paid"} {
		items = append(items, item(listed.url(h, "/r"), "10"))
	}
	listed.setItems(items...)
	require.NoError(t, newCrawler(db, listed.src, 100).FullPass(ctx, nil))

	now := time.Now().UTC()
	appendProbe(ctx, t, db, "live1.test", now.Add(-40*24*time.Hour), false, 500, ms(5)) // older than 30 days: not counted
	appendProbe(ctx, t, db, "live1.test", now.Add(-20*24*time.Hour), true, 402, ms(100))
	appendProbe(ctx, t, db, "live1.test", now.Add(-3*24*time.Hour), false, 0, nil)
	appendProbe(ctx, t, db, "live1.test", now.Add(-2*time.Hour), true, 402, ms(200))
	appendProbe(ctx, t, db, "live1.test", now.Add(-time.Hour), true, 402, ms(300))
	appendProbe(ctx, t, db, "busy.test", now.Add(-time.Hour), true, 429, ms(3)) // try later: no verdict
	rep, err := newProber(db, listed.client).ProbeAll(ctx)
	require.NoError(t, err)
	require.Equal(t, ProbeReport{Probed: 4, Live: 2, Dead: 1, Later: 1}, *rep)

	hosts, err := NewReader(db.Pool, nil).Hosts(ctx, "", "uptime", 10)
	require.NoError(t, err)
	got := map[string]History{}
	var order []string
	for _, h := range hosts {
		got[h.Host] = h.HostHistory
		order = append(order, h.Host)
	}
	require.Equal(t, []string{"paid.test", "live1.test", "missing.test", "busy.test"}, order,
		"uptime: 1, 0.8, a measured 0, then not measured")

	live := got["live1.test"]
	require.Equal(t, [3]int{3, 4, 5}, [3]int{live.Probes24h, live.Probes7d, live.Probes30d})
	require.InDelta(t, 1.0, *live.Uptime24h, 1e-9)
	require.InDelta(t, 0.75, *live.Uptime7d, 1e-9)
	require.InDelta(t, 0.8, *live.Uptime30d, 1e-9)
	// Latencies over 30 days: the probe now (a few ms), 100, 200, 300.
	require.Equal(t, 100, *live.LatencyP50MS)
	require.Equal(t, 300, *live.LatencyP95MS)
	require.NotNil(t, live.FirstSeen)
	require.NotNil(t, live.LastChange)

	missing := got["missing.test"]
	require.Equal(t, 1, missing.Probes30d)
	require.NotNil(t, missing.Uptime30d, "dead at every probe is a measured 0")
	require.Zero(t, *missing.Uptime30d)
	require.NotNil(t, missing.LatencyP50MS, "a 404 has a latency")

	busy := got["busy.test"]
	require.Zero(t, busy.Probes30d)
	require.Nil(t, busy.Uptime24h)
	require.Nil(t, busy.Uptime30d)
	require.Nil(t, busy.LatencyP50MS)

	// The probes by hour keep 31 days.
	var oldest time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT min(hour) FROM index_probe_hours WHERE host = 'live1.test'").Scan(&oldest))
	require.WithinDuration(t, now.Add(-20*24*time.Hour), oldest, time.Hour)

	byLatency, err := NewReader(db.Pool, nil).Hosts(ctx, "", "latency", 10)
	require.NoError(t, err)
	require.Equal(t, "busy.test", byLatency[len(byLatency)-1].Host, "no latency measured: last")
}

// TestChanges follows the market's changes: services added, a price and
// networks changed, a service retired, a host gone live then dead; paged
// by cursor and read from a time.
func TestChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	var down atomic.Bool
	seller := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("PAYMENT-REQUIRED", quoteHeader(`{"scheme":"exact","network":"eip155:8453","amount":"10","asset":"`+usdc+`","payTo":"0x1"}`))
		w.WriteHeader(http.StatusPaymentRequired)
	}))
	defer seller.Close()
	_, port, _ := net.SplitHostPort(seller.Listener.Addr().String())
	_, client, _ := sellers(t)
	a, b, c := "http://shop.test:"+port+"/a", "http://shop.test:"+port+"/b", "http://shop.test:"+port+"/c"
	l := &listing{items: []map[string]any{item(a, "10"), item(b, "20")}}
	src := httptest.NewServer(l)
	defer src.Close()
	crawler := newCrawler(db, src.URL, 100)
	prober := newProber(db, client)
	r := NewReader(db.Pool, nil)

	require.NoError(t, crawler.FullPass(ctx, nil))
	_, err := prober.ProbeAll(ctx)
	require.NoError(t, err)
	_, err = prober.ProbeAll(ctx) // still live: no change
	require.NoError(t, err)
	mid := time.Now()

	priced := item(a, "15")
	priced["accepts"] = append(priced["accepts"].([]any), map[string]any{"scheme": "exact", "network": "eip155:137", "amount": "15",
		"asset": "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359", "payTo": "0x1"})
	l.mu.Lock()
	l.items = []map[string]any{priced, item(c, "30")}
	l.mu.Unlock()
	require.NoError(t, crawler.FullPass(ctx, nil))
	down.Store(true)
	_, err = prober.ProbeAll(ctx)
	require.NoError(t, err)

	type row struct{ kind, resource, from, to string }
	read := func(ch []Change) []row {
		var rows []row
		for _, c := range ch {
			res := ""
			if c.Resource != nil {
				res = *c.Resource
			}
			rows = append(rows, row{c.Kind, res, string(c.From), string(c.To)})
		}
		return rows
	}
	q := ChangesQuery{}
	require.NoError(t, q.Check())
	all, err := r.Changes(ctx, q)
	require.NoError(t, err)
	require.Equal(t, []row{
		{store.ChangeServiceAdded, a, "", `"0.000010"`},
		{store.ChangeServiceAdded, b, "", `"0.000020"`},
		{store.ChangeHostLive, "", "", "true"},
		{store.ChangePriceChanged, a, `"0.000010"`, `"0.000015"`},
		{store.ChangeNetworksChanged, a, `["eip155:8453"]`, `["eip155:137", "eip155:8453"]`},
		{store.ChangeServiceAdded, c, "", `"0.000030"`},
		{store.ChangeServiceRetired, b, `"0.000020"`, ""},
		{store.ChangeHostDead, "", "true", "false"},
	}, read(all.Changes))
	for _, ch := range all.Changes {
		require.Equal(t, "shop.test", ch.Host)
	}

	// Paged by two, following next, the same changes; past the end, next
	// stays.
	var paged []Change
	since := ""
	for range 10 {
		q := ChangesQuery{Since: since, Limit: 2}
		require.NoError(t, q.Check())
		page, err := r.Changes(ctx, q)
		require.NoError(t, err)
		if len(page.Changes) == 0 {
			require.Equal(t, since, page.Next)
			break
		}
		require.LessOrEqual(t, len(page.Changes), 2)
		paged = append(paged, page.Changes...)
		since = page.Next
	}
	require.Equal(t, all.Changes, paged)

	// From a time: the changes of the second pass on.
	q = ChangesQuery{Since: mid.UTC().Format(time.RFC3339Nano)}
	require.NoError(t, q.Check())
	later, err := r.Changes(ctx, q)
	require.NoError(t, err)
	require.Equal(t, read(all.Changes[3:]), read(later.Changes))

	for _, bad := range []ChangesQuery{{Since: "yesterday"}, {Since: "-1"}, {Limit: 501}} {
		require.Error(t, bad.Check(), "%+v", bad)
	}

	latest, err := r.LatestChanges(ctx, "shop.test", 2)
	require.NoError(t, err)
	require.Equal(t, []string{store.ChangeHostDead, store.ChangeServiceRetired}, []string{latest[0].Kind, latest[1].Kind})
	require.Equal(t, "shop.test went dead", latest[0].Title())
}

// TestHistoryFromTheLog: the history that migration 011 fills from the
// event log written before it is the one its projections keep.
func TestHistoryFromTheLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	listed := newListedSellers(t)
	listed.setItems(item(listed.url("live1", "/a"), "10"), item(listed.url("live1", "/b"), "20"), item(listed.url("missing", "/r"), "10"))
	crawler := newCrawler(db, listed.src, 100)
	require.NoError(t, crawler.FullPass(ctx, nil))
	now := time.Now().UTC()
	appendProbe(ctx, t, db, "live1.test", now.Add(-40*24*time.Hour), false, 500, ms(5))
	appendProbe(ctx, t, db, "live1.test", now.Add(-3*24*time.Hour), false, 0, nil)
	appendProbe(ctx, t, db, "live1.test", now.Add(-2*time.Hour), true, 402, ms(200))
	appendProbe(ctx, t, db, "missing.test", now.Add(-2*time.Hour), true, 429, ms(1))
	_, err := newProber(db, listed.client).ProbeAll(ctx)
	require.NoError(t, err)
	listed.setItems(item(listed.url("live1", "/a"), "12"), item(listed.url("missing", "/r"), "10"))
	require.NoError(t, crawler.FullPass(ctx, nil))

	snapshot := func() []string {
		rows, err := db.Pool.Query(ctx, `
			SELECT format('change %s %s %s %s %s %s', at, host, kind, resource, "from", "to") FROM index_changes
			UNION ALL SELECT format('hour %s %s %s %s %s', host, hour, probes, live, latencies) FROM index_probe_hours
			UNION ALL SELECT format('host %s %s %s %s %s %s %s %s %s %s %s', host, uptime_24h, uptime_7d, uptime_30d,
				probes_24h, probes_7d, probes_30d, latency_p50_ms, latency_p95_ms, first_seen, last_change) FROM index_hosts
			ORDER BY 1`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	kept := snapshot()
	require.Len(t, kept, 8+4+2, "8 changes, 4 hours of probes, 2 hosts")

	migrations, err := schema.Migrations()
	require.NoError(t, err)
	m := migrations[slices.IndexFunc(migrations, func(m schema.Migration) bool { return m.Name == "index_history" })]
	_, err = db.Pool.Exec(ctx, m.Down)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, m.Up)
	require.NoError(t, err)
	require.Equal(t, kept, snapshot())
}

// TestPriceHonesty compares the 402 each host's sample resource answers
// with its listing: the same (v2 header, v1 body), another amount and
// receiver, no option on the listed network, no valid quote; then filters
// hosts by the verdict. A 429 keeps the last one.
func TestPriceHonesty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	var busy atomic.Bool
	seller := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.Host)
		option := func(network, amount, payTo string) string {
			return `{"scheme":"exact","network":"` + network + `","amount":"` + amount + `","asset":"` + usdc + `","payTo":"` + payTo + `"}`
		}
		switch host {
		case "honest.test":
			if busy.Load() {
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			// The receiver in another case, the amount with a leading zero,
			// and an option the listing does not name: all the same.
			w.Header().Set("PAYMENT-REQUIRED", quoteHeader(option("eip155:8453", "010", "0xAbC")+","+option("eip155:137", "99", "0x9")))
		case "v1.test":
			w.WriteHeader(http.StatusPaymentRequired)
			_, _ = w.Write([]byte(`{"x402Version":1,"accepts":[{"scheme":"exact","network":"base","maxAmountRequired":"10","asset":"` + usdc + `","payTo":"0xabc"}]}`))
			return
		case "cheat.test":
			w.Header().Set("PAYMENT-REQUIRED", quoteHeader(option("eip155:8453", "20", "0xdef")))
		case "elsewhere.test":
			w.Header().Set("PAYMENT-REQUIRED", quoteHeader(option("eip155:137", "10", "0xabc")))
		case "bogus.test":
		}
		w.WriteHeader(http.StatusPaymentRequired)
	}))
	defer seller.Close()
	_, port, _ := net.SplitHostPort(seller.Listener.Addr().String())
	_, client, _ := sellers(t)
	var items []map[string]any
	for _, h := range []string{"honest", "v1", "cheat", "elsewhere", "bogus"} {
		it := item("http://"+h+".test:"+port+"/r", "10")
		it["accepts"].([]any)[0].(map[string]any)["payTo"] = "0xabc"
		items = append(items, it)
	}
	src := httptest.NewServer(&listing{items: items})
	defer src.Close()
	require.NoError(t, newCrawler(db, src.URL, 100).FullPass(ctx, nil))
	prober := newProber(db, client)
	_, err := prober.ProbeAll(ctx)
	require.NoError(t, err)

	r := NewReader(db.Pool, nil)
	verdicts := map[string]*bool{}
	hosts, err := r.Hosts(ctx, "", "host", 10)
	require.NoError(t, err)
	for _, h := range hosts {
		verdicts[h.Host] = h.QuoteMatchesListing
	}
	yes, no := true, false
	require.Equal(t, map[string]*bool{"honest.test": &yes, "v1.test": &yes, "cheat.test": &no, "elsewhere.test": &no, "bogus.test": nil}, verdicts)

	cheat, err := r.HostDetail(ctx, "cheat.test")
	require.NoError(t, err)
	res := "http://cheat.test:" + port + "/r"
	require.Equal(t, []store.QuoteDifference{
		{Resource: res, Network: "eip155:8453", Asset: usdc, Field: "amount", Listing: "10", Quote: "20"},
		{Resource: res, Network: "eip155:8453", Asset: usdc, Field: "pay_to", Listing: "0xabc", Quote: "0xdef"},
	}, cheat.QuoteDifferences)
	elsewhere, err := r.HostDetail(ctx, "elsewhere.test")
	require.NoError(t, err)
	require.Equal(t, []store.QuoteDifference{{Resource: "http://elsewhere.test:" + port + "/r", Network: "eip155:8453", Asset: usdc, Field: "network", Listing: "eip155:8453"}},
		elsewhere.QuoteDifferences)
	honest, err := r.HostDetail(ctx, "honest.test")
	require.NoError(t, err)
	require.Empty(t, honest.QuoteDifferences)

	for filter, want := range map[string][]string{"true": {"honest.test", "v1.test"}, "false": {"cheat.test", "elsewhere.test"}, "null": {"bogus.test"}} {
		q := HostQuery{Sort: "host", QuoteMatchesListing: filter}
		require.NoError(t, q.Check())
		hosts, err := r.Find(ctx, q)
		require.NoError(t, err)
		var names []string
		for _, h := range hosts {
			names = append(names, h.Host)
		}
		require.Equal(t, want, names, filter)
	}
	bad := HostQuery{QuoteMatchesListing: "yes"}
	require.Error(t, bad.Check())

	busy.Store(true)
	_, err = prober.ProbeAll(ctx)
	require.NoError(t, err)
	hosts, err = r.Hosts(ctx, "honest", "host", 10)
	require.NoError(t, err)
	require.Equal(t, &yes, hosts[0].QuoteMatchesListing, "a 429 keeps the last verdict")
}
