package x402

import (
	"encoding/base64"
	"encoding/hex"
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
		{"a batch-settlement voucher", voucherPayment(), []string{"amount", "asset", "network", "nonce", "payer"}},
		{"exact EVM, its scheme escaped", Payment{Network: "eip155:8453", Payer: payer, Nonce: nonce, Amount: "10000", Asset: usdc,
			Payload: json.RawMessage(strings.Replace(string(evm(payer, nonce)), `"exact"`, `"\u0065xact"`, 1)), VerifiedAt: verified, ValidBefore: validBefore}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.payment)
			require.NoError(t, err)
			keys := ledgerKeys(t, raw)
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
			// A payment read from its packed form keeps that form
			// (ExactEVM), which its payload was made from.
			exact, ok := back.ExactEVM()
			require.Equal(t, raw[0] == '"', ok)
			if ok {
				var want PaymentPayload
				require.NoError(t, json.Unmarshal(tc.payment.Payload, &want))
				inner, err := json.Marshal(exact)
				require.NoError(t, err)
				require.JSONEq(t, string(want.Payload), string(inner))
				back.exact, back.exactOf = nil, nil
			}
			// The compact form gives the payload back as the same JSON
			// value, in its own spelling.
			require.True(t, SameJSON(tc.payment.Payload, back.Payload), "%s", back.Payload)
			back.Payload = tc.payment.Payload
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

// ledgerKeys returns the keys of the ledger form raw (a packed form
// unpacked into its fields).
func ledgerKeys(t *testing.T, raw []byte) map[string]json.RawMessage {
	t.Helper()
	if raw[0] == '"' {
		var s string
		require.NoError(t, json.Unmarshal(raw, &s))
		packed, err := base64.RawStdEncoding.DecodeString(s)
		require.NoError(t, err)
		l, err := unpackPayment(packed)
		require.NoError(t, err)
		raw, err = json.Marshal(l)
		require.NoError(t, err)
	}
	var keys map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &keys))
	return keys
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
	var pp PaymentPayload
	require.NoError(t, json.Unmarshal(payload(sig, payTo, "", ""), &pp))
	inner, err := json.Marshal(&ExactEVMPayload{Signature: sig, Authorization: EVMAuthorization{From: payer, To: payTo, Value: "10000",
		ValidAfter: "1795577837", ValidBefore: "1795578737", Nonce: nonce}})
	require.NoError(t, err)
	pp.Payload = inner
	canonical, err := pp.Ledger()
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		payload json.RawMessage
		compact bool
	}{
		{"lower-case hex, keys in any order", payload(sig, payTo, "", ""), true},
		{"lower-case hex, keys in the form's order", canonical, true},
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
			keys := ledgerKeys(t, raw)
			_, compact := keys["evm"]
			// The compact form is packed, and only it.
			require.Equal(t, compact, raw[0] == '"', string(raw))
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

// TestPaymentPacked: the packed form gives back exactly what it was given,
// addresses in any letter case, numbers in any spelling and the option's
// asset and extra in any form included, keeps an asset that is its
// network's (Network.Asset) and an extra that is byte for byte what the
// network's asset states (Network.AssetExtra) in a byte each, and refuses
// a value cut short.
func TestPaymentPacked(t *testing.T) {
	t.Parallel()
	sig := bytesOf(65, 7)
	nonce := bytesOf(32, 9)
	verified := time.Date(2026, 11, 25, 3, 47, 17, 600026248, time.UTC)
	base := func(network, extra string) ledgerPayment {
		l := ledgerPayment{VerifiedAt: verified, EVM: &ledgerEVM{Version: 2, Network: network,
			Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", Timeout: 300,
			From: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f", To: "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720",
			Value: "10000", ValidAfter: "0", ValidBefore: "1795578737", Nonce: nonce, Signature: sig}}
		if extra != "" {
			l.EVM.Extra = json.RawMessage(extra)
		}
		return l
	}
	const usdCoin = `{"name":"USD Coin","version":"2"}`
	for _, tc := range []struct {
		name string
		l    ledgerPayment
		// extraKept: the extra's bytes are in the packed form.
		extraKept bool
	}{
		{"checksummed addresses, canonical numbers, Base's extra", base("eip155:8453", usdCoin), false},
		{"Sei's extra on Sei", base("eip155:1329", `{"name":"USDC","version":"2"}`), false},
		{"Sei's extra on Base", base("eip155:8453", `{"name":"USDC","version":"2"}`), true},
		{"Base's extra spaced otherwise", base("eip155:8453", `{"name": "USD Coin", "version": "2"}`), true},
		{"Base's extra, keys in another order", base("eip155:8453", `{"version":"2","name":"USD Coin"}`), true},
		{"Base's extra with another version", base("eip155:8453", `{"name":"USD Coin","version":"1"}`), true},
		{"Base's extra with a field more", base("eip155:8453", `{"name":"USD Coin","version":"2","x":1}`), true},
		{"USD Coin on a network not listed", base("eip155:84532", usdCoin), true},
		{"USD Coin on Solana, whose asset states no extra", base(SolanaMainnet, usdCoin), true},
		{"no extra", base("eip155:8453", ""), false},
		{"lower and upper case, odd numbers, fields kept beside", ledgerPayment{Payer: "0xABCDEF", Amount: "7", ValidBefore: verified.Add(time.Hour),
			EVM: &ledgerEVM{Version: 1, Network: "eip155:84532",
				Asset: "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913", From: "0xABCDEF0123456789ABCDEF0123456789ABCDEF01", To: "not an address",
				Value: "010", ValidAfter: "115792089237316195423570985008687907853269984665640564039457584007913129639935", ValidBefore: "-1",
				Nonce: nonce, Signature: sig[:64]}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			packed := packPayment(&tc.l)
			require.Equal(t, byte(packedVersion), packed[0])
			back, err := unpackPayment(packed)
			require.NoError(t, err)
			require.Equal(t, tc.l, *back)
			if tc.l.EVM.Extra != nil {
				require.Equal(t, []byte(tc.l.EVM.Extra), []byte(back.EVM.Extra), "the payer's bytes")
			}
			noExtra := tc.l
			evm := *tc.l.EVM
			evm.Extra = nil
			noExtra.EVM = &evm
			kept := len(packed) - len(packPayment(&noExtra))
			if tc.extraKept {
				require.Equal(t, len(tc.l.EVM.Extra), kept)
			} else {
				require.Zero(t, kept)
			}
			for i := range len(packed) - 1 {
				_, err := unpackPayment(packed[:i])
				require.Error(t, err, "cut at %d", i)
			}
			_, err = unpackPayment(append(packed, 0))
			require.Error(t, err, "a byte too many")
		})
	}

	// The option's asset is a byte when it is, character for character,
	// its network's; any other spelling or asset is kept as an address.
	onBase := base("eip155:8453", usdCoin)
	for _, asset := range []string{"0x833589fcd6edb6e08f4c7c32d4f71b54bda02913", "0xe15fC38F6D8c56aF07bbCBe3BAf5708A2Bf42392"} {
		other := onBase
		evm := *onBase.EVM
		evm.Asset = asset
		other.EVM = &evm
		packed := packPayment(&other)
		require.Len(t, packed, len(packPayment(&onBase))+25, asset)
		back, err := unpackPayment(packed)
		require.NoError(t, err)
		require.Equal(t, other, *back)
	}

	// The form written before (1), which kept the extra and the asset
	// whole, reads the same.
	v1, err := base64.StdEncoding.DecodeString("AQILZWlwMTU1Ojg0NTMAgzWJ/NbttuCPTHwy1PcbVL2gKROASSABBKwCIXsibmFtZSI6IlVTRCBDb2luIiwidmVyc2lvbiI6IjIifQAjYY6B4/XN9/VMPWX3+8Cr9bIejwBBCIwkAKDuehQtJnwfNnFOSo91YS8gp5cgJCAgggCRTgHytpnYBiAJKEdmhaTD4gEgP159nLva+Rg3VnWUs9LxEC9ObYyrykEHJkVkg6LB4P8ePVx7mrnY9xY1VHOSsdDvDi1Ma4qpyOcGJURjgqHA3/4dPFt6mbjX9hU0U3KRsM/uDSxLaomoxwGK6bKwDYjZjp4CAAAAAAAA")
	require.NoError(t, err)
	back, err := unpackPayment(v1)
	require.NoError(t, err)
	require.Equal(t, base("eip155:8453", usdCoin), *back)
	require.Len(t, packPayment(back), len(v1)-len(usdCoin)-25, "the same payment packed now: the extra and the asset a byte each")
	require.Equal(t, v1, packPaymentForm(back, packedVersionWhole), "form 1 as written before migration 017")
	for i := range len(v1) - 1 {
		_, err := unpackPayment(v1[:i])
		require.Error(t, err, "cut at %d", i)
	}
	_, err = unpackPayment(append([]byte{4}, v1[1:]...))
	require.ErrorContains(t, err, "packed form 4 unknown")

	// The asset's extra named on a network whose asset states none is
	// refused, not read as no extra. Its byte follows the version, the
	// payload's version, the network, the asset and the timeout.
	unlisted := base("eip155:84532", "")
	packed := packPayment(&unlisted)
	at := 1 + 1 + 1 + len("eip155:84532") + 26 + 2
	require.Equal(t, byte(1), packed[at], "no extra: its length plus one")
	packed[at] = 0
	_, err = unpackPayment(packed)
	require.ErrorContains(t, err, "states none")
}

// TestPaymentPackedRaw packs payments of another scheme than exact (a
// batch-settlement voucher's) with their payload as it is, and reads them
// back exactly, whatever the payload's spelling; exact payments keep their
// forms (a Solana one, whose payload has no compact form, none), and the
// JSON form of a voucher's payment is still its object.
func TestPaymentPackedRaw(t *testing.T) {
	t.Parallel()
	verified := time.Date(2026, 11, 27, 12, 0, 0, 123456789, time.UTC)
	voucher := `{"x402Version":2,"accepted":{"scheme":"batch-settlement","network":"eip155:84532","amount":"1000",` +
		`"asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0xa0Ee7A142d267C1f36714E4a8F75612F20a79720","maxTimeoutSeconds":300},` +
		`"payload":{"type":"voucher","voucher":{"channelId":"0x01","maxClaimableAmount":"5000","signature":"0xAbC"}}}`
	for _, tc := range []struct {
		name string
		p    Payment
	}{
		{"a voucher, every field", Payment{Network: "eip155:84532", Payer: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",
			Nonce: "channel/0x01/5000", Amount: "1000", Asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
			Payload: json.RawMessage(voucher), VerifiedAt: verified}},
		{"spaced otherwise, a time more, fields empty", Payment{Payload: json.RawMessage("{ \"accepted\" : {\"scheme\": \"batch-settlement\"}, \"n\": 1.50 }\n"),
			ValidBefore: verified.Add(time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			packed, ok := tc.p.MarshalLedgerBinary()
			require.True(t, ok)
			require.Equal(t, byte(packedVersionRaw), packed[0])
			require.Contains(t, string(packed), string(tc.p.Payload), "the payload as it is")
			var back Payment
			require.NoError(t, back.UnmarshalLedgerBinary(packed))
			require.Equal(t, tc.p, back)
			require.Equal(t, []byte(tc.p.Payload), []byte(back.Payload))
			for i := range len(packed) - 1 {
				require.Error(t, back.UnmarshalLedgerBinary(packed[:i]), "cut at %d", i)
			}
			require.Error(t, back.UnmarshalLedgerBinary(append(packed, 0)), "a byte too many")
			_, ok = tc.p.MarshalLedgerBinaryForm1()
			require.False(t, ok, "form 1 has none")
			j, err := json.Marshal(tc.p)
			require.NoError(t, err)
			require.Equal(t, byte('{'), j[0], "its JSON form is an object")
			var fromJSON Payment
			require.NoError(t, json.Unmarshal(j, &fromJSON))
			require.True(t, SameJSON(tc.p.Payload, fromJSON.Payload), "the JSON form keeps its value, not its bytes")
		})
	}
	_, ok := Payment{Network: SolanaMainnet, Payload: json.RawMessage(`{"accepted":{"scheme":"exact"},"payload":{"transaction":"AQ"}}`)}.MarshalLedgerBinary()
	require.False(t, ok, "an exact payment has no raw form")
	_, ok = Payment{}.MarshalLedgerBinary()
	require.False(t, ok, "no payload")
}

func bytesOf(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i)*31
	}
	return b
}

