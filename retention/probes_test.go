package retention_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/retention"
	"github.com/x402d/x402d/schema"
	"github.com/x402d/x402d/store"
)

// TestPruneProbes removes the index's probes from the partitions of the
// event log that ended before the cutoff, keeping every other event of
// them as it was, the newer partitions whole, the append-only rule, and
// the history the index answers, read from its tables and rebuilt from the
// log as migration 011 fills it.
func TestPruneProbes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	now := time.Now().UTC()
	current := schema.PeriodMonth.Start(now)
	m1, m2, m3 := current.AddDate(0, -1, 0), current.AddDate(0, -2, 0), current.AddDate(0, -3, 0)
	p3 := addPartition(ctx, t, db, m3, m2)
	p2 := addPartition(ctx, t, db, m2, m1)
	p1 := addPartition(ctx, t, db, m1, current)

	insert := func(stream, typ, data string, at time.Time) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ($1, $2, $3, $4)`, stream, typ, data, at)
		require.NoError(t, err)
	}
	probe := func(at time.Time, live bool) string {
		l := "false"
		if live {
			l = "true"
		}
		return `{"live":` + l + `,"status":402,"latency_ms":120,"checked_at":"` + at.Format(time.RFC3339Nano) + `"}`
	}
	// Three months back: the host listed, probed, a paid call's event
	// between the probes; two months back, probes only; last month, a probe
	// and a listing change.
	insert("host/a.test", store.EventResourceIndexed, `{"resource":"https://a.test/r","host":"a.test","price_usdc":"0.01"}`, m3.Add(time.Minute))
	for i := range 5 {
		at := m3.Add(time.Duration(i+1) * time.Hour)
		insert("host/a.test", store.EventHostProbed, probe(at, i != 2), at)
		if i == 2 {
			insert("call/old", "job.started", `{"job_id":1,"attempt":1}`, at.Add(time.Second))
			// An event kept in its binary form (migration 017).
			_, err := db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, bin, created_at) VALUES ('call/bin', 'call.paid', '{}', '\x01ff00', $1)`, at.Add(2*time.Second))
			require.NoError(t, err)
		}
	}
	for i := range 3 {
		at := m2.Add(time.Duration(i+1) * time.Hour)
		insert("host/a.test", store.EventHostProbed, probe(at, true), at)
	}
	insert("host/a.test", store.EventHostProbed, probe(m1.Add(time.Hour), true), m1.Add(time.Hour))
	insert("host/a.test", store.EventResourceIndexed, `{"resource":"https://a.test/r","host":"a.test","price_usdc":"0.02"}`, m1.Add(2*time.Hour))
	// This month's probes, appended as the prober does: the history.
	for i, h := range []time.Duration{20 * 24, 3 * 24, 2, 1} {
		for _, host := range []string{"a.test", "c.test"} {
			live, status, latency := i != 1 || host == "c.test", 402, 100*(i+1)
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			require.NoError(t, store.Append(ctx, tx, store.NewEvent{Stream: store.HostStream(host), Type: store.EventHostProbed,
				Data: store.HostProbed{Live: &live, Status: &status, LatencyMS: &latency, CheckedAt: now.Add(-h * time.Hour)}}))
			require.NoError(t, tx.Commit(ctx))
		}
	}

	type row struct {
		ID                 int64
		Stream, Type, Data string
		Bin                []byte
		CreatedAt          time.Time
	}
	between := func(from, to time.Time) []row {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `SELECT id, stream, type, data::text, bin, created_at FROM events WHERE created_at >= $1 AND created_at < $2 ORDER BY id`, from, to)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		require.NoError(t, err)
		return out
	}
	notProbes := func(rows []row) []row {
		return slices.DeleteFunc(slices.Clone(rows), func(r row) bool { return r.Type == store.EventHostProbed })
	}
	history := func() []string {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `
			SELECT format('hour %s %s %s %s %s', host, hour, probes, live, latencies) FROM index_probe_hours
			UNION ALL SELECT format('host %s %s %s %s %s %s %s %s %s %s %s', host, uptime_24h, uptime_7d, uptime_30d,
				probes_24h, probes_7d, probes_30d, latency_p50_ms, latency_p95_ms, first_seen, live) FROM index_hosts
			ORDER BY 1`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	migrations, err := schema.Migrations()
	require.NoError(t, err)
	fromTheLog := migrations[slices.IndexFunc(migrations, func(m schema.Migration) bool { return m.Name == "index_history" })].Up
	rebuilt := func() []string {
		t.Helper()
		_, err := db.Pool.Exec(ctx, "TRUNCATE index_probe_hours")
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, fromTheLog)
		require.NoError(t, err)
		return history()
	}
	reader := index.NewReader(db.Pool, nil)
	answer := func() []*index.HostDetail {
		t.Helper()
		var pages []*index.HostDetail
		for _, host := range []string{"a.test", "c.test"} {
			d, err := reader.HostDetail(ctx, host)
			require.NoError(t, err)
			pages = append(pages, d)
		}
		return pages
	}

	kept := history()
	require.Len(t, kept, 4+4+2, "a.test and c.test: 4 hours of probes and a row each")
	fromLog := rebuilt()
	require.Equal(t, kept[2:], fromLog[2:], "the probes by hour, from the log (first_seen: the log's first event of the host)")
	hosts := answer()
	require.InDelta(t, 0.75, *hosts[0].Host.Uptime30d, 1e-9)
	require.Len(t, hosts[0].Probes, 4)
	before3, before1, beforeNow := between(m3, m2), between(m1, current), between(current, now.Add(time.Hour))
	require.Len(t, between(m2, m1), 3)
	require.Len(t, before3, 8)
	require.Equal(t, []byte{1, 0xff, 0}, before3[5].Bin)

	// The cutoff: last month's start. The partitions of three and two
	// months back end by it; last month's does not.
	done, err := retention.PruneProbes(ctx, db.Pool, m1, retention.LockTimeout)
	require.NoError(t, err)
	require.Equal(t, []retention.PrunedPartition{{Partition: p3, Probes: 5, Kept: 3}, {Partition: p2, Probes: 3, Kept: 0}}, done)
	require.Equal(t, notProbes(before3), between(m3, m2), "the other events stay, with their ids and binary data")
	require.Empty(t, between(m2, m1))
	require.Equal(t, before1, between(m1, current), "a newer partition stays whole")
	require.Equal(t, beforeNow, between(current, now.Add(time.Hour)))
	require.Contains(t, partitionNames(ctx, t, db), p3)
	require.Contains(t, partitionNames(ctx, t, db), p2)
	indexes := func(partition string) []string {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `SELECT replace(indexname, $1, '') FROM pg_indexes WHERE tablename = $1 AND schemaname = current_schema() ORDER BY 1`, partition)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	require.Equal(t, indexes(p1), indexes(p3), "the indexes of a partition never rewritten, by the same names")

	// The history is the same, as the index keeps it and rebuilt from the
	// log.
	require.Equal(t, fromLog, history())
	require.Equal(t, fromLog, rebuilt())
	require.Equal(t, hosts, answer())

	// The rewritten partition is the log's: append-only, and it takes the
	// events of its range.
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM events WHERE stream = 'call/old'`).Scan(&id))
	for _, q := range []string{
		`UPDATE events SET data = '{}' WHERE id = $1`, `DELETE FROM events WHERE id = $1`,
		`UPDATE ` + p3 + ` SET data = '{}' WHERE id = $1`, `DELETE FROM ` + p3 + ` WHERE id = $1`,
	} {
		_, err := db.Pool.Exec(ctx, q, id)
		require.Error(t, err, q)
	}
	_, err = db.Pool.Exec(ctx, "TRUNCATE "+p3)
	require.Error(t, err)
	insert("call/restored", "job.started", `{}`, m3.Add(48*time.Hour))
	var part string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM events WHERE stream = 'call/restored'`).Scan(&part))
	require.Equal(t, p3, part)

	// A partition is read once: the next run has nothing to do, and a
	// later cutoff takes last month's.
	done, err = retention.PruneProbes(ctx, db.Pool, m1, retention.LockTimeout)
	require.NoError(t, err)
	require.Empty(t, done)
	done, err = retention.PruneProbes(ctx, db.Pool, current, retention.LockTimeout)
	require.NoError(t, err)
	require.Equal(t, []retention.PrunedPartition{{Partition: p1, Probes: 1, Kept: 1}}, done)
	require.Equal(t, notProbes(before1), between(m1, current))
	require.Equal(t, hosts, answer())
}

// TestProbeRetentionJob: the job is scheduled with the retention's other
// jobs unless the retention is 0, and a negative one is refused.
func TestProbeRetentionJob(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		probes time.Duration
		jobs   int
		err    string
	}{
		{store.ProbeHoursKept, 3, ""},
		{0, 2, ""},
		{-time.Hour, 0, "INDEX_PROBE_RETENTION"},
	} {
		jobs, err := retention.PeriodicJobs("17 * * * *", time.Hour, schema.PeriodMonth, tt.probes)
		if tt.err != "" {
			require.ErrorContains(t, err, tt.err)
			continue
		}
		require.NoError(t, err)
		require.Len(t, jobs, tt.jobs, tt.probes)
	}
}
