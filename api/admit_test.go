package api

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

type admitTestArgs struct {
	N int `json:"n"`
}

func (admitTestArgs) Kind() string { return "admit_test" }

// TestAdmitter admits calls from many requests at once, one of them paying
// with a payment another one used: that one alone is refused, and every
// other call has its own job and its two events.
func TestAdmitter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	admit := newAdmitter(db.Pool, rc, nil, false, nil)

	const n = 300
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		nonce := fmt.Sprintf("n%d", i)
		if i == n {
			nonce = "n150" // the payment of call 150, again
		}
		wg.Go(func() {
			errs[i] = admit.Commit(ctx, &admission{
				callID: fmt.Sprintf("call%03d", i),
				verified: store.PaymentVerified{Op: "diff", Token: "tok", RequestHash: []byte{1},
					Payment: x402.Payment{Network: "eip155:8453", Payer: "0xabc", Nonce: nonce, Amount: "1", Payload: json.RawMessage(`{}`)}},
				job: river.InsertManyParams{Args: admitTestArgs{N: i}, InsertOpts: &river.InsertOpts{Queue: "pure"}},
			})
		})
	}
	wg.Wait()
	var refused []string
	for i, err := range errs {
		if err != nil {
			require.ErrorIs(t, err, store.ErrConflict)
			refused = append(refused, fmt.Sprintf("call%03d", i))
		}
	}
	require.Len(t, refused, 1, "one of the two calls paying with n150")

	var calls, jobs int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls").Scan(&calls))
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'admit_test'").Scan(&jobs))
	require.Equal(t, n, calls)
	require.Equal(t, n, jobs, "the refused call's job was rolled back")
	for i := range n + 1 {
		id := fmt.Sprintf("call%03d", i)
		if id == refused[0] {
			continue
		}
		events, err := store.EventListByStream(ctx, db.Pool, store.CallStream(id))
		require.NoError(t, err)
		require.Len(t, events, 1)
		require.Equal(t, store.EventCallPaid, events[0].Type)
		var paid store.PaidCall
		require.NoError(t, events[0].Decode(&paid))
		var arg int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT (args->>'n')::int FROM river_job WHERE id = $1", paid.JobID).Scan(&arg))
		require.Equal(t, i, arg, "call %d names its own job", i)
	}
}

// TestAdmitterReserves admits 40 calls of one payer whose balance covers
// 3 at once, some grouped in one transaction, each with its reservation: 3
// are held, recorded and queued; the others are short and leave no call, no
// job and no reservation. A call of another payer admitted with them is not
// weighed against it.
func TestAdmitterReserves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	admit := newAdmitter(db.Pool, rc, nil, false, nil)
	const n, payer, other = 40, "0xA11ce00000000000000000000000000000000001", "0xB0b0000000000000000000000000000000000002"
	now := time.Now().UTC()
	adms := make([]*admission, n+1)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		who := payer
		if i == n {
			who = other
		}
		payment := paytest.ExactEVM(who, fmt.Sprintf("r%d", i))
		adms[i] = &admission{
			callID:   fmt.Sprintf("call%03d", i),
			verified: store.PaymentVerified{Op: "diff", Token: "tok", RequestHash: []byte{1}, Payment: payment},
			job:      river.InsertManyParams{Args: admitTestArgs{N: i}, InsertOpts: &river.InsertOpts{Queue: "pure"}},
			reserve: &store.Reservation{CallID: fmt.Sprintf("call%03d", i), Network: payment.Network, Asset: payment.Asset, Payer: who,
				Amount: big.NewInt(10_000), ValidBefore: now.Add(time.Minute), Balance: big.NewInt(30_000), Read: now},
		}
		wg.Go(func() { errs[i] = admit.Commit(ctx, adms[i]) })
	}
	wg.Wait()
	var held []string
	for i, adm := range adms {
		require.NoError(t, errs[i])
		switch adm.reserved.Outcome {
		case store.ReserveHeld:
			held = append(held, adm.callID)
		default:
			require.Equal(t, store.ReserveShort, adm.reserved.Outcome, adm.callID)
			require.Equal(t, big.NewInt(30_000), adm.reserved.InFlight, adm.callID)
		}
	}
	require.Len(t, held, 4, "3 of the payer's, and the other payer's")
	require.Contains(t, held, fmt.Sprintf("call%03d", n))
	var calls, jobs, reservations int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls").Scan(&calls))
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'admit_test'").Scan(&jobs))
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM reservations").Scan(&reservations))
	require.Equal(t, []int{4, 4, 4}, []int{calls, jobs, reservations})
	for _, id := range held {
		events, err := store.EventListByStream(ctx, db.Pool, store.CallStream(id))
		require.NoError(t, err)
		require.Len(t, events, 1, id)
	}
}

// TestAdmitterForms: call.paid is kept as bytes (bin), its payment packed
// in form 2, and with Config.LedgerForm1 in ledger form 1, which the
// workers of releases before migration 017 read: {"p": base64} in data,
// the payment in form 1; the settle path reads both.
func TestAdmitterForms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	for _, tc := range []struct {
		form1 bool
		// paymentForm is the first byte of the packed payment.
		paymentForm byte
	}{{false, 2}, {true, 1}} {
		id := fmt.Sprintf("form1-%t", tc.form1)
		payment := paytest.ExactEVM("0xA11ce00000000000000000000000000000000001", id)
		require.NoError(t, newAdmitter(db.Pool, rc, nil, tc.form1, nil).Commit(ctx, &admission{callID: id,
			verified: store.PaymentVerified{Op: "diff", Token: "tok", RequestHash: []byte{1}, Payment: payment},
			job:      river.InsertManyParams{Args: admitTestArgs{N: 1}, InsertOpts: &river.InsertOpts{Queue: "pure"}}}))

		var bin []byte
		var data string
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT bin, data::text FROM events WHERE stream = $1", store.CallStream(id)).Scan(&bin, &data))
		if tc.form1 {
			require.Nil(t, bin, data)
			var v struct {
				P string `json:"p"`
			}
			require.NoError(t, json.Unmarshal([]byte(data), &v))
			bin, err = base64.RawStdEncoding.DecodeString(v.P)
			require.NoError(t, err)
		} else {
			require.Equal(t, "{}", data)
		}
		_, k := binary.Uvarint(bin[1:])
		require.Positive(t, k)
		require.Equal(t, tc.paymentForm, bin[1+k], "the payment's packed form")

		calls, err := store.CallListToSettle(ctx, db.Pool, []string{id})
		require.NoError(t, err)
		require.Len(t, calls, 1)
		require.Equal(t, paytest.Stored(payment), calls[0].Payment)
	}
}