// BenchmarkPaymentLedgerBinary packs an exact EVM payment as the ledger
// keeps it (call.paid, at admission) and unpacks it (each job that reads
// its call's payment); its payload is in the form verification keeps
// (PaymentPayload.Ledger of the official client's encoding).
func BenchmarkPaymentLedgerBinary(b *testing.B) {
	const (
		payer = "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f"
		nonce = "0x766ab94dd68772beac3f339017a9b74612bba62630bf006e769206405b3434a0"
		usdc  = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
		payTo = "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"
	)
	inner, err := json.Marshal(&ExactEVMPayload{Signature: "0x" + hex.EncodeToString(bytesOf(65, 7)), Authorization: EVMAuthorization{
		From: payer, To: payTo, Value: "10000", ValidAfter: "1795577837", ValidBefore: "1795578737", Nonce: nonce}})
	if err != nil {
		b.Fatal(err)
	}
	pp := PaymentPayload{X402Version: 2, Payload: inner, Accepted: Requirements{Scheme: "exact", Network: "eip155:8453", Amount: "10000",
		Asset: usdc, PayTo: payTo, MaxTimeoutSeconds: 300, Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`)}}
	raw, err := pp.Ledger()
	if err != nil {
		b.Fatal(err)
	}
	p := Payment{Network: "eip155:8453", Payer: payer, Nonce: nonce, Amount: "10000", Asset: usdc, Payload: raw,
		VerifiedAt: time.Date(2026, 11, 25, 3, 47, 17, 0, time.UTC), ValidBefore: time.Unix(1795578737, 0).UTC()}
	packed, ok := p.MarshalLedgerBinary()
	if !ok {
		b.Fatal("not packed")
	}
	b.Run("pack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := p.MarshalLedgerBinary(); !ok {
				b.Fatal("not packed")
			}
		}
	})
	// The payment as its verifier gives it: its compact form beside it.
	var e ExactEVMPayload
	if err := json.Unmarshal(inner, &e); err != nil {
		b.Fatal(err)
	}
	verified, err := pp.LedgerPayment(&e)
	if err != nil {
		b.Fatal(err)
	}
	verified.Network, verified.Payer, verified.Nonce, verified.Amount, verified.Asset = p.Network, p.Payer, p.Nonce, p.Amount, p.Asset
	verified.VerifiedAt, verified.ValidBefore = p.VerifiedAt, p.ValidBefore
	b.Run("pack, as verified", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := verified.MarshalLedgerBinary(); !ok {
				b.Fatal("not packed")
			}
		}
	})
	b.Run("unpack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var back Payment
			if err := back.UnmarshalLedgerBinary(packed); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// voucherPayment is a batch-settlement voucher's payment as the channel
// scheme verifies it: a payload the compact form does not take.
func voucherPayment() Payment {
	const (
		payer = "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f"
		usdc  = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
		payTo = "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"
		id    = "0x766ab94dd68772beac3f339017a9b74612bba62630bf006e769206405b3434a0"
	)
	payload := `{"x402Version":2,"accepted":{"scheme":"batch-settlement","network":"eip155:8453","amount":"10000","asset":"` + usdc +
		`","payTo":"` + payTo + `","maxTimeoutSeconds":300,"extra":{"receiverAuthorizer":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",` +
		`"withdrawDelay":86400,"name":"USD Coin","version":"2"}},"payload":{"type":"voucher","channelConfig":{"payer":"` + payer +
		`","payerAuthorizer":"` + payer + `","receiver":"` + payTo + `","receiverAuthorizer":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",` +
		`"token":"` + usdc + `","withdrawDelay":86400,"salt":"0x` + hex.EncodeToString(bytesOf(32, 3)) + `"},"voucher":{"channelId":"` + id +
		`","maxClaimableAmount":"30000","signature":"0x` + hex.EncodeToString(bytesOf(65, 7)) + `"}}}`
	return Payment{Network: "eip155:8453", Payer: payer, Nonce: ChannelNoncePrefix + id + "/30000", Amount: "10000", Asset: usdc,
		Payload: json.RawMessage(payload), VerifiedAt: time.Date(2026, 11, 25, 3, 47, 17, 0, time.UTC)}
}

// BenchmarkPaymentLedgerVoucher keeps a voucher's payment as the ledger
// does at admission (store's call.paid: its packed form, packRaw) and
// reads it back (each job that reads its call's payment); and in its JSON
// form, which ledger form 1 writes and rows written before the packed
// form hold.
func BenchmarkPaymentLedgerVoucher(b *testing.B) {
	p := voucherPayment()
	packed, ok := p.MarshalLedgerBinary()
	if !ok {
		b.Fatal("not packed")
	}
	raw, err := json.Marshal(p)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("keep", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := p.MarshalLedgerBinary(); !ok {
				b.Fatal("not packed")
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var back Payment
			if err := back.UnmarshalLedgerBinary(packed); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("keep JSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read JSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var back Payment
			if err := json.Unmarshal(raw, &back); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestMayBeExact: a payload is looked into for the exact scheme's fields
// unless its JSON cannot name the scheme "exact".
func TestMayBeExact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		payload string
		want    bool
	}{
		{"exact", `{"accepted":{"scheme":"exact"}}`, true},
		{"exact, escaped", `{"accepted":{"scheme":"\u0065xact"}}`, true},
		{"a voucher", string(voucherPayment().Payload), false},
		{"exact unquoted in another string", `{"accepted":{"scheme":"inexact"}}`, false},
		{"none", ``, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, mayBeExact(json.RawMessage(tc.payload)))
		})
	}
}

// TestLedgerPayment: a verifier's payment keeps its payload's compact form
// when that gives the payload back byte for byte, and the ledger keeps it
// as it keeps the payload decoded; a payload replaced since is decoded.
func TestLedgerPayment(t *testing.T) {
	t.Parallel()
	const (
		payer = "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f"
		nonce = "0x766ab94dd68772beac3f339017a9b74612bba62630bf006e769206405b3434a0"
		usdc  = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
		payTo = "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"
	)
	sig := "0x" + hex.EncodeToString(bytesOf(65, 7))
	auth := `{"from":"` + payer + `","to":"` + payTo + `","value":"10000","validAfter":"0","validBefore":"1795578737","nonce":"` + nonce + `"}`
	for _, tc := range []struct {
		name    string
		sig     string
		inner   string // the scheme payload as the client sent it; "" as json.Marshal writes it
		compact bool
	}{
		{"lower-case hex", sig, "", true},
		{"upper-case hex", sig[:2] + strings.ToUpper(sig[2:]), "", false},
		{"spaced", sig, "{ \"signature\" : \"" + sig + "\",\n \"authorization\": " + auth + " }", true},
		{"keys in another order", sig, `{"authorization":` + auth + `,"signature":"` + sig + `"}`, false},
		{"a key more", sig, `{"signature":"` + sig + `","authorization":` + auth + `,"v":1}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := ExactEVMPayload{Signature: tc.sig, Authorization: EVMAuthorization{From: payer, To: payTo, Value: "10000",
				ValidAfter: "0", ValidBefore: "1795578737", Nonce: nonce}}
			inner, err := json.Marshal(&e)
			require.NoError(t, err)
			if tc.inner != "" {
				inner = json.RawMessage(tc.inner)
			}
			pp := PaymentPayload{X402Version: 2, Payload: inner, Accepted: Requirements{Scheme: "exact", Network: "eip155:8453", Amount: "10000",
				Asset: usdc, PayTo: payTo, MaxTimeoutSeconds: 300, Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`)}}
			p, err := pp.LedgerPayment(&e)
			require.NoError(t, err)
			raw, err := pp.Ledger()
			require.NoError(t, err)
			require.Equal(t, json.RawMessage(raw), p.Payload)
			_, ok := p.ExactEVM()
			require.Equal(t, tc.compact, ok)
			p.Network, p.Payer, p.Nonce, p.Amount, p.Asset = "eip155:8453", payer, nonce, "10000", usdc
			plain := Payment{Network: p.Network, Payer: payer, Nonce: nonce, Amount: "10000", Asset: usdc, Payload: raw}
			got, err := json.Marshal(p)
			require.NoError(t, err)
			want, err := json.Marshal(plain)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "kept as the payload decoded is")

			// A payload replaced is its own.
			p.Payload = json.RawMessage(`{"x402Version":2,"accepted":{"scheme":"exact"},"payload":{"transaction":"AQID"}}`)
			_, ok = p.ExactEVM()
			require.False(t, ok)
			got, err = json.Marshal(p)
			require.NoError(t, err)
			require.NotContains(t, ledgerKeys(t, got), "evm")
		})
	}
}

