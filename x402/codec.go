package x402

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// MaxHeaderBytes bounds a payment header value the codec decodes.
const MaxHeaderBytes = 64 << 10

// EncodeHeader returns the header value of v: base64 (standard alphabet,
// padded) of its JSON, as the official packages send and expect.
func EncodeHeader(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode header: %w", err)
	}
	return base64.StdEncoding.EncodeToString(raw), nil
}

// DecodeHeader decodes a header value into v. It accepts the standard
// alphabet with or without padding, and surrounding spaces; the URL-safe
// alphabet is refused, as by the official packages.
func DecodeHeader(value string, v any) error {
	value = strings.TrimSpace(value)
	if len(value) > MaxHeaderBytes {
		return fmt.Errorf("header of %d bytes is over %d", len(value), MaxHeaderBytes)
	}
	if value == "" {
		return errors.New("empty header")
	}
	raw, err := base64.StdEncoding.DecodeString(value)
	if err != nil {
		if raw, err = base64.RawStdEncoding.DecodeString(value); err != nil {
			return fmt.Errorf("header is not base64: %w", err)
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("header is not the expected JSON: %w", err)
	}
	return nil
}
