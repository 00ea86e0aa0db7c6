package dbtest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
)

// TestCache fills a database once and reuses it while the key is the same
// and it is young enough; another key, or an older fill, makes it again.
func TestCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "t_cache_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dbtest.URL())
		require.NoError(t, err)
		defer conn.Close(context.Background())
		_, err = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		require.NoError(t, err)
	})
	fills := 0
	open := func(key string, maxAge time.Duration) *dbtest.Cached {
		return dbtest.Cache(ctx, t, name, key, maxAge, func(db *dbtest.DB) {
			fills++
			_, err := db.Pool.Exec(ctx, "CREATE TABLE filled (n integer); INSERT INTO filled VALUES ("+string(rune('0'+fills))+")")
			require.NoError(t, err)
		})
	}
	read := func(c *dbtest.Cached) int {
		var n int
		require.NoError(t, c.Pool.QueryRow(ctx, "SELECT n FROM filled").Scan(&n))
		return n
	}

	first := open("a", time.Hour)
	require.False(t, first.Reused)
	require.Equal(t, 1, read(first))
	again := open("a", time.Hour)
	require.True(t, again.Reused)
	require.Equal(t, 1, read(again), "the same key: the same content")
	require.Equal(t, 1, fills)
	other := open("b", time.Hour)
	require.False(t, other.Reused)
	require.Equal(t, 2, read(other))
	stale := open("b", time.Nanosecond)
	require.False(t, stale.Reused, "older than maxAge")
	require.Equal(t, 3, read(stale))
	require.Equal(t, 3, fills)
}
