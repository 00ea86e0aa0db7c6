package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

// resourceSearchDrift counts the rows of index_resource_search that differ
// from what index_resources, index_hosts and index_host_evidence say now
// (either way).
const resourceSearchDrift = `
WITH want AS (
	SELECT r.resource, r.document, h.live AS host_live, h.uptime_30d AS host_uptime_30d, e.payers_30d AS host_payers_30d,
		r.updated_at, r.host, r.price_usdc, r.networks, r.assets, r.schemes, r.pay_tos, r.tag_keys,
		index_resource_extension_keys(r.extensions) AS extension_keys
	FROM index_resources r LEFT JOIN index_hosts h ON h.host = r.host LEFT JOIN index_host_evidence e ON e.host = r.host
	WHERE NOT r.retired),
have AS (
	SELECT resource, document, host_live, host_uptime_30d, host_payers_30d, updated_at, host, price_usdc, networks, assets,
		schemes, pay_tos, tag_keys, extension_keys FROM index_resource_search)
SELECT (SELECT count(*) FROM (SELECT * FROM want EXCEPT SELECT * FROM have) a)
	+ (SELECT count(*) FROM (SELECT * FROM have EXCEPT SELECT * FROM want) b)`

// TestResourceSearchSideTable: the narrow table a text search matches and
// ranks over follows every write of the resources and their hosts, so that
// a text search finds and orders what the resources say now.
func TestResourceSearchSideTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
		var drift int
		require.NoError(t, db.Pool.QueryRow(ctx, resourceSearchDrift).Scan(&drift))
		require.Zero(t, drift, "index_resource_search after %s", sql)
	}
	search := func(p store.ResourceSearchParams) []string {
		t.Helper()
		if p.Sort == "" {
			p.Sort = "relevance"
		}
		p.Limit = 10
		page, err := store.ResourceSearch(ctx, db.Pool, &p)
		require.NoError(t, err)
		var out []string
		for _, r := range page.Resources {
			out = append(out, r.Resource)
		}
		return out
	}

	exec(`INSERT INTO index_resources (resource, host, description, updated_at, tags, tag_keys, extensions, pay_tos, networks, price_usdc)
		VALUES ('https://a.test/w', 'a.test', 'Weather forecasts', now(), '{weather}', '{weather}', '{"bazaar":{}}', '{0xaaa}', '{eip155:8453}', 0.01),
		       ('https://b.test/w', 'b.test', 'Weather forecasts', now(), '{weather}', '{weather}', '["bazaar", 1]', '{0xbbb}', '{eip155:8453}', 0.02),
		       ('https://c.test/w', 'c.test', 'Weather now', now(), '{}', '{}', NULL, '{0xccc}', '{eip155:137}', NULL)`)
	// A host measured after its resources were written.
	exec(`INSERT INTO index_hosts (host, live, uptime_30d) VALUES ('a.test', false, 0.1), ('b.test', true, 0.99)`)
	require.Equal(t, []string{"https://b.test/w", "https://a.test/w", "https://c.test/w"}, search(store.ResourceSearchParams{Q: "weather"}))

	// Liveness moves the rank.
	exec(`UPDATE index_hosts SET live = true, uptime_30d = 1 WHERE host = 'a.test'`)
	exec(`UPDATE index_hosts SET live = NULL WHERE host = 'b.test'`)
	require.Equal(t, []string{"https://a.test/w", "https://b.test/w", "https://c.test/w"}, search(store.ResourceSearchParams{Q: "weather"}))
	require.Equal(t, []string{"https://b.test/w"}, search(store.ResourceSearchParams{Q: "weather", Live: "null", Tags: []string{"weather"}}))
	require.Equal(t, []string{"https://a.test/w"}, search(store.ResourceSearchParams{Q: "weather", Live: "true"}))

	// The filters read the same on both tables: with a text and without.
	for _, p := range []store.ResourceSearchParams{
		{Extension: "bazaar", Sort: "url"},
		{PayTo: "0xCCC", Sort: "url"},
		{Network: "eip155:8453", Sort: "url"},
		{Tags: []string{"WEATHER"}, Sort: "url"},
		{MaxUSDC: new(0.015), Sort: "url"},
		{Live: "false", Sort: "url"},
	} {
		without := search(p)
		p.Q = "weather"
		require.Equal(t, without, search(p), "%+v", p)
	}
	require.Equal(t, []string{"https://a.test/w", "https://b.test/w"}, search(store.ResourceSearchParams{Q: "weather", Extension: "bazaar", Sort: "url"}))

	// A listing that changes, a resource retired, one deleted, a host
	// removed.
	exec(`UPDATE index_resources SET description = 'Stock quotes', updated_at = now() WHERE resource = 'https://c.test/w'`)
	require.Equal(t, []string{"https://c.test/w"}, search(store.ResourceSearchParams{Q: "stock"}))
	exec(`UPDATE index_resources SET retired = true WHERE resource = 'https://a.test/w'`)
	require.Equal(t, []string{"https://b.test/w"}, search(store.ResourceSearchParams{Q: "weather"}))
	exec(`UPDATE index_resources SET retired = false WHERE resource = 'https://a.test/w'`)
	exec(`DELETE FROM index_resources WHERE resource = 'https://b.test/w'`)
	exec(`DELETE FROM index_hosts WHERE host = 'a.test'`)
	require.Equal(t, []string{"https://a.test/w"}, search(store.ResourceSearchParams{Q: "weather"}))
	exec(`UPDATE index_resources SET resource = 'https://a.test/w2' WHERE resource = 'https://a.test/w'`)
	require.Equal(t, []string{"https://a.test/w2"}, search(store.ResourceSearchParams{Q: "weather"}))
}

