package retention_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/retention"
	"github.com/x402d/x402d/schema"
	"github.com/x402d/x402d/store"
)

// TestPartitionsGiveWayToLongReader: creating the event log's next
// partition takes the log's lock; behind a transaction reading the log, the
// job gives up after its lock timeout with ErrPartitionBusy, an append
// made while it waited commits while the reader still reads, and the next
// run creates the partition.
func TestPartitionsGiveWayToLongReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	before := partitionNames(ctx, t, db)

	reader, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = reader.Rollback(ctx) }()
	var n int
	require.NoError(t, reader.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n))

	jobCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	created := make(chan error, 1)
	go func() {
		created <- retention.EnsurePartitions(jobCtx, db.Pool, schema.PeriodMonth, 500*time.Millisecond, slog.New(slog.DiscardHandler))
	}()
	waitForLockWait(ctx, t, db, "events")
	appended := make(chan error, 1)
	go func() {
		appended <- pgx.BeginFunc(jobCtx, db.Pool, func(tx pgx.Tx) error {
			return store.Append(jobCtx, tx, store.NewEvent{Stream: "test/now", Type: "test.appended", Data: map[string]any{}})
		})
	}()
	require.ErrorIs(t, <-created, retention.ErrPartitionBusy)
	require.NoError(t, <-appended, "the append commits while the reader reads")
	require.NoError(t, reader.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n), "the reader still reads")
	require.NoError(t, reader.Rollback(ctx))
	require.Equal(t, before, partitionNames(ctx, t, db))

	require.NoError(t, retention.EnsurePartitions(ctx, db.Pool, schema.PeriodMonth, 500*time.Millisecond, slog.New(slog.DiscardHandler)))
	require.Len(t, partitionNames(ctx, t, db), len(before)+1, "the next period's partition")
}
