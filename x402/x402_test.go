package x402

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/jobs"
)

const payTo = "0x000000000000000000000000000000000000dEaD"

var testSpecs = []jobs.Spec{
	{Name: "diff", Price: "0.010000", Description: "diff", InputExample: map[string]string{"a": "x", "b": "y"},
		InputSchema: json.RawMessage(`{"type":"object"}`), OutputExample: map[string]bool{"identical": false}},
	{Name: "brief", Price: "0.250000", Description: "brief", UsesModel: true},
}

func TestAtomicAmount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ price, want string }{
		{"0.010000", "10000"}, {"0.25", "250000"}, {"1", "1000000"}, {"0", "0"}, {"0.000001", "1"},
	} {
		got, err := atomicAmount(tc.price, 6)
		require.NoError(t, err, tc.price)
		require.Equal(t, tc.want, got, tc.price)
	}
	for _, bad := range []string{"0.0000001", "-1", "abc", ""} {
		_, err := atomicAmount(bad, 6)
		require.Error(t, err, bad)
	}
}

func TestCatalog(t *testing.T) {
	t.Parallel()
	cat, err := NewCatalog(testSpecs, CatalogConfig{PublicURL: "https://x.test", PayToEVM: payTo, EVMNetworks: []string{"eip155:8453", "eip155:137"}})
	require.NoError(t, err)

	q, err := cat.Quote("diff")
	require.NoError(t, err)
	var required PaymentRequired
	require.NoError(t, DecodeHeader(q.PaymentRequired, &required))
	require.Equal(t, 2, required.X402Version)
	require.Equal(t, "https://x.test/api/x402/diff", required.Resource.URL)
	require.Equal(t, "application/json", required.Resource.MimeType)
	require.Len(t, required.Accepts, 2)
	require.Equal(t, Requirements{Scheme: "exact", Network: "eip155:8453", Amount: "10000",
		Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", PayTo: payTo, MaxTimeoutSeconds: 300,
		Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`)}, required.Accepts[0])
	require.Equal(t, "eip155:137", required.Accepts[1].Network)
	var bazaar struct {
		Info struct {
			Input  map[string]any `json:"input"`
			Output map[string]any `json:"output"`
		} `json:"info"`
		Schema map[string]any `json:"schema"`
	}
	require.NoError(t, json.Unmarshal(required.Extensions["bazaar"], &bazaar))
	require.Equal(t, "POST", bazaar.Info.Input["method"])
	require.Equal(t, map[string]any{"a": "x", "b": "y"}, bazaar.Info.Input["body"])
	require.Equal(t, map[string]any{"identical": false}, bazaar.Info.Output["example"])
	require.Equal(t, "https://json-schema.org/draft/2020-12/schema", bazaar.Schema["$schema"])

	var body map[string]any
	require.NoError(t, json.Unmarshal(q.Body, &body))
	require.Equal(t, "payment required", body["error"])
	require.Equal(t, map[string]any{"mode": "fixed", "currency": "USD", "amount": "0.010000"}, body["price"])
	require.Equal(t, []any{"x402"}, body["protocols"])
	require.Equal(t, "exact", body["scheme"])
	require.Equal(t, "POST", body["method"])
	require.Equal(t, "eip155:8453", body["network"])
	require.Len(t, body["networks"], 7)
	require.Equal(t, payTo, body["pay_to"])
	require.Equal(t, true, body["sellable"])
	require.Nil(t, body["blocked_reason"])
	require.Contains(t, body, "blocked_reason")
	require.True(t, strings.HasPrefix(q.WWWAuthenticate, "X402 "), q.WWWAuthenticate)

	_, err = cat.Quote("brief")
	require.ErrorIs(t, err, ErrNotSellable, "a model operation without a model is not sold")
	require.Equal(t, "model not configured (GEMINI_API_KEY unset)", cat.Entries()[1].BlockedReason)

	refused, err := cat.QuoteWithError("diff", "invalid_exact_evm_signature", "bad signature")
	require.NoError(t, err)
	require.NoError(t, DecodeHeader(refused.PaymentRequired, &required))
	require.Equal(t, "invalid_exact_evm_signature", required.Error)
	require.Contains(t, string(refused.Body), `"error":"invalid_exact_evm_signature"`)
	require.Contains(t, string(refused.Body), `"message":"bad signature"`)
}

func TestCatalogNotSellableWithoutPayTo(t *testing.T) {
	t.Parallel()
	for _, payTo := range []string{"", "0x123", "not an address"} {
		cat, err := NewCatalog(testSpecs, CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{"eip155:8453"}, ModelReady: true})
		require.NoError(t, err)
		for _, op := range []string{"diff", "brief"} {
			_, err := cat.Quote(op)
			require.ErrorIs(t, err, ErrNotSellable, "%q %s", payTo, op)
		}
	}
}

// fakeScheme records the requirement it was asked to check against.
type fakeScheme struct{ got *Requirements }

func (f *fakeScheme) Verify(_ context.Context, req *Requirements, p *PaymentPayload) (*Payment, error) {
	f.got = req
	return &Payment{Network: req.Network, Payer: "0xp", Nonce: "0x1", Amount: req.Amount, Asset: req.Asset}, nil
}

func TestSeller(t *testing.T) {
	t.Parallel()
	cat, err := NewCatalog(testSpecs, CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{"eip155:8453"}})
	require.NoError(t, err)
	scheme := &fakeScheme{}
	seller := NewSeller(cat, map[string]Scheme{"eip155": {Verifier: scheme, Identify: func(*PaymentPayload) (string, string, error) {
		return "0xp", "0x1", nil
	}}})
	header := func(p PaymentPayload) string {
		h, err := EncodeHeader(p)
		require.NoError(t, err)
		return h
	}
	cheap := Requirements{Scheme: "exact", Network: "eip155:8453", Amount: "1", Asset: "0x0", PayTo: "0xattacker"}
	for _, tc := range []struct {
		name, header, reason string
	}{
		{"NotBase64", "!!!", ReasonInvalidPayload},
		{"NotJSON", base64.StdEncoding.EncodeToString([]byte("nope")), ReasonInvalidPayload},
		{"URLSafeAlphabet", strings.NewReplacer("+", "-", "/", "_").Replace(header(PaymentPayload{X402Version: 2, Accepted: cheap, Payload: json.RawMessage(`{"x":"??>>??"}`)})), ""},
		{"Version1", header(PaymentPayload{X402Version: 1, Accepted: cheap}), ReasonInvalidVersion},
		{"OtherNetwork", header(PaymentPayload{X402Version: 2, Accepted: Requirements{Scheme: "exact", Network: "eip155:1"}}), ReasonNoMatch},
		{"OtherScheme", header(PaymentPayload{X402Version: 2, Accepted: Requirements{Scheme: "upto", Network: "eip155:8453"}}), ReasonNoMatch},
		{"Solana", header(PaymentPayload{X402Version: 2, Accepted: Requirements{Scheme: "exact", Network: SolanaMainnet}}), ReasonNoMatch},
	} {
		_, err := seller.Verify(context.Background(), "diff", tc.header)
		if tc.reason == "" {
			continue // decodes or not depending on the bytes; must only not panic
		}
		var r *Refusal
		require.True(t, errors.As(err, &r), "%s: %v", tc.name, err)
		require.Equal(t, tc.reason, r.Reason, tc.name)
	}

	// The scheme checks against the seller's own requirement, never the
	// payment's copy of it (which here asks 1 atomic unit to an attacker).
	p, err := seller.Verify(context.Background(), "diff", header(PaymentPayload{X402Version: 2, Accepted: cheap}))
	require.NoError(t, err)
	require.Equal(t, "10000", scheme.got.Amount)
	require.Equal(t, payTo, scheme.got.PayTo)
	require.Equal(t, "10000", p.Amount)

	id, err := seller.Identify("diff", header(PaymentPayload{X402Version: 2, Accepted: cheap}))
	require.NoError(t, err)
	require.Equal(t, "eip155:8453/0xp/0x1", id.Key())

	_, err = seller.Verify(context.Background(), "brief", header(PaymentPayload{X402Version: 2, Accepted: cheap}))
	require.ErrorIs(t, err, ErrNotSellable)
}

func TestNormalizeNetwork(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"base": "eip155:8453", "Base-Sepolia": "eip155:84532", "eip155:137": "eip155:137", "EIP155:10": "eip155:10",
		"solana": SolanaMainnet, "solana-devnet": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", " polygon ": "eip155:137",
	} {
		got, ok := NormalizeNetwork(in)
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "nonsense", ":", "eip155:"} {
		_, ok := NormalizeNetwork(bad)
		require.False(t, ok, bad)
	}
}

func TestCodec(t *testing.T) {
	t.Parallel()
	h, err := EncodeHeader(SettleResponse{Success: true, Transaction: "0xab", Network: "eip155:8453"})
	require.NoError(t, err)
	var sr SettleResponse
	require.NoError(t, DecodeHeader(" "+h+" ", &sr))
	require.True(t, sr.Success)
	require.NoError(t, DecodeHeader(strings.TrimRight(h, "="), &sr), "padding is optional")
	require.Error(t, DecodeHeader(strings.Repeat("A", MaxHeaderBytes+4), &sr))
	require.Error(t, DecodeHeader("", &sr))
}

// BenchmarkQuote measures the unpaid path's lookup of a precomputed quote.
func BenchmarkQuote(b *testing.B) {
	cat, err := NewCatalog(testSpecs, CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{"eip155:8453"}})
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cat.Quote("diff"); err != nil {
			b.Fatal(err)
		}
	}
}
