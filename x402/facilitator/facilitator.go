// Package facilitator is a client of a remote x402 facilitator: it delegates
// verification and settlement to the facilitator's /verify and /settle
// endpoints (x402 v2 bodies {x402Version, paymentPayload,
// paymentRequirements}) and reads what it supports from /supported.
//
// Client implements x402.SchemeVerifier and x402.Settler, so the service
// runs in "facilitator" settlement mode with the same api and workers as in
// the modes that settle themselves.
package facilitator

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
)

// IdentifyFunc names the payer and the nonce of a payment payload with no
// I/O (evm.Identify for EVM networks).
type IdentifyFunc func(p *x402.PaymentPayload) (payer, nonce string, err error)

// Config configures a Client.
type Config struct {
	// URL is the facilitator's base URL, e.g.
	// https://x402.org/facilitator. Required.
	URL string
	// HTTPClient sends the requests. Defaults to a client with a 30 s
	// timeout.
	HTTPClient *http.Client
	// Header is added to every request (an Authorization header, for a
	// facilitator that wants one). Optional.
	Header http.Header
	// Identify names the payer and nonce of verified payments, which the
	// service keys replay protection on. Defaults to evm.Identify for
	// eip155 networks; other networks need one.
	Identify IdentifyFunc
	// Chains are read-only clients of the EVM networks settled through the
	// facilitator (RPC_URL_<CHAIN>). Optional, but without one a settlement
	// whose answer was lost cannot be told from a payment used elsewhere:
	// the facilitator refuses the retry as nonce_already_used, and Settle
	// looks on the chain for the transaction that used the authorization.
	Chains map[string]evm.LogReader
	// LogLookback bounds that look for a payment that does not say when it
	// was verified (evm.FindSettlement). Defaults to evm.DefaultLogLookback.
	LogLookback time.Duration
	// PendingPoll is how often a settlement the facilitator answered
	// settlement_pending is looked at again: its transaction's receipt
	// when a chain client of the network has receipts, else the
	// facilitator asked again. Defaults to 1 s.
	PendingPoll time.Duration
	// PendingWait bounds how long one Settle follows a pending settlement
	// (within its ctx); past it Settle returns an *x402.PendingError naming
	// the transaction, and the settlement is tried again later. Defaults
	// to 2 minutes.
	PendingWait time.Duration
}

// ReasonSettlementPending is the errorReason of x402's non-terminal settle
// answer: the facilitator broadcast the transaction it names and has not
// seen its receipt yet. It is no refusal: Settle follows the transaction.
const ReasonSettlementPending = "settlement_pending"

// ReasonSettlementReverted is the reason of a settlement whose pending
// transaction, followed on chain, reverted: nothing was paid.
const ReasonSettlementReverted = "settlement_reverted"

// receiptReader is a chain client that reads receipts (ethclient,
// evm.Endpoints), with which a pending settlement is followed on chain.
type receiptReader interface {
	TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error)
}

// Client is a client of one facilitator. It is safe for concurrent use.
type Client struct {
	url         string
	http        *http.Client
	header      http.Header
	identify    IdentifyFunc
	chains      map[string]evm.LogReader
	lookback    time.Duration
	pendingPoll time.Duration
	pendingWait time.Duration

	// mu guards pending: the transaction of each payment whose settlement
	// the facilitator answered pending and that has not ended since, by
	// pendingKey.
	mu      sync.Mutex
	pending map[string]string
}

var (
	_ x402.SchemeVerifier  = (*Client)(nil)
	_ x402.Settler         = (*Client)(nil)
	_ x402.PendingFollower = (*Client)(nil)
)

// New returns a Client.
func New(cfg *Config) (*Client, error) {
	if cfg.URL == "" {
		return nil, errors.New("facilitator: no URL")
	}
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("facilitator: URL %q is not http(s)", cfg.URL)
	}
	c := &Client{
		url:      strings.TrimRight(cfg.URL, "/"),
		http:     cfg.HTTPClient,
		header:   cfg.Header.Clone(),
		identify: cfg.Identify,
		chains:   cfg.Chains,
		lookback: cfg.LogLookback,

		pendingPoll: cmp.Or(cfg.PendingPoll, time.Second),
		pendingWait: cmp.Or(cfg.PendingWait, 2*time.Minute),
		pending:     map[string]string{},
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: 30 * time.Second}
	}
	if c.identify == nil {
		c.identify = func(p *x402.PaymentPayload) (string, string, error) {
			if strings.HasPrefix(p.Accepted.Network, "eip155:") {
				return evm.Identify(p)
			}
			return "", "", fmt.Errorf("facilitator: cannot identify payments on %s", p.Accepted.Network)
		}
	}
	return c, nil
}

