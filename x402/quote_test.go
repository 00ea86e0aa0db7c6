package x402

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	payTo       = "0x000000000000000000000000000000000000dEaD"
	solanaPayTo = "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"
	feePayer    = "2wmVCSfPxGPjrnMMn7rchp4uaeoTqN39mXFC2zhPdri9"
)

// unavailable is the reason testOffers' second operation is not sold.
const unavailable = "model not configured (GEMINI_API_KEY unset)"

// testOffers are two operations: one sold, one not sold now.
var testOffers = []Offer{
	{Name: "diff", Price: "0.010000", Description: "diff", InputExample: map[string]string{"a": "x", "b": "y"},
		InputSchema:   json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","required":["a","b"]}`),
		OutputExample: map[string]bool{"identical": false}},
	{Name: "brief", Price: "0.250000", Description: "brief", Unavailable: unavailable},
}

// allSold returns offers, every one sold.
func allSold(offers []Offer) []Offer {
	out := append([]Offer(nil), offers...)
	for i := range out {
		out[i].Unavailable = ""
	}
	return out
}

func TestAtomicAmount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ price, want string }{
		{"0.010000", "10000"}, {"0.25", "250000"}, {"1", "1000000"}, {"0", "0"}, {"0.000001", "1"}, {"12.5", "12500000"},
	} {
		got, err := atomicAmount(tc.price, 6)
		require.NoError(t, err, tc.price)
		require.Equal(t, tc.want, got, tc.price)
	}
	for _, bad := range []string{"0.0000001", "-1", "abc", "", "1e-2", "1/100", "+1"} {
		_, err := atomicAmount(bad, 6)
		require.Error(t, err, bad)
	}
}

func decodeRequired(t *testing.T, header string) PaymentRequired {
	t.Helper()
	var pr PaymentRequired
	require.NoError(t, DecodeHeader(header, &pr))
	return pr
}

