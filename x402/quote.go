package x402

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mr-tron/base58"
)

// Texts of the quotes.
const (
	// ErrorPaymentRequired is the "error" of a quote answering a request
	// without payment, as contract.md spells it.
	ErrorPaymentRequired = "payment required"
	// Realm is the realm of the WWW-Authenticate challenge.
	Realm = "x402d"
	// DefaultMaxTimeoutSeconds is the payment window offered when none is
	// configured, as in the official packages.
	DefaultMaxTimeoutSeconds = 300
)

// SolanaOption is the Solana option of the quotes, offered only when the
// service can settle it.
type SolanaOption struct {
	// PayTo is the receiving wallet (the owner, not its token account),
	// base58. Malformed: no operation is sellable.
	PayTo string
	// FeePayer is the address of the key that pays fees (extra.feePayer),
	// base58.
	FeePayer string
	// RecentBlockhash, when set, is handed to clients in
	// extra.recentBlockhash with LastValidBlockHeight, so that a payment's
	// window starts at the quote (Catalog.SetSolanaBlockhash renews it).
	RecentBlockhash      string
	LastValidBlockHeight uint64
}

// SchemeBatchSettlement is the name of x402's batch-settlement scheme
// (payment channels: x402/evm/channel).
const SchemeBatchSettlement = "batch-settlement"

// ChannelOption is the batch-settlement option of the quotes, offered on
// every EVM network beside exact when the service can settle it (a
// receiver authorizer key is configured).
type ChannelOption struct {
	// ReceiverAuthorizer is the address of the seller's key that signs
	// claims and refunds (extra.receiverAuthorizer), 0x hex.
	ReceiverAuthorizer string
	// WithdrawDelay is the channels' withdrawal delay in seconds
	// (extra.withdrawDelay).
	WithdrawDelay uint64
}

// channelExtra is the batch-settlement option's extra, in the order and
// with the fields the official server (@x402/evm batch-settlement server,
// enhancePaymentRequirements) emits: the token's EIP-712 domain, the
// receiver authorizer, the withdrawal delay and the minimum deposit hint
// (MinDepositMultiplier prices).
type channelExtra struct {
	Name               string `json:"name"`
	Version            string `json:"version"`
	ReceiverAuthorizer string `json:"receiverAuthorizer"`
	WithdrawDelay      uint64 `json:"withdrawDelay"`
	MinDeposit         string `json:"minDeposit"`
}

// MinDepositMultiplier is the minimum deposit hint of the batch-settlement
// option (extra.minDeposit) in prices of the operation, the official
// server's default (DEFAULT_SERVER_MIN_DEPOSIT_MULTIPLIER). It is a hint:
// a smaller deposit is not refused.
const MinDepositMultiplier = 10

// CatalogConfig configures the quotes.
type CatalogConfig struct {
	// PublicURL is the service's base URL, used in resource URLs.
	PublicURL string
	// PayToEVM is the receiving address on EVM networks. Missing or
	// malformed: no operation is sellable.
	PayToEVM string
	// EVMNetworks are the EVM networks payments are accepted on (those the
	// service can verify and settle), primary first. Each must be one of
	// Networks.
	EVMNetworks []string
	// Solana, when set, adds the Solana mainnet option.
	Solana *SolanaOption
	// Channels, when set, adds a batch-settlement option on each of
	// EVMNetworks, after every exact option.
	Channels *ChannelOption
	// MaxTimeoutSeconds is the payment window offered. Defaults to
	// DefaultMaxTimeoutSeconds. The Solana option offers at most
	// SolanaMaxTimeoutSeconds, the life of a blockhash.
	MaxTimeoutSeconds int
}

