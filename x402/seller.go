package x402

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Refusal reasons of the seller itself, spelled as the official packages
// spell theirs.
const (
	// ReasonInvalidPayload: the PAYMENT-SIGNATURE header cannot be read.
	ReasonInvalidPayload = "invalid_payload"
	// ReasonInvalidVersion: the payment is not x402 version 2.
	ReasonInvalidVersion = "invalid_x402_version"
	// ReasonNoMatch: the payment names no option of the quote; the
	// official server sends this very text.
	ReasonNoMatch = "No matching payment requirements"
)

// Scheme verifies and identifies the payments of one network family.
type Scheme struct {
	// Verifier checks payments against the seller's own requirement.
	Verifier SchemeVerifier
	// Identify reads the payer and nonce of a payment with no I/O.
	Identify func(p *PaymentPayload) (payer, nonce string, err error)
}

// Seller quotes operations and verifies payments for them: the payment step
// of the paid-call pipeline. It implements Verifier.
type Seller struct {
	catalog *Catalog
	// schemes by CAIP-2 namespace ("eip155", "solana").
	schemes map[string]Scheme
}

// NewSeller returns a Seller of catalog's operations that verifies payments
// with schemes, keyed by CAIP-2 namespace ("eip155", "solana").
func NewSeller(catalog *Catalog, schemes map[string]Scheme) *Seller {
	return &Seller{catalog: catalog, schemes: schemes}
}

// Catalog returns the seller's catalogue.
func (s *Seller) Catalog() *Catalog { return s.catalog }

// Quote returns op's precomputed quote, or ErrNotSellable.
func (s *Seller) Quote(op string) (*Quote, error) { return s.catalog.Quote(op) }

// QuoteWithError returns op's quote naming reason, for a refused payment.
func (s *Seller) QuoteWithError(op, reason, message string) (*Quote, error) {
	return s.catalog.QuoteWithError(op, reason, message)
}

// Verify decodes header, finds the seller's own requirement for the option
// the payment names, and has the network's scheme check it.
func (s *Seller) Verify(ctx context.Context, op, header string) (*Payment, error) {
	if _, err := s.catalog.Quote(op); err != nil {
		return nil, err
	}
	payload, scheme, req, err := s.match(op, header)
	if err != nil {
		return nil, err
	}
	return scheme.Verifier.Verify(ctx, req, payload)
}

// Identify decodes header and returns the payment it names, unchecked.
func (s *Seller) Identify(op, header string) (*Payment, error) {
	payload, scheme, req, err := s.match(op, header)
	if err != nil {
		return nil, err
	}
	if scheme.Identify == nil {
		return nil, &Refusal{Reason: ReasonInvalidPayload, Message: "payments on " + req.Network + " cannot be identified"}
	}
	payer, nonce, err := scheme.Identify(payload)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("identify: %w", err)
	}
	return &Payment{Network: req.Network, Payer: payer, Nonce: nonce, Amount: req.Amount, Asset: req.Asset, Payload: raw}, nil
}

// match decodes header and returns the payload, the scheme of its network
// and the seller's requirement it answers.
func (s *Seller) match(op, header string) (*PaymentPayload, Scheme, *Requirements, error) {
	var payload PaymentPayload
	if err := DecodeHeader(header, &payload); err != nil {
		return nil, Scheme{}, nil, &Refusal{Reason: ReasonInvalidPayload, Message: "PAYMENT-SIGNATURE: " + err.Error()}
	}
	if payload.X402Version != Version {
		return nil, Scheme{}, nil, &Refusal{Reason: ReasonInvalidVersion, Message: fmt.Sprintf("x402Version %d is not 2", payload.X402Version)}
	}
	network := payload.Accepted.Network
	req, ok := s.catalog.Requirement(op, payload.Accepted.Scheme, network)
	if !ok {
		return nil, Scheme{}, nil, &Refusal{Reason: ReasonNoMatch, Message: fmt.Sprintf("this operation is not sold for %q on %q", payload.Accepted.Scheme, network)}
	}
	namespace, _, _ := strings.Cut(network, ":")
	scheme, ok := s.schemes[namespace]
	if !ok || scheme.Verifier == nil {
		return nil, Scheme{}, nil, &Refusal{Reason: ReasonNoMatch, Message: "payments on " + network + " are not verified here"}
	}
	return &payload, scheme, req, nil
}
