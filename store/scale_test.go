package store

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/schema"
	"github.com/x402d/x402d/x402"
)

// scaleHistory is how far back the generated calls go.
const scaleHistory = 120 * 24 * time.Hour

// generateLedger fills db with n paid calls spread over the scaleHistory
// before now, each with the four events of a paid call whose run took
// longer than a moment (call.paid with a payment of the size real ones
// have, job.started, job.succeeded naming its settlement job,
// settlement.confirmed; a quicker run has no job.started of its own) in
// the forms written before migration 015 packed them (larger rows, which
// every reader reads), and its calls row as call.paid writes it, in
// monthly partitions.
func generateLedger(ctx context.Context, b *testing.B, db *dbtest.DB, n int) {
	b.Helper()
	start := schema.PeriodMonth.Start(time.Now().Add(-scaleHistory))
	first := schema.PeriodMonth.Start(time.Now())
	for from := start; from.Before(first); from = schema.PeriodMonth.Next(from) {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(b, err)
		p := schema.Partition{Name: "events_p" + from.Format("20060102"), From: from, To: schema.PeriodMonth.Next(from)}
		require.NoError(b, schema.CreateDetachedPartition(ctx, tx, p.Name))
		require.NoError(b, schema.AttachEventPartition(ctx, tx, p))
		require.NoError(b, tx.Commit(ctx))
	}
	if n == 0 {
		return
	}
	began := time.Now()
	_, err := db.Pool.Exec(ctx, `INSERT INTO calls (id, op, state, token, request_hash, payment_key, network, payer, amount, result, settlement, created_at, updated_at)
		SELECT md5(i::text), 'regex', 'paid', md5('t' || i), '', encode(substr(decode(md5('k' || i), 'hex'), 1, 16), 'base64'),
			'eip155:8453', '', '10000',
			('{"call_id":"' || md5(i::text) || '","op":"regex","engine":"re2","flags":"g","match_count":2,"truncated":false,"matches":[{"match":"1","index":1,"end":2,"groups":[]},{"match":"22","index":3,"end":5,"groups":[]}]}')::json,
			('{"success":true,"payer":"0x' || substr(md5('p' || i % 1000), 1, 40) || '","transaction":"0x' || md5('x' || i) || md5('y' || i) || '","network":"eip155:8453"}')::jsonb,
			t.at, t.at + interval '2 seconds'
		FROM generate_series(1, $1) i, LATERAL (SELECT now() - $2::interval + (i::float8 / $1) * ($2::interval - interval '1 hour') AS at) t`,
		n, scaleHistory)
	require.NoError(b, err)
	payment := `{"evm":{"v":2,"net":"eip155:8453","asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","timeout":300,"extra":{"name":"USD Coin","version":"2"},` +
		`"from":"0x__PAYER__","to":"0xa0Ee7A142d267C1f36714E4a8F75612F20a79720","value":"10000","after":"1795555165","before":"1795556065",` +
		`"nonce":"__NONCE__","sig":"__SIG__"},"verifiedAt":"2026-11-24T21:29:18.123456Z","validBefore":"2026-11-24T21:44:25Z"}`
	_, err = db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at)
		SELECT 'call/' || c.id, v.type, CASE v.k
			WHEN 1 THEN jsonb_build_object('op', 'regex', 'token', c.token, 'request_hash', encode(decode(md5('r' || c.id), 'hex') || decode(md5('s' || c.id), 'hex'), 'base64'),
				'job_id', 1, 'payment', replace(replace(replace($1, '__PAYER__', substr(md5(c.id), 1, 40)),
					'__NONCE__', encode(decode(md5(c.id) || md5(c.token), 'hex'), 'base64')),
					'__SIG__', replace(encode(decode(md5(c.id) || md5(c.id || 'a') || md5(c.id || 'b') || md5(c.id || 'c') || '1b', 'hex'), 'base64'), E'\n', ''))::jsonb)
			WHEN 2 THEN '{"job_id":1,"attempt":1}'::jsonb
			WHEN 3 THEN jsonb_build_object('job_id', 1, 'bytes', 211, 'sha256', md5(c.id) || md5(c.token), 'settle_job_id', 2)
			ELSE jsonb_build_object('response', c.settlement)
			END, c.created_at + (v.k - 1) * interval '1 millisecond'
		FROM calls c CROSS JOIN (VALUES (1, 'call.paid'), (2, 'job.started'), (3, 'job.succeeded'), (4, 'settlement.confirmed')) v(k, type)
		ORDER BY c.created_at, v.k`, payment)
	require.NoError(b, err)
	_, err = db.Pool.Exec(ctx, "VACUUM ANALYZE calls")
	require.NoError(b, err)
	_, err = db.Pool.Exec(ctx, "VACUUM ANALYZE events")
	require.NoError(b, err)
	var events int64
	require.NoError(b, db.Pool.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&events))
	b.Logf("generated %d calls and %d events in %s", n, events, time.Since(began).Round(time.Second))
}

// settleBenchCall records the result and the settlement of call id, an
// admitted regex call, as a worker does.
func settleBenchCall(ctx context.Context, b *testing.B, db *dbtest.DB, id string) {
	b.Helper()
	result, err := ResultObject(id, "regex", []byte(`{"engine":"re2","flags":"g","match_count":2,"truncated":false,"matches":[{"match":"1","index":1,"end":2,"groups":[]},{"match":"22","index":3,"end":5,"groups":[]}]}`))
	require.NoError(b, err)
	for _, e := range []NewEvent{
		{Stream: CallStream(id), Type: EventJobSucceeded, Data: JobSucceeded{JobID: 1, Result: result, Op: "regex"}},
		{Stream: CallStream(id), Type: EventSettlementConfirmed, Data: SettlementDone{Response: x402.SettleResponse{Success: true,
			Payer: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f", Transaction: "0x6e903cbc43593f02da852e18c9d8988cf9e22542bde8e1e4356ff630739b092c", Network: "eip155:8453"}}},
	} {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(b, err)
		require.NoError(b, Append(ctx, tx, e))
		require.NoError(b, tx.Commit(ctx))
	}
}

// explainHot logs the executed plans of the hot statements and fails on a
// sequential scan.
func explainHot(ctx context.Context, b *testing.B, db *dbtest.DB, id, key string) {
	b.Helper()
	for name, q := range map[string][]any{
		"poll (CallGetAnswer)":                 {"SELECT " + answerColumns + " FROM calls WHERE id = $1", id},
		"settle (CallListToSettle)":            {"SELECT " + settleColumns + " FROM calls WHERE id = ANY($1)", []string{id}},
		"resent payment (CallGetByPaymentKey)": {"SELECT " + callColumns + " FROM calls WHERE payment_key = $1", PaymentDigest(key)},
	} {
		// Executed (ANALYZE): the partitions pruned at run time, by the
		// call's creation time, show as never executed.
		rows, err := db.Pool.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+q[0].(string), q[1:]...)
		require.NoError(b, err)
		var plan []string
		for rows.Next() {
			var line string
			require.NoError(b, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(b, rows.Err())
		text := strings.Join(plan, "\n")
		b.Logf("%s:\n%s", name, text)
		for _, line := range plan {
			if strings.Contains(line, "Seq Scan on") && !strings.Contains(line, "never executed") {
				b.Errorf("%s: a sequential scan: %s", name, strings.TrimSpace(line))
			}
		}
	}
}

// BenchmarkLedgerAtScale measures the ledger's hot paths, on empty tables
// and on tables holding generated history: X402D_SCALE_CALLS paid calls
// (2,500,000 by default) with four events each (10 million), spread over
// the 120 days before now in monthly partitions. Admit is a paid call's
// admission (its call.paid event and its calls row, one transaction);
// Settle reads 16 calls to settle with their payments; Poll reads a call's
// answer; Resent finds the call of a resent payment (the calls read are
// settled: settleBenchCall). It logs the statements' plans and fails on a
// sequential scan of calls or events.
// Run: go test -run '^$' -bench LedgerAtScale -benchtime 2000x -timeout 60m ./store
func BenchmarkLedgerAtScale(b *testing.B) {
	ctx := context.Background()
	n := 2_500_000
	if v := os.Getenv("X402D_SCALE_CALLS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(b, err)
	}
	for _, size := range []struct {
		name  string
		calls int
	}{{"empty", 0}, {fmt.Sprintf("calls=%d", n), n}} {
		b.Run(size.name, func(b *testing.B) {
			db := dbtest.Schema(ctx, b)
			generateLedger(ctx, b, db, size.calls)
			// Calls admitted now, as the hot paths see them.
			// Their payments are exact EVM ones, as the api admits them
			// (their ledger form packs); keys[id] is a payment's replay key.
			var seq int
			keys := map[string]string{}
			admit := func() string {
				seq++
				id := fmt.Sprintf("bench%08d", seq)
				payment := paytest.ExactEVM(fmt.Sprintf("0x%040x", seq), id)
				keys[id] = payment.Key()
				tx, err := db.Pool.Begin(ctx)
				require.NoError(b, err)
				err = Append(ctx, tx, NewEvent{Stream: CallStream(id), Type: EventCallPaid, Data: PaidCall{PaymentVerified: PaymentVerified{
					Op: "regex", Token: "tok" + id, RequestHash: []byte(id), Payment: payment,
				}, JobID: int64(seq)}})
				require.NoError(b, err)
				require.NoError(b, tx.Commit(ctx))
				return id
			}
			// The calls read are settled, as a poll or a resent payment
			// mostly finds them: their rows hold a result and a
			// settlement.
			ids := make([]string, 16)
			for i := range ids {
				ids[i] = admit()
				settleBenchCall(ctx, b, db, ids[i])
			}
			explainHot(ctx, b, db, ids[0], keys[ids[0]])

			b.Run("Admit", func(b *testing.B) {
				for b.Loop() {
					admit()
				}
			})
			b.Run("Settle", func(b *testing.B) {
				for b.Loop() {
					calls, err := CallListToSettle(ctx, db.Pool, ids)
					require.NoError(b, err)
					require.Len(b, calls, len(ids))
				}
			})
			b.Run("Poll", func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					_, err := CallGetAnswer(ctx, db.Pool, ids[i%len(ids)])
					require.NoError(b, err)
				}
			})
			b.Run("Resent", func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					_, err := CallGetByPaymentKey(ctx, db.Pool, keys[ids[i%len(ids)]])
					require.NoError(b, err)
				}
			})
		})
	}
}
