package dbtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash/fnv"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/schema"
)

// Cached is a database kept between runs (Cache).
type Cached struct {
	*DB
	// FilledAt is when its content was made.
	FilledAt time.Time
	// Reused says whether it was made by an earlier run.
	Reused bool
}

// Cache returns the database name on the test server, kept between runs
// for content that takes minutes to make (the scale benchmarks). It is
// reused as it is when it was filled less than maxAge ago for the same key
// and the same migrations (their SQL's digest); otherwise it is dropped,
// created, migrated and filled by fill, and the key recorded once fill
// returns, so that a fill cut short is made again. Runs of one name wait
// for each other. The database is not dropped at cleanup: drop it with
// DROP DATABASE when its space is wanted back.
func Cache(ctx context.Context, t testing.TB, name, key string, maxAge time.Duration, fill func(db *DB)) *Cached {
	t.Helper()
	base := URL()
	require.NoError(t, schema.EnsureDatabase(ctx, base), "the tests need Postgres: run `go tool task db` or set TEST_DATABASE_URL")
	digest := sha256.New()
	migrations, err := schema.Migrations()
	require.NoError(t, err)
	for _, m := range migrations {
		digest.Write([]byte(m.Name + "\x00" + m.Up + "\x00" + m.Down + "\x00"))
	}
	digest.Write([]byte(key))
	want := hex.EncodeToString(digest.Sum(nil))

	admin, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	lock := fnv.New64a()
	lock.Write([]byte("dbtest.Cache " + name))
	_, err = admin.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(lock.Sum64()))
	require.NoError(t, err)
	defer func() { _, _ = admin.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", int64(lock.Sum64())) }()

	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name
	connString := u.String()
	open := func() *pgxpool.Pool {
		cfg, err := schema.PoolConfig(connString)
		require.NoError(t, err)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}

	var exists bool
	require.NoError(t, admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	if exists {
		pool := open()
		var got string
		var filled time.Time
		err := pool.QueryRow(ctx, "SELECT key, filled_at FROM dbtest_cache").Scan(&got, &filled)
		if err == nil && got == want && time.Since(filled) < maxAge {
			return &Cached{DB: &DB{Pool: pool, URL: connString, Schema: "public"}, FilledAt: filled, Reused: true}
		}
		var pgErr interface{ SQLState() string }
		if err != nil && !errors.Is(err, pgx.ErrNoRows) && !(errors.As(err, &pgErr) && pgErr.SQLState() == "42P01") {
			require.NoError(t, err)
		}
		pool.Close()
		_, err = admin.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		require.NoError(t, err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	pool := open()
	require.NoError(t, schema.Migrate(ctx, pool, slog.New(slog.DiscardHandler)))
	db := &DB{Pool: pool, URL: connString, Schema: "public"}
	fill(db)
	if t.Failed() {
		t.FailNow()
	}
	var filled time.Time
	_, err = pool.Exec(ctx, "CREATE TABLE dbtest_cache (key text NOT NULL, filled_at timestamptz NOT NULL DEFAULT now())")
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, "INSERT INTO dbtest_cache (key) VALUES ($1) RETURNING filled_at", want).Scan(&filled))
	return &Cached{DB: db, FilledAt: filled}
}
