package svm

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/x402d/x402d/x402"
)

// SettlerConfig configures a Settler.
type SettlerConfig struct {
	// Key is the fee payer (SOLANA_FEE_PAYER_KEY): it co-signs every
	// payment transaction as account 0. Required.
	Key solana.PrivateKey
	// URL is the Solana JSON-RPC endpoint (RPC_URL_SOLANA). Required.
	URL string
	// Client defaults to an http.Client with a 15-second timeout.
	Client *http.Client
	// Poll is the pause between two status checks. Defaults to a slot
	// (x402.SolanaSlotTime, 400 ms).
	Poll time.Duration
	// Polls bounds the status checks of one Settle. Defaults to as many
	// as a blockhash lives (x402.SolanaBlockhashBlocks), and as many more
	// as finalization takes (FinalizationSlots) at CommitmentFinalized.
	Polls int
	// Commitment is how far a settlement's transaction must have come
	// before the payment counts as settled (SOLANA_COMMITMENT). Defaults
	// to CommitmentConfirmed.
	Commitment Commitment
	// SkipPreflight sends transactions without the node's preflight
	// simulation: set it when every payment was simulated at verification
	// (a Verifier with a Simulator), as the official facilitator does. A
	// transaction that fails then lands failed, its fee paid by the fee
	// payer, and the settlement fails as it would have.
	SkipPreflight bool
}

// Commitment is the commitment a settlement waits for: how many of the
// cluster's validators have voted on the block holding the transaction.
type Commitment string

// The commitments a settlement may wait for.
const (
	// CommitmentConfirmed is a block voted on by a supermajority of the
	// cluster (optimistic confirmation): about a slot after the
	// transaction lands; no confirmed block has been rolled back on
	// mainnet.
	CommitmentConfirmed Commitment = "confirmed"
	// CommitmentFinalized is a block rooted by the cluster, about
	// FinalizationSlots after it was made: it cannot be rolled back.
	CommitmentFinalized Commitment = "finalized"
)

// FinalizationSlots is about how many slots a block takes from confirmed
// to finalized on mainnet.
const FinalizationSlots = 32

// UnmarshalText reads a commitment a settlement may wait for.
func (c *Commitment) UnmarshalText(b []byte) error {
	switch v := Commitment(b); v {
	case CommitmentConfirmed, CommitmentFinalized:
		*c = v
		return nil
	}
	return fmt.Errorf("%q is not confirmed or finalized", b)
}

// Settler settles exact Solana payments: it signs the payer's transaction
// as fee payer, sends it and waits until it reaches the configured
// commitment (confirmed unless SettlerConfig says finalized), sending it again
// while the node has not seen it and its blockhash lives; once the
// blockhash is dead and the node has not seen the transaction, it never
// will, and the settlement fails. It implements x402.Settler.
//
// Settle is idempotent: the fee payer's signature is deterministic
// (ed25519), so it names the transaction before it is sent; a retried
// Settle first asks for that signature's status and does not send twice.
type Settler struct {
	cfg      SettlerConfig
	rpc      *rpcClient
	statuses *statuses
}

var _ x402.Settler = (*Settler)(nil)

// NewSettler returns a Settler for config, of which it keeps a copy.
func NewSettler(config *SettlerConfig) (*Settler, error) {
	cfg := *config
	if len(cfg.Key) != 64 || cfg.URL == "" {
		return nil, errors.New("svm settler: a 64-byte fee payer key and an RPC URL are required")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = x402.SolanaSlotTime
	}
	if cfg.Commitment == "" {
		cfg.Commitment = CommitmentConfirmed
	}
	if err := cfg.Commitment.UnmarshalText([]byte(cfg.Commitment)); err != nil {
		return nil, fmt.Errorf("svm settler: commitment: %w", err)
	}
	if cfg.Polls <= 0 {
		cfg.Polls = x402.SolanaBlockhashBlocks
		if cfg.Commitment == CommitmentFinalized {
			cfg.Polls += FinalizationSlots
		}
	}
	rpc := newRPCClient(cfg.URL, cfg.Client)
	return &Settler{cfg: cfg, rpc: rpc, statuses: &statuses{rpc: rpc}}, nil
}

