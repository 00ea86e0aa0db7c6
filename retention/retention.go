// Package retention lets go of what the service keeps only for a time. A
// paid call's result is kept RESULT_TTL (30 days by default): a River
// periodic job (RETENTION_CRON, hourly) clears the results of older calls,
// whose ledger fields stay, and a poll of such a call answers 410
// result_expired. River removes its own completed jobs after JOB_RETENTION
// (worker.Config.CompletedJobRetention).
package retention

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/robfig/cron/v3"

	"github.com/x402d/x402d/jobs"
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

// InsertOpts puts the sweep on the maintenance queue, at most one a minute.
func (ResultsArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueMaintenance, MaxAttempts: 3, UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Minute}}
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
		return river.AddWorkerSafely(workers, &resultsWorker{pool: pool, logger: logger})
	}
}

// PeriodicJobs returns the results sweep on schedule (a standard cron
// expression, RETENTION_CRON), letting go of results older than ttl; it
// also runs when the leader starts.
func PeriodicJobs(schedule string, ttl time.Duration) ([]*river.PeriodicJob, error) {
	sched, err := cron.ParseStandard(schedule)
	if err != nil {
		return nil, fmt.Errorf("RETENTION_CRON %q: %w", schedule, err)
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("RESULT_TTL %s: must be positive", ttl)
	}
	args := ResultsArgs{TTLSeconds: int64(ttl / time.Second)}
	return []*river.PeriodicJob{
		river.NewPeriodicJob(sched, func() (river.JobArgs, *river.InsertOpts) { return args, nil }, &river.PeriodicJobOpts{RunOnStart: true}),
	}, nil
}
