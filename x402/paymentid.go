package x402

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
)

// The payment-identifier extension (specs/extensions/payment_identifier.md
// in the x402 repository; @x402/extensions/payment-identifier): a client's
// idempotency key for a paid request, sent in the PaymentPayload's
// extensions["payment-identifier"].info.id. Every quote declares it, not
// required; what the service does with an id is the api's (package api,
// admit).
const (
	// ExtensionPaymentIdentifier is the extension's key in
	// PaymentRequired.extensions and PaymentPayload.extensions.
	ExtensionPaymentIdentifier = "payment-identifier"
	// PaymentIDMinLength and PaymentIDMaxLength bound an id's length, in
	// characters (all ASCII).
	PaymentIDMinLength = 16
	PaymentIDMaxLength = 128
	// ReasonInvalidPaymentID is the code of a payment whose
	// payment-identifier extension breaks the spec's rules: answered 400,
	// before the payment is verified.
	ReasonInvalidPaymentID = "invalid_payment_identifier"
)

// paymentIDPattern is the characters an id may hold, as the official
// PAYMENT_ID_PATTERN and the extension's schema spell them.
const paymentIDPattern = "^[a-zA-Z0-9_-]+$"

// paymentIDChars matches paymentIDPattern.
var paymentIDChars = regexp.MustCompile(paymentIDPattern)

// paymentIdentifierDeclaration is the extension as the quotes declare it:
// what the official declarePaymentIdentifierExtension(false) returns, key
// for key.
var paymentIdentifierDeclaration = json.RawMessage(`{"info":{"required":false},"schema":{` +
	`"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{` +
	`"required":{"type":"boolean"},` +
	`"id":{"type":"string","minLength":` + strconv.Itoa(PaymentIDMinLength) + `,"maxLength":` + strconv.Itoa(PaymentIDMaxLength) +
	`,"pattern":"` + paymentIDPattern + `"}},` +
	`"required":["required"]}}`)

// InvalidPaymentIDError is a payment-identifier extension that breaks the
// spec's rules: the request is answered 400 ReasonInvalidPaymentID and
// nothing is verified or charged.
type InvalidPaymentIDError struct {
	// Message says what is wrong, for a person.
	Message string
}

func (e *InvalidPaymentIDError) Error() string { return ReasonInvalidPaymentID + ": " + e.Message }

// PaymentID returns the payment-identifier id p carries: "" when it has no
// such extension or the extension names no id. An extension that is not
// {"info": {...}}, whose info.required is not a boolean, or whose id is not
// a string of PaymentIDMinLength to PaymentIDMaxLength letters, digits, '-'
// and '_' is an *InvalidPaymentIDError, as the official
// validatePaymentIdentifier refuses it. An info without "required" is
// accepted (the spec's first version declared none).
func (p *PaymentPayload) PaymentID() (string, error) {
	raw, ok := p.Extensions[ExtensionPaymentIdentifier]
	if !ok || string(raw) == "null" {
		return "", nil
	}
	var ext struct {
		Info map[string]json.RawMessage `json:"info"`
	}
	if err := json.Unmarshal(raw, &ext); err != nil || ext.Info == nil {
		return "", &InvalidPaymentIDError{Message: `extensions["payment-identifier"] must be an object with an "info" object`}
	}
	if r, ok := ext.Info["required"]; ok {
		var required bool
		if err := json.Unmarshal(r, &required); err != nil {
			return "", &InvalidPaymentIDError{Message: `extensions["payment-identifier"].info.required must be a boolean`}
		}
	}
	rawID, ok := ext.Info["id"]
	if !ok {
		return "", nil
	}
	var id string
	if err := json.Unmarshal(rawID, &id); err != nil {
		return "", &InvalidPaymentIDError{Message: `extensions["payment-identifier"].info.id must be a string`}
	}
	if err := ValidPaymentID(id); err != nil {
		return "", err
	}
	return id, nil
}

// ValidPaymentID returns an *InvalidPaymentIDError when id is not a valid
// payment identifier: PaymentIDMinLength to PaymentIDMaxLength ASCII
// letters, digits, '-' and '_' (the official PAYMENT_ID_PATTERN).
func ValidPaymentID(id string) error {
	if len(id) < PaymentIDMinLength || len(id) > PaymentIDMaxLength {
		return &InvalidPaymentIDError{Message: fmt.Sprintf("the payment identifier must be %d to %d characters; it has %d", PaymentIDMinLength, PaymentIDMaxLength, len(id))}
	}
	if !paymentIDChars.MatchString(id) {
		return &InvalidPaymentIDError{Message: "the payment identifier may hold only ASCII letters, digits, '-' and '_'"}
	}
	return nil
}

// WithPaymentID returns extensions (a quote's, which a client echoes) with
// the payment-identifier extension carrying id, as the official
// appendPaymentIdentifierToExtensions adds it: unchanged when the quote
// does not declare the extension. extensions is not modified.
func WithPaymentID(extensions map[string]json.RawMessage, id string) (map[string]json.RawMessage, error) {
	declared, ok := extensions[ExtensionPaymentIdentifier]
	if !ok {
		return extensions, nil
	}
	if err := ValidPaymentID(id); err != nil {
		return nil, err
	}
	var ext map[string]json.RawMessage
	if err := json.Unmarshal(declared, &ext); err != nil {
		return nil, fmt.Errorf("payment-identifier declaration: %w", err)
	}
	var info map[string]json.RawMessage
	if err := json.Unmarshal(ext["info"], &info); err != nil || info == nil {
		info = map[string]json.RawMessage{}
	}
	info["id"], _ = json.Marshal(id)
	ext["info"], _ = json.Marshal(info)
	out := make(map[string]json.RawMessage, len(extensions))
	for k, v := range extensions {
		out[k] = v
	}
	var err error
	if out[ExtensionPaymentIdentifier], err = json.Marshal(ext); err != nil {
		return nil, fmt.Errorf("payment-identifier extension: %w", err)
	}
	return out, nil
}
