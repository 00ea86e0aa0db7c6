package index

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// ChainArgs is the periodic job of the chain reader: every network read
// from its cursor, then the figures counted.
type ChainArgs struct{}

// Kind is "index.chain".
func (ChainArgs) Kind() string { return "index.chain" }

// InsertOpts puts the chain reader on the index queue, at most one per
// minute when inserted by hand (its periodic job is unique by its
// schedule's period instead: ChainPeriodicJobs).
func (ChainArgs) InsertOpts() river.InsertOpts {
	return indexInsertOpts()
}

type chainWorker struct {
	river.WorkerDefaults[ChainArgs]
	reader *ChainReader
}

func (w *chainWorker) Work(ctx context.Context, _ *river.Job[ChainArgs]) error {
	_, err := w.reader.Run(ctx)
	return err
}

// Timeout lets a run read its ranges; a run cut short loses nothing, as
// every range is recorded with its cursor.
func (w *chainWorker) Timeout(*river.Job[ChainArgs]) time.Duration { return 10 * time.Minute }

// RegisterChain returns the function that adds the chain reader's worker.
func RegisterChain(reader *ChainReader) func(*river.Workers) error {
	return func(workers *river.Workers) error {
		return river.AddWorkerSafely(workers, &chainWorker{reader: reader})
	}
}

// ChainPeriodicJobs returns the chain reader's job on its cron schedule
// (INDEX_CHAIN_CRON), also run at start, unique by the schedule's period
// as the index's other jobs are (PeriodicJobs): an "@every 10s" runs every
// 10 seconds, and a schedule they could not keep is refused.
func ChainPeriodicJobs(chainCron string) ([]*river.PeriodicJob, error) {
	sched, period, err := parseSchedule("INDEX_CHAIN_CRON", chainCron, time.Now())
	if err != nil {
		return nil, err
	}
	return []*river.PeriodicJob{
		river.NewPeriodicJob(sched, func() (river.JobArgs, *river.InsertOpts) { return ChainArgs{}, uniqueBy(period) }, &river.PeriodicJobOpts{RunOnStart: true}),
	}, nil
}
