package evm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// Settle moves the funds of a verified payment. A payment that cannot be
// settled is a SettleResponse with Success false and the reason; an error
// means the chain could not be reached or the receipt did not come in time,
// and Settle should be called again: a payment whose authorization is
// already used on chain (by an earlier attempt that crashed or timed out)
// is reported settled with the transaction that used it.
//
// It reads as its three steps: prepare (decode the payment, pick up a
// transaction an earlier attempt sent, refuse an authorization about to
// expire, run the transfer), send (alone or in a batch, and wait for the
// receipt), classify (settled, out of gas, or the reason it reverted). A
// transfer that runs the payer's code goes its own way (settlePayerCode).
// Errors are wrapped here, once, with the payment's key.
func (r *Relayer) Settle(ctx context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	ctx, leave, err := r.life.Enter(ctx)
	if err != nil {
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
	}
	defer leave()
	resp, err := r.settle(ethrpc.WithPurpose(ctx, ethrpc.PurposeSettle), p)
	if err != nil {
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
	}
	return resp, nil
}

// settle is Settle in its span, its errors not yet wrapped.
func (r *Relayer) settle(ctx context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	s, resp, err := r.prepare(ctx, p)
	if s == nil {
		return resp, err
	}
	sent, outcome, err := r.send(ctx, s)
	if err != nil {
		return nil, err
	}
	return r.classify(ctx, s, sent, outcome)
}

// settlement is one attempt at settling a payment: what prepare read of
// it, for send and classify.
type settlement struct {
	p     *x402.Payment
	chain *relayChain
	asset common.Address
	auth  *Authorization
	// sig is the payer's signature (an ERC-6492 wrapper's inner one).
	sig []byte
	log *slog.Logger
	// msg is the transfer's call from the relayer; gas the limit it is
	// sent with.
	msg ethereum.CallMsg
	gas uint64
}

// refused is the answer of a settlement refused for reason (tx: the
// transaction that showed it, if any).
func (s *settlement) refused(reason, tx string) *x402.SettleResponse {
	return &x402.SettleResponse{ErrorReason: reason, Transaction: tx, Network: s.p.Network, Payer: s.p.Payer}
}

// settled is the answer of a settlement whose transfer receipt shows,
// receipt's transaction carrying batch transfers.
func (s *settlement) settled(receipt *types.Receipt, batch int) *x402.SettleResponse {
	return &x402.SettleResponse{Success: true, Transaction: receipt.TxHash.Hex(), Network: s.p.Network, Payer: s.p.Payer,
		Cost: receiptCost(receipt, batch), Block: s.chain.finality.settledBlock(receipt)}
}

