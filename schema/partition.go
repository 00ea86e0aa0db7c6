package schema

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Period is the span of one partition of the event log (EVENTS_PARTITION).
type Period string

// The periods a partition can span.
const (
	PeriodDay   Period = "day"
	PeriodWeek  Period = "week"
	PeriodMonth Period = "month"
)

// ParsePeriod reads a Period.
func ParsePeriod(s string) (Period, error) {
	switch p := Period(s); p {
	case PeriodDay, PeriodWeek, PeriodMonth:
		return p, nil
	}
	return "", fmt.Errorf("%q is not day, week or month", s)
}

// Start returns the start of the period holding t (UTC; weeks start on
// Monday).
func (p Period) Start(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	switch p {
	case PeriodMonth:
		return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	case PeriodWeek:
		day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		return day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	}
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// Next returns the start of the period after the one holding t.
func (p Period) Next(t time.Time) time.Time {
	s := p.Start(t)
	switch p {
	case PeriodMonth:
		return s.AddDate(0, 1, 0)
	case PeriodWeek:
		return s.AddDate(0, 0, 7)
	}
	return s.AddDate(0, 0, 1)
}

// Partition is a partition of the event log: its rows were created in
// [From, To). A zero From is the open start of the first partition.
type Partition struct {
	Name     string
	From, To time.Time
}

// partitionBound reads a range partition's bound as pg_get_expr renders it
// with the session in UTC.
var partitionBound = regexp.MustCompile(`^FOR VALUES FROM \((MINVALUE|'([^']+)')\) TO \('([^']+)'\)$`)

// boundLayout is how a timestamptz bound reads in UTC.
const boundLayout = "2006-01-02 15:04:05Z07"

// EventPartitions returns the partitions of the event log in order.
func EventPartitions(ctx context.Context, tx pgx.Tx) ([]Partition, error) {
	if _, err := tx.Exec(ctx, "SET LOCAL TimeZone = 'UTC'"); err != nil {
		return nil, fmt.Errorf("event partitions: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'events'::regclass`)
	if err != nil {
		return nil, fmt.Errorf("event partitions: %w", err)
	}
	parts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Partition, error) {
		var p Partition
		var bound string
		if err := row.Scan(&p.Name, &bound); err != nil {
			return p, err
		}
		m := partitionBound.FindStringSubmatch(bound)
		if m == nil {
			return p, fmt.Errorf("partition %s: bound %q is not a time range", p.Name, bound)
		}
		if m[2] != "" {
			if p.From, err = time.Parse(boundLayout, m[2]); err != nil {
				return p, fmt.Errorf("partition %s: %w", p.Name, err)
			}
			p.From = p.From.UTC()
		}
		if p.To, err = time.Parse(boundLayout, m[3]); err != nil {
			return p, fmt.Errorf("partition %s: %w", p.Name, err)
		}
		p.To = p.To.UTC()
		return p, nil
	})
	if err != nil {
		return nil, fmt.Errorf("event partitions: %w", err)
	}
	slices.SortFunc(parts, func(a, b Partition) int { return a.To.Compare(b.To) })
	return parts, nil
}

// partitionLock serializes the processes creating partitions.
const partitionLock = 0x78343032_70617274 // "x402part"

// EnsureEventPartitions creates the partitions of the event log, each one
// period long, from where the last one ends (or the start of the current
// period) until the one holding until exists, and returns the names of
// those it created. A partition after an open or unaligned one starts where
// that one ends and ends with its period. Each gets the append-only rule
// (its row triggers are cloned from the log's; TRUNCATE, which the log's
// own trigger does not see on a partition, gets one of its own).
func EnsureEventPartitions(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, period Period, until time.Time) ([]string, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("ensure event partitions: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(partitionLock)); err != nil {
		return nil, fmt.Errorf("ensure event partitions: lock: %w", err)
	}
	parts, err := EventPartitions(ctx, tx)
	if err != nil {
		return nil, err
	}
	from := period.Start(time.Now())
	if len(parts) > 0 {
		from = parts[len(parts)-1].To
	}
	var created []string
	for !from.After(until) {
		to := period.Next(from)
		name := "events_p" + from.Format("20060102")
		if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF events FOR VALUES FROM ('%s') TO ('%s')`,
			pgx.Identifier{name}.Sanitize(), from.Format(time.RFC3339), to.Format(time.RFC3339))); err != nil {
			return nil, fmt.Errorf("ensure event partitions: create %s: %w", name, err)
		}
		if err := refuseTruncate(ctx, tx, name); err != nil {
			return nil, err
		}
		created = append(created, name)
		from = to
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("ensure event partitions: %w", err)
	}
	return created, nil
}

// refuseTruncate gives partition name the log's TRUNCATE rule.
func refuseTruncate(ctx context.Context, tx pgx.Tx, name string) error {
	_, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON %s
		FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change()`, pgx.Identifier{name}.Sanitize()))
	if err != nil {
		return fmt.Errorf("partition %s: append-only rule: %w", name, err)
	}
	return nil
}

// DetachEventPartition detaches partition name from the event log and
// drops it, in tx.
func DetachEventPartition(ctx context.Context, tx pgx.Tx, name string) error {
	id := pgx.Identifier{name}.Sanitize()
	if _, err := tx.Exec(ctx, "ALTER TABLE events DETACH PARTITION "+id); err != nil {
		return fmt.Errorf("detach %s: %w", name, err)
	}
	if _, err := tx.Exec(ctx, "DROP TABLE "+id); err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	return nil
}

// CreateDetachedPartition creates table p.Name shaped as the event log,
// not yet attached, for rows to be loaded into it (AttachEventPartition).
func CreateDetachedPartition(ctx context.Context, tx pgx.Tx, name string) error {
	if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (LIKE events INCLUDING DEFAULTS)", pgx.Identifier{name}.Sanitize())); err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	return nil
}

// AttachEventPartition attaches table p.Name to the event log for its
// range, with the append-only rule.
func AttachEventPartition(ctx context.Context, tx pgx.Tx, p Partition) error {
	from := "MINVALUE"
	if !p.From.IsZero() {
		from = "'" + p.From.UTC().Format(time.RFC3339Nano) + "'"
	}
	_, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE events ATTACH PARTITION %s FOR VALUES FROM (%s) TO ('%s')",
		pgx.Identifier{p.Name}.Sanitize(), from, p.To.UTC().Format(time.RFC3339Nano)))
	if err != nil {
		return fmt.Errorf("attach %s: %w", p.Name, err)
	}
	return refuseTruncate(ctx, tx, p.Name)
}
