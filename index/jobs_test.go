package index

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/jobs"
)

func TestPeriodicJobs(t *testing.T) {
	t.Parallel()
	periodic, err := PeriodicJobs("*/15 * * * *", "*/30 * * * *")
	require.NoError(t, err)
	require.Len(t, periodic, 3)
	_, err = PeriodicJobs("every now and then", "*/30 * * * *")
	require.ErrorContains(t, err, "INDEX_CRON")
	_, err = PeriodicJobs("*/15 * * * *", "61 * * * *")
	require.ErrorContains(t, err, "LIVENESS_CRON")
}

// liveItems lists n resources, on the sellers live0.test to
// live<hosts-1>.test in turn.
func liveItems(listed *listedSellers, n, hosts int) []map[string]any {
	var items []map[string]any
	for i := range n {
		items = append(items, item(listed.url(fmt.Sprintf("live%d", i%hosts), fmt.Sprintf("/r%d", i)), "1000"))
	}
	return items
}

// indexRiver returns a River client, not started, that runs the index's
// jobs as the worker does: crawls of two pages of ten from listed's source,
// probes and discovery through its client, and periodic as its periodic
// jobs (none when nil).
func indexRiver(t *testing.T, db *dbtest.DB, listed *listedSellers, periodic []*river.PeriodicJob) *river.Client[pgx.Tx] {
	t.Helper()
	crawler := NewCrawler(&CrawlerConfig{Pool: db.Pool, Sources: []string{listed.src}, PageSize: 10, PagesPerRun: 2, Gap: -1})
	workers := river.NewWorkers()
	require.NoError(t, Register(crawler, newProber(db, listed.client), NewDiscoverer(&DiscovererConfig{Pool: db.Pool, Fetch: listed.client}))(workers))
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{
		Queues:            map[string]river.QueueConfig{jobs.QueueIndex: {MaxWorkers: 2}},
		Workers:           workers,
		PeriodicJobs:      periodic,
		FetchPollInterval: 100 * time.Millisecond,
		TestOnly:          true,
		Logger:            slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	return rc
}

// TestJobs runs the crawl and liveness jobs on a River client, as the
// worker does.
func TestJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	listed := newListedSellers(t)
	listed.setItems(liveItems(listed, 25, 5)...)

	rc := indexRiver(t, db, listed, nil)
	completed, cancel := rc.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()
	require.NoError(t, rc.Start(ctx))
	defer func() { require.NoError(t, rc.Stop(context.WithoutCancel(ctx))) }()

	run := func(args river.JobArgs) {
		t.Helper()
		res, err := rc.Insert(ctx, args, nil)
		require.NoError(t, err)
		require.False(t, res.UniqueSkippedAsDuplicate)
		select {
		case e := <-completed:
			require.Equal(t, river.EventKindJobCompleted, e.Kind, "%+v", e.Job.Errors)
			require.Equal(t, args.Kind(), e.Job.Kind)
			require.Equal(t, jobs.QueueIndex, e.Job.Queue)
		case <-time.After(20 * time.Second):
			t.Fatal("the job did not finish")
		}
		// The jobs are unique per minute: clear the way for the next run.
		_, err = rc.JobDelete(ctx, res.Job.ID)
		require.NoError(t, err)
	}
	r := NewReader(db.Pool, nil)
	run(CrawlArgs{}) // two pages of ten
	s, err := r.Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, 20, s.ServicesIndexed)
	require.Equal(t, Crawl{Cursor: 20, Total: 25, PagesDone: 2, LastAt: s.Crawl.LastAt}, s.Crawl)
	run(CrawlArgs{}) // the last page ends the pass
	run(LivenessArgs{})
	s, err = r.Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, 25, s.ServicesIndexed)
	require.Equal(t, 1, s.Crawl.FullScans)
	require.Equal(t, Liveness{Measured: 5, Live: 5}, s.Liveness)
}