// TestResourceSearchEvidence: a resource shows its host's on-chain figures
// (null where not measured, never 0), and a host with distinct payers
// ranks its resources above an otherwise equal host without, as the
// side table follows every write of the hosts' evidence.
func TestResourceSearchEvidence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
		var drift int
		require.NoError(t, db.Pool.QueryRow(ctx, resourceSearchDrift).Scan(&drift))
		require.Zero(t, drift, "index_resource_search after %s", sql)
	}
	evidence := func(host string, transactions, volume, payers int64) {
		t.Helper()
		exec(`INSERT INTO index_host_evidence (host, measured_since, fully_measured_since, networks, transactions_24h, transactions_7d, transactions_30d,
			settlements_30d, volume_24h, volume_7d, volume_30d, payers_24h, payers_7d, payers_30d, funded_payers_30d,
			self_payments_30d, senders_30d, refreshed_at)
			VALUES ($1, now(), now(), '{eip155:8453}', 0, 0, $2, $2, 0, 0, $3, 0, 0, $4, 0, 0, '{}', now())
			ON CONFLICT (host) DO UPDATE SET transactions_30d = excluded.transactions_30d, volume_30d = excluded.volume_30d,
			payers_30d = excluded.payers_30d`, host, transactions, volume, payers)
	}
	type shown struct {
		resource     string
		transactions *int64
		volume       *float64
		payers       *int64
	}
	search := func() []shown {
		t.Helper()
		page, err := store.ResourceSearch(ctx, db.Pool, &store.ResourceSearchParams{Q: "weather", Sort: "relevance", Limit: 10})
		require.NoError(t, err)
		var out []shown
		for _, r := range page.Resources {
			out = append(out, shown{r.Resource, r.Evidence.Transactions30d, r.Evidence.VolumeUSDC30d, r.Evidence.Payers30d})
		}
		return out
	}

	// Two equal hosts; y.test's resource is the newer, so first on a tie.
	exec(`INSERT INTO index_hosts (host, live, uptime_30d) VALUES ('x.test', true, 1), ('y.test', true, 1)`)
	exec(`INSERT INTO index_resources (resource, host, description, updated_at, tags, tag_keys, pay_tos, networks)
		VALUES ('https://x.test/w', 'x.test', 'Weather forecasts', now() - interval '1 hour', '{}', '{}', '{0xaaa}', '{eip155:8453}'),
		       ('https://y.test/w', 'y.test', 'Weather forecasts', now(), '{}', '{}', '{0xbbb}', '{eip155:8453}')`)
	require.Equal(t, []shown{{resource: "https://y.test/w"}, {resource: "https://x.test/w"}}, search())

	// x.test measured: its figures on its resource, and it ranks first.
	evidence("x.test", 120, 3_500_000, 40)
	require.Equal(t, []shown{{"https://x.test/w", new(int64(120)), new(3.5), new(int64(40))}, {resource: "https://y.test/w"}}, search())

	// Measured with no payer: figures of 0, not null, and no boost.
	evidence("y.test", 0, 0, 0)
	got := search()
	require.Equal(t, shown{"https://y.test/w", new(int64(0)), new(0.0), new(int64(0))}, got[1])
	// More payers rank higher; a resource written after its host's
	// evidence carries it.
	evidence("y.test", 10, 1_000_000, 90)
	exec(`INSERT INTO index_resources (resource, host, description, updated_at, tags, tag_keys, pay_tos, networks)
		VALUES ('https://y.test/v', 'y.test', 'Weather forecasts', now(), '{}', '{}', '{0xbbb}', '{eip155:8453}')`)
	got = search()
	require.Equal(t, shown{"https://y.test/v", new(int64(10)), new(1.0), new(int64(90))}, got[0])
	require.Equal(t, "https://y.test/w", got[1].resource)
	require.Equal(t, shown{"https://x.test/w", new(int64(120)), new(3.5), new(int64(40))}, got[2])

	// Evidence removed: null again, and the order falls back.
	exec(`DELETE FROM index_host_evidence WHERE host IN ('x.test', 'y.test')`)
	got = search()
	require.Equal(t, []shown{{resource: "https://y.test/v"}, {resource: "https://y.test/w"}, {resource: "https://x.test/w"}}, got)
}

