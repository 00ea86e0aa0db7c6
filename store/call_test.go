package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/x402"
)

// TestSettlementDoneJSON: settlement.confirmed and settlement.failed keep
// their response without the payer (the call's payment states it) and
// without a success that is true, and read back what the events written
// before kept whole.
func TestSettlementDoneJSON(t *testing.T) {
	t.Parallel()
	cost := &x402.SettleCost{GasUsed: 45031, GasPriceWei: "9", Batch: 5}
	block := &x402.SettledBlock{Number: 10, Hash: "0xb10"}
	for _, tc := range []struct {
		name string
		done SettlementDone
		// data is the event's data; back is what it reads as.
		data string
		back SettlementDone
	}{
		{"confirmed", SettlementDone{Response: x402.SettleResponse{Success: true, Payer: "0xabc", Transaction: "0x1", Network: "eip155:8453"}, Cost: cost, Block: block},
			`{"response":{"transaction":"0x1","network":"eip155:8453"},"cost":"45031 9 5","block":{"number":10,"hash":"0xb10"}}`,
			SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x1", Network: "eip155:8453"}, Cost: cost, Block: block}},
		{"an EVM transaction", SettlementDone{Response: x402.SettleResponse{Success: true, Payer: "0xabc", Transaction: "0x" + strings.Repeat("0f", 32), Network: "eip155:8453"}},
			`{"response":{"tx":"` + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{15}, 32)) + `","network":"eip155:8453"}}`,
			SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x" + strings.Repeat("0f", 32), Network: "eip155:8453"}}},
		{"a hash in upper case", SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x" + strings.Repeat("0F", 32), Network: "eip155:8453"}},
			`{"response":{"transaction":"0x` + strings.Repeat("0F", 32) + `","network":"eip155:8453"}}`,
			SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x" + strings.Repeat("0F", 32), Network: "eip155:8453"}}},
		{"an EVM transaction with its cost: one string", SettlementDone{Response: x402.SettleResponse{Success: true, Payer: "0xabc",
			Transaction: "0x" + strings.Repeat("0f", 32), Network: "eip155:8453"}, Cost: cost, Block: block},
			`{"s":"eip155:8453 ` + base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{15}, 32)) + ` 45031 9 5","block":{"number":10,"hash":"0xb10"}}`,
			SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x" + strings.Repeat("0f", 32), Network: "eip155:8453"}, Cost: cost, Block: block}},
		{"the same in ledger form 1 (Form1)", SettlementDone{Response: x402.SettleResponse{Success: true,
			Transaction: "0x" + strings.Repeat("0f", 32), Network: "eip155:8453"}, Cost: cost, Form1: true},
			`{"response":{"tx":"` + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{15}, 32)) + `","network":"eip155:8453"},"cost":"45031 9 5"}`,
			SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x" + strings.Repeat("0f", 32), Network: "eip155:8453"}, Cost: cost}},
		{"a gas price that is not a canonical decimal", SettlementDone{Response: x402.SettleResponse{Success: true,
			Transaction: "0x" + strings.Repeat("0f", 32), Network: "eip155:8453"}, Cost: &x402.SettleCost{GasUsed: 1, GasPriceWei: "09", Batch: 1}},
			`{"response":{"tx":"` + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{15}, 32)) + `","network":"eip155:8453"},"cost":"1 09 1"}`,
			SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x" + strings.Repeat("0f", 32), Network: "eip155:8453"}, Cost: &x402.SettleCost{GasUsed: 1, GasPriceWei: "09", Batch: 1}}},
		{"failed", SettlementDone{Response: x402.SettleResponse{ErrorReason: "insufficient_funds", Payer: "0xabc", Network: "eip155:8453"}},
			`{"response":{"success":false,"errorReason":"insufficient_funds","network":"eip155:8453"}}`,
			SettlementDone{Response: x402.SettleResponse{ErrorReason: "insufficient_funds", Network: "eip155:8453"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.done)
			require.NoError(t, err)
			require.JSONEq(t, tc.data, string(raw))
			var back SettlementDone
			require.NoError(t, json.Unmarshal(raw, &back))
			require.Equal(t, tc.back, back)
		})
	}
	// A string cut short is an error.
	require.Error(t, json.Unmarshal([]byte(`{"s":"eip155:8453 AAAA 1 2"}`), &SettlementDone{}))
	// The whole response and the cost as an object, as written before.
	var old SettlementDone
	require.NoError(t, json.Unmarshal([]byte(`{"response":{"success":true,"transaction":"0x1","network":"n"},"cost":{"gas_used":45031,"gas_price_wei":"9","batch":5}}`), &old))
	require.Equal(t, SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x1", Network: "n"}, Cost: cost}, old)
	require.NoError(t, json.Unmarshal([]byte(`{"response":{"payer":"0xabc","network":"eip155:8453","success":true,"transaction":"0x1"}}`), &old))
	require.Equal(t, SettlementDone{Response: x402.SettleResponse{Success: true, Payer: "0xabc", Transaction: "0x1", Network: "eip155:8453"}}, old)
	require.NoError(t, json.Unmarshal([]byte(`{"response":{"payer":"0xabc","network":"eip155:8453","success":false,"errorReason":"x","transaction":""}}`), &old))
	require.Equal(t, SettlementDone{Response: x402.SettleResponse{Payer: "0xabc", ErrorReason: "x", Network: "eip155:8453"}}, old)
}

