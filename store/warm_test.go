package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

// TestWarm checks that Warm opens every connection of the pool and runs its
// reads on each: every backend of the pool last ran them.
func TestWarm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = "warm-" + db.Schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	require.NoError(t, store.Warm(ctx, pool))
	require.EqualValues(t, 4, pool.Stat().TotalConns())
	rows, err := db.Pool.Query(ctx, "SELECT query FROM pg_stat_activity WHERE application_name = $1", "warm-"+db.Schema)
	require.NoError(t, err)
	queries, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, queries, 4)
	for _, q := range queries {
		require.Contains(t, q, "FROM river_job WHERE state = 'available'", "a backend that was not warmed")
	}

	// A pool that cannot connect says so.
	cfg.ConnConfig.Port = 1
	cold, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(cold.Close)
	require.ErrorContains(t, store.Warm(ctx, cold), "warm connections")
}