// prepare reads the payment and decides whether a transfer is to be sent:
// it returns the settlement to send, or (nil settlement) the answer or the
// error of a payment settled or refused before sending: found settled by
// an earlier attempt's transaction, about to expire, refused by a run of
// its transfer, or settled through settlePayerCode.
func (r *Relayer) prepare(ctx context.Context, p *x402.Payment) (*settlement, *x402.SettleResponse, error) {
	chain := r.chains[p.Network]
	if chain == nil {
		return nil, nil, fmt.Errorf("no chain client for %s", p.Network)
	}
	asset, ep, err := paymentTransfer(p)
	if err != nil {
		var refusal *x402.Refusal
		if errors.As(err, &refusal) {
			return nil, &x402.SettleResponse{ErrorReason: refusal.Reason, Network: p.Network, Payer: p.Payer}, nil
		}
		return nil, nil, err
	}
	s := &settlement{p: p, chain: chain, asset: asset, auth: ep.auth, sig: ep.signature,
		log: r.logger.With("payment", p.Key(), "asset", asset.Hex())}

	// A transaction this process sent for the payment earlier.
	r.sentMu.Lock()
	prev, sentBefore := r.sent[p.Key()]
	r.sentMu.Unlock()
	if sentBefore {
		outcome, err := r.awaitReceipt(ctx, s, prev.hash)
		if err != nil {
			return answered(nil, err)
		}
		if transferred(outcome, prev, asset, s.auth) {
			return answered(s.settled(outcome.receipt, prev.batch), nil)
		}
		if prev.payerCode {
			// Never sent again: its code made it revert once.
			return answered(r.payerCodeReverted(ctx, s, outcome.receipt))
		}
	}

	// An authorization about to expire is not sent: its transaction could
	// be mined after validBefore (and revert, at our cost) or never. It is
	// settled only if an earlier attempt's transfer went through.
	if s.auth.ValidBefore.Cmp(big.NewInt(r.cfg.Clock.Now().Add(r.cfg.ExpiryMargin).Unix())) < 0 {
		used, err := authorizationState(ctx, chain.backend, asset, s.auth)
		if err != nil {
			return answered(nil, fmt.Errorf("read authorization state: %w", err))
		}
		if used {
			return answered(r.reverted(ctx, s, errors.New("authorization is used"), ""))
		}
		s.log.WarnContext(ctx, "settlement not sent: the authorization expires too soon", "valid_before", s.auth.ValidBefore.String())
		return answered(s.refused(ReasonValidBefore, ""), nil)
	}

	// An authorization already used (by an earlier attempt, by anyone who
	// relayed the same signed authorization, or canceled) makes the
	// transfer fail, and failed finds the transaction that used it.
	// A wallet not deployed yet (ERC-6492) is deployed by the transaction
	// that makes its transfer, through Multicall3; its transfer is known by
	// its AuthorizationUsed event. A wallet deployed since it signed has
	// its inner signature checked as any contract wallet's.
	deploy, err := undeployed6492(ctx, chain.backend, s.auth.From, &s.sig)
	if err != nil {
		return answered(nil, err)
	}
	if deploy != nil {
		return answered(r.settlePayerCode(ctx, s, deploy))
	}
	// A payer with code (a contract wallet, an EIP-7702 delegation) has
	// the token call its isValidSignature, whose gas only it bounds: its
	// transfer goes alone, under PayerCodeGasCap (settlePayerCode). The
	// code is read once per payer per block (payerCodes).
	hasCode, err := chain.codes.hasCode(ctx, s.auth.From)
	if err != nil {
		return answered(nil, err)
	}
	if hasCode {
		return answered(r.settlePayerCode(ctx, s, nil))
	}
	if resp, err := r.runTransfer(ctx, s); resp != nil || err != nil {
		return answered(resp, err)
	}
	return s, nil, nil
}

// runTransfer sets s's transfer call and its gas limit, and runs it
// before it is sent: it returns the answer, or the error, of a transfer
// that cannot go (nil, nil: send it).
func (r *Relayer) runTransfer(ctx context.Context, s *settlement) (*x402.SettleResponse, error) {
	chain := s.chain
	input, err := transferInput(s.auth, s.sig)
	if err != nil {
		return nil, err
	}
	s.msg = ethereum.CallMsg{From: r.address, To: &s.asset, Data: input}
	// The gas of the first transfer of an asset is estimated (several
	// runs of the transfer on a node); later ones reuse that limit. The
	// limit learnt here is that of transfers from accounts with no code:
	// one payer's code never sets the limit of the others'. A transfer
	// sent on its own is run once with eth_call first; one sent in a
	// batch is not: it may fail without undoing the others.
	gas, known := chain.fees.gasLimit(s.asset)
	switch {
	case !known:
		var estimate uint64
		if estimate, err = chain.backend.EstimateGas(ctx, s.msg); err == nil {
			gas = chain.fees.learnGas(s.asset, estimate)
		}
	case chain.batch == nil:
		_, err = chain.backend.CallContract(ctx, s.msg, nil)
	}
	if err != nil {
		if !isRevert(err) {
			return nil, fmt.Errorf("run transfer: %w", err)
		}
		return r.reverted(ctx, s, err, "")
	}
	s.gas = gas
	return nil, nil
}

// answered is prepare's return of a payment answered (or failed) before
// sending.
func answered(resp *x402.SettleResponse, err error) (*settlement, *x402.SettleResponse, error) {
	return nil, resp, err
}

// send sends the settlement's transfer, in a batch when its chain batches
// or in a transaction of its own, and returns what was sent and the
// outcome of its receipt.
func (r *Relayer) send(ctx context.Context, s *settlement) (sentTx, *txOutcome, error) {
	chain, key := s.chain, s.p.Key()
	if chain.batch != nil {
		gas := s.gas
		if inBatch, ok := chain.fees.batchedGas(s.asset); ok && inBatch < gas {
			gas = inBatch
		}
		it := &batchItem{key: key, asset: s.asset, input: s.msg.Data, gas: gas}
		if err := r.settleBatched(ctx, chain, it); err != nil {
			r.forgetIfTimedOut(key, err)
			return sentTx{}, nil, err
		}
		r.forget(key)
		return sentTx{hash: it.outcome.receipt.TxHash, gas: it.tx.Gas(), batched: true, batch: it.batch}, it.outcome, nil
	}
	tx, err := chain.sender.send(ctx, s.asset, s.msg.Data, s.gas)
	if err != nil {
		return sentTx{}, nil, err
	}
	sent := sentTx{hash: tx.Hash(), gas: tx.Gas(), batch: 1}
	r.remember(key, sent)
	s.log.DebugContext(ctx, "settlement sent", "transaction", tx.Hash().Hex(), "nonce", tx.Nonce())
	outcome, err := r.awaitReceipt(ctx, s, tx.Hash())
	return sent, outcome, err
}