// request is the body of /verify and /settle.
type request struct {
	X402Version         int                  `json:"x402Version"`
	PaymentPayload      *x402.PaymentPayload `json:"paymentPayload"`
	PaymentRequirements *x402.Requirements   `json:"paymentRequirements"`
}

// settleResponse is /settle's answer, with the fields that must be there.
type settleResponse struct {
	Success      *bool   `json:"success"`
	ErrorReason  string  `json:"errorReason"`
	ErrorMessage string  `json:"errorMessage"`
	Payer        string  `json:"payer"`
	Transaction  *string `json:"transaction"`
	Network      string  `json:"network"`
}

// verifyResponse is /verify's answer.
type verifyResponse struct {
	IsValid        *bool  `json:"isValid"`
	InvalidReason  string `json:"invalidReason"`
	InvalidMessage string `json:"invalidMessage"`
	Payer          string `json:"payer"`
}

// Verify asks the facilitator to verify payload against req and returns
// the payment. A payment the facilitator refuses is a *x402.Refusal with
// its reason; another error means the facilitator could not be asked.
func (c *Client) Verify(ctx context.Context, req *x402.Requirements, payload *x402.PaymentPayload) (*x402.Payment, error) {
	payer, nonce, err := c.identify(payload)
	if err != nil {
		return nil, err
	}
	verifiedAt := time.Now()
	if strings.HasPrefix(req.Network, "eip155:") {
		// The facilitator does not know how long the work it pays
		// for takes: the validity the seller asks is checked here.
		if err := evm.CheckValidity(ctx, payload, verifiedAt); err != nil {
			return nil, err
		}
	}
	status, body, err := c.post(ctx, "/verify", &request{X402Version: x402.Version, PaymentPayload: payload, PaymentRequirements: req})
	if err != nil {
		return nil, err
	}
	var resp verifyResponse
	decodeErr := json.Unmarshal(body, &resp)
	switch {
	case decodeErr == nil && resp.IsValid != nil && *resp.IsValid && status == http.StatusOK:
	case decodeErr == nil && resp.InvalidReason != "" && status < 500:
		return nil, &x402.Refusal{Reason: resp.InvalidReason, Message: cmpOr(resp.InvalidMessage, "the facilitator refused the payment")}
	default:
		return nil, fmt.Errorf("facilitator verify: status %d: %s", status, excerpt(body))
	}
	raw, err := payload.Ledger()
	if err != nil {
		return nil, fmt.Errorf("facilitator verify: encode payload: %w", err)
	}
	return &x402.Payment{Network: req.Network, Payer: payer, Nonce: nonce, Amount: req.Amount, Asset: req.Asset, Payload: raw, VerifiedAt: verifiedAt.UTC()}, nil
}

// Settle asks the facilitator to settle p. The requirement sent is the one
// the payload accepted, which the service matched to its own before
// verifying (network, amount and asset are the payment's). A settlement the
// facilitator refuses is a SettleResponse with Success false; an error
// means it could not be asked or answered garbage (try again). A
// settlement answered settlement_pending is followed until it ends
// (follow), and is an error (an *x402.PendingError, tried again) while it
// has not.
func (c *Client) Settle(ctx context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	var payload x402.PaymentPayload
	if err := json.Unmarshal(p.Payload, &payload); err != nil {
		return &x402.SettleResponse{ErrorReason: "invalid_payload", Network: p.Network, Payer: p.Payer}, nil
	}
	req := payload.Accepted
	req.Network, req.Amount, req.Asset = p.Network, p.Amount, p.Asset
	version := payload.X402Version
	if version == 0 {
		version = x402.Version
	}
	body := &request{X402Version: version, PaymentPayload: &payload, PaymentRequirements: &req}
	out, err := c.settleOnce(ctx, p, body)
	if err == nil && out.ErrorReason == ReasonSettlementPending {
		out, err = c.follow(ctx, p, body, out.Transaction)
	}
	var pending *x402.PendingError
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case errors.As(err, &pending):
		c.pending[pendingKey(p)] = pending.Transaction
	case err == nil:
		delete(c.pending, pendingKey(p))
	}
	return out, err
}

