package x402

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/x402d/x402d/internal/bounded"
)

// Refusal reasons of the seller itself, spelled as the x402 specification
// (v2 §9) and the official packages spell them.
const (
	// ReasonInvalidPayload: the PAYMENT-SIGNATURE header cannot be read
	// (not standard base64, not JSON, over MaxHeaderBytes).
	ReasonInvalidPayload = "invalid_payload"
	// ReasonInvalidVersion: the payment is not x402 version 2.
	ReasonInvalidVersion = "invalid_x402_version"
	// ReasonNoMatch: the payment's accepted option is none of the quote's;
	// the official TypeScript server sends this very text.
	ReasonNoMatch = "No matching payment requirements"
	// ReasonInsufficientFunds: the payer's balance, as the chain showed
	// it, does not cover this payment on top of the payer's payments
	// still in flight (verified, not yet settled or refused).
	ReasonInsufficientFunds = "insufficient_funds"
)

// Scheme verifies and identifies the payments of one network family.
type Scheme struct {
	// Verifier checks payments against the seller's own requirement.
	Verifier SchemeVerifier
	// Identify reads the payer and nonce of a payment with no I/O, in the
	// canonical forms its Verifier puts in Payment.Payer and Payment.Nonce,
	// so that Identify and Verify give the same Payment.Key.
	Identify func(p *PaymentPayload) (payer, nonce string, err error)
	// Balance, when set, reads what a verified payment's payer holds of
	// its asset now (BalanceReader): its network's payments are then
	// reserved against their payer's balance.
	Balance func(ctx context.Context, p *Payment) (*big.Int, error)
}

// Seller quotes operations and verifies payments for them: the payment step
// of the paid-call pipeline. It implements Verifier.
type Seller struct {
	catalog *Catalog
	// schemes by CAIP-2 namespace ("eip155", "solana").
	schemes map[string]Scheme
	// decoded keeps the payloads PaymentID decoded whole, by header, for
	// the Verify (Identify, Authenticate) of the same header that follows
	// (match takes it): a header that names extensions, as one echoing
	// the quote's does, is decoded once, not twice. Those no Verify
	// follows (a payment identifier refused or bound to a call) go as
	// newer ones come (decodedKept).
	decoded *bounded.Map[string, *PaymentPayload]
	// buffers holds the buffers (*[]byte) headers' base64 is decoded into
	// (decodeHeader): each paid request's payload is kilobytes (the
	// extensions it echoes), and encoding/json copies what a payload keeps
	// of it (strings, json.RawMessage), so a buffer is used again once its
	// payload is decoded.
	buffers sync.Pool
}

// decodedKept bounds the payloads a Seller keeps between PaymentID and
// the Verify that follows it: about the paid requests admitted at once.
const decodedKept = 1024

var (
	_ Verifier      = (*Seller)(nil)
	_ BalanceReader = (*Seller)(nil)
)

// NewSeller returns a Seller of catalog's operations that verifies payments
// with schemes, keyed by CAIP-2 namespace ("eip155", "solana") for the
// exact scheme and by namespace and scheme for the others
// ("eip155/batch-settlement").
func NewSeller(catalog *Catalog, schemes map[string]Scheme) *Seller {
	return &Seller{catalog: catalog, schemes: schemes, decoded: bounded.New[string, *PaymentPayload](decodedKept)}
}

// Catalog returns the seller's catalogue.
func (s *Seller) Catalog() *Catalog { return s.catalog }

// Quote returns op's precomputed quote, or a *NotSellableError.
func (s *Seller) Quote(op string) (*Quote, error) { return s.catalog.Quote(op) }

// QuoteWithError returns op's quote naming reason, for a refused payment.
func (s *Seller) QuoteWithError(op, reason, message string) (*Quote, error) {
	return s.catalog.QuoteWithError(op, reason, message)
}

// Verify decodes header, finds the seller's own requirement for the option
// the payment names, and has the network's scheme check the payment against
// that requirement (never against the payment's copy of it).
//
// Refusals, in order: ReasonInvalidPayload (undecodable header),
// ReasonInvalidVersion (x402Version is not 2), ReasonNoMatch (accepted is
// none of the quote's options: scheme, network, amount, asset and payTo
// must equal one, addresses compared case-insensitively on EVM networks, as
// the official Go server matches), then the scheme's own reasons.
func (s *Seller) Verify(ctx context.Context, op, header string) (*Payment, error) {
	payload, scheme, req, err := s.match(op, header)
	if err != nil {
		return nil, err
	}
	return scheme.Verifier.Verify(ctx, req, payload)
}

