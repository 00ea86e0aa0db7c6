package index

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/schema"
)

// counted is what the summary says of the services and hosts: the figures
// it sums from the hosts' aggregates, or counts directly.
type counted struct {
	Services, Hosts int
	Liveness        Liveness
	Bands           map[string]int
}

func (s *Summary) counted() counted {
	return counted{Services: s.ServicesIndexed, Hosts: s.HostsKnown, Liveness: s.Liveness, Bands: s.PriceBands}
}

// directCount counts the summary's figures from every live resource and
// host, without the hosts' aggregates.
func directCount(ctx context.Context, t *testing.T, db *dbtest.DB) counted {
	t.Helper()
	var c counted
	var free, m1, m10, m100, u1, o1 int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM index_resources WHERE NOT retired),
		(SELECT count(DISTINCT host) FROM index_resources WHERE NOT retired),
		(SELECT count(*) FILTER (WHERE h.live IS NOT NULL) FROM index_hosts h WHERE EXISTS (SELECT 1 FROM index_resources r WHERE r.host = h.host AND NOT r.retired)),
		(SELECT count(*) FILTER (WHERE h.live) FROM index_hosts h WHERE EXISTS (SELECT 1 FROM index_resources r WHERE r.host = h.host AND NOT r.retired)),
		(SELECT count(*) FILTER (WHERE h.live = false) FROM index_hosts h WHERE EXISTS (SELECT 1 FROM index_resources r WHERE r.host = h.host AND NOT r.retired)),
		(SELECT count(*) FILTER (WHERE h.live IS NULL) FROM index_hosts h WHERE EXISTS (SELECT 1 FROM index_resources r WHERE r.host = h.host AND NOT r.retired)),
		count(*) FILTER (WHERE price_usdc = 0),
		count(*) FILTER (WHERE price_usdc > 0 AND price_usdc < 0.001),
		count(*) FILTER (WHERE price_usdc >= 0.001 AND price_usdc < 0.01),
		count(*) FILTER (WHERE price_usdc >= 0.01 AND price_usdc < 0.1),
		count(*) FILTER (WHERE price_usdc >= 0.1 AND price_usdc < 1),
		count(*) FILTER (WHERE price_usdc >= 1)
		FROM index_resources WHERE NOT retired AND price_usdc IS NOT NULL`).Scan(
		&c.Services, &c.Hosts, &c.Liveness.Measured, &c.Liveness.Live, &c.Liveness.Dead, &c.Liveness.Unmeasured,
		&free, &m1, &m10, &m100, &u1, &o1))
	c.Bands = map[string]int{"free": free, "under_1m": m1, "under_10m": m10, "under_100m": m100, "under_1": u1, "over_1": o1}
	return c
}

// TestSummaryCounts: the summary's figures, summed from the hosts'
// aggregates, are those counted directly from the resources, through
// crawls that add resources at each band's edges, move prices across
// bands, retire resources and empty a host, and after migration 014 fills
// the bands again from the resources.
func TestSummaryCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	// Prices in atomic units of USDC (6 decimals); "0.05" is no atomic
	// amount: unpriced.
	amounts := []string{"0", "1", "999", "1000", "9999", "10000", "99999", "100000", "999999", "1000000", "5000000", "0.05"}
	var items []map[string]any
	for i, a := range amounts {
		items = append(items, item(fmt.Sprintf("https://h%d.example/r%d", i%4, i), a))
	}
	items = append(items, item("https://gone.example/a", "10"), item("https://gone.example/b", "2000000"))
	l := &listing{items: items}
	src := httptest.NewServer(l)
	defer src.Close()
	crawler := newCrawler(db, src.URL, 100)
	r := NewReader(db.Pool, nil)
	check := func(step string, want counted) {
		t.Helper()
		s, err := r.Summary(ctx)
		require.NoError(t, err)
		require.Equal(t, directCount(ctx, t, db), s.counted(), step)
		require.Equal(t, want, s.counted(), step)
	}

	require.NoError(t, crawler.FullPass(ctx, nil))
	require.NoError(t, recordProbe(ctx, db, "h0.example", true))
	require.NoError(t, recordProbe(ctx, db, "h1.example", false))
	require.NoError(t, recordProbe(ctx, db, "gone.example", true))
	require.NoError(t, recordProbe(ctx, db, "nothing-listed.example", true))
	check("first pass", counted{Services: 14, Hosts: 5, Liveness: Liveness{Measured: 3, Live: 2, Dead: 1, Unmeasured: 2},
		Bands: map[string]int{"free": 1, "under_1m": 3, "under_10m": 2, "under_100m": 2, "under_1": 2, "over_1": 3}})

	// Prices move across bands, a resource goes, a host is emptied, one
	// resource is new.
	l.mu.Lock()
	l.items = slices.Clone(items[:len(amounts)-1])
	l.items[0] = item("https://h0.example/r0", "1000000")
	l.items[10] = item("https://h2.example/r10", "0")
	l.items = append(l.items, item("https://h4.example/new", "50"))
	l.mu.Unlock()
	require.NoError(t, crawler.FullPass(ctx, nil))
	check("second pass", counted{Services: 12, Hosts: 5, Liveness: Liveness{Measured: 2, Live: 1, Dead: 1, Unmeasured: 3},
		Bands: map[string]int{"free": 1, "under_1m": 3, "under_10m": 2, "under_100m": 2, "under_1": 2, "over_1": 2}})

	// Migration 014 counts the bands of the hosts it finds.
	migrations, err := schema.Migrations()
	require.NoError(t, err)
	m := migrations[slices.IndexFunc(migrations, func(m schema.Migration) bool { return m.Name == "index_price_bands" })]
	_, err = db.Pool.Exec(ctx, m.Down)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, m.Up)
	require.NoError(t, err)
	check("after migration 014", counted{Services: 12, Hosts: 5, Liveness: Liveness{Measured: 2, Live: 1, Dead: 1, Unmeasured: 3},
		Bands: map[string]int{"free": 1, "under_1m": 3, "under_10m": 2, "under_100m": 2, "under_1": 2, "over_1": 2}})
}
