package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// opsCall records a call of op by payer on network through its events, up
// to final state: "paid", "failed", "unpaid", or "queued" to stop early. A
// call whose id ends in an odd digit is written as calls are now
// (call.paid), the others as streams written before migration 011 are
// (payment.verified, job.queued).
func opsCall(ctx context.Context, t *testing.T, db *dbtest.DB, id, op, network, payer, amount, final string) {
	t.Helper()
	s := store.CallStream(id)
	verified := store.PaymentVerified{Op: op, Token: "tok", RequestHash: []byte{1},
		Payment: x402.Payment{Network: network, Payer: payer, Nonce: id, Amount: amount, Payload: json.RawMessage(`{}`)}}
	steps := [][]store.NewEvent{{
		{Stream: s, Type: store.EventPaymentVerified, Data: verified},
		{Stream: s, Type: store.EventJobQueued, Data: store.JobQueued{JobID: 1, Queue: "pure"}},
	}}
	if (id[len(id)-1]-'0')%2 == 1 {
		steps = [][]store.NewEvent{{{Stream: s, Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: verified, JobID: 1}}}}
	}
	if final != store.CallQueued {
		steps = append(steps, []store.NewEvent{{Stream: s, Type: store.EventJobStarted, Data: store.JobStarted{JobID: 1, Attempt: 1}}})
	}
	switch final {
	case store.CallFailed:
		steps = append(steps, []store.NewEvent{{Stream: s, Type: store.EventJobFailed, Data: store.JobFailed{JobID: 1, Error: "operation_failed", Message: "x"}}})
	case store.CallPaid, store.CallUnpaid:
		done := store.EventSettlementConfirmed
		resp := x402.SettleResponse{Success: true, Transaction: "0xtx" + id, Network: network, Payer: payer}
		if (id[len(id)-1]-'0')%2 == 1 && strings.HasPrefix(network, "eip155:") {
			// An EVM transaction: settlement.confirmed as one string.
			sum := sha256.Sum256([]byte(id))
			resp.Transaction = "0x" + hex.EncodeToString(sum[:])
		}
		if final == store.CallUnpaid {
			done = store.EventSettlementFailed
			resp = x402.SettleResponse{ErrorReason: "invalid_exact_evm_insufficient_balance", Network: network, Payer: payer}
		}
		steps = append(steps,
			[]store.NewEvent{{Stream: s, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 1, Result: json.RawMessage(`{"call_id":"` + id + `","op":"` + op + `"}`)}}},
			[]store.NewEvent{{Stream: s, Type: store.EventSettlementSubmitted, Data: store.SettlementSubmitted{JobID: 2, Network: network, Attempt: 1}}},
			[]store.NewEvent{{Stream: s, Type: done, Data: store.SettlementDone{Response: resp, Cost: &x402.SettleCost{GasUsed: 100, GasPriceWei: "3", Batch: 2}}}},
		)
	}
	for _, events := range steps {
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return store.Append(ctx, tx, events...) }))
	}
}

func TestOpsReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	base := "eip155:8453"
	opsCall(ctx, t, db, "c01", "diff", base, "0xa", "10000", store.CallPaid)
	opsCall(ctx, t, db, "c02", "diff", base, "0xb", "10000", store.CallPaid)
	opsCall(ctx, t, db, "c03", "regex", base, "0xa", "10000", store.CallFailed)
	opsCall(ctx, t, db, "c04", "regex", "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", "So1", "10000", store.CallPaid)
	opsCall(ctx, t, db, "c05", "url-meta", base, "0xc", "30000", store.CallUnpaid)
	opsCall(ctx, t, db, "c06", "url-meta", base, "0xc", "30000", store.CallQueued)
	// An old call, outside a one-hour window.
	opsCall(ctx, t, db, "c00", "diff", base, "0xold", "10000", store.CallPaid)
	_, err := db.Pool.Exec(ctx, "UPDATE calls SET created_at = now() - interval '2 hours' WHERE id = 'c00'")
	require.NoError(t, err)
	// c01's settlement is one string, c02's and c00's its fields: the gas
	// sum reads both.
	var oneString bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT data ? 's' FROM events WHERE stream = 'call/c01' AND type = 'settlement.confirmed'").Scan(&oneString))
	require.True(t, oneString)
	// A settlement's cost as the events written before kept it, an object.
	_, err = db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data) VALUES ('call/cold', 'settlement.confirmed',
		'{"response":{"success":true,"network":"eip155:8453","transaction":"0xcold"},"cost":{"gas_used":1000,"gas_price_wei":"2","batch":1}}')`)
	require.NoError(t, err)

	t.Run("CallListNewestFirstFilteredAndPaged", func(t *testing.T) {
		t.Parallel()
		ids := func(calls []*store.Call) []string {
			out := make([]string, len(calls))
			for i, c := range calls {
				out[i] = c.ID
			}
			return out
		}
		all, err := store.CallList(ctx, db.Pool, &store.CallListParams{})
		require.NoError(t, err)
		require.Equal(t, []string{"c06", "c05", "c04", "c03", "c02", "c01", "c00"}, ids(all))

		diff, err := store.CallList(ctx, db.Pool, &store.CallListParams{Op: "diff"})
		require.NoError(t, err)
		require.Equal(t, []string{"c02", "c01", "c00"}, ids(diff))

		paidRegex, err := store.CallList(ctx, db.Pool, &store.CallListParams{Op: "regex", State: store.CallPaid})
		require.NoError(t, err)
		require.Equal(t, []string{"c04"}, ids(paidRegex))

		var pages [][]string
		p := &store.CallListParams{Limit: 3}
		for {
			page, err := store.CallList(ctx, db.Pool, p)
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			pages = append(pages, ids(page))
			last := page[len(page)-1]
			p.Before = &store.CallPosition{CreatedAt: last.CreatedAt, ID: last.ID}
		}
		require.Equal(t, [][]string{{"c06", "c05", "c04"}, {"c03", "c02", "c01"}, {"c00"}}, pages)
	})

	t.Run("CallOpList", func(t *testing.T) {
		t.Parallel()
		ops, err := store.CallOpList(ctx, db.Pool)
		require.NoError(t, err)
		require.Equal(t, []string{"diff", "regex", "url-meta"}, ops)
	})

	t.Run("CallStatsSince", func(t *testing.T) {
		t.Parallel()
		now := time.Now()
		s, err := store.CallStatsSince(ctx, db.Pool, now.Add(-time.Hour), now, 60)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"paid": 3, "failed": 1, "unpaid": 1, "queued": 1}, s.States)
		require.Equal(t, []store.Revenue{{Key: "diff", Calls: 2, Amount: "20000"}, {Key: "regex", Calls: 1, Amount: "10000"}}, s.RevenueByOp)
		require.Equal(t, []store.Revenue{{Key: base, Calls: 2, Amount: "20000", GasWei: "2900"}, {Key: "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", Calls: 1, Amount: "10000", GasWei: "300"}}, s.RevenueByNetwork)
		require.Len(t, s.PerMinute, 60)
		var sum int64
		for _, n := range s.PerMinute {
			sum += n
		}
		require.Equal(t, int64(6), sum, "the six calls of the last minutes, not the old one")
		require.Positive(t, s.PerMinute[59]+s.PerMinute[58])

		s, err = store.CallStatsSince(ctx, db.Pool, now.Add(-3*time.Hour), now, 60)
		require.NoError(t, err)
		require.Equal(t, int64(4), s.States["paid"])
	})

	t.Run("SettlementFailureList", func(t *testing.T) {
		t.Parallel()
		list, err := store.SettlementFailureList(ctx, db.Pool, time.Now().Add(-time.Hour), 10)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, "c05", list[0].CallID)
		require.Equal(t, "invalid_exact_evm_insufficient_balance", list[0].Reason)
		require.Equal(t, "0xc", list[0].Payer)
	})
}

func TestQueueDepthList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	for i, row := range []struct{ queue, state, at string }{
		{"pure", "available", "now() - interval '30 seconds'"},
		{"pure", "available", "now() - interval '5 seconds'"},
		{"pure", "running", "now()"},
		{"settlement", "retryable", "now() + interval '1 minute'"},
		{"settlement", "completed", "now()"},
	} {
		_, err := db.Pool.Exec(ctx, fmt.Sprintf(`INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at, finalized_at)
			VALUES ('{}', 'k%d', 3, $1, $2::river_job_state, %s, CASE WHEN $3 THEN now() END)`, i, row.at), row.queue, row.state, row.state == "completed")
		require.NoError(t, err)
	}
	list, err := store.QueueDepthList(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, list, 2)
	pure, settle := list[0], list[1]
	require.Equal(t, "pure", pure.Queue)
	require.Equal(t, int64(2), pure.Available)
	require.Equal(t, int64(1), pure.Running)
	require.NotNil(t, pure.OldestAvailable)
	require.InDelta(t, 30, time.Since(*pure.OldestAvailable).Seconds(), 5)
	require.Equal(t, "settlement", settle.Queue)
	require.Equal(t, int64(1), settle.Retryable)
	require.Zero(t, settle.Available)
	require.Nil(t, settle.OldestAvailable)
}

// TestIndexReads runs on a bare schema of its own with stand-ins for the
// index tables (the index package owns their layout): the reads take
// whatever columns are there.
func TestIndexReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	name := db.Schema + "_ix"
	_, err := db.Pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	figures, err := store.IndexFiguresGet(ctx, pool)
	require.NoError(t, err)
	require.Nil(t, figures, "not installed")
	sources, err := store.IndexSourceList(ctx, pool)
	require.NoError(t, err)
	require.Nil(t, sources)

	_, err = pool.Exec(ctx, `
		CREATE TABLE index_sources (url text PRIMARY KEY, cursor int NOT NULL, full_scans int NOT NULL, last_at timestamptz);
		CREATE TABLE index_hosts (host text PRIMARY KEY, live boolean);
		CREATE TABLE index_resources (url text PRIMARY KEY, host text);
		INSERT INTO index_sources VALUES ('https://b.example/list', 0, 1, NULL), ('https://a.example/list', 40, 2, '2026-11-22T10:00:00Z');
		INSERT INTO index_hosts VALUES ('a', true), ('b', true), ('c', false), ('d', NULL), ('e', NULL), ('f', NULL);
		INSERT INTO index_resources VALUES ('https://a/1', 'a'), ('https://a/2', 'a'), ('https://c/1', 'c');`)
	require.NoError(t, err)

	figures, err = store.IndexFiguresGet(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, &store.IndexFigures{Sources: 2, FullScans: 3, Resources: 3, Hosts: 6, Live: 2, Dead: 1, Unmeasured: 3}, figures)
	sources, err = store.IndexSourceList(ctx, pool)
	require.NoError(t, err)
	require.Len(t, sources, 2)
	require.JSONEq(t, `{"url":"https://a.example/list","cursor":40,"full_scans":2,"last_at":"2026-11-22T10:00:00+00:00"}`, string(sources[0]))
	require.Contains(t, string(sources[1]), `"last_at":null`)
}
