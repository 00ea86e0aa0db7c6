package store

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
)

// TestGroupCommitterPrimaryGone writes through a database that stops
// answering, as a primary that vanished from the network before its
// standby is promoted: the group commit gives up after its Timeout with an
// error that says the database is unavailable (answered 503, not 500), and
// writes again once the database answers.
func TestGroupCommitterPrimaryGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	proxy := dbtest.NewProxy(t, db)
	cfg, err := pgxpool.ParseConfig(proxy.URL(db))
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, pool.Ping(ctx))

	g := NewGroupCommitter(pool, &GroupCommitConfig{Timeout: time.Second}, func(ctx context.Context, tx pgx.Tx, items []int) error {
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	})
	require.NoError(t, g.Commit(ctx, 1))

	proxy.Hang()
	start := time.Now()
	err = g.Commit(ctx, 2)
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*time.Second, "bounded by its Timeout")
	require.True(t, IsUnavailable(err), "%v", err)

	proxy.Restore()
	require.Eventually(t, func() bool { return g.Commit(ctx, 3) == nil }, 20*time.Second, 100*time.Millisecond)
}
