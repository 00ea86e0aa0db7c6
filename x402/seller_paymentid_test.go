package x402

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSeller_PaymentID reads the payment identifier of headers spelling
// the extensions key every way encoding/json takes it, and of headers
// naming none, which it does not decode.
func TestSeller_PaymentID(t *testing.T) {
	t.Parallel()
	s := NewSeller(nil, nil)
	const id = "pay_7d5d747be160e280504c099d984bcfe0"
	ext := `{"payment-identifier":{"info":{"required":false,"id":"` + id + `"}}}`
	testCases := []struct {
		name, json, wantID string
		wantErr            bool
	}{
		{name: "ok, no extensions", json: `{"x402Version":2,"payload":{"signature":"0x01"}}`},
		{name: "ok, extensions", json: `{"x402Version":2,"extensions":` + ext + `}`, wantID: id},
		{name: "ok, Extensions", json: `{"x402Version":2,"Extensions":` + ext + `}`, wantID: id},
		{name: "ok, EXTENSIONS", json: `{"EXTENSIONS":` + ext + `}`, wantID: id},
		{name: "ok, escaped", json: `{"\u0065xtensions":` + ext + `}`, wantID: id},
		{name: "ok, long s folds to s", json: `{"extenſions":` + ext + `}`, wantID: id},
		{name: "ok, the word elsewhere only", json: `{"payload":{"note":"extensions"}}`},
		{name: "ok, not JSON", json: `{"extensions":`},
		{name: "nok, an id too short", json: `{"extensions":{"payment-identifier":{"info":{"id":"short"}}}}`, wantErr: true},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := s.PaymentID(base64.StdEncoding.EncodeToString([]byte(tc.json)))
			if tc.wantErr {
				var invalid *InvalidPaymentIDError
				require.ErrorAs(t, err, &invalid)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantID, got)
		})
	}
	got, err := s.PaymentID("not base64!")
	require.NoError(t, err)
	require.Empty(t, got)
}

// BenchmarkSeller_PaymentID reads the payment identifier of a header
// naming none, as the paid request does before Verify decodes it.
func BenchmarkSeller_PaymentID(b *testing.B) {
	s := NewSeller(nil, nil)
	header := base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"resource":{"url":"http://127.0.0.1:8080/api/x402/regex"},` +
		`"accepted":{"scheme":"exact","network":"eip155:8453","amount":"1000","asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",` +
		`"payTo":"0xa0Ee7A142d267C1f36714E4a8F75612F20a79720","maxTimeoutSeconds":60,"extra":{"name":"USD Coin","version":"2"}},` +
		`"payload":{"signature":"0x` + strings.Repeat("a", 130) + `","authorization":{"from":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8",` +
		`"to":"0xa0Ee7A142d267C1f36714E4a8F75612F20a79720","value":"1000","validAfter":"0","validBefore":"1900000000","nonce":"0x` + strings.Repeat("b", 64) + `"}}}`))
	b.ReportAllocs()
	for b.Loop() {
		if id, err := s.PaymentID(header); err != nil || id != "" {
			b.Fatal(id, err)
		}
	}
}

// echoingHeader returns a header paying the first option of op's quote by
// seller that echoes the quote's extensions, as the official client and
// payclient send it (the bazaar's is over a kilobyte), with id as its
// payment identifier ("" for none).
func echoingHeader(t testing.TB, seller *Seller, op, id string) string {
	t.Helper()
	q, err := seller.Quote(op)
	require.NoError(t, err)
	var quoted PaymentRequired
	require.NoError(t, DecodeHeader(q.PaymentRequired, &quoted))
	ext := quoted.Extensions
	if id != "" {
		ext, err = WithPaymentID(ext, id)
		require.NoError(t, err)
	}
	h, err := EncodeHeader(PaymentPayload{X402Version: 2, Resource: &quoted.Resource, Accepted: quoted.Accepts[0],
		Payload: json.RawMessage(`{"payer":"0xP","nonce":"0x1"}`), Extensions: ext})
	require.NoError(t, err)
	return h
}

// TestSeller_PaymentIDThenVerify: a header that names extensions is
// decoded once, by PaymentID, and that payload is the one Verify hands its
// scheme; Verify answers as it does without PaymentID before it, and keeps
// nothing after.
func TestSeller_PaymentIDThenVerify(t *testing.T) {
	t.Parallel()
	cat, err := NewCatalog(testOffers, &CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{"eip155:8453"}})
	require.NoError(t, err)
	for _, id := range []string{"", "pay_7d5d747be160e280504c099d984bcfe0"} {
		scheme := &fakeScheme{}
		seller := NewSeller(cat, map[string]Scheme{"eip155": {Verifier: scheme, Identify: fakeIdentify}})
		h := echoingHeader(t, seller, "diff", id)
		alone, err := seller.Verify(context.Background(), "diff", h)
		require.NoError(t, err)

		got, err := seller.PaymentID(h)
		require.NoError(t, err)
		require.Equal(t, id, got)
		require.Equal(t, 1, seller.decoded.Len())
		kept, _ := seller.decoded.Get(h)
		p, err := seller.Verify(context.Background(), "diff", h)
		require.NoError(t, err)
		require.Same(t, kept, scheme.payload, "the payload PaymentID decoded")
		require.Equal(t, alone, p)
		require.Zero(t, seller.decoded.Len(), "taken by Verify")
	}
}

// BenchmarkSeller_PaymentIDThenVerify reads the payment identifier of a
// header echoing the quote's extensions and verifies it (with a scheme
// that checks nothing), as a paid request does: the header's decoding.
func BenchmarkSeller_PaymentIDThenVerify(b *testing.B) {
	cat, err := NewCatalog(testOffers, &CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{"eip155:8453"}})
	if err != nil {
		b.Fatal(err)
	}
	seller := NewSeller(cat, map[string]Scheme{"eip155": {Verifier: &fakeScheme{}, Identify: fakeIdentify}})
	h := echoingHeader(b, seller, "diff", "")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if id, err := seller.PaymentID(h); err != nil || id != "" {
			b.Fatal(id, err)
		}
		if _, err := seller.Verify(ctx, "diff", h); err != nil {
			b.Fatal(err)
		}
	}
}