// TestPaidCallJSON: call.paid's data is packed into one value when its
// payment packs (an exact EVM payment), with a token of any form, kept as
// bytes (MarshalEventBinary) or as JSON ({"p": their base64}), and written
// as fields otherwise; every form reads back whole (decodePaidCall, as
// callPaid reads them), as does the data of payment.verified.
func TestPaidCallJSON(t *testing.T) {
	t.Parallel()
	const payer = "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f"
	const nonce = "0x766ab94dd68772beac3f339017a9b74612bba62630bf006e769206405b3434a0"
	evm := json.RawMessage(`{"x402Version":2,"accepted":{"scheme":"exact","network":"eip155:8453","amount":"10000",` +
		`"asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","payTo":"0xa0Ee7A142d267C1f36714E4a8F75612F20a79720","maxTimeoutSeconds":300,` +
		`"extra":{"name":"USD Coin","version":"2"}},"payload":{"signature":"0xc2b1","authorization":{"from":"` + payer +
		`","to":"0xa0Ee7A142d267C1f36714E4a8F75612F20a79720","value":"10000","validAfter":"1795577837","validBefore":"1795578737","nonce":"` + nonce + `"}}}`)
	verified := time.Date(2026, 11, 25, 3, 47, 17, 600026248, time.UTC)
	exact := x402.Payment{Network: "eip155:8453", Payer: payer, Nonce: nonce, Amount: "10000", Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
		Payload: evm, VerifiedAt: verified, ValidBefore: time.Unix(1795578737, 0).UTC()}
	other := x402.Payment{Network: "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", Payer: "9xQe", Nonce: "5Sig", Amount: "10000",
		Payload: json.RawMessage(`{"x402Version":2,"accepted":{"scheme":"exact"},"payload":{"transaction":"AQID"}}`)}
	for _, tc := range []struct {
		name   string
		call   PaidCall
		packed bool
	}{
		{"exact EVM, the api's token", PaidCall{PaymentVerified: PaymentVerified{Op: "regex", Token: "jM2XnoKC0mp6sIrcFCkbOtGxjQKFwc-9",
			RequestHash: []byte("0123456789abcdef0123456789abcdef"), Payment: exact}, JobID: 602}, true},
		{"exact EVM, another token", PaidCall{PaymentVerified: PaymentVerified{Op: "diff", Token: "tok", RequestHash: []byte{1}, Payment: exact}, JobID: 1}, true},
		{"a payment that does not pack", PaidCall{PaymentVerified: PaymentVerified{Op: "diff", Token: "tok", RequestHash: []byte{1}, Payment: other}, JobID: 7}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.call)
			require.NoError(t, err)
			var keys map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(raw, &keys))
			_, packed := keys["p"]
			require.Equal(t, tc.packed, packed, string(raw))
			// What the ledger gives back: the payment's compact form
			// with it (x402.Payment.ExactEVM), its payload as it came.
			want := tc.call
			want.Payment = paytest.Stored(tc.call.Payment)
			want.Payment.Payload = tc.call.Payment.Payload
			var back PaidCall
			require.NoError(t, json.Unmarshal(raw, &back))
			require.True(t, x402.SameJSON(tc.call.Payment.Payload, back.Payment.Payload))
			back.Payment.Payload = tc.call.Payment.Payload
			require.Equal(t, want, back)
			var column PaidCall
			require.NoError(t, decodePaidCall(raw, &column))
			column.Payment.Payload = tc.call.Payment.Payload
			require.Equal(t, want, column, "the JSON form as callPaid reads it")

			bin, ok := tc.call.MarshalEventBinary()
			require.Equal(t, tc.packed, ok)
			if ok {
				require.JSONEq(t, `{"p":"`+base64.RawStdEncoding.EncodeToString(bin)+`"}`, string(raw), "the JSON form is the binary one's base64")
				unmarshal := func(b []byte, c *PaidCall) error { return c.UnmarshalEventBinary(b) }
				for _, decode := range []func([]byte, *PaidCall) error{decodePaidCall, unmarshal} {
					var fromBin PaidCall
					require.NoError(t, decode(bin, &fromBin))
					fromBin.Payment.Payload = tc.call.Payment.Payload
					require.Equal(t, want, fromBin)
				}
				for i := range len(bin) - 1 {
					require.Error(t, back.UnmarshalEventBinary(bin[:i]), "cut at %d", i)
				}
			}
			if packed {
				fields, err := json.Marshal(struct {
					PaymentVerified
					JobID int64 `json:"job_id"`
				}{tc.call.PaymentVerified, tc.call.JobID})
				require.NoError(t, err)
				require.Less(t, len(raw), len(fields)-40, "packed %s\nfields %s", raw, fields)
			}
		})
	}
	// payment.verified's data reads as call.paid's without its job.
	raw, err := json.Marshal(PaymentVerified{Op: "diff", Token: "tok", RequestHash: []byte{1}, Payment: exact})
	require.NoError(t, err)
	var back PaidCall
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, []any{"diff", "tok", []byte{1}, exact.Key(), int64(0)}, []any{back.Op, back.Token, back.RequestHash, back.Payment.Key(), back.JobID})
	// A packed value cut short is an error, not a call without payment.
	require.Error(t, json.Unmarshal([]byte(`{"p":"AQ"}`), &back))
}

