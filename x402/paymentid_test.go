package x402_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
)

func TestPaymentPayload_PaymentID(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		name      string
		extension string // the payment-identifier extension's JSON; "" for none
		wantID    string
		wantErr   bool
	}{
		{name: "ok, no extension"},
		{name: "ok, declared without an id", extension: `{"info":{"required":false},"schema":{}}`},
		{name: "ok, an id", extension: `{"info":{"required":false,"id":"pay_7d5d747be160e280504c099d984bcfe0"}}`, wantID: "pay_7d5d747be160e280504c099d984bcfe0"},
		{name: "ok, an id without required (the spec's first form)", extension: `{"info":{"id":"0123456789abcdef"}}`, wantID: "0123456789abcdef"},
		{name: "ok, 128 characters", extension: `{"info":{"required":false,"id":"` + strings.Repeat("a-_9", 32) + `"}}`, wantID: strings.Repeat("a-_9", 32)},
		{name: "ok, null", extension: `null`},
		{name: "nok, 15 characters", extension: `{"info":{"required":false,"id":"0123456789abcde"}}`, wantErr: true},
		{name: "nok, 129 characters", extension: `{"info":{"required":false,"id":"` + strings.Repeat("a", 129) + `"}}`, wantErr: true},
		{name: "nok, a dot", extension: `{"info":{"required":false,"id":"pay_0123456789.abcdef"}}`, wantErr: true},
		{name: "nok, non-ASCII letter", extension: `{"info":{"required":false,"id":"pay_0123456789ébcdef"}}`, wantErr: true},
		{name: "nok, id a number", extension: `{"info":{"required":false,"id":1234567890123456789}}`, wantErr: true},
		{name: "nok, required a string", extension: `{"info":{"required":"no","id":"pay_0123456789abcdef"}}`, wantErr: true},
		{name: "nok, no info", extension: `{"id":"pay_0123456789abcdef"}`, wantErr: true},
		{name: "nok, not an object", extension: `"pay_0123456789abcdef"`, wantErr: true},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var p x402.PaymentPayload
			if tc.extension != "" {
				p.Extensions = map[string]json.RawMessage{x402.ExtensionPaymentIdentifier: json.RawMessage(tc.extension)}
			}
			id, err := p.PaymentID()
			if tc.wantErr {
				var invalid *x402.InvalidPaymentIDError
				require.ErrorAs(t, err, &invalid)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantID, id)
		})
	}
}

func TestWithPaymentID(t *testing.T) {
	t.Parallel()
	offers := []x402.Offer{{Name: "diff", Price: "0.010000", Description: "diff", InputExample: map[string]string{"a": "x", "b": "y"},
		InputSchema: json.RawMessage(`{"type":"object","required":["a","b"]}`), OutputExample: map[string]bool{"identical": false}}}
	cat, err := x402.NewCatalog(offers, &x402.CatalogConfig{PublicURL: "http://127.0.0.1:8080", PayToEVM: "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720", EVMNetworks: []string{"eip155:8453"}})
	require.NoError(t, err)
	q, err := cat.Quote("diff")
	require.NoError(t, err)
	var pr x402.PaymentRequired
	require.NoError(t, x402.DecodeHeader(q.PaymentRequired, &pr))
	declared := string(pr.Extensions[x402.ExtensionPaymentIdentifier])

	ext, err := x402.WithPaymentID(pr.Extensions, "pay_0123456789abcdef")
	require.NoError(t, err)
	require.Equal(t, declared, string(pr.Extensions[x402.ExtensionPaymentIdentifier]), "the quote's extensions are not modified")
	require.Equal(t, pr.Extensions["bazaar"], ext["bazaar"])
	id, err := (&x402.PaymentPayload{Extensions: ext}).PaymentID()
	require.NoError(t, err)
	require.Equal(t, "pay_0123456789abcdef", id)

	_, err = x402.WithPaymentID(pr.Extensions, "short")
	require.Error(t, err)
	none, err := x402.WithPaymentID(map[string]json.RawMessage{"bazaar": pr.Extensions["bazaar"]}, "pay_0123456789abcdef")
	require.NoError(t, err)
	require.NotContains(t, none, x402.ExtensionPaymentIdentifier, "not added where the quote does not declare it")
}
