package x402

import (
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"strings"

	"github.com/x402d/x402d/jobs"
)

// SolanaOffer is the Solana option of the quotes, offered only when the
// service can settle it.
type SolanaOffer struct {
	// PayTo is the receiving wallet (the owner, not its token account).
	PayTo string
	// FeePayer is the address of the key that pays fees (extra.feePayer).
	FeePayer string
}

// CatalogConfig configures the quotes.
type CatalogConfig struct {
	// PublicURL is the service's base URL, used in resource URLs.
	PublicURL string
	// PayToEVM is the receiving address on EVM networks. Missing or
	// malformed: no operation is sellable.
	PayToEVM string
	// EVMNetworks are the EVM networks payments are accepted on (those the
	// service can verify and settle), primary first.
	EVMNetworks []string
	// Solana, when set, adds the Solana mainnet option.
	Solana *SolanaOffer
	// ModelReady reports whether the model operations can run (a Gemini
	// key is configured).
	ModelReady bool
	// MaxTimeoutSeconds is the payment window offered. Defaults to 300.
	MaxTimeoutSeconds int
}

// Entry is one operation of the catalogue as discovery documents show it.
type Entry struct {
	Spec jobs.Spec
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

// Catalog holds every operation's quote, built once at start-up, so quoting
// does no I/O and no allocation.
type Catalog struct {
	entries []Entry
	quotes  map[string]*catalogQuote
}

type catalogQuote struct {
	entry *Entry
	quote Quote
	// body is the 402 body as a document, for quotes with another error.
	body map[string]any
}

var evmAddress = regexp.MustCompile(`^0x[0-9a-fA-F]{40}$`)

// ValidEVMAddress reports whether s is a 0x-prefixed 20-byte hex address.
func ValidEVMAddress(s string) bool { return evmAddress.MatchString(s) }

// NewCatalog builds the quotes of specs.
func NewCatalog(specs []jobs.Spec, cfg CatalogConfig) (*Catalog, error) {
	if cfg.MaxTimeoutSeconds <= 0 {
		cfg.MaxTimeoutSeconds = 300
	}
	base := strings.TrimRight(cfg.PublicURL, "/")
	c := &Catalog{entries: make([]Entry, len(specs)), quotes: make(map[string]*catalogQuote, len(specs))}
	for i, spec := range specs {
		amount, err := atomicAmount(spec.Price, 6)
		if err != nil {
			return nil, fmt.Errorf("quote %s: %w", spec.Name, err)
		}
		e := &c.entries[i]
		*e = Entry{Spec: spec, Resource: base + "/api/x402/" + spec.Name, Sellable: true}
		switch {
		case !ValidEVMAddress(cfg.PayToEVM):
			e.Sellable, e.BlockedReason = false, "receiving address (PAY_TO_EVM) missing or malformed"
		case len(cfg.EVMNetworks) == 0 && cfg.Solana == nil:
			e.Sellable, e.BlockedReason = false, "no network to settle payments on is configured"
		case spec.UsesModel && !cfg.ModelReady:
			e.Sellable, e.BlockedReason = false, "model not configured (GEMINI_API_KEY unset)"
		}
		e.Required = PaymentRequired{
			X402Version: Version,
			Error:       "payment required",
			Resource:    ResourceInfo{URL: e.Resource, Description: spec.Description, MimeType: "application/json"},
			Accepts:     []Requirements{},
		}
		if e.Sellable {
			e.Required.Accepts = accepts(amount, &cfg)
		}
		bazaar, err := bazaarExtension(&spec)
		if err != nil {
			return nil, fmt.Errorf("quote %s: %w", spec.Name, err)
		}
		e.Required.Extensions = map[string]json.RawMessage{"bazaar": bazaar}
		q, err := buildQuote(e, &cfg, amount)
		if err != nil {
			return nil, fmt.Errorf("quote %s: %w", spec.Name, err)
		}
		c.quotes[spec.Name] = q
	}
	return c, nil
}

func accepts(amount string, cfg *CatalogConfig) []Requirements {
	var out []Requirements
	for _, id := range cfg.EVMNetworks {
		n, ok := NetworkByID(id)
		if !ok {
			continue
		}
		extra, _ := json.Marshal(EVMExtra{Name: n.Name, Version: n.Version})
		out = append(out, Requirements{Scheme: "exact", Network: n.ID, Amount: amount, Asset: n.Asset,
			PayTo: cfg.PayToEVM, MaxTimeoutSeconds: cfg.MaxTimeoutSeconds, Extra: extra})
	}
	if cfg.Solana != nil {
		n, _ := NetworkByID(SolanaMainnet)
		extra, _ := json.Marshal(SVMExtra{FeePayer: cfg.Solana.FeePayer})
		out = append(out, Requirements{Scheme: "exact", Network: n.ID, Amount: amount, Asset: n.Asset,
			PayTo: cfg.Solana.PayTo, MaxTimeoutSeconds: cfg.MaxTimeoutSeconds, Extra: extra})
	}
	return out
}

// buildQuote precomputes the header values and the 402 body of e.
func buildQuote(e *Entry, cfg *CatalogConfig, amount string) (*catalogQuote, error) {
	primary := Networks()[0]
	networks := make([]string, 0, 7)
	for _, n := range Networks() {
		networks = append(networks, n.ID)
	}
	var blocked any
	if !e.Sellable {
		blocked = e.BlockedReason
	}
	body := map[string]any{
		"x402Version":    Version,
		"error":          e.Required.Error,
		"resource":       e.Required.Resource,
		"accepts":        e.Required.Accepts,
		"extensions":     e.Required.Extensions,
		"price":          map[string]string{"mode": "fixed", "currency": "USD", "amount": e.Spec.Price},
		"protocols":      []string{"x402"},
		"scheme":         "exact",
		"method":         "POST",
		"network":        primary.ID,
		"networks":       networks,
		"asset":          primary.Asset,
		"pay_to":         cfg.PayToEVM,
		"mime_type":      "application/json",
		"sellable":       e.Sellable,
		"blocked_reason": blocked,
	}
	q := &catalogQuote{entry: e, body: body}
	header, err := EncodeHeader(&e.Required)
	if err != nil {
		return nil, err
	}
	q.quote.PaymentRequired = header
	if q.quote.Body, err = json.Marshal(body); err != nil {
		return nil, fmt.Errorf("encode 402 body: %w", err)
	}
	q.quote.WWWAuthenticate = fmt.Sprintf(`X402 realm=%q, version="2", scheme="exact", network=%q, amount=%q, asset=%q, pay_to=%q, header="PAYMENT-REQUIRED"`,
		e.Resource, primary.ID, amount, primary.Asset, cfg.PayToEVM)
	return q, nil
}

// Quote returns the precomputed quote of op, or ErrNotSellable.
func (c *Catalog) Quote(op string) (*Quote, error) {
	q, ok := c.quotes[op]
	if !ok {
		return nil, fmt.Errorf("quote %s: no such operation", op)
	}
	if !q.entry.Sellable {
		return nil, ErrNotSellable
	}
	return &q.quote, nil
}

// QuoteWithError returns op's quote with "error" set to reason (and a
// "message" for people): the answer to a refused payment.
func (c *Catalog) QuoteWithError(op, reason, message string) (*Quote, error) {
	q, ok := c.quotes[op]
	if !ok {
		return nil, fmt.Errorf("quote %s: no such operation", op)
	}
	required := q.entry.Required
	required.Error = reason
	header, err := EncodeHeader(&required)
	if err != nil {
		return nil, err
	}
	body := make(map[string]any, len(q.body)+1)
	for k, v := range q.body {
		body[k] = v
	}
	body["error"] = reason
	if message != "" {
		body["message"] = message
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode 402 body: %w", err)
	}
	return &Quote{PaymentRequired: header, WWWAuthenticate: q.quote.WWWAuthenticate, Body: raw}, nil
}

// Requirement returns the requirement of op on network with scheme.
func (c *Catalog) Requirement(op, scheme, network string) (*Requirements, bool) {
	q, ok := c.quotes[op]
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

// Entries returns the catalogue in order, for discovery documents.
func (c *Catalog) Entries() []Entry { return c.entries }

// bazaarExtension builds the bazaar extension of spec (x402.md §7).
func bazaarExtension(spec *jobs.Spec) (json.RawMessage, error) {
	bodySchema := json.RawMessage(`{"type":"object"}`)
	if len(spec.InputSchema) > 0 {
		bodySchema = spec.InputSchema
	}
	ext := map[string]any{
		"info": map[string]any{
			"input":  map[string]any{"type": "http", "method": "POST", "bodyType": "json", "body": spec.InputExample},
			"output": map[string]any{"type": "json", "example": spec.OutputExample},
		},
		"schema": map[string]any{
			"$schema":  "https://json-schema.org/draft/2020-12/schema",
			"type":     "object",
			"required": []string{"input"},
			"properties": map[string]any{
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
				"output": map[string]any{"type": "object"},
			},
		},
	}
	raw, err := json.Marshal(ext)
	if err != nil {
		return nil, fmt.Errorf("bazaar extension: %w", err)
	}
	return raw, nil
}

// atomicAmount converts a decimal price ("0.010000") to atomic units of an
// asset with decimals ("10000").
func atomicAmount(price string, decimals int) (string, error) {
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