// Offer is what the quotes say of one operation: all the protocol knows
// of it, handed over by the catalogue of operations (jobs.Spec.Offer).
type Offer struct {
	// Name is the operation's name, the last segment of its resource URL.
	Name string
	// Price is the fixed price in USD with at most 6 decimals, e.g.
	// "0.010000".
	Price string
	// Description says what the operation returns (the quote's
	// resource.description).
	Description string
	// InputExample is a valid request body, InputSchema its JSON Schema
	// (draft 2020-12), and OutputExample the result of InputExample: the
	// bazaar extension's content (x402.md §7).
	InputExample  any
	InputSchema   json.RawMessage
	OutputExample any
	// Unavailable, when set, is why the operation is not sold now (its
	// blocked reason), unless no operation is sold, whose reason
	// (NewCatalog) is given instead.
	Unavailable string
}

// Entry is one operation of the catalogue as discovery documents show it.
type Entry struct {
	Offer Offer
	// Resource is the operation's URL.
	Resource string
	// Sellable is false when the operation is not sold now, for
	// BlockedReason.
	Sellable      bool
	BlockedReason string
	// Required is the PaymentRequired of the quote (accepts empty when
	// not sellable).
	Required PaymentRequired
}

// NotSellableError is the error of Quote for an operation that is not sold
// now. It matches ErrNotSellable with errors.Is.
type NotSellableError struct {
	// Op is the operation.
	Op string
	// Reason says why, for blocked_reason in discovery documents.
	Reason string
}

func (e *NotSellableError) Error() string {
	return "operation " + e.Op + " is not sellable: " + e.Reason
}

// Is reports whether target is ErrNotSellable.
func (e *NotSellableError) Is(target error) bool { return target == ErrNotSellable }

// Catalog holds every operation's quote, built once at start-up, so quoting
// does no I/O and no allocation, and a quote naming a refusal costs only the
// encoding of the refusal's words.
type Catalog struct {
	offers []Offer
	cfg    CatalogConfig
	// mu serialises SetSolanaBlockhash; readers load state alone.
	mu    sync.Mutex
	state atomic.Pointer[catalogState]
}

// catalogState is every quote of the catalogue at one time: replaced whole
// when the Solana option's blockhash is renewed.
type catalogState struct {
	entries []Entry
	quotes  map[string]*catalogQuote
}

// catalogQuote is the precomputed quote of one operation.
type catalogQuote struct {
	entry *Entry
	quote Quote
	// notSellable is the error of Quote for an operation not sold now.
	notSellable *NotSellableError
	// required is the PaymentRequired JSON without "error", cut before
	// its closing brace into a base64 head (a whole number of 3-byte
	// groups, encoded once) and the 0 to 2 bytes left: a quote naming a
	// reason appends `,"error":<reason>}` to them.
	requiredB64  string
	requiredTail []byte
	// bodyRest is the 402 body without its `{"x402Version":2` head and
	// without "error" and "message", which go in between.
	bodyRest []byte
	// challenge is the WWW-Authenticate value without an error.
	challenge string
}

// quoteBody is the JSON body of a 402: the PaymentRequired fields, then the
// per-operation payment metadata of spec 2.1. "error" and "message" are
// spliced in after x402Version.
type quoteBody struct {
	X402Version   int                        `json:"x402Version"`
	Resource      ResourceInfo               `json:"resource"`
	Accepts       []Requirements             `json:"accepts"`
	Extensions    map[string]json.RawMessage `json:"extensions,omitempty"`
	Price         quotePrice                 `json:"price"`
	Protocols     []string                   `json:"protocols"`
	Scheme        string                     `json:"scheme"`
	Method        string                     `json:"method"`
	Network       string                     `json:"network"`
	Networks      []string                   `json:"networks"`
	Asset         string                     `json:"asset"`
	PayTo         string                     `json:"pay_to"`
	MimeType      string                     `json:"mime_type"`
	Sellable      bool                       `json:"sellable"`
	BlockedReason *string                    `json:"blocked_reason"`
}

type quotePrice struct {
	Mode     string `json:"mode"`
	Currency string `json:"currency"`
	Amount   string `json:"amount"`
}

var evmAddress = regexp.MustCompile(`^0x[0-9a-fA-F]{40}$`)