// Reasons of failed settlements.
const (
	ReasonTransactionFailed = "transaction_failed"
)

// Settle signs, sends and confirms the payment's transaction. A transaction
// that fails on chain is a SettleResponse with Success false; an
// unreachable node or an unconfirmed transaction is an error (try again).
// A smart wallet's transaction that succeeded is checked to have made its
// transfer (checkTransfer).
func (s *Settler) Settle(ctx context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	res, err := s.settle(ctx, p)
	if err != nil || !res.Success {
		return res, err
	}
	return s.checkTransfer(ctx, p, res)
}

func (s *Settler) settle(ctx context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	ptx, sig, reason, err := s.sign(p)
	if err != nil {
		return nil, fmt.Errorf("settle: %w", err)
	}
	if reason != "" {
		return &x402.SettleResponse{Success: false, ErrorReason: reason, Network: p.Network, Payer: p.Payer}, nil
	}
	var raw bytes.Buffer
	raw.WriteByte(byte(len(ptx.tx.Signatures))) // < 128: one compact-u16 byte
	for _, sg := range ptx.tx.Signatures {
		raw.Write(sg[:])
	}
	raw.Write(ptx.message)
	id := sig.String()
	ok := &x402.SettleResponse{Success: true, Transaction: id, Network: p.Network, Payer: p.Payer}
	failed := &x402.SettleResponse{Success: false, ErrorReason: ReasonTransactionFailed, Network: p.Network, Payer: p.Payer}

	wire := base64.StdEncoding.EncodeToString(raw.Bytes())
	send := func() (*x402.SettleResponse, error) {
		if err := s.send(ctx, wire); err != nil {
			if _, ok := errors.AsType[*SimulationError](err); ok {
				return failed, nil
			}
			return nil, err
		}
		return nil, nil
	}

	// Sent by an earlier attempt?
	st, err := s.status(ctx, id)
	if err != nil {
		return nil, err
	}
	switch st {
	case statusConfirmed:
		return ok, nil
	case statusFailed:
		return failed, nil
	case statusUnknown:
		if res, err := send(); res != nil || err != nil {
			return res, err
		}
	}
	for i := 0; i < s.cfg.Polls; i++ {
		select {
		case <-time.After(s.cfg.Poll):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		st, err := s.status(ctx, id)
		if err != nil {
			return nil, err
		}
		switch st {
		case statusConfirmed:
			return ok, nil
		case statusFailed:
			return failed, nil
		case statusUnknown:
			// The node has not seen it: the send was lost, or dropped
			// before a block took it. Sent again while its blockhash
			// lives; once the blockhash is dead it can never land.
			var valid struct{ Value bool }
			if err := s.rpc.call(ctx, "isBlockhashValid", []any{ptx.tx.Message.RecentBlockhash.String(), map[string]string{"commitment": "processed"}}, &valid); err != nil {
				return nil, err
			}
			if !valid.Value {
				if st, err = s.status(ctx, id); err != nil {
					return nil, err
				}
				switch st {
				case statusUnknown:
					return failed, nil
				case statusFailed:
					return failed, nil
				}
				continue
			}
			if res, err := send(); res != nil || err != nil {
				return res, err
			}
		}
	}
	return nil, fmt.Errorf("settle: transaction %s not confirmed after %d checks", id, s.cfg.Polls)
}

// Transaction returns the id of the transaction that settles p: the fee
// payer's signature of its message (ed25519 signatures are deterministic),
// the one Settle sends and looks up. It is "" for a payment Settle refuses
// without sending anything. It implements x402.TransactionNamer.
func (s *Settler) Transaction(p *x402.Payment) (string, error) {
	_, sig, reason, err := s.sign(p)
	if err != nil || reason != "" {
		return "", err
	}
	return sig.String(), nil
}

var _ x402.TransactionNamer = (*Settler)(nil)

// ExtraWait returns how much longer than at CommitmentConfirmed a
// settlement waits: at CommitmentFinalized, FinalizationSlots slots. It
// implements x402.SlowSettler.
func (s *Settler) ExtraWait(*x402.Payment) time.Duration {
	if s.cfg.Commitment == CommitmentFinalized {
		return FinalizationSlots * x402.SolanaSlotTime
	}
	return 0
}

var _ x402.SlowSettler = (*Settler)(nil)

// sign decodes the payment's transaction and signs it as fee payer,
// filling in the fee payer's signature. A transaction that cannot be
// settled is a refusal reason (nothing is sent); an error means the payment
// is not one.
func (s *Settler) sign(p *x402.Payment) (ptx *paymentTx, sig solana.Signature, reason string, err error) {
	var payload x402.PaymentPayload
	if err := json.Unmarshal(p.Payload, &payload); err != nil {
		return nil, sig, "", fmt.Errorf("payment payload: %w", err)
	}
	ptx, err = decodeTransaction(payload.Payload)
	if err != nil {
		return nil, sig, ReasonCouldNotBeDecoded, nil
	}
	if ptx.feePayer() != s.cfg.Key.PublicKey() {
		return nil, sig, ReasonFeePayerNotManaged, nil
	}
	sig, err = s.cfg.Key.Sign(ptx.message)
	if err != nil {
		return nil, sig, "", fmt.Errorf("sign: %w", err)
	}
	ptx.tx.Signatures[0] = sig
	return ptx, sig, "", nil
}

// FeePayer returns the fee payer's address.
func (s *Settler) FeePayer() solana.PublicKey { return s.cfg.Key.PublicKey() }

// Balance returns the fee payer's balance in lamports (confirmed): what
// pays the fees of settlements.
func (s *Settler) Balance(ctx context.Context) (uint64, error) {
	var out struct {
		Value uint64 `json:"value"`
	}
	if err := s.rpc.call(ctx, "getBalance", []any{s.cfg.Key.PublicKey().String(), map[string]string{"commitment": "confirmed"}}, &out); err != nil {
		return 0, fmt.Errorf("fee payer balance: %w", err)
	}
	return out.Value, nil
}

type txStatus int

const (
	statusUnknown txStatus = iota
	statusPending
	statusConfirmed
	statusFailed
)

// status asks getSignatureStatuses (searching the transaction history),
// in one call with the other settlements' signatures: a transaction that
// succeeded is statusConfirmed once it reaches the settler's commitment,
// statusPending until then.
func (s *Settler) status(ctx context.Context, id string) (txStatus, error) {
	v, err := s.statuses.get(ctx, id)
	if err != nil {
		return statusUnknown, err
	}
	if v == nil {
		return statusUnknown, nil
	}
	if len(v.Err) > 0 && string(v.Err) != "null" {
		return statusFailed, nil
	}
	if v.ConfirmationStatus == string(CommitmentFinalized) ||
		v.ConfirmationStatus == string(CommitmentConfirmed) && s.cfg.Commitment == CommitmentConfirmed {
		return statusConfirmed, nil
	}
	return statusPending, nil
}

// send sends the signed transaction. A transaction the node refuses is a
// *SimulationError; "already processed" is success.
func (s *Settler) send(ctx context.Context, txBase64 string) error {
	var id string
	err := s.rpc.call(ctx, "sendTransaction", []any{txBase64, map[string]any{
		"encoding": "base64", "skipPreflight": s.cfg.SkipPreflight, "preflightCommitment": "confirmed",
	}}, &id)
	var rerr *rpcCallError
	if errors.As(err, &rerr) {
		if strings.Contains(strings.ToLower(rerr.Message), "already been processed") {
			return nil
		}
		if txErrorCodes[rerr.Code] {
			return &SimulationError{Err: rerr.Message}
		}
	}
	return err
}
