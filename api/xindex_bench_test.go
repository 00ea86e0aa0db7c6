package api

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/dbtest"
)

// BenchmarkXIndexHistory times the index's reads at the scale:
// XINDEX_BENCH_HOSTS hosts (10,000) of 10 services each, each probed every
// 30 minutes for 30 days (its probes by hour, as the probe's projection
// keeps them: 720 rows a host), 12 changes a host. The reads never touch
// the event log (the projections are kept in the transaction that appends
// the events), so the state is written directly, as the projections would
// hold it. Each iteration asks, over HTTP, the hosts list (limit 50, each
// sort in turn), a host's page, a page of the changes feed and the summary.
func BenchmarkXIndexHistory(b *testing.B) {
	ctx := context.Background()
	hosts := 10_000
	if v := os.Getenv("XINDEX_BENCH_HOSTS"); v != "" {
		var err error
		hosts, err = strconv.Atoi(v)
		require.NoError(b, err)
	}
	db := dbtest.Schema(ctx, b)
	base := xindexServer(b, db)
	began := time.Now()
	for _, q := range []string{
		`INSERT INTO index_resources (resource, host, description, method, networks, price_usdc, discoverable, updated_at)
			SELECT 'https://h' || h || '.example/r' || s, 'h' || h || '.example', 'weather service ' || s, 'GET', '{eip155:8453}',
				(s + 1 + h % 7) * 0.001, true, now() FROM generate_series(1, $1) h, generate_series(0, 9) s`,
		`INSERT INTO index_hosts (host, services, priced_services, price_min_usdc, price_max_usdc, networks, sample_resource, sample,
				live, status, latency_ms, checked_at, updated_at, first_seen, quote_matches_listing)
			SELECT 'h' || h || '.example', 10, 10, (1 + h % 7) * 0.001, (10 + h % 7) * 0.001, '{eip155:8453}',
				'https://h' || h || '.example/r0', 'weather service 0', h % 10 <> 0, CASE WHEN h % 10 <> 0 THEN 402 ELSE 503 END,
				100 + h % 300, now(), now(), now() - interval '30 days', CASE h % 3 WHEN 0 THEN NULL ELSE h % 20 <> 0 END
			FROM generate_series(1, $1) h`,
		`INSERT INTO index_probe_hours (host, hour, probes, live, latencies)
			SELECT 'h' || h || '.example', date_trunc('hour', now()) - i * interval '1 hour', 2, CASE WHEN (h + i) % 50 = 0 THEN 1 ELSE 2 END,
				ARRAY[100 + (h * 7 + i) % 300, 120 + (h * 3 + i) % 200]
			FROM generate_series(1, $1) h, generate_series(0, 719) i`,
		`INSERT INTO index_changes (at, host, kind, resource, "to")
			SELECT now() - interval '30 days' + (h * 10 + s) * interval '1 second', 'h' || h || '.example', 'service.added',
				'https://h' || h || '.example/r' || s, to_jsonb(((s + 1 + h % 7) * 0.001)::text)
			FROM generate_series(1, $1) h, generate_series(0, 9) s ORDER BY 1`,
		`INSERT INTO index_changes (at, host, kind, "from", "to")
			SELECT now() - (h % 720) * interval '1 hour', 'h' || h || '.example', k, to_jsonb(k = 'host.dead'), to_jsonb(k = 'host.live')
			FROM generate_series(1, $1) h, unnest(ARRAY['host.dead', 'host.live']) k ORDER BY 1`,
	} {
		_, err := db.Pool.Exec(ctx, q, hosts)
		require.NoError(b, err)
	}
	_, err := db.Pool.Exec(ctx, `SELECT index_host_history(array_agg(host), now()) FROM index_hosts`)
	require.NoError(b, err)
	_, err = db.Pool.Exec(ctx, `SELECT index_host_price_bands(array_agg(host)) FROM index_hosts`)
	require.NoError(b, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE`)
	require.NoError(b, err)
	var rollup, changes int64
	require.NoError(b, db.Pool.QueryRow(ctx, `SELECT pg_total_relation_size('index_probe_hours'), pg_total_relation_size('index_changes')`).Scan(&rollup, &changes))
	b.Logf("%d hosts written in %s; probes by hour %d MB, changes %d MB", hosts, time.Since(began).Round(time.Second), rollup>>20, changes>>20)

	var maxChange int64
	require.NoError(b, db.Pool.QueryRow(ctx, `SELECT max(id) FROM index_changes`).Scan(&maxChange))
	lat := map[string][]time.Duration{}
	timed := func(name, url string, v any) {
		t0 := time.Now()
		getJSON(b, url, v)
		lat[name] = append(lat[name], time.Since(t0))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		var list struct{ Hosts []index.Host }
		timed("hosts", base+"/api/xindex/hosts?sort="+index.SortKeys[i%len(index.SortKeys)], &list)
		require.Len(b, list.Hosts, 50)
		host := fmt.Sprintf("h%d.example", 1+rng.IntN(hosts))
		var d index.HostDetail
		timed("host", base+"/api/xindex/hosts/"+host, &d)
		require.InDelta(b, 720, len(d.Probes), 1, "720 hours, one fewer once the hour turns")
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
	for _, name := range []string{"hosts", "host", "host-page", "changes", "summary"} {
		l := lat[name]
		slices.Sort(l)
		b.ReportMetric(float64(l[len(l)/2])/1e6, name+"-p50-ms")
		b.ReportMetric(float64(l[len(l)*95/100])/1e6, name+"-p95-ms")
	}
}
