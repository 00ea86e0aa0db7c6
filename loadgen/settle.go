package loadgen

import "github.com/x402d/x402d/x402"

// settled reads a PAYMENT-RESPONSE header value.
func settled(header string) (ok bool, tx string) {
	if header == "" {
		return false, ""
	}
	var sr x402.SettleResponse
	if x402.DecodeHeader(header, &sr) != nil {
		return false, ""
	}
	return sr.Success, sr.Transaction
}
