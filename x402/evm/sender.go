package evm

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// sender signs the relayer's transactions on one chain and sends them:
// transmit is the one place a transaction goes to the node and the node's
// answer is classified (classifySend). On top of it: send (a new
// transaction at a newly allocated nonce), resend (the same again), and
// three that sign anew at a nonce already held: reprice (under the base
// fee), replace (unmined too long) and fill (a nonce whose transaction
// will not come). Every transaction signed is recorded (nonces.record)
// before it goes.
//
// A sender holds no state of its own and no lock: what it learns goes to
// nonces (what each answer says of a nonce), fees and receipts (a
// replacement is awaited with what it replaces).
type sender struct {
	network  string
	address  common.Address
	key      *ecdsa.PrivateKey
	signer   types.Signer
	backend  Backend
	nonces   *nonces
	fees     *fees
	receipts *receipts
	logger   *slog.Logger
}

// maxNonceRetries bounds how many times one send moves to another nonce
// after finding its nonce taken; past it the settlement fails and its job
// is retried later.
const maxNonceRetries = 64

// maxFeeRetries bounds how often one send is signed again at fresher fees
// after a node refused it as priced under the base fee.
const maxFeeRetries = 6

// send signs and sends a transaction to with input and gas, at a nonce
// allocated by the NonceStore, and records it before it goes, so that this
// process or another can send it again. A send that gets no answer (a
// timeout, a cut connection) returns the transaction all the same: its nonce
// is not abandoned, the keeper sends it again until it is mined. A nonce
// found used by another transaction is given up for a new one.
func (s *sender) send(ctx context.Context, to common.Address, input []byte, gas uint64) (*types.Transaction, error) {
	for attempt := 0; ; attempt++ {
		tip, feeCap, err := s.fees.current(ctx)
		if err != nil {
			return nil, err
		}
		nonce, err := s.nonces.allocate(ctx)
		if err != nil {
			return nil, err
		}
		tx, err := s.sign(&types.DynamicFeeTx{Nonce: nonce, GasTipCap: tip, GasFeeCap: feeCap, Gas: gas, To: &to, Data: input})
		if err != nil {
			return nil, err
		}
		if err := s.nonces.record(ctx, tx); err != nil {
			// Not sent: the nonce has no transaction, and the keeper of
			// any process fills it once it is found behind later ones.
			return nil, err
		}
		outcome, err := s.transmit(ctx, tx)
		for try := 0; outcome == sendUnderpriced && try < maxFeeRetries; try++ {
			// Priced under the base fee of the block to come (it rose
			// meanwhile): the same nonce again, at the chain's fees of now
			// and at least twice the fee cap refused.
			next, rerr := s.reprice(ctx, tx, 2)
			if rerr != nil {
				outcome, err = sendRefused, rerr
				break
			}
			tx = next
			outcome, err = s.transmit(ctx, tx)
		}
		switch outcome {
		case sendTaken:
			return tx, nil
		case sendNonceUsed, sendOutbid:
			// Used by another transaction: mined already (the chain's
			// count is past what this process read), or held in the pool
			// by one this process did not send. Either way this nonce is
			// not ours to wait for: read the count again and take another.
			s.nonces.untrack(tx.Nonce())
			if _, rerr := s.nonces.readMined(ctx); rerr != nil {
				return nil, fmt.Errorf("send transaction: %w (then %w)", err, rerr)
			}
			if attempt >= maxNonceRetries {
				return nil, fmt.Errorf("send transaction: %w", err)
			}
			s.logger.DebugContext(ctx, "relayer nonce used by another transaction", "network", s.network, "nonce", nonce, "error", err)
		case sendUnanswered:
			// The node may have it. Keep the nonce: the keeper sends the
			// same transaction again, and the receipt is awaited as usual.
			s.logger.WarnContext(ctx, "relayer send unanswered; the same transaction is sent again", "network", s.network, "nonce", nonce, "transaction", tx.Hash().Hex(), "error", err)
			return tx, nil
		default:
			// Refused (fees the cap does not allow, funds for gas): the
			// nonce is kept, its transaction sent again and repriced by
			// the keeper, so that it is no gap; this settlement is tried
			// again and finds its transfer when that transaction goes.
			s.nonces.markFailed(tx.Nonce())
			s.logger.WarnContext(ctx, "relayer send refused; the nonce is kept and its transaction sent again", "network", s.network, "nonce", nonce, "error", err)
			return nil, fmt.Errorf("send transaction: %w", err)
		}
	}
}

