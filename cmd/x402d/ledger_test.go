package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
	"github.com/x402d/x402d/schema"
	"github.com/x402d/x402d/store"
)

// ledgerBytes vacuums the ledger's tables, events (its partitions) and
// calls (VACUUM FULL first when full), and returns their on-disk size with
// their indexes and TOAST. Each ends with a plain VACUUM, so that every
// figure holds the free space and visibility maps a vacuumed table has
// (32 kB a table, the same at 300 calls as at 300,000; VACUUM FULL leaves
// a table without them until its next VACUUM): the growth between two
// figures is the calls', not the maps'.
func ledgerBytes(ctx context.Context, t testing.TB, db *dbtest.DB, full bool) (events, calls int64) {
	t.Helper()
	if full {
		_, err := db.Pool.Exec(ctx, "VACUUM FULL events, calls")
		require.NoError(t, err)
	}
	_, err := db.Pool.Exec(ctx, "VACUUM events, calls")
	require.NoError(t, err)
	// A partitioned table has no storage of its own: its partitions do.
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT
		(SELECT sum(pg_total_relation_size(inhrelid))::bigint FROM pg_inherits WHERE inhparent = 'events'::regclass),
		pg_total_relation_size('calls')`).Scan(&events, &calls))
	require.Positive(t, events)
	return events, calls
}

// paidRegex is the paid call the ledger's byte figures are taken with.
var paidRegex = []loadgen.Request{{Op: "regex", Body: `{"pattern":"\\d+","text":"a1b22 c333","flags":"g"}`}}

// ledgerPerCall pays regex calls with real EIP-3009 payments on the
// devchain (the payer echoes the quote's bazaar extension, as the official
// clients do), n calls within run, and returns what each call added to
// the ledger's tables: rows, and bytes with indexes included, as written
// (after a plain VACUUM, which depends on how the run's inserts and
// updates fell on pages) and compacted (VACUUM FULL, what the rows
// themselves take, with calls' fillfactor), in events and in calls.
func ledgerPerCall(ctx context.Context, t testing.TB, run time.Duration, n int) (calls int, rows, written, compacted [2]float64) {
	t.Helper()
	// A database of its own: VACUUM FULL then keeps no dead row for
	// another test's transaction.
	db := dbtest.Database(ctx, t)
	base, _ := startDevchainServiceIn(ctx, t, db)
	payer := devPayer(t, 8)
	// Warm up: the first pages of each table and index.
	rep, err := loadgen.Run(ctx, loadgen.Config{BaseURL: base, Requests: paidRegex, Payer: payer, Concurrency: 8, Duration: time.Second})
	require.NoError(t, err)
	require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
	// A snapshot taken before a run's last update keeps its dead row
	// versions, whichever database its session is in (a long transaction
	// elsewhere on the server holds back every snapshot's horizon):
	// compacted figures are the least of several tries, each once no
	// session of the server holds a transaction or snapshot as old as the
	// newest row version of calls (waiting a minute at most in all), the
	// warm-up's as the run's.
	// The sessions are other tests' and processes': Postgres tells no one
	// when a snapshot is released, so pg_stat_activity is polled.
	deadline := time.Now().Add(time.Minute)
	quiet := func() {
		qctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			var holding int
			require.NoError(t, db.Pool.QueryRow(ctx, `WITH newest AS (SELECT max(xmin::text::bigint) AS xid FROM calls)
				SELECT count(*) FROM pg_stat_activity, newest WHERE pid <> pg_backend_pid()
					AND (backend_xmin::text::bigint <= newest.xid OR backend_xid::text::bigint <= newest.xid)`).Scan(&holding))
			if holding == 0 {
				return
			}
			select {
			case <-tick.C:
			case <-qctx.Done():
				t.Logf("a transaction older than calls' newest row is still open: dead row versions may be counted as compacted")
				return
			}
		}
	}
	var events0, calls0 int64
	for i := range 3 {
		quiet()
		if e, c := ledgerBytes(ctx, t, db, true); i == 0 || e+c < events0+calls0 {
			events0, calls0 = e, c
		}
	}

	// Rows are counted once every call is settled: a call's last event
	// (settlement.confirmed) may follow its answer.
	settled := func() {
		require.Eventually(t, func() bool {
			var open int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM calls WHERE state IN ('queued', 'running', 'settling')`).Scan(&open))
			return open == 0
		}, time.Minute, 50*time.Millisecond, "every paid call settles")
	}
	settled()
	// The calls' events: the index's crawl appends its own.
	const rowsSQL = `SELECT (SELECT count(*) FROM events WHERE stream LIKE 'call/%'), (SELECT count(*) FROM calls)`
	var rows0 [2]int64
	require.NoError(t, db.Pool.QueryRow(ctx, rowsSQL).Scan(&rows0[0], &rows0[1]))
	if b, ok := t.(*testing.B); ok {
		b.ResetTimer()
	}
	rep, err = loadgen.Run(ctx, loadgen.Config{BaseURL: base, Requests: paidRegex, Payer: payer, Concurrency: 16, Duration: run, MaxCalls: n})
	if b, ok := t.(*testing.B); ok {
		b.StopTimer()
	}
	require.NoError(t, err)
	require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
	perCall := func(events, calls int64) [2]float64 {
		return [2]float64{float64(events-events0) / float64(rep.Calls), float64(calls-calls0) / float64(rep.Calls)}
	}
	settled()
	var events1, calls1 int64
	require.NoError(t, db.Pool.QueryRow(ctx, rowsSQL).Scan(&events1, &calls1))
	rows = [2]float64{float64(events1-rows0[0]) / float64(rep.Calls), float64(calls1-rows0[1]) / float64(rep.Calls)}
	written = perCall(ledgerBytes(ctx, t, db, false))
	quiet()
	compacted = perCall(ledgerBytes(ctx, t, db, true))
	for range 9 {
		quiet()
		if c := perCall(ledgerBytes(ctx, t, db, true)); c[0]+c[1] < compacted[0]+compacted[1] {
			compacted = c
		}
	}
	return rep.Calls, rows, written, compacted
}