// TestCrawlAtStart starts the periodic jobs as the worker does: the leader
// crawls at once and measures liveness after, so that a new service's index
// is not empty until the schedule's first run; started again within the
// schedule's interval, it does not crawl again.
func TestCrawlAtStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	listed := newListedSellers(t)
	listed.setItems(liveItems(listed, 6, 3)...)
	list := listed.list

	start := func() (stop func()) {
		t.Helper()
		periodic, err := PeriodicJobs("*/15 * * * *", "*/30 * * * *")
		require.NoError(t, err)
		rc := indexRiver(t, db, listed, periodic)
		require.NoError(t, rc.Start(ctx))
		var once sync.Once
		stop = func() { once.Do(func() { require.NoError(t, rc.Stop(context.WithoutCancel(ctx))) }) }
		t.Cleanup(stop)
		return stop
	}
	r := NewReader(db.Pool, nil)
	stop := start()
	require.Eventually(t, func() bool {
		s, err := r.Summary(ctx)
		require.NoError(t, err)
		return s.ServicesIndexed == 6 && s.Liveness.Measured == 3
	}, 30*time.Second, 50*time.Millisecond, "the index was not filled at start")
	list.mu.Lock()
	pages := list.requests
	list.mu.Unlock()

	// Started again within the schedule's interval (a restart, a new
	// leader): the crawl at start finds the last one fresh and reads
	// nothing. (The jobs are unique per minute: the first's rows go.)
	stop()
	_, err := db.Pool.Exec(ctx, `DELETE FROM river_job WHERE kind IN ('index.crawl', 'index.liveness')`)
	require.NoError(t, err)
	start()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'index.crawl' AND state = 'completed'`).Scan(&n))
		return n == 1
	}, 30*time.Second, 50*time.Millisecond, "the second start's crawl did not run")
	list.mu.Lock()
	defer list.mu.Unlock()
	require.Equal(t, pages, list.requests, "a fresh index was crawled again at start")
}

// TestSchedulesRun starts the index's periodic jobs in a real River client
// with LIVENESS_CRON "@every 1s": two of the schedule's liveness runs
// complete within seconds, each run its own job (unique by the schedule's
// period). Unique per minute instead (the options of a job inserted by
// hand), the schedule's runs within a minute are one job: the others are
// dropped as duplicates.
func TestSchedulesRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// periodicJobs counts the liveness jobs the schedule inserted (River
	// marks them periodic), in state when given.
	periodicJobs := func(db *dbtest.DB, state string) int {
		t.Helper()
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job
			WHERE kind = $1 AND metadata @> '{"periodic": true}' AND ($2 = '' OR state = $2::river_job_state)`,
			LivenessArgs{}.Kind(), state).Scan(&n))
		return n
	}
	start := func(t *testing.T, db *dbtest.DB, periodic []*river.PeriodicJob) {
		t.Helper()
		rc := indexRiver(t, db, newListedSellers(t), periodic)
		require.NoError(t, rc.Start(ctx))
		t.Cleanup(func() { require.NoError(t, rc.Stop(context.WithoutCancel(ctx))) })
	}

	t.Run("UniqueBySchedule", func(t *testing.T) {
		t.Parallel()
		db := dbtest.Schema(ctx, t)
		periodic, err := PeriodicJobs("@hourly", "@every 1s")
		require.NoError(t, err)
		start(t, db, periodic)
		require.Eventually(t, func() bool { return periodicJobs(db, "completed") >= 2 }, 15*time.Second, 50*time.Millisecond,
			"two runs of @every 1s")
	})

	t.Run("UniquePerMinute", func(t *testing.T) {
		t.Parallel()
		db := dbtest.Schema(ctx, t)
		sched, err := cron.ParseStandard("@every 1s")
		require.NoError(t, err)
		var runs atomic.Int32
		start(t, db, []*river.PeriodicJob{river.NewPeriodicJob(sched, func() (river.JobArgs, *river.InsertOpts) {
			runs.Add(1)
			return LivenessArgs{}, nil // LivenessArgs.InsertOpts: unique per minute
		}, nil)})
		// A run's job is inserted (or dropped) before the next run begins:
		// four runs, a second apart, span two minutes at most, and have
		// inserted at least three times.
		require.Eventually(t, func() bool { return runs.Load() >= 4 }, 15*time.Second, 50*time.Millisecond)
		n := periodicJobs(db, "")
		require.LessOrEqual(t, n, 2, "one job a minute")
		require.Less(t, n, int(runs.Load())-1, "runs were dropped")
	})
}
