package worker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/startstop"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
)

// DefaultReclaimAfter is ReclaimConfig.After's default.
const DefaultReclaimAfter = 15 * time.Second

// clientIDPrefix starts the River client id of every process of this
// release (NewClientID): a job whose last attempt names such a client is
// reclaimed once its process is gone. A job of a process of an earlier
// release, whose id is River's default, is left to River's rescuer.
const clientIDPrefix = "x402d_"

// NewClientID returns a River client id for this process: clientIDPrefix
// and 12 random bytes in hex, short enough to be a Postgres application_name
// whole (63 bytes).
func NewClientID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return clientIDPrefix + hex.EncodeToString(b[:])
}

// Running is the set of jobs this process is working (its middleware, which
// NewClient adds when Config.Running is set, keeps it), and when those it
// worked last ended: a job the database says this process runs, which it
// neither works nor ended lately, lost its completion (River's completer
// gives up after a few seconds of a database away, as in a failover) and is
// taken up again by the Reclaimer. Its methods are safe for concurrent use.
type Running struct {
	mu    sync.Mutex
	jobs  map[int64]struct{}
	ended map[int64]time.Time
	clock clock.Clock
}

// NewRunning returns an empty Running on clk (nil: clock.Real()).
func NewRunning(clk clock.Clock) *Running {
	return &Running{jobs: map[int64]struct{}{}, ended: map[int64]time.Time{}, clock: clock.Or(clk)}
}

// Start records that job id is being worked.
func (r *Running) Start(id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.jobs[id] = struct{}{}
	delete(r.ended, id)
}

// End records that the work of job id ended.
func (r *Running) End(id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.jobs, id)
	r.ended[id] = r.clock.Now()
}

// lost reports whether job id, attempted at attemptedAt, is neither worked
// nor ended within after of now; it forgets the jobs ended longer ago.
func (r *Running) lost(id int64, attemptedAt, now time.Time, after time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.jobs[id]; ok {
		return false
	}
	if at, ok := r.ended[id]; ok {
		return now.Sub(at) >= after
	}
	return now.Sub(attemptedAt) >= after
}

// forget drops the jobs that ended longer than after before now.
func (r *Running) forget(now time.Time, after time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, at := range r.ended {
		if now.Sub(at) >= 2*after {
			delete(r.ended, id)
		}
	}
}

// runningMiddleware keeps a Running.
type runningMiddleware struct {
	river.MiddlewareDefaults
	running *Running
}

// Work records the job in the Running while it runs.
func (m *runningMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	m.running.Start(job.ID)
	defer m.running.End(job.ID)
	return doInner(ctx)
}

// ReclaimConfig configures a Reclaimer.
type ReclaimConfig struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// ClientID is the id of this process's River client (Client.ID): the
	// application_name of its presence session. Required, made by
	// NewClientID.
	ClientID string
	// After is how long a worker process must have been gone from the
	// database before its running jobs are taken up again: long enough for
	// a live process to reconnect after a failover. Defaults to
	// DefaultReclaimAfter.
	After time.Duration
	// Every is how often the processes are looked at. Defaults to a third
	// of After.
	Every time.Duration
	// Running is the set of jobs this process works (Config.Running). When
	// set, a job the database says this process runs and that it neither
	// works nor ended within After is taken up again too (its completion
	// was lost). Optional.
	Running *Running
	// Clock times After and Every. Defaults to clock.Real().
	Clock clock.Clock
	// Logger receives a line per job taken up. Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics counts the jobs taken up. Optional.
	Metrics *metrics.Metrics
}

// Reclaimer makes a worker process present in the database as long as it
// lives, and takes up at once the running jobs of the processes that are
// not, rather than after River's rescue (Config.RescueAfter, which must
// exceed the longest job's timeout).
//
// A process is present while it holds a session whose application_name is
// its River client's id (pg_stat_activity): the session ends with the
// process, killed or not, and with the database's primary. A running job
// whose last attempt names a client of this release that has had no such
// session for After is made available again (discarded when it has no
// attempt left, as River's rescuer does), an error recorded on the job; so
// is one the database says this process runs that it has not worked for
// After (Running: its completion was lost while the database was away): a
// process killed is taken up within After and Every of the restart of any
// worker, and the calls in flight on a primary that died within as long of
// the standby's promotion, whatever the jobs' timeout. A live process
// re-opens its session within Every of the database's return, well within
// After, so that its jobs are not run twice.
//
// The presence session must reach Postgres itself: through a pooler in
// transaction mode its application_name would not be the process's.
type Reclaimer struct {
	startstop.Base
	cfg    ReclaimConfig
	logger *slog.Logger

	// sweepMu makes one Sweep at a time; it guards gone.
	sweepMu sync.Mutex
	// gone is when each client seen running a job was first seen gone.
	gone map[string]time.Time
	// conn is the presence session, used by Start, then by run alone,
	// which closes it when it ends.
	conn *pgx.Conn
}