// sign signs a dynamic-fee transaction of the chain with the relayer's key.
func (s *sender) sign(tx *types.DynamicFeeTx) (*types.Transaction, error) {
	tx.ChainID = s.signer.ChainID()
	signed, err := types.SignNewTx(s.key, s.signer, tx)
	if err != nil {
		return nil, fmt.Errorf("sign transaction: %w", err)
	}
	return signed, nil
}

// signAgain signs the call of tx again at its nonce with the fees tip and
// feeCap, records it, and has the settlements awaiting tx await it too.
func (s *sender) signAgain(ctx context.Context, tx *types.Transaction, tip, feeCap *big.Int) (*types.Transaction, error) {
	next, err := s.sign(&types.DynamicFeeTx{Nonce: tx.Nonce(), GasTipCap: tip, GasFeeCap: feeCap, Gas: tx.Gas(), To: tx.To(), Value: tx.Value(), Data: tx.Data()})
	if err != nil {
		return nil, err
	}
	if err := s.nonces.record(ctx, next); err != nil {
		return nil, err
	}
	s.receipts.follow(tx.Hash(), next.Hash())
	return next, nil
}

// sendOutcome is what a node's answer to a transaction sent to it means.
type sendOutcome int

const (
	// sendTaken: the node took it, or had it already.
	sendTaken sendOutcome = iota
	// sendNonceUsed: its nonce is used by a mined transaction.
	sendNonceUsed
	// sendOutbid: the node holds another transaction of its nonce that it
	// does not outbid.
	sendOutbid
	// sendUnderpriced: its fee cap is under the base fee of the block to
	// come.
	sendUnderpriced
	// sendUnanswered: no answer, or an error that may pass: the node may
	// have it.
	sendUnanswered
	// sendRefused: refused otherwise (funds for gas, fees the cap does not
	// allow).
	sendRefused
)

// classifySend reads a node's answer to a sent transaction (nil: taken).
func classifySend(err error) sendOutcome {
	switch {
	case err == nil || ethrpc.IsAlreadyKnown(err):
		return sendTaken
	case isNonceTooLow(err):
		return sendNonceUsed
	case isUnderpriced(err):
		return sendOutbid
	case isFeeTooLow(err):
		return sendUnderpriced
	case isTransient(err):
		return sendUnanswered
	}
	return sendRefused
}

// transmit sends tx to the chain's node and classifies its answer: the one
// place the relayer sends a transaction. What the answer says of tx's nonce
// goes to nonces (nonces.sent). It returns the node's error with the
// outcome.
func (s *sender) transmit(ctx context.Context, tx *types.Transaction) (sendOutcome, error) {
	err := s.backend.SendTransaction(ctx, tx)
	outcome := classifySend(err)
	s.nonces.sent(tx, outcome)
	return outcome, err
}

// resend sends tx again; a node that has it or mined it already is fine.
// It returns the node's refusal otherwise.
func (s *sender) resend(ctx context.Context, tx *types.Transaction) error {
	switch outcome, err := s.transmit(ctx, tx); outcome {
	case sendTaken, sendNonceUsed:
		return nil
	default:
		s.logger.WarnContext(ctx, "relayer resend failed", "network", s.network, "nonce", tx.Nonce(), "error", err)
		return err
	}
}

// reprice signs tx again at the chain's fees of now and at least factor
// times its fee cap and tip (never above MaxFee), records it and returns it.
func (s *sender) reprice(ctx context.Context, tx *types.Transaction, factor int64) (*types.Transaction, error) {
	tip, feeCap, err := s.fees.raised(ctx, tx, factor)
	if err != nil {
		return nil, err
	}
	return s.signAgain(ctx, tx, tip, feeCap)
}

