package store_test

import (
	"context"
	"errors"
	"math/big"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

// reserveCall writes the calls row of a call in state, last updated at
// updated, as its projection would.
func reserveCall(ctx context.Context, t *testing.T, tx pgx.Tx, id, state string, updated time.Time) {
	t.Helper()
	_, err := tx.Exec(ctx, `INSERT INTO calls (id, op, state, token, request_hash, payment_key, network, payer, amount, created_at, updated_at)
		VALUES ($1, 'regex', $2, 't', '', $1, 'eip155:8453', '', '10000', $3, $3)`, id, state, updated)
	require.NoError(t, err)
}

// TestReserve weighs reservations of one payer against its balance, in
// order, with the calls they were admitted with in each of their states: a
// call queued, running or settling counts, one paid counts only when it was
// paid after the balance was read, one failed or refused (unpaid) does not,
// nor one whose authorization expired; another payer's or asset's never.
func TestReserve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	now := time.Now().UTC()
	price := big.NewInt(10_000)
	prices := func(n int64) *big.Int { return new(big.Int).Mul(price, big.NewInt(n)) }
	const payer, other = "0xA11ce00000000000000000000000000000000001", "0xB0b0000000000000000000000000000000000002"
	res := func(id, who string, balance *big.Int, read time.Time) store.Reservation {
		return store.Reservation{CallID: id, Network: "eip155:8453", Asset: "0xUSDC", Payer: who, Amount: price,
			ValidBefore: now.Add(5 * time.Minute), Balance: balance, Read: read}
	}
	// reserve reserves rs for calls written in state with them, in one
	// transaction, and returns the outcomes.
	n := 0
	reserve := func(state string, rs ...store.Reservation) []store.ReserveOutcome {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		out, err := store.Reserve(ctx, tx, now.Add(3*time.Second), rs)
		require.NoError(t, err)
		outcomes := make([]store.ReserveOutcome, len(out))
		for i, o := range out {
			outcomes[i] = o.Outcome
			if o.Outcome == store.ReserveHeld {
				reserveCall(ctx, t, tx, rs[i].CallID, state, now)
			}
		}
		require.NoError(t, tx.Commit(ctx))
		return outcomes
	}
	id := func() string { n++; return "c" + strconv.Itoa(n) }
	setState := func(id, state string, updated time.Time) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, "UPDATE calls SET state = $2, updated_at = $3 WHERE id = $1", id, state, updated)
		require.NoError(t, err)
	}
	// paidAt sets when the reservation of paid call id counts as paid.
	paidAt := func(id string, at time.Time) {
		t.Helper()
		tag, err := db.Pool.Exec(ctx, "UPDATE reservations SET ended_at = $2 WHERE call_id = $1 AND ended_at IS NOT NULL", id, at)
		require.NoError(t, err)
		require.Equal(t, int64(1), tag.RowsAffected(), "the paid call's reservation is stamped")
	}
	held, short, needs := store.ReserveHeld, store.ReserveShort, store.ReserveNeedsBalance

	// Nothing in flight: the simulated transfer showed one price is there.
	first := id()
	require.Equal(t, []store.ReserveOutcome{held}, reserve(store.CallQueued, res(first, payer, nil, now)))
	// One in flight: the balance must be read; read, it covers one more
	// and no third, in one transaction or another.
	require.Equal(t, []store.ReserveOutcome{needs}, reserve(store.CallQueued, res(id(), payer, nil, now)))
	second := id()
	require.Equal(t, []store.ReserveOutcome{held, short}, reserve(store.CallRunning,
		res(second, payer, prices(2), now), res(id(), payer, prices(2), now)))
	require.Equal(t, []store.ReserveOutcome{short}, reserve(store.CallQueued, res(id(), payer, prices(2), now)))
	// Another payer is weighed apart, as is another asset.
	require.Equal(t, []store.ReserveOutcome{held, needs}, reserve(store.CallQueued, res(id(), other, nil, now), res(id(), other, nil, now)))
	otherAsset := res(id(), payer, nil, now)
	otherAsset.Asset = "0xEURC"
	require.Equal(t, []store.ReserveOutcome{held}, reserve(store.CallQueued, otherAsset))

	// A settling call still counts; a failed one, or one whose settlement
	// was refused, no longer does.
	setState(first, store.CallSettling, now)
	require.Equal(t, []store.ReserveOutcome{short}, reserve(store.CallQueued, res(id(), payer, prices(2), now)))
	setState(first, store.CallFailed, now)
	third := id()
	require.Equal(t, []store.ReserveOutcome{held}, reserve(store.CallQueued, res(third, payer, prices(2), now)))
	setState(third, store.CallUnpaid, now)
	// A call paid after the balance was read was paid from it; one paid
	// before was not. The call's payment stamps its reservation (the
	// trigger of migration 019); the test then sets the stamp to a time of
	// its own.
	setState(second, store.CallPaid, now.Add(time.Second))
	paidAt(second, now.Add(time.Second))
	require.Equal(t, []store.ReserveOutcome{short}, reserve(store.CallQueued, res(id(), payer, prices(1), now)))
	fourth := id()
	require.Equal(t, []store.ReserveOutcome{held}, reserve(store.CallQueued, res(fourth, payer, prices(1), now.Add(2*time.Second))))

	// A reservation whose authorization expired counts no more (its
	// payment cannot move money), and is deleted.
	_, err := db.Pool.Exec(ctx, "UPDATE reservations SET valid_before = now() - interval '1 second' WHERE call_id = $1", fourth)
	require.NoError(t, err)
	require.Equal(t, []store.ReserveOutcome{held}, reserve(store.CallQueued, res(id(), payer, prices(1), now.Add(2*time.Second))))
	rows := func(id string) int {
		t.Helper()
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM reservations WHERE call_id = $1", id).Scan(&n))
		return n
	}
	require.Zero(t, rows(fourth))

	// A read older than ReserveFresh is weighed again, with a balance
	// read now, balance or not.
	stale := now.Add(3*time.Second - store.ReserveFresh - time.Second)
	require.Equal(t, []store.ReserveOutcome{needs, needs}, reserve(store.CallQueued, res(id(), other, nil, stale), res(id(), other, prices(9), stale)))

	// A call that ends unpaid (failed, or its settlement refused) deletes
	// its reservation as it ends; the payer's admissions delete the rows
	// of its calls paid a while ago, and keep those in flight or just
	// paid.
	require.Zero(t, rows(first)+rows(third), "ended unpaid")
	justPaid := id()
	require.Equal(t, []store.ReserveOutcome{held}, reserve(store.CallQueued, res(justPaid, payer, prices(9), now.Add(2*time.Second))))
	setState(justPaid, store.CallPaid, now)
	paidAt(second, now.Add(-time.Minute))
	inFlight := id()
	require.Equal(t, []store.ReserveOutcome{held}, reserve(store.CallQueued, res(inFlight, payer, prices(9), now.Add(2*time.Second))))
	require.Zero(t, rows(second))
	require.Equal(t, 1, rows(justPaid), "paid moments ago")
	require.Equal(t, 1, rows(inFlight), "in flight")

	// A payer's far validBefore counts a day at most.
	far := res(id(), other, prices(9), now)
	far.ValidBefore = now.Add(1000 * time.Hour)
	require.Equal(t, []store.ReserveOutcome{held}, reserve(store.CallQueued, far))
	var until time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT valid_before FROM reservations WHERE call_id = $1", far.CallID).Scan(&until))
	require.WithinDuration(t, now.Add(3*time.Second+24*time.Hour), until, time.Second)
}