func TestCatalog(t *testing.T) {
	t.Parallel()
	cat, err := NewCatalog(testOffers, &CatalogConfig{PublicURL: "https://x.test/", PayToEVM: payTo,
		EVMNetworks: []string{"eip155:8453", "eip155:137"}, Solana: &SolanaOption{PayTo: solanaPayTo, FeePayer: feePayer}})
	require.NoError(t, err)

	q, err := cat.Quote("diff")
	require.NoError(t, err)
	required := decodeRequired(t, q.PaymentRequired)
	require.Equal(t, 2, required.X402Version)
	require.Equal(t, "payment required", required.Error)
	require.Equal(t, ResourceInfo{URL: "https://x.test/api/x402/diff", Description: "diff", MimeType: "application/json"}, required.Resource)
	require.Len(t, required.Accepts, 3)
	require.Equal(t, Requirements{Scheme: "exact", Network: "eip155:8453", Amount: "10000",
		Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", PayTo: payTo, MaxTimeoutSeconds: 300,
		Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`)}, required.Accepts[0])
	require.Equal(t, "eip155:137", required.Accepts[1].Network)
	require.Equal(t, "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359", required.Accepts[1].Asset)
	require.Equal(t, Requirements{Scheme: "exact", Network: SolanaMainnet, Amount: "10000",
		Asset: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", PayTo: solanaPayTo, MaxTimeoutSeconds: 60,
		Extra: json.RawMessage(`{"feePayer":"` + feePayer + `"}`)}, required.Accepts[2])

	var bazaar struct {
		Info struct {
			Input  map[string]any `json:"input"`
			Output map[string]any `json:"output"`
		} `json:"info"`
		Schema map[string]any `json:"schema"`
	}
	require.NoError(t, json.Unmarshal(required.Extensions["bazaar"], &bazaar))
	require.Equal(t, map[string]any{"type": "http", "method": "POST", "bodyType": "json", "body": map[string]any{"a": "x", "b": "y"}}, bazaar.Info.Input)
	require.Equal(t, map[string]any{"type": "json", "example": map[string]any{"identical": false}}, bazaar.Info.Output)
	require.Equal(t, "https://json-schema.org/draft/2020-12/schema", bazaar.Schema["$schema"])
	body := bazaar.Schema["properties"].(map[string]any)["input"].(map[string]any)["properties"].(map[string]any)["body"]
	require.Equal(t, map[string]any{"type": "object", "required": []any{"a", "b"}}, body, "the input schema, without its root-only $schema")

	// The body: the same PaymentRequired, plus the metadata of spec 2.1.
	var doc map[string]any
	require.NoError(t, json.Unmarshal(q.Body, &doc))
	var fromBody PaymentRequired
	require.NoError(t, json.Unmarshal(q.Body, &fromBody))
	require.Equal(t, required, fromBody)
	require.NotEmpty(t, doc["message"])
	require.Equal(t, map[string]any{"mode": "fixed", "currency": "USD", "amount": "0.010000"}, doc["price"])
	require.Equal(t, []any{"x402"}, doc["protocols"])
	require.Equal(t, "exact", doc["scheme"])
	require.Equal(t, "POST", doc["method"])
	require.Equal(t, "eip155:8453", doc["network"])
	require.Len(t, doc["networks"], 7)
	require.Equal(t, "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", doc["asset"])
	require.Equal(t, payTo, doc["pay_to"])
	require.Equal(t, "application/json", doc["mime_type"])
	require.Equal(t, true, doc["sellable"])
	require.Contains(t, doc, "blocked_reason")
	require.Nil(t, doc["blocked_reason"])

	// The challenge names the primary option.
	scheme, params := parseChallenge(t, q.WWWAuthenticate)
	require.Equal(t, "X402", scheme)
	require.Equal(t, map[string]string{"realm": "x402d", "resource": "https://x.test/api/x402/diff", "version": "2",
		"scheme": "exact", "network": "eip155:8453", "amount": "10000", "asset": required.Accepts[0].Asset,
		"pay_to": payTo, "price": "0.010000 USD", "header": "PAYMENT-REQUIRED"}, params)

	// An operation unavailable is listed, not sold.
	_, err = cat.Quote("brief")
	require.ErrorIs(t, err, ErrNotSellable)
	var ns *NotSellableError
	require.True(t, errors.As(err, &ns))
	require.Equal(t, unavailable, ns.Reason)
	require.Equal(t, ns.Reason, cat.Entries()[1].BlockedReason)
	require.False(t, cat.Entries()[1].Sellable)
	_, err = cat.QuoteWithError("brief", "x", "y")
	require.ErrorIs(t, err, ErrNotSellable)

	_, err = cat.Quote("nope")
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrNotSellable)
}

// parseChallenge parses a WWW-Authenticate challenge of RFC 9110 §11.6.1
// with quoted-string parameters.
func parseChallenge(t *testing.T, s string) (string, map[string]string) {
	t.Helper()
	scheme, rest, ok := strings.Cut(s, " ")
	require.True(t, ok, s)
	params := map[string]string{}
	for rest != "" {
		name, after, ok := strings.Cut(rest, "=")
		require.True(t, ok, rest)
		require.True(t, strings.HasPrefix(after, `"`), after)
		var v strings.Builder
		i := 1
		for ; i < len(after) && after[i] != '"'; i++ {
			if after[i] == '\\' {
				i++
			}
			v.WriteByte(after[i])
		}
		require.Less(t, i, len(after), "unterminated quoted-string in %s", s)
		params[name] = v.String()
		rest = strings.TrimPrefix(after[i+1:], ", ")
	}
	return scheme, params
}

func TestQuoteWithError(t *testing.T) {
	t.Parallel()
	cat, err := NewCatalog(testOffers, &CatalogConfig{PublicURL: "https://x.test", PayToEVM: payTo, EVMNetworks: []string{"eip155:8453"}})
	require.NoError(t, err)
	q, err := cat.Quote("diff")
	require.NoError(t, err)
	want := decodeRequired(t, q.PaymentRequired)
	var wantBody map[string]any
	require.NoError(t, json.Unmarshal(q.Body, &wantBody))

	for _, tc := range []struct{ reason, message string }{
		{"invalid_exact_evm_signature", "bad signature"},
		{ReasonNoMatch, ""},
		{`quote " and \ backslash`, "<html> & \u2028 ünïcödé\n"},
		{"", "no reason"},
		{"a", "b"}, {"ab", "b"}, {"abc", "b"}, // every alignment of the base64 splice
	} {
		refused, err := cat.QuoteWithError("diff", tc.reason, tc.message)
		require.NoError(t, err)
		got := decodeRequired(t, refused.PaymentRequired)
		w := want
		w.Error = tc.reason
		require.Equal(t, w, got, tc.reason)

		var body map[string]any
		require.NoError(t, json.Unmarshal(refused.Body, &body), string(refused.Body))
		wb := map[string]any{}
		for k, v := range wantBody {
			wb[k] = v
		}
		wb["error"] = tc.reason
		delete(wb, "message")
		if tc.message != "" {
			wb["message"] = tc.message
		}
		require.Equal(t, wb, body, tc.reason)

		_, params := parseChallenge(t, refused.WWWAuthenticate)
		require.Equal(t, tc.reason, params["error"])
		require.Equal(t, "10000", params["amount"])
	}
	_, err = cat.QuoteWithError("nope", "x", "")
	require.Error(t, err)
}

func TestCatalogNotSellable(t *testing.T) {
	t.Parallel()
	sol := func(payTo, feePayer string) *SolanaOption { return &SolanaOption{PayTo: payTo, FeePayer: feePayer} }
	for _, tc := range []struct {
		name   string
		cfg    CatalogConfig
		reason string
	}{
		{"NoPayTo", CatalogConfig{EVMNetworks: []string{"eip155:8453"}}, "receiving address (PAY_TO_EVM) missing or malformed"},
		{"ShortPayTo", CatalogConfig{PayToEVM: "0x123", EVMNetworks: []string{"eip155:8453"}}, "receiving address (PAY_TO_EVM) missing or malformed"},
		{"NotHex", CatalogConfig{PayToEVM: "0x000000000000000000000000000000000000dEaG", EVMNetworks: []string{"eip155:8453"}}, "receiving address (PAY_TO_EVM) missing or malformed"},
		{"SolanaPayTo", CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{"eip155:8453"}, Solana: sol(payTo, feePayer)}, "receiving wallet (PAY_TO_SOLANA) malformed"},
		{"SolanaFeePayer", CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{"eip155:8453"}, Solana: sol(solanaPayTo, "0OIl")}, "Solana fee payer malformed"},
		{"NoNetwork", CatalogConfig{PayToEVM: payTo}, "no network to settle payments on is configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The catalogue's reason, before the unavailable offer's own.
			cat, err := NewCatalog(testOffers, &tc.cfg)
			require.NoError(t, err)
			for _, op := range []string{"diff", "brief"} {
				_, err := cat.Quote(op)
				var ns *NotSellableError
				require.True(t, errors.As(err, &ns), "%s: %v", op, err)
				require.ErrorIs(t, err, ErrNotSellable)
				require.Equal(t, tc.reason, ns.Reason)
				_, ok := cat.Requirement(op, "exact", "eip155:8453")
				require.False(t, ok, "nothing is required of an operation not sold")
			}
		})
	}
	_, err := NewCatalog(testOffers, &CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{"eip155:1"}})
	require.Error(t, err, "a network that is not listed")
	_, err = NewCatalog(testOffers, &CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{SolanaMainnet}})
	require.Error(t, err, "Solana is not an EVM network")
	_, err = NewCatalog([]Offer{testOffers[0], testOffers[0]}, &CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{"eip155:8453"}})
	require.Error(t, err, "an operation listed twice")
	_, err = NewCatalog([]Offer{{Name: "x", Price: "0.0000001"}}, &CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{"eip155:8453"}})
	require.Error(t, err, "a price finer than the asset")
}

