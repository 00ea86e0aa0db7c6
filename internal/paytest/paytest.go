// Package paytest is the test double of the payment step, for tests that run
// the service without a chain: it quotes like the service, verifies payment
// headers of the form "<kind>:<payer>:<nonce>" and settles them in a table
// that, like a token contract, moves a payment once.
package paytest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/x402"
)

// LedgerTable is the table where Payments records the payments it settled
// (payment_key, settled_at), when it has a Pool: ledger checks read it.
const LedgerTable = "test_chain"

// Payments is an x402.Verifier and x402.Settler. A header "test:<payer>:<nonce>"
// is a valid payment; "bad:<payer>:<nonce>" names the same payer and nonce
// but is refused (invalid_exact_evm_signature) as without the chain;
// "empty:<payer>:<nonce>" is refused (invalid_exact_evm_insufficient_balance)
// as after a read of the chain, as from an empty wallet; anything else
// cannot be read. "test:" and "empty:" payments ask the context's chain
// guard (x402.GuardChain) before their chain read, as the EVM verifier
// does.
// Settlement refuses payers starting with "0xbroke" (insufficient balance)
// and reports TxHash(nonce) as the transaction of the others.
type Payments struct {
	// Pool, when set, holds the ledger (CreateLedger): Settle records each
	// payment there once, and Verify refuses a payment already recorded,
	// like a token refusing a used EIP-3009 nonce.
	Pool *pgxpool.Pool
	// FailSettle makes Settle refuse every payment.
	FailSettle bool
	// Unsold names operations that are not sold: Quote answers
	// x402.ErrNotSellable.
	Unsold map[string]bool
	// Cost, when set, is the gas each settlement reports spending.
	Cost *x402.SettleCost
}

var (
	_ x402.Verifier = (*Payments)(nil)
	_ x402.Settler  = (*Payments)(nil)
)

// CreateLedger creates LedgerTable in pool's database if it does not exist.
func CreateLedger(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+LedgerTable+` (
		payment_key text PRIMARY KEY, settled_at timestamptz NOT NULL DEFAULT now())`)
	if err != nil {
		return fmt.Errorf("paytest: create ledger: %w", err)
	}
	return nil
}

// TxHash is the transaction hash reported for the payment of nonce.
func TxHash(nonce string) string {
	h := sha256.Sum256([]byte(nonce))
	return "0x" + hex.EncodeToString(h[:])
}

// Quote returns a quote of 0.01 USDC on Base for op.
func (p *Payments) Quote(op string) (*x402.Quote, error) {
	if p.Unsold[op] {
		return nil, x402.ErrNotSellable
	}
	doc := fmt.Sprintf(`{"x402Version":2,"error":"payment required","resource":{"url":"http://test/api/x402/%s"},"accepts":[{"scheme":"exact","network":"eip155:8453","amount":"10000","asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","payTo":"0x0000000000000000000000000000000000000009","maxTimeoutSeconds":300,"extra":{"name":"USD Coin","version":"2"}}]}`, op)
	return &x402.Quote{
		PaymentRequired: base64.StdEncoding.EncodeToString([]byte(doc)),
		WWWAuthenticate: `X402 realm="test"`,
		Body:            []byte(doc),
	}, nil
}

// QuoteWithError returns the quote of op carrying reason and message.
func (p *Payments) QuoteWithError(op, reason, message string) (*x402.Quote, error) {
	q, err := p.Quote(op)
	if err != nil {
		return nil, err
	}
	doc := strings.Replace(string(q.Body), `"error":"payment required"`, fmt.Sprintf(`"error":%q,"message":%q`, reason, message), 1)
	return &x402.Quote{PaymentRequired: base64.StdEncoding.EncodeToString([]byte(doc)), WWWAuthenticate: q.WWWAuthenticate, Body: []byte(doc)}, nil
}

// Verify accepts "test:..." headers whose payment the ledger has not
// recorded yet.
func (p *Payments) Verify(ctx context.Context, op, header string) (*x402.Payment, error) {
	pay, err := p.Identify(op, header)
	if err != nil {
		return nil, err
	}
	kind, _, _ := strings.Cut(header, ":")
	if kind != "test" && kind != "empty" {
		return nil, &x402.Refusal{Reason: "invalid_exact_evm_signature", Message: "test double refuses " + header}
	}
	if err := x402.GuardChain(ctx); err != nil {
		return nil, err
	}
	if kind == "empty" {
		return nil, &x402.Refusal{Reason: "invalid_exact_evm_insufficient_balance", Message: "the test payer holds nothing"}
	}
	if p.Pool == nil {
		return pay, nil
	}
	var used bool
	if err := p.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+LedgerTable+" WHERE payment_key = $1)", pay.Key()).Scan(&used); err != nil {
		return nil, fmt.Errorf("paytest: read ledger: %w", err)
	}
	if used {
		return nil, &x402.Refusal{Reason: "invalid_exact_evm_nonce_already_used", Message: "the test chain moved this payment already"}
	}
	return pay, nil
}

