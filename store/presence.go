package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A worker process is present while it holds a session whose
// application_name is its River client's id (pg_stat_activity). The
// statements below find the running jobs whose process is not, or which
// their own process lost, and make them available again (worker.Reclaimer).

// ReclaimedJob is a running job made available again, or discarded when it
// had no attempt left.
type ReclaimedJob struct {
	ID    int64
	Kind  string
	State string
}

// RunningJob is a running job, with when its last attempt started (nil
// when never).
type RunningJob struct {
	ID          int64
	AttemptedAt *time.Time
}

// reclaimSet makes a running job available again, or discarded without an
// attempt left, with the error $2.
const reclaimSet = `state = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded'::river_job_state ELSE 'available'::river_job_state END,
	scheduled_at = CASE WHEN j.attempt >= j.max_attempts THEN j.scheduled_at ELSE now() END,
	finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
	errors = array_append(j.errors, jsonb_build_object('at', now(), 'attempt', j.attempt, 'error', $2::text, 'trace', ''))`

// PresenceGoneList returns the clients whose id starts with prefix, named
// by the last attempt of a running job, that have no presence session.
func PresenceGoneList(ctx context.Context, db DBTX, prefix string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT DISTINCT j.attempted_by[cardinality(j.attempted_by)]
FROM river_job j
WHERE j.state = 'running' AND cardinality(j.attempted_by) > 0
	AND starts_with(j.attempted_by[cardinality(j.attempted_by)], $1)
	AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.application_name = j.attempted_by[cardinality(j.attempted_by)])`, prefix)
	if err != nil {
		return nil, fmt.Errorf("list processes gone: %w", err)
	}
	clients, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list processes gone: %w", err)
	}
	return clients, nil
}

// PresenceGoneReclaim makes the running jobs of clients that are still
// without a presence session available again, or discarded without an
// attempt left, each with the error reason, and returns them.
func PresenceGoneReclaim(ctx context.Context, db DBTX, clients []string, reason string) ([]ReclaimedJob, error) {
	rows, err := db.Query(ctx, `UPDATE river_job j SET `+reclaimSet+`
WHERE j.state = 'running' AND j.attempted_by[cardinality(j.attempted_by)] = ANY($1::text[])
	AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.application_name = j.attempted_by[cardinality(j.attempted_by)])
RETURNING j.id, j.kind, j.state`, clients, reason)
	if err != nil {
		return nil, fmt.Errorf("reclaim the jobs of %d processes gone: %w", len(clients), err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ReclaimedJob])
	if err != nil {
		return nil, fmt.Errorf("reclaim the jobs of %d processes gone: %w", len(clients), err)
	}
	return jobs, nil
}

// PresenceOwnList returns the running jobs whose last attempt names client.
func PresenceOwnList(ctx context.Context, db DBTX, client string) ([]RunningJob, error) {
	rows, err := db.Query(ctx, `SELECT id, attempted_at FROM river_job
WHERE state = 'running' AND cardinality(attempted_by) > 0 AND attempted_by[cardinality(attempted_by)] = $1`, client)
	if err != nil {
		return nil, fmt.Errorf("list the running jobs of %s: %w", client, err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[RunningJob])
	if err != nil {
		return nil, fmt.Errorf("list the running jobs of %s: %w", client, err)
	}
	return jobs, nil
}

// PresenceOwnReclaim makes the running jobs ids of client available again,
// or discarded without an attempt left, each with the error reason, and
// returns them.
func PresenceOwnReclaim(ctx context.Context, db DBTX, client string, ids []int64, reason string) ([]ReclaimedJob, error) {
	rows, err := db.Query(ctx, `UPDATE river_job j SET `+reclaimSet+`
WHERE j.id = ANY($1::bigint[]) AND j.state = 'running' AND j.attempted_by[cardinality(j.attempted_by)] = $3
RETURNING j.id, j.kind, j.state`, ids, reason, client)
	if err != nil {
		return nil, fmt.Errorf("reclaim %d jobs of %s: %w", len(ids), client, err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ReclaimedJob])
	if err != nil {
		return nil, fmt.Errorf("reclaim %d jobs of %s: %w", len(ids), client, err)
	}
	return jobs, nil
}
