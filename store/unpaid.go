package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// UnpaidWorkStream is the stream name the notifications of RecordUnpaidWork
// carry: an api process subscribes to it (Listener.Subscribe) to read the
// recent unpaid work again when some is recorded.
const UnpaidWorkStream = "unpaid-work"

// UnpaidWorkKept is how long unpaid work is kept: the longest window a
// limit on it may look back over.
const UnpaidWorkKept = 24 * time.Hour

// UnpaidPayerKey is the key a payer's unpaid work is counted by: its
// network and address, as its payment names them (x402.Payment); "" when
// payer is.
func UnpaidPayerKey(network, payer string) string {
	if payer == "" {
		return ""
	}
	return "payer:" + network + "/" + payer
}

// UnpaidClientKey is the key a client address's unpaid work is counted by
// (addr as the api names it: the address, or an IPv6 address's /64); ""
// when addr is.
func UnpaidClientKey(addr string) string {
	if addr == "" {
		return ""
	}
	return "client:" + addr
}

// UnpaidRun is one run that ended unpaid, under one of its keys.
type UnpaidRun struct {
	Key string
	At  time.Time
}

// RecordUnpaidWork records, in tx, a run that ended unpaid at at under each
// of keys (empty ones skipped), deletes the records older than
// UnpaidWorkKept, and notifies the processes listening
// (UnpaidWorkStream) once tx commits.
func RecordUnpaidWork(ctx context.Context, tx pgx.Tx, at time.Time, keys ...string) error {
	var b pgx.Batch
	n := 0
	for _, k := range keys {
		if k == "" {
			continue
		}
		b.Queue("INSERT INTO unpaid_work (key, at) VALUES ($1, $2)", k, at)
		n++
	}
	if n == 0 {
		return nil
	}
	b.Queue("DELETE FROM unpaid_work WHERE at < $1", at.Add(-UnpaidWorkKept))
	b.Queue("SELECT pg_notify($1, $2)", NotifyChannel, UnpaidWorkStream+"\trecorded")
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("record unpaid work: %w", interpretError(err))
	}
	return nil
}

// ForgetUnpaidWork deletes the unpaid work recorded before before.
func ForgetUnpaidWork(ctx context.Context, db DBTX, before time.Time) error {
	if _, err := db.Exec(ctx, "DELETE FROM unpaid_work WHERE at < $1", before); err != nil {
		return fmt.Errorf("forget unpaid work: %w", interpretError(err))
	}
	return nil
}

// UnpaidWorkSince returns the unpaid work recorded after since, oldest
// first.
func UnpaidWorkSince(ctx context.Context, db DBTX, since time.Time) ([]UnpaidRun, error) {
	rows, err := db.Query(ctx, "SELECT key, at FROM unpaid_work WHERE at > $1 ORDER BY at", since)
	if err != nil {
		return nil, fmt.Errorf("read unpaid work: %w", interpretError(err))
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (UnpaidRun, error) {
		var r UnpaidRun
		err := row.Scan(&r.Key, &r.At)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("read unpaid work: %w", interpretError(err))
	}
	return runs, nil
}
