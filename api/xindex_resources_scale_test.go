//go:build scenario

package api

// The resources search and the Bazaar discovery API at the scale
// run only when asked for, with -tags scenario (go tool task
// bench:resources).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/dbtest"
)

// scaleWords are the words the generated resources' descriptions and tags
// are drawn from, and the benchmark's queries.
var scaleWords = []string{"weather", "forecast", "translation", "image", "search", "stock", "price", "news", "summary", "sentiment",
	"geocode", "route", "email", "pdf", "ocr", "speech", "video", "crypto", "wallet", "score", "sports", "flight", "hotel", "recipe",
	"legal", "medical", "code", "review", "chart", "market"}

// scaleResourceHosts makes $1 hosts h<i>.example: a tenth dead, a twentieth never
// measured, the others live with an uptime and a latency of their own.
const scaleResourceHosts = `
INSERT INTO index_hosts (host, services, priced_services, networks, sample_resource, sample, live, status, latency_ms, checked_at,
	uptime_30d, probes_30d, latency_p50_ms, quote_matches_listing, updated_at)
SELECT 'h' || h || '.example', 10, 10, '{eip155:8453}', 'https://h' || h || '.example/r0', '',
	CASE WHEN h % 20 = 0 THEN NULL WHEN h % 10 = 0 THEN false ELSE true END,
	CASE WHEN h % 20 = 0 THEN NULL WHEN h % 10 = 0 THEN 503 ELSE 402 END,
	CASE WHEN h % 20 = 0 THEN NULL ELSE 80 + h % 400 END,
	CASE WHEN h % 20 = 0 THEN NULL ELSE now() END,
	CASE WHEN h % 20 = 0 THEN NULL WHEN h % 10 = 0 THEN 0.1 ELSE 0.9 + (h % 10) / 100.0 END,
	CASE WHEN h % 20 = 0 THEN 0 ELSE 1440 END,
	CASE WHEN h % 20 = 0 THEN NULL ELSE 80 + h % 400 END,
	CASE WHEN h % 20 = 0 THEN NULL ELSE h % 20 <> 7 END, now()
FROM generate_series(1, $1::integer) h`

// scaleResources makes $2 resources spread over the $1 hosts: a
// description of three words of $3 and two tags, one option on Base (one in
// four also on Polygon) paying its host's receiver (h<n>.example's is n in
// hexadecimal, padded: lpadHex), prices from 0.001 to 0.1 USDC, the call
// contract of the bazaar extension.
const scaleResources = `
INSERT INTO index_resources (resource, host, description, method, networks, price_usdc, discoverable, updated_at, accepts,
	tags, input_schema, output_schema, extensions, x402_version, mime_type, pay_tos, schemes, assets)
SELECT 'https://h' || (1 + i % $1) || '.example/r' || (i / $1), 'h' || (1 + i % $1) || '.example',
	initcap(w1) || ' ' || w2 || ' API for ' || w3 || ' data', 'GET',
	CASE WHEN i % 4 = 0 THEN '{eip155:137,eip155:8453}'::text[] ELSE '{eip155:8453}'::text[] END,
	(1 + i % 100) / 1000.0, true, now() - (i % 10000) * interval '1 minute',
	jsonb_build_array(jsonb_build_object('scheme', 'exact', 'network', 'eip155:8453', 'asset', '` + baseUSDC + `',
		'amount', ((1 + i % 100) * 1000)::text, 'pay_to', '0x' || lpad(to_hex(1 + i % $1), 40, '0'), 'max_timeout_seconds', 60)),
	ARRAY[w1, w3], jsonb_build_object('type', 'http', 'method', 'GET', 'queryParams', jsonb_build_object('q', w2)),
	jsonb_build_object('type', 'json'), jsonb_build_object('bazaar', jsonb_build_object('info', jsonb_build_object('input',
		jsonb_build_object('type', 'http', 'method', 'GET')))), 2, 'application/json',
	ARRAY['0x' || lpad(to_hex(1 + i % $1), 40, '0')], '{exact}', ARRAY[lower('` + baseUSDC + `')]
FROM generate_series(0, $2::integer - 1) i,
	LATERAL (SELECT ($3::text[])[1 + (i * 7) % cardinality($3)] AS w1, ($3::text[])[1 + (i * 13 / 3) % cardinality($3)] AS w2,
		($3::text[])[1 + (i / 7 * 11) % cardinality($3)] AS w3) w`

// scaleOwnership proves a receiver for one origin in 50.
const scaleOwnership = `
INSERT INTO index_ownership (origin, pay_to, via, verified_at)
SELECT DISTINCT 'https://' || r.host, r.pay_tos[1], 'well-known', now() FROM index_resources r
WHERE (substring(r.host FROM 'h([0-9]+)')::integer) % 50 = 0 ON CONFLICT DO NOTHING`

