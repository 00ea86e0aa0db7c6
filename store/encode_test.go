package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
)

// voucherSettled is a voucher's settlement.confirmed: no transaction, the
// channel's state in the response's extra (channel.VoucherResponse).
func voucherSettled() SettlementDone {
	return SettlementDone{Response: x402.SettleResponse{Success: true, Network: "eip155:8453", Payer: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",
		Extra: json.RawMessage(`{"chargedAmount":"10000","channelState":{"channelId":"0x766ab94dd68772beac3f339017a9b74612bba62630bf006e769206405b3434a0",` +
			`"balance":"1000000","totalClaimed":"0","withdrawRequestedAt":0,"refundNonce":"0","chargedCumulativeAmount":"30000"}}`)}}
}

// TestEncodeData: the data whose MarshalJSON encodeData takes as it is
// (validJSON) is encoded byte for byte as json.Marshal encodes it, in
// each of its forms, a string needing HTML escapes included.
func TestEncodeData(t *testing.T) {
	t.Parallel()
	escaped := voucherSettled()
	escaped.Response.Extra = json.RawMessage(`{"note":"<a&b>"}`)
	failed := SettlementDone{Response: x402.SettleResponse{ErrorReason: "a <reason>", Network: "eip155:8453"}}
	tx := "0x766ab94dd68772beac3f339017a9b74612bba62630bf006e769206405b3434a0"
	mined := SettlementDone{Response: x402.SettleResponse{Success: true, Network: "eip155:8453", Transaction: tx},
		Cost: &x402.SettleCost{GasUsed: 21000, GasPriceWei: "7", Batch: 3}, Block: &x402.SettledBlock{Number: 9, Hash: tx}}
	voucher := x402.Payment{Network: "eip155:8453", Payer: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f", Nonce: "channel/0x01/1",
		Payload: json.RawMessage(`{"accepted":{"scheme":"batch-settlement"},"x":"<&>"}`), VerifiedAt: time.Unix(1, 2).UTC()}
	for name, v := range map[string]validJSON{
		"a voucher's settlement":           voucherSettled(),
		"its extra escaped":                escaped,
		"a refusal":                        failed,
		"a transaction's, one string":      mined,
		"job.succeeded":                    JobSucceeded{JobID: 1, Attempt: 1, Result: json.RawMessage(`{"a":1}`), Transaction: tx},
		"job.succeeded, digest as a field": JobSucceeded{JobID: 1, SHA256: "<not hex>"},
		"settlement.mined":                 SettlementMined{Transaction: tx, Block: x402.SettledBlock{Number: 3, Hash: "<odd>"}},
		"call.paid packed":                 PaidCall{PaymentVerified: PaymentVerified{Op: "regex", Payment: voucher}, JobID: 2},
		"call.paid as fields":              PaidCall{PaymentVerified: PaymentVerified{Op: "regex", Payment: voucher}, JobID: 2, Form1: true},
	} {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(v)
			require.NoError(t, err)
			data, bin, err := encodeData(v)
			require.NoError(t, err)
			if bin != nil {
				data, err = v.MarshalJSON()
				require.NoError(t, err)
			}
			require.Equal(t, string(want), string(data))
		})
	}
}

// BenchmarkEncodeData encodes a voucher's settlement.confirmed as Append
// does (encodeData), and as json.Marshal does it.
func BenchmarkEncodeData(b *testing.B) {
	v := voucherSettled()
	b.Run("encodeData", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := encodeData(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
