// Package retention keeps the database's size in hand. A paid call's result
// is kept RESULT_TTL (docs/configuration.md): a River periodic job
// (RETENTION_CRON, hourly) clears the results of older calls, whose ledger
// fields stay, and a poll of such a call answers 410 result_expired. The
// event log is partitioned by time (EVENTS_PARTITION): the same job creates
// its partitions ahead, and Archive writes whole old partitions to files and
// drops them (x402d archive), Restore brings one back; the job also rewrites
// the partitions older than INDEX_PROBE_RETENTION without the index's
// liveness probes (PruneProbes). River removes its own completed jobs after
// JOB_RETENTION (worker.Config.JobRetention).
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/robfig/cron/v3"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/schema"
	"github.com/x402d/x402d/store"
)

// sweepBatch is how many results one statement of a sweep lets go.
const sweepBatch = 1000

// ResultsArgs is the periodic job that lets go of the results older than
// TTLSeconds.
type ResultsArgs struct {
	TTLSeconds int64 `json:"ttl_seconds"`
}

// Kind is "retention.results".
func (ResultsArgs) Kind() string { return "retention.results" }

// InsertOpts puts the sweep on the maintenance queue, one at a time.
func (ResultsArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueMaintenance, MaxAttempts: 3, UniqueOpts: oneAtATime()}
}

// oneAtATime keeps a maintenance job from being queued while another with
// the same args waits or runs; a finished one does not count.
func oneAtATime() river.UniqueOpts {
	return river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled,
	}}
}

type resultsWorker struct {
	river.WorkerDefaults[ResultsArgs]
	pool   *pgxpool.Pool
	logger *slog.Logger
}

func (w *resultsWorker) Work(ctx context.Context, job *river.Job[ResultsArgs]) error {
	cutoff := time.Now().Add(-time.Duration(job.Args.TTLSeconds) * time.Second)
	n, err := store.ResultsExpire(ctx, w.pool, cutoff, sweepBatch)
	if err != nil {
		return err
	}
	if n > 0 {
		w.logger.InfoContext(ctx, "results expired", "calls", n, "created_before", cutoff.UTC().Format(time.RFC3339))
	}
	return nil
}

// Register returns the function that adds the retention workers.
func Register(pool *pgxpool.Pool, logger *slog.Logger) func(*river.Workers) error {
	return func(workers *river.Workers) error {
		if err := river.AddWorkerSafely(workers, &resultsWorker{pool: pool, logger: logger}); err != nil {
			return err
		}
		if err := river.AddWorkerSafely(workers, &probesWorker{pool: pool, logger: logger}); err != nil {
			return err
		}
		return river.AddWorkerSafely(workers, &partitionsWorker{pool: pool, logger: logger})
	}
}

// PartitionsArgs is the periodic job that creates the event log's
// partitions ahead.
type PartitionsArgs struct {
	Period schema.Period `json:"period"`
}

// Kind is "retention.partitions".
func (PartitionsArgs) Kind() string { return "retention.partitions" }

// InsertOpts puts the job on the maintenance queue, one at a time.
func (PartitionsArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueMaintenance, MaxAttempts: 5, UniqueOpts: oneAtATime()}
}

type partitionsWorker struct {
	river.WorkerDefaults[PartitionsArgs]
	pool   *pgxpool.Pool
	logger *slog.Logger
}

func (w *partitionsWorker) Work(ctx context.Context, job *river.Job[PartitionsArgs]) error {
	err := EnsurePartitions(ctx, w.pool, job.Args.Period, LockTimeout, w.logger)
	if errors.Is(err, ErrPartitionBusy) {
		// The partitions are made partitionsAhead periods ahead: the next
		// run (RETENTION_CRON) has time to make this one.
		w.logger.WarnContext(ctx, "event log partitions' creation gave way to a transaction holding the event log", "error", err)
		return nil
	}
	return err
}

// partitionsAhead is how many whole periods after the current one have
// their partition of the event log ready.
const partitionsAhead = 2

// EnsurePartitions creates the event log's partitions of period up to
// partitionsAhead periods after the current one. Creating one takes the
// log's lock, which appends queue behind: unless lockTimeout is 0 (a
// process starting), each lock waits at most lockTimeout (LockTimeout),
// else EnsurePartitions gives up with ErrPartitionBusy, nothing created.
func EnsurePartitions(ctx context.Context, pool *pgxpool.Pool, period schema.Period, lockTimeout time.Duration, logger *slog.Logger) error {
	until := time.Now()
	for range partitionsAhead {
		until = period.Next(until)
	}
	var db beginner = pool
	if lockTimeout > 0 {
		db = lockTimed{pool: pool, timeout: lockTimeout}
	}
	created, err := schema.EnsureEventPartitions(ctx, db, period, until)
	if err != nil {
		return busy(err)
	}
	if len(created) > 0 {
		logger.InfoContext(ctx, "event log partitions created", "partitions", created)
	}
	return nil
}

// PeriodicJobs returns the results sweep, the creation of the event log's
// partitions of period and, unless probes is 0, the removal of the index's
// probes from the log (PruneProbes), on schedule (a standard cron
// expression, RETENTION_CRON) and when the leader starts; the sweep lets go
// of the results older than ttl, the removal of the probes older than
// probes.
func PeriodicJobs(schedule string, ttl time.Duration, period schema.Period, probes time.Duration) ([]*river.PeriodicJob, error) {
	sched, err := cron.ParseStandard(schedule)
	if err != nil {
		return nil, fmt.Errorf("RETENTION_CRON %q: %w", schedule, err)
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("RESULT_TTL %s: must be positive", ttl)
	}
	if probes < 0 {
		return nil, fmt.Errorf("INDEX_PROBE_RETENTION %s: must not be negative", probes)
	}
	args := ResultsArgs{TTLSeconds: int64(ttl / time.Second)}
	parts := PartitionsArgs{Period: period}
	periodic := []*river.PeriodicJob{
		river.NewPeriodicJob(sched, func() (river.JobArgs, *river.InsertOpts) { return args, nil }, &river.PeriodicJobOpts{RunOnStart: true}),
		river.NewPeriodicJob(sched, func() (river.JobArgs, *river.InsertOpts) { return parts, nil }, &river.PeriodicJobOpts{RunOnStart: true}),
	}
	if probes > 0 {
		pruned := ProbesArgs{RetentionSeconds: int64(probes / time.Second)}
		periodic = append(periodic, river.NewPeriodicJob(sched, func() (river.JobArgs, *river.InsertOpts) { return pruned, nil }, &river.PeriodicJobOpts{RunOnStart: true}))
	}
	return periodic, nil
}
