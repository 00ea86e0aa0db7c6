package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/worker"
)

type reclaimArgs struct{}

func (reclaimArgs) Kind() string { return "reclaim_test" }

// TestReclaimer puts running jobs in the database as processes leave them:
// one of a process gone (its last attempt's client has no presence
// session), one with no attempt left, one of a live process (present), and
// one of a process of an earlier release (River's default client id). The
// jobs of the process gone are taken up once it has been gone for After (not
// at first sight), on an injected clock, whatever the jobs' timeout: the
// first made available, the second discarded, each with an error; the
// others are left running.
func TestReclaimer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)

	live := worker.NewClientID()
	present, err := worker.NewReclaimer(&worker.ReclaimConfig{Pool: db.Pool, ClientID: live, After: time.Hour})
	require.NoError(t, err)
	require.NoError(t, present.Start(ctx))
	t.Cleanup(present.Stop)

	dead := worker.NewClientID()
	running := func(client string, attempt, maxAttempts int) int64 {
		res, err := rc.Insert(ctx, reclaimArgs{}, &river.InsertOpts{MaxAttempts: maxAttempts})
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = $2, attempted_at = now(),
			attempted_by = ARRAY['x402d_earlier', $3] WHERE id = $1`, res.Job.ID, attempt, client)
		require.NoError(t, err)
		return res.Job.ID
	}
	retried := running(dead, 1, 3)
	exhausted := running(dead, 3, 3)
	alive := running(live, 1, 3)
	earlier := running("myhost_2026_11_27T08_00_00_000000", 1, 3)

	clk := clock.NewFake(time.Now())
	sweeper, err := worker.NewReclaimer(&worker.ReclaimConfig{Pool: db.Pool, ClientID: worker.NewClientID(), After: 15 * time.Second,
		Clock: clk})
	require.NoError(t, err)
	state := func(id int64) (string, int) {
		var s string
		var errs int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT state, coalesce(cardinality(errors), 0) FROM river_job WHERE id = $1", id).Scan(&s, &errs))
		return s, errs
	}
	require.NoError(t, sweeper.Sweep(ctx))
	clk.Advance(14 * time.Second)
	require.NoError(t, sweeper.Sweep(ctx))
	for _, id := range []int64{retried, exhausted, alive, earlier} {
		s, _ := state(id)
		require.Equal(t, "running", s, "job %d taken up before its process was gone for After", id)
	}
	clk.Advance(time.Second)
	require.NoError(t, sweeper.Sweep(ctx))
	s, errs := state(retried)
	require.Equal(t, "available", s)
	require.Equal(t, 1, errs)
	s, errs = state(exhausted)
	require.Equal(t, "discarded", s)
	require.Equal(t, 1, errs)
	for _, id := range []int64{alive, earlier} {
		s, _ := state(id)
		require.Equal(t, "running", s, "job %d", id)
	}
}

// TestReclaimerLostCompletions puts running jobs of this very process in
// the database, as River's completer leaves them when it gives up while the
// database is away (a failover): a job the process works is left running,
// and so is one whose work ended moments ago (its completion may be on its
// way); one whose work ended After ago, and one the process never worked,
// are taken up again.
func TestReclaimerLostCompletions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)

	now := time.Now()
	clk := clock.NewFake(now)
	self := worker.NewClientID()
	running := worker.NewRunning(clk)
	// Every is long: the test sweeps on its own, the fake clock moving
	// past no round of Start's.
	r, err := worker.NewReclaimer(&worker.ReclaimConfig{Pool: db.Pool, ClientID: self, After: 15 * time.Second, Every: time.Hour,
		Running: running, Clock: clk})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(r.Stop)

	job := func(attemptedAgo time.Duration) int64 {
		res, err := rc.Insert(ctx, reclaimArgs{}, &river.InsertOpts{MaxAttempts: 3})
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = $2,
			attempted_by = ARRAY[$3] WHERE id = $1`, res.Job.ID, now.Add(-attemptedAgo), self)
		require.NoError(t, err)
		return res.Job.ID
	}
	worked := job(time.Minute)
	running.Start(worked)
	endedLately := job(time.Minute)
	running.Start(endedLately)
	running.End(endedLately)
	endedLong := job(time.Minute)
	running.Start(endedLong)
	running.End(endedLong)
	never := job(time.Minute)

	clk.Advance(10 * time.Second)
	running.Start(endedLately)
	running.End(endedLately)
	clk.Advance(6 * time.Second)
	now = clk.Now()
	fetched := job(time.Second)
	require.NoError(t, r.Sweep(ctx))
	state := func(id int64) string {
		var s string
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT state FROM river_job WHERE id = $1", id).Scan(&s))
		return s
	}
	require.Equal(t, "running", state(worked), "a job worked")
	require.Equal(t, "running", state(endedLately), "a job ended moments ago")
	require.Equal(t, "running", state(fetched), "a job fetched moments ago")
	require.Equal(t, "available", state(endedLong), "a job ended After ago")
	require.Equal(t, "available", state(never), "a job never worked")
}
