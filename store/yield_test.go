package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

// TestInYieldingTx: a yielding transaction (a claim's record) holds row 1
// and then waits for row 2, which a call's transaction holds while it
// waits for row 1, having waited first: without giving way, Postgres's
// deadlock check would end the call's transaction (it runs first, a
// deadlock_timeout after the call began to wait). The yielding one gives
// way instead: the call's transaction goes on and commits, and the
// yielding one is run again and commits after it.
func TestInYieldingTx(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := dbtest.Schema(ctx, t)
	_, err := db.Pool.Exec(ctx, `CREATE TABLE yield_rows (id int PRIMARY KEY, v int NOT NULL);
		INSERT INTO yield_rows VALUES (1, 0), (2, 0)`)
	require.NoError(t, err)

	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var callPID uint32
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&callPID))
	call, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = call.Rollback(ctx) }()
	_, err = call.Exec(ctx, "UPDATE yield_rows SET v = v + 1 WHERE id = 2")
	require.NoError(t, err)

	holding := make(chan struct{})
	callDone := make(chan error, 1)
	attempts := 0
	yielded := make(chan error, 1)
	go func() {
		yielded <- store.InYieldingTx(ctx, db.Pool, func(tx pgx.Tx) error {
			attempts++
			if _, err := tx.Exec(ctx, "UPDATE yield_rows SET v = v + 1 WHERE id = 1"); err != nil {
				return err
			}
			if attempts == 1 {
				close(holding)
				// The call waits for row 1 before this waits for row 2.
				for {
					var waiting bool
					if err := db.Pool.QueryRow(ctx, "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", callPID).Scan(&waiting); err != nil {
						return err
					}
					if waiting {
						break
					}
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
			_, err := tx.Exec(ctx, "UPDATE yield_rows SET v = v + 1 WHERE id = 2")
			return err
		})
	}()
	<-holding
	go func() {
		_, err := call.Exec(ctx, "UPDATE yield_rows SET v = v + 1 WHERE id = 1")
		callDone <- err
	}()
	require.NoError(t, <-callDone, "the call's transaction is not ended by a deadlock")
	require.NoError(t, call.Commit(ctx))
	require.NoError(t, <-yielded)
	require.GreaterOrEqual(t, attempts, 2, "the yielding transaction gave way and ran again")
	var v1, v2 int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT (SELECT v FROM yield_rows WHERE id = 1), (SELECT v FROM yield_rows WHERE id = 2)").Scan(&v1, &v2))
	require.Equal(t, [2]int{2, 2}, [2]int{v1, v2}, "each transaction's writes, once")
}

// TestIsLockWait tells a lock's timeout and a deadlock from other errors.
func TestIsLockWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	_, err := db.Pool.Exec(ctx, `CREATE TABLE wait_rows (id int PRIMARY KEY); INSERT INTO wait_rows VALUES (1)`)
	require.NoError(t, err)
	holder, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, "SELECT 1 FROM wait_rows WHERE id = 1 FOR UPDATE")
	require.NoError(t, err)
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		require.NoError(t, store.TxLockTimeoutSet(ctx, tx, 10*time.Millisecond))
		_, err := tx.Exec(ctx, "SELECT 1 FROM wait_rows WHERE id = 1 FOR UPDATE")
		return err
	})
	require.True(t, store.IsLockWait(err), "%v", err)
	_, err = db.Pool.Exec(ctx, "SELECT 1 FROM no_such_table")
	require.False(t, store.IsLockWait(err))
	require.False(t, store.IsLockWait(nil))
}
