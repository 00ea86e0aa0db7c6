package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of the event log's partitions as a whole, which the
// retention package swaps (its probes' removal, an archive, a restore):
// the partitions themselves are made, attached and detached by the schema
// package. A partition is named by its table, which the caller has from
// schema.EventPartitions.

// TxLockTimeoutSet makes every lock tx takes from now on wait at most
// timeout (a millisecond at least) before its statement fails (SQLSTATE
// 55P03).
func TxLockTimeoutSet(ctx context.Context, tx pgx.Tx, timeout time.Duration) error {
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(timeout.Milliseconds(), 1))); err != nil {
		return fmt.Errorf("set lock_timeout: %w", err)
	}
	return nil
}

// EventPartitionLock locks partition against writes (SHARE) for the rest
// of tx, once the writes under way commit.
func EventPartitionLock(ctx context.Context, tx pgx.Tx, partition string) error {
	if _, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{partition}.Sanitize()+" IN SHARE MODE"); err != nil {
		return fmt.Errorf("lock %s: %w", partition, err)
	}
	return nil
}

// EventPartitionCount returns how many events partition holds.
func EventPartitionCount(ctx context.Context, db DBTX, partition string) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{partition}.Sanitize()).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s: %w", partition, err)
	}
	return n, nil
}

// EventPartitionCountType returns how many events of partition are of
// other types than typ, and how many of typ.
func EventPartitionCountType(ctx context.Context, db DBTX, partition, typ string) (others, of int64, err error) {
	err = db.QueryRow(ctx, "SELECT count(*) FILTER (WHERE type <> $1), count(*) FILTER (WHERE type = $1) FROM "+pgx.Identifier{partition}.Sanitize(),
		typ).Scan(&others, &of)
	if err != nil {
		return 0, 0, fmt.Errorf("count %s of %s: %w", typ, partition, err)
	}
	return others, of, nil
}

// EventPartitionHasType reports whether partition holds an event of type
// typ.
func EventPartitionHasType(ctx context.Context, db DBTX, partition, typ string) (bool, error) {
	var found bool
	if err := db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+pgx.Identifier{partition}.Sanitize()+" WHERE type = $1)", typ).Scan(&found); err != nil {
		return false, fmt.Errorf("look for %s in %s: %w", typ, partition, err)
	}
	return found, nil
}