// TestLedgerEVMPayload: the payload a compact form gives back is, byte for
// byte, what json.Marshal makes of it (marshalPayload), whether it is
// written directly (plain) or not.
func TestLedgerEVMPayload(t *testing.T) {
	t.Parallel()
	base := ledgerEVM{Version: 2, Network: "eip155:8453", Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", Timeout: 300,
		Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`), From: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",
		To: "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720", Value: "10000", ValidAfter: "0", ValidBefore: "1795578737",
		Nonce: bytesOf(32, 3), Signature: bytesOf(65, 9)}
	for _, tc := range []struct {
		name      string
		change    func(c *ledgerEVM)
		wantPlain bool
	}{
		{"ok, listed network", func(*ledgerEVM) {}, true},
		{"ok, no extra", func(c *ledgerEVM) { c.Extra = nil }, true},
		{"ok, extra null", func(c *ledgerEVM) { c.Extra = json.RawMessage(`null`) }, true},
		{"ok, escaped quote in extra", func(c *ledgerEVM) { c.Extra = json.RawMessage(`{"name":"a\"b\\","v":[1,2.5,true]}`) }, true},
		{"ok, empty signature", func(c *ledgerEVM) { c.Signature, c.Version, c.Timeout = nil, 0, -1 }, true},
		{"nok, extra with spaces", func(c *ledgerEVM) { c.Extra = json.RawMessage(` { "name" : "USD Coin" } `) }, false},
		{"nok, extra with a line break", func(c *ledgerEVM) { c.Extra = json.RawMessage("{\"name\":\n\"x\"}") }, false},
		{"nok, extra with html", func(c *ledgerEVM) { c.Extra = json.RawMessage(`{"name":"<b>&"}`) }, false},
		{"nok, extra not ascii", func(c *ledgerEVM) { c.Extra = json.RawMessage(`{"name":"USD₮ \u2028"}`) }, false},
		{"nok, network with html", func(c *ledgerEVM) { c.Network = "eip155:<1>" }, false},
		{"nok, value with a quote", func(c *ledgerEVM) { c.Value = `1"0` }, false},
		{"nok, from with a backslash", func(c *ledgerEVM) { c.From = `0x\u` }, false},
		{"nok, asset with a control", func(c *ledgerEVM) { c.Asset = "0x\x01" }, false},
		{"nok, before not ascii", func(c *ledgerEVM) { c.ValidBefore = "١٢" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := base
			tc.change(&c)
			require.Equal(t, tc.wantPlain, c.plain())
			want, err := c.marshalPayload()
			require.NoError(t, err)
			got, err := c.payload()
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		})
	}
	c := base
	c.Extra = json.RawMessage(`{"name":`)
	require.False(t, c.plain(), "invalid extra")
	_, err := c.payload()
	require.Error(t, err)
}

