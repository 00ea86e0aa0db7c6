//go:build scenario

package api

// The index at the scale runs only when asked for, with -tags
// scenario (go tool task bench:index): it makes 14 million events.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/schema"
)

// probeSlots is how many liveness passes 30 days of a 30-minute
// LIVENESS_CRON make.
const probeSlots = 30 * 48

// scaleProbes writes the host.probed events of every host (1 to $3) for
// the liveness passes starting in [$1, $2), none measured after $4, in the
// order and the layout the prober appends them (store.HostProbed as JSON,
// created as the probe ends). Each pass probes the hosts within its first
// minute. A tenth of the hosts are dead (half answer 503, half have no
// address); of the others, one pass in 50 times out, one host in 97 answers
// 429 (no verdict) at one pass in 10; the live answer 402 after 80 to 480
// ms, their quote matching the listing (two in three hosts), not matching
// (one in 20, with the difference) or not compared.
const scaleProbes = `
INSERT INTO events (stream, type, data, created_at)
SELECT 'host/h' || h || '.example', 'host.probed',
	jsonb_build_object('live', p.live, 'status', p.status, 'latency_ms', p.lat,
		'checked_at', to_char(t.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || lpad(((h * 7 + t.i) % 1000)::text, 3, '0') || 'Z')
	|| CASE WHEN p.err IS NULL THEN '{}' ELSE jsonb_build_object('error', p.err) END
	|| CASE WHEN p.quote IS NULL THEN '{}' ELSE jsonb_build_object('quote_matches_listing', p.quote) END
	|| CASE WHEN NOT p.quote THEN jsonb_build_object('quote_differences', jsonb_build_array(jsonb_build_object(
		'resource', 'https://h' || h || '.example/r0', 'network', 'eip155:8453', 'asset', '` + baseUSDC + `',
		'field', 'amount', 'listing', ((1 + h % 7) * 1000)::text, 'quote', ((2 + h % 7) * 1000)::text))) ELSE '{}' END,
	t.at + coalesce(p.lat, 40) * interval '1 millisecond'
FROM generate_series($1::timestamptz, $2::timestamptz - interval '1 second', interval '30 minutes') slot,
	generate_series(1, $3::integer) h,
	LATERAL (SELECT slot + (h % 60) * interval '1 second' + (h * 37 % 1000) * interval '1 millisecond' AS at,
		(extract(epoch FROM slot)::bigint / 1800)::integer AS i) t,
	LATERAL (SELECT * FROM (VALUES
		(h % 20 = 0, false, NULL::integer, NULL::integer, 'dial tcp: lookup h' || h || '.example: no such host', NULL::boolean),
		(h % 10 = 0, false, 503, 20 + h % 50, NULL, NULL),
		(h % 97 = 1 AND t.i % 10 = 0, true, 429, 30, NULL, NULL),
		((h * 13 + t.i) % 50 = 0, false, NULL, NULL, 'context deadline exceeded (Client.Timeout exceeded while awaiting headers)', NULL),
		(true, true, 402, 80 + (h * 7 + t.i * 13) % 400, NULL, CASE WHEN h % 3 = 0 THEN NULL ELSE h % 20 <> 1 END)
	) v(applies, live, status, lat, err, quote) WHERE v.applies LIMIT 1) p
WHERE t.at <= $4
ORDER BY t.at, h`

// scaleLastProbe sets what each host's last probe (and last verdict) says
// on its row, as the probe's projection leaves it.
const scaleLastProbe = `
UPDATE index_hosts x SET status = (e.data->>'status')::integer, latency_ms = (e.data->>'latency_ms')::integer,
	checked_at = (e.data->>'checked_at')::timestamptz, probe_error = e.data->>'error',
	live = (v.data->>'live')::boolean, quote_matches_listing = (v.data->>'quote_matches_listing')::boolean,
	quote_differences = v.data->'quote_differences'
FROM (SELECT DISTINCT ON (stream) stream, data FROM events WHERE type = 'host.probed' AND created_at > $1::timestamptz - interval '2 hours'
	ORDER BY stream, id DESC) e,
	(SELECT DISTINCT ON (stream) stream, data FROM events WHERE type = 'host.probed' AND created_at > $1::timestamptz - interval '2 hours'
		AND coalesce((data->>'status')::integer, 0) <> 429 ORDER BY stream, id DESC) v
WHERE e.stream = 'host/' || x.host AND v.stream = e.stream`

