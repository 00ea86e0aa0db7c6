// Package payclient is a paying x402 client for EVM networks, used by
// `x402d pay`: it sends a request, and when the answer is 402 it picks the
// exact-scheme requirement of its network from the PAYMENT-REQUIRED header,
// signs an EIP-3009 transferWithAuthorization with its key and sends the
// request again with the PAYMENT-SIGNATURE header.
package payclient

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
)

// Config configures a Client.
type Config struct {
	// Key is the paying account's private key. Required.
	Key *ecdsa.PrivateKey
	// Wallet, when set, is the contract wallet (EIP-1271) that pays: its
	// authorizations are signed by Key, and the wallet's isValidSignature
	// decides whether they are its. Defaults to Key's own address.
	Wallet common.Address
	// Network is the CAIP-2 network to pay on. Defaults to eip155:8453.
	Network string
	// HTTPClient sends the requests. Defaults to a client with a 2 minute
	// timeout.
	HTTPClient *http.Client
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
}

// Client pays for x402 resources. It is safe for concurrent use.
type Client struct {
	key     *ecdsa.PrivateKey
	address common.Address
	network string
	chainID *big.Int
	http    *http.Client
	now     func() time.Time
	// last is the quote Pay paid last, parsed.
	last atomic.Pointer[quote]
}

