package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

func verified(nonce string) store.PaymentVerified {
	return store.PaymentVerified{
		Op: "diff", Token: "tok", RequestHash: []byte{1, 2, 3},
		Payment: x402.Payment{Network: "eip155:8453", Payer: "0xabc", Nonce: nonce, Amount: "10000", Payload: json.RawMessage(`{}`)},
	}
}

// resultOf returns a result object of call id (an op "diff"), as the
// worker writes it: its call_id and op, then fields (JSON, or "").
func resultOf(id, fields string) json.RawMessage {
	if fields != "" {
		fields = "," + fields
	}
	return json.RawMessage(`{"call_id":"` + id + `","op":"diff"` + fields + `}`)
}

func appendTx(ctx context.Context, t *testing.T, db *dbtest.DB, events ...store.NewEvent) error {
	t.Helper()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	if err := store.Append(ctx, tx, events...); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func TestAppend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	type testBundle struct{ db *dbtest.DB }
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{db: dbtest.Schema(ctx, t)}
	}

	t.Run("CallLifecycleInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := store.CallStream("c1")
		require.NoError(t, appendTx(ctx, t, b.db,
			store.NewEvent{Stream: s, Type: store.EventPaymentVerified, Data: verified("n1")},
			store.NewEvent{Stream: s, Type: store.EventJobQueued, Data: store.JobQueued{JobID: 1, Queue: "pure"}},
		))
		require.NoError(t, appendTx(ctx, t, b.db, store.NewEvent{Stream: s, Type: store.EventJobStarted, Data: store.JobStarted{JobID: 1, Attempt: 1}}))
		require.NoError(t, appendTx(ctx, t, b.db, store.NewEvent{Stream: s, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 1, Result: resultOf("c1", `"x":1`)}}))

		c, err := store.CallGetByID(ctx, b.db.Pool, "c1")
		require.NoError(t, err)
		require.Equal(t, store.CallSettling, c.State)
		require.Equal(t, `{"call_id":"c1","op":"diff","x":1}`, string(c.Result), "the result, byte for byte")

		require.NoError(t, appendTx(ctx, t, b.db,
			store.NewEvent{Stream: s, Type: store.EventSettlementSubmitted, Data: store.SettlementSubmitted{JobID: 2, Network: "eip155:8453", Attempt: 1}},
			store.NewEvent{Stream: s, Type: store.EventSettlementConfirmed, Data: store.SettlementDone{Response: x402.SettleResponse{Success: true, Payer: "0xabc", Transaction: "0x1", Network: "eip155:8453"}}},
		))
		c, err = store.CallGetByID(ctx, b.db.Pool, "c1")
		require.NoError(t, err)
		require.Equal(t, store.CallPaid, c.State)
		require.Equal(t, &x402.SettleResponse{Success: true, Payer: "0xabc", Transaction: "0x1", Network: "eip155:8453"}, c.Settlement)
		require.NotEmpty(t, c.Payment.Payload)

		// The answer's read is the same call without its payment.
		a, err := store.CallGetAnswer(ctx, b.db.Pool, "c1")
		require.NoError(t, err)
		require.Equal(t, x402.Payment{}, a.Payment)
		a.Payment = c.Payment
		require.Equal(t, c, a)
		_, err = store.CallGetAnswer(ctx, b.db.Pool, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)

		// Settling's read is the same call without its result.
		st, err := store.CallGetToSettle(ctx, b.db.Pool, "c1")
		require.NoError(t, err)
		require.Nil(t, st.Result)
		st.Result = c.Result
		require.Equal(t, c, st)
		_, err = store.CallGetToSettle(ctx, b.db.Pool, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
		// And listed so, leaving out the calls that do not exist.
		listed, err := store.CallListToSettle(ctx, b.db.Pool, []string{"nope", "c1"})
		require.NoError(t, err)
		want := *st
		want.Result = nil
		require.Equal(t, []*store.Call{&want}, listed)
		listed, err = store.CallListToSettle(ctx, b.db.Pool, []string{"nope"})
		require.NoError(t, err)
		require.Empty(t, listed)

		events, err := store.EventListByStream(ctx, b.db.Pool, s)
		require.NoError(t, err)
		var types []string
		for _, e := range events {
			types = append(types, e.Type)
		}
		require.Equal(t, []string{
			store.EventPaymentVerified, store.EventJobQueued, store.EventJobStarted, store.EventJobSucceeded,
			store.EventSettlementSubmitted, store.EventSettlementConfirmed,
		}, types)
	})

	// A stream as written since call.paid: the payment and its job in one
	// event, the settlement's first submission in job.succeeded. The row
	// keeps the key's digest and neither payer nor request hash, which
	// every read of the payment restores from the event.
	t.Run("CallLifecycleFolded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := store.CallStream("f1")
		v := verified("nf1")
		require.NoError(t, appendTx(ctx, t, b.db, store.NewEvent{Stream: s, Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: v, JobID: 1}}))
		c, err := store.CallGetAnswer(ctx, b.db.Pool, "f1")
		require.NoError(t, err)
		require.Equal(t, store.CallQueued, c.State)
		require.Equal(t, "tok", c.Token)
		require.NoError(t, appendTx(ctx, t, b.db,
			store.NewEvent{Stream: s, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 1, Attempt: 1, Result: resultOf("f1", `"x":1`), SettleJobID: 2}}))
		require.NoError(t, appendTx(ctx, t, b.db, store.NewEvent{Stream: s, Type: store.EventSettlementConfirmed,
			Data: store.SettlementDone{Response: x402.SettleResponse{Success: true, Payer: "0xabc", Transaction: "0x1", Network: "eip155:8453"}}}))

		var rowPayer, rowKey string
		var rowHash []byte
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT payer, request_hash, payment_key FROM calls WHERE id = 'f1'").Scan(&rowPayer, &rowHash, &rowKey))
		require.Equal(t, []any{"", []byte{}, store.PaymentDigest(v.Payment.Key())}, []any{rowPayer, rowHash, rowKey})

		for name, get := range map[string]func() (*store.Call, error){
			"CallGetByID":         func() (*store.Call, error) { return store.CallGetByID(ctx, b.db.Pool, "f1") },
			"CallGetByPaymentKey": func() (*store.Call, error) { return store.CallGetByPaymentKey(ctx, b.db.Pool, v.Payment.Key()) },
			"CallGetToSettle":     func() (*store.Call, error) { return store.CallGetToSettle(ctx, b.db.Pool, "f1") },
		} {
			c, err := get()
			require.NoError(t, err, name)
			require.Equal(t, store.CallPaid, c.State, name)
			require.Equal(t, "0xabc", c.Payer, name)
			require.Equal(t, v.RequestHash, c.RequestHash, name)
			require.Equal(t, v.Payment.Key(), c.Payment.Key(), name)
			require.Equal(t, &x402.SettleResponse{Success: true, Payer: "0xabc", Transaction: "0x1", Network: "eip155:8453"}, c.Settlement, name)
		}
		events, err := store.EventListByStream(ctx, b.db.Pool, s)
		require.NoError(t, err)
		var types []string
		for _, e := range events {
			types = append(types, e.Type)
		}
		require.Equal(t, []string{store.EventCallPaid, store.EventJobSucceeded, store.EventSettlementConfirmed}, types)
	})

	// The replay guard holds between the forms: a payment admitted with
	// call.paid is refused as payment.verified (an api of a release
	// before migration 012, whose whole key that migration's trigger turns
	// into its digest), and the other way round; a call admitted before the
	// migration (its whole key in the row) is found by its key.
	t.Run("PaymentUsedOnceAcrossForms", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		paid := func(id, nonce string) store.NewEvent {
			return store.NewEvent{Stream: store.CallStream(id), Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: verified(nonce), JobID: 1}}
		}
		old := func(id, nonce string) store.NewEvent {
			return store.NewEvent{Stream: store.CallStream(id), Type: store.EventPaymentVerified, Data: verified(nonce)}
		}
		require.NoError(t, appendTx(ctx, t, b.db, paid("a1", "x1")))
		require.ErrorIs(t, appendTx(ctx, t, b.db, old("a2", "x1")), store.ErrConflict)
		require.NoError(t, appendTx(ctx, t, b.db, old("b1", "x2")))
		require.ErrorIs(t, appendTx(ctx, t, b.db, paid("b2", "x2")), store.ErrConflict)
		var key string
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT payment_key FROM calls WHERE id = 'b1'").Scan(&key))
		x2 := verified("x2")
		require.Equal(t, store.PaymentDigest(x2.Payment.Key()), key, "the trigger and PaymentDigest agree")

		// A row written before the migration, its key whole (the trigger
		// skipped, as it did not exist then).
		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SET LOCAL session_replication_role = replica")
		require.NoError(t, err)
		require.NoError(t, store.Append(ctx, tx, old("c1", "x3")))
		require.NoError(t, tx.Commit(ctx))
		x3 := verified("x3")
		whole := x3.Payment.Key()
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT payment_key FROM calls WHERE id = 'c1'").Scan(&key))
		require.Equal(t, whole, key)
		for id, nonce := range map[string]string{"a1": "x1", "b1": "x2", "c1": "x3"} {
			v := verified(nonce)
			c, err := store.CallGetByPaymentKey(ctx, b.db.Pool, v.Payment.Key())
			require.NoError(t, err, id)
			require.Equal(t, id, c.ID)
			require.Equal(t, []byte{1, 2, 3}, c.RequestHash, id)
		}
	})

	t.Run("RefusesMoveFromFinalState", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := store.CallStream("c2")
		require.NoError(t, appendTx(ctx, t, b.db,
			store.NewEvent{Stream: s, Type: store.EventPaymentVerified, Data: verified("n2")},
			store.NewEvent{Stream: s, Type: store.EventJobFailed, Data: store.JobFailed{JobID: 1, Error: "operation_failed"}},
		))
		err := appendTx(ctx, t, b.db, store.NewEvent{Stream: s, Type: store.EventJobSucceeded, Data: store.JobSucceeded{Result: resultOf("c2", "")}})
		require.ErrorIs(t, err, store.ErrConflict)
		// The refused event was rolled back with its transaction.
		events, err := store.EventListByStream(ctx, b.db.Pool, s)
		require.NoError(t, err)
		require.Len(t, events, 2)
	})

	// Pairs appended together skip the first projection (supersededCall):
	// the pair must still refuse a call in the wrong state, and keep its
	// events in order.
	t.Run("PairsStillRefuseWrongStates", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := store.CallStream("c4")
		require.NoError(t, appendTx(ctx, t, b.db,
			store.NewEvent{Stream: s, Type: store.EventPaymentVerified, Data: verified("n4")},
			store.NewEvent{Stream: s, Type: store.EventJobQueued, Data: store.JobQueued{JobID: 1, Queue: "pure"}},
		))
		settle := []store.NewEvent{
			{Stream: s, Type: store.EventSettlementSubmitted, Data: store.SettlementSubmitted{JobID: 2, Attempt: 1}},
			{Stream: s, Type: store.EventSettlementConfirmed, Data: store.SettlementDone{Response: x402.SettleResponse{Success: true}}},
		}
		require.ErrorIs(t, appendTx(ctx, t, b.db, settle...), store.ErrConflict, "settled before its result")
		// A run's result comes with its settlement's first submission
		// (superseded by the result's update).
		run := []store.NewEvent{
			{Stream: s, Type: store.EventJobStarted, Data: store.JobStarted{JobID: 1, Attempt: 1}},
			{Stream: s, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 1, Result: resultOf(strings.TrimPrefix(s, "call/"), "")}},
			{Stream: s, Type: store.EventSettlementSubmitted, Data: store.SettlementSubmitted{JobID: 2, Attempt: 1}},
		}
		require.NoError(t, appendTx(ctx, t, b.db, run...))
		require.ErrorIs(t, appendTx(ctx, t, b.db, run...), store.ErrConflict, "a second result")
		require.NoError(t, appendTx(ctx, t, b.db, settle...))
		require.ErrorIs(t, appendTx(ctx, t, b.db, settle...), store.ErrConflict, "settled twice")
		require.ErrorIs(t, appendTx(ctx, t, b.db, settle[0]), store.ErrConflict, "submitted once paid")

		c, err := store.CallGetByID(ctx, b.db.Pool, "c4")
		require.NoError(t, err)
		require.Equal(t, store.CallPaid, c.State)
		events, err := store.EventListByStream(ctx, b.db.Pool, s)
		require.NoError(t, err)
		var types []string
		for i, e := range events {
			types = append(types, e.Type)
			if i > 0 {
				require.Greater(t, e.ID, events[i-1].ID)
			}
		}
		require.Equal(t, []string{
			store.EventPaymentVerified, store.EventJobQueued, store.EventJobStarted, store.EventJobSucceeded,
			store.EventSettlementSubmitted, store.EventSettlementSubmitted, store.EventSettlementConfirmed,
		}, types)
	})

	t.Run("PaymentUsedOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, appendTx(ctx, t, b.db, store.NewEvent{Stream: store.CallStream("a"), Type: store.EventPaymentVerified, Data: verified("same")}))
		err := appendTx(ctx, t, b.db, store.NewEvent{Stream: store.CallStream("b"), Type: store.EventPaymentVerified, Data: verified("same")})
		require.ErrorIs(t, err, store.ErrConflict)
		_, err = store.CallGetByID(ctx, b.db.Pool, "b")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("EventsAreAppendOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, appendTx(ctx, t, b.db, store.NewEvent{Stream: store.CallStream("c3"), Type: store.EventPaymentVerified, Data: verified("n3")}))
		for _, sql := range []string{"UPDATE events SET type = 'x'", "DELETE FROM events", "TRUNCATE events CASCADE"} {
			_, err := b.db.Pool.Exec(ctx, sql)
			require.ErrorContains(t, err, "append-only", sql)
		}
	})
}

