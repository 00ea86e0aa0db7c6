package evm

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