// QuoteWithOption returns op's quote naming reason, with option in place
// of the quote's of its scheme and network (Catalog.QuoteWithOption).
func (s *Seller) QuoteWithOption(op, reason, message string, option *Requirements) (*Quote, error) {
	return s.catalog.QuoteWithOption(op, reason, message, option)
}

// Refund has the refund header asks (a batch-settlement refund payload)
// made, with the scheme of the option it names when that is a
// SchemeRefunder; any other payment is refused.
func (s *Seller) Refund(ctx context.Context, op, header string) (*PendingRefund, error) {
	payload, scheme, req, err := s.match(op, header)
	if err != nil {
		return nil, err
	}
	r, ok := scheme.Verifier.(SchemeRefunder)
	if !ok {
		return nil, &Refusal{Reason: ReasonNoMatch, NeverValid: true, Message: "payments of scheme " + req.Scheme + " have no refunds"}
	}
	return r.Refund(ctx, req, payload)
}

// Reserves reports whether payments on network are reserved against their
// payer's balance: whether its scheme reads balances (Scheme.Balance).
func (s *Seller) Reserves(network string) bool {
	namespace, _, _ := strings.Cut(network, ":")
	return s.schemes[namespace].Balance != nil
}

// Balance returns what p's payer holds of p's asset on p's network, read
// from the chain by its scheme (Scheme.Balance).
func (s *Seller) Balance(ctx context.Context, p *Payment) (*big.Int, error) {
	namespace, _, _ := strings.Cut(p.Network, ":")
	read := s.schemes[namespace].Balance
	if read == nil {
		return nil, fmt.Errorf("balance on %s: not read here", p.Network)
	}
	b, err := read(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("balance of %s on %s: %w", p.Payer, p.Network, err)
	}
	return b, nil
}

// Identify decodes header and returns the payment it names, unchecked and
// with no I/O: for replay detection. Its Key is the one Verify's Payment
// has for the same header: network/payer/nonce, with the CAIP-2 network of
// the seller's requirement and the payer and nonce in the scheme's
// canonical form. On EVM networks that is the EIP-55 checksummed "from"
// and the 0x-prefixed lower-case 32-byte nonce, however the client spelled
// them; on Solana the base58 transfer authority and the base58 SHA-256 of
// the transaction's message, which are case-sensitive and kept as they are.
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
	raw, err := payload.Ledger()
	if err != nil {
		return nil, fmt.Errorf("identify: %w", err)
	}
	return &Payment{Network: req.Network, Payer: payer, Nonce: nonce, Amount: req.Amount, Asset: req.Asset, Payload: raw}, nil
}

// PaymentID returns the payment-identifier id of header's payload ("" when
// none), with no check of the payment and no I/O: an
// *InvalidPaymentIDError when its extension breaks the spec's rules. A
// header that cannot be read names none; Verify refuses it.
//
// A payload that cannot name "extensions" (mayNameExtensions) names none
// and is not decoded here: Verify decodes it, once. One that may is
// decoded whole, and kept for the Verify of the same header (decoded).
func (s *Seller) PaymentID(header string) (string, error) {
	buf := s.buffer()
	defer s.buffers.Put(buf)
	raw, err := appendHeaderJSON((*buf)[:0], header)
	if err != nil {
		return "", nil
	}
	*buf = raw
	if !mayNameExtensions(raw) {
		return "", nil
	}
	var payload PaymentPayload
	if err := json.Unmarshal(raw, &payload); err != nil {
		// Not a PaymentPayload (Verify refuses it), but its extensions
		// may still name an id.
		var ext struct {
			Extensions map[string]json.RawMessage `json:"extensions"`
		}
		if err := json.Unmarshal(raw, &ext); err != nil {
			return "", nil
		}
		return (&PaymentPayload{Extensions: ext.Extensions}).PaymentID()
	}
	s.decoded.Put(header, &payload)
	return payload.PaymentID()
}

// mayNameExtensions reports whether JSON raw may hold a key that
// encoding/json takes for "extensions": it matches keys without regard to
// case, Unicode's foldings included (ſ, K), and undoes escapes. A raw
// that is all ASCII, has no escape \u and no "extensions" in any case
// holds none.
func mayNameExtensions(raw []byte) bool {
	for _, b := range raw {
		if b >= utf8.RuneSelf {
			return true
		}
	}
	if bytes.Contains(raw, []byte(`\u`)) {
		return true
	}
	const key = `"extensions"`
	for i := 0; ; i++ {
		j := bytes.IndexByte(raw[i:], '"')
		if j < 0 || i+j+len(key) > len(raw) {
			return false
		}
		i += j
		if bytes.EqualFold(raw[i:i+len(key)], []byte(key)) {
			return true
		}
	}
}