func TestListener(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)

	config, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	// A name of its own, so terminating it below touches no other test's
	// listener (packages' tests run in parallel on one server).
	config.RuntimeParams["application_name"] = "listener-" + db.Schema
	l := store.NewListener(config, slog.New(slog.DiscardHandler))
	require.NoError(t, l.Start(ctx))
	t.Cleanup(l.Stop)

	sub := l.Subscribe(store.CallStream("w1"))
	defer sub.Close()
	other := l.Subscribe(store.CallStream("w2"))
	defer other.Close()

	// Only the event that ends the call is notified: the ones before it
	// wake nobody.
	w1 := store.CallStream("w1")
	require.NoError(t, appendTx(ctx, t, db,
		store.NewEvent{Stream: w1, Type: store.EventPaymentVerified, Data: verified("n4")},
		store.NewEvent{Stream: w1, Type: store.EventJobQueued, Data: store.JobQueued{}},
		store.NewEvent{Stream: w1, Type: store.EventJobStarted, Data: store.JobStarted{}}))
	require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: w1, Type: store.EventJobFailed, Data: store.JobFailed{Message: "boom"}}))
	select {
	case typ := <-sub.C:
		require.Equal(t, store.EventJobFailed, typ)
	case <-time.After(5 * time.Second):
		t.Fatal("no notification within 5s")
	}
	select {
	case typ := <-other.C:
		t.Fatalf("subscriber of another stream woken with %q", typ)
	case typ := <-sub.C:
		t.Fatalf("woken twice, with %q", typ)
	case <-time.After(100 * time.Millisecond):
	}

	// A lost connection is re-opened, every subscriber is woken, and later
	// events arrive again.
	_, err = db.Pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", "listener-"+db.Schema)
	require.NoError(t, err)
	select {
	case typ := <-sub.C:
		require.Empty(t, typ, "a reconnect wakes with an empty type")
	case <-time.After(10 * time.Second):
		t.Fatal("not woken after reconnect")
	}
	w2 := store.CallStream("w2")
	require.NoError(t, appendTx(ctx, t, db,
		store.NewEvent{Stream: w2, Type: store.EventPaymentVerified, Data: verified("n5")},
		store.NewEvent{Stream: w2, Type: store.EventJobFailed, Data: store.JobFailed{Message: "boom"}}))
	for {
		select {
		case typ := <-other.C:
			if typ == store.EventJobFailed {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no notification after reconnect")
		}
	}
}

