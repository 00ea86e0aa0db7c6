package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/schema"
	"github.com/x402d/x402d/store"
)

// PrunedPartition is a partition of the event log rewritten without its
// probes (PruneProbes).
type PrunedPartition struct {
	Partition string
	// Probes is how many host.probed events it held; Kept how many other
	// events it keeps.
	Probes, Kept int64
}

// PruneProbes rewrites every partition of the event log whose whole range
// ends on or before before (and before now) without its host.probed
// events, and returns those it rewrote. The index's liveness probes are
// measurements, not the ledger: the history the index answers is kept in
// its own tables (index_probe_hours, index_changes), and none of them is
// read back from a probe older than 31 days (store.ProbeHoursKept). The
// partition's other events are copied, with their ids, into a table of the
// log's layout (its keys, indexes and the partition's bound) outside any
// lock; then, in one transaction, the partition is locked against writes
// (an append begun before its range ended may still commit into it), the
// events committed since the copy are copied too and all are counted
// again, the partition is detached and dropped, and the copy takes its
// name (its indexes theirs) and its place, with the append-only rule, as
// Restore attaches a partition. Each lock waits at most lockTimeout
// (LockTimeout), else PruneProbes stops with ErrPartitionBusy, the
// partition as it was. A partition is read once: the mark
// (retention_marks, "probes") remembers where the last rewrite ended.
func PruneProbes(ctx context.Context, pool *pgxpool.Pool, before time.Time, lockTimeout time.Duration) ([]PrunedPartition, error) {
	var mark time.Time
	err := pool.QueryRow(ctx, `SELECT done_to FROM retention_marks WHERE name = 'probes'`).Scan(&mark)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("prune probes: read mark: %w", err)
	}
	parts, err := endedBy(ctx, pool, before)
	if err != nil {
		return nil, fmt.Errorf("prune probes: %w", err)
	}
	var done []PrunedPartition
	for _, p := range parts {
		if !p.To.After(mark) {
			continue
		}
		pruned, err := pruneProbesOf(ctx, pool, p, lockTimeout)
		if err != nil {
			return done, err
		}
		if pruned != nil {
			done = append(done, *pruned)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO retention_marks (name, done_to) VALUES ('probes', $1)
			ON CONFLICT (name) DO UPDATE SET done_to = greatest(retention_marks.done_to, excluded.done_to)`, p.To); err != nil {
			return done, fmt.Errorf("prune probes: write mark: %w", err)
		}
	}
	return done, nil
}

// pruneProbesOf rewrites partition p without its probes (PruneProbes), or
// returns nil when it holds none.
func pruneProbesOf(ctx context.Context, pool *pgxpool.Pool, p schema.Partition, lockTimeout time.Duration) (*PrunedPartition, error) {
	id := pgx.Identifier{p.Name}.Sanitize()
	var any bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+id+" WHERE type = $1)", store.EventHostProbed).Scan(&any); err != nil {
		return nil, fmt.Errorf("prune probes of %s: %w", p.Name, err)
	}
	if !any {
		return nil, nil
	}
	kept := p.Name + "_kept"
	keptID := pgx.Identifier{kept}.Sanitize()
	bound := fmt.Sprintf("created_at < '%s'", p.To.UTC().Format(time.RFC3339Nano))
	if !p.From.IsZero() {
		bound = fmt.Sprintf("created_at >= '%s' AND %s", p.From.UTC().Format(time.RFC3339Nano), bound)
	}
	// The copy, outside any lock: the partition's range has ended, so few
	// events if any are appended to it meanwhile (those are copied below).
	var copied int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// A copy left by a rewrite cut short is made again.
		if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+keptID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE events INCLUDING DEFAULTS INCLUDING INDEXES);
			ALTER TABLE %s ADD CONSTRAINT bound CHECK (%s)`, keptID, keptID, bound)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "INSERT INTO "+keptID+" ("+store.EventColumns+") SELECT "+store.EventColumns+" FROM "+id+" WHERE type <> $1 ORDER BY id", store.EventHostProbed)
		copied = tag.RowsAffected()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("prune probes of %s: copy: %w", p.Name, err)
	}
	pruned := &PrunedPartition{Partition: p.Name, Kept: copied}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lockEnded(ctx, tx, p.Name, lockTimeout); err != nil {
			return busy(err)
		}
		var others int64
		if err := tx.QueryRow(ctx, "SELECT count(*) FILTER (WHERE type <> $1), count(*) FILTER (WHERE type = $1) FROM "+id,
			store.EventHostProbed).Scan(&others, &pruned.Probes); err != nil {
			return fmt.Errorf("count: %w", err)
		}
		if others != copied {
			// Events committed into the partition since the copy: copied
			// now, the partition locked.
			tag, err := tx.Exec(ctx, "INSERT INTO "+keptID+" ("+store.EventColumns+") SELECT "+store.EventColumns+" FROM "+id+
				" e WHERE type <> $1 AND NOT EXISTS (SELECT 1 FROM "+keptID+" k WHERE k.id = e.id) ORDER BY id", store.EventHostProbed)
			if err != nil {
				return fmt.Errorf("copy the events since: %w", err)
			}
			if copied += tag.RowsAffected(); others != copied {
				return fmt.Errorf("%d other events now, %d copied: not rewritten", others, copied)
			}
			pruned.Kept = copied
		}
		if err := schema.DetachEventPartition(ctx, tx, p.Name); err != nil {
			return busy(err)
		}
		if _, err := tx.Exec(ctx, "ALTER TABLE "+keptID+" RENAME TO "+id); err != nil {
			return err
		}
		// Its indexes take the names the partition's had.
		rows, err := tx.Query(ctx, "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass", id)
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, name := range names {
			if rest, ok := strings.CutPrefix(name, kept); ok {
				if _, err := tx.Exec(ctx, "ALTER INDEX "+pgx.Identifier{name}.Sanitize()+" RENAME TO "+pgx.Identifier{p.Name + rest}.Sanitize()); err != nil {
					return err
				}
			}
		}
		if err := schema.AttachEventPartition(ctx, tx, p); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "ALTER TABLE "+id+" DROP CONSTRAINT bound")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("prune probes of %s: %w", p.Name, err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+id); err != nil {
		return nil, fmt.Errorf("prune probes of %s: analyze: %w", p.Name, err)
	}
	return pruned, nil
}

