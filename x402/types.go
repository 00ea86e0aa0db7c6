package x402

import (
	"encoding/json"
	"fmt"
)

// Version is the x402 protocol version this service speaks.
const Version = 2

// Header names of the v2 HTTP transport.
const (
	HeaderPaymentRequired  = "PAYMENT-REQUIRED"
	HeaderPaymentSignature = "PAYMENT-SIGNATURE"
	HeaderPaymentResponse  = "PAYMENT-RESPONSE"
)

// ResourceInfo describes the paid resource in a PaymentRequired.
type ResourceInfo struct {
	URL         string `json:"url"`
	Description string `json:"description,omitempty"`
	MimeType    string `json:"mimeType,omitempty"`
}

// Requirements is one entry of PaymentRequired.accepts: one way to pay.
type Requirements struct {
	Scheme            string          `json:"scheme"`
	Network           string          `json:"network"`
	Amount            string          `json:"amount"`
	Asset             string          `json:"asset"`
	PayTo             string          `json:"payTo"`
	MaxTimeoutSeconds int             `json:"maxTimeoutSeconds"`
	Extra             json.RawMessage `json:"extra,omitempty"`
}

// PaymentRequired is the v2 PaymentRequired, sent base64-encoded in the
// PAYMENT-REQUIRED header of a 402.
type PaymentRequired struct {
	X402Version int                        `json:"x402Version"`
	Error       string                     `json:"error,omitempty"`
	Resource    ResourceInfo               `json:"resource"`
	Accepts     []Requirements             `json:"accepts"`
	Extensions  map[string]json.RawMessage `json:"extensions,omitempty"`
}

// PaymentPayload is the v2 PaymentPayload, sent base64-encoded in the
// PAYMENT-SIGNATURE header.
type PaymentPayload struct {
	X402Version int                        `json:"x402Version"`
	Resource    *ResourceInfo              `json:"resource,omitempty"`
	Accepted    Requirements               `json:"accepted"`
	Payload     json.RawMessage            `json:"payload"`
	Extensions  map[string]json.RawMessage `json:"extensions,omitempty"`
}

// Ledger returns what the ledger keeps of p (Payment.Payload): its version,
// the option it accepted and the scheme's payload (the authorization and its
// signature, or the transaction). The resource and the extensions the client
// echoes from the quote (the bazaar extension alone is over a kilobyte) are
// the seller's own words, checked at verification, and are not kept.
func (p *PaymentPayload) Ledger() (json.RawMessage, error) {
	raw, err := json.Marshal(&PaymentPayload{X402Version: p.X402Version, Accepted: p.Accepted, Payload: p.Payload})
	if err != nil {
		return nil, fmt.Errorf("encode payment payload: %w", err)
	}
	return raw, nil
}

// EVMAuthorization is the EIP-3009 TransferWithAuthorization message of an
// exact EVM payment. Numbers are decimal strings; Nonce is 32 bytes of hex.
type EVMAuthorization struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Value       string `json:"value"`
	ValidAfter  string `json:"validAfter"`
	ValidBefore string `json:"validBefore"`
	Nonce       string `json:"nonce"`
}

// ExactEVMPayload is PaymentPayload.payload for the exact scheme on EVM
// networks (EIP-3009).
type ExactEVMPayload struct {
	Signature     string           `json:"signature"`
	Authorization EVMAuthorization `json:"authorization"`
}

// ExactSVMPayload is PaymentPayload.payload for the exact scheme on Solana:
// a base64 partially-signed versioned transaction.
type ExactSVMPayload struct {
	Transaction string `json:"transaction"`
}

// EVMExtra is Requirements.extra on EVM networks: the token's EIP-712 domain.
type EVMExtra struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// SVMExtra is Requirements.extra on Solana.
type SVMExtra struct {
	FeePayer string `json:"feePayer"`
	Memo     string `json:"memo,omitempty"`
	// RecentBlockhash and LastValidBlockHeight, when set, are the
	// blockhash the client's transaction is to name and the last block
	// height at which it may land, as the official client accepts them.
	RecentBlockhash      string `json:"recentBlockhash,omitempty"`
	LastValidBlockHeight uint64 `json:"lastValidBlockHeight,omitempty"`
}

// VerifyResponse is a facilitator's answer to /verify.
type VerifyResponse struct {
	IsValid        bool   `json:"isValid"`
	InvalidReason  string `json:"invalidReason,omitempty"`
	InvalidMessage string `json:"invalidMessage,omitempty"`
	Payer          string `json:"payer,omitempty"`
}
