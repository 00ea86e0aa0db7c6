package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

// insertCall writes a calls row created at created, with a result or not.
func insertCall(ctx context.Context, t *testing.T, db *dbtest.DB, id string, created time.Time, result bool) {
	t.Helper()
	var res any
	if result {
		res = `{"call_id":"` + id + `","op":"diff"}`
	}
	_, err := db.Pool.Exec(ctx, `INSERT INTO calls (id, op, state, token, request_hash, payment_key, network, payer, amount, result, created_at, updated_at)
		VALUES ($1, 'diff', 'paid', 'tok', '\x01', 'eip155:8453/0xabc/' || $1, 'eip155:8453', '0xabc', '10000', $2::json, $3, $3)`, id, res, created)
	require.NoError(t, err)
}

func TestResultsExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	now := time.Now()
	for i := range 25 {
		insertCall(ctx, t, db, fmt.Sprintf("old%02d", i), now.Add(-40*24*time.Hour+time.Duration(i)*time.Minute), true)
	}
	insertCall(ctx, t, db, "oldnoresult", now.Add(-40*24*time.Hour), false)
	insertCall(ctx, t, db, "recent", now.Add(-time.Hour), true)

	cutoff := now.Add(-30 * 24 * time.Hour)
	n, err := store.ResultsExpire(ctx, db.Pool, cutoff, 10)
	require.NoError(t, err)
	require.Equal(t, 25, n, "every old result, in batches of 10")

	old, err := store.CallGetByID(ctx, db.Pool, "old07")
	require.NoError(t, err)
	require.Nil(t, old.Result)
	require.NotNil(t, old.ResultExpiredAt)
	require.Equal(t, "0xabc", old.Payer, "the ledger fields stay")
	require.Equal(t, "10000", old.Amount)
	require.Equal(t, store.CallPaid, old.State)
	recent, err := store.CallGetByID(ctx, db.Pool, "recent")
	require.NoError(t, err)
	require.NotNil(t, recent.Result)
	require.Nil(t, recent.ResultExpiredAt)

	// The next sweep starts where this one ended: a call from before its
	// mark less a day is not read again (its result, written here by hand
	// as no call would, stays).
	insertCall(ctx, t, db, "ancient", now.Add(-60*24*time.Hour), true)
	insertCall(ctx, t, db, "justold", cutoff.Add(-time.Hour), true)
	n, err = store.ResultsExpire(ctx, db.Pool, cutoff.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ancient, err := store.CallGetByID(ctx, db.Pool, "ancient")
	require.NoError(t, err)
	require.NotNil(t, ancient.Result)
	justOld, err := store.CallGetByID(ctx, db.Pool, "justold")
	require.NoError(t, err)
	require.Nil(t, justOld.Result)
}

// TestRetentionMark: a sweep's mark is zero until recorded, and only moves
// forward; each sweep has its own.
func TestRetentionMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	for _, step := range []struct {
		name    string
		advance time.Time
		want    time.Time
	}{
		{name: "never ran"},
		{name: "recorded", advance: at, want: at},
		{name: "not moved back", advance: at.Add(-time.Hour), want: at},
		{name: "moved forward", advance: at.Add(time.Hour), want: at.Add(time.Hour)},
	} {
		if !step.advance.IsZero() {
			require.NoError(t, store.RetentionMarkAdvance(ctx, db.Pool, store.RetentionProbes, step.advance), step.name)
		}
		got, err := store.RetentionMarkGet(ctx, db.Pool, store.RetentionProbes)
		require.NoError(t, err, step.name)
		require.True(t, step.want.Equal(got), "%s: %s, want %s", step.name, got, step.want)
		other, err := store.RetentionMarkGet(ctx, db.Pool, store.RetentionResults)
		require.NoError(t, err)
		require.True(t, other.IsZero(), "the results' sweep has its own mark")
	}
}