// TestLedgerBytesPerPaidCall measures what each of 300 paid regex calls (16
// in flight) adds to the ledger (ledgerPerCall): a fixed number, so that
// the figure holds on a loaded machine.
func TestLedgerBytesPerPaidCall(t *testing.T) {
	t.Parallel()
	const paidCalls = 300
	n, rows, written, compacted := ledgerPerCall(context.Background(), t, 5*time.Minute, paidCalls)
	require.Equal(t, paidCalls, n)
	t.Logf("%d paid regex calls, bytes each: as written %.0f in events + %.0f in calls = %.0f; compacted %.0f + %.0f = %.0f",
		n, written[0], written[1], written[0]+written[1], compacted[0], compacted[1], compacted[0]+compacted[1])
	// What a paid call leaves: three event rows (call.paid's payment
	// packed in bin, job.succeeded, settlement.confirmed as one string)
	// and one calls row.
	require.Equal(t, [2]float64{3, 1}, rows, "event and calls rows per paid call")
	// The goal: at most 2,000 bytes a paid call, compacted. The rows
	// above are each about 100 bytes before their data, with a share of
	// the stream's index; the calls row (the result without its call_id
	// and op, the settlement's response packed) has four indexes
	// (docs/performance.md, The ledger). As written is only logged: it
	// is larger by what the run's updates of calls left on its pages and
	// by the pages Postgres added ahead under concurrent inserts, both of
	// which other sessions on the server (another suite's snapshot keeps
	// a page from being pruned) change by up to twice from run to run.
	require.LessOrEqual(t, compacted[0]+compacted[1], 2000.0, "bytes per paid call, compacted")
}

// BenchmarkLedgerBytes pays b.N regex calls (16 in flight) and reports what
// each added to the ledger (ledgerPerCall): bytes-written/call and
// bytes-compacted/call. Run:
// go test -run '^$' -bench LedgerBytes -benchtime 1000x ./cmd/x402d
func BenchmarkLedgerBytes(b *testing.B) {
	// The first, sizing run (b.N 1) pays too few calls to measure.
	_, _, written, compacted := ledgerPerCall(context.Background(), b, 10*time.Minute, max(b.N, 100))
	b.ReportMetric(written[0]+written[1], "bytes-written/call")
	b.ReportMetric(compacted[0]+compacted[1], "bytes-compacted/call")
	b.ReportMetric(0, "ns/op")
}