// SettlePending settles p as Settle does, an earlier attempt (of this
// process or another, whose worker recorded it) having left its
// settlement pending in transaction tx: should the facilitator now refuse
// it as nonce_already_used, tx used the authorization.
func (c *Client) SettlePending(ctx context.Context, p *x402.Payment, tx string) (*x402.SettleResponse, error) {
	if tx != "" {
		c.mu.Lock()
		c.pending[pendingKey(p)] = tx
		c.mu.Unlock()
	}
	return c.Settle(ctx, p)
}

// pendingKey names the payment p among the pending settlements.
func pendingKey(p *x402.Payment) string { return p.Network + " " + p.Payer + " " + p.Nonce }

// pendingTransaction returns the transaction in which the facilitator left
// the settlement of p pending in an earlier Settle, "" if none.
func (c *Client) pendingTransaction(p *x402.Payment) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending[pendingKey(p)]
}

// settleOnce asks the facilitator once to settle p (body) and returns its
// answer: a pending one as it came (ReasonSettlementPending, with its
// transaction); a refusal as nonce_already_used looked up on chain
// (settledBefore).
func (c *Client) settleOnce(ctx context.Context, p *x402.Payment, body *request) (*x402.SettleResponse, error) {
	status, raw, err := c.post(ctx, "/settle", body)
	if err != nil {
		return nil, err
	}
	var resp settleResponse
	if err := json.Unmarshal(raw, &resp); err != nil || status >= 500 {
		return nil, fmt.Errorf("facilitator settle: status %d: %s", status, excerpt(raw))
	}
	switch {
	case resp.ErrorReason == ReasonSettlementPending:
		if resp.Transaction == nil || *resp.Transaction == "" {
			return nil, fmt.Errorf("facilitator settle: pending without a transaction: %s", excerpt(raw))
		}
		return &x402.SettleResponse{ErrorReason: ReasonSettlementPending, Transaction: *resp.Transaction,
			Payer: cmpOr(resp.Payer, p.Payer), Network: cmpOr(resp.Network, p.Network)}, nil
	case status == http.StatusOK && resp.Success != nil && resp.Transaction != nil:
	case resp.ErrorReason != "" && status < 500:
		// A refusal, whatever the status (the official facilitators
		// answer 200 or 400).
		f := false
		resp.Success = &f
	default:
		return nil, fmt.Errorf("facilitator settle: status %d: %s", status, excerpt(raw))
	}
	out := &x402.SettleResponse{
		Success:     *resp.Success,
		ErrorReason: resp.ErrorReason,
		Payer:       cmpOr(resp.Payer, p.Payer),
		Network:     cmpOr(resp.Network, p.Network),
	}
	if resp.Transaction != nil {
		out.Transaction = *resp.Transaction
	}
	if out.Success && out.Transaction == "" {
		return nil, fmt.Errorf("facilitator settle: success without a transaction: %s", excerpt(raw))
	}
	if !out.Success && out.ErrorReason == "" {
		out.ErrorReason = "unexpected_settle_error"
	}
	if !out.Success && out.ErrorReason == evm.ReasonNonceAlreadyUsed {
		return c.settledBefore(ctx, p, out)
	}
	return out, nil
}

// follow follows the settlement of p that the facilitator left pending in
// transaction tx, as the relayer follows a transaction it sent, until it
// ends, for at most PendingWait. With a chain client of the network that
// reads receipts, the receipt decides: successful, p is settled by tx;
// reverted, nothing was paid (ReasonSettlementReverted). Without one, the
// facilitator is asked again with the same payment until it answers
// otherwise: settled; or refused as nonce_already_used, which after its own
// broadcast of tx means tx used the authorization (settledBefore looks on
// chain when it can); or another refusal. Past PendingWait it returns an
// *x402.PendingError: the settlement is tried again later.
func (c *Client) follow(ctx context.Context, p *x402.Payment, body *request, tx string) (*x402.SettleResponse, error) {
	settled := &x402.SettleResponse{Success: true, Transaction: tx, Payer: p.Payer, Network: p.Network}
	chain, _ := c.chains[p.Network].(receiptReader)
	deadline := time.NewTimer(c.pendingWait)
	defer deadline.Stop()
	poll := time.NewTicker(c.pendingPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", &x402.PendingError{Transaction: tx}, context.Cause(ctx))
		case <-deadline.C:
			return nil, &x402.PendingError{Transaction: tx}
		case <-poll.C:
		}
		if chain != nil {
			if !common.IsHexHash(tx) {
				return nil, fmt.Errorf("facilitator settle: pending transaction %q is no transaction hash", tx)
			}
			receipt, err := chain.TransactionReceipt(ctx, common.HexToHash(tx))
			switch {
			case errors.Is(err, ethereum.NotFound):
				continue
			case err != nil:
				return nil, fmt.Errorf("facilitator settle: receipt of pending %s: %w", tx, err)
			case receipt.Status == types.ReceiptStatusSuccessful:
				return settled, nil
			}
			return &x402.SettleResponse{ErrorReason: ReasonSettlementReverted, Transaction: tx, Payer: p.Payer, Network: p.Network}, nil
		}
		out, err := c.settleOnce(ctx, p, body)
		switch {
		case err != nil:
			return nil, err
		case out.ErrorReason == ReasonSettlementPending:
			tx = out.Transaction
			settled.Transaction = tx
			continue
		case !out.Success && out.ErrorReason == evm.ReasonNonceAlreadyUsed:
			return settled, nil
		}
		return out, nil
	}
}

