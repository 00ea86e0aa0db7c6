package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// resultLag bounds how long after its call was created a result can be
// written: a call's runs and settlement end before its payment's
// validBefore, minutes after. A sweep starts this far before where the last
// one ended.
const resultLag = 24 * time.Hour

// ResultsExpire lets go of the results of the calls created before cutoff,
// batch calls a statement, and returns how many it let go. The calls keep
// their ledger fields, and ResultExpiredAt says when. A sweep starts where
// the last one ended (retention_marks), less resultLag, so that it does not
// read again the calls already swept.
func ResultsExpire(ctx context.Context, db DBTX, cutoff time.Time, batch int) (int, error) {
	from, err := RetentionMarkGet(ctx, db, RetentionResults)
	if err != nil {
		return 0, fmt.Errorf("expire results: %w", err)
	}
	if !from.IsZero() {
		from = from.Add(-resultLag)
	}
	total := 0
	for {
		var n int
		var last *time.Time
		err := db.QueryRow(ctx, `WITH doomed AS (
				SELECT id FROM calls WHERE created_at >= $1 AND created_at < $2 AND result IS NOT NULL
				ORDER BY created_at LIMIT $3),
			done AS (
				UPDATE calls SET result = NULL, result_expired_at = now() FROM doomed
				WHERE calls.id = doomed.id RETURNING calls.created_at)
			SELECT count(*), max(created_at) FROM done`, from, cutoff, batch).Scan(&n, &last)
		if err != nil {
			return total, fmt.Errorf("expire results before %s: %w", cutoff.Format(time.RFC3339), err)
		}
		total += n
		if n < batch || last == nil {
			break
		}
		from = *last
	}
	if err := RetentionMarkAdvance(ctx, db, RetentionResults, cutoff); err != nil {
		return total, fmt.Errorf("expire results: %w", err)
	}
	return total, nil
}

// The marks of retention_marks: how far each sweep of the retention job
// has gone.
const (
	// RetentionResults is the results' sweep (ResultsExpire).
	RetentionResults = "results"
	// RetentionProbes is the removal of the index's probes from the event
	// log (retention.PruneProbes).
	RetentionProbes = "probes"
)

// RetentionMarkGet returns the time up to which the sweep name is done,
// zero when it never ran.
func RetentionMarkGet(ctx context.Context, db DBTX, name string) (time.Time, error) {
	var to time.Time
	err := db.QueryRow(ctx, "SELECT done_to FROM retention_marks WHERE name = $1", name).Scan(&to)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, fmt.Errorf("read mark %s: %w", name, err)
	}
	return to, nil
}

// RetentionMarkAdvance records that the sweep name is done up to to,
// unless it was recorded further already.
func RetentionMarkAdvance(ctx context.Context, db DBTX, name string, to time.Time) error {
	_, err := db.Exec(ctx, `INSERT INTO retention_marks (name, done_to) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET done_to = greatest(retention_marks.done_to, excluded.done_to)`, name, to)
	if err != nil {
		return fmt.Errorf("write mark %s: %w", name, err)
	}
	return nil
}
