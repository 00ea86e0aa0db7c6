package x402

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Payment is a verified payment for one call, kept with the call until it is
// settled after the call's work succeeded.
type Payment struct {
	// Network is the CAIP-2 network the payment is made on.
	Network string `json:"network,omitempty"`
	// Payer is the paying address (EVM "from", Solana transfer authority).
	Payer string `json:"payer,omitempty"`
	// Nonce identifies the payment on its network for replay protection: the
	// EIP-3009 nonce on EVM networks, the SHA-256 of the transaction's
	// message on Solana (base58), whatever its signatures.
	Nonce string `json:"nonce,omitempty"`
	// Amount is the paid amount in the asset's atomic units.
	Amount string `json:"amount,omitempty"`
	// Asset is the token contract or mint.
	Asset string `json:"asset,omitempty"`
	// Payload is the decoded PAYMENT-SIGNATURE (a v2 PaymentPayload).
	Payload json.RawMessage `json:"payload"`
	// VerifiedAt is when the payment was verified (UTC). Its transfer
	// cannot have happened much before (verification runs the transfer),
	// which bounds the search for it on chain when a settlement finds its
	// authorization already used. Zero on payments stored before it was
	// recorded.
	VerifiedAt time.Time `json:"verifiedAt,omitzero"`
	// ValidBefore is when the payment can no longer be settled (EIP-3009's
	// validBefore; on Solana when its transaction's blockhash dies): the
	// operation's retries and its settlement must end before it. Zero when
	// the payment names no such time.
	ValidBefore time.Time `json:"validBefore,omitzero"`
	// ReserveUntil, when later than ValidBefore, is when the payment can
	// no longer move money at the latest (on Solana, when its blockhash
	// dies if blocks come slowly; ValidBefore is the earliest): its
	// reservation against the payer's balance counts until then. Not
	// kept in the ledger.
	ReserveUntil time.Time `json:"-"`
	// Hold, when set, is the channel a batch-settlement payment is charged
	// to: its call's admission holds it busy (channel_busy) while its
	// charge is still the one the payment was verified against. Not kept
	// in the ledger.
	Hold *ChannelHold `json:"-"`
	// Decoded, when set, is Payload's scheme payload as the scheme that
	// settles the payment decoded it, kept for that scheme's next look at
	// the same Payment (a channel payment's OffChain, then its Settle).
	// Not kept in the ledger.
	Decoded any `json:"-"`
	// Record, when set, is the record of what the payment is charged to as
	// read with its call, in the transaction that settles it (a
	// batch-settlement payment's channel: store.CallListToSettleHeld), for
	// that settlement to take instead of reading it again; the settlement
	// takes it once. Not kept in the ledger.
	Record any `json:"-"`
	// exact is the compact form of Payload when the payment was read from
	// the ledger in it (fromLedger) or its verifier gave it
	// (PaymentPayload.LedgerPayment): ExactEVM reads the scheme's payload
	// there, and the ledger keeps it, with no decoding. exactOf is the
	// Payload it is the form of (compact). Not kept (it is Payload).
	exact   *ledgerEVM
	exactOf json.RawMessage
}

// compact returns the compact form of p's payload that p holds (exact),
// nil when it holds none or its Payload was replaced since.
func (p *Payment) compact() *ledgerEVM {
	if p.exact == nil || len(p.Payload) != len(p.exactOf) || len(p.Payload) > 0 && &p.Payload[0] != &p.exactOf[0] {
		return nil
	}
	return p.exact
}

// ExactEVM returns the exact EVM payload (the authorization and its
// signature) of a payment read from the ledger in its compact form, with
// no decoding, and false for any other payment: its Payload is then to be
// decoded.
func (p *Payment) ExactEVM() (*ExactEVMPayload, bool) {
	c := p.compact()
	if c == nil {
		return nil, false
	}
	return &ExactEVMPayload{Signature: hexBytes(c.Signature), Authorization: EVMAuthorization{
		From: c.From, To: c.To, Value: c.Value, ValidAfter: c.ValidAfter, ValidBefore: c.ValidBefore, Nonce: hexBytes(c.Nonce),
	}}, true
}

// hexBytes is b in 0x-prefixed lower-case hex.
func hexBytes(b []byte) string {
	out := make([]byte, 2+2*len(b))
	out[0], out[1] = '0', 'x'
	hex.Encode(out[2:], b)
	return string(out)
}

// ChannelHold is the channel a verified batch-settlement payment is
// charged to (Payment.Hold).
type ChannelHold struct {
	// ChannelID is the channel's id.
	ChannelID [32]byte
	// Charged is the channel's cumulative charge the payment's voucher was
	// checked against.
	Charged *big.Int
}