// settledBefore answers a settlement the facilitator refused because the
// payment's authorization is already used: typically by this service's own
// earlier attempt, whose answer was lost (a timeout, a cut connection) after
// the facilitator settled. The chain tells: the transaction that used the
// authorization moved the payment to the payee, so the payment is settled
// and the call's result is delivered. Without a chain client, or with no
// such transaction (the payer canceled the authorization), the refusal
// stands.
func (c *Client) settledBefore(ctx context.Context, p *x402.Payment, refusal *x402.SettleResponse) (*x402.SettleResponse, error) {
	chain := c.chains[p.Network]
	if chain == nil {
		if tx := c.pendingTransaction(p); tx != "" {
			// The facilitator answered this payment pending in tx
			// before: its own transaction used the authorization.
			return &x402.SettleResponse{Success: true, Transaction: tx, Network: p.Network, Payer: p.Payer}, nil
		}
		return refusal, nil
	}
	hash, err := evm.FindSettlement(ctx, chain, p, c.lookback)
	if err != nil {
		// The chain could not be read: try again, rather than withhold a
		// result that may have been paid for.
		return nil, fmt.Errorf("facilitator settle: refused as already used, and %w", err)
	}
	if hash == (common.Hash{}) {
		return refusal, nil
	}
	return &x402.SettleResponse{Success: true, Transaction: hash.Hex(), Network: p.Network, Payer: p.Payer}, nil
}

// Supported is the facilitator's /supported answer.
type Supported struct {
	// Kinds are the (version, scheme, network) the facilitator settles.
	Kinds []SupportedKind `json:"kinds"`
	// Extensions are the extensions it handles, such as "bazaar".
	Extensions []string `json:"extensions"`
	// Signers are its signing addresses per network family.
	Signers map[string][]string `json:"signers"`
}

// SupportedKind is one kind of payment a facilitator supports.
type SupportedKind struct {
	X402Version int             `json:"x402Version"`
	Scheme      string          `json:"scheme"`
	Network     string          `json:"network"`
	Extra       json.RawMessage `json:"extra,omitempty"`
}

// Supports reports whether the facilitator settles the scheme on network
// with x402 version 2.
func (s *Supported) Supports(scheme, network string) bool {
	for _, k := range s.Kinds {
		if k.X402Version == x402.Version && k.Scheme == scheme && k.Network == network {
			return true
		}
	}
	return false
}

// Supported returns what the facilitator supports.
func (c *Client) Supported(ctx context.Context) (*Supported, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"/supported", nil)
	if err != nil {
		return nil, fmt.Errorf("facilitator supported: %w", err)
	}
	status, body, err := c.do(req)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("facilitator supported: status %d: %s", status, excerpt(body))
	}
	var s Supported
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("facilitator supported: %w: %s", err, excerpt(body))
	}
	return &s, nil
}

// post sends a JSON body to path.
func (c *Client) post(ctx context.Context, path string, body *request) (int, []byte, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, nil, fmt.Errorf("facilitator %s: encode: %w", path, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+path, bytes.NewReader(raw))
	if err != nil {
		return 0, nil, fmt.Errorf("facilitator %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req)
}

// do sends req with the configured headers and reads the answer (at most
// 1 MiB).
func (c *Client) do(req *http.Request) (int, []byte, error) {
	for k, vs := range c.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("facilitator %s: %w", req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("facilitator %s: read answer: %w", req.URL.Path, err)
	}
	return resp.StatusCode, body, nil
}

// excerpt shortens a body for an error message.
func excerpt(body []byte) string {
	s := strings.Join(strings.Fields(string(body)), " ")
	if s == "" {
		return "<empty>"
	}
	if len(s) > 200 {
		return s[:197] + "..."
	}
	return s
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
