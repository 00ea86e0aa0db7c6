package evm

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
)

// storedPayment is a PaymentPayload as Postgres renders it from jsonb
// (shorter keys first), with a bazaar extension like the service's quotes
// carry.
var storedPayment = `{"payload": {"signature": "0x2d6a571c", "authorization": {"to": "0x1", "from": "0x2", "nonce": "0x3", "value": "10000", "validAfter": "0", "validBefore": "1"}}, ` +
	`"accepted": {"extra": {"name": "USD Coin", "version": "2"}, "payTo": "0x1", "asset": "0x4", "amount": "10000", "scheme": "exact", "network": "eip155:8453", "maxTimeoutSeconds": 300}, ` +
	`"resource": {"url": "http://127.0.0.1:8080/api/x402/diff", "mimeType": "application/json", "description": "Line diff of two texts"}, ` +
	`"extensions": {"bazaar": {"info": {"input": {"body": {"a": "` + strings.Repeat("one\\n", 150) + `"}}}}}, "x402Version": 2}`

func TestSchemePayload(t *testing.T) {
	t.Parallel()
	want := `{"signature": "0x2d6a571c", "authorization": {"to": "0x1", "from": "0x2", "nonce": "0x3", "value": "10000", "validAfter": "0", "validBefore": "1"}}`
	testCases := []struct {
		name, doc string
		want      string
		wantErr   string
	}{
		{name: "ok, first", doc: storedPayment, want: want},
		{name: "ok, after the others", doc: `{"x402Version":2,"extensions":{"a":[1,{"b":"payload"}]},"payload":{"x":1}}`, want: `{"x":1}`},
		{name: "ok, the rest is not read", doc: `{"payload":{"x":1},"extensions":`, want: `{"x":1}`},
		{name: "nok, another spelling", doc: `{"Payload":{"x":1}}`, wantErr: `no "payload" member`},
		{name: "nok, none", doc: `{"x402Version":2}`, wantErr: `no "payload" member`},
		{name: "nok, not an object", doc: `[{"payload":{}}]`, wantErr: "not a JSON object"},
		{name: "nok, not JSON", doc: `{"x402Version":}`, wantErr: "invalid character"},
		{name: "nok, empty", doc: ``, wantErr: "not a JSON object"},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := schemePayload([]byte(tc.doc))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
		})
	}
}