// ledgerPayment is the form the ledger keeps a Payment in (MarshalJSON):
// the fields its payload does not state, and the payload itself, either as
// it was verified (Payload) or, for an exact EVM payment, in its compact
// form (EVM).
type ledgerPayment struct {
	Network     string          `json:"network,omitempty"`
	Payer       string          `json:"payer,omitempty"`
	Nonce       string          `json:"nonce,omitempty"`
	Amount      string          `json:"amount,omitempty"`
	Asset       string          `json:"asset,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	EVM         *ledgerEVM      `json:"evm,omitempty"`
	VerifiedAt  time.Time       `json:"verifiedAt,omitzero"`
	ValidBefore time.Time       `json:"validBefore,omitzero"`
}

// MarshalJSON encodes p as the ledger keeps it: once, and compact. The
// fields its payload states (an exact EVM payment's network, asset, payer,
// nonce, amount and validBefore are in its option and authorization) are
// left out when equal to it, and UnmarshalJSON restores them from it; the
// others are kept. An exact EVM payload is kept in its compact form
// (ledgerEVM) when that gives it back whole, and the payment then as one
// packed binary value (packPayment), a base64 JSON string; any other
// payment as a JSON object. UnmarshalJSON reads every form written so far.
func (p Payment) MarshalJSON() ([]byte, error) {
	l := p.ledger()
	if packable(&l) {
		return json.Marshal(base64.RawStdEncoding.EncodeToString(packPayment(&l)))
	}
	return json.Marshal(&l)
}

// MarshalLedgerBinary returns p packed, and whether p has a packed form:
// for a record that packs its other fields with it (store's call.paid).
// An exact EVM payment is packed as MarshalJSON keeps it (before its
// base64); a payment of another scheme (a batch-settlement one) with its
// payload's JSON as it is (packRaw), which MarshalJSON keeps as a JSON
// object. UnmarshalLedgerBinary reads both.
func (p Payment) MarshalLedgerBinary() ([]byte, bool) {
	l := p.ledger()
	switch {
	case packable(&l):
		return packPayment(&l), true
	case rawPackable(&l):
		return packRaw(&l), true
	}
	return nil, false
}

// MarshalLedgerBinaryForm1 is MarshalLedgerBinary in packed form 1, which
// releases before form 2 wrote and read (the option's asset and extra kept
// whole), for a record written while their processes still run.
func (p Payment) MarshalLedgerBinaryForm1() ([]byte, bool) {
	l := p.ledger()
	if !packable(&l) {
		return nil, false
	}
	return packPaymentForm(&l, packedVersionWhole), true
}

// UnmarshalLedgerBinary decodes what MarshalLedgerBinary or
// MarshalLedgerBinaryForm1 returned.
func (p *Payment) UnmarshalLedgerBinary(b []byte) error {
	l, err := unpackPayment(b)
	if err != nil {
		return err
	}
	return p.fromLedger(l)
}

// ledger returns the ledger form of p: the fields its payload does not
// state, and its payload compact when it can be.
func (p Payment) ledger() ledgerPayment {
	var evm *ledgerEVM
	var compact, ok bool
	var s Payment
	if evm = p.compact(); evm != nil {
		compact = true
		s, ok = evm.stated()
	} else if mayBeExact(p.Payload) {
		evm, compact = compactEVM(p.Payload)
		if compact {
			s, ok = evm.stated()
		} else {
			s, ok = stated(p.Payload)
		}
	}
	if ok {
		if s.Network == p.Network {
			p.Network = ""
		}
		if s.Payer == p.Payer {
			p.Payer = ""
		}
		if s.Nonce == p.Nonce {
			p.Nonce = ""
		}
		if s.Amount == p.Amount {
			p.Amount = ""
		}
		if s.Asset == p.Asset {
			p.Asset = ""
		}
		if s.ValidBefore.Equal(p.ValidBefore) {
			p.ValidBefore = time.Time{}
		}
	}
	l := ledgerPayment{Network: p.Network, Payer: p.Payer, Nonce: p.Nonce, Amount: p.Amount, Asset: p.Asset,
		VerifiedAt: p.VerifiedAt, ValidBefore: p.ValidBefore}
	if compact {
		l.EVM = evm
	} else {
		l.Payload = p.Payload
	}
	return l
}

// mayBeExact reports whether payload may be of the exact scheme, the
// only one the compact form and the fields a payload states know
// (compactEVM, stated): whether its JSON may hold the string "exact",
// spelled so or with escapes. Another payload (a batch-settlement
// voucher's) is then not decoded to find out.
func mayBeExact(payload json.RawMessage) bool {
	return bytes.Contains(payload, []byte(`"exact"`)) || bytes.Contains(payload, []byte(`\u`))
}

// UnmarshalJSON decodes a Payment, restoring its payload from its compact
// form and from the payload the fields MarshalJSON left out (and reading
// the whole form written before either).
func (p *Payment) UnmarshalJSON(b []byte) error {
	*p = Payment{}
	var l ledgerPayment
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		packed, err := base64.RawStdEncoding.DecodeString(s)
		if err != nil {
			return fmt.Errorf("decode ledger payment: %w", err)
		}
		return p.UnmarshalLedgerBinary(packed)
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	return p.fromLedger(&l)
}

// fromLedger sets p from its ledger form l.
func (p *Payment) fromLedger(l *ledgerPayment) error {
	*p = Payment{Network: l.Network, Payer: l.Payer, Nonce: l.Nonce, Amount: l.Amount, Asset: l.Asset,
		Payload: l.Payload, VerifiedAt: l.VerifiedAt, ValidBefore: l.ValidBefore}
	if l.EVM != nil {
		payload, err := l.EVM.payload()
		if err != nil {
			return err
		}
		p.Payload, p.exact, p.exactOf = payload, l.EVM, payload
	}
	if p.Network != "" && p.Payer != "" && p.Nonce != "" && p.Amount != "" && p.Asset != "" && !p.ValidBefore.IsZero() {
		return nil
	}
	var s Payment
	var ok bool
	if l.EVM != nil {
		// What the payload states, from its compact form: not decoded
		// again from the JSON just made of it.
		s, ok = l.EVM.stated()
	} else if mayBeExact(p.Payload) {
		// Only an exact payload states any (stated): another (a
		// voucher's) is not decoded to find out.
		s, ok = stated(p.Payload)
	}
	if !ok {
		return nil
	}
	p.Network = cmp.Or(p.Network, s.Network)
	p.Payer = cmp.Or(p.Payer, s.Payer)
	p.Nonce = cmp.Or(p.Nonce, s.Nonce)
	p.Amount = cmp.Or(p.Amount, s.Amount)
	p.Asset = cmp.Or(p.Asset, s.Asset)
	if p.ValidBefore.IsZero() {
		p.ValidBefore = s.ValidBefore
	}
	return nil
}

// ledgerEVM is the compact form of an exact EVM payment's payload (a
// PaymentPayload) in the ledger: its signature and nonce as bytes (base64
// in JSON: 88 and 44 characters against 132 and 66 of hex), of the option
// it accepted only what its authorization does not state (payTo is the
// authorization's to, amount its value), under short keys. It is used only
// when it gives the payload back whole (compactEVM); another payload is
// kept as it came.
type ledgerEVM struct {
	Version     int             `json:"v"`
	Network     string          `json:"net"`
	Asset       string          `json:"asset"`
	Timeout     int             `json:"timeout"`
	Extra       json.RawMessage `json:"extra,omitempty"`
	From        string          `json:"from"`
	To          string          `json:"to"`
	Value       string          `json:"value"`
	ValidAfter  string          `json:"after"`
	ValidBefore string          `json:"before"`
	Nonce       []byte          `json:"nonce"`
	Signature   []byte          `json:"sig"`
}

// compactEVM returns the compact form of payload, when it is an exact EVM
// payload that the form gives back whole: the same JSON value, its
// signature and nonce in lower-case hex.
func compactEVM(payload json.RawMessage) (*ledgerEVM, bool) {
	if len(payload) == 0 {
		return nil, false
	}
	var pp PaymentPayload
	if err := json.Unmarshal(payload, &pp); err != nil || pp.Accepted.Scheme != "exact" || pp.Resource != nil || pp.Extensions != nil {
		return nil, false
	}
	var e ExactEVMPayload
	if err := json.Unmarshal(pp.Payload, &e); err != nil {
		return nil, false
	}
	c, ok := compactOf(&pp, &e)
	if !ok {
		return nil, false
	}
	// The form's own encoding (what clients and Ledger mostly send) is
	// the same value byte for byte; any other is compared as JSON.
	back, err := c.payload()
	if err != nil || !bytes.Equal(back, payload) && !SameJSON(back, payload) {
		return nil, false
	}
	return c, true
}

// compactOf returns the compact form of pp, an exact EVM payload whose
// scheme payload is e, when the form can hold it (its signature and nonce
// in lower-case hex, paid to the option's payTo its amount); whether it
// gives pp back whole is for the caller to check.
func compactOf(pp *PaymentPayload, e *ExactEVMPayload) (*ledgerEVM, bool) {
	a := &e.Authorization
	sig, ok1 := lowerHex(e.Signature)
	nonce, ok2 := lowerHex(a.Nonce)
	if !ok1 || !ok2 || a.To != pp.Accepted.PayTo || a.Value != pp.Accepted.Amount {
		return nil, false
	}
	return &ledgerEVM{Version: pp.X402Version, Network: pp.Accepted.Network, Asset: pp.Accepted.Asset, Timeout: pp.Accepted.MaxTimeoutSeconds,
		Extra: pp.Accepted.Extra, From: a.From, To: a.To, Value: a.Value, ValidAfter: a.ValidAfter, ValidBefore: a.ValidBefore,
		Nonce: nonce, Signature: sig}, true
}

// LedgerPayment returns the payment that keeps p, an exact EVM payload
// whose scheme payload its verifier decoded as e: its Payload is what the
// ledger keeps of p (Ledger), with, when the compact form gives that back
// byte for byte, the form beside it (ExactEVM), which the ledger then
// keeps with no decoding. The verifier fills in the other fields.
//
// A payload whose scheme payload came as json.Marshal writes it (as the
// official client and this service's clients send it) is what the compact
// form gives back (sameLedger): that is its Payload, and Ledger's encoding
// is not made as well.
func (p *PaymentPayload) LedgerPayment(e *ExactEVMPayload) (*Payment, error) {
	var c *ledgerEVM
	var back json.RawMessage
	if p.Accepted.Scheme == "exact" {
		if cc, ok := compactOf(p, e); ok {
			if b, err := cc.payload(); err == nil {
				c, back = cc, b
				if p.sameLedger(c, back) {
					return &Payment{Payload: back, exact: c, exactOf: back}, nil
				}
			}
		}
	}
	raw, err := p.Ledger()
	if err != nil {
		return nil, err
	}
	out := &Payment{Payload: raw}
	if c != nil && bytes.Equal(back, raw) {
		out.exact, out.exactOf = c, raw
	}
	return out, nil
}

// sameLedger reports whether back, what c (p's compact form) gives back,
// is what p.Ledger writes, without writing it: p's version and option are
// c's (every field of Requirements), which Ledger writes as back has
// them, and back ends with
// `,"payload":` and p's scheme payload as it came, byte for byte (so it
// came as json.Marshal writes it, which Ledger then keeps as it is).
func (p *PaymentPayload) sameLedger(c *ledgerEVM, back json.RawMessage) bool {
	a := &p.Accepted
	if a.Scheme != "exact" || a.Network != c.Network || a.Amount != c.Value || a.Asset != c.Asset || a.PayTo != c.To ||
		a.MaxTimeoutSeconds != c.Timeout || !bytes.Equal(a.Extra, c.Extra) || p.X402Version != c.Version || len(p.Payload) == 0 {
		return false
	}
	const key = `,"payload":`
	n := len(back) - 1 - len(p.Payload)
	return n >= len(key) && back[len(back)-1] == '}' && bytes.Equal(back[n:len(back)-1], p.Payload) && string(back[n-len(key):n]) == key
}

// payload returns the PaymentPayload c is the compact form of: the JSON
// json.Marshal makes of it (marshalPayload), written here without its
// reflection when nothing in it needs escaping (plain), as every payment
// of the listed networks is (each paid call makes it twice: its
// verification's LedgerPayment, its settlement's read of the ledger).
func (c *ledgerEVM) payload() (json.RawMessage, error) {
	if !c.plain() {
		return c.marshalPayload()
	}
	// 245 bytes of keys and punctuation, two numbers of at most 20.
	n := 245 + 40 + len(c.Network) + 2*len(c.Value) + len(c.Asset) + 2*len(c.To) + len(c.Extra) + len(c.From) +
		len(c.ValidAfter) + len(c.ValidBefore) + 2*(len(c.Signature)+len(c.Nonce))
	b := make([]byte, 0, n)
	b = append(b, `{"x402Version":`...)
	b = strconv.AppendInt(b, int64(c.Version), 10)
	b = append(b, `,"accepted":{"scheme":"exact","network":"`...)
	b = append(b, c.Network...)
	b = append(b, `","amount":"`...)
	b = append(b, c.Value...)
	b = append(b, `","asset":"`...)
	b = append(b, c.Asset...)
	b = append(b, `","payTo":"`...)
	b = append(b, c.To...)
	b = append(b, `","maxTimeoutSeconds":`...)
	b = strconv.AppendInt(b, int64(c.Timeout), 10)
	if len(c.Extra) > 0 {
		b = append(b, `,"extra":`...)
		b = append(b, c.Extra...)
	}
	b = append(b, `},"payload":{"signature":"0x`...)
	b = hex.AppendEncode(b, c.Signature)
	b = append(b, `","authorization":{"from":"`...)
	b = append(b, c.From...)
	b = append(b, `","to":"`...)
	b = append(b, c.To...)
	b = append(b, `","value":"`...)
	b = append(b, c.Value...)
	b = append(b, `","validAfter":"`...)
	b = append(b, c.ValidAfter...)
	b = append(b, `","validBefore":"`...)
	b = append(b, c.ValidBefore...)
	b = append(b, `","nonce":"0x`...)
	b = hex.AppendEncode(b, c.Nonce)
	b = append(b, `"}}}`...)
	return b, nil
}

// plain reports whether c's payload is written as json.Marshal writes it
// with nothing escaped or compacted: its strings are printable ASCII
// without '"', '\\', '<', '>' or '&' (which json.Marshal escapes), and its
// extra is valid JSON in that form, compact (no space outside its
// strings).
func (c *ledgerEVM) plain() bool {
	for _, s := range []string{c.Network, c.Asset, c.From, c.To, c.Value, c.ValidAfter, c.ValidBefore} {
		for i := range len(s) {
			if !plainByte(s[i]) {
				return false
			}
		}
	}
	if len(c.Extra) == 0 {
		return true
	}
	in := false
	for i, ch := range c.Extra {
		switch {
		case in && ch == '"' && !escaped(c.Extra[:i]):
			in = false
		case !in && ch == '"':
			in = true
		case !in && (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'):
			return false
		case ch != '"' && ch != '\\' && !plainByte(ch):
			return false
		}
	}
	return json.Valid(c.Extra)
}

// escaped reports whether the byte after b is escaped: b ends with an odd
// number of backslashes.
func escaped(b []byte) bool {
	n := 0
	for n < len(b) && b[len(b)-1-n] == '\\' {
		n++
	}
	return n%2 == 1
}

// plainByte reports whether json.Marshal writes ch, in a string, as it is.
func plainByte(ch byte) bool {
	return ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\' && ch != '<' && ch != '>' && ch != '&'
}

// marshalPayload is payload by json.Marshal, for a c that is not plain.
func (c *ledgerEVM) marshalPayload() (json.RawMessage, error) {
	inner, err := json.Marshal(&ExactEVMPayload{Signature: hexBytes(c.Signature), Authorization: EVMAuthorization{
		From: c.From, To: c.To, Value: c.Value, ValidAfter: c.ValidAfter, ValidBefore: c.ValidBefore, Nonce: hexBytes(c.Nonce),
	}})
	if err != nil {
		return nil, fmt.Errorf("decode ledger payment: %w", err)
	}
	raw, err := json.Marshal(&PaymentPayload{X402Version: c.Version, Payload: inner, Accepted: Requirements{
		Scheme: "exact", Network: c.Network, Amount: c.Value, Asset: c.Asset, PayTo: c.To, MaxTimeoutSeconds: c.Timeout, Extra: c.Extra,
	}})
	if err != nil {
		return nil, fmt.Errorf("decode ledger payment: %w", err)
	}
	return raw, nil
}

// lowerHex decodes s, 0x-prefixed lower-case hex of at least one byte, and
// reports whether it was that.
func lowerHex(s string) ([]byte, bool) {
	if len(s) < 4 || !strings.HasPrefix(s, "0x") || strings.ToLower(s) != s {
		return nil, false
	}
	b, err := hex.DecodeString(s[2:])
	return b, err == nil
}

// SameJSON reports whether a and b hold equal JSON values (a payload kept
// in the ledger went through jsonb or its compact form, which do not keep
// the bytes).
func SameJSON(a, b json.RawMessage) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// stated returns the fields of a payment that its payload (a PaymentPayload)
// states, and whether it states them: only an exact EVM payload does (an
// exact Solana payload's payer and nonce are inside its transaction).
func stated(payload json.RawMessage) (Payment, bool) {
	if len(payload) == 0 {
		return Payment{}, false
	}
	var pp struct {
		Accepted Requirements    `json:"accepted"`
		Payload  ExactEVMPayload `json:"payload"`
	}
	if err := json.Unmarshal(payload, &pp); err != nil || pp.Accepted.Scheme != "exact" || pp.Payload.Authorization.From == "" {
		return Payment{}, false
	}
	a := &pp.Payload.Authorization
	s := Payment{Network: pp.Accepted.Network, Payer: a.From, Nonce: a.Nonce, Amount: a.Value, Asset: pp.Accepted.Asset}
	if v, ok := new(big.Int).SetString(a.ValidBefore, 10); ok {
		s.ValidBefore = UnixTime(v)
	}
	return s, true
}

// stated returns what stated returns of the payload c is the compact
// form of, with no decoding.
func (c *ledgerEVM) stated() (Payment, bool) {
	if c.From == "" {
		return Payment{}, false
	}
	s := Payment{Network: c.Network, Payer: c.From, Nonce: "0x" + hex.EncodeToString(c.Nonce), Amount: c.Value, Asset: c.Asset}
	if v, ok := new(big.Int).SetString(c.ValidBefore, 10); ok {
		s.ValidBefore = UnixTime(v)
	}
	return s, true
}

// UnixTime is the time of a uint256 of unix seconds (EIP-3009's validAfter
// and validBefore): zero past year 9999 (an authorization valid for ever
// names no end).
func UnixTime(v *big.Int) time.Time {
	if !v.IsInt64() || v.Int64() > 253402300799 {
		return time.Time{}
	}
	return time.Unix(v.Int64(), 0).UTC()
}

// Key returns the replay key of the payment: a payment is accepted once.
func (p *Payment) Key() string { return p.Network + "/" + p.Payer + "/" + p.Nonce }

// Refusal is a payment that is not accepted. The api answers it with 402, a
// fresh quote and Reason as the "error" field.
type Refusal struct {
	// Reason is a stable code, spelled as the official packages spell theirs
	// (invalid_exact_evm_signature, ...).
	Reason string
	// Message says what is wrong, for a person.
	Message string
	// NeverValid is set when the payment could not have been accepted at
	// any time by this seller, whatever the chain holds (its form, scheme,
	// network, recipient, amount or start are wrong): no earlier call holds
	// it, and the ledger need not be asked for one.
	NeverValid bool
	// Option, when set, is the seller's option to answer in place of the
	// quote's of its scheme and network: a batch-settlement payment whose
	// cumulative amount is not the seller's is answered the corrective
	// 402, whose option carries the channel's state (OptionQuoter).
	Option *Requirements
}

// OptionQuoter is a Verifier that answers a refusal naming an option
// (Refusal.Option) with a quote carrying it.
type OptionQuoter interface {
	// QuoteWithOption returns op's quote naming reason and message whose
	// option of option's scheme and network is option.
	QuoteWithOption(op, reason, message string, option *Requirements) (*Quote, error)
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

// ErrNotSellable is returned for an operation that is not sold now (its
// receiving configuration is invalid, or it needs a model key that is unset).
var ErrNotSellable = errors.New("operation is not sellable")

// Quote is a precomputed 402 answer for one operation.
type Quote struct {
	// PaymentRequired is the PAYMENT-REQUIRED header value (base64 JSON).
	PaymentRequired string
	// WWWAuthenticate is the WWW-Authenticate header value.
	WWWAuthenticate string
	// Body is the JSON body of the 402.
	Body []byte
}

// Verifier checks a PAYMENT-SIGNATURE header against an operation's quote.
type Verifier interface {
	// Quote returns the precomputed quote of op, or ErrNotSellable.
	Quote(op string) (*Quote, error)
	// QuoteWithError returns op's quote with its "error" set to reason
	// (and a "message"): the answer to a refused payment.
	QuoteWithError(op, reason, message string) (*Quote, error)
	// Verify decodes and checks header for op and returns the payment, or a
	// *Refusal.
	Verify(ctx context.Context, op string, header string) (*Payment, error)
	// Identify decodes header for op with no check and no I/O and returns
	// the payment it names, so that a payment accepted before (and perhaps
	// settled since, which Verify refuses) is recognised when resent.
	Identify(op string, header string) (*Payment, error)
	// PaymentID returns the payment-identifier id header carries ("" when
	// none), with no check of the payment and no I/O; an
	// *InvalidPaymentIDError when its extension breaks the spec's rules.
	// A header that cannot be read carries none (Verify refuses it).
	PaymentID(header string) (string, error)
	// Authenticate checks that header's payment for op is its payer's
	// own, without verifying it as a charge: that it answers one of op's
	// requirements, as Verify matches it, and that its payer signed it.
	// Nothing of its funds, nonce or validity window is checked: it is
	// never settled. It returns the payment as Identify does, or a
	// *Refusal.
	Authenticate(ctx context.Context, op string, header string) (*Payment, error)
}

// Authenticator is a SchemeVerifier that can check who signed a payment
// without verifying it as a charge (Verifier.Authenticate): for a payment
// that only proves its payer, sent again with a payment identifier the
// payer used before. A SchemeVerifier that is not one verifies such a
// payment whole (nothing of it is reserved or settled either way).
type Authenticator interface {
	// Authenticate checks payload against req as Verify does, but only
	// its form, its match to req and its signature, and returns its
	// payer in the canonical form of Payment.Payer.
	Authenticate(ctx context.Context, req *Requirements, payload *PaymentPayload) (payer string, err error)
}

// SettleResponse is the x402 SettleResponse, sent base64-encoded in the
// PAYMENT-RESPONSE header.
type SettleResponse struct {
	Success     bool   `json:"success"`
	ErrorReason string `json:"errorReason,omitempty"`
	Payer       string `json:"payer,omitempty"`
	Transaction string `json:"transaction"`
	Network     string `json:"network"`
	// Amount and Extra are a batch-settlement payment's (channel.Response):
	// what moved on chain ("" for a voucher, left out) and
	// extra.chargedAmount and extra.channelState. Exact payments have
	// neither.
	Amount string          `json:"amount,omitempty"`
	Extra  json.RawMessage `json:"extra,omitempty"`
	// Cost is what the settlement cost the seller in gas, when it sent a
	// transaction: for its own books, never sent to the payer.
	Cost *SettleCost `json:"-"`
	// Block is the block the settlement's transaction was mined in, when
	// the settler follows it until final (a Finality does): nil when the
	// settlement is final as it is answered.
	Block *SettledBlock `json:"-"`
	// Ledger, when set, is what the settlement records in the ledger with
	// its outcome, in the same transaction: a scheme's own records (a
	// batch-settlement payment's channel events, []store.NewEvent), for
	// the worker to append. Never sent.
	Ledger any `json:"-"`
}

// callKey is the context key of WithCall.
type callKey struct{}

// WithCall returns ctx naming the call whose payment is being settled, for
// a settler whose ledger records name it (SettleResponse.Ledger).
func WithCall(ctx context.Context, callID string) context.Context {
	return context.WithValue(ctx, callKey{}, callID)
}

// CallOf returns the call WithCall named in ctx, "" when none.
func CallOf(ctx context.Context) string {
	id, _ := ctx.Value(callKey{}).(string)
	return id
}

// SettledBlock is a block a settlement's transaction was mined in.
type SettledBlock struct {
	// Number is the block's number.
	Number uint64 `json:"number"`
	// Hash is the block's hash, 0x-prefixed hex.
	Hash string `json:"hash"`
}

// TxState is what became of a settlement's transaction since it was
// mined.
type TxState int

// The states of a followed transaction.
const (
	// TxPending: in its block, which is not final yet.
	TxPending TxState = iota
	// TxFinal: in its block, which the network's finality policy holds
	// final. Every settlement it carried is final.
	TxFinal
	// TxMoved: mined again in another block after a reorganisation
	// (FollowedTx.Block names it): the settlements it carried are in it
	// only if their transfers ran there again (Finality.Carried).
	TxMoved
	// TxGone: in no block of the chain any more (a reorganisation undid
	// it and the node has not mined it again).
	TxGone
)

// FollowedTx is a settlement transaction followed until final.
type FollowedTx struct {
	// Transaction is the transaction's hash.
	Transaction string
	// Block is where it was mined; after Follow, where it is now (TxMoved).
	Block SettledBlock
	// State is set by Follow.
	State TxState
}

// Finality follows settled transactions after their receipt until their
// network holds them final. A Settler that answers SettleResponse.Block
// is one.
type Finality interface {
	// Follow sets the State of each of txs, mined on network, to what
	// became of it: one look at the chain for all of them. It returns the
	// newest block the network's policy holds final.
	Follow(ctx context.Context, network string, txs []FollowedTx) (uint64, error)
	// Carried reports, for each of payments, whether transaction tx of
	// network, as mined now, moved its funds: one look at the transaction
	// for all of them.
	Carried(ctx context.Context, network, tx string, payments []*Payment) ([]bool, error)
}

// SettleCost is the gas a settlement spent: its share of the transaction's
// gas (the whole of it, or a batch's gas divided among its transfers) at
// the transaction's effective price.
type SettleCost struct {
	// GasUsed is the settlement's gas.
	GasUsed uint64 `json:"gas_used"`
	// GasPriceWei is the effective gas price paid, in wei.
	GasPriceWei string `json:"gas_price_wei"`
	// Batch is the number of transfers the transaction carried (1: alone).
	Batch int `json:"batch"`
}

// FeeWei returns GasUsed × GasPriceWei, in wei (0 when the price cannot be
// read).
func (c *SettleCost) FeeWei() *big.Int {
	price, ok := new(big.Int).SetString(c.GasPriceWei, 10)
	if !ok {
		return new(big.Int)
	}
	return price.Mul(price, new(big.Int).SetUint64(c.GasUsed))
}

// Settler moves the funds of verified payments.
type Settler interface {
	// Settle settles p. A payment that cannot be settled is a SettleResponse
	// with Success false and an ErrorReason; an error means "try again".
	Settle(ctx context.Context, p *Payment) (*SettleResponse, error)
}

// Reconciliation is what the chain shows of a payment whose settlement
// attempts all failed (Reconciler).
type Reconciliation int

// The outcomes of a reconciliation.
const (
	// ReconcilePending: nothing is final yet (the authorization is unused
	// and can still be used); the payment may be settled again.
	ReconcilePending Reconciliation = iota
	// ReconcilePaid: a transaction moved the payment; the response names
	// it.
	ReconcilePaid
	// ReconcileLost: the authorization was used, but by no transfer found
	// (canceled by its payer, or used where the search does not reach):
	// the payment cannot be settled, and whether it moved is not known.
	ReconcileLost
	// ReconcileRefused: the authorization was never used and can no longer
	// be (expired): nothing was charged.
	ReconcileRefused
)

// String returns the outcome's name: pending, paid, lost or refused.
func (r Reconciliation) String() string {
	switch r {
	case ReconcilePaid:
		return "paid"
	case ReconcileLost:
		return "lost"
	case ReconcileRefused:
		return "refused"
	}
	return "pending"
}

// Reconciler is a Settler that tells, from the chain alone, what became of
// a payment whose settlement attempts all failed (its answers lost, its
// chain unreachable for a while).
type Reconciler interface {
	// Reconcile returns what the chain shows of p and, unless it is
	// ReconcilePending, the settlement's response to record: the
	// transaction that moved it (paid), or the reason it was not (lost,
	// refused). An error means the chain could not be read.
	Reconcile(ctx context.Context, p *Payment) (Reconciliation, *SettleResponse, error)
}

// TransactionNamer is a Settler that knows, before it sends anything, the
// id of the transaction that settles a payment (on Solana the fee payer's
// signature, deterministic), so that the id is recorded before the
// transaction is sent and an attempt after a crash looks it up rather than
// guessing whether it was sent.
type TransactionNamer interface {
	// Transaction returns the id of the transaction that settles p, ""
	// when it is not known before it is sent (the settlement will fail
	// without sending anything, or its settler cannot tell).
	Transaction(p *Payment) (string, error)
}

// PendingError is a settlement whose transaction was sent and has not been
// seen to end within the attempt (x402's settlement_pending, followed for
// as long as the attempt waits). It is an error, never a refusal: the
// settlement is tried again, and the worker records Transaction with the
// call so that the next attempt, in whatever process, follows it
// (PendingFollower).
type PendingError struct {
	// Transaction is the transaction sent.
	Transaction string
}

func (e *PendingError) Error() string {
	return "settlement pending in transaction " + e.Transaction
}

// PendingFollower is a Settler that can take up a settlement an earlier
// attempt left pending (a *PendingError).
type PendingFollower interface {
	// SettlePending settles p as Settle does, knowing that an earlier
	// attempt left its settlement pending in transaction tx.
	SettlePending(ctx context.Context, p *Payment, tx string) (*SettleResponse, error)
}

// SlowSettler is a Settler some of whose settlements wait longer than an
// ordinary one on a healthy chain, by a known time: on Solana at
// SOLANA_COMMITMENT=finalized, the block's finalization. A payment's
// settlement grace is extended by it, so that a later attempt does not
// start while the first one still waits.
type SlowSettler interface {
	// ExtraWait returns how much longer than an ordinary settlement the
	// settlement of p waits on a healthy chain (0: no longer).
	ExtraWait(p *Payment) time.Duration
}

// SchemeVerifier verifies payloads of one scheme family (exact on EVM
// networks, exact on Solana) against the seller's own requirement.
type SchemeVerifier interface {
	// Verify checks payload against req (the seller's own requirement for
	// the network the payload names, never payload.Accepted) and returns the
	// payment, or a *Refusal with the reason of x402.md. An error that is not
	// a *Refusal means the check could not be made (chain unreachable).
	Verify(ctx context.Context, req *Requirements, payload *PaymentPayload) (*Payment, error)
}

// SchemeRefunder is a SchemeVerifier whose scheme has refunds that pay for
// no call (batch-settlement's cooperative refund): accepted at once, and
// made by a worker (a job), whose outcome the request waits for.
type SchemeRefunder interface {
	// Refund checks payload against req and has the refund it asks made,
	// returning it pending, or a *Refusal.
	Refund(ctx context.Context, req *Requirements, payload *PaymentPayload) (*PendingRefund, error)
}

// PendingRefund is a refund accepted and being made by a worker.
type PendingRefund struct {
	// Stream is the event stream whose notifications announce its
	// outcome.
	Stream string
	// Outcome reads its outcome: nil and nil while it is being made, else
	// its response or its *Refusal.
	Outcome func(ctx context.Context) (*SettleResponse, error)
}

// Refunder is a Verifier that makes refunds (Seller.Refund).
type Refunder interface {
	// Refund has the refund header asks made for op's seller (pending),
	// or refuses it (a *Refusal).
	Refund(ctx context.Context, op, header string) (*PendingRefund, error)
}

// Settlers settles each payment with the settler of its network's CAIP-2
// namespace ("eip155", "solana"), or, for a scheme other than exact, of
// its namespace and scheme ("eip155/batch-settlement": SchemeOf). It
// implements Settler.
type Settlers map[string]Settler

// OffChainSettler is a Settler some of whose settlements move nothing on
// chain and need no I/O but the database (a batch-settlement voucher's
// charge): the worker makes them in the transaction that records the
// call's result, with no settlement job.
type OffChainSettler interface {
	// OffChain reports whether p's settlement is one.
	OffChain(p *Payment) bool
}

// OffChain reports whether the settler of p's namespace and scheme settles
// it off chain (OffChainSettler).
func (s Settlers) OffChain(p *Payment) bool {
	o, ok := s[settlerKey(p)].(OffChainSettler)
	return ok && o.OffChain(p)
}

// ChannelNoncePrefix begins the Nonce of every batch-settlement payment
// ("channel/<0x channel id>/..."), which tells it from an exact one
// (SchemeOf) with no decoding.
const ChannelNoncePrefix = "channel/"

// SchemeOf returns the scheme of a verified payment: batch-settlement
// when its nonce is a channel's (ChannelNoncePrefix), exact otherwise.
func SchemeOf(p *Payment) string {
	if strings.HasPrefix(p.Nonce, ChannelNoncePrefix) {
		return SchemeBatchSettlement
	}
	return "exact"
}

// settlerKey returns the key of p's settler in Settlers.
func settlerKey(p *Payment) string {
	namespace, _, _ := strings.Cut(p.Network, ":")
	if scheme := SchemeOf(p); scheme != "exact" {
		return namespace + "/" + scheme
	}
	return namespace
}

// Settle settles p with the settler of its namespace.
func (s Settlers) Settle(ctx context.Context, p *Payment) (*SettleResponse, error) {
	settler, ok := s[settlerKey(p)]
	if !ok {
		return nil, fmt.Errorf("settle: no settler for %s", p.Network)
	}
	return settler.Settle(ctx, p)
}

// SettlePending settles p with the settler of its namespace, as its
// SettlePending when it is a PendingFollower, else as Settle.
func (s Settlers) SettlePending(ctx context.Context, p *Payment, tx string) (*SettleResponse, error) {
	if f, ok := s[settlerKey(p)].(PendingFollower); ok {
		return f.SettlePending(ctx, p, tx)
	}
	return s.Settle(ctx, p)
}

// ExtraWait returns how much longer than an ordinary settlement the
// settlement of p waits, when the settler of its namespace is a
// SlowSettler; 0 otherwise.
func (s Settlers) ExtraWait(p *Payment) time.Duration {
	if slow, ok := s[settlerKey(p)].(SlowSettler); ok {
		return slow.ExtraWait(p)
	}
	return 0
}

// Reconcile reconciles p with the settler of its namespace when it is a
// Reconciler; otherwise it answers ReconcilePending (p is settled again).
func (s Settlers) Reconcile(ctx context.Context, p *Payment) (Reconciliation, *SettleResponse, error) {
	if r, ok := s[settlerKey(p)].(Reconciler); ok {
		return r.Reconcile(ctx, p)
	}
	return ReconcilePending, nil, nil
}

// Transaction returns the id of the transaction that settles p, when the
// settler of its namespace is a TransactionNamer; "" otherwise.
func (s Settlers) Transaction(p *Payment) (string, error) {
	if namer, ok := s[settlerKey(p)].(TransactionNamer); ok {
		return namer.Transaction(p)
	}
	return "", nil
}