// scaleFigures is what the history's figures of host $1 are, counted from
// its events directly as of $2 (index_host_history's windows: whole hours).
const scaleFigures = `
SELECT count(*) FILTER (WHERE hour > date_trunc('hour', $2::timestamptz) - interval '24 hours'),
	count(*) FILTER (WHERE hour > date_trunc('hour', $2::timestamptz) - interval '7 days'),
	count(*),
	(count(*) FILTER (WHERE live AND hour > date_trunc('hour', $2::timestamptz) - interval '24 hours'))::float8
		/ nullif(count(*) FILTER (WHERE hour > date_trunc('hour', $2::timestamptz) - interval '24 hours'), 0),
	(count(*) FILTER (WHERE live AND hour > date_trunc('hour', $2::timestamptz) - interval '7 days'))::float8
		/ nullif(count(*) FILTER (WHERE hour > date_trunc('hour', $2::timestamptz) - interval '7 days'), 0),
	(count(*) FILTER (WHERE live))::float8 / nullif(count(*), 0),
	percentile_disc(0.5) WITHIN GROUP (ORDER BY lat), percentile_disc(0.95) WITHIN GROUP (ORDER BY lat)
FROM (SELECT date_trunc('hour', (data->>'checked_at')::timestamptz, 'UTC') AS hour, (data->>'live')::boolean AS live,
		(data->>'latency_ms')::integer AS lat
	FROM events WHERE stream = 'host/' || $1 AND type = 'host.probed'
		AND data->>'live' IS NOT NULL AND coalesce((data->>'status')::integer, 0) <> 429) p
WHERE hour > date_trunc('hour', $2::timestamptz) - interval '30 days' AND hour <= $2`

// scaleHistory is what index_hosts holds of host $1's history.
const scaleHistory = `SELECT probes_24h, probes_7d, probes_30d, uptime_24h, uptime_7d, uptime_30d, latency_p50_ms, latency_p95_ms
FROM index_hosts WHERE host = $1`

// scaleStats is a generated index's record: when its probes end (the time
// its history was rebuilt as of), how long each step took, and the event
// log's size before and after the probes were written.
type scaleStats struct {
	AsOf                               time.Time
	Probes                             int64
	CrawlS, ProbesS, RebuildS          float64
	HeapBefore, IndexBefore, AllBefore int64
	HeapAfter, IndexAfter, AllAfter    int64
}

// logSize is the event log's partitions' heap, index and total sizes.
const logSize = `SELECT coalesce(sum(pg_relation_size(inhrelid)), 0)::bigint, coalesce(sum(pg_indexes_size(inhrelid)), 0)::bigint,
	coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits WHERE inhparent = 'events'::regclass`

