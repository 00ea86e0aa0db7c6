package api

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

func TestUnpaidLimiterTokens(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	testCases := []struct {
		name  string
		rate  float64
		burst int
		// runs are the ends of the key's unpaid runs, from start.
		runs []time.Duration
		// now is when the key's next call comes, from start.
		now time.Duration
		// wantRetry is its Retry-After (0: it is admitted).
		wantRetry int
	}{
		{name: "ok, no run", rate: 0.05, burst: 5, now: 0},
		{name: "ok, within the burst", rate: 0.05, burst: 5, runs: []time.Duration{0, 0, 0, 0}, now: 0},
		{name: "nok, the burst spent", rate: 0.05, burst: 5, runs: []time.Duration{0, 0, 0, 0, 0}, now: 0, wantRetry: 20},
		{name: "nok, a token half back", rate: 0.05, burst: 5, runs: []time.Duration{0, 0, 0, 0, 0}, now: 10 * time.Second, wantRetry: 10},
		{name: "ok, a token back", rate: 0.05, burst: 5, runs: []time.Duration{0, 0, 0, 0, 0}, now: 20 * time.Second},
		{name: "ok, runs spread out refill between them", rate: 0.05, burst: 2,
			runs: []time.Duration{0, 20 * time.Second, 40 * time.Second}, now: 40 * time.Second},
		{name: "nok, concurrent runs past the burst wait for each", rate: 0.05, burst: 2,
			runs: []time.Duration{0, 0, 0, 0}, now: 0, wantRetry: 60},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newUnpaidLimiter(tc.rate, tc.burst, time.Minute, nil, nil, slog.New(slog.DiscardHandler), clock.NewFake(at(tc.now)))
			l.runs = map[string][]time.Time{}
			for _, r := range tc.runs {
				l.runs["payer:p"] = append(l.runs["payer:p"], at(r))
			}
			_, by, err := l.admit("payer:p", "client:c")
			if tc.wantRetry == 0 {
				require.Nil(t, err)
				return
			}
			require.NotNil(t, err)
			require.Equal(t, "payer", by)
			require.Equal(t, 429, err.Status)
			require.Equal(t, "unpaid_work_limited", err.Code)
			require.Equal(t, tc.wantRetry, err.RetryAfter)
			// The same runs under the client address limit it alike.
			l.runs = map[string][]time.Time{"client:c": l.runs["payer:p"]}
			_, by, err = l.admit("payer:other", "client:c")
			require.NotNil(t, err)
			require.Equal(t, "client", by)
		})
	}
}

// TestUnpaidLimiterInFlight checks that a key with unpaid runs counts its
// calls in flight as tokens spent: when a token comes back, calls sent at
// once get one run between them, the others 429, until it ends; a key
// without runs is never held so.
func TestUnpaidLimiterInFlight(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	l := newUnpaidLimiter(0.05, 2, time.Minute, nil, nil, slog.New(slog.DiscardHandler), clk)
	l.runs = map[string][]time.Time{"payer:p": {start, start}}
	_, _, err := l.admit("payer:p", "")
	require.NotNil(t, err, "the burst is spent")
	clk.Set(start.Add(20 * time.Second))
	held, _, err := l.admit("payer:p", "client:c")
	require.Nil(t, err, "a token came back")
	require.Equal(t, []string{"payer:p"}, held)
	for range 10 {
		_, by, err := l.admit("payer:p", "client:c")
		require.NotNil(t, err, "a call past the token admitted while the first runs")
		require.Equal(t, "payer", by)
		require.Equal(t, 20, err.RetryAfter)
	}
	l.release(held)
	held2, _, err := l.admit("payer:p", "")
	require.Nil(t, err, "the first call ended paid: its token is back")
	l.release(held2)
	require.Empty(t, l.inflight)
	// A key without runs: any number at once.
	for range 100 {
		held, _, err := l.admit("payer:honest", "client:c")
		require.Nil(t, err)
		require.Empty(t, held)
	}
}

// TestUnpaidLimiterReadsPostgres records unpaid runs as a worker does and
// checks that a limiter following the database (as every api process does)
// limits their keys, and forgets runs older than its window.
func TestUnpaidLimiterReadsPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	connConfig, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	listener := store.NewListener(connConfig, slog.New(slog.DiscardHandler))
	require.NoError(t, listener.Start(ctx))
	t.Cleanup(listener.Stop)
	l := newUnpaidLimiter(0.05, 2, time.Minute, db.Pool, listener, slog.New(slog.DiscardHandler), nil)
	l.start(ctx)
	t.Cleanup(l.stop)

	payer, client := store.UnpaidPayerKey("eip155:8453", "0xPayer"), store.UnpaidClientKey("192.0.2.1")
	require.Equal(t, "", store.UnpaidClientKey(""))
	record := func(at time.Time, keys ...string) {
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			return store.RecordUnpaidWork(ctx, tx, at, keys...)
		}))
	}
	// Runs older than the window (burst/rate: 40 s) weigh nothing.
	record(time.Now().Add(-time.Minute), payer, client)
	record(time.Now().Add(-time.Minute), payer, client)
	record(time.Now(), payer, client)
	_, _, err2 := l.admit("payer:other", "")
	require.Nil(t, err2)
	record(time.Now(), payer, client)
	require.Eventually(t, func() bool {
		// A call admitted meanwhile ends at once: its tokens held in
		// flight would otherwise limit the payer before the runs are read.
		held, by, err := l.admit(payer, "")
		if err == nil {
			l.release(held)
		}
		return err != nil && by == "payer"
	}, 10*time.Second, 10*time.Millisecond, "the limiter never read the runs recorded")
	_, by, err3 := l.admit("payer:other", client)
	require.NotNil(t, err3)
	require.Equal(t, "client", by)
	_, _, err4 := l.admit("payer:other", "client:other")
	require.Nil(t, err4)

	// Records past UnpaidWorkKept are forgotten.
	record(time.Now().Add(-store.UnpaidWorkKept-time.Hour), "payer:old")
	require.NoError(t, store.ForgetUnpaidWork(ctx, db.Pool, time.Now().Add(-store.UnpaidWorkKept)))
	runs, err := store.UnpaidWorkSince(ctx, db.Pool, time.Time{})
	require.NoError(t, err)
	require.Len(t, runs, 8)
}