// TestJobSucceededJSON: job.succeeded keeps its fields in one string, and
// reads the fields the events written before kept.
func TestJobSucceededJSON(t *testing.T) {
	t.Parallel()
	result := json.RawMessage(`{"call_id":"c1","op":"diff","x":1}`)
	raw, err := json.Marshal(JobSucceeded{JobID: 602, Result: result, Attempt: 1, SettleJobID: 603})
	require.NoError(t, err)
	var keys map[string]string
	require.NoError(t, json.Unmarshal(raw, &keys))
	require.Regexp(t, `^34 602 1 603 [A-Za-z0-9_-]{43}$`, keys["s"])
	var back JobSucceeded
	require.NoError(t, json.Unmarshal(raw, &back))
	want := JobSucceeded{JobID: 602, Bytes: 34, SHA256: "", Attempt: 1, SettleJobID: 603}
	sum := sha256.Sum256(result)
	want.SHA256 = hex.EncodeToString(sum[:])
	require.Equal(t, want, back)

	old := `{"bytes":268,"job_id":71,"sha256":"` + want.SHA256 + `"}`
	require.NoError(t, json.Unmarshal([]byte(old), &back))
	require.Equal(t, JobSucceeded{JobID: 71, Bytes: 268, SHA256: want.SHA256}, back)
	require.Error(t, json.Unmarshal([]byte(`{"s":"1 2"}`), &back))

	// A settlement's transaction named before it is sent stays beside the
	// packed fields.
	named := JobSucceeded{JobID: 602, Result: result, Attempt: 1, SettleJobID: 603, Transaction: "5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnb"}
	raw, err = json.Marshal(named)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &keys))
	require.Equal(t, named.Transaction, keys["tx"])
	require.NoError(t, json.Unmarshal(raw, &back))
	want.Transaction = named.Transaction
	require.Equal(t, want, back)
}