// BenchmarkLedgerEVMPayload gives back the payload of a compact form, as
// verification (LedgerPayment) and each read of a call's payment do.
func BenchmarkLedgerEVMPayload(b *testing.B) {
	c := ledgerEVM{Version: 2, Network: "eip155:8453", Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", Timeout: 300,
		Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`), From: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",
		To: "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720", Value: "10000", ValidAfter: "0", ValidBefore: "1795578737",
		Nonce: bytesOf(32, 3), Signature: bytesOf(65, 9)}
	for name, payload := range map[string]func() (json.RawMessage, error){"plain": c.payload, "json.Marshal": c.marshalPayload} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := payload(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLedgerPayment keeps a verified exact EVM payload, as its
// verifier does (the official client's encoding of its scheme payload).
func BenchmarkLedgerPayment(b *testing.B) {
	e := ExactEVMPayload{Signature: "0x" + hex.EncodeToString(bytesOf(65, 7)), Authorization: EVMAuthorization{
		From: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f", To: "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720", Value: "10000",
		ValidAfter: "0", ValidBefore: "1795578737", Nonce: "0x766ab94dd68772beac3f339017a9b74612bba62630bf006e769206405b3434a0"}}
	inner, err := json.Marshal(&e)
	if err != nil {
		b.Fatal(err)
	}
	pp := PaymentPayload{X402Version: 2, Payload: inner, Accepted: Requirements{Scheme: "exact", Network: "eip155:8453", Amount: "10000",
		Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", PayTo: e.Authorization.To, MaxTimeoutSeconds: 300,
		Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`)}}
	b.ReportAllocs()
	for b.Loop() {
		if p, err := pp.LedgerPayment(&e); err != nil || p.compact() == nil {
			b.Fatal(err)
		}
	}
}
