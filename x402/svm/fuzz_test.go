package svm_test

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/svm"
)

// FuzzIdentify checks that no transaction bytes make decoding panic.
func FuzzIdentify(f *testing.F) {
	f.Add([]byte{1, 0})
	f.Add([]byte{0x80, 1, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		payload, _ := json.Marshal(x402.ExactSVMPayload{Transaction: encode(raw)})
		_, _, _ = svm.Identify(&x402.PaymentPayload{X402Version: 2, Payload: payload})
	})
}

func encode(raw []byte) string { return base64.StdEncoding.EncodeToString(raw) }