// NewReclaimer returns a Reclaimer; Start starts it.
func NewReclaimer(config *ReclaimConfig) (*Reclaimer, error) {
	cfg := *config
	if cfg.Pool == nil || cfg.ClientID == "" {
		return nil, errors.New("worker: ReclaimConfig.Pool and ClientID are required")
	}
	if cfg.After < 0 || cfg.Every < 0 {
		return nil, errors.New("worker: ReclaimConfig.After and Every cannot be negative")
	}
	cfg.After = cmp.Or(cfg.After, DefaultReclaimAfter)
	cfg.Every = cmp.Or(cfg.Every, cfg.After/3)
	cfg.Clock = clock.Or(cfg.Clock)
	return &Reclaimer{cfg: cfg, logger: cmp.Or(cfg.Logger, slog.Default()), gone: map[string]time.Time{}}, nil
}

// Start opens the process's presence session, looks once for the jobs of
// processes gone, and goes on looking every Every until Stop, which closes
// the session. The session must be open before the River client fetches a
// job. Starting a started Reclaimer does nothing.
func (r *Reclaimer) Start(ctx context.Context) error {
	if r.Running() {
		return nil
	}
	if err := r.present(ctx); err != nil {
		return err
	}
	if err := r.Sweep(ctx); err != nil {
		r.logger.WarnContext(ctx, "reclaim jobs of processes gone", "error", err)
	}
	r.Base.Start(context.WithoutCancel(ctx), r.run)
	return nil
}

// run looks every Every until ctx ends, then closes the presence session.
func (r *Reclaimer) run(ctx context.Context) {
	defer func() {
		if r.conn != nil {
			_ = r.conn.Close(context.Background())
			r.conn = nil
		}
	}()
	t := r.cfg.Clock.NewTicker(r.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if err := r.present(ctx); err != nil {
			if ctx.Err() == nil {
				r.logger.WarnContext(ctx, "worker presence session", "error", err)
			}
			continue
		}
		if err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
			r.logger.WarnContext(ctx, "reclaim jobs of processes gone", "error", err)
		}
	}
}

// present makes sure the presence session is open, re-opening it when it
// was lost (a failover, a restart of the database).
func (r *Reclaimer) present(ctx context.Context) error {
	if r.conn != nil {
		pingCtx, cancel := context.WithTimeout(ctx, r.cfg.Every)
		err := r.conn.Ping(pingCtx)
		cancel()
		if err == nil {
			return nil
		}
		_ = r.conn.Close(context.Background())
		r.conn = nil
	}
	config := r.cfg.Pool.Config().ConnConfig.Copy()
	config.RuntimeParams["application_name"] = r.cfg.ClientID
	conn, err := pgx.ConnectConfig(ctx, config)
	if err != nil {
		return fmt.Errorf("open the presence session of %s: %w", r.cfg.ClientID, err)
	}
	r.conn = conn
	return nil
}

// Sweep looks once for the processes gone and takes up the running jobs of
// those gone for After, and those of this process that lost their
// completion (Running). Start calls it every Every; a test calls it on its
// own clock.
func (r *Reclaimer) Sweep(ctx context.Context) error {
	r.sweepMu.Lock()
	defer r.sweepMu.Unlock()
	if err := r.sweepOwn(ctx); err != nil {
		return err
	}
	clients, err := store.PresenceGoneList(ctx, r.cfg.Pool, clientIDPrefix)
	if err != nil {
		return err
	}
	now := r.cfg.Clock.Now()
	seen := make(map[string]bool, len(clients))
	var due []string
	for _, c := range clients {
		seen[c] = true
		since, ok := r.gone[c]
		if !ok {
			r.gone[c] = now
			continue
		}
		if now.Sub(since) >= r.cfg.After {
			due = append(due, c)
		}
	}
	for c := range r.gone {
		if !seen[c] {
			delete(r.gone, c)
		}
	}
	if len(due) == 0 {
		return nil
	}
	jobs, err := store.PresenceGoneReclaim(ctx, r.cfg.Pool, due, fmt.Sprintf("worker process gone from the database for %s: job taken up again", r.cfg.After))
	if err != nil {
		return err
	}
	for _, j := range jobs {
		r.cfg.Metrics.JobReclaimed(j.Kind)
		r.logger.WarnContext(ctx, "job of a worker process gone taken up again", "job_id", j.ID, "kind", j.Kind, "state", j.State)
	}
	return nil
}

// sweepOwn takes up the running jobs of this process that it neither works
// nor ended within After.
func (r *Reclaimer) sweepOwn(ctx context.Context) error {
	if r.cfg.Running == nil {
		return nil
	}
	now := r.cfg.Clock.Now()
	r.cfg.Running.forget(now, r.cfg.After)
	jobs, err := store.PresenceOwnList(ctx, r.cfg.Pool, r.cfg.ClientID)
	if err != nil {
		return err
	}
	var lost []int64
	for _, j := range jobs {
		var at time.Time
		if j.AttemptedAt != nil {
			at = *j.AttemptedAt
		}
		if r.cfg.Running.lost(j.ID, at, now, r.cfg.After) {
			lost = append(lost, j.ID)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	done, err := store.PresenceOwnReclaim(ctx, r.cfg.Pool, r.cfg.ClientID, lost, fmt.Sprintf("job not worked by its process for %s (its completion was lost): taken up again", r.cfg.After))
	if err != nil {
		return err
	}
	for _, j := range done {
		r.cfg.Metrics.JobReclaimed(j.Kind)
		r.logger.WarnContext(ctx, "job that lost its completion taken up again", "job_id", j.ID, "kind", j.Kind, "state", j.State)
	}
	return nil
}
