package index

import (
	"context"
	"fmt"
	"strings"
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

// InsertOpts puts the crawl on the index queue, at most one per minute
// when inserted by hand (the periodic job is unique by its schedule's
// period, uniqueBy).
func (CrawlArgs) InsertOpts() river.InsertOpts {
	return indexInsertOpts()
}

// LivenessArgs is the periodic liveness job: every host probed once.
type LivenessArgs struct{}

// Kind is "index.liveness".
func (LivenessArgs) Kind() string { return "index.liveness" }

// InsertOpts puts the probes on the index queue, at most one per minute
// when inserted by hand (the periodic job is unique by its schedule's
// period, uniqueBy).
func (LivenessArgs) InsertOpts() river.InsertOpts {
	return indexInsertOpts()
}

// DiscoverArgs is the periodic discovery job: a few origins read.
type DiscoverArgs struct{}

// Kind is "index.discover".
func (DiscoverArgs) Kind() string { return "index.discover" }

// InsertOpts puts the discovery on the index queue, at most one per minute.
func (DiscoverArgs) InsertOpts() river.InsertOpts {
	return indexInsertOpts()
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

// MinSchedulePeriod is the shortest gap between two runs a schedule may
// ask: River keeps periodic jobs unique by period, and its shortest period
// is a second.
const MinSchedulePeriod = time.Second

// SchedulePeriod returns the shortest gap between two runs of sched over
// its next runs (a day's worth, at most 10,000), from now: the period by
// which its jobs are kept unique, so that two runs never fall in one
// period (one would be dropped) and two insertions for one run (a restart,
// a second leader) do.
func SchedulePeriod(sched cron.Schedule, now time.Time) time.Duration {
	prev := sched.Next(now)
	shortest := time.Duration(0)
	for i := 0; i < 10_000; i++ {
		next := sched.Next(prev)
		if next.IsZero() {
			break
		}
		if gap := next.Sub(prev); shortest == 0 || gap < shortest {
			shortest = gap
		}
		if next.Sub(now) > 24*time.Hour && i > 0 {
			break
		}
		prev = next
	}
	return shortest
}

// parseSchedule reads a standard cron schedule (setting names the
// setting) and its period, refusing one whose runs come closer than
// MinSchedulePeriod: its jobs could not run as often as it asks.
func parseSchedule(setting, spec string, now time.Time) (cron.Schedule, time.Duration, error) {
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %q: %w", setting, spec, err)
	}
	// The cron library runs "@every" in whole seconds, at least one: a
	// finer one would silently run at another pace.
	if every, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
		if d, err := time.ParseDuration(strings.TrimSpace(every)); err == nil && (d < MinSchedulePeriod || d%time.Second != 0) {
			return nil, 0, fmt.Errorf("%s %q: runs %s apart, and the index's jobs run in whole seconds, at least %s apart: they could not run as often as asked",
				setting, spec, d, MinSchedulePeriod)
		}
	}
	period := SchedulePeriod(sched, now)
	if period < MinSchedulePeriod {
		return nil, 0, fmt.Errorf("%s %q: runs %s apart, and the index's jobs are kept unique by periods of at least %s: they could not run as often as asked",
			setting, spec, period, MinSchedulePeriod)
	}
	return sched, period, nil
}

// CheckSchedule refuses a schedule of the index's jobs (setting names it:
// INDEX_CRON, LIVENESS_CRON) that they could not keep, saying why.
func CheckSchedule(setting, spec string) error {
	_, _, err := parseSchedule(setting, spec, time.Now())
	return err
}

// indexInsertOpts are the insert options of every index job inserted by
// hand: the index queue, three attempts, one a minute by arguments (a
// periodic job's own uniqueBy replaces the minute by its schedule's
// period).
func indexInsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueIndex, MaxAttempts: 3, UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Minute}}
}

// uniqueBy returns the insert options of a periodic job whose schedule
// runs period apart: unique by arguments within period, so that every run
// of the schedule inserts its job and only one insertion per run does.
func uniqueBy(period time.Duration) *river.InsertOpts {
	return &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: period}}
}

// PeriodicJobs returns the crawl and liveness jobs on their standard cron
// schedules (INDEX_CRON, LIVENESS_CRON), the crawl also at start when none
// ran within its schedule's interval, followed by a liveness pass; and the
// discovery from origins on the crawl's schedule. Each job is unique by
// its schedule's period (SchedulePeriod), so an "@every 10s" runs every 10
// seconds; a schedule whose runs come closer than MinSchedulePeriod is
// refused.
func PeriodicJobs(crawlCron, livenessCron string) ([]*river.PeriodicJob, error) {
	now := time.Now()
	crawl, crawlPeriod, err := parseSchedule("INDEX_CRON", crawlCron, now)
	if err != nil {
		return nil, err
	}
	live, livePeriod, err := parseSchedule("LIVENESS_CRON", livenessCron, now)
	if err != nil {
		return nil, err
	}
	// At start (of the leader) a crawl runs unless one ran within the
	// schedule's interval; later runs follow the schedule.
	interval := crawl.Next(crawl.Next(now)).Sub(crawl.Next(now))
	var started atomic.Bool
	crawlArgs := func() (river.JobArgs, *river.InsertOpts) {
		if started.CompareAndSwap(false, true) {
			return CrawlArgs{FreshFor: int64(interval / time.Second)}, uniqueBy(crawlPeriod)
		}
		return CrawlArgs{}, uniqueBy(crawlPeriod)
	}
	return []*river.PeriodicJob{
		river.NewPeriodicJob(crawl, crawlArgs, &river.PeriodicJobOpts{RunOnStart: true}),
		river.NewPeriodicJob(live, func() (river.JobArgs, *river.InsertOpts) { return LivenessArgs{}, uniqueBy(livePeriod) }, nil),
		river.NewPeriodicJob(crawl, func() (river.JobArgs, *river.InsertOpts) { return DiscoverArgs{}, uniqueBy(crawlPeriod) }, nil),
	}, nil
}
