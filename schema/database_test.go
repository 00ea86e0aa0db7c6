package schema_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/schema"
)

// TestEnsureDatabase creates a missing database, finds it the second time,
// and takes a URL carrying pgxpool's settings, which the server does not
// know.
func TestEnsureDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name, query string
	}{
		{"plain", ""},
		{"pool settings", "pool_max_conns=3&pool_max_conn_lifetime=1h&pool_max_conn_lifetime_jitter=1m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b [6]byte
			_, _ = rand.Read(b[:])
			name := "x402_ensure_" + hex.EncodeToString(b[:])
			u, err := url.Parse(dbtest.URL())
			require.NoError(t, err)
			admin := u.String()
			u.Path = "/" + name
			q := u.Query()
			extra, err := url.ParseQuery(tc.query)
			require.NoError(t, err)
			for k, v := range extra {
				q[k] = v
			}
			u.RawQuery = q.Encode()
			t.Cleanup(func() {
				conn, err := pgx.Connect(context.Background(), admin)
				if err == nil {
					_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name)
					_ = conn.Close(context.Background())
				}
			})

			require.NoError(t, schema.EnsureDatabase(ctx, u.String()))
			require.NoError(t, schema.EnsureDatabase(ctx, u.String()), "it exists now")
			conn, err := pgx.Connect(ctx, admin)
			require.NoError(t, err)
			defer conn.Close(ctx)
			var n int
			require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n))
			require.Equal(t, 1, n)
		})
	}

	// An unreachable server says how to start one.
	err := schema.EnsureDatabase(ctx, "postgres://postgres@127.0.0.1:1/x?sslmode=disable")
	require.ErrorContains(t, err, "pg_ctlcluster")
}

func TestPoolConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name, params, want string
	}{
		{"jit off by default", "", "off"},
		{"the URL's own setting kept", "&jit=on", "on"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			connString := dbtest.URL()
			if !strings.Contains(connString, "?") {
				connString += "?"
			}
			cfg, err := schema.PoolConfig(connString + tt.params)
			require.NoError(t, err)
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			defer pool.Close()
			var jit string
			require.NoError(t, pool.QueryRow(ctx, "SHOW jit").Scan(&jit))
			require.Equal(t, tt.want, jit)
		})
	}
}
