package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// form1Paid is the data of a call.paid in ledger form 1, as releases
// before migration 017 wrote it: its packed form in base64 inside jsonb,
// the payment packed in form 1 (paytest.ExactEVM(form1Payer, "prev-1"),
// operation "diff", token form1Token, request hash 1 2 3, job 7).
const (
	form1Paid  = `{"p":"AfIBAQILZWlwMTU1Ojg0NTMAgzWJ/NbttuCPTHwy1PcbVL2gKROASSABBKwCIXsibmFtZSI6IlVTRCBDb2luIiwidmVyc2lvbiI6IjIifQChHOAAAAAAAAAAAAAAAAAAAAAAAQEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAJAAAAAACRTgGBrpmkDyAk0+CHv+DBX2BtuXg2RJhSpEQU+Y9CUwH7CK/7PWTBHEGruOI5rvm350b/IcOMxaGi7c1eyc7inG1/DRUO3gkrRKu44jmu+bfnRv8hw4zFoaLtzV7JzuKcbX8NFQ7eCStEGwAAAAAAAAAEZGlmZgAAAQIDBAUGBwgJCgsMDQ4PEBESExQVFhcDAQIDBw"}`
	form1Payer = "0xA11ce00000000000000000000000000000000001"
	form1Token = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYX"
)

