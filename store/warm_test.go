package store_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

// TestOpenWarm checks that OpenWarm opens every connection of the pool and
// runs its reads on each before handing it out, the connections that
// replace others later included: every backend of the pool last ran them.
func TestOpenWarm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 4
	app := "warm-" + db.Schema
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	var hooked atomic.Int32
	cfg.AfterConnect = func(context.Context, *pgx.Conn) error { hooked.Add(1); return nil }
	pool, err := store.OpenWarm(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.EqualValues(t, 4, pool.Stat().TotalConns())
	require.EqualValues(t, 0, cfg.MinConns, "cfg changed")
	require.EqualValues(t, 4, hooked.Load(), "the caller's AfterConnect runs too")

	lastQueries := func() []string {
		rows, err := db.Pool.Query(ctx, "SELECT query FROM pg_stat_activity WHERE application_name = $1", app)
		require.NoError(t, err)
		queries, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return queries
	}
	queries := lastQueries()
	require.Len(t, queries, 4)
	for _, q := range queries {
		require.Contains(t, q, "FROM river_job WHERE state = 'available'", "a backend that was not warmed")
	}

	// Connections opened later, to replace others, are warm before use.
	pool.Reset()
	c, err := pool.Acquire(ctx)
	require.NoError(t, err)
	c.Release()
	queries = lastQueries()
	require.NotEmpty(t, queries)
	for _, q := range queries {
		require.Contains(t, q, "FROM river_job WHERE state = 'available'", "a replacement that was not warmed")
	}

	// A pool that cannot connect says so.
	cfg.ConnConfig.Port = 1
	_, err = store.OpenWarm(ctx, cfg)
	require.ErrorContains(t, err, "open warm pool")

	// Nor can a database without the service's tables be warmed.
	bare, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	bare.ConnConfig.RuntimeParams["search_path"] = "pg_catalog"
	bare.MaxConns = 1
	_, err = store.OpenWarm(ctx, bare)
	require.ErrorContains(t, err, "warm connection")
}

// TestOpenWarm_RetiresSpread checks that the connections of a warm pool,
// opened together, are not retired together when their lifetime ends: the
// first and the last of eight go at least 500 ms apart with a 4 s lifetime
// (without the spread, within a round or two of use, 20 ms apart).
// pgxpool draws each connection's extra lifetime in whole seconds: eight
// all drawing the same of four is a chance of 6 in 100,000.
func TestOpenWarm_RetiresSpread(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 8
	cfg.MaxConnLifetime = 4 * time.Second
	pool, err := store.OpenWarm(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var first, last time.Time
	deadline := time.Now().Add(12 * time.Second)
	for last.IsZero() && time.Now().Before(deadline) {
		// Use every idle connection: one past its lifetime is closed on
		// release.
		for _, c := range pool.AcquireAllIdle(ctx) {
			c.Release()
		}
		switch n := pool.Stat().MaxLifetimeDestroyCount(); {
		case n >= 8:
			last = time.Now()
		case n >= 1 && first.IsZero():
			first = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.False(t, last.IsZero(), "connections not retired in time")
	require.False(t, first.IsZero(), "all eight retired at once")
	require.Greater(t, last.Sub(first), 500*time.Millisecond)
}