// generateIndex makes the index of hosts hosts of 10 services each as the
// service would hold it after 30 days: the services crawled from a listing
// (by the crawler; each host's receiver its own, h<n>.example's n in
// hexadecimal: lpadHex), 30 days of liveness passes every 30 minutes
// written to the event log (scaleProbes, a day a statement), then the
// history rebuilt from the log as migration 011 fills it (its up SQL, on
// emptied index_probe_hours and index_changes), each host's last probe set
// on its row (scaleLastProbe), and 30 days of on-chain evidence of 1,000
// sellers among them (generateEvidence).
func generateIndex(ctx context.Context, b *testing.B, db *dbtest.DB, hosts int) {
	now := time.Now().UTC()
	start := now.Truncate(30 * time.Minute).Add(-probeSlots * 30 * time.Minute).Add(30 * time.Minute)
	// Monthly partitions, as EVENTS_PARTITION defaults to, from the month
	// of the first probe.
	first := schema.PeriodMonth.Start(start)
	for from := first; from.Before(schema.PeriodMonth.Start(now)); from = schema.PeriodMonth.Next(from) {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(b, err)
		p := schema.Partition{Name: "events_p" + from.Format("20060102"), From: from, To: schema.PeriodMonth.Next(from)}
		require.NoError(b, schema.CreateDetachedPartition(ctx, tx, p.Name))
		require.NoError(b, schema.AttachEventPartition(ctx, tx, p))
		require.NoError(b, tx.Commit(ctx))
	}
	_, err := schema.EnsureEventPartitions(ctx, db.Pool, schema.PeriodMonth, now.AddDate(0, 1, 0))
	require.NoError(b, err)
	var st scaleStats

	began := time.Now()
	items := make([]map[string]any, 0, hosts*10)
	for h := 1; h <= hosts; h++ {
		for s := range 10 {
			items = append(items, map[string]any{
				"resource": fmt.Sprintf("https://h%d.example/r%d", h, s), "type": "http", "x402Version": 2,
				"metadata": map[string]any{"description": fmt.Sprintf("weather service %d of h%d", s, h)},
				"accepts": []any{map[string]any{"scheme": "exact", "network": "eip155:8453", "amount": strconv.Itoa((s + 1 + h%7) * 1000),
					"asset": baseUSDC, "payTo": "0x" + lpadHex(h)}},
			})
		}
	}
	c := index.NewCrawler(&index.CrawlerConfig{Pool: db.Pool, Sources: []string{pagedListing(b, items)}, Gap: -1})
	require.NoError(b, c.FullPass(ctx, nil))
	st.CrawlS = time.Since(began).Seconds()
	_, err = db.Pool.Exec(ctx, "VACUUM ANALYZE events")
	require.NoError(b, err)
	require.NoError(b, db.Pool.QueryRow(ctx, logSize).Scan(&st.HeapBefore, &st.IndexBefore, &st.AllBefore))
	b.Logf("crawled %d services of %d hosts in %.0f s", len(items), hosts, st.CrawlS)

	began = time.Now()
	for from := start; from.Before(now); from = from.Add(24 * time.Hour) {
		to := from.Add(24 * time.Hour)
		tag, err := db.Pool.Exec(ctx, scaleProbes, from, to, hosts, now)
		require.NoError(b, err)
		st.Probes += tag.RowsAffected()
	}
	_, err = db.Pool.Exec(ctx, "VACUUM ANALYZE events")
	require.NoError(b, err)
	st.ProbesS = time.Since(began).Seconds()
	require.NoError(b, db.Pool.QueryRow(ctx, logSize).Scan(&st.HeapAfter, &st.IndexAfter, &st.AllAfter))

	// The history from the log, as migration 011 fills it.
	began = time.Now()
	migrations, err := schema.Migrations()
	require.NoError(b, err)
	m := migrations[slices.IndexFunc(migrations, func(m schema.Migration) bool { return m.Name == "index_history" })]
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(b, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET work_mem = '256MB'")
	require.NoError(b, err)
	tx, err := conn.Begin(ctx)
	require.NoError(b, err)
	_, err = tx.Exec(ctx, "TRUNCATE index_probe_hours, index_changes")
	require.NoError(b, err)
	// The history is as of the transaction's time.
	require.NoError(b, tx.QueryRow(ctx, "SELECT now()").Scan(&st.AsOf))
	_, err = tx.Exec(ctx, m.Up)
	require.NoError(b, err)
	require.NoError(b, tx.Commit(ctx))
	_, err = conn.Exec(ctx, scaleLastProbe, now)
	require.NoError(b, err)
	_, err = conn.Exec(ctx, "VACUUM ANALYZE")
	require.NoError(b, err)
	st.RebuildS = time.Since(began).Seconds()
	generateEvidence(ctx, b, db)

	// Every verdict of the last 31 days is in the probes by hour.
	var verdicts, hours int64
	require.NoError(b, conn.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = 'host.probed' AND data->>'live' IS NOT NULL
		AND coalesce((data->>'status')::integer, 0) <> 429`).Scan(&verdicts))
	require.NoError(b, conn.QueryRow(ctx, `SELECT sum(probes) FROM index_probe_hours`).Scan(&hours))
	require.Equal(b, verdicts, hours)

	_, err = conn.Exec(ctx, `CREATE TABLE bench_scale (as_of timestamptz, probes bigint, crawl_s float8, probes_s float8, rebuild_s float8,
		heap_before bigint, index_before bigint, all_before bigint, heap_after bigint, index_after bigint, all_after bigint)`)
	require.NoError(b, err)
	_, err = conn.Exec(ctx, `INSERT INTO bench_scale VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		st.AsOf, st.Probes, st.CrawlS, st.ProbesS, st.RebuildS, st.HeapBefore, st.IndexBefore, st.AllBefore, st.HeapAfter, st.IndexAfter, st.AllAfter)
	require.NoError(b, err)
}

// BenchmarkXIndexHistory times the index's reads at the scale:
// XINDEX_BENCH_HOSTS hosts (10,000) of 10 services each, each probed every
// 30 minutes for 30 days: 14.4 million host.probed events in the event log,
// the history rebuilt from them, and 3,000,000 transfers into 1,000
// sellers with each host's figures (generateIndex). The database is kept
// between runs (x402_bench_xindex_<hosts>, dbtest.Cache) for a day, or
// until the migrations or the generator change. It checks the history of a
// few hosts against their events counted directly, then each iteration
// asks, over HTTP, the hosts list (limit 50, each sort in turn), the hosts
// list by an on-chain figure (volume or payers, with a min_payers filter
// in turn), a host's JSON and page, a seller's JSON (its figures by payTo
// counted as it is asked), a page of the changes feed and the summary.
//
//	go tool task bench:index
func BenchmarkXIndexHistory(b *testing.B) {
	ctx := context.Background()
	hosts := 10_000
	if v := os.Getenv("XINDEX_BENCH_HOSTS"); v != "" {
		var err error
		hosts, err = strconv.Atoi(v)
		require.NoError(b, err)
	}
	key := strings.Join([]string{strconv.Itoa(hosts), scaleProbes, scaleLastProbe, scaleEvidenceKey}, "\x00")
	cached := dbtest.Cache(ctx, b, fmt.Sprintf("x402_bench_xindex_%d", hosts), key, 24*time.Hour, func(db *dbtest.DB) {
		generateIndex(ctx, b, db, hosts)
	})
	db := cached.DB
	var st scaleStats
	require.NoError(b, db.Pool.QueryRow(ctx, `SELECT as_of, probes, crawl_s, probes_s, rebuild_s, heap_before, index_before, all_before,
		heap_after, index_after, all_after FROM bench_scale`).Scan(&st.AsOf, &st.Probes, &st.CrawlS, &st.ProbesS, &st.RebuildS,
		&st.HeapBefore, &st.IndexBefore, &st.AllBefore, &st.HeapAfter, &st.IndexAfter, &st.AllAfter))
	perProbe := func(before, after int64) float64 { return float64(after-before) / float64(st.Probes) }
	b.Logf("%d hosts (reused: %v, made %s ago): crawl %.0f s, %d probe events written in %.0f s, history rebuilt from the log in %.0f s",
		hosts, cached.Reused, time.Since(cached.FilledAt).Round(time.Minute), st.CrawlS, st.Probes, st.ProbesS, st.RebuildS)
	b.Logf("probe events on disk: %.0f bytes each (heap %.0f, indexes %.0f), %.0f MB in all",
		perProbe(st.AllBefore, st.AllAfter), perProbe(st.HeapBefore, st.HeapAfter), perProbe(st.IndexBefore, st.IndexAfter), float64(st.AllAfter-st.AllBefore)/1e6)
	var rollup, rollupRows, changes, changeRows int64
	require.NoError(b, db.Pool.QueryRow(ctx, `SELECT pg_total_relation_size('index_probe_hours'), (SELECT count(*) FROM index_probe_hours),
		pg_total_relation_size('index_changes'), (SELECT count(*) FROM index_changes)`).Scan(&rollup, &rollupRows, &changes, &changeRows))
	b.Logf("probes by hour: %d rows, %.0f MB; changes: %d rows, %.0f MB", rollupRows, float64(rollup)/1e6, changeRows, float64(changes)/1e6)

	// The history rebuilt from the log is the one its events say, counted
	// directly.
	for _, h := range []int{1, 2, 10, 20, 98, 1 + hosts/2, hosts} {
		host := fmt.Sprintf("h%d.example", h)
		var wp, gp [3]int
		var wu, gu [3]*float64
		var wl, gl [2]*int
		require.NoError(b, db.Pool.QueryRow(ctx, scaleFigures, host, st.AsOf).Scan(&wp[0], &wp[1], &wp[2], &wu[0], &wu[1], &wu[2], &wl[0], &wl[1]))
		require.NoError(b, db.Pool.QueryRow(ctx, scaleHistory, host).Scan(&gp[0], &gp[1], &gp[2], &gu[0], &gu[1], &gu[2], &gl[0], &gl[1]))
		require.Equal(b, wp, gp, host)
		require.Equal(b, wl, gl, host)
		for i := range wu {
			require.Equal(b, wu[i] == nil, gu[i] == nil, host)
			if wu[i] != nil {
				require.InDelta(b, *wu[i], *gu[i], 1e-9, host)
			}
		}
		require.Greater(b, wp[2], 1200, "%s: 30 days of verdicts", host)
		b.Logf("%s: probes %v, uptime 24h/7d/30d %v/%v/%v, latency p50/p95 %v/%v ms: as its events say", host, gp,
			deref(gu[0]), deref(gu[1]), deref(gu[2]), derefInt(gl[0]), derefInt(gl[1]))
	}

	var maxChange int64
	require.NoError(b, db.Pool.QueryRow(ctx, `SELECT max(id) FROM index_changes`).Scan(&maxChange))
	lat := map[string][]time.Duration{}
	timed := func(name, url string, v any) {
		t0 := time.Now()
		getJSON(b, url, v)
		lat[name] = append(lat[name], time.Since(t0))
	}
	base := xindexServer(b, db)
	// The hours of probes a host's page shows: 30 days', less those since
	// the index was made.
	hoursShown := 720 - int(time.Since(st.AsOf).Hours())
	sellers := scaleSellerHosts(ctx, b, db)
	evidenceSorts := []string{"volume_30d", "payers_30d", "volume_24h", "transactions_30d"}
	minPayers := []string{"", "&min_payers=10", "&min_payers=100", "&min_payers=500"}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		var list struct{ Hosts []index.Host }
		timed("hosts", base+"/api/xindex/hosts?sort="+index.SortKeys[i%len(index.SortKeys)], &list)
		require.Len(b, list.Hosts, 50)
		timed("hosts-evidence", base+"/api/xindex/hosts?sort="+evidenceSorts[i%len(evidenceSorts)]+minPayers[i/len(evidenceSorts)%len(minPayers)], &list)
		require.NotEmpty(b, list.Hosts)
		require.NotNil(b, list.Hosts[0].Evidence)
		host := fmt.Sprintf("h%d.example", 1+rng.IntN(hosts))
		var d index.HostDetail
		timed("host", base+"/api/xindex/hosts/"+host, &d)
		require.InDelta(b, hoursShown, len(d.Probes), 2, host)
		require.Len(b, d.Services, 10, host)
		seller := sellers[rng.IntN(len(sellers))]
		var sd index.HostDetail
		timed("seller", base+"/api/xindex/hosts/"+seller, &sd)
		require.Len(b, sd.PayTos, 1, seller)
		require.NotNil(b, sd.PayTos[0].Evidence, seller)
		require.Greater(b, sd.PayTos[0].Evidence.Last30d.Transactions, int64(scaleDays-2)*scalePerDay, seller)
		t0 := time.Now()
		resp, err := http.Get(base + "/x402-index/hosts/" + host)
		require.NoError(b, err)
		page, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		lat["host-page"] = append(lat["host-page"], time.Since(t0))
		require.NoError(b, err)
		require.Equal(b, http.StatusOK, resp.StatusCode, string(page))
		var feed index.ChangesAnswer
		timed("changes", base+"/api/xindex/changes?limit=100&since="+strconv.FormatInt(rng.Int64N(maxChange), 10), &feed)
		require.NotEmpty(b, feed.Changes)
		var s index.Summary
		timed("summary", base+"/api/xindex/summary", &s)
	}
	reportLatencies(b, lat, "hosts", "hosts-evidence", "host", "seller", "host-page", "changes", "summary")
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

func derefInt(n *int) any {
	if n == nil {
		return nil
	}
	return *n
}