// BenchmarkSchemePayload reads the scheme's payload of a stored payment,
// and, for comparison, decodes it with json.Unmarshal into a struct (what
// settlement did before).
func BenchmarkSchemePayload(b *testing.B) {
	doc := []byte(storedPayment)
	b.Run("schemePayload", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := schemePayload(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v struct {
				Payload json.RawMessage `json:"payload"`
			}
			if err := json.Unmarshal(doc, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// ledgerPayment returns an exact EVM payment as the settlement reads it
// from the ledger (its compact form, x402.Payment.ExactEVM), and the same
// payment with its payload alone, to be decoded.
func ledgerPayment(t testing.TB) (fromLedger, payloadOnly *x402.Payment) {
	t.Helper()
	inner, err := json.Marshal(&x402.ExactEVMPayload{Signature: "0x" + strings.Repeat("ab", 65), Authorization: x402.EVMAuthorization{
		From: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", To: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
		Value: "10000", ValidAfter: "0", ValidBefore: "1900000000", Nonce: "0x" + strings.Repeat("0f", 32),
	}})
	require.NoError(t, err)
	pp := &x402.PaymentPayload{X402Version: 2, Payload: inner, Accepted: x402.Requirements{Scheme: "exact", Network: "eip155:8453",
		Amount: "10000", Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", PayTo: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
		MaxTimeoutSeconds: 300, Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`)}}
	raw, err := pp.Ledger()
	require.NoError(t, err)
	payloadOnly = &x402.Payment{Network: "eip155:8453", Payer: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", Nonce: "0x" + strings.Repeat("0f", 32),
		Amount: "10000", Asset: pp.Accepted.Asset, Payload: raw}
	stored, err := json.Marshal(payloadOnly)
	require.NoError(t, err)
	fromLedger = &x402.Payment{}
	require.NoError(t, json.Unmarshal(stored, fromLedger))
	_, compact := fromLedger.ExactEVM()
	require.True(t, compact, "read from its compact form")
	_, compact = payloadOnly.ExactEVM()
	require.False(t, compact)
	return fromLedger, payloadOnly
}

// TestPaymentTransferFromLedger: a payment read from the ledger's compact
// form gives the settlement the asset, authorization and signature its
// payload gives when decoded.
func TestPaymentTransferFromLedger(t *testing.T) {
	t.Parallel()
	fromLedger, payloadOnly := ledgerPayment(t)
	asset, ep, err := paymentTransfer(fromLedger)
	require.NoError(t, err)
	wantAsset, want, err := paymentTransfer(payloadOnly)
	require.NoError(t, err)
	require.Equal(t, wantAsset, asset)
	require.Equal(t, want, ep)
	require.Equal(t, fromLedger.Payload, payloadOnly.Payload)
}

// BenchmarkPaymentTransfer reads a settlement's transfer from a payment
// read from the ledger (its compact form) and, for comparison, from its
// payload decoded (what the settlement did before).
func BenchmarkPaymentTransfer(b *testing.B) {
	fromLedger, payloadOnly := ledgerPayment(b)
	for _, bc := range []struct {
		name string
		p    *x402.Payment
	}{{"ledger", fromLedger}, {"payload", payloadOnly}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := paymentTransfer(bc.p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPackTransferVRS: the (v,r,s) transfer's input is token.Pack's, byte
// for byte, at the bounds of its numbers; a number that is no uint256 is
// refused.
func TestPackTransferVRS(t *testing.T) {
	t.Parallel()
	maxUint256 := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
	sig := bytes.Repeat([]byte{0xab}, 65)
	sig[0], sig[63] = 0x01, 0xfe
	for _, tc := range []struct {
		name                string
		value, after, until *big.Int
		v                   byte
		wantErr             bool
	}{
		{"ordinary", big.NewInt(10_000), big.NewInt(0), big.NewInt(1_900_000_000), 27, false},
		{"bounds", maxUint256, big.NewInt(0), maxUint256, 28, false},
		{"negative", big.NewInt(-1), big.NewInt(0), big.NewInt(1), 27, true},
		{"over 256 bits", new(big.Int).Add(maxUint256, big.NewInt(1)), big.NewInt(0), big.NewInt(1), 27, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			auth := &Authorization{From: common.HexToAddress("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"),
				To: common.HexToAddress("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"), Value: tc.value, ValidAfter: tc.after,
				ValidBefore: tc.until, Nonce: common.HexToHash("0x" + strings.Repeat("0f", 32))}
			got, err := packTransferVRS(auth, tc.v, sig[:32], sig[32:64])
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			want, err := token.Pack(fnTransferVRS, auth.From, auth.To, auth.Value, auth.ValidAfter, auth.ValidBefore, auth.Nonce,
				tc.v, common.BytesToHash(sig[:32]), common.BytesToHash(sig[32:64]))
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}

// BenchmarkTransferInput encodes a transfer's input, and, for comparison,
// the same with token.Pack (what it did before).
func BenchmarkTransferInput(b *testing.B) {
	auth := &Authorization{From: common.HexToAddress("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"),
		To: common.HexToAddress("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"), Value: big.NewInt(10_000), ValidAfter: big.NewInt(0),
		ValidBefore: big.NewInt(1_900_000_000), Nonce: common.HexToHash("0x" + strings.Repeat("0f", 32))}
	sig := bytes.Repeat([]byte{0xab}, 65)
	sig[64] = 27
	b.Run("transferInput", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := transferInput(auth, sig); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("token.Pack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := token.Pack(fnTransferVRS, auth.From, auth.To, auth.Value, auth.ValidAfter, auth.ValidBefore, auth.Nonce,
				sig[64], common.BytesToHash(sig[:32]), common.BytesToHash(sig[32:64])); err != nil {
				b.Fatal(err)
			}
		}
	})
}
