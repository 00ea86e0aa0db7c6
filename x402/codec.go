package x402

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// MaxHeaderBytes bounds a payment header value the codec decodes: room for
// the largest payloads clients send (an ERC-6492-wrapped smart-wallet
// signature is a few kilobytes, a Solana transaction at most 1,232 bytes).
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

// DecodeHeader decodes a header value into v: base64 of JSON. It accepts
// what the official packages send and accept: the standard RFC 4648
// alphabet, padded or not (their decoder's pattern is
// ^[A-Za-z0-9+/]*={0,2}$ and atob takes unpadded input), plus surrounding
// spaces and line breaks between characters, which proxies may add. The
// URL-safe alphabet ('-' and '_') is refused, as the official packages
// refuse it. A value over MaxHeaderBytes is refused before decoding.
func DecodeHeader(value string, v any) error {
	raw, err := headerJSON(value)
	if err != nil {
		return err
	}
	return unmarshalHeader(raw, v)
}

// unmarshalHeader decodes raw, the JSON of a header value, into v.
func unmarshalHeader(raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("header is not the expected JSON: %w", err)
	}
	return nil
}

// headerJSON returns the JSON a header value carries, decoded as
// DecodeHeader decodes it.
func headerJSON(value string) ([]byte, error) {
	return appendHeaderJSON(nil, value)
}

// appendHeaderJSON appends to dst the JSON a header value carries, decoded
// as DecodeHeader decodes it, and returns the extended buffer: a caller
// that decodes many headers reuses one buffer (Seller.decodeHeader).
func appendHeaderJSON(dst []byte, value string) ([]byte, error) {
	value = strings.TrimSpace(value)
	if len(value) > MaxHeaderBytes {
		return nil, fmt.Errorf("header of %d bytes is over %d", len(value), MaxHeaderBytes)
	}
	if value == "" {
		return nil, errors.New("empty header")
	}
	raw, err := base64.StdEncoding.AppendDecode(dst, []byte(value))
	if err != nil {
		if raw, err = base64.RawStdEncoding.AppendDecode(dst, []byte(value)); err != nil {
			return nil, fmt.Errorf("header is not base64: %w", err)
		}
	}
	return raw, nil
}
