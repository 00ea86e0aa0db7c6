package x402

import (
	"encoding/base64"
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
