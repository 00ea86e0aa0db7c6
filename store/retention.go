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
	var from time.Time
	err := db.QueryRow(ctx, `SELECT done_to FROM retention_marks WHERE name = 'results'`).Scan(&from)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("expire results: read mark: %w", err)
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
	_, err = db.Exec(ctx, `INSERT INTO retention_marks (name, done_to) VALUES ('results', $1)
		ON CONFLICT (name) DO UPDATE SET done_to = greatest(retention_marks.done_to, excluded.done_to)`, cutoff)
	if err != nil {
		return total, fmt.Errorf("expire results: write mark: %w", err)
	}
	return total, nil
}