// classify answers a settlement from the outcome of the receipt of the
// transaction sent:
// settled when it shows the transfer; an error when it ran out of the gas
// learnt (the next attempt estimates again); else the reason the transfer
// reverted, found by running it again.
func (r *Relayer) classify(ctx context.Context, s *settlement, sent sentTx, outcome *txOutcome) (*x402.SettleResponse, error) {
	chain, receipt := s.chain, outcome.receipt
	if transferred(outcome, sent, s.asset, s.auth) {
		return s.settled(receipt, sent.batch), nil
	}
	if receipt.Status != types.ReceiptStatusSuccessful && !sent.batched {
		r.revertedGas(chain, receipt)
	}
	if receipt.Status != types.ReceiptStatusSuccessful && receipt.GasUsed >= sent.gas {
		// Out of gas: the limit learnt is too low for this transfer (the
		// token was upgraded, or its storage grew). The authorization is
		// unused unless somebody else used it meanwhile; the next attempt
		// estimates again and finds out.
		chain.fees.forgetGas(s.asset)
		return nil, fmt.Errorf("transaction %s ran out of gas (limit %d); the next attempt estimates again", sent.hash.Hex(), sent.gas)
	}
	// The transfer failed: run it again for the reason.
	_, err := chain.backend.CallContract(ctx, s.msg, nil)
	switch {
	case err == nil:
		// It runs now: inside a batch it ran out of the gas learnt (a
		// call gets at most 63/64 of what is left).
		chain.fees.forgetGas(s.asset)
		return nil, fmt.Errorf("the transfer failed in %s but runs now; the next attempt estimates its gas again", sent.hash.Hex())
	case !isRevert(err):
		return nil, fmt.Errorf("run failed transfer: %w", err)
	}
	return r.reverted(ctx, s, err, sent.hash.Hex())
}

// awaitReceipt waits for the receipt of hash, sent for s's payment, and
// returns its outcome (read once per transaction): the record of the
// transaction sent is dropped once it comes, or when it did not come in
// time (forgetIfTimedOut).
func (r *Relayer) awaitReceipt(ctx context.Context, s *settlement, hash common.Hash) (*txOutcome, error) {
	outcome, err := s.chain.receipts.outcome(ctx, hash)
	if err != nil {
		r.forgetIfTimedOut(s.p.Key(), err)
		return nil, err
	}
	r.forget(s.p.Key())
	return outcome, nil
}

