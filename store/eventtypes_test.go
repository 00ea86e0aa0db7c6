package store

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm/channel"
)

// registeredPayloads is a payload of every registered event type, in the
// form it reads back as: what its codec leaves out (a job's result, the
// payer of a settlement, the calls of settlement.mined) left out already.
func registeredPayloads() map[string]any {
	const payer = "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f"
	const nonce = "0x766ab94dd68772beac3f339017a9b74612bba62630bf006e769206405b3434a0"
	tx := "0x" + strings.Repeat("0f", 32)
	evm := json.RawMessage(`{"x402Version":2,"accepted":{"scheme":"exact","network":"eip155:8453","amount":"10000",` +
		`"asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","payTo":"0xa0Ee7A142d267C1f36714E4a8F75612F20a79720","maxTimeoutSeconds":300,` +
		`"extra":{"name":"USD Coin","version":"2"}},"payload":{"signature":"0xc2b1","authorization":{"from":"` + payer +
		`","to":"0xa0Ee7A142d267C1f36714E4a8F75612F20a79720","value":"10000","validAfter":"1795577837","validBefore":"1795578737","nonce":"` + nonce + `"}}}`)
	payment := x402.Payment{Network: "eip155:8453", Payer: payer, Nonce: nonce, Amount: "10000", Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
		Payload: evm, VerifiedAt: time.Date(2026, 11, 25, 3, 47, 17, 600026248, time.UTC), ValidBefore: time.Unix(1795578737, 0).UTC()}
	verified := PaymentVerified{Op: "regex", Token: "jM2XnoKC0mp6sIrcFCkbOtGxjQKFwc-9", RequestHash: []byte("0123456789abcdef0123456789abcdef"), Payment: payment}
	config := channel.Config{Payer: common.HexToAddress(payer), Receiver: common.HexToAddress("0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"),
		ReceiverAuthorizer: common.HexToAddress("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"), Token: common.HexToAddress("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
		WithdrawDelay: 86400, Salt: common.HexToHash("0x01")}
	block := &x402.SettledBlock{Number: 10, Hash: "0x" + strings.Repeat("b1", 32)}
	return map[string]any{
		EventCallPaid:          PaidCall{PaymentVerified: verified, JobID: 602},
		EventPaymentVerified:   verified,
		EventPaymentIdentified: PaymentIdentified{Payer: payer, ID: "pay_01HZX9K2M3N4P5Q6"},
		EventJobQueued:         JobQueued{JobID: 602, Queue: "regex"},
		EventJobStarted:        JobStarted{JobID: 602, Attempt: 2},
		EventJobSucceeded: JobSucceeded{JobID: 602, Bytes: 34, SHA256: strings.Repeat("ab", 32), Attempt: 1, SettleJobID: 603,
			Transaction: "5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnb"},
		EventJobFailed:           JobFailed{JobID: 602, Error: "bad_input", Message: "no such pattern"},
		EventSettlementSubmitted: SettlementSubmitted{JobID: 603, Network: "eip155:8453", Attempt: 1, Transaction: tx},
		EventSettlementConfirmed: SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: tx, Network: "eip155:8453"},
			Cost: &x402.SettleCost{GasUsed: 45031, GasPriceWei: "9", Batch: 5}},
		EventSettlementFailed: SettlementDone{Response: x402.SettleResponse{ErrorReason: "insufficient_funds", Network: "eip155:8453"}},
		EventSettlementResent: SettlementResent{Previous: "0x" + strings.Repeat("0e", 32),
			Response: x402.SettleResponse{Success: true, Payer: payer, Transaction: tx, Network: "eip155:8453"}, Block: block},
		EventSettlementLost:  SettlementLost{Previous: tx, Network: "eip155:8453", Amount: "10000", Reason: "authorization expired"},
		EventSettlementMined: SettlementMined{Transaction: tx, Block: *block},
		EventSettlementFinal: SettlementFinal{Block: 12, Transactions: []string{tx}, Calls: 3, Amount: "30000"},
		EventChannelOpened:   ChannelOpened{Config: &config, CallID: "c1", Transaction: tx, Amount: "100000", Balance: "100000"},
		EventChannelAdopted: ChannelAdopted{Config: config, Charged: "20000", Signed: "20000", Signature: []byte{1, 2}, Balance: "100000",
			TotalClaimed: "10000", RefundNonce: "1", BusyCall: "c2"},
		EventChannelDeposited: ChannelOpened{CallID: "c3", Transaction: tx, Amount: "50000", Balance: "150000"},
		EventChannelCharged:   ChannelCharged{CallID: "c4", Amount: "10000", Charged: "30000", Signed: "30000", Signature: []byte{3, 4}},
		EventChannelRefunded:  ChannelRefunded{CallID: "c5", Transaction: tx, Amount: "120000", Nonce: "1", Balance: "30000"},
		EventChannelClaimed:   ChannelClaimed{Transaction: tx, TotalClaimed: "30000"},
		EventChannelSettled: ChannelSettled{Transaction: tx, Receiver: config.Receiver, Token: config.Token, Amount: "30000",
			Block: 9, BlockHash: "0x09", GasUsed: 76_000},
		EventChannelWithdrawInitiated: ChannelWithdrawInitiated{Block: 9, Transaction: tx, At: 1_700_000_000, FinalizeAfter: 1_700_000_900,
			Amount: "70000"},
		EventChannelClaimRefused:    ChannelClaimRefused{Charged: "30000", Reason: "InvalidSignature"},
		EventChannelRefundRequested: ChannelRefundRequested{CallID: "refund/c6", Amount: "70000", Nonce: "1", Charged: "30000"},
		EventChannelRefundSent: ChannelRefundSent{CallID: "refund/c6", Transaction: tx, At: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC),
			From: payer, AccountNonce: 7},
		EventChannelRefundFailed: ChannelRefundFailed{CallID: "refund/c6", Reason: "invalid_batch_settlement_evm_refund_transaction_failed",
			Message: "reverted", Transaction: tx},
		EventChannelWithdrawFinalized: ChannelWithdrawFinalized{Block: 10, Transaction: tx, Amount: "70000", Balance: "30000"},
		EventChannelRefundSeen: ChannelRefundSeen{Block: 11, Transaction: tx, Sender: payer, Amount: "70000", Balance: "30000",
			RefundNonce: "2"},
		EventChannelRefundUndone: ChannelRefundUndone{CallID: "refund/c6", Undone: "0x" + strings.Repeat("0e", 32), Transaction: tx, Amount: "70000",
			Nonce: "1", Balance: "30000", RefundNonce: "2"},
	}
}