// ProbesArgs is the periodic job that removes the index's probes older
// than RetentionSeconds from the event log (PruneProbes).
type ProbesArgs struct {
	RetentionSeconds int64 `json:"retention_seconds"`
}

// Kind is "retention.probes".
func (ProbesArgs) Kind() string { return "retention.probes" }

// InsertOpts puts the job on the maintenance queue, one at a time.
func (ProbesArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueMaintenance, MaxAttempts: 3, UniqueOpts: oneAtATime()}
}

type probesWorker struct {
	river.WorkerDefaults[ProbesArgs]
	pool   *pgxpool.Pool
	logger *slog.Logger
}

func (w *probesWorker) Work(ctx context.Context, job *river.Job[ProbesArgs]) error {
	before := time.Now().Add(-time.Duration(job.Args.RetentionSeconds) * time.Second)
	done, err := PruneProbes(ctx, w.pool, before, LockTimeout)
	for _, p := range done {
		w.logger.InfoContext(ctx, "probes removed from the event log", "partition", p.Partition, "probes", p.Probes, "kept", p.Kept)
	}
	if errors.Is(err, ErrPartitionBusy) {
		// The next run (RETENTION_CRON) takes it up where this one stopped.
		w.logger.WarnContext(ctx, "probes' removal gave way to a transaction holding the event log", "error", err)
		return nil
	}
	return err
}

// Timeout lets a rewrite copy a large partition.
func (w *probesWorker) Timeout(*river.Job[ProbesArgs]) time.Duration { return time.Hour }
