package index

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/robfig/cron/v3"

	"github.com/x402d/x402d/jobs"
)

// CrawlArgs is the periodic crawl job: a few pages of each source.
type CrawlArgs struct{}

// Kind is "index.crawl".
func (CrawlArgs) Kind() string { return "index.crawl" }

// InsertOpts puts the crawl on the index queue, at most one per minute.
func (CrawlArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueIndex, MaxAttempts: 3, UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Minute}}
}

// LivenessArgs is the periodic liveness job: every host probed once.
type LivenessArgs struct{}

// Kind is "index.liveness".
func (LivenessArgs) Kind() string { return "index.liveness" }

// InsertOpts puts the probes on the index queue, at most one per minute.
func (LivenessArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueIndex, MaxAttempts: 3, UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Minute}}
}

type crawlWorker struct {
	river.WorkerDefaults[CrawlArgs]
	crawler *Crawler
}

func (w *crawlWorker) Work(ctx context.Context, _ *river.Job[CrawlArgs]) error {
	return w.crawler.Run(ctx, nil)
}

// Timeout lets a run read its pages with their polite gaps; a run cut
// short loses nothing, as every page is recorded on its own.
func (w *crawlWorker) Timeout(*river.Job[CrawlArgs]) time.Duration { return 10 * time.Minute }

type livenessWorker struct {
	river.WorkerDefaults[LivenessArgs]
	prober *Prober
}

func (w *livenessWorker) Work(ctx context.Context, _ *river.Job[LivenessArgs]) error {
	_, err := w.prober.ProbeAll(ctx)
	return err
}

// Timeout lets a liveness run take as long as its probes need.
func (w *livenessWorker) Timeout(*river.Job[LivenessArgs]) time.Duration { return 30 * time.Minute }

// Register returns the function that adds the crawl and liveness workers.
func Register(crawler *Crawler, prober *Prober) func(*river.Workers) error {
	return func(workers *river.Workers) error {
		if err := river.AddWorkerSafely(workers, &crawlWorker{crawler: crawler}); err != nil {
			return err
		}
		return river.AddWorkerSafely(workers, &livenessWorker{prober: prober})
	}
}

// PeriodicJobs returns the crawl and liveness jobs on their standard cron
// schedules (INDEX_CRON, LIVENESS_CRON).
func PeriodicJobs(crawlCron, livenessCron string) ([]*river.PeriodicJob, error) {
	crawl, err := cron.ParseStandard(crawlCron)
	if err != nil {
		return nil, fmt.Errorf("INDEX_CRON %q: %w", crawlCron, err)
	}
	live, err := cron.ParseStandard(livenessCron)
	if err != nil {
		return nil, fmt.Errorf("LIVENESS_CRON %q: %w", livenessCron, err)
	}
	return []*river.PeriodicJob{
		river.NewPeriodicJob(crawl, func() (river.JobArgs, *river.InsertOpts) { return CrawlArgs{}, nil }, nil),
		river.NewPeriodicJob(live, func() (river.JobArgs, *river.InsertOpts) { return LivenessArgs{}, nil }, nil),
	}, nil
}
