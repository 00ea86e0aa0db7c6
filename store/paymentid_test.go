package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/store"
)

// TestPaymentIdentified binds payment identifiers to calls as the api
// admits them (call.paid and payment.identified in one Append): a payer's
// id finds its call, a second call under the same payer and id is refused
// with ErrConflict and leaves nothing, and another payer's same id is its
// own.
func TestPaymentIdentified(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const alice, bob = "0xA11ce00000000000000000000000000000000001", "0xB0b0000000000000000000000000000000000002"
	const id = "pay_0123456789abcdef"
	admit := func(callID, payer, nonce string) error {
		v := verified(nonce)
		v.Payment = paytest.ExactEVM(payer, nonce)
		s := store.CallStream(callID)
		return appendTx(ctx, t, db,
			store.NewEvent{Stream: s, Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: v, JobID: 1}},
			store.NewEvent{Stream: s, Type: store.EventPaymentIdentified, Data: store.PaymentIdentified{Payer: payer, ID: id}},
		)
	}

	require.NoError(t, admit("c1", alice, "n1"))
	c, err := store.CallGetByPaymentID(ctx, db.Pool, alice, id)
	require.NoError(t, err)
	require.Equal(t, "c1", c.ID)
	require.Equal(t, alice, c.Payer)
	require.Equal(t, []byte{1, 2, 3}, c.RequestHash)

	require.ErrorIs(t, admit("c2", alice, "n2"), store.ErrConflict, "one call per payer and id")
	_, err = store.CallGetByID(ctx, db.Pool, "c2")
	require.ErrorIs(t, err, store.ErrNotFound, "the call refused with it")

	_, err = store.CallGetByPaymentID(ctx, db.Pool, bob, id)
	require.ErrorIs(t, err, store.ErrNotFound, "an id is scoped by its payer")
	require.NoError(t, admit("c3", bob, "n3"))
	c, err = store.CallGetByPaymentID(ctx, db.Pool, bob, id)
	require.NoError(t, err)
	require.Equal(t, "c3", c.ID)

	events, err := store.EventListByStream(ctx, db.Pool, store.CallStream("c3"))
	require.NoError(t, err)
	require.Len(t, events, 2)
	var v store.PaymentIdentified
	require.NoError(t, events[1].Decode(&v))
	require.Equal(t, store.PaymentIdentified{Payer: bob, ID: id}, v, "the event log holds the binding")
}

func TestPaymentIDKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, store.PaymentIDKey("0xa", "pay_0123456789abcdef"), store.PaymentIDKey("0xa", "pay_0123456789abcdef"))
	require.NotEqual(t, store.PaymentIDKey("0xa", "pay_0123456789abcdef"), store.PaymentIDKey("0xb", "pay_0123456789abcdef"))
	// The payer and the id are kept apart: "0xa"+"b…" is not "0xab"+"…".
	require.NotEqual(t, store.PaymentIDKey("0xa", "bpay_0123456789abcde"), store.PaymentIDKey("0xab", "pay_0123456789abcde"))
	require.Len(t, store.PaymentIDKey("0xa", "pay_0123456789abcdef"), 24)
}