// ValidEVMAddress reports whether s is a 0x-prefixed 20-byte hex address.
func ValidEVMAddress(s string) bool { return evmAddress.MatchString(s) }

// ValidSolanaAddress reports whether s is a base58 32-byte public key.
func ValidSolanaAddress(s string) bool {
	if len(s) < 32 || len(s) > 44 {
		return false
	}
	b, err := base58.Decode(s)
	return err == nil && len(b) == 32
}

// NewCatalog builds the quotes of offers, in order, with a copy of cfg. No
// operation is sellable, with a blocked reason, when PayToEVM is missing or
// malformed, when the Solana option names a malformed address, or when no
// network is configured; otherwise an offer is sold unless it is
// Unavailable.
func NewCatalog(offers []Offer, cfg *CatalogConfig) (*Catalog, error) {
	c := &Catalog{offers: offers, cfg: *cfg}
	if cfg.Solana != nil {
		solana := *cfg.Solana
		c.cfg.Solana = &solana
	}
	if cfg.Channels != nil {
		channels := *cfg.Channels
		c.cfg.Channels = &channels
	}
	st, err := buildCatalog(offers, &c.cfg)
	if err != nil {
		return nil, err
	}
	c.state.Store(st)
	return c, nil
}

// SetSolanaBlockhash renews the blockhash the Solana option hands out
// (extra.recentBlockhash and extra.lastValidBlockHeight): every quote is
// built again and replaces the old ones at once. Without a Solana option
// it does nothing.
func (c *Catalog) SetSolanaBlockhash(hash string, lastValidBlockHeight uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.Solana == nil {
		return nil
	}
	cfg := c.cfg
	solana := *cfg.Solana
	solana.RecentBlockhash, solana.LastValidBlockHeight = hash, lastValidBlockHeight
	cfg.Solana = &solana
	st, err := buildCatalog(c.offers, &cfg)
	if err != nil {
		return fmt.Errorf("renew the Solana blockhash: %w", err)
	}
	c.cfg = cfg
	c.state.Store(st)
	return nil
}

// buildCatalog builds the quotes of offers for cfg, applying its defaults.
func buildCatalog(offers []Offer, cfg *CatalogConfig) (*catalogState, error) {
	if cfg.MaxTimeoutSeconds <= 0 {
		cfg.MaxTimeoutSeconds = DefaultMaxTimeoutSeconds
	}
	for _, id := range cfg.EVMNetworks {
		if n, ok := NetworkByID(id); !ok || n.Namespace() != "eip155" {
			return nil, fmt.Errorf("catalog: EVM network %q is not one of the listed networks", id)
		}
	}
	blocked := ""
	switch {
	case !ValidEVMAddress(cfg.PayToEVM):
		blocked = "receiving address (PAY_TO_EVM) missing or malformed"
	case cfg.Solana != nil && !ValidSolanaAddress(cfg.Solana.PayTo):
		blocked = "receiving wallet (PAY_TO_SOLANA) malformed"
	case cfg.Solana != nil && !ValidSolanaAddress(cfg.Solana.FeePayer):
		blocked = "Solana fee payer malformed"
	case len(cfg.EVMNetworks) == 0 && cfg.Solana == nil:
		blocked = "no network to settle payments on is configured"
	}
	base := strings.TrimRight(cfg.PublicURL, "/")
	c := &catalogState{entries: make([]Entry, len(offers)), quotes: make(map[string]*catalogQuote, len(offers))}
	for i := range offers {
		offer := &offers[i]
		if _, dup := c.quotes[offer.Name]; dup {
			return nil, fmt.Errorf("catalog: operation %s listed twice", offer.Name)
		}
		amount, err := atomicAmount(offer.Price, 6)
		if err != nil {
			return nil, fmt.Errorf("quote %s: %w", offer.Name, err)
		}
		e := &c.entries[i]
		*e = Entry{Offer: *offer, Resource: base + "/api/x402/" + offer.Name, Sellable: true}
		switch {
		case blocked != "":
			e.Sellable, e.BlockedReason = false, blocked
		case offer.Unavailable != "":
			e.Sellable, e.BlockedReason = false, offer.Unavailable
		}
		bazaar, err := bazaarExtension(offer)
		if err != nil {
			return nil, fmt.Errorf("quote %s: %w", offer.Name, err)
		}
		e.Required = PaymentRequired{
			X402Version: Version,
			Error:       ErrorPaymentRequired,
			Resource:    ResourceInfo{URL: e.Resource, Description: offer.Description, MimeType: "application/json"},
			Accepts:     []Requirements{},
			Extensions:  map[string]json.RawMessage{"bazaar": bazaar, ExtensionPaymentIdentifier: paymentIdentifierDeclaration},
		}
		if e.Sellable {
			if e.Required.Accepts, err = accepts(amount, cfg); err != nil {
				return nil, fmt.Errorf("quote %s: %w", offer.Name, err)
			}
		}
		q, err := buildQuote(e, cfg, amount)
		if err != nil {
			return nil, fmt.Errorf("quote %s: %w", offer.Name, err)
		}
		c.quotes[offer.Name] = q
	}
	return c, nil
}