// TestResultExpires: a paid call's result is kept RESULT_TTL; then the
// retention sweep (RETENTION_CRON) lets it go, polling the call and
// resending its payment answer 410 result_expired, and the call's ledger
// fields and events stay.
func TestResultExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	base := startInProcess(ctx, t, "serve", testEnv(db, map[string]string{"RESULT_TTL": "2s", "RETENTION_CRON": "@every 1s"}))
	client := &http.Client{Timeout: 30 * time.Second}
	body := `{"a":"x\n","b":"y\n"}`
	resp, out := post(t, client, base+"/api/x402/diff", "test:0xttl:n1", body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(out))
	callID := callIDOf(t, out)
	var token string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT token FROM calls WHERE id = $1`, callID).Scan(&token))
	poll := base + "/api/x402/calls/" + callID + "?token=" + token

	require.Eventually(t, func() bool {
		resp, err := client.Get(poll)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode == http.StatusGone
	}, 15*time.Second, 200*time.Millisecond, "the result is let go after RESULT_TTL")
	resp, err := client.Get(poll)
	require.NoError(t, err)
	gone, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusGone, resp.StatusCode)
	require.Equal(t, "result_expired", decodeJSON[map[string]any](t, gone)["error"])
	require.NotEmpty(t, resp.Header.Get("Payment-Response"), "the settlement is still told")

	resp, out = post(t, client, base+"/api/x402/diff", "test:0xttl:n1", body)
	require.Equal(t, http.StatusGone, resp.StatusCode, string(out))

	// The payer is read from the call's payment (the row keeps no copy).
	c, err := store.CallGetByID(ctx, db.Pool, callID)
	require.NoError(t, err)
	require.Equal(t, []any{store.CallPaid, "0xttl", "10000", true}, []any{c.State, c.Payer, c.Amount, c.Settlement != nil})
	require.Contains(t, eventTypes(ctx, t, db, callID), "settlement.confirmed")
}

// TestArchiveCommand runs `x402d archive -before` and `x402d archive
// restore` on a log with an old partition.
func TestArchiveCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	from, to := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, schema.CreateDetachedPartition(ctx, tx, "events_p20260901"))
	require.NoError(t, schema.AttachEventPartition(ctx, tx, schema.Partition{Name: "events_p20260901", From: from, To: to}))
	require.NoError(t, tx.Commit(ctx))
	_, err = db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ('host/a', 'host.seen', '{}', $1), ('host/b', 'host.seen', '{}', $1)`, from.Add(time.Hour))
	require.NoError(t, err)

	dir := t.TempDir()
	var out, errOut bytes.Buffer
	getenv := testEnv(db, nil)
	require.NoError(t, run(ctx, []string{"archive", "-before", "2026-10-15", "-dir", dir}, getenv, &out, &errOut, testOptions(getenv)), errOut.String())
	require.Equal(t, "archived events_p20260901: 2 events to events_p20260901.jsonl.gz\n", out.String())
	out.Reset()
	require.NoError(t, run(ctx, []string{"archive", "-before", "2026-10-15", "-dir", dir}, getenv, &out, &errOut, testOptions(getenv)), errOut.String())
	require.Equal(t, "no partition ends by 2026-10-15T00:00:00Z\n", out.String())
	out.Reset()
	require.NoError(t, run(ctx, []string{"archive", "restore", filepath.Join(dir, "events_p20260901.jsonl.gz")}, getenv, &out, &errOut, testOptions(getenv)), errOut.String())
	require.Regexp(t, `^restored events_p20260901: 2 events \(ids \d+-\d+\)\n$`, out.String())
	require.ErrorIs(t, run(ctx, []string{"archive"}, getenv, &out, &errOut, testOptions(getenv)), errUsage)
}