// settlePayerCode settles s, whose transfer runs the payer's code: its
// wallet's isValidSignature (a contract wallet, an EIP-7702 account) and,
// when w is set, the deployment of its wallet by w's factory, in one
// transaction to Multicall3 that deploys it and makes the transfer, both or
// neither. The transaction goes alone, under PayerCodeGasCap: its gas is
// estimated, and it is run, from the relayer at the fees it will be sent
// with and the gas limit it will have, so that code that answers
// differently to a transaction than to a free call is caught before
// sending. A wallet or factory refused (PayerCodeRefuseFor) is not sent;
// one whose code fails here is refused, and a transaction that reverted is
// never sent again.
func (r *Relayer) settlePayerCode(ctx context.Context, s *settlement, w *wrapped6492) (*x402.SettleResponse, error) {
	chain, auth := s.chain, s.auth
	suspects := []common.Address{auth.From}
	to := s.asset
	input, err := transferInput(auth, s.sig)
	if w != nil {
		suspects = append(suspects, w.factory)
		to = Multicall3
		input, err = deployAndTransfer(w, s.asset, auth)
	}
	if err != nil {
		return nil, err
	}
	log := r.logger.With("payment", s.p.Key(), "payer", auth.From.Hex())
	if w != nil {
		log = log.With("factory", w.factory.Hex())
	}
	refused, until, isRefused, err := r.refusals.fresh(ctx, s.p.Network, r.cfg.Clock.Now(), suspects...)
	if err != nil {
		return nil, err
	}
	if isRefused {
		log.WarnContext(ctx, "settlement not sent: the payer's code is refused", "refused", refused.Hex(), "until", until)
		return s.refused(ReasonPayerCodeRefused, ""), nil
	}
	tip, feeCap, err := chain.fees.current(ctx)
	if err != nil {
		return nil, err
	}
	gasCap := r.cfg.PayerCodeGasCap
	msg := ethereum.CallMsg{From: r.address, To: &to, Data: input, Gas: gasCap, GasTipCap: tip, GasFeeCap: feeCap}
	estimate, err := chain.backend.EstimateGas(ctx, msg)
	if err == nil {
		// Half as much again, as for a plain transfer (a deployment's
		// storage, a payee's fresh slot), never above the cap; the
		// transaction is run once more with that very limit.
		msg.Gas = min(estimate+estimate/2, gasCap)
		_, err = chain.backend.CallContract(ctx, msg, nil)
	}
	if err != nil {
		switch {
		case isRevert(err):
			resp, rerr := r.reverted(ctx, s, err, "")
			if rerr != nil || resp.Success {
				return resp, rerr
			}
			switch resp.ErrorReason {
			case ReasonInsufficientBalance, ReasonValidBefore, ReasonValidAfter, ReasonNonceAlreadyUsed:
				// Not the code's doing.
				return resp, nil
			}
			// Its verification passed: the code answers a transaction
			// otherwise than it answered verification.
			return r.refusePayerCode(ctx, log, s.p.Network, resp, suspects, "its simulation at the transaction's fees failed: "+revertReason(err))
		case isOutOfGas(err):
			return r.refusePayerCode(ctx, log, s.p.Network, s.refused(ReasonSimulationFailed, ""), suspects, fmt.Sprintf("it needs more than PAYER_CODE_GAS_CAP (%d gas): %v", gasCap, err))
		}
		return nil, fmt.Errorf("run payer code: %w", err)
	}
	tx, err := chain.sender.send(ctx, to, input, msg.Gas)
	if err != nil {
		return nil, err
	}
	// A deployment's transfer is known by its AuthorizationUsed event
	// (the transaction is Multicall3's).
	sent := sentTx{hash: tx.Hash(), gas: tx.Gas(), batched: w != nil, batch: 1, payerCode: true}
	r.remember(s.p.Key(), sent)
	log.InfoContext(ctx, "settlement runs the payer's code", "transaction", tx.Hash().Hex(), "gas", tx.Gas(), "estimate", estimate)
	outcome, err := r.awaitReceipt(ctx, s, tx.Hash())
	if err != nil {
		return nil, err
	}
	if transferred(outcome, sent, s.asset, auth) {
		return s.settled(outcome.receipt, 1), nil
	}
	return r.payerCodeReverted(ctx, s, outcome.receipt)
}

// payerCodeReverted answers a settlement that ran the payer's code and
// whose transaction, receipt, did not make the transfer: settled when the
// authorization was used meanwhile, else refused for good, its payer (and
// the factory of its wallet, when the transaction deployed it) refused for
// PayerCodeRefuseFor. It is never sent again.
func (r *Relayer) payerCodeReverted(ctx context.Context, s *settlement, receipt *types.Receipt) (*x402.SettleResponse, error) {
	if receipt.Status != types.ReceiptStatusSuccessful {
		r.revertedGas(s.chain, receipt)
	}
	resp, err := r.reverted(ctx, s, errors.New("the transaction of the payer's code reverted"), receipt.TxHash.Hex())
	if err != nil || resp.Success {
		return resp, err
	}
	suspects := []common.Address{s.auth.From}
	if _, ep, perr := paymentTransfer(s.p); perr == nil {
		if w, is6492, _ := parse6492(ep.signature); is6492 {
			suspects = append(suspects, w.factory)
		}
	}
	log := r.logger.With("payment", s.p.Key(), "payer", s.auth.From.Hex())
	return r.refusePayerCode(ctx, log, s.p.Network, resp, suspects, fmt.Sprintf("its transaction %s reverted on chain after %d gas", receipt.TxHash.Hex(), receipt.GasUsed))
}