// BenchmarkXIndexResources times the resources search and the Bazaar
// discovery API over XINDEX_BENCH_RESOURCES resources (100,000) of
// XINDEX_BENCH_RESOURCE_HOSTS hosts (10,000), written straight into the
// index's tables (scaleResourceHosts, scaleResources, scaleOwnership), with
// the on-chain evidence of 1,000 sellers over 30 days (generateEvidence:
// 3,000,000 transfers, every host's figures counted by the chain reader);
// the database is kept a day as x402_bench_resources_<resources>. It
// first times the chain reader counting the figures again after a run
// whose transfers touched 50 sellers (five runs), then 1,000 (two runs)
// (timeEvidenceRefresh). Then each iteration asks, over HTTP: a text
// search of one or two words, ranked by relevance and evidence, with a
// filter in turn (none, network, max_usd, live, tags, a seller's pay_to);
// a word with each other sort in turn; the Bazaar list at an offset (or of
// a host's payTo) and the Bazaar search.
//
//	go tool task bench:resources
func BenchmarkXIndexResources(b *testing.B) {
	ctx := context.Background()
	resources, hosts := 100_000, 10_000
	for env, n := range map[string]*int{"XINDEX_BENCH_RESOURCES": &resources, "XINDEX_BENCH_RESOURCE_HOSTS": &hosts} {
		if v := os.Getenv(env); v != "" {
			var err error
			*n, err = strconv.Atoi(v)
			require.NoError(b, err)
		}
	}
	key := strings.Join([]string{strconv.Itoa(resources), strconv.Itoa(hosts), scaleResourceHosts, scaleResources, scaleOwnership,
		strings.Join(scaleWords, ","), scaleEvidenceKey}, "\x00")
	cached := dbtest.Cache(ctx, b, fmt.Sprintf("x402_bench_resources_%d", resources), key, 24*time.Hour, func(db *dbtest.DB) {
		began := time.Now()
		_, err := db.Pool.Exec(ctx, scaleResourceHosts, hosts)
		require.NoError(b, err)
		_, err = db.Pool.Exec(ctx, scaleResources, hosts, resources, scaleWords)
		require.NoError(b, err)
		_, err = db.Pool.Exec(ctx, scaleOwnership)
		require.NoError(b, err)
		_, err = db.Pool.Exec(ctx, "VACUUM ANALYZE")
		require.NoError(b, err)
		b.Logf("generated %d resources of %d hosts in %.0f s", resources, hosts, time.Since(began).Seconds())
		generateEvidence(ctx, b, db)
	})
	db := cached.DB
	var n, transfers, ranked int
	require.NoError(b, db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM index_resources WHERE NOT retired),
		(SELECT count(*) FROM index_transfers), (SELECT count(*) FROM index_resource_search WHERE host_payers_30d > 0)`).Scan(&n, &transfers, &ranked))
	require.Equal(b, resources, n)
	sellers := scaleSellerHosts(ctx, b, db)
	b.Logf("%d resources of %d hosts (reused: %v, made %s ago); %d transfers into %d sellers, %d resources ranked by their payers",
		n, hosts, cached.Reused, time.Since(cached.FilledAt).Round(time.Minute), transfers, len(sellers), ranked)

	for _, r := range []struct{ sellers, runs int }{{50, 5}, {scaleSellers, 2}} {
		n := min(r.sellers, len(sellers))
		took := timeEvidenceRefresh(ctx, b, db, sellers, n, r.runs)
		b.Logf("figures of %d sellers counted again: %v", n, took)
		b.ReportMetric(float64(took[len(took)/2])/1e6, fmt.Sprintf("refresh-%d-p50-ms", n))
		b.ReportMetric(float64(took[len(took)-1])/1e6, fmt.Sprintf("refresh-%d-max-ms", n))
	}

	base := xindexServer(b, db)
	lat := map[string][]time.Duration{}
	timed := func(name, u string, v any) {
		t0 := time.Now()
		getJSON(b, u, v)
		lat[name] = append(lat[name], time.Since(t0))
	}
	filters := []string{"", "&network=eip155:137", "&max_usd=0.01", "&live=true", "&tags=", "&pay_to=0x" + lpadHex(42)}
	rng := rand.New(rand.NewPCG(3, 4))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		w := scaleWords[rng.IntN(len(scaleWords))]
		q := w
		if i%2 == 1 {
			q += " " + scaleWords[rng.IntN(len(scaleWords))]
		}
		f := filters[i%len(filters)]
		if f == "&tags=" {
			f += w
		}
		var found index.ResourcesAnswer
		timed("resources", base+"/api/xindex/resources?q="+url.QueryEscape(q)+f, &found)
		if f == "" {
			require.NotEmpty(b, found.Resources, q)
		}
		sort := index.ResourceSortKeys[1+i%(len(index.ResourceSortKeys)-1)]
		timed("resources-sorted", base+"/api/xindex/resources?q="+url.QueryEscape(w)+"&sort="+sort, &found)
		require.NotEmpty(b, found.Resources, w)
		var list index.BazaarList
		listQuery := "?limit=20&offset=" + strconv.Itoa(rng.IntN(resources-20))
		if i%2 == 1 {
			listQuery = "?limit=20&payTo=0x" + lpadHex(1+rng.IntN(hosts))
		}
		timed("bazaar-list", base+"/api/xindex/bazaar/discovery/resources"+listQuery, &list)
		require.NotEmpty(b, list.Items, listQuery)
		var search index.BazaarSearch
		timed("bazaar-search", base+"/api/xindex/bazaar/discovery/search?limit=20&query="+url.QueryEscape(w), &search)
		require.NotEmpty(b, search.Resources, w)
	}
	reportLatencies(b, lat, "resources", "resources-sorted", "bazaar-list", "bazaar-search")
}

// reportLatencies reports the p50 and p95 of each of names' latencies.
func reportLatencies(b *testing.B, lat map[string][]time.Duration, names ...string) {
	for _, name := range names {
		l := lat[name]
		slices.Sort(l)
		b.ReportMetric(float64(l[len(l)/2])/1e6, name+"-p50-ms")
		b.ReportMetric(float64(l[len(l)*95/100])/1e6, name+"-p95-ms")
	}
}

// lpadHex is n in hexadecimal, padded to an address's 40 digits.
func lpadHex(n int) string {
	h := strconv.FormatInt(int64(n), 16)
	return strings.Repeat("0", 40-len(h)) + h
}