// Authenticate checks that header's payment for op answers one of op's
// requirements (as Verify matches it) and was signed by its payer, with
// the scheme's Authenticator when it has one, else by verifying it whole.
// It returns the payment as Identify does, or a *Refusal. A payment so
// checked proves who sent it and is never settled.
func (s *Seller) Authenticate(ctx context.Context, op, header string) (*Payment, error) {
	payload, scheme, req, err := s.match(op, header)
	if err != nil {
		return nil, err
	}
	a, ok := scheme.Verifier.(Authenticator)
	if !ok {
		p, err := scheme.Verifier.Verify(ctx, req, payload)
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	payer, err := a.Authenticate(ctx, req, payload)
	if err != nil {
		return nil, err
	}
	p, err := s.Identify(op, header)
	if err != nil {
		return nil, err
	}
	if p.Payer != payer {
		return nil, &Refusal{Reason: ReasonInvalidPayload, Message: fmt.Sprintf("the payment names payer %s, its signature is %s's", p.Payer, payer)}
	}
	return p, nil
}

// match decodes header and returns the payload, the scheme of its network
// and the seller's requirement it answers.
func (s *Seller) match(op, header string) (*PaymentPayload, Scheme, *Requirements, error) {
	if _, err := s.catalog.Quote(op); err != nil {
		return nil, Scheme{}, nil, err
	}
	payload, ok := s.decoded.Get(header)
	if ok {
		// PaymentID decoded it: taken (a payload is read, never changed,
		// by the schemes, so two takers of one header may share it).
		s.decoded.Delete(header)
	} else {
		payload = &PaymentPayload{}
		if err := s.decodeHeader(header, payload); err != nil {
			return nil, Scheme{}, nil, &Refusal{Reason: ReasonInvalidPayload, NeverValid: true, Message: "PAYMENT-SIGNATURE: " + err.Error()}
		}
	}
	if payload.X402Version != Version {
		return nil, Scheme{}, nil, &Refusal{Reason: ReasonInvalidVersion, NeverValid: true, Message: fmt.Sprintf("x402Version %d is not 2", payload.X402Version)}
	}
	a := &payload.Accepted
	req, ok := s.catalog.Requirement(op, a.Scheme, a.Network)
	if !ok {
		return nil, Scheme{}, nil, &Refusal{Reason: ReasonNoMatch, NeverValid: true, Message: fmt.Sprintf("this operation is not sold with scheme %q on network %q", a.Scheme, a.Network)}
	}
	namespace, _, _ := strings.Cut(req.Network, ":")
	same := func(x, y string) bool { return x == y }
	if namespace == "eip155" {
		same = strings.EqualFold
	}
	if a.Amount != req.Amount || !same(a.Asset, req.Asset) || !same(a.PayTo, req.PayTo) {
		return nil, Scheme{}, nil, &Refusal{Reason: ReasonNoMatch, NeverValid: true, Message: fmt.Sprintf(
			"accepted asks %s of %s to %s on %s; the quote asks %s of %s to %s", a.Amount, a.Asset, a.PayTo, a.Network, req.Amount, req.Asset, req.PayTo)}
	}
	// A scheme other than exact has its own verifier, keyed
	// "<namespace>/<scheme>".
	key := namespace
	if req.Scheme != "exact" {
		key += "/" + req.Scheme
	}
	scheme, ok := s.schemes[key]
	if !ok || scheme.Verifier == nil {
		return nil, Scheme{}, nil, &Refusal{Reason: ReasonNoMatch, NeverValid: true, Message: "payments on " + req.Network + " are not verified here"}
	}
	return payload, scheme, req, nil
}

// buffer returns a buffer of s's to decode a header's base64 into; the
// caller hands it back (s.buffers.Put) once nothing refers to it.
func (s *Seller) buffer() *[]byte {
	if buf, ok := s.buffers.Get().(*[]byte); ok {
		return buf
	}
	return new([]byte)
}

// decodeHeader decodes header into v as DecodeHeader does, its JSON held in
// a buffer of s's that is used again after (buffers).
func (s *Seller) decodeHeader(header string, v any) error {
	buf := s.buffer()
	defer s.buffers.Put(buf)
	raw, err := appendHeaderJSON((*buf)[:0], header)
	if err != nil {
		return err
	}
	*buf = raw
	return unmarshalHeader(raw, v)
}
