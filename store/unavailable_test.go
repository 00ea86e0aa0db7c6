package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
)

// TestIsUnavailable is the table of the errors that say the database is
// away (trying again later may succeed) and of those that do not.
func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection exception", &pgconn.PgError{Code: "08006"}, true},
		{"admin shutdown", fmt.Errorf("queue call: %w", &pgconn.PgError{Code: "57P01"}), true},
		{"starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"cut", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"read-only standby", &pgconn.PgError{Code: "25006"}, true},
		{"gave no answer in time", fmt.Errorf("group commit of 3: %w", ErrTimeout), true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"syntax", &pgconn.PgError{Code: "42601"}, false},
		{"not found", ErrNotFound, false},
		{"anything else", errors.New("boom"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, IsUnavailable(tt.err))
		})
	}
}

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

	g := NewGroupCommitter(pool, GroupCommitConfig{Timeout: time.Second}, func(ctx context.Context, tx pgx.Tx, items []int) error {
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