// New returns a Client.
func New(cfg *Config) (*Client, error) {
	if cfg.Key == nil {
		return nil, errors.New("payclient: no key")
	}
	network := cfg.Network
	if network == "" {
		network = "eip155:8453"
	}
	id, err := evm.ChainID(network)
	if err != nil {
		return nil, fmt.Errorf("payclient: %w", err)
	}
	c := &Client{
		key:     cfg.Key,
		address: crypto.PubkeyToAddress(cfg.Key.PublicKey),
		network: network,
		chainID: id,
		http:    cfg.HTTPClient,
		now:     cfg.Now,
	}
	if cfg.Wallet != (common.Address{}) {
		c.address = cfg.Wallet
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: 2 * time.Minute}
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// Address returns the paying address.
func (c *Client) Address() common.Address { return c.address }

// Request is a request to a paid resource.
type Request struct {
	// Method defaults to POST.
	Method string
	// URL is the resource's URL. Required.
	URL string
	// Body is sent as is.
	Body []byte
	// Header is added to the request; Content-Type defaults to
	// application/json when there is a body.
	Header http.Header
	// PaymentID, when set, is sent as the payment's payment identifier
	// (x402's payment-identifier extension) when the quote declares the
	// extension: Do with the same PaymentID again, after an answer was
	// lost, signs a new payment that the seller answers with the first
	// call's result, charging once.
	PaymentID string
}

// Result is the outcome of a paid (or free) request.
type Result struct {
	// Status, Header and Body are the final answer's.
	Status int
	Header http.Header
	Body   []byte
	// Required is the PAYMENT-REQUIRED of the unpaid answer; nil when the
	// resource answered without asking for payment.
	Required *x402.PaymentRequired
	// Accepted is the requirement paid.
	Accepted *x402.Requirements
	// PaymentSignature is the PAYMENT-SIGNATURE header value sent; sending
	// it again with Resend replays the payment.
	PaymentSignature string
	// Settlement is the decoded PAYMENT-RESPONSE of the final answer, if
	// it has one.
	Settlement *x402.SettleResponse
	// Refusal is the "error" of a 402 answered to the payment (the reason
	// the payment was refused), if any.
	Refusal string
}

// Do sends the request unpaid and, if the answer is 402, pays and sends it
// again. An answer other than 402 to the unpaid request is returned as it
// is.
func (c *Client) Do(ctx context.Context, r *Request) (*Result, error) {
	status, header, body, err := c.send(ctx, r, "")
	if err != nil {
		return nil, err
	}
	if status != http.StatusPaymentRequired {
		return &Result{Status: status, Header: header, Body: body}, nil
	}
	required, err := decodeRequired(header, body)
	if err != nil {
		return nil, fmt.Errorf("pay %s: %w", r.URL, err)
	}
	accepted, err := c.choose(required)
	if err != nil {
		return nil, fmt.Errorf("pay %s: %w", r.URL, err)
	}
	q, err := c.prepare(required, accepted)
	if err != nil {
		return nil, fmt.Errorf("pay %s: %w", r.URL, err)
	}
	signature, err := c.signWithID(q, r.PaymentID)
	if err != nil {
		return nil, fmt.Errorf("pay %s: %w", r.URL, err)
	}
	res, err := c.Resend(ctx, r, signature)
	if err != nil {
		return nil, err
	}
	res.Required, res.Accepted = required, accepted
	return res, nil
}

// Resend sends the request with a PAYMENT-SIGNATURE header value, such as
// Result.PaymentSignature of an earlier call.
func (c *Client) Resend(ctx context.Context, r *Request, paymentSignature string) (*Result, error) {
	status, header, body, err := c.send(ctx, r, paymentSignature)
	if err != nil {
		return nil, err
	}
	res := &Result{Status: status, Header: header, Body: body, PaymentSignature: paymentSignature}
	if v := header.Get(x402.HeaderPaymentResponse); v != "" {
		var s x402.SettleResponse
		if err := decodeHeader(v, &s); err != nil {
			return nil, fmt.Errorf("pay %s: %s header: %w", r.URL, x402.HeaderPaymentResponse, err)
		}
		res.Settlement = &s
	}
	if status == http.StatusPaymentRequired {
		if required, err := decodeRequired(header, body); err == nil {
			res.Refusal = required.Error
		}
	}
	return res, nil
}

// send sends r, with paymentSignature when it is not empty.
func (c *Client) send(ctx context.Context, r *Request, paymentSignature string) (int, http.Header, []byte, error) {
	method := r.Method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequestWithContext(ctx, method, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("pay: %w", err)
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if len(r.Body) > 0 && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if paymentSignature != "" {
		req.Header.Set(x402.HeaderPaymentSignature, paymentSignature)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("pay %s: %w", r.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("pay %s: read answer: %w", r.URL, err)
	}
	return resp.StatusCode, resp.Header, body, nil
}

// choose returns the exact requirement on the client's network.
func (c *Client) choose(required *x402.PaymentRequired) (*x402.Requirements, error) {
	var offered []string
	for i := range required.Accepts {
		a := &required.Accepts[i]
		offered = append(offered, a.Scheme+" on "+a.Network)
		if a.Scheme == "exact" && a.Network == c.network {
			return a, nil
		}
	}
	return nil, fmt.Errorf("no exact payment on %s is offered (offered: %s)", c.network, strings.Join(offered, ", "))
}

// quote is a requirement to pay, checked and parsed once: what every
// payment of it shares.
type quote struct {
	// header is the PAYMENT-REQUIRED value it was read from, if any.
	header   string
	required *x402.PaymentRequired
	accepted *x402.Requirements
	to       common.Address
	value    *big.Int
	timeout  int64
	domain   *evm.Domain
}

// prepare checks and parses the requirement accepted of required.
func (c *Client) prepare(required *x402.PaymentRequired, accepted *x402.Requirements) (*quote, error) {
	var extra x402.EVMExtra
	if err := json.Unmarshal(accepted.Extra, &extra); err != nil || extra.Name == "" || extra.Version == "" {
		return nil, errors.New("the requirement has no EIP-712 name and version in extra")
	}
	if !common.IsHexAddress(accepted.Asset) || !common.IsHexAddress(accepted.PayTo) {
		return nil, fmt.Errorf("the requirement's asset %q or payTo %q is not an address", accepted.Asset, accepted.PayTo)
	}
	value, ok := new(big.Int).SetString(accepted.Amount, 10)
	if !ok || value.Sign() < 0 {
		return nil, fmt.Errorf("the requirement's amount %q is not a number", accepted.Amount)
	}
	timeout := int64(accepted.MaxTimeoutSeconds)
	if timeout <= 0 {
		timeout = 300
	}
	return &quote{
		required: required,
		accepted: accepted,
		to:       common.HexToAddress(accepted.PayTo),
		value:    value,
		timeout:  timeout,
		domain:   &evm.Domain{Name: extra.Name, Version: extra.Version, ChainID: c.chainID, VerifyingContract: common.HexToAddress(accepted.Asset)},
	}, nil
}

// sign builds the PAYMENT-SIGNATURE header value paying q: an authorization
// valid from 10 minutes ago until the requirement's maxTimeoutSeconds from
// now, with a random nonce.
func (c *Client) sign(q *quote) (string, error) { return c.signWithID(q, "") }

// signWithID is sign with the payment identifier id in the payment's
// extensions, when id is set and the quote declares the extension.
func (c *Client) signWithID(q *quote, id string) (string, error) {
	extensions := q.required.Extensions
	if id != "" {
		var err error
		if extensions, err = x402.WithPaymentID(extensions, id); err != nil {
			return "", err
		}
	}
	var nonce common.Hash
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", fmt.Errorf("nonce: %w", err)
	}
	now := c.now().Unix()
	auth := &evm.Authorization{
		From:        c.address,
		To:          q.to,
		Value:       q.value,
		ValidAfter:  big.NewInt(now - 600),
		ValidBefore: big.NewInt(now + q.timeout),
		Nonce:       nonce,
	}
	sig, err := auth.Sign(c.key, q.domain)
	if err != nil {
		return "", err
	}
	inner, err := json.Marshal(x402.ExactEVMPayload{Signature: "0x" + common.Bytes2Hex(sig), Authorization: auth.Wire()})
	if err != nil {
		return "", fmt.Errorf("encode payload: %w", err)
	}
	resource := q.required.Resource
	payload := x402.PaymentPayload{
		X402Version: x402.Version,
		Resource:    &resource,
		Accepted:    *q.accepted,
		Payload:     inner,
		Extensions:  extensions,
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return "", fmt.Errorf("encode payment: %w", err)
	}
	return base64.StdEncoding.EncodeToString(raw), nil
}

// decodeRequired reads the PaymentRequired of a 402: the PAYMENT-REQUIRED
// header, or a JSON body that carries the same fields.
func decodeRequired(header http.Header, body []byte) (*x402.PaymentRequired, error) {
	var pr x402.PaymentRequired
	if v := header.Get(x402.HeaderPaymentRequired); v != "" {
		if err := decodeHeader(v, &pr); err != nil {
			return nil, fmt.Errorf("%s header: %w", x402.HeaderPaymentRequired, err)
		}
		return &pr, nil
	}
	if err := json.Unmarshal(body, &pr); err != nil || len(pr.Accepts) == 0 {
		return nil, fmt.Errorf("402 without a %s header", x402.HeaderPaymentRequired)
	}
	return &pr, nil
}

// decodeHeader decodes a header value: base64 (standard alphabet) of JSON.
func decodeHeader(v string, out any) error {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("not base64: %w", err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return nil
}

// Pay returns a PAYMENT-SIGNATURE header value paying the quote in
// paymentRequired (a PAYMENT-REQUIRED header value) on the client's network,
// with a fresh nonce. The load generator pays many calls of one quote so:
// the quote last paid is kept parsed, and paying it again only signs.
func (c *Client) Pay(_ context.Context, paymentRequired string) (string, error) {
	if q := c.last.Load(); q != nil && q.header == paymentRequired {
		return c.sign(q)
	}
	var required x402.PaymentRequired
	if err := decodeHeader(paymentRequired, &required); err != nil {
		return "", fmt.Errorf("pay: %s header: %w", x402.HeaderPaymentRequired, err)
	}
	accepted, err := c.choose(&required)
	if err != nil {
		return "", fmt.Errorf("pay: %w", err)
	}
	q, err := c.prepare(&required, accepted)
	if err != nil {
		return "", fmt.Errorf("pay: %w", err)
	}
	q.header = paymentRequired
	c.last.Store(q)
	return c.sign(q)
}
