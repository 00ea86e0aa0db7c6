package retention_test

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/x402d/x402d/x402"
)

// addPartition attaches an empty partition of the event log for [from, to).
func addPartition(ctx context.Context, t *testing.T, db *dbtest.DB, from, to time.Time) string {
	t.Helper()
	p := schema.Partition{Name: "events_p" + from.Format("20060102"), From: from, To: to}
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, schema.CreateDetachedPartition(ctx, tx, p.Name))
	require.NoError(t, schema.AttachEventPartition(ctx, tx, p))
	require.NoError(t, tx.Commit(ctx))
	return p.Name
}

// eventRow is an event as the log holds it.
type eventRow struct {
	ID                 int64
	Stream, Type, Data string
	Bin                []byte
	CreatedAt          time.Time
}

// eventsBetween reads the log's events created in [from, to).
func eventsBetween(ctx context.Context, t *testing.T, db *dbtest.DB, from, to time.Time) []eventRow {
	t.Helper()
	rows, err := db.Pool.Query(ctx, `SELECT id, stream, type, data::text, bin, created_at FROM events
		WHERE created_at >= $1 AND created_at < $2 ORDER BY id`, from, to)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[eventRow])
	require.NoError(t, err)
	return out
}

func partitionNames(ctx context.Context, t *testing.T, db *dbtest.DB) []string {
	t.Helper()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	parts, err := schema.EventPartitions(ctx, tx)
	require.NoError(t, err)
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.Name
	}
	return names
}

// TestArchiveAndRestore archives a whole old partition of the event log to
// a file and drops it, refuses a file whose bytes changed, restores it
// equal, with the append-only rule; and a payment of that old partition
// is still refused when resent.
func TestArchiveAndRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	sep := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
	oct := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	sepName := addPartition(ctx, t, db, sep, oct)
	addPartition(ctx, t, db, oct, nov)

	// Events in September (a paid call among them) and in October.
	payment := x402.Payment{Network: "eip155:8453", Payer: "0xold", Nonce: "0x01", Amount: "10000", Payload: json.RawMessage(`{"payload":{}}`)}
	verified, err := json.Marshal(store.PaymentVerified{Op: "diff", Token: "tok", RequestHash: []byte{1}, Payment: payment})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ('call/old', 'payment.verified', $1, $2)`, verified, sep.Add(time.Hour))
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO calls (id, op, state, token, request_hash, payment_key, network, payer, amount, created_at, updated_at)
		VALUES ('old', 'diff', 'paid', 'tok', '\x01', $1, 'eip155:8453', '0xold', '10000', $2, $2)`, payment.Key(), sep.Add(time.Hour))
	require.NoError(t, err)
	for i := range 40 {
		_, err := db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ($1, 'host.seen', $2, $3)`,
			"host/h"+string(rune('a'+i%26)), `{"n":`+string(rune('0'+i%10))+`,"text":"é \"quoted\""}`, sep.Add(time.Duration(i)*time.Hour))
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ('host/oct', 'host.seen', '{}', $1)`, oct.Add(time.Duration(i)*time.Minute))
		require.NoError(t, err)
	}
	// An event kept in its binary form (migration 017).
	_, err = db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, bin, created_at) VALUES ('call/bin', 'call.paid', '{}', '\x01ff00', $1)`, sep.Add(2*time.Hour))
	require.NoError(t, err)
	september := eventsBetween(ctx, t, db, sep, oct)
	require.Len(t, september, 42)
	require.Equal(t, []byte{1, 0xff, 0}, september[41].Bin)
	october := eventsBetween(ctx, t, db, oct, nov)

	dir := t.TempDir()
	done, err := retention.Archive(ctx, db.Pool, dir, time.Date(2026, 10, 15, 0, 0, 0, 0, time.UTC), retention.LockTimeout)
	require.NoError(t, err)
	require.Len(t, done, 1, "only the partitions whose whole range ends by the date")
	m := done[0]
	require.Equal(t, sepName, m.Partition)
	require.Equal(t, retention.ArchiveFormat, m.Format)
	require.Equal(t, int64(42), m.Rows)
	require.Equal(t, september[0].ID, m.FirstID)
	require.Equal(t, september[41].ID, m.LastID)
	require.Equal(t, sep, *m.From)
	require.Equal(t, oct, m.To)
	require.FileExists(t, filepath.Join(dir, sepName+".jsonl.gz"))
	require.FileExists(t, filepath.Join(dir, sepName+".manifest.json"))
	require.NotContains(t, partitionNames(ctx, t, db), sepName)
	require.Empty(t, eventsBetween(ctx, t, db, sep, oct))
	require.Equal(t, october, eventsBetween(ctx, t, db, oct, nov))

	// The payment of the archived partition is still one call.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	err = store.Append(ctx, tx, store.NewEvent{Stream: store.CallStream("again"), Type: store.EventPaymentVerified,
		Data: store.PaymentVerified{Op: "diff", Token: "tok2", RequestHash: []byte{2}, Payment: payment}})
	require.True(t, errors.Is(err, store.ErrConflict), "replay across the partition boundary: %v", err)
	require.NoError(t, tx.Rollback(ctx))

	// A file whose bytes changed is refused, and nothing is attached.
	bad := t.TempDir()
	for _, name := range []string{m.File, sepName + ".manifest.json"} {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		if name == m.File {
			raw[len(raw)/2] ^= 0xff
		}
		require.NoError(t, os.WriteFile(filepath.Join(bad, name), raw, 0o644))
	}
	_, err = retention.Restore(ctx, db.Pool, filepath.Join(bad, m.File))
	require.ErrorContains(t, err, "SHA-256")
	require.NotContains(t, partitionNames(ctx, t, db), sepName)

	back, err := retention.Restore(ctx, db.Pool, filepath.Join(dir, sepName+".manifest.json"))
	require.NoError(t, err)
	require.Equal(t, int64(42), back.Rows)
	require.Contains(t, partitionNames(ctx, t, db), sepName)
	require.Equal(t, september, eventsBetween(ctx, t, db, sep, oct), "restored equal, binary data included")

	// The restored partition keeps the append-only rule.
	_, err = db.Pool.Exec(ctx, `UPDATE events SET type = 'x' WHERE created_at >= $1 AND created_at < $2`, sep, oct)
	require.ErrorContains(t, err, "append-only")
	_, err = db.Pool.Exec(ctx, `TRUNCATE `+sepName)
	require.ErrorContains(t, err, "append-only")

	// Archiving again does not overwrite the files.
	_, err = retention.Archive(ctx, db.Pool, dir, oct, retention.LockTimeout)
	require.ErrorContains(t, err, "exists already")
	require.Contains(t, partitionNames(ctx, t, db), sepName)
}
