package index

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
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

// TestJobs runs the crawl and liveness jobs on a River client, as the
// worker does.
func TestJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	srv, client, _ := sellers(t)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	var items []map[string]any
	for i := range 25 {
		items = append(items, item(fmt.Sprintf("http://live%d.test:%s/r%d", i%5, port, i), "1000"))
	}
	src := httptest.NewServer(&listing{items: items})
	defer src.Close()

	crawler := NewCrawler(CrawlerConfig{Pool: db.Pool, Sources: []string{src.URL}, PageSize: 10, PagesPerRun: 2, Gap: -1})
	prober := NewProber(ProberConfig{Pool: db.Pool, Fetch: client, Timeout: time.Second})
	workers := river.NewWorkers()
	require.NoError(t, Register(crawler, prober, NewDiscoverer(DiscovererConfig{Pool: db.Pool, Fetch: client}))(workers))
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{
		Queues:            map[string]river.QueueConfig{jobs.QueueIndex: {MaxWorkers: 2}},
		Workers:           workers,
		FetchPollInterval: 100 * time.Millisecond,
		TestOnly:          true,
		Logger:            slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
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
	srv, client, _ := sellers(t)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	var items []map[string]any
	for i := range 6 {
		items = append(items, item(fmt.Sprintf("http://live%d.test:%s/r%d", i%3, port, i), "1000"))
	}
	list := &listing{items: items}
	src := httptest.NewServer(list)
	defer src.Close()

	start := func() (stop func()) {
		t.Helper()
		crawler := NewCrawler(CrawlerConfig{Pool: db.Pool, Sources: []string{src.URL}, PageSize: 10, PagesPerRun: 2, Gap: -1})
		prober := NewProber(ProberConfig{Pool: db.Pool, Fetch: client, Timeout: time.Second})
		workers := river.NewWorkers()
		require.NoError(t, Register(crawler, prober, NewDiscoverer(DiscovererConfig{Pool: db.Pool, Fetch: client}))(workers))
		periodic, err := PeriodicJobs("*/15 * * * *", "*/30 * * * *")
		require.NoError(t, err)
		rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{
			Queues:            map[string]river.QueueConfig{jobs.QueueIndex: {MaxWorkers: 2}},
			Workers:           workers,
			PeriodicJobs:      periodic,
			FetchPollInterval: 100 * time.Millisecond,
			TestOnly:          true,
			Logger:            slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
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
