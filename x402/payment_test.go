package x402

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPaymentJSON encodes payments as the ledger keeps them and decodes them
// back: the fields an exact EVM payload states are written once, in it.
func TestPaymentJSON(t *testing.T) {
	t.Parallel()
	evm := func(from, nonce string) json.RawMessage {
		return json.RawMessage(`{"x402Version":2,"accepted":{"scheme":"exact","network":"eip155:8453","amount":"10000",` +
			`"asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","payTo":"0xa0Ee7A142d267C1f36714E4a8F75612F20a79720","maxTimeoutSeconds":300,` +
			`"extra":{"name":"USD Coin","version":"2"}},"payload":{"signature":"0xc2b1","authorization":{"from":"` + from +
			`","to":"0xa0Ee7A142d267C1f36714E4a8F75612F20a79720","value":"10000","validAfter":"1795577837","validBefore":"1795578737","nonce":"` + nonce + `"}}}`)
	}
	const (
		payer = "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f"
		nonce = "0x766ab94dd68772beac3f339017a9b74612bba62630bf006e769206405b3434a0"
		usdc  = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
	)
	verified := time.Date(2026, 11, 25, 3, 47, 17, 600026248, time.UTC)
	validBefore := time.Unix(1795578737, 0).UTC()
	for _, tc := range []struct {
		name    string
		payment Payment
		// kept are the keys written beside the payload (payload, or
		// evm for its compact form) and verifiedAt.
		kept []string
	}{
		{"exact EVM: stated by its payload", Payment{Network: "eip155:8453", Payer: payer, Nonce: nonce, Amount: "10000", Asset: usdc,
			Payload: evm(payer, nonce), VerifiedAt: verified, ValidBefore: validBefore}, nil},
		{"a payer spelled otherwise in the authorization", Payment{Network: "eip155:8453", Payer: payer, Nonce: nonce, Amount: "10000", Asset: usdc,
			Payload: evm("0x23618e81e3f5cdf7f54c3d65f7fbc0abf5b21e8f", nonce), VerifiedAt: verified, ValidBefore: validBefore}, []string{"payer"}},
		{"a window the verifier shortened", Payment{Network: "eip155:8453", Payer: payer, Nonce: nonce, Amount: "10000", Asset: usdc,
			Payload: evm(payer, nonce), VerifiedAt: verified, ValidBefore: validBefore.Add(-time.Minute)}, []string{"validBefore"}},
		{"exact Solana: a transaction", Payment{Network: "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", Payer: "9xQe", Nonce: "5Sig", Amount: "10000",
			Asset: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", Payload: json.RawMessage(`{"x402Version":2,"accepted":{"scheme":"exact"},"payload":{"transaction":"AQID"}}`),
			VerifiedAt: verified}, []string{"amount", "asset", "network", "nonce", "payer"}},
		{"no payload", Payment{Network: "eip155:8453", Payer: "0xttl", Nonce: "n1", Amount: "10000", Asset: usdc, Payload: json.RawMessage("null")}, []string{"amount", "asset", "network", "nonce", "payer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.payment)
			require.NoError(t, err)
			var keys map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(raw, &keys))
			var kept []string
			for k := range keys {
				if k != "payload" && k != "evm" && k != "verifiedAt" {
					kept = append(kept, k)
				}
			}
			require.ElementsMatch(t, tc.kept, kept)
			var back Payment
			require.NoError(t, json.Unmarshal(raw, &back))
			require.Equal(t, tc.payment.Key(), back.Key())
			require.Equal(t, tc.payment.VerifiedAt, back.VerifiedAt)
			require.Equal(t, tc.payment.ValidBefore, back.ValidBefore)
			back.VerifiedAt, back.ValidBefore = tc.payment.VerifiedAt, tc.payment.ValidBefore
			require.Equal(t, tc.payment, back)
		})
	}

	// The whole form, as written before, reads the same.
	whole := `{"network":"eip155:8453","payer":"` + payer + `","nonce":"` + nonce + `","amount":"10000","asset":"` + usdc +
		`","payload":` + string(evm(payer, nonce)) + `,"verifiedAt":"2026-11-25T03:47:17.600026248Z","validBefore":"2026-11-25T03:52:17Z"}`
	var p Payment
	require.NoError(t, json.Unmarshal([]byte(whole), &p))
	require.Equal(t, Payment{Network: "eip155:8453", Payer: payer, Nonce: nonce, Amount: "10000", Asset: usdc, Payload: evm(payer, nonce),
		VerifiedAt: verified, ValidBefore: time.Date(2026, 11, 25, 3, 52, 17, 0, time.UTC)}, p)
}

// TestPaymentLedgerCompact: an exact EVM payload is kept in its compact form
// (signature and nonce as bytes, the option's payTo and amount once) when
// that gives it back whole, and as it came otherwise.
func TestPaymentLedgerCompact(t *testing.T) {
	t.Parallel()
	const (
		sig   = "0x7e4cbba0ec1cd1bd5a5c8d8c36ed0d4d5c3e3a3fb1a46e9b8fa5d6d0bd0c1b9a1c4e1c21f0e7d1ef8e8a1c4d7e0a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c1b"
		nonce = "0x766ab94dd68772beac3f339017a9b74612bba62630bf006e769206405b3434a0"
		payer = "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f"
		payTo = "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"
	)
	payload := func(sig, to, auth, top string) json.RawMessage {
		return json.RawMessage(`{"x402Version":2,` + top + `"accepted":{"scheme":"exact","network":"eip155:8453","amount":"10000",` +
			`"asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","payTo":"` + payTo + `","maxTimeoutSeconds":300,` +
			`"extra":{"name":"USD Coin","version":"2"}},"payload":{"authorization":{` + auth + `"from":"` + payer +
			`","to":"` + to + `","value":"10000","validAfter":"1795577837","validBefore":"1795578737","nonce":"` + nonce + `"},"signature":"` + sig + `"}}`)
	}
	verbatim, err := json.Marshal(&ledgerPayment{Payload: payload(sig, payTo, "", "")})
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		payload json.RawMessage
		compact bool
	}{
		{"lower-case hex, keys in any order", payload(sig, payTo, "", ""), true},
		{"upper-case hex signature", payload(sig[:2]+strings.ToUpper(sig[2:6])+sig[6:], payTo, "", ""), false},
		{"a field the form does not know", payload(sig, payTo, `"memo":"x",`, ""), false},
		{"paid to another address than the option's", payload(sig, "0x0000000000000000000000000000000000000001", "", ""), false},
		{"a resource echoed", payload(sig, payTo, "", `"resource":{"url":"https://x"},`), false},
		{"no payload", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Payment{Network: "eip155:8453", Payer: payer, Nonce: nonce, Amount: "10000", Payload: tc.payload}
			raw, err := json.Marshal(p)
			require.NoError(t, err)
			var keys map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(raw, &keys))
			_, compact := keys["evm"]
			require.Equal(t, tc.compact, compact, string(raw))
			var back Payment
			require.NoError(t, json.Unmarshal(raw, &back))
			if tc.payload == nil {
				require.Nil(t, back.Payload)
				return
			}
			require.True(t, SameJSON(tc.payload, back.Payload), "%s\n%s", tc.payload, back.Payload)
			require.Equal(t, p.Key(), back.Key())
			if compact {
				// 65 bytes of signature and 32 of nonce in base64, the
				// option's payTo and amount once, short keys.
				require.Less(t, len(raw), len(verbatim)-200, string(raw))
			}
		})
	}
}
