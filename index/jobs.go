package index

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/robfig/cron/v3"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/store"
)

// CrawlArgs is the periodic crawl job: a few pages of each source.
type CrawlArgs struct {
	// FreshFor, when set, makes this the crawl run at start (seconds of
	// the schedule's interval): it runs only when no crawl ran within
	// that long, and queues a liveness pass after it, so that a new
	// service's index is not empty until the schedule's first run.
	FreshFor int64 `json:"fresh_for,omitempty"`
}

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

// DiscoverArgs is the periodic discovery job: a few origins read.
type DiscoverArgs struct{}

// Kind is "index.discover".
func (DiscoverArgs) Kind() string { return "index.discover" }

// InsertOpts puts the discovery on the index queue, at most one per minute.
func (DiscoverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueIndex, MaxAttempts: 3, UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Minute}}
}

type discoverWorker struct {
	river.WorkerDefaults[DiscoverArgs]
	discoverer *Discoverer
}

func (w *discoverWorker) Work(ctx context.Context, _ *river.Job[DiscoverArgs]) error {
	_, err := w.discoverer.Run(ctx)
	return err
}

// Timeout lets a run read its origins with their polite gaps; an origin
// read is recorded on its own.
func (w *discoverWorker) Timeout(*river.Job[DiscoverArgs]) time.Duration { return 10 * time.Minute }

type crawlWorker struct {
	river.WorkerDefaults[CrawlArgs]
	crawler *Crawler
}

func (w *crawlWorker) Work(ctx context.Context, job *river.Job[CrawlArgs]) error {
	if fresh := job.Args.FreshFor; fresh > 0 {
		last, err := store.IndexListingLastAt(ctx, w.crawler.cfg.Pool)
		if err != nil {
			return fmt.Errorf("crawl at start: %w", err)
		}
		if last != nil && time.Since(*last) < time.Duration(fresh)*time.Second {
			return nil
		}
	}
	if err := w.crawler.Run(ctx, nil); err != nil {
		return err
	}
	if job.Args.FreshFor > 0 {
		// The hosts just found are measured now, not at the liveness
		// schedule's first run.
		if _, err := river.ClientFromContext[pgx.Tx](ctx).Insert(ctx, LivenessArgs{}, nil); err != nil {
			return fmt.Errorf("crawl at start: queue liveness: %w", err)
		}
	}
	return nil
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

// Register returns the function that adds the crawl, liveness and
// discovery workers.
func Register(crawler *Crawler, prober *Prober, discoverer *Discoverer) func(*river.Workers) error {
	return func(workers *river.Workers) error {
		if err := river.AddWorkerSafely(workers, &crawlWorker{crawler: crawler}); err != nil {
			return err
		}
		if err := river.AddWorkerSafely(workers, &discoverWorker{discoverer: discoverer}); err != nil {
			return err
		}
		return river.AddWorkerSafely(workers, &livenessWorker{prober: prober})
	}
}

// PeriodicJobs returns the crawl and liveness jobs on their standard cron
// schedules (INDEX_CRON, LIVENESS_CRON), the crawl also at start when none
// ran within its schedule's interval, followed by a liveness pass; and the
// discovery from origins on the crawl's schedule.
func PeriodicJobs(crawlCron, livenessCron string) ([]*river.PeriodicJob, error) {
	crawl, err := cron.ParseStandard(crawlCron)
	if err != nil {
		return nil, fmt.Errorf("INDEX_CRON %q: %w", crawlCron, err)
	}
	live, err := cron.ParseStandard(livenessCron)
	if err != nil {
		return nil, fmt.Errorf("LIVENESS_CRON %q: %w", livenessCron, err)
	}
	// At start (of the leader) a crawl runs unless one ran within the
	// schedule's interval; later runs follow the schedule.
	now := time.Now()
	interval := crawl.Next(crawl.Next(now)).Sub(crawl.Next(now))
	var started atomic.Bool
	crawlArgs := func() (river.JobArgs, *river.InsertOpts) {
		if started.CompareAndSwap(false, true) {
			return CrawlArgs{FreshFor: int64(interval / time.Second)}, nil
		}
		return CrawlArgs{}, nil
	}
	return []*river.PeriodicJob{
		river.NewPeriodicJob(crawl, crawlArgs, &river.PeriodicJobOpts{RunOnStart: true}),
		river.NewPeriodicJob(live, func() (river.JobArgs, *river.InsertOpts) { return LivenessArgs{}, nil }, nil),
		river.NewPeriodicJob(crawl, func() (river.JobArgs, *river.InsertOpts) { return DiscoverArgs{}, nil }, nil),
	}, nil
}