func TestNotifies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stream, typ string
		want        bool
	}{
		{store.CallStream("c"), store.EventSettlementConfirmed, true},
		{store.CallStream("c"), store.EventSettlementFailed, true},
		{store.CallStream("c"), store.EventJobFailed, true},
		{store.CallStream("c"), store.EventPaymentVerified, false},
		{store.CallStream("c"), store.EventJobQueued, false},
		{store.CallStream("c"), store.EventJobStarted, false},
		{store.CallStream("c"), store.EventJobSucceeded, false},
		{store.CallStream("c"), store.EventSettlementSubmitted, false},
		{"host/example.com", store.EventJobFailed, false},
		{"crawl/source", "crawl.page", false},
	} {
		require.Equal(t, tc.want, store.Notifies(tc.stream, tc.typ), "%s %s", tc.stream, tc.typ)
	}
}

func TestInRelaxedTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	var inside, outside string
	require.NoError(t, store.InRelaxedTx(ctx, db.Pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&inside)
	}))
	require.Equal(t, "off", inside)
	// SET LOCAL ends with the transaction: the connection goes back to the
	// pool durable.
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	require.NoError(t, conn.QueryRow(ctx, "SHOW synchronous_commit").Scan(&outside))
	require.Equal(t, "on", outside)
	// fn's error rolls back.
	boom := errors.New("boom")
	err = store.InRelaxedTx(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := store.Append(ctx, tx, store.NewEvent{Stream: store.CallStream("r1"), Type: store.EventPaymentVerified, Data: verified("r1")}); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	_, err = store.CallGetByID(ctx, db.Pool, "r1")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	closedPool, err := pgxpool.New(ctx, db.URL)
	require.NoError(t, err)
	closedPool.Close()
	_, closedPoolErr := closedPool.Exec(ctx, "SELECT 1")
	closedConn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	require.NoError(t, closedConn.Close(ctx))
	_, closedConnErr := closedConn.Exec(ctx, "SELECT 1")
	_, raised := db.Pool.Exec(ctx, "DO $$ BEGIN RAISE EXCEPTION 'conn closed'; END $$")
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"Nil", nil, false},
		{"NotFound", store.ErrNotFound, false},
		{"Conflict", store.ErrConflict, false},
		{"Refused", &net.OpError{Op: "dial", Net: "tcp", Err: io.EOF}, true},
		{"CutShort", io.ErrUnexpectedEOF, true},
		{"Other", io.ErrShortWrite, false},
		{"ClosedPool", closedPoolErr, true},
		{"ClosedConn", closedConnErr, true},
		{"WrappedClosedConn", fmt.Errorf("read call: %w", closedConnErr), true},
		{"StatementSaysClosed", raised, false},
		{"TextSaysClosed", errors.New("upstream: closed pool, conn closed"), false},
		{"ConnectionException", &pgconn.PgError{Code: "08006"}, true},
		{"AdminShutdown", fmt.Errorf("queue call: %w", &pgconn.PgError{Code: "57P01"}), true},
		{"StartingUp", &pgconn.PgError{Code: "57P03"}, true},
		// A failover: every process reconnecting at once to the promoted
		// standby, a session on a server that is (or became) a standby,
		// a write that got no answer within its own bound.
		{"TooManyConnections", &pgconn.PgError{Code: "53300"}, true},
		{"ReadOnlyStandby", &pgconn.PgError{Code: "25006"}, true},
		{"GroupCommitOutOfTime", fmt.Errorf("group commit of 3: %w", store.ErrTimeout), true},
		{"UniqueViolation", &pgconn.PgError{Code: "23505"}, false},
		{"Syntax", &pgconn.PgError{Code: "42601"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, store.IsUnavailable(tt.err))
		})
	}
}