// BenchmarkQuote measures the unpaid path's lookup of a precomputed quote.
func BenchmarkQuote(b *testing.B) {
	cat, err := NewCatalog(testOffers, &CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{"eip155:8453"}})
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cat.Quote("diff"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQuoteWithError measures the quote answering a refused payment.
func BenchmarkQuoteWithError(b *testing.B) {
	cat, err := NewCatalog(testOffers, &CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{"eip155:8453", "eip155:137"}})
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cat.QuoteWithError("diff", "invalid_exact_evm_signature", "the signature does not recover the payer"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCatalogSolanaBlockhash checks that the Solana option hands out the
// blockhash last set, with its last valid block height, in every quote,
// and that the other options and quotes taken before are unchanged.
func TestCatalogSolanaBlockhash(t *testing.T) {
	t.Parallel()
	cat, err := NewCatalog(allSold(testOffers), &CatalogConfig{PublicURL: "https://x.test/", PayToEVM: payTo,
		EVMNetworks: []string{"eip155:8453"}, Solana: &SolanaOption{PayTo: solanaPayTo, FeePayer: feePayer}})
	require.NoError(t, err)
	before, err := cat.Quote("diff")
	require.NoError(t, err)

	const hash = "CmpNeggWJ4JaWJeJ8YKN1Zypmk7uvQq3PECGUCAEMbky"
	require.NoError(t, cat.SetSolanaBlockhash(hash, 318_000_150))
	for _, op := range []string{"diff", "brief"} {
		q, err := cat.Quote(op)
		require.NoError(t, err)
		required := decodeRequired(t, q.PaymentRequired)
		require.Len(t, required.Accepts, 2)
		require.JSONEq(t, `{"name":"USD Coin","version":"2"}`, string(required.Accepts[0].Extra))
		require.JSONEq(t, `{"feePayer":"`+feePayer+`","recentBlockhash":"`+hash+`","lastValidBlockHeight":318000150}`, string(required.Accepts[1].Extra))
		req, ok := cat.Requirement(op, "exact", SolanaMainnet)
		require.True(t, ok)
		require.Equal(t, required.Accepts[1], *req)
		refused, err := cat.QuoteWithError(op, "x", "y")
		require.NoError(t, err)
		require.Equal(t, required.Accepts, decodeRequired(t, refused.PaymentRequired).Accepts)
	}
	require.JSONEq(t, `{"feePayer":"`+feePayer+`"}`, string(decodeRequired(t, before.PaymentRequired).Accepts[1].Extra))

	// Without a Solana option there is nothing to renew.
	evmOnly, err := NewCatalog(testOffers, &CatalogConfig{PublicURL: "https://x.test/", PayToEVM: payTo, EVMNetworks: []string{"eip155:8453"}})
	require.NoError(t, err)
	require.NoError(t, evmOnly.SetSolanaBlockhash(hash, 1))
	q, err := evmOnly.Quote("diff")
	require.NoError(t, err)
	require.Len(t, decodeRequired(t, q.PaymentRequired).Accepts, 1)
}

// TestCatalogChannels: with a channel option, every EVM network gets a
// batch-settlement option after every exact one (which stay as they were,
// byte for byte), at the same price, asset and payTo, its extra as the
// official server emits it; quoting stays free of allocations; the
// corrective quote replaces that option alone.
func TestCatalogChannels(t *testing.T) {
	// Not parallel: it counts allocations.
	base := CatalogConfig{PublicURL: "https://x.test/", PayToEVM: payTo,
		EVMNetworks: []string{"eip155:8453", "eip155:137"}, Solana: &SolanaOption{PayTo: solanaPayTo, FeePayer: feePayer}}
	plain, err := NewCatalog(testOffers, &base)
	require.NoError(t, err)
	withChannels := base
	withChannels.Channels = &ChannelOption{ReceiverAuthorizer: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", WithdrawDelay: 86400}
	cat, err := NewCatalog(testOffers, &withChannels)
	require.NoError(t, err)

	q, err := cat.Quote("diff")
	require.NoError(t, err)
	p, err := plain.Quote("diff")
	require.NoError(t, err)
	required, exact := decodeRequired(t, q.PaymentRequired), decodeRequired(t, p.PaymentRequired)
	require.Len(t, required.Accepts, 5)
	require.Equal(t, exact.Accepts, required.Accepts[:3], "exact first, unchanged")
	for i, network := range []string{"eip155:8453", "eip155:137"} {
		r := required.Accepts[3+i]
		require.Equal(t, SchemeBatchSettlement, r.Scheme)
		require.Equal(t, network, r.Network)
		require.Equal(t, exact.Accepts[i].Amount, r.Amount)
		require.Equal(t, exact.Accepts[i].Asset, r.Asset)
		require.Equal(t, payTo, r.PayTo)
		n, _ := NetworkByID(network)
		require.Equal(t, `{"name":"`+n.Name+`","version":"`+n.Version+`","receiverAuthorizer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8",`+
			`"withdrawDelay":86400,"minDeposit":"100000"}`, string(r.Extra))
		req, ok := cat.Requirement("diff", SchemeBatchSettlement, network)
		require.True(t, ok)
		require.Equal(t, r, *req)
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = cat.Quote("diff") }), "an unpaid quote allocates nothing")

	option := required.Accepts[4]
	option.Extra = json.RawMessage(`{"channelState":{"channelId":"0x01"}}`)
	corrective, err := cat.QuoteWithOption("diff", "invalid_batch_settlement_evm_cumulative_amount_mismatch", "behind", &option)
	require.NoError(t, err)
	got := decodeRequired(t, corrective.PaymentRequired)
	require.Equal(t, "invalid_batch_settlement_evm_cumulative_amount_mismatch", got.Error)
	require.Equal(t, required.Accepts[:4], got.Accepts[:4])
	require.Equal(t, option, got.Accepts[4])
	require.Contains(t, string(corrective.Body), `"channelState"`)
	_, err = cat.QuoteWithOption("diff", "x", "y", &Requirements{Scheme: SchemeBatchSettlement, Network: "eip155:1"})
	require.Error(t, err, "no such option")
}