// EventPartitionEach calls fn with each event of partition, in order, and
// stops at fn's first error, which it returns.
func EventPartitionEach(ctx context.Context, db DBTX, partition string, fn func(Event) error) error {
	rows, err := db.Query(ctx, "SELECT "+EventColumns+" FROM "+pgx.Identifier{partition}.Sanitize()+" ORDER BY id")
	if err != nil {
		return fmt.Errorf("read %s: %w", partition, err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := ScanEvent(rows)
		if err != nil {
			return fmt.Errorf("read %s: %w", partition, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", partition, err)
	}
	return nil
}

// EventPartitionLoad copies into table, a table of the event log's layout,
// the events next returns, until it returns nil, and returns how many it
// copied. An error of next stops the copy and is returned as it is.
func EventPartitionLoad(ctx context.Context, tx pgx.Tx, table string, next func() (*Event, error)) (int64, error) {
	var nextErr error
	n, err := tx.CopyFrom(ctx, pgx.Identifier{table}, strings.Split(EventColumns, ", "),
		pgx.CopyFromFunc(func() ([]any, error) {
			e, err := next()
			if err != nil {
				nextErr = err
				return nil, err
			}
			if e == nil {
				return nil, nil
			}
			return []any{e.ID, e.Stream, e.Type, []byte(e.Data), e.Bin, e.CreatedAt}, nil
		}))
	if nextErr != nil {
		return n, nextErr
	}
	if err != nil {
		return n, fmt.Errorf("load %s: %w", table, err)
	}
	return n, nil
}

// eventCopyBound is the name of the check constraint that bounds an event
// copy (EventCopyCreate) to its partition's range.
const eventCopyBound = "bound"

// EventCopyCreate creates table kept, of the event log's layout (its keys,
// indexes and defaults), for the events of a partition whose range is
// [from, to) (from zero: no lower bound), which a check constraint states
// so that the copy can take the partition's place without a scan
// (EventCopyReplace, EventPartitionUnbound). A copy of that name left by
// a swap cut short is dropped first.
func EventCopyCreate(ctx context.Context, tx pgx.Tx, kept string, from, to time.Time) error {
	id := pgx.Identifier{kept}.Sanitize()
	bound := fmt.Sprintf("created_at < '%s'", to.UTC().Format(time.RFC3339Nano))
	if !from.IsZero() {
		bound = fmt.Sprintf("created_at >= '%s' AND %s", from.UTC().Format(time.RFC3339Nano), bound)
	}
	if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+id); err != nil {
		return fmt.Errorf("create %s: %w", kept, err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE events INCLUDING DEFAULTS INCLUDING INDEXES);
		ALTER TABLE %s ADD CONSTRAINT %s CHECK (%s)`, id, id, eventCopyBound, bound)); err != nil {
		return fmt.Errorf("create %s: %w", kept, err)
	}
	return nil
}

// EventCopyFill copies, with their ids, the events of partition of other
// types than without into kept (EventCopyCreate), and returns how many.
func EventCopyFill(ctx context.Context, db DBTX, partition, kept, without string) (int64, error) {
	tag, err := db.Exec(ctx, "INSERT INTO "+pgx.Identifier{kept}.Sanitize()+" ("+EventColumns+") SELECT "+EventColumns+
		" FROM "+pgx.Identifier{partition}.Sanitize()+" WHERE type <> $1 ORDER BY id", without)
	if err != nil {
		return 0, fmt.Errorf("copy %s into %s: %w", partition, kept, err)
	}
	return tag.RowsAffected(), nil
}

// EventCopyFillSince copies into kept the events of partition of other
// types than without that it does not have yet (committed since
// EventCopyFill), and returns how many.
func EventCopyFillSince(ctx context.Context, db DBTX, partition, kept, without string) (int64, error) {
	keptID := pgx.Identifier{kept}.Sanitize()
	tag, err := db.Exec(ctx, "INSERT INTO "+keptID+" ("+EventColumns+") SELECT "+EventColumns+" FROM "+pgx.Identifier{partition}.Sanitize()+
		" e WHERE type <> $1 AND NOT EXISTS (SELECT 1 FROM "+keptID+" k WHERE k.id = e.id) ORDER BY id", without)
	if err != nil {
		return 0, fmt.Errorf("copy the events of %s since into %s: %w", partition, kept, err)
	}
	return tag.RowsAffected(), nil
}

// EventCopyReplace gives kept the name of partition, detached and dropped
// before, and its indexes the names the partition's had (each named after
// its table).
func EventCopyReplace(ctx context.Context, tx pgx.Tx, kept, partition string) error {
	id := pgx.Identifier{partition}.Sanitize()
	if _, err := tx.Exec(ctx, "ALTER TABLE "+pgx.Identifier{kept}.Sanitize()+" RENAME TO "+id); err != nil {
		return fmt.Errorf("rename %s: %w", kept, err)
	}
	rows, err := tx.Query(ctx, "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass", id)
	if err != nil {
		return fmt.Errorf("list the indexes of %s: %w", partition, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list the indexes of %s: %w", partition, err)
	}
	for _, name := range names {
		if rest, ok := strings.CutPrefix(name, kept); ok {
			if _, err := tx.Exec(ctx, "ALTER INDEX "+pgx.Identifier{name}.Sanitize()+" RENAME TO "+pgx.Identifier{partition + rest}.Sanitize()); err != nil {
				return fmt.Errorf("rename index %s: %w", name, err)
			}
		}
	}
	return nil
}

// EventPartitionUnbound drops the check constraint a copy that took
// partition's place kept (EventCopyCreate): once attached, its range is
// the partition's bound.
func EventPartitionUnbound(ctx context.Context, tx pgx.Tx, partition string) error {
	if _, err := tx.Exec(ctx, "ALTER TABLE "+pgx.Identifier{partition}.Sanitize()+" DROP CONSTRAINT "+eventCopyBound); err != nil {
		return fmt.Errorf("drop the bound of %s: %w", partition, err)
	}
	return nil
}

// EventPartitionAnalyze updates the planner's statistics of partition.
func EventPartitionAnalyze(ctx context.Context, db DBTX, partition string) error {
	if _, err := db.Exec(ctx, "ANALYZE "+pgx.Identifier{partition}.Sanitize()); err != nil {
		return fmt.Errorf("analyze %s: %w", partition, err)
	}
	return nil
}