// kept returns want as the ledger gives it back: a payment with the
// compact form it is kept in beside it (paytest.Stored), its payload as it
// came (samePayment).
func kept(want any) any {
	keep := func(v *PaymentVerified) {
		stored := paytest.Stored(v.Payment)
		stored.Payload = v.Payment.Payload
		v.Payment = stored
	}
	switch w := want.(type) {
	case PaidCall:
		keep(&w.PaymentVerified)
		return w
	case PaymentVerified:
		keep(&w)
		return w
	}
	return want
}

// samePayment lets the payment's signed payload of got differ from want's
// in its JSON's layout only, which the compact form does not keep.
func samePayment(t *testing.T, want, got any) any {
	t.Helper()
	fix := func(w, g *PaymentVerified) {
		require.True(t, x402.SameJSON(w.Payment.Payload, g.Payment.Payload), "payload %s, want %s", g.Payment.Payload, w.Payment.Payload)
		g.Payment.Payload = w.Payment.Payload
	}
	switch g := got.(type) {
	case PaidCall:
		w := want.(PaidCall)
		fix(&w.PaymentVerified, &g.PaymentVerified)
		return g
	case PaymentVerified:
		w := want.(PaymentVerified)
		fix(&w, &g)
		return g
	}
	return got
}

// TestEventTypesRoundTrip: every registered type decodes what Append
// writes of its payload, as the Go type it registers, by its EventType and
// by Payload; every registered type has fields to show; and every type
// has a payload here, so that a type added to the registry is tested.
func TestEventTypesRoundTrip(t *testing.T) {
	t.Parallel()
	payloads := registeredPayloads()
	types := EventTypeList()
	require.Len(t, types, len(payloads), "a payload for every registered type, and no other")
	for _, typ := range types {
		t.Run(typ.Name, func(t *testing.T) {
			want, ok := payloads[typ.Name]
			require.True(t, ok, "no payload of %s here", typ.Name)
			got, ok := EventTypeGet(typ.Name)
			require.True(t, ok)
			require.Equal(t, typ.Name, got.Name)
			require.Contains(t, []string{"call", "chain", "channel"}, typ.Stream)
			require.NotEmpty(t, typ.Label)

			data, bin, err := encodeData(want)
			require.NoError(t, err)
			e := Event{ID: 1, Stream: typ.Stream + "/x", Type: typ.Name, Data: data, Bin: bin}
			back, err := typ.Decode(e)
			require.NoError(t, err)
			require.IsType(t, want, back)
			require.Equal(t, kept(want), samePayment(t, want, back))

			fields, err := typ.Fields(e)
			require.NoError(t, err)
			require.NotEmpty(t, fields)
			for _, f := range fields {
				require.NotEmpty(t, f.Name)
			}

			// The projection takes the payload as its Go value (a job's
			// result with it), and no other.
			written := want
			if j, ok := want.(JobSucceeded); ok {
				j.Result, j.Op = json.RawMessage(`{"call_id":"x","op":"regex","n":1}`), "regex"
				written = j
			}
			id := "x"
			if typ.Stream == "channel" {
				id = "eip155:84532/0x" + strings.Repeat("ab", 32)
			}
			b := &pgx.Batch{}
			_, err = typ.project(projection{b: b, id: id, typ: typ.Name, data: data, now: time.Now()}, &NewEvent{Stream: e.Stream, Type: typ.Name, Data: written})
			require.NoError(t, err)
			// settlement.final's and channel.refund_sent's records are the
			// log's alone.
			require.Positive(t, b.Len()+boolInt(typ.Name == EventSettlementFinal || typ.Name == EventChannelRefundSent), "a projection statement")
			_, err = typ.project(projection{b: &pgx.Batch{}, id: id, typ: typ.Name, data: data}, &NewEvent{Stream: e.Stream, Type: typ.Name, Data: &want})
			require.ErrorContains(t, err, "want store.")
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestPayload: the generic decode reads an event's payload, binary or
// JSON, as the type asked, and says when it cannot.
func TestPayload(t *testing.T) {
	t.Parallel()
	paid := registeredPayloads()[EventCallPaid].(PaidCall)
	data, bin, err := encodeData(paid)
	require.NoError(t, err)
	require.NotNil(t, bin, "call.paid is kept in its binary form")
	packed := Event{ID: 7, Stream: "call/c", Type: EventCallPaid, Data: data, Bin: bin}
	failed := Event{ID: 8, Stream: "call/c", Type: EventJobFailed, Data: json.RawMessage(`{"job_id":3,"error":"bad_input","message":"m"}`)}

	got, err := Payload[PaidCall](packed)
	require.NoError(t, err)
	require.Equal(t, paid.JobID, got.JobID)
	jf, err := Payload[JobFailed](failed)
	require.NoError(t, err)
	require.Equal(t, JobFailed{JobID: 3, Error: "bad_input", Message: "m"}, jf)

	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"binary data into a type without a binary form", func() error { _, err := Payload[JobFailed](packed); return err }, "does not decode it"},
		{"JSON whose fields are of other types", func() error {
			_, err := Payload[JobFailed](Event{Type: EventJobFailed, Data: json.RawMessage(`{"job_id":"three"}`)})
			return err
		}, "decode job.failed"},
		{"data that is not JSON", func() error {
			_, err := Payload[JobFailed](Event{Type: EventJobFailed, Data: json.RawMessage(`{`)})
			return err
		}, "decode job.failed"},
		{"an event of another type than its EventType", func() error {
			typ, _ := EventTypeGet(EventJobStarted)
			_, err := typ.Decode(failed)
			return err
		}, "type job.failed, not job.started"},
		{"fields of an event of another type", func() error {
			typ, _ := EventTypeGet(EventJobStarted)
			_, err := typ.Fields(failed)
			return err
		}, "type job.failed, not job.started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorContains(t, tc.err(), tc.want)
		})
	}
}

// TestEventTypeUnknown: a type the registry does not know is not found,
// not final, and refused by the projection, as is a registered type on
// another kind of stream or with a payload of another Go type.
func TestEventTypeUnknown(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "call.nope", "settlement", EventHostProbed, EventCrawlPage} {
		_, ok := EventTypeGet(name)
		require.False(t, ok, name)
		require.False(t, IsFinalEvent(name), name)
	}
	for _, tc := range []struct {
		name string
		e    NewEvent
		want string
	}{
		{"an unknown call event", NewEvent{Stream: "call/c", Type: "call.nope", Data: struct{}{}}, `unknown call event type "call.nope"`},
		{"an unknown chain event", NewEvent{Stream: "chain/eip155:8453", Type: "chain.nope", Data: struct{}{}}, `unknown chain event type "chain.nope"`},
		{"a chain event on a call's stream", NewEvent{Stream: "call/c", Type: EventSettlementMined, Data: SettlementMined{}}, `unknown call event type "settlement.mined"`},
		{"a call event on a chain's stream", NewEvent{Stream: "chain/eip155:8453", Type: EventJobFailed, Data: JobFailed{}}, `unknown chain event type "job.failed"`},
		{"a payload of another type", NewEvent{Stream: "call/c", Type: EventJobSucceeded, Data: JobFailed{}}, "data is store.JobFailed, want store.JobSucceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := projectRegistered(&pgx.Batch{}, nil, &tc.e, []byte(emptyData), time.Now())
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestIsFinalEvent: the registry's final types are those that end a call.
func TestIsFinalEvent(t *testing.T) {
	t.Parallel()
	final := map[string]bool{EventJobFailed: true, EventSettlementConfirmed: true, EventSettlementFailed: true, EventSettlementLost: true}
	for _, typ := range EventTypeList() {
		require.Equal(t, final[typ.Name], IsFinalEvent(typ.Name), typ.Name)
		require.Equal(t, final[typ.Name], typ.Final, typ.Name)
		require.Equal(t, final[typ.Name], Notifies(CallStream("c"), typ.Name), "a final event wakes its waiters: %s", typ.Name)
	}
}

// TestProjectedRows: the row statements of consecutive events of one type,
// each of its own call, are queued once with the rows of all; another
// type, a call already gathered, or a statement of another form ends a
// gathering.
func TestProjectedRows(t *testing.T) {
	t.Parallel()
	succeeded := func(id string) NewEvent {
		return NewEvent{Stream: CallStream(id), Type: EventJobSucceeded,
			Data: JobSucceeded{JobID: 1, Op: "regex", Result: json.RawMessage(`{"call_id":"` + id + `","op":"regex","n":1}`)}}
	}
	confirmed := func(id string, form1 bool) NewEvent {
		return NewEvent{Stream: CallStream(id), Type: EventSettlementConfirmed,
			Data: SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x1", Network: "eip155:8453"}, Form1: form1}}
	}
	for _, tc := range []struct {
		name   string
		events []NewEvent
		// rows are the rows of each statement queued, 0 for one not
		// gathered.
		rows []int
	}{
		{"one call", []NewEvent{succeeded("a")}, []int{1}},
		{"three calls", []NewEvent{succeeded("a"), succeeded("b"), succeeded("c")}, []int{3}},
		{"a call's two events", []NewEvent{succeeded("a"), confirmed("a", false)}, []int{1, 1}},
		{"two calls' two events each", []NewEvent{succeeded("a"), confirmed("a", false), succeeded("b"), confirmed("b", false)}, []int{1, 1, 1, 1}},
		{"one call twice", []NewEvent{succeeded("a"), succeeded("a"), succeeded("b")}, []int{1, 2}},
		{"the second in form 1", []NewEvent{confirmed("a", false), confirmed("b", true), confirmed("c", false)}, []int{0, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &pgx.Batch{}
			var checks []appendCheck
			rows := &projectedRows{b: b, checks: &checks, now: time.Now()}
			for i := range tc.events {
				e := &tc.events[i]
				rows.next(e)
				_, err := projectRegistered(b, rows, e, []byte(emptyData), time.Now())
				require.NoError(t, err)
			}
			rows.flush()
			var got []int
			for _, q := range b.QueuedQueries {
				ids, _ := q.Arguments[0].([]string)
				got = append(got, len(ids))
			}
			require.Equal(t, tc.rows, got)
			require.Equal(t, len(tc.rows), b.Len())
		})
	}
}