// accepts returns one requirement per configured network, EVM networks
// first in the configured order, then Solana.
func accepts(amount string, cfg *CatalogConfig) ([]Requirements, error) {
	out := make([]Requirements, 0, len(cfg.EVMNetworks)+1)
	for _, id := range cfg.EVMNetworks {
		n, _ := NetworkByID(id)
		extra, _ := n.AssetExtra()
		out = append(out, Requirements{Scheme: "exact", Network: n.ID, Amount: amount, Asset: n.Asset,
			PayTo: cfg.PayToEVM, MaxTimeoutSeconds: cfg.MaxTimeoutSeconds, Extra: extra})
	}
	if cfg.Solana != nil {
		n, _ := NetworkByID(SolanaMainnet)
		extra, err := json.Marshal(SVMExtra{FeePayer: cfg.Solana.FeePayer, RecentBlockhash: cfg.Solana.RecentBlockhash,
			LastValidBlockHeight: cfg.Solana.LastValidBlockHeight})
		if err != nil {
			return nil, fmt.Errorf("requirement extra: %w", err)
		}
		out = append(out, Requirements{Scheme: "exact", Network: n.ID, Amount: amount, Asset: n.Asset,
			PayTo: cfg.Solana.PayTo, MaxTimeoutSeconds: min(cfg.MaxTimeoutSeconds, SolanaMaxTimeoutSeconds), Extra: extra})
	}
	if ch := cfg.Channels; ch != nil {
		price, ok := new(big.Int).SetString(amount, 10)
		if !ok {
			return nil, fmt.Errorf("requirement amount %q", amount)
		}
		minDeposit := price.Mul(price, big.NewInt(MinDepositMultiplier)).String()
		for _, id := range cfg.EVMNetworks {
			n, _ := NetworkByID(id)
			extra, err := json.Marshal(channelExtra{Name: n.Name, Version: n.Version, ReceiverAuthorizer: ch.ReceiverAuthorizer,
				WithdrawDelay: ch.WithdrawDelay, MinDeposit: minDeposit})
			if err != nil {
				return nil, fmt.Errorf("requirement extra: %w", err)
			}
			out = append(out, Requirements{Scheme: SchemeBatchSettlement, Network: n.ID, Amount: amount, Asset: n.Asset,
				PayTo: cfg.PayToEVM, MaxTimeoutSeconds: cfg.MaxTimeoutSeconds, Extra: extra})
		}
	}
	return out, nil
}

