package evm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"

	"github.com/x402d/x402d/x402"
)

// ParseAuthorization decodes the wire form of an authorization: addresses in
// hex, numbers in decimal, the nonce as 32 bytes of hex.
func ParseAuthorization(w *x402.EVMAuthorization) (*Authorization, error) {
	var (
		a    Authorization
		errs []error
		err  error
	)
	if a.From, err = parseAddress("from", w.From); err != nil {
		errs = append(errs, err)
	}
	if a.To, err = parseAddress("to", w.To); err != nil {
		errs = append(errs, err)
	}
	if a.Value, err = parseUint256("value", w.Value); err != nil {
		errs = append(errs, err)
	}
	if a.ValidAfter, err = parseUint256("validAfter", w.ValidAfter); err != nil {
		errs = append(errs, err)
	}
	if a.ValidBefore, err = parseUint256("validBefore", w.ValidBefore); err != nil {
		errs = append(errs, err)
	}
	if a.Nonce, err = parseNonce(w.Nonce); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &a, nil
}

// Wire returns the wire form of the authorization.
func (a *Authorization) Wire() x402.EVMAuthorization {
	return x402.EVMAuthorization{
		From:        a.From.Hex(),
		To:          a.To.Hex(),
		Value:       a.Value.String(),
		ValidAfter:  a.ValidAfter.String(),
		ValidBefore: a.ValidBefore.String(),
		Nonce:       a.Nonce.Hex(),
	}
}

// parseNonce parses 32 bytes of 0x-prefixed hex.
func parseNonce(s string) (common.Hash, error) {
	b, err := hexutil.Decode(s)
	if err != nil || len(b) != common.HashLength {
		return common.Hash{}, fmt.Errorf("nonce %q is not 32 bytes of hex", s)
	}
	return common.BytesToHash(b), nil
}

// exactPayload is a decoded exact EVM payload.
type exactPayload struct {
	auth      *Authorization
	signature []byte
	// wire is the payload as it was decoded.
	wire *x402.ExactEVMPayload
}

// decodePayload decodes PaymentPayload.payload of the exact EVM scheme. Its
// error is a *x402.Refusal.
func decodePayload(raw json.RawMessage) (*exactPayload, error) {
	var p x402.ExactEVMPayload
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, &x402.Refusal{Reason: ReasonPayload, Message: "payload is not an exact EVM payload: " + err.Error()}
	}
	return parsePayload(&p)
}

// parsePayload checks and parses an exact EVM payload, decoded
// (decodePayload) or read from the ledger's compact form. Its error is a
// *x402.Refusal.
func parsePayload(p *x402.ExactEVMPayload) (*exactPayload, error) {
	if p.Authorization == (x402.EVMAuthorization{}) {
		return nil, &x402.Refusal{Reason: ReasonPayload, Message: "payload has no authorization"}
	}
	auth, err := ParseAuthorization(&p.Authorization)
	if err != nil {
		return nil, &x402.Refusal{Reason: ReasonPayload, Message: "authorization: " + err.Error()}
	}
	if strings.TrimPrefix(p.Signature, "0x") == "" {
		return nil, &x402.Refusal{Reason: ReasonMissingSignature, Message: "payload has no signature"}
	}
	sig, err := hexutil.Decode(p.Signature)
	if err != nil {
		return nil, &x402.Refusal{Reason: ReasonPayload, Message: "signature is not 0x-prefixed hex"}
	}
	return &exactPayload{auth: auth, signature: sig, wire: p}, nil
}

// schemePayload returns the "payload" member of doc, a stored
// PaymentPayload (x402.Payment.Payload): only the scheme's payload is
// needed, the rest (the requirements it accepted, the resource, the
// extensions) was checked at verification. The members are read in order
// up to "payload", the rest of doc is not: a stored payment is json.Marshal's
// encoding of a decoded PaymentPayload, with one "payload" key, and Postgres
// renders a jsonb object's shorter keys first, so that "payload" comes
// before the longer ones (the bazaar extension alone is over a kilobyte).
// Unlike json.Unmarshal into a struct, the key must be spelled exactly.
func schemePayload(doc []byte) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		if t == "payload" {
			return value, nil
		}
	}
	return nil, errors.New(`no "payload" member`)
}

// Identify returns the payer (checksummed) and the authorization nonce
// (0x-prefixed lowercase hex) an exact EVM payment names, with no check of
// the signature and no I/O, so that a payment accepted before is recognised
// when it is sent again. They are the Payer and Nonce Verify returns. Its
// error is a *x402.Refusal.
func Identify(p *x402.PaymentPayload) (payer, nonce string, err error) {
	ep, err := decodePayload(p.Payload)
	if err != nil {
		return "", "", err
	}
	return ep.auth.From.Hex(), ep.auth.Nonce.Hex(), nil
}