// TestReserve_Concurrent has 20 transactions, each on its own connection
// as the api processes sharing the database are, reserve a payment of one
// payer holding one price at once: exactly one is held.
func TestReserve_Concurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	now := time.Now().UTC()
	price := big.NewInt(10_000)
	const n = 20
	outcomes := make([]store.ReserveOutcome, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			id := "c" + strconv.Itoa(i)
			err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				out, err := store.Reserve(ctx, tx, now, []store.Reservation{{CallID: id, Network: "eip155:8453", Asset: "0xUSDC",
					Payer: "0xA11ce00000000000000000000000000000000001", Amount: price, ValidBefore: now.Add(time.Minute), Balance: price, Read: now}})
				if err != nil {
					return err
				}
				outcomes[i] = out[0].Outcome
				if out[0].Outcome == store.ReserveHeld {
					reserveCall(ctx, t, tx, id, store.CallQueued, now)
				}
				return nil
			})
			require.NoError(t, err)
		})
	}
	close(start)
	wg.Wait()
	var held int
	for _, o := range outcomes {
		if o == store.ReserveHeld {
			held++
		} else {
			require.Equal(t, store.ReserveShort, o)
		}
	}
	require.Equal(t, 1, held)
}

// TestReserve_FollowsCall checks the trigger that ends a reservation with
// its call (migration 019): the row is stamped when the call is paid, the
// stamp cleared when the call is in flight again (a settlement sent again
// after a reorganisation), and the row deleted when the call ends unpaid.
func TestReserve_FollowsCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	now := time.Now().UTC()
	const id = "c1"
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		out, err := store.Reserve(ctx, tx, now, []store.Reservation{{CallID: id, Network: "eip155:8453", Asset: "0xUSDC",
			Payer: "0xA11ce00000000000000000000000000000000001", Amount: big.NewInt(10_000), ValidBefore: now.Add(time.Minute), Read: now}})
		require.NoError(t, err)
		require.Equal(t, store.ReserveHeld, out[0].Outcome)
		reserveCall(ctx, t, tx, id, store.CallQueued, now)
		return nil
	}))
	// row returns whether the call's reservation is there, and stamped.
	row := func() (exists, stamped bool) {
		t.Helper()
		err := db.Pool.QueryRow(ctx, "SELECT true, ended_at IS NOT NULL FROM reservations WHERE call_id = $1", id).Scan(&exists, &stamped)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, false
		}
		require.NoError(t, err)
		return exists, stamped
	}
	for _, step := range []struct {
		state           string
		exists, stamped bool
	}{
		{store.CallRunning, true, false},
		{store.CallSettling, true, false},
		{store.CallPaid, true, true},
		{store.CallSettling, true, false},
		{store.CallPaid, true, true},
		{store.CallSettling, true, false},
		{store.CallUnpaid, false, false},
	} {
		_, err := db.Pool.Exec(ctx, "UPDATE calls SET state = $2 WHERE id = $1", id, step.state)
		require.NoError(t, err)
		exists, stamped := row()
		require.Equal(t, []bool{step.exists, step.stamped}, []bool{exists, stamped}, "after %s", step.state)
	}
}