// buildQuote precomputes the header values and the 402 body of e, and the
// parts of its quotes naming other reasons.
func buildQuote(e *Entry, cfg *CatalogConfig, amount string) (*catalogQuote, error) {
	q := &catalogQuote{entry: e}
	if !e.Sellable {
		q.notSellable = &NotSellableError{Op: e.Offer.Name, Reason: e.BlockedReason}
	}

	// The header: the PaymentRequired without "error", cut for splicing.
	required := e.Required
	required.Error = ""
	raw, err := json.Marshal(&required)
	if err != nil {
		return nil, fmt.Errorf("encode PaymentRequired: %w", err)
	}
	raw = raw[:len(raw)-1] // the closing brace
	whole := len(raw) / 3 * 3
	q.requiredB64 = base64.StdEncoding.EncodeToString(raw[:whole])
	q.requiredTail = raw[whole:]

	// The body: PaymentRequired plus the metadata of spec 2.1.
	primary := Networks()[0]
	var blockedReason *string
	if !e.Sellable {
		blockedReason = &e.BlockedReason
	}
	body, err := json.Marshal(&quoteBody{
		X402Version:   Version,
		Resource:      e.Required.Resource,
		Accepts:       e.Required.Accepts,
		Extensions:    e.Required.Extensions,
		Price:         quotePrice{Mode: "fixed", Currency: "USD", Amount: e.Offer.Price},
		Protocols:     []string{"x402"},
		Scheme:        "exact",
		Method:        "POST",
		Network:       primary.ID,
		Networks:      NetworkIDs(),
		Asset:         primary.Asset,
		PayTo:         cfg.PayToEVM,
		MimeType:      "application/json",
		Sellable:      e.Sellable,
		BlockedReason: blockedReason,
	})
	if err != nil {
		return nil, fmt.Errorf("encode 402 body: %w", err)
	}
	head := []byte(`{"x402Version":` + strconv.Itoa(Version))
	if !bytes.HasPrefix(body, head) {
		return nil, fmt.Errorf("encode 402 body: unexpected head %.20s", body)
	}
	q.bodyRest = body[len(head):]

	q.challenge = challenge(e, cfg, amount)
	message := fmt.Sprintf("%s costs %s USD: pay one of accepts (also in the PAYMENT-REQUIRED header) and resend the same request with a PAYMENT-SIGNATURE header", e.Offer.Name, e.Offer.Price)
	q.quote = *q.withError(ErrorPaymentRequired, message)
	q.quote.WWWAuthenticate = q.challenge
	return q, nil
}

// challenge returns the WWW-Authenticate value of e's quote, an X402
// challenge (RFC 9110 §11.6.1 syntax) naming the primary option:
//
//	X402 realm="x402d", resource="<url>", version="2", scheme="exact",
//	network="eip155:8453", amount="10000", asset="0x8335…", pay_to="0x…",
//	price="0.010000 USD", header="PAYMENT-REQUIRED"
//
// amount is in the asset's atomic units; every option is in the
// PAYMENT-REQUIRED header the challenge points to. A quote answering a
// refused payment adds error="<reason>", as Bearer challenges do (RFC 6750).
func challenge(e *Entry, cfg *CatalogConfig, amount string) string {
	network, asset, payTo := "", "", ""
	if len(e.Required.Accepts) > 0 {
		r := e.Required.Accepts[0]
		network, asset, payTo = r.Network, r.Asset, r.PayTo
	} else {
		primary := Networks()[0]
		network, asset, payTo = primary.ID, primary.Asset, cfg.PayToEVM
	}
	var b strings.Builder
	b.WriteString("X402 ")
	for i, p := range [...][2]string{
		{"realm", Realm}, {"resource", e.Resource}, {"version", strconv.Itoa(Version)}, {"scheme", "exact"},
		{"network", network}, {"amount", amount}, {"asset", asset}, {"pay_to", payTo},
		{"price", e.Offer.Price + " USD"}, {"header", HeaderPaymentRequired},
	} {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p[0])
		b.WriteByte('=')
		b.WriteString(quotedString(p[1]))
	}
	return b.String()
}