// TestCallUpdatesAreHOT checks that a call's updates along its life change
// no indexed column, so that Postgres can make them HOT (no index writes):
// every update of a call in one transaction on a fresh page is HOT.
func TestCallUpdatesAreHOT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	s := store.CallStream("hot")
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, events := range [][]store.NewEvent{
		{{Stream: s, Type: store.EventPaymentVerified, Data: verified("hot")}},
		{{Stream: s, Type: store.EventJobStarted, Data: store.JobStarted{JobID: 1, Attempt: 1}}},
		{{Stream: s, Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 1, Result: resultOf("hot", `"x":1`)}}},
		{{Stream: s, Type: store.EventSettlementSubmitted, Data: store.SettlementSubmitted{JobID: 2, Network: "eip155:8453", Attempt: 1}}},
		{{Stream: s, Type: store.EventSettlementConfirmed, Data: store.SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x1", Network: "eip155:8453"}}}},
	} {
		require.NoError(t, store.Append(ctx, tx, events...))
	}
	var updates, hot int
	require.NoError(t, tx.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relid = 'calls'::regclass`).Scan(&updates, &hot))
	require.Equal(t, 4, updates)
	require.Equal(t, updates, hot, "updates of a call that wrote index entries")
}

// TestAppendManyCalls appends the events of several calls at once, as a
// group commit does: each call moves, and one call in a wrong state refuses
// the whole append.
func TestAppendManyCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	ids := []string{"m1", "m2", "m3"}
	each := func(events func(id string) []store.NewEvent) []store.NewEvent {
		var all []store.NewEvent
		for _, id := range ids {
			all = append(all, events(id)...)
		}
		return all
	}
	states := func() []string {
		var got []string
		for _, id := range ids {
			c, err := store.CallGetByID(ctx, db.Pool, id)
			require.NoError(t, err)
			got = append(got, c.State)
		}
		return got
	}
	require.NoError(t, appendTx(ctx, t, db, each(func(id string) []store.NewEvent {
		return []store.NewEvent{
			{Stream: store.CallStream(id), Type: store.EventPaymentVerified, Data: verified(id)},
			{Stream: store.CallStream(id), Type: store.EventJobQueued, Data: store.JobQueued{JobID: 1, Queue: "pure"}},
		}
	})...))
	require.Equal(t, []string{store.CallQueued, store.CallQueued, store.CallQueued}, states())
	c, err := store.CallGetByID(ctx, db.Pool, "m2")
	require.NoError(t, err)
	require.Equal(t, "m2", c.Payment.Nonce)
	require.Equal(t, "diff", c.Op)

	require.NoError(t, appendTx(ctx, t, db, each(func(id string) []store.NewEvent {
		return []store.NewEvent{
			{Stream: store.CallStream(id), Type: store.EventJobStarted, Data: store.JobStarted{JobID: 1, Attempt: 1}},
			{Stream: store.CallStream(id), Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: 1, Result: resultOf(id, `"id":"`+id+`"`)}},
		}
	})...))
	require.Equal(t, []string{store.CallSettling, store.CallSettling, store.CallSettling}, states())
	c, err = store.CallGetByID(ctx, db.Pool, "m3")
	require.NoError(t, err)
	require.Equal(t, `{"call_id":"m3","op":"diff","id":"m3"}`, string(c.Result))

	// m3 is not settling any more: the append that would settle all three
	// is refused whole.
	require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: store.CallStream("m3"), Type: store.EventSettlementFailed,
		Data: store.SettlementDone{Response: x402.SettleResponse{ErrorReason: "insufficient_funds"}}}))
	err = appendTx(ctx, t, db, each(func(id string) []store.NewEvent {
		return []store.NewEvent{{Stream: store.CallStream(id), Type: store.EventSettlementConfirmed,
			Data: store.SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x" + id}}}}
	})...)
	require.ErrorIs(t, err, store.ErrConflict)
	require.Equal(t, []string{store.CallSettling, store.CallSettling, store.CallUnpaid}, states())

	ids = ids[:2]
	require.NoError(t, appendTx(ctx, t, db, each(func(id string) []store.NewEvent {
		return []store.NewEvent{{Stream: store.CallStream(id), Type: store.EventSettlementConfirmed,
			Data: store.SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x" + id}}}}
	})...))
	require.Equal(t, []string{store.CallPaid, store.CallPaid}, states())
	c, err = store.CallGetByID(ctx, db.Pool, "m1")
	require.NoError(t, err)
	require.Equal(t, "0xm1", c.Settlement.Transaction)
}
