package loadgen

import (
	"encoding/base64"
	"encoding/json"
)

// settled decodes a PAYMENT-RESPONSE header value.
func settled(header string) (ok bool, tx string) {
	if header == "" {
		return false, ""
	}
	raw, err := base64.StdEncoding.DecodeString(header)
	if err != nil {
		return false, ""
	}
	var sr struct {
		Success     bool   `json:"success"`
		Transaction string `json:"transaction"`
	}
	if json.Unmarshal(raw, &sr) != nil {
		return false, ""
	}
	return sr.Success, sr.Transaction
}
