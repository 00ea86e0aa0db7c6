package retention_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/retention"
	"github.com/x402d/x402d/schema"
	"github.com/x402d/x402d/store"
)

// waitForLockWait waits until a session waits for a lock on the event log
// or on partition, as the swap does behind a transaction holding it.
func waitForLockWait(ctx context.Context, t *testing.T, db *dbtest.DB, partition string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting bool
		err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE NOT granted AND relation IN ('events'::regclass, $1::regclass))`, partition).Scan(&waiting)
		require.NoError(t, err)
		return waiting
	}, 30*time.Second, 10*time.Millisecond, "the swap waits for a lock")
}

// TestSwapKeepsConcurrentEvent commits an event into an ended partition
// while its swap (PruneProbes' rewrite, Archive's drop) is under way, after
// the swap has read the partition: the event stays in the log, the swap
// counting it, and the archive made next holds it.
func TestSwapKeepsConcurrentEvent(t *testing.T) {
	t.Parallel()
	for _, swap := range []string{"prune", "archive"} {
		t.Run(swap, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.Schema(ctx, t)
			current := schema.PeriodMonth.Start(time.Now().UTC())
			last := current.AddDate(0, -1, 0)
			p := addPartition(ctx, t, db, last, current)
			for i, typ := range []string{store.EventHostProbed, "job.started", store.EventHostProbed} {
				_, err := db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ('host/a.test', $1, '{}', $2)`,
					typ, last.Add(time.Duration(i+1)*time.Hour))
				require.NoError(t, err)
			}

			// An append that began before the partition's range ended: its
			// event is written, not yet committed.
			late, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = late.Rollback(ctx) }()
			_, err = late.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ('call/late', 'job.started', '{}', $1)`,
				current.Add(-time.Millisecond))
			require.NoError(t, err)

			dir := t.TempDir()
			run := func() error {
				if swap == "prune" {
					_, err := retention.PruneProbes(ctx, db.Pool, current, time.Minute)
					return err
				}
				_, err := retention.Archive(ctx, db.Pool, dir, current, time.Minute)
				return err
			}
			done := make(chan error, 1)
			go func() { done <- run() }()
			waitForLockWait(ctx, t, db, p)
			require.NoError(t, late.Commit(ctx))
			err = <-done

			var n int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE stream = 'call/late'`).Scan(&n))
			if swap == "prune" {
				require.NoError(t, err)
				require.Equal(t, 1, n, "the event committed during the rewrite is kept")
				require.Len(t, eventsBetween(ctx, t, db, last, current), 2)
				return
			}
			// The archive written before the event committed is not the
			// partition's: the partition stays, and the next archive holds
			// the event.
			if err != nil {
				require.Equal(t, 1, n, "the event committed during the archive is kept")
				_, err := retention.Archive(ctx, db.Pool, dir, current, time.Minute)
				require.NoError(t, err)
			}
			require.NotContains(t, partitionNames(ctx, t, db), p)
			raw, err := os.ReadFile(filepath.Join(dir, p+".manifest.json"))
			require.NoError(t, err)
			var m retention.Manifest
			require.NoError(t, json.Unmarshal(raw, &m))
			require.Equal(t, int64(4), m.Rows, "the archive holds the event committed during the first")
		})
	}
}

// TestSwapGivesWayToLongReader: a transaction reading the event log keeps
// the swap from its lock; the swap gives up after its lock timeout with
// ErrPartitionBusy, leaving the partition as it was, and an append made
// while it waited commits while the reader still reads.
func TestSwapGivesWayToLongReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	current := schema.PeriodMonth.Start(time.Now().UTC())
	last := current.AddDate(0, -1, 0)
	p := addPartition(ctx, t, db, last, current)
	for i, typ := range []string{store.EventHostProbed, "job.started"} {
		_, err := db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ('host/a.test', $1, '{}', $2)`,
			typ, last.Add(time.Duration(i+1)*time.Hour))
		require.NoError(t, err)
	}
	before := eventsBetween(ctx, t, db, last, current)

	reader, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = reader.Rollback(ctx) }()
	var n int
	require.NoError(t, reader.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n))

	swapCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	swapped := make(chan error, 1)
	go func() {
		_, err := retention.PruneProbes(swapCtx, db.Pool, current, 500*time.Millisecond)
		swapped <- err
	}()
	waitForLockWait(ctx, t, db, p)
	appended := make(chan error, 1)
	go func() {
		appended <- pgx.BeginFunc(swapCtx, db.Pool, func(tx pgx.Tx) error {
			return store.Append(swapCtx, tx, store.NewEvent{Stream: "test/now", Type: "test.appended", Data: map[string]any{}})
		})
	}()
	require.ErrorIs(t, <-swapped, retention.ErrPartitionBusy)
	require.NoError(t, <-appended, "the append commits while the reader reads")
	require.NoError(t, reader.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n), "the reader still reads")
	require.NoError(t, reader.Rollback(ctx))
	require.Equal(t, before, eventsBetween(ctx, t, db, last, current), "the partition as it was")
	require.Contains(t, partitionNames(ctx, t, db), p)

	// Once the reader is gone, the next run rewrites it.
	done, err := retention.PruneProbes(ctx, db.Pool, current, 500*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, []retention.PrunedPartition{{Partition: p, Probes: 1, Kept: 1}}, done)
}
