package x402

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCodec(t *testing.T) {
	t.Parallel()
	// A payload whose standard base64 has '+' and '/', so that its URL-safe
	// form differs.
	v := map[string]string{"k": "\xfb\xff\xbe?>~~~"}
	h, err := EncodeHeader(v)
	require.NoError(t, err)
	require.True(t, strings.ContainsAny(h, "+/"), h)
	require.Equal(t, base64.StdEncoding.EncodeToString([]byte(`{"k":"\ufffd\ufffd\ufffd?\u003e~~~"}`)), h)
	for _, tc := range []struct {
		name, value string
		ok          bool
	}{
		{"Standard", h, true},
		{"Unpadded", strings.TrimRight(base64.StdEncoding.EncodeToString([]byte(`{"k":"ab"}`)), "="), true},
		{"SurroundingSpace", " \t" + h + " ", true},
		{"LineBreaks", h[:8] + "\r\n" + h[8:], true},
		{"URLSafe", strings.NewReplacer("+", "-", "/", "_").Replace(h), false},
		{"Empty", "", false},
		{"Spaces", "   ", false},
		{"NotBase64", "!!!!", false},
		{"NotJSON", base64.StdEncoding.EncodeToString([]byte("nope")), false},
		{"JSONOfAnotherShape", base64.StdEncoding.EncodeToString([]byte(`[1,2]`)), false},
		{"TooLarge", base64.StdEncoding.EncodeToString([]byte(`{"k":"` + strings.Repeat("a", MaxHeaderBytes) + `"}`)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got map[string]string
			err := DecodeHeader(tc.value, &got)
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.NotEmpty(t, got["k"])
		})
	}
}

func TestPaymentPayloadLedger(t *testing.T) {
	t.Parallel()
	p := PaymentPayload{
		X402Version: 2,
		Resource:    &ResourceInfo{URL: "https://x402d.example/api/x402/regex", Description: "regex"},
		Accepted:    Requirements{Scheme: "exact", Network: "eip155:8453", Amount: "10000", Asset: "0xA", PayTo: "0xB", MaxTimeoutSeconds: 300},
		Payload:     json.RawMessage(`{"signature":"0x01","authorization":{"from":"0xC","nonce":"0x02"}}`),
		Extensions:  map[string]json.RawMessage{"bazaar": json.RawMessage(`{"info":{"input":{"body":{"pattern":"x"}}},"schema":{}}`)},
	}
	raw, err := p.Ledger()
	require.NoError(t, err)
	require.JSONEq(t, `{"x402Version":2,"accepted":{"scheme":"exact","network":"eip155:8453","amount":"10000","asset":"0xA","payTo":"0xB","maxTimeoutSeconds":300},
		"payload":{"signature":"0x01","authorization":{"from":"0xC","nonce":"0x02"}}}`, string(raw))
}