// Identify reads "<kind>:<payer>:<nonce>", or
// "<kind>:<payer>:<nonce>:<payment id>"; the payload is the whole header,
// so "bad:p:n" names the same payer and nonce as "test:p:n" but is not the
// same payment.
func (p *Payments) Identify(_, header string) (*x402.Payment, error) {
	parts := strings.Split(header, ":")
	if len(parts) != 3 && len(parts) != 4 {
		return nil, &x402.Refusal{Reason: "invalid_payload", Message: "test double cannot read " + header}
	}
	payload, err := json.Marshal(map[string]string{"header": header})
	if err != nil {
		return nil, fmt.Errorf("paytest: %w", err)
	}
	return &x402.Payment{Network: "eip155:8453", Payer: parts[1], Nonce: parts[2], Amount: "10000",
		Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", Payload: payload}, nil
}

// PaymentID returns the fourth part of a header
// "<kind>:<payer>:<nonce>:<payment id>" ("" without one), refused as the
// service refuses an id that breaks the payment-identifier rules.
func (p *Payments) PaymentID(header string) (string, error) {
	parts := strings.Split(header, ":")
	if len(parts) != 4 {
		return "", nil
	}
	if err := x402.ValidPaymentID(parts[3]); err != nil {
		return "", err
	}
	return parts[3], nil
}

// Authenticate accepts a "test:" or "empty:" header (its payer signed it,
// whatever it holds) and refuses a "bad:" one, as a signature that is not
// the payer's.
func (p *Payments) Authenticate(_ context.Context, op, header string) (*x402.Payment, error) {
	pay, err := p.Identify(op, header)
	if err != nil {
		return nil, err
	}
	if kind, _, _ := strings.Cut(header, ":"); kind != "test" && kind != "empty" {
		return nil, &x402.Refusal{Reason: "invalid_exact_evm_signature", Message: "test double refuses " + header}
	}
	return pay, nil
}

// Settle records the payment in the ledger (once) and reports TxHash of its
// nonce, or refuses it.
func (p *Payments) Settle(ctx context.Context, pay *x402.Payment) (*x402.SettleResponse, error) {
	if p.FailSettle || strings.HasPrefix(pay.Payer, "0xbroke") {
		return &x402.SettleResponse{Success: false, ErrorReason: "invalid_exact_evm_insufficient_balance", Network: pay.Network, Payer: pay.Payer}, nil
	}
	if p.Pool != nil {
		if _, err := p.Pool.Exec(ctx, "INSERT INTO "+LedgerTable+" (payment_key) VALUES ($1) ON CONFLICT DO NOTHING", pay.Key()); err != nil {
			return nil, fmt.Errorf("paytest: record settlement: %w", err)
		}
	}
	return &x402.SettleResponse{Success: true, Transaction: TxHash(pay.Nonce), Network: pay.Network, Payer: pay.Payer, Cost: p.Cost}, nil
}

// ExactEVM returns an exact EVM payment on Base of 0.01 USDC from payer (an
// address, 0x and 40 hex digits) with an authorization nonce derived from
// nonce, as the EVM verifier returns it: a payload whose ledger form packs
// (x402.Payment.MarshalLedgerBinary), for tests of the ledger's binary
// forms, which the payments of Identify (a payload of one header) never
// take.
func ExactEVM(payer, nonce string) x402.Payment {
	n := sha256.Sum256([]byte(nonce))
	sig := sha256.Sum256([]byte("sig:" + nonce))
	const usdc, payTo = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "0x0000000000000000000000000000000000000009"
	authNonce := "0x" + hex.EncodeToString(n[:])
	payload := `{"x402Version":2,"accepted":{"scheme":"exact","network":"eip155:8453","amount":"10000","asset":"` + usdc +
		`","payTo":"` + payTo + `","maxTimeoutSeconds":300,"extra":{"name":"USD Coin","version":"2"}},` +
		`"payload":{"signature":"0x` + hex.EncodeToString(sig[:]) + hex.EncodeToString(sig[:]) + `1b","authorization":{"from":"` + payer +
		`","to":"` + payTo + `","value":"10000","validAfter":"0","validBefore":"4102444800","nonce":"` + authNonce + `"}}}`
	return x402.Payment{Network: "eip155:8453", Payer: payer, Nonce: authNonce, Amount: "10000", Asset: usdc,
		Payload: json.RawMessage(payload), ValidBefore: time.Unix(4102444800, 0).UTC()}
}

// Stored returns p as the ledger gives it back (x402.Payment's
// MarshalJSON, then UnmarshalJSON): the same fields, and, for a payload
// kept in its compact form, that form beside it (x402.Payment.ExactEVM),
// to compare with a payment read from the ledger. It panics when p cannot
// be kept.
func Stored(p x402.Payment) x402.Payment {
	raw, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("paytest: keep payment %s: %v", p.Key(), err))
	}
	var back x402.Payment
	if err := json.Unmarshal(raw, &back); err != nil {
		panic(fmt.Sprintf("paytest: read payment %s back: %v", p.Key(), err))
	}
	return back
}