// refusePayerCode refuses suspects on network for PayerCodeRefuseFor,
// because of why, and returns resp, the settlement's final answer.
func (r *Relayer) refusePayerCode(ctx context.Context, log *slog.Logger, network string, resp *x402.SettleResponse, suspects []common.Address, why string) (*x402.SettleResponse, error) {
	until, err := r.RefusePayerCode(ctx, network, suspects...)
	if err != nil {
		return nil, err
	}
	log.WarnContext(ctx, "payer code refused", "refused", suspects, "until", until, "reason", resp.ErrorReason, "why", why)
	return resp, nil
}

// RefusePayerCode refuses the code of addrs (wallets) on network for
// PayerCodeRefuseFor, as a settlement their code failed after its
// verification does, and returns when the refusal ends. The worker calls
// it for a batch-settlement channel whose payer's code answered its
// vouchers' checks and not their claim.
func (r *Relayer) RefusePayerCode(ctx context.Context, network string, addrs ...common.Address) (time.Time, error) {
	until := r.cfg.Clock.Now().Add(r.cfg.PayerCodeRefuseFor)
	if err := r.refusals.refuse(ctx, network, until, addrs...); err != nil {
		return time.Time{}, err
	}
	return until, nil
}

// revertedGas reports the gas of a settlement transaction that reverted on
// chain.
func (r *Relayer) revertedGas(chain *relayChain, receipt *types.Receipt) {
	if r.cfg.Reverted != nil {
		r.cfg.Reverted(chain.network, receipt.GasUsed)
	}
}

// isOutOfGas reports whether err is a node saying a call or an estimate
// needs more gas than it was allowed.
func isOutOfGas(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "out of gas") || strings.Contains(msg, "gas required exceeds")
}

// transferred reports whether the outcome of a transaction sent for a
// payment shows its transfer: the transaction succeeded, and when it is a
// batch, it holds the authorization's AuthorizationUsed event.
func transferred(o *txOutcome, sent sentTx, asset common.Address, auth *Authorization) bool {
	if !sent.batched {
		return o.succeeded()
	}
	return o.usedIn(asset, auth)
}

// remember records the transaction sent for a payment, so that a retry
// waits for it instead of sending another.
func (r *Relayer) remember(key string, sent sentTx) {
	r.sentMu.Lock()
	r.sent[key] = sent
	r.sentMu.Unlock()
}

// forget drops the record of a transaction sent for a payment.
func (r *Relayer) forget(key string) {
	r.sentMu.Lock()
	delete(r.sent, key)
	r.sentMu.Unlock()
}

// forgetIfTimedOut drops the record of the transaction sent for a payment
// when its receipt did not come within ReceiptTimeout: it may have been
// dropped, so the next attempt sends again (if the first is mined after all,
// the second reverts and the payment is found settled by the first). After
// another failure (the node did not answer, ctx ended) the next attempt
// waits for the same transaction.
func (r *Relayer) forgetIfTimedOut(key string, err error) {
	if errors.Is(err, errReceiptTimeout) {
		r.forget(key)
	}
}

// reverted answers a transfer that reverted (run before sending, or mined
// with status 0 as tx): settled if the authorization was used meanwhile,
// else the reason the official packages give.
func (r *Relayer) reverted(ctx context.Context, s *settlement, revert error, tx string) (*x402.SettleResponse, error) {
	chain, asset, auth := s.chain, s.asset, s.auth
	used, err := authorizationState(ctx, chain.backend, asset, auth)
	if err != nil {
		return nil, fmt.Errorf("read authorization state: %w", err)
	}
	if used {
		resp, err := r.settledBy(ctx, chain, s.p, asset, auth)
		if err != nil {
			return nil, err
		}
		if resp != nil {
			return resp, nil
		}
		return s.refused(ReasonNonceAlreadyUsed, tx), nil
	}
	reason := ReasonTransactionFailed
	msg := revertReason(revert)
	switch {
	case strings.Contains(msg, "authorization is expired"):
		reason = ReasonValidBefore
	case strings.Contains(msg, "authorization is not yet valid"):
		reason = ReasonValidAfter
	case strings.Contains(msg, "invalid signature"):
		reason = ReasonSignature
	case revertsForBalance(msg):
		reason = ReasonInsufficientBalance
	default:
		if balance, err := balanceOf(ctx, chain.backend, asset, auth.From); err == nil && balance.Cmp(auth.Value) < 0 {
			reason = ReasonInsufficientBalance
		}
	}
	r.logger.WarnContext(ctx, "settlement reverted", "payment", s.p.Key(), "reason", reason, "revert", msg, "transaction", tx)
	return s.refused(reason, tx), nil
}