// replace sends tx again with fees raised by at least the replacement bump
// nodes ask (a tenth; an eighth here), and at least those the chain asks
// now; the settlements awaiting tx await the replacement too.
func (s *sender) replace(ctx context.Context, tx *types.Transaction) error {
	s.fees.stale()
	tip, feeCap, err := s.fees.current(ctx)
	if err != nil {
		return err
	}
	tip = bigMax(tip, bump(tx.GasTipCap()))
	feeCap = bigMax(feeCap, bump(tx.GasFeeCap()))
	if maxFee := s.fees.maxFee; maxFee != nil && feeCap.Cmp(maxFee) > 0 {
		if bump(tx.GasFeeCap()).Cmp(maxFee) > 0 {
			// The cap allows no higher bid: the transaction waits for
			// the base fee to fall.
			_ = s.resend(ctx, tx)
			return nil
		}
		feeCap = new(big.Int).Set(maxFee)
		tip = bigMin(tip, feeCap)
	}
	next, err := s.signAgain(ctx, tx, tip, feeCap)
	if err != nil {
		return err
	}
	switch outcome, err := s.transmit(ctx, next); outcome {
	case sendTaken:
		s.logger.InfoContext(ctx, "relayer transaction replaced with higher fees", "network", s.network, "nonce", tx.Nonce(), "transaction", next.Hash().Hex(), "replaces", tx.Hash().Hex(), "fee_cap", feeCap.String())
		return nil
	case sendNonceUsed, sendUnanswered:
		// Mined meanwhile (the first, or this one): the waiters find it.
		// Unanswered: the keeper sends it again.
		return nil
	default:
		return fmt.Errorf("replace transaction %d: %w", tx.Nonce(), err)
	}
}

// fill sends a transfer of nothing from the relayer to itself at nonce, so
// that the nonce, whose own transaction will not come (its process died, or
// the node refused it for good), is no gap: over prev's fees when prev, a
// transaction of that nonce, may still sit in the pool.
func (s *sender) fill(ctx context.Context, nonce uint64, prev *types.Transaction) error {
	s.fees.stale()
	tip, feeCap, err := s.fees.current(ctx)
	if err != nil {
		return err
	}
	if prev != nil {
		tip = bigMax(tip, bump(prev.GasTipCap()))
		feeCap = bigMax(feeCap, bump(prev.GasFeeCap()))
	}
	self := s.address
	tx, err := s.sign(&types.DynamicFeeTx{Nonce: nonce, GasTipCap: tip, GasFeeCap: feeCap, Gas: 21_000, To: &self})
	if err != nil {
		return err
	}
	if err := s.nonces.record(ctx, tx); err != nil {
		return err
	}
	switch outcome, err := s.transmit(ctx, tx); outcome {
	case sendTaken:
		s.logger.InfoContext(ctx, "relayer nonce filled", "network", s.network, "nonce", nonce, "transaction", tx.Hash().Hex())
		return nil
	case sendNonceUsed, sendUnanswered:
		return nil
	default:
		s.nonces.untrack(nonce)
		return fmt.Errorf("fill nonce %d: %w", nonce, err)
	}
}

// isFeeTooLow reports whether a node refused a transaction because its fee
// cap is under the base fee of the block to come (anvil refuses those;
// geth keeps them until the fee falls).
func isFeeTooLow(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "less than block base fee") || strings.Contains(msg, "fee cap less than") ||
		strings.Contains(msg, "transaction underpriced") && !strings.Contains(msg, "replacement")
}

// isNonceTooLow reports whether a node refused a transaction because its
// nonce was used already.
func isNonceTooLow(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "nonce too low")
}

// isUnderpriced reports whether a node refused a transaction because it
// holds another of the same nonce that this one does not outbid.
func isUnderpriced(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "replacement transaction underpriced")
}

// isTransient reports whether a send's error leaves it unknown whether the
// node took the transaction: no answer in time, a cut connection, a server
// error.
func isTransient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"connection reset", "connection refused", "eof", "broken pipe", "timeout", "502 bad gateway", "503 service unavailable", "504 gateway"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
