package schema_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/schema"
)

func TestPeriod(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	tests := []struct {
		period      schema.Period
		t           string
		start, next string
	}{
		{schema.PeriodDay, "2026-11-24T21:30:00Z", "2026-11-24T00:00:00Z", "2026-11-25T00:00:00Z"},
		{schema.PeriodDay, "2026-12-31T23:59:59Z", "2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z"},
		{schema.PeriodWeek, "2026-11-24T21:30:00Z", "2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z"}, // a Tuesday
		{schema.PeriodWeek, "2026-11-23T00:00:00Z", "2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z"}, // a Monday
		{schema.PeriodWeek, "2026-11-29T23:00:00Z", "2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z"}, // a Sunday
		{schema.PeriodMonth, "2026-11-24T21:30:00Z", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"},
		{schema.PeriodMonth, "2026-12-15T00:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{schema.PeriodMonth, "2026-11-24T01:00:00+03:00", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"}, // UTC
	}
	for _, tt := range tests {
		t.Run(string(tt.period)+" "+tt.t, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, at(tt.start), tt.period.Start(at(tt.t)))
			require.Equal(t, at(tt.next), tt.period.Next(at(tt.t)))
		})
	}
	_, err := schema.ParsePeriod("year")
	require.Error(t, err)
}

// TestEventPartitions: partitions are created ahead from where the last
// one ends, once; a new partition keeps the append-only rule; an event
// with no partition for its time is refused.
func TestEventPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	list := func() []schema.Partition {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		parts, err := schema.EventPartitions(ctx, tx)
		require.NoError(t, err)
		return parts
	}
	before := list()
	require.NotEmpty(t, before, "the test schema has month partitions")
	last := before[len(before)-1].To
	require.Equal(t, schema.PeriodMonth.Start(last), last)

	// Weekly from the month's end: a short partition to the next Monday,
	// then whole weeks.
	until := last.AddDate(0, 0, 10)
	created, err := schema.EnsureEventPartitions(ctx, db.Pool, schema.PeriodWeek, until)
	require.NoError(t, err)
	parts := list()
	added := parts[len(before):]
	require.Len(t, created, len(added))
	require.Equal(t, last, added[0].From)
	require.Equal(t, schema.PeriodWeek.Next(last), added[0].To)
	for i := 1; i < len(added); i++ {
		require.Equal(t, added[i-1].To, added[i].From)
		require.Equal(t, 7*24*time.Hour, added[i].To.Sub(added[i].From))
	}
	require.True(t, added[len(added)-1].To.After(until))
	again, err := schema.EnsureEventPartitions(ctx, db.Pool, schema.PeriodWeek, until)
	require.NoError(t, err)
	require.Empty(t, again)

	// The append-only rule on the newest partition.
	newest := added[len(added)-1]
	_, err = db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ('host/x', 'host.seen', '{}', $1)`, newest.From.Add(time.Hour))
	require.NoError(t, err)
	for _, stmt := range []string{
		`UPDATE events SET type = 'x' WHERE stream = 'host/x'`,
		`DELETE FROM events WHERE stream = 'host/x'`,
		`DELETE FROM ` + newest.Name,
		`TRUNCATE ` + newest.Name,
		`TRUNCATE events`,
	} {
		_, err := db.Pool.Exec(ctx, stmt)
		require.ErrorContains(t, err, "append-only", stmt)
	}

	_, err = db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ('host/x', 'host.seen', '{}', $1)`, newest.To.AddDate(1, 0, 0))
	require.ErrorContains(t, err, "no partition")
}

// TestPartitioningKeepsTheLog: migration 007 turns a log that has rows into
// a partitioned one whose first partition holds them all, with the
// append-only rule; its down migration brings every row back into one
// table.
func TestPartitioningKeepsTheLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	migrations, err := schema.Migrations()
	require.NoError(t, err)
	// Migration 7 and those after it, taken down and up again in order.
	var later []schema.Migration
	for _, mm := range migrations {
		if mm.Version >= 7 {
			later = append(later, mm)
		}
	}
	require.Equal(t, "events_partitioned", later[0].Name)
	down := func() {
		for _, m := range slices.Backward(later) {
			_, err := db.Pool.Exec(ctx, m.Down)
			require.NoError(t, err, m.Name)
		}
	}
	up := func() {
		for _, m := range later {
			_, err := db.Pool.Exec(ctx, m.Up)
			require.NoError(t, err, m.Name)
		}
	}
	rows := func() []string {
		r, err := db.Pool.Query(ctx, `SELECT id || ' ' || stream || ' ' || type || ' ' || data::text || ' ' || created_at::text FROM events ORDER BY id`)
		require.NoError(t, err)
		var out []string
		for r.Next() {
			var s string
			require.NoError(t, r.Scan(&s))
			out = append(out, s)
		}
		require.NoError(t, r.Err())
		return out
	}

	_, err = db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data) VALUES ('host/a', 'host.seen', '{"n":1}'), ('host/b', 'host.seen', '{"n":2}')`)
	require.NoError(t, err)
	down()
	_, err = db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ('host/c', 'host.seen', '{"n":3}', now() - interval '400 days')`)
	require.NoError(t, err)
	want := rows()
	require.Len(t, want, 3)
	_, err = db.Pool.Exec(ctx, `DELETE FROM events`)
	require.ErrorContains(t, err, "append-only", "one table again, with its rule")

	up()
	require.Equal(t, want, rows())
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	parts, err := schema.EventPartitions(ctx, tx)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Len(t, parts, 1)
	require.Equal(t, "events_before_partitions", parts[0].Name)
	require.True(t, parts[0].From.IsZero())
	require.True(t, parts[0].To.After(time.Now()))
	for _, stmt := range []string{`DELETE FROM events`, `UPDATE events_before_partitions SET type = 'x'`, `TRUNCATE events_before_partitions`} {
		_, err := db.Pool.Exec(ctx, stmt)
		require.ErrorContains(t, err, "append-only", stmt)
	}
	// Events go on from where that partition ends.
	_, err = schema.EnsureEventPartitions(ctx, db.Pool, schema.PeriodMonth, time.Now().AddDate(0, 1, 0))
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ('host/d', 'host.seen', '{}', now() + interval '3 days')`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data) VALUES ('host/e', 'host.seen', '{}')`)
	require.NoError(t, err)
}
