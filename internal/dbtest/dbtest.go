// Package dbtest gives tests their own Postgres schema, migrated with River's
// and the service's migrations, on the real database server.
//
// The server comes from TEST_DATABASE_URL, defaulting to the local
// postgres://postgres@127.0.0.1:5432/x402_test. The database is created when
// missing. Each call of Schema makes a fresh schema and drops it when the test
// ends, so tests can commit, LISTEN and run River clients in parallel;
// Database does the same in a database of its own; Unmigrated leaves the
// schema empty, for processes that migrate it themselves. Cache keeps a database
// filled once between runs, for the scale benchmarks.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/schema"
)

// DefaultURL is the test database used when TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/x402_test?sslmode=disable"

// URL returns the test database URL.
func URL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// DB is a test's schema: a pool whose connections use it, and a connection
// string that other processes can use to reach the same schema.
type DB struct {
	// Pool uses the schema as its search_path.
	Pool *pgxpool.Pool
	// URL is a connection string with the schema as search_path.
	URL string
	// Schema is the schema's name.
	Schema string
}

// Schema creates a fresh, migrated schema for t and drops it at cleanup.
func Schema(ctx context.Context, t testing.TB) *DB {
	t.Helper()
	return newSchema(ctx, t, true)
}

// Unmigrated is Schema without the migrations: an empty schema, for a test
// whose processes migrate it themselves (an older release's binary, which
// applies its own).
func Unmigrated(ctx context.Context, t testing.TB) *DB {
	t.Helper()
	return newSchema(ctx, t, false)
}

// newSchema creates a schema of its own for t in the tests' database,
// migrated when migrate is true.
func newSchema(ctx context.Context, t testing.TB, migrate bool) *DB {
	t.Helper()
	base := URL()
	require.NoError(t, schema.EnsureDatabase(ctx, base), "the tests need Postgres: run `go tool task db` or set TEST_DATABASE_URL")
	return schemaIn(ctx, t, base, uniqueName(t), migrate)
}

// Database is Schema in a database of its own, created for t and dropped
// at cleanup. Postgres keeps a dead row version while any transaction of
// the same database may still see it, so what VACUUM leaves in a test's
// tables depends on the other tests' transactions unless the test has its
// own database.
func Database(ctx context.Context, t testing.TB) *DB {
	t.Helper()
	base := URL()
	require.NoError(t, schema.EnsureDatabase(ctx, base), "the tests need Postgres: run `go tool task db` or set TEST_DATABASE_URL")
	name := uniqueName(t)
	admin, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	// Registered first, so it runs after the schema's cleanup.
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Logf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name
	return schemaIn(ctx, t, u.String(), name, true)
}

// uniqueName returns a short name for t's schema or database.
func uniqueName(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	// River names its notification channels after the schema, and Postgres
	// caps channel names at 63 bytes: keep schema names short.
	short := strings.ToLower(sanitize(t.Name()))
	if len(short) > 16 {
		short = short[len(short)-16:]
	}
	return "t_" + strings.Trim(short, "_") + "_" + hex.EncodeToString(b[:])
}

// schemaIn creates the schema name in the database at base, migrated when
// migrate is true, and drops it at cleanup.
func schemaIn(ctx context.Context, t testing.TB, base, name string, migrate bool) *DB {
	t.Helper()
	admin, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))

	u, err := url.Parse(base)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	connString := u.String()

	poolCfg, err := schema.PoolConfig(connString)
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	require.NoError(t, err)
	if migrate {
		require.NoError(t, schema.Migrate(ctx, pool, slog.New(slog.DiscardHandler)))
		_, err = schema.EnsureEventPartitions(ctx, pool, schema.PeriodMonth, time.Now().AddDate(0, 1, 0))
		require.NoError(t, err)
	}

	t.Cleanup(func() {
		pool.Close()
		conn, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Logf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", name, err)
		}
	})
	return &DB{Pool: pool, URL: connString, Schema: name}
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
