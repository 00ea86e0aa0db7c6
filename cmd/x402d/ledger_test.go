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
)

// ledgerBytes is the on-disk size of the ledger's tables, events (its
// partitions) and calls, with their indexes and TOAST.
func ledgerBytes(ctx context.Context, t *testing.T, db *dbtest.DB) (events, calls int64) {
	t.Helper()
	// A partitioned table has no storage of its own: its partitions do.
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT
		(SELECT sum(pg_total_relation_size(inhrelid))::bigint FROM pg_inherits WHERE inhparent = 'events'::regclass),
		pg_total_relation_size('calls')`).Scan(&events, &calls))
	require.Positive(t, events)
	return events, calls
}

// TestLedgerBytesPerPaidCall pays regex calls with real EIP-3009 payments
// on the devchain (the payer echoes the quote's bazaar extension, as the
// official clients do) and measures what each paid call adds to the
// ledger's tables, indexes included: as written (after a plain VACUUM,
// which depends on how the run's updates fell on pages) and compacted
// (VACUUM FULL, what the rows themselves take, with calls' fillfactor).
// The bound is on the compacted figure, the repeatable one.
func TestLedgerBytesPerPaidCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, _, db := startDevchainServiceDB(ctx, t)
	payer := devPayer(t, 8)
	regex := []loadgen.Request{{Op: "regex", Body: `{"pattern":"\\d+","text":"a1b22 c333","flags":"g"}`}}
	vacuum := func(full bool) (events, calls int64) {
		stmt := "VACUUM events, calls"
		if full {
			stmt = "VACUUM FULL events, calls"
		}
		_, err := db.Pool.Exec(ctx, stmt)
		require.NoError(t, err)
		return ledgerBytes(ctx, t, db)
	}

	// Warm up: the first pages of each table and index.
	rep, err := loadgen.Run(ctx, loadgen.Config{BaseURL: base, Requests: regex, Payer: payer, Concurrency: 8, Duration: time.Second})
	require.NoError(t, err)
	require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
	events0, calls0 := vacuum(true)

	const paidCalls = 300
	rep, err = loadgen.Run(ctx, loadgen.Config{BaseURL: base, Requests: regex, Payer: payer, Concurrency: 16, MaxCalls: paidCalls, Duration: 5 * time.Minute})
	require.NoError(t, err)
	require.Equal(t, paidCalls, rep.Calls, rep.String())
	require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
	perCall := func(events, calls int64) (float64, float64) {
		return float64(events-events0) / float64(rep.Calls), float64(calls-calls0) / float64(rep.Calls)
	}
	writtenEvents, writtenCalls := perCall(vacuum(false))
	// A transaction of another test that began before the run's last
	// update keeps its dead row versions: the least of five tries, a
	// second apart.
	events, calls := perCall(vacuum(true))
	for range 4 {
		time.Sleep(time.Second)
		if e, c := perCall(vacuum(true)); e+c < events+calls {
			events, calls = e, c
		}
	}
	t.Logf("%d paid regex calls, bytes each: as written %.0f in events + %.0f in calls = %.0f; compacted %.0f + %.0f = %.0f",
		rep.Calls, writtenEvents, writtenCalls, writtenEvents+writtenCalls, events, calls, events+calls)
	// What is left, compacted: three event rows (call.paid,
	// job.succeeded with the run's start and its settlement's
	// submission, settlement.confirmed), each about 100 bytes before its
	// data with an entry in the key's index and a share of the stream's;
	// call.paid's data (the payment in its compact form, the token and
	// the request's hash); the calls row with its result and settlement
	// at fillfactor 70 and its four indexes. This bound keeps what was
	// won (before: about 9,600 as written, 4,490 compacted; 3,950 with
	// six events and the payment as hex in JSON).
	require.LessOrEqual(t, events+calls, 3000.0, "bytes per paid call, compacted")
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

	var state, payer, amount string
	var settled bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state, payer, amount, settlement IS NOT NULL FROM calls WHERE id = $1`, callID).Scan(&state, &payer, &amount, &settled))
	require.Equal(t, []any{"paid", "0xttl", "10000", true}, []any{state, payer, amount, settled})
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
