package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	mark, err := store.RetentionMarkGet(ctx, pool, store.RetentionProbes)
	if err != nil {
		return nil, fmt.Errorf("prune probes: %w", err)
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
		if err := store.RetentionMarkAdvance(ctx, pool, store.RetentionProbes, p.To); err != nil {
			return done, fmt.Errorf("prune probes: %w", err)
		}
	}
	return done, nil
}

// pruneProbesOf rewrites partition p without its probes (PruneProbes), or
// returns nil when it holds none.
func pruneProbesOf(ctx context.Context, pool *pgxpool.Pool, p schema.Partition, lockTimeout time.Duration) (*PrunedPartition, error) {
	found, err := store.EventPartitionHasType(ctx, pool, p.Name, store.EventHostProbed)
	if err != nil {
		return nil, fmt.Errorf("prune probes: %w", err)
	}
	if !found {
		return nil, nil
	}
	kept := p.Name + "_kept"
	// The copy, outside any lock: the partition's range has ended, so few
	// events if any are appended to it meanwhile (those are copied below).
	var copied int64
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := store.EventCopyCreate(ctx, tx, kept, p.From, p.To); err != nil {
			return err
		}
		copied, err = store.EventCopyFill(ctx, tx, p.Name, kept, store.EventHostProbed)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("prune probes of %s: %w", p.Name, err)
	}
	pruned := &PrunedPartition{Partition: p.Name, Kept: copied}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lockEnded(ctx, tx, p.Name, lockTimeout); err != nil {
			return busy(err)
		}
		others, probes, err := store.EventPartitionCountType(ctx, tx, p.Name, store.EventHostProbed)
		if err != nil {
			return err
		}
		pruned.Probes = probes
		if others != copied {
			// Events committed into the partition since the copy: copied
			// now, the partition locked.
			since, err := store.EventCopyFillSince(ctx, tx, p.Name, kept, store.EventHostProbed)
			if err != nil {
				return err
			}
			if copied += since; others != copied {
				return fmt.Errorf("%d other events now, %d copied: not rewritten", others, copied)
			}
			pruned.Kept = copied
		}
		if err := schema.DetachEventPartition(ctx, tx, p.Name); err != nil {
			return busy(err)
		}
		// The copy takes the partition's name, its indexes theirs.
		if err := store.EventCopyReplace(ctx, tx, kept, p.Name); err != nil {
			return err
		}
		if err := schema.AttachEventPartition(ctx, tx, p); err != nil {
			return err
		}
		return store.EventPartitionUnbound(ctx, tx, p.Name)
	})
	if err != nil {
		return nil, fmt.Errorf("prune probes of %s: %w", p.Name, err)
	}
	if err := store.EventPartitionAnalyze(ctx, pool, p.Name); err != nil {
		return nil, fmt.Errorf("prune probes: %w", err)
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