// quotedString returns s as an HTTP quoted-string of ASCII only: control
// characters become spaces and other non-ASCII characters '?', since
// clients read header bytes over 0x7f as ISO-8859-1 (fetch does).
func quotedString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			b.WriteByte(' ')
		case r > 0x7f:
			b.WriteByte('?')
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// withError returns the quote whose "error" is reason and whose body has
// message, from the precomputed parts.
func (q *catalogQuote) withError(reason, message string) *Quote {
	reasonJSON := jsonString(reason)

	header := make([]byte, 0, len(q.requiredTail)+len(reasonJSON)+10)
	header = append(header, q.requiredTail...)
	header = append(header, `,"error":`...)
	header = append(header, reasonJSON...)
	header = append(header, '}')
	var hb strings.Builder
	hb.Grow(len(q.requiredB64) + base64.StdEncoding.EncodedLen(len(header)))
	hb.WriteString(q.requiredB64)
	enc := base64.NewEncoder(base64.StdEncoding, &hb)
	_, _ = enc.Write(header)
	_ = enc.Close()

	body := make([]byte, 0, len(q.bodyRest)+len(reasonJSON)+len(message)+48)
	body = append(body, `{"x402Version":`...)
	body = strconv.AppendInt(body, Version, 10)
	body = append(body, `,"error":`...)
	body = append(body, reasonJSON...)
	if message != "" {
		body = append(body, `,"message":`...)
		body = append(body, jsonString(message)...)
	}
	body = append(body, q.bodyRest...)

	return &Quote{
		PaymentRequired: hb.String(),
		WWWAuthenticate: q.challenge + ", error=" + quotedString(reason),
		Body:            body,
	}
}

// jsonString returns s as a JSON string.
func jsonString(s string) []byte {
	b, err := json.Marshal(s)
	if err != nil { // a string always encodes
		panic(err)
	}
	return b
}

// Quote returns the precomputed quote of op, or a *NotSellableError (which
// is ErrNotSellable).
func (c *Catalog) Quote(op string) (*Quote, error) {
	q, ok := c.state.Load().quotes[op]
	if !ok {
		return nil, fmt.Errorf("quote %s: %w", op, errNoSuchOperation)
	}
	if q.notSellable != nil {
		return nil, q.notSellable
	}
	return &q.quote, nil
}

var errNoSuchOperation = errors.New("no such operation")

// QuoteWithError returns op's quote with "error" set to reason (the
// PAYMENT-REQUIRED header, the body, and error= in the challenge) and a
// "message" for people in the body: the answer to a refused payment. It
// encodes only reason and message; the rest is precomputed.
func (c *Catalog) QuoteWithError(op, reason, message string) (*Quote, error) {
	q, ok := c.state.Load().quotes[op]
	if !ok {
		return nil, fmt.Errorf("quote %s: %w", op, errNoSuchOperation)
	}
	if q.notSellable != nil {
		return nil, q.notSellable
	}
	return q.withError(reason, message), nil
}

// QuoteWithOption returns op's quote naming reason and message, as
// QuoteWithError does, whose option of option's scheme and network is
// option: the corrective 402 of the batch-settlement scheme, whose option
// carries the channel's state (extra.channelState, extra.voucherState).
// It is built whole, for this answer only.
func (c *Catalog) QuoteWithOption(op, reason, message string, option *Requirements) (*Quote, error) {
	c.mu.Lock()
	cfg := c.cfg
	c.mu.Unlock()
	q, ok := c.state.Load().quotes[op]
	if !ok {
		return nil, fmt.Errorf("quote %s: %w", op, errNoSuchOperation)
	}
	if q.notSellable != nil {
		return nil, q.notSellable
	}
	e := *q.entry
	e.Required.Accepts = slices.Clone(e.Required.Accepts)
	found := false
	for i := range e.Required.Accepts {
		if r := &e.Required.Accepts[i]; r.Scheme == option.Scheme && r.Network == option.Network {
			*r, found = *option, true
		}
	}
	if !found {
		return nil, fmt.Errorf("quote %s: no %s option on %s", op, option.Scheme, option.Network)
	}
	built, err := buildQuote(&e, &cfg, e.Required.Accepts[0].Amount)
	if err != nil {
		return nil, fmt.Errorf("quote %s: %w", op, err)
	}
	return built.withError(reason, message), nil
}