// TestCallPaidForms: a call.paid kept in its binary form (bin, data {}) and
// one in ledger form 1 ({"p": base64} in data) read back the
// same through every reader of a call's payment (the settle path, by id,
// by payment key) and the stream's events (Event.Decode).
func TestCallPaidForms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	paid := func(nonce string) store.PaidCall {
		return store.PaidCall{PaymentVerified: store.PaymentVerified{Op: "diff", Token: form1Token, RequestHash: []byte{1, 2, 3},
			Payment: paytest.ExactEVM(form1Payer, nonce)}, JobID: 7}
	}
	want := map[string]store.PaidCall{"binary": paid("new-1"), "form1": paid("prev-1")}

	require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: store.CallStream("binary"), Type: store.EventCallPaid, Data: want["binary"]}))
	// An api of a release before migration 017: its event and the row
	// its projection wrote.
	prev := want["form1"].Payment
	at := time.Now().UTC()
	_, err := db.Pool.Exec(ctx, `INSERT INTO events (stream, type, data, created_at) VALUES ('call/form1', 'call.paid', $1, $2)`, form1Paid, at)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO calls (id, op, state, token, request_hash, payment_key, network, payer, amount, created_at, updated_at)
		VALUES ('form1', 'diff', 'queued', $1, '', $2, $3, '', $4, $5, $5)`, form1Token, store.PaymentDigest(prev.Key()), prev.Network, prev.Amount, at)
	require.NoError(t, err)

	for id, binary := range map[string]bool{"binary": true, "form1": false} {
		var hasBin bool
		var data string
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT bin IS NOT NULL, data::text FROM events WHERE stream = $1", store.CallStream(id)).Scan(&hasBin, &data))
		require.Equal(t, binary, hasBin, id)
		if binary {
			require.Equal(t, "{}", data, "a reader of form 1 sees an empty object")
		}
	}

	check := func(name string, c *store.Call) {
		t.Helper()
		w := want[c.ID]
		require.Equal(t, paytest.Stored(w.Payment), c.Payment, name)
		require.Equal(t, form1Payer, c.Payer, name)
		require.Equal(t, w.RequestHash, c.RequestHash, name)
	}
	settle, err := store.CallListToSettle(ctx, db.Pool, []string{"binary", "form1"})
	require.NoError(t, err)
	require.Len(t, settle, 2)
	for _, c := range settle {
		check("CallListToSettle", c)
	}
	for id, w := range want {
		c, err := store.CallGetByID(ctx, db.Pool, id)
		require.NoError(t, err)
		check("CallGetByID", c)
		c, err = store.CallGetToSettle(ctx, db.Pool, id)
		require.NoError(t, err)
		check("CallGetToSettle", c)
		c, err = store.CallGetByPaymentKey(ctx, db.Pool, w.Payment.Key())
		require.NoError(t, err)
		check("CallGetByPaymentKey", c)

		events, err := store.EventListByStream(ctx, db.Pool, store.CallStream(id))
		require.NoError(t, err)
		require.Len(t, events, 1)
		var got store.PaidCall
		require.NoError(t, events[0].Decode(&got), id)
		w.Payment = paytest.Stored(w.Payment)
		require.Equal(t, w, got, id)
	}
}

// TestCallPaidVoucher: a voucher's call.paid is kept in its binary form
// (bin, data {}), its payload as it came; one kept as JSON fields (ledger
// form 1, and every voucher's call.paid written before the binary form
// took them) reads the same; both give back the payment exactly, through
// the readers of a call's payment and the stream's events.
func TestCallPaidVoucher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	payload := `{"x402Version":2,"accepted":{"scheme":"batch-settlement","network":"eip155:84532","amount":"1000",` +
		`"asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0xa0Ee7A142d267C1f36714E4a8F75612F20a79720","maxTimeoutSeconds":300},` +
		`"payload":{"type":"voucher","voucher":{"channelId":"0x01","maxClaimableAmount":"%d","signature":"0xabc"}}}`
	paid := func(amount int, form1 bool) store.PaidCall {
		return store.PaidCall{PaymentVerified: store.PaymentVerified{Op: "regex", Token: form1Token, RequestHash: []byte{4, 5, 6},
			Payment: x402.Payment{Network: "eip155:84532", Payer: form1Payer, Nonce: fmt.Sprintf("channel/0x01/%d", amount), Amount: "1000",
				Asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e", Payload: json.RawMessage(fmt.Sprintf(payload, amount)),
				VerifiedAt: time.Date(2026, 11, 27, 12, 0, 0, 5, time.UTC)}}, JobID: 9, Form1: form1}
	}
	want := map[string]store.PaidCall{"binary": paid(1000, false), "json": paid(2000, true)}
	for id, w := range want {
		require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: store.CallStream(id), Type: store.EventCallPaid, Data: w}))
		var hasBin bool
		var data string
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT bin IS NOT NULL, data::text FROM events WHERE stream = $1", store.CallStream(id)).Scan(&hasBin, &data))
		require.Equal(t, !w.Form1, hasBin, id)
		if hasBin {
			require.Equal(t, "{}", data, id)
		} else {
			require.Contains(t, data, `"batch-settlement"`, id)
		}
	}
	// The binary form keeps the payload's bytes; the JSON form, in jsonb,
	// its value.
	same := func(name, id string, w, got x402.Payment) {
		t.Helper()
		if id == "json" {
			require.True(t, x402.SameJSON(w.Payload, got.Payload), name)
			w.Payload = got.Payload
		}
		require.Equal(t, w, got, name)
	}
	check := func(name string, c *store.Call) {
		t.Helper()
		same(name, c.ID, want[c.ID].Payment, c.Payment)
		require.Equal(t, want[c.ID].RequestHash, c.RequestHash, name)
	}
	settle, err := store.CallListToSettle(ctx, db.Pool, []string{"binary", "json"})
	require.NoError(t, err)
	require.Len(t, settle, 2)
	for _, c := range settle {
		check("CallListToSettle", c)
	}
	for id, w := range want {
		c, err := store.CallGetByPaymentKey(ctx, db.Pool, w.Payment.Key())
		require.NoError(t, err)
		check("CallGetByPaymentKey", c)
		events, err := store.EventListByStream(ctx, db.Pool, store.CallStream(id))
		require.NoError(t, err)
		require.Len(t, events, 1)
		var got store.PaidCall
		require.NoError(t, events[0].Decode(&got), id)
		same("Event.Decode", id, w.Payment, got.Payment)
		w.Form1, w.Payment = false, got.Payment
		require.Equal(t, w, got, id)
	}
}
