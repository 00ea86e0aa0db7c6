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

	"github.com/x402d/x402d/metrics"
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
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
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
// attempt left, as River's rescuer does), an error recorded on the job: a
// process killed is taken up within After and Every of the restart of any
// worker, and the calls in flight on a primary that died within as long of
// the standby's promotion, whatever the jobs' timeout. A live process
// re-opens its session within Every of the database's return, well within
// After, so that its jobs are not run twice.
//
// The presence session must reach Postgres itself: through a pooler in
// transaction mode its application_name would not be the process's.
type Reclaimer struct {
	cfg    ReclaimConfig
	logger *slog.Logger

	// gone is when each client seen running a job was first seen gone.
	gone map[string]time.Time
	conn *pgx.Conn

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// NewReclaimer returns a Reclaimer; Start starts it.
func NewReclaimer(cfg ReclaimConfig) (*Reclaimer, error) {
	if cfg.Pool == nil || cfg.ClientID == "" {
		return nil, errors.New("worker: ReclaimConfig.Pool and ClientID are required")
	}
	cfg.After = cmp.Or(cfg.After, DefaultReclaimAfter)
	cfg.Every = cmp.Or(cfg.Every, cfg.After/3)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Reclaimer{cfg: cfg, logger: cmp.Or(cfg.Logger, slog.Default()), gone: map[string]time.Time{}}, nil
}

// Start opens the process's presence session, looks once for the jobs of
// processes gone, and goes on looking every Every until Stop. The session
// must be open before the River client fetches a job.
func (r *Reclaimer) Start(ctx context.Context) error {
	if err := r.present(ctx); err != nil {
		return err
	}
	if err := r.Sweep(ctx); err != nil {
		r.logger.WarnContext(ctx, "reclaim jobs of processes gone", "error", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel, r.done = cancel, make(chan struct{})
	go r.run(runCtx)
	return nil
}

// Stop ends the looking and closes the presence session.
func (r *Reclaimer) Stop() {
	r.once.Do(func() {
		if r.cancel == nil {
			return
		}
		r.cancel()
		<-r.done
		if r.conn != nil {
			_ = r.conn.Close(context.Background())
		}
	})
}

func (r *Reclaimer) run(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
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

// goneClients lists the clients of this release named by the last attempt
// of a running job that have no presence session.
const goneClients = `SELECT DISTINCT j.attempted_by[cardinality(j.attempted_by)]
FROM river_job j
WHERE j.state = 'running' AND cardinality(j.attempted_by) > 0
	AND starts_with(j.attempted_by[cardinality(j.attempted_by)], '` + clientIDPrefix + `')
	AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.application_name = j.attempted_by[cardinality(j.attempted_by)])`

// reclaimJobs makes the running jobs of the clients $1 that are still
// without a presence session available again, or discarded without an
// attempt left, with the error $2, and returns their kinds.
const reclaimJobs = `UPDATE river_job j SET
	state = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded'::river_job_state ELSE 'available'::river_job_state END,
	scheduled_at = CASE WHEN j.attempt >= j.max_attempts THEN j.scheduled_at ELSE now() END,
	finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
	errors = array_append(j.errors, jsonb_build_object('at', now(), 'attempt', j.attempt, 'error', $2::text, 'trace', ''))
WHERE j.state = 'running' AND j.attempted_by[cardinality(j.attempted_by)] = ANY($1::text[])
	AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.application_name = j.attempted_by[cardinality(j.attempted_by)])
RETURNING j.id, j.kind, j.state`

// Sweep looks once for the processes gone and takes up the running jobs of
// those gone for After.
func (r *Reclaimer) Sweep(ctx context.Context) error {
	rows, err := r.cfg.Pool.Query(ctx, goneClients)
	if err != nil {
		return fmt.Errorf("list processes gone: %w", err)
	}
	clients, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list processes gone: %w", err)
	}
	now := r.cfg.Now()
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
	rows, err = r.cfg.Pool.Query(ctx, reclaimJobs, due, fmt.Sprintf("worker process gone from the database for %s: job taken up again", r.cfg.After))
	if err != nil {
		return fmt.Errorf("reclaim the jobs of %d processes gone: %w", len(due), err)
	}
	type reclaimed struct {
		ID    int64
		Kind  string
		State string
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[reclaimed])
	if err != nil {
		return fmt.Errorf("reclaim the jobs of %d processes gone: %w", len(due), err)
	}
	for _, j := range jobs {
		r.cfg.Metrics.JobReclaimed(j.Kind)
		r.logger.WarnContext(ctx, "job of a worker process gone taken up again", "job_id", j.ID, "kind", j.Kind, "state", j.State)
	}
	return nil
}