// Requirement returns the requirement of op on network with scheme.
func (c *Catalog) Requirement(op, scheme, network string) (*Requirements, bool) {
	q, ok := c.state.Load().quotes[op]
	if !ok {
		return nil, false
	}
	for i := range q.entry.Required.Accepts {
		r := &q.entry.Required.Accepts[i]
		if r.Scheme == scheme && r.Network == network {
			return r, true
		}
	}
	return nil, false
}

// Entries returns the catalogue in order, for discovery documents. The
// caller must not modify it.
func (c *Catalog) Entries() []Entry { return c.state.Load().entries }

// bazaarExtension builds the bazaar extension of offer (x402.md §7): the
// request as a POST with a JSON body (the input example), the output
// example, and the JSON Schema of info, whose body is the operation's input
// schema.
func bazaarExtension(offer *Offer) (json.RawMessage, error) {
	bodySchema, err := EmbeddableSchema(offer.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("bazaar extension: input schema: %w", err)
	}
	input := offer.InputExample
	if input == nil {
		input = map[string]any{}
	}
	info := map[string]any{
		"input": map[string]any{"type": "http", "method": "POST", "bodyType": "json", "body": input},
	}
	properties := map[string]any{
		"input": map[string]any{
			"type": "object", "additionalProperties": false,
			"required": []string{"type", "method", "bodyType", "body"},
			"properties": map[string]any{
				"type":     map[string]any{"type": "string", "const": "http"},
				"method":   map[string]any{"type": "string", "enum": []string{"POST"}},
				"bodyType": map[string]any{"type": "string", "enum": []string{"json"}},
				"body":     bodySchema,
			},
		},
	}
	if offer.OutputExample != nil {
		info["output"] = map[string]any{"type": "json", "example": offer.OutputExample}
		properties["output"] = map[string]any{
			"type": "object", "required": []string{"type"},
			"properties": map[string]any{
				"type":    map[string]any{"type": "string"},
				"example": map[string]any{"type": "object"},
			},
		}
	}
	raw, err := json.Marshal(map[string]any{
		"info": info,
		"schema": map[string]any{
			"$schema":    "https://json-schema.org/draft/2020-12/schema",
			"type":       "object",
			"required":   []string{"input"},
			"properties": properties,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("bazaar extension: %w", err)
	}
	return raw, nil
}

// EmbeddableSchema returns the JSON Schema raw ready to be embedded in
// another schema or document: without the root-only keywords "$schema" and
// "$id". An empty raw is {"type":"object"}.
func EmbeddableSchema(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	var schema map[string]json.RawMessage
	if err := json.Unmarshal(raw, &schema); err != nil {
		return nil, fmt.Errorf("schema is not a JSON object: %w", err)
	}
	delete(schema, "$schema")
	delete(schema, "$id")
	out, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("encode schema: %w", err)
	}
	return out, nil
}

// atomicAmount converts a decimal price ("0.010000") to atomic units of an
// asset with decimals ("10000"). A price with more decimals than the asset,
// or negative, is an error.
func atomicAmount(price string, decimals int) (string, error) {
	if price == "" || strings.ContainsAny(price, "eE/+") {
		return "", fmt.Errorf("price %q is not a decimal amount", price)
	}
	r, ok := new(big.Rat).SetString(price)
	if !ok || r.Sign() < 0 {
		return "", fmt.Errorf("price %q is not a decimal amount", price)
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(decimals)), nil)))
	if !r.IsInt() {
		return "", fmt.Errorf("price %q has more than %d decimals", price, decimals)
	}
	return r.Num().String(), nil
}