// TestResourceSearchCap: when more resources match a text than its
// relevance ranks (RankCap), the page is the best ranked among the
// candidates, the first matches in the table's order, and says it is
// capped; with as many matches as the cap, all rank as without it.
func TestResourceSearchCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	_, err := db.Pool.Exec(ctx, `INSERT INTO index_hosts (host, live, uptime_30d)
		VALUES ('a.test', true, 1), ('b.test', true, 0.2), ('c.test', false, 0.9), ('d.test', true, 1)`)
	require.NoError(t, err)
	// Written in one go after their hosts, the resources lie in the
	// table in this order: d.test's, the best ranked, is the last.
	_, err = db.Pool.Exec(ctx, `INSERT INTO index_resources (resource, host, description, updated_at, tags, tag_keys, pay_tos, networks)
		VALUES ('https://a.test/w', 'a.test', 'Weather forecasts and stock quotes for traders', now(), '{}', '{}', '{0xaaa}', '{eip155:8453}'),
		       ('https://b.test/w', 'b.test', 'Weather: weather forecasts, weather maps', now(), '{weather}', '{weather}', '{0xbbb}', '{eip155:8453}'),
		       ('https://c.test/w', 'c.test', 'Weather now', now(), '{}', '{}', '{0xccc}', '{eip155:8453}'),
		       ('https://d.test/w', 'd.test', 'Weather, weather, weather: the weather', now(), '{weather}', '{weather}', '{0xddd}', '{eip155:8453}')`)
	require.NoError(t, err)
	search := func(rankCap, limit, offset int) ([]string, *store.ResourcePage) {
		t.Helper()
		page, err := store.ResourceSearch(ctx, db.Pool, &store.ResourceSearchParams{Q: "weather", Sort: "relevance", RankCap: rankCap,
			Limit: limit, Offset: offset})
		require.NoError(t, err)
		var out []string
		for _, r := range page.Resources {
			out = append(out, r.Resource)
		}
		return out, page
	}

	all, page := search(0, 10, 0)
	require.False(t, page.Capped)
	require.Len(t, all, 4)
	require.Equal(t, "https://d.test/w", all[0])
	four, page := search(4, 10, 0)
	require.False(t, page.Capped, "as many matches as the cap")
	require.Equal(t, all, four)

	// Three candidates: d.test's resource is not one; the others rank as
	// they do among all.
	var candidates []string
	for _, r := range all {
		if r != "https://d.test/w" {
			candidates = append(candidates, r)
		}
	}
	require.Equal(t, []string{"https://b.test/w", "https://a.test/w", "https://c.test/w"}, candidates, "b.test's text outranks a.test's evidence")
	got, page := search(3, 10, 0)
	require.True(t, page.Capped)
	require.False(t, page.More)
	require.Equal(t, candidates, got)
	// Paged, each page says so.
	got, page = search(3, 2, 0)
	require.True(t, page.Capped)
	require.True(t, page.More)
	require.Equal(t, candidates[:2], got)
	got, page = search(3, 2, 2)
	require.True(t, page.Capped)
	require.False(t, page.More)
	require.Equal(t, candidates[2:], got)
}
