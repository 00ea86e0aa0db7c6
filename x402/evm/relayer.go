package evm

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/startstop"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// DefaultBlockGasShare is RelayerConfig.BlockGasShare's default: a tenth.
const DefaultBlockGasShare = 0.1

// RelayerConfig configures a Relayer.
type RelayerConfig struct {
	// Key is the relayer's private key: it sends the transfers and pays
	// their gas. Required.
	Key *ecdsa.PrivateKey
	// Chains maps each CAIP-2 network (eip155:<id>) to a client of that
	// chain. Required.
	Chains map[string]Backend
	// ReceiptTimeout bounds the wait for a sent transaction's receipt;
	// past it Settle returns an error and the next attempt picks the
	// transaction up again. Defaults to 2 minutes.
	ReceiptTimeout time.Duration
	// MaxPollInterval is the longest pause between two looks at the chain's
	// head while a receipt is awaited; the first comes after a quarter of
	// the time receipts have been taking on the chain (at least 2 ms), the
	// pause stays so until the wait has lasted twice that time, and then
	// doubles up to this. Defaults to 50 ms.
	MaxPollInterval time.Duration
	// HeadCacheFor is the shortest time between two reads of the chain's
	// head, whatever the number of settlements waiting (a waiter does not
	// read it either when another did within its own pause): each read
	// that finds new blocks fetches their receipts once for every waiter.
	// Defaults to 2 ms.
	HeadCacheFor time.Duration
	// FeeCacheFor is how long the gas tip and the head's base fee read for
	// one send are reused for the next ones. Defaults to 500 ms: the fee
	// cap (tip plus twice the base fee) still covers several full blocks
	// of base-fee rises.
	FeeCacheFor time.Duration
	// Multicall maps a network to the address of a Multicall3-compatible
	// contract there (aggregate3): settlements on that chain share
	// transactions through it (see MaxBatch). A network without one gets a
	// transaction per payment. The devchain has one at Multicall3's
	// address (devchain.Multicall).
	Multicall map[string]common.Address
	// MaxBatch is the most transfers one batch transaction holds. Defaults
	// to 256.
	MaxBatch int
	// BatchLinger is the shortest time between two batches of one chain:
	// the transfers that arrive meanwhile wait for the next batch (a
	// transfer arriving at an idle chain goes at once). Defaults to 20 ms.
	BatchLinger time.Duration
	// LogLookback bounds the search for the transaction that used an
	// authorization (when a settlement finds its authorization already
	// used) for payments that do not say when they were verified: blocks
	// stamped up to this long before the authorization's validBefore (or
	// the head) are searched, and none before its validAfter. Defaults to
	// DefaultLogLookback. A payment with VerifiedAt is searched from
	// shortly before that time instead, however long ago.
	LogLookback time.Duration
	// LogRange is the largest block range of one eth_getLogs request.
	// Defaults to 2,000.
	LogRange uint64
	// Nonces allocates the relayer's nonces and keeps their transactions
	// until mined, shared by every process that sends with Key
	// (store.RelayerNonces). Defaults to memory: right only when no other
	// process uses Key.
	Nonces NonceStore
	// Owner names this process in Nonces. Defaults to a random name.
	Owner string
	// RPCTimeout bounds each call to a chain's node; a send past it keeps
	// its nonce and is sent again. Defaults to 10 s.
	RPCTimeout time.Duration
	// KeepEvery is the shortest time between two passes of the keeper
	// over the relayer's outstanding nonces on a chain; a settlement whose
	// receipt has not come within it asks for a pass. Defaults to 1 s.
	KeepEvery time.Duration
	// KeepIdle is the longest time between two passes of the keeper, so
	// that the transactions a node lost (a reorganisation's among them)
	// are given to it again while no settlement waits. Defaults to 2 s.
	KeepIdle time.Duration
	// ReplaceAfter is how long a transaction of this process may stay
	// unmined before it is replaced with higher fees. Defaults to 12 s
	// (six of Base's blocks).
	ReplaceAfter time.Duration
	// OrphanAfter is how long a nonce of another process may stay unmined
	// and untouched (its process died, or its send never came) before this
	// one sends it again or fills it. Defaults to 45 s.
	OrphanAfter time.Duration
	// MaxFee is the highest fee per gas (wei) the relayer offers: while a
	// chain's base fee is above it, settlements wait (MaxFeeWait), and a
	// transaction's fee cap never exceeds it. Nil: no cap.
	MaxFee *big.Int
	// ExpiryMargin is how long before an authorization's validBefore the
	// relayer stops sending it: a transaction sent later could be mined
	// after it. Defaults to 6 s (three of Base's blocks).
	ExpiryMargin time.Duration
	// Finality maps a network to when its settlements count as final: the
	// relayer answers each settlement with its block (SettleResponse.Block)
	// to be followed (Follow) until then, and keeps its transactions until
	// then, so that those a reorganisation undid are given to the node
	// again. A network absent takes DefaultFinality.
	Finality map[string]FinalityPolicy
	// BlockGasShare is the largest share of a block's gas limit one batch
	// transaction may ask for. Defaults to DefaultBlockGasShare: a block
	// admits a transaction only while its limit fits in the gas left, so
	// the last batches of a block fill it better when each is small.
	BlockGasShare float64
	// PayerCodeGasCap is the most gas a settlement that runs the payer's
	// code may use: a transfer from a contract wallet (EIP-1271) or an
	// EIP-7702 account, whose signature check is the payer's code, or one
	// that deploys the payer's wallet (ERC-6492). Such a settlement is
	// sent alone, after its gas is estimated and it is run (eth_call) from
	// the relayer at the fees and with the gas limit of its transaction;
	// one that needs more, or fails there, is refused without sending.
	// Defaults to DefaultPayerCodeGasCap.
	PayerCodeGasCap uint64
	// PayerCodeRefuseFor is how long the wallet, and the factory that
	// deploys it, whose code made a settlement fail after its payment was
	// verified (its transaction reverted on chain, or its simulation at
	// the transaction's fees failed) are refused: their settlements are
	// not sent, and the Verifier sharing Refusals refuses their payments.
	// A settlement of payer code that reverted on chain is never sent
	// again. Defaults to DefaultPayerCodeRefuseFor.
	PayerCodeRefuseFor time.Duration
	// Refusals keeps those refusals, shared with the Verifier and every
	// other process (store.PayerCodeRefusals). Defaults to memory.
	Refusals PayerCodeRefusals
	// Reverted, when set, is told the gas used by each settlement
	// transaction that reverted on chain.
	Reverted func(network string, gasUsed uint64)
	// Logger receives settlement logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Clock tells the time of the relayer's pauses, caches, expiries and
	// refusals. Defaults to clock.Real(). ReceiptTimeout and RPCTimeout
	// are contexts' deadlines, in real time.
	Clock clock.Clock
}

// Relayer settles exact EVM payments by sending transferWithAuthorization
// from its own key. It implements x402.Settler and x402.Finality and is
// safe for concurrent use. It settles between Start and Stop (its keepers
// run then); its parts on each chain are described at relayChain.
//
// sentMu guards sent; the chains' parts have their own locks and never
// take it.
type Relayer struct {
	cfg     RelayerConfig
	address common.Address
	chains  map[string]*relayChain
	logger  *slog.Logger
	life    startstop.Base
	// refusals are the wallets and factories refused for their code.
	refusals *refusals

	sentMu sync.Mutex
	// sent maps a payment's key to the transaction this process sent for
	// it, so that a retry waits for that transaction instead of sending
	// another.
	sent map[string]sentTx
}

// sentTx is a transaction sent for a payment: its hash, its gas limit, and
// whether it is a batch (its success is then the payment's transfer event,
// not its status).
type sentTx struct {
	hash    common.Hash
	gas     uint64
	batched bool
	// batch is the number of transfers the transaction carries.
	batch int
	// payerCode is set when the transaction runs the payer's code: it is
	// not sent again once it reverted.
	payerCode bool
}

// receiptCost is a settlement's share of the gas of the transaction of
// receipt, which carried batch transfers.
func receiptCost(receipt *types.Receipt, batch int) *x402.SettleCost {
	batch = max(batch, 1)
	price := "0"
	if receipt.EffectiveGasPrice != nil {
		price = receipt.EffectiveGasPrice.String()
	}
	return &x402.SettleCost{GasUsed: receipt.GasUsed / uint64(batch), GasPriceWei: price, Batch: batch}
}

var _ x402.Settler = (*Relayer)(nil)

// NewRelayer returns a Relayer.
func NewRelayer(cfg *RelayerConfig) (*Relayer, error) {
	if cfg.Key == nil {
		return nil, errors.New("evm relayer: no key")
	}
	if len(cfg.Chains) == 0 {
		return nil, errors.New("evm relayer: no chains configured")
	}
	c := *cfg
	c.Clock = clock.Or(c.Clock)
	if c.ReceiptTimeout <= 0 {
		c.ReceiptTimeout = 2 * time.Minute
	}
	if c.MaxPollInterval <= 0 {
		c.MaxPollInterval = 50 * time.Millisecond
	}
	if c.HeadCacheFor <= 0 {
		c.HeadCacheFor = 2 * time.Millisecond
	}
	if c.FeeCacheFor <= 0 {
		c.FeeCacheFor = 500 * time.Millisecond
	}
	if c.LogLookback <= 0 {
		c.LogLookback = DefaultLogLookback
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 256
	}
	if c.BatchLinger <= 0 {
		c.BatchLinger = 20 * time.Millisecond
	}
	if c.LogRange == 0 {
		c.LogRange = defaultLogRange
	}
	c.RPCTimeout = cmp.Or(c.RPCTimeout, 10*time.Second)
	c.KeepEvery = cmp.Or(c.KeepEvery, time.Second)
	c.KeepIdle = cmp.Or(c.KeepIdle, 2*time.Second)
	c.ExpiryMargin = cmp.Or(c.ExpiryMargin, 6*time.Second)
	c.ReplaceAfter = cmp.Or(c.ReplaceAfter, 12*time.Second)
	c.OrphanAfter = cmp.Or(c.OrphanAfter, 45*time.Second)
	if c.BlockGasShare <= 0 || c.BlockGasShare > 1 {
		c.BlockGasShare = DefaultBlockGasShare
	}
	if c.Nonces == nil {
		c.Nonces = newMemNonces(c.Clock)
	}
	if c.Owner == "" {
		c.Owner = fmt.Sprintf("relayer-%016x", rand.Uint64())
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.PayerCodeGasCap = cmp.Or(c.PayerCodeGasCap, DefaultPayerCodeGasCap)
	c.PayerCodeRefuseFor = cmp.Or(c.PayerCodeRefuseFor, DefaultPayerCodeRefuseFor)
	if c.Refusals == nil {
		c.Refusals = newMemRefusals(c.Clock)
	}
	r := &Relayer{
		cfg:      c,
		address:  crypto.PubkeyToAddress(c.Key.PublicKey),
		chains:   map[string]*relayChain{},
		logger:   c.Logger,
		sent:     map[string]sentTx{},
		refusals: newRefusals(c.Refusals),
	}
	for network, backend := range c.Chains {
		id, err := ChainID(network)
		if err != nil {
			return nil, fmt.Errorf("evm relayer: %w", err)
		}
		if backend == nil {
			return nil, fmt.Errorf("evm relayer: no client for %s", network)
		}
		policy, ok := c.Finality[network]
		if !ok {
			policy = DefaultFinality(network)
		}
		r.chains[network] = newRelayChain(&c, r.address, network, id, ethrpc.WithTimeout(backend, c.RPCTimeout), policy)
	}
	for network := range c.Multicall {
		if r.chains[network] == nil {
			return nil, fmt.Errorf("evm relayer: multicall for %s, which has no client", network)
		}
	}
	return r, nil
}

// Start starts the relayer: its keeper on each chain runs until Stop or
// until ctx ends, and Settle settles from now on. Starting a started
// relayer does nothing.
func (r *Relayer) Start(ctx context.Context) error {
	runs := make([]func(context.Context), 0, len(r.chains))
	for _, chain := range r.chains {
		runs = append(runs, chain.keeper.run)
	}
	r.life.Start(ctx, runs...)
	return nil
}

// Stop stops the relayer: settlements in flight end (their next attempt
// finds their transactions again), and Stop returns once every goroutine
// the relayer started has ended. Settle refuses to settle from then on,
// until Start. Stopping a stopped relayer does nothing.
func (r *Relayer) Stop() { r.life.Stop() }

// Address returns the relayer's address, which pays the gas.
func (r *Relayer) Address() common.Address { return r.address }

// Settle moves the funds of a verified payment. A payment that cannot be
// settled is a SettleResponse with Success false and the reason; an error
// means the chain could not be reached or the receipt did not come in time,
// and Settle should be called again: a payment whose authorization is
// already used on chain (by an earlier attempt that crashed or timed out)
// is reported settled with the transaction that used it.
func (r *Relayer) Settle(ctx context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	ctx, leave, err := r.life.Enter(ctx)
	if err != nil {
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
	}
	defer leave()
	ctx = ethrpc.WithPurpose(ctx, ethrpc.PurposeSettle)
	fail := func(reason, tx string) *x402.SettleResponse {
		return &x402.SettleResponse{Success: false, ErrorReason: reason, Transaction: tx, Network: p.Network, Payer: p.Payer}
	}
	ok := func(tx common.Hash) *x402.SettleResponse {
		return &x402.SettleResponse{Success: true, Transaction: tx.Hex(), Network: p.Network, Payer: p.Payer}
	}
	chain := r.chains[p.Network]
	if chain == nil {
		return nil, fmt.Errorf("settle %s: no chain client for %s", p.Key(), p.Network)
	}
	okCost := func(tx common.Hash, receipt *types.Receipt, batch int) *x402.SettleResponse {
		resp := ok(tx)
		resp.Cost = receiptCost(receipt, batch)
		resp.Block = chain.finality.settledBlock(receipt)
		return resp
	}
	asset, ep, err := paymentTransfer(p)
	if err != nil {
		var refusal *x402.Refusal
		if errors.As(err, &refusal) {
			return fail(refusal.Reason, ""), nil
		}
		return nil, err
	}
	auth := ep.auth
	log := r.logger.With("payment", p.Key(), "asset", asset.Hex())

	// A transaction this process sent for the payment earlier.
	r.sentMu.Lock()
	prev, sentBefore := r.sent[p.Key()]
	r.sentMu.Unlock()
	if sentBefore {
		receipt, err := chain.receipts.wait(ctx, prev.hash)
		if err != nil {
			r.forgetIfTimedOut(p.Key(), err)
			return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
		}
		r.forget(p.Key())
		if transferred(receipt, prev, asset, auth) {
			return okCost(receipt.TxHash, receipt, prev.batch), nil
		}
		if prev.payerCode {
			// Never sent again: its code made it revert once.
			return r.payerCodeReverted(ctx, p, chain, asset, auth, receipt)
		}
	}

	// An authorization about to expire is not sent: its transaction could
	// be mined after validBefore (and revert, at our cost) or never. It is
	// settled only if an earlier attempt's transfer went through.
	if auth.ValidBefore.Cmp(big.NewInt(r.cfg.Clock.Now().Add(r.cfg.ExpiryMargin).Unix())) < 0 {
		used, err := authorizationState(ctx, chain.backend, asset, auth)
		if err != nil {
			return nil, fmt.Errorf("settle %s: read authorization state: %w", p.Key(), err)
		}
		if used {
			return r.reverted(ctx, p, chain, asset, auth, errors.New("authorization is used"), "")
		}
		log.WarnContext(ctx, "settlement not sent: the authorization expires too soon", "valid_before", auth.ValidBefore.String())
		return fail(ReasonValidBefore, ""), nil
	}

	// An authorization already used (by an earlier attempt, by anyone who
	// relayed the same signed authorization, or canceled) makes the
	// transfer fail, and failed finds the transaction that used it. The
	// gas of the first transfer of an asset is estimated (several runs of
	// the transfer on a node); later ones reuse that limit. A transfer sent
	// on its own is run once with eth_call first; one sent in a batch is
	// not: it may fail without undoing the others.
	// A wallet not deployed yet (ERC-6492) is deployed by the transaction
	// that makes its transfer, through Multicall3; its transfer is known by
	// its AuthorizationUsed event. A wallet deployed since it signed has
	// its inner signature checked as any contract wallet's.
	sig := ep.signature
	deploy, err := undeployed6492(ctx, chain.backend, auth.From, &sig)
	if err != nil {
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
	}
	if deploy != nil {
		return r.settlePayerCode(ctx, p, chain, asset, auth, sig, deploy, okCost)
	}
	// A payer with code (a contract wallet, an EIP-7702 delegation) has
	// the token call its isValidSignature, whose gas only it bounds: its
	// transfer goes alone, under PayerCodeGasCap (settlePayerCode).
	code, err := chain.backend.CodeAt(ctx, auth.From, nil)
	if err != nil {
		return nil, fmt.Errorf("settle %s: read code of %s: %w", p.Key(), auth.From.Hex(), err)
	}
	if len(code) > 0 {
		return r.settlePayerCode(ctx, p, chain, asset, auth, sig, nil, okCost)
	}
	input, err := transferInput(auth, sig)
	if err != nil {
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
	}
	msg := ethereum.CallMsg{From: r.address, To: &asset, Data: input}
	// The gas limit learnt here is that of transfers from accounts with
	// no code: one payer's code never sets the limit of the others'.
	batched := chain.batch != nil
	gas, known := chain.fees.gasLimit(asset)
	switch {
	case !known:
		var estimate uint64
		if estimate, err = chain.backend.EstimateGas(ctx, msg); err == nil {
			gas = chain.fees.learnGas(asset, estimate)
		}
	case !batched:
		_, err = chain.backend.CallContract(ctx, msg, nil)
	}
	if err != nil {
		if !isRevert(err) {
			return nil, fmt.Errorf("settle %s: run transfer: %w", p.Key(), err)
		}
		return r.reverted(ctx, p, chain, asset, auth, err, "")
	}

	var sent sentTx
	var receipt *types.Receipt
	if batched {
		if inBatch, ok := chain.fees.batchedGas(asset); ok && inBatch < gas {
			gas = inBatch
		}
		it := &batchItem{key: p.Key(), asset: asset, input: input, gas: gas}
		if err := r.settleBatched(ctx, chain, it); err != nil {
			r.forgetIfTimedOut(p.Key(), err)
			return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
		}
		sent, receipt = sentTx{hash: it.receipt.TxHash, gas: it.tx.Gas(), batched: true, batch: it.batch}, it.receipt
	} else {
		tx, err := chain.sender.send(ctx, asset, input, gas)
		if err != nil {
			return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
		}
		sent = sentTx{hash: tx.Hash(), gas: tx.Gas(), batch: 1}
		r.sentMu.Lock()
		r.sent[p.Key()] = sent
		r.sentMu.Unlock()
		log.DebugContext(ctx, "settlement sent", "transaction", tx.Hash().Hex(), "nonce", tx.Nonce())
		if receipt, err = chain.receipts.wait(ctx, tx.Hash()); err != nil {
			r.forgetIfTimedOut(p.Key(), err)
			return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
		}
	}
	r.forget(p.Key())
	if transferred(receipt, sent, asset, auth) {
		return okCost(receipt.TxHash, receipt, sent.batch), nil
	}
	if receipt.Status != types.ReceiptStatusSuccessful && !sent.batched {
		r.revertedGas(chain, receipt)
	}
	if receipt.Status != types.ReceiptStatusSuccessful && receipt.GasUsed >= sent.gas {
		// Out of gas: the limit learnt is too low for this transfer (the
		// token was upgraded, or its storage grew). The authorization is
		// unused unless somebody else used it meanwhile; the next attempt
		// estimates again and finds out.
		chain.fees.forgetGas(asset)
		return nil, fmt.Errorf("settle %s: transaction %s ran out of gas (limit %d); the next attempt estimates again", p.Key(), sent.hash.Hex(), sent.gas)
	}
	// The transfer failed: run it again for the reason.
	_, err = chain.backend.CallContract(ctx, msg, nil)
	switch {
	case err == nil:
		// It runs now: inside a batch it ran out of the gas learnt (a
		// call gets at most 63/64 of what is left).
		chain.fees.forgetGas(asset)
		return nil, fmt.Errorf("settle %s: the transfer failed in %s but runs now; the next attempt estimates its gas again", p.Key(), sent.hash.Hex())
	case !isRevert(err):
		return nil, fmt.Errorf("settle %s: run failed transfer: %w", p.Key(), err)
	}
	return r.reverted(ctx, p, chain, asset, auth, err, sent.hash.Hex())
}

// settlePayerCode settles p, whose transfer runs the payer's code: its
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
func (r *Relayer) settlePayerCode(ctx context.Context, p *x402.Payment, chain *relayChain, asset common.Address, auth *Authorization, sig []byte, w *wrapped6492,
	ok func(common.Hash, *types.Receipt, int) *x402.SettleResponse) (*x402.SettleResponse, error) {
	suspects := []common.Address{auth.From}
	to := asset
	input, err := transferInput(auth, sig)
	if w != nil {
		suspects = append(suspects, w.factory)
		to = Multicall3
		input, err = deployAndTransfer(w, asset, auth)
	}
	if err != nil {
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
	}
	log := r.logger.With("payment", p.Key(), "payer", auth.From.Hex())
	if w != nil {
		log = log.With("factory", w.factory.Hex())
	}
	refused, until, isRefused, err := r.refusals.fresh(ctx, p.Network, r.cfg.Clock.Now(), suspects...)
	if err != nil {
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
	}
	if isRefused {
		log.WarnContext(ctx, "settlement not sent: the payer's code is refused", "refused", refused.Hex(), "until", until)
		return &x402.SettleResponse{ErrorReason: ReasonPayerCodeRefused, Network: p.Network, Payer: p.Payer}, nil
	}
	tip, feeCap, err := chain.fees.current(ctx)
	if err != nil {
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
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
			resp, rerr := r.reverted(ctx, p, chain, asset, auth, err, "")
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
			return r.refusePayerCode(ctx, log, p.Network, resp, suspects, "its simulation at the transaction's fees failed: "+revertReason(err))
		case isOutOfGas(err):
			resp := &x402.SettleResponse{ErrorReason: ReasonSimulationFailed, Network: p.Network, Payer: p.Payer}
			return r.refusePayerCode(ctx, log, p.Network, resp, suspects, fmt.Sprintf("it needs more than PAYER_CODE_GAS_CAP (%d gas): %v", gasCap, err))
		}
		return nil, fmt.Errorf("settle %s: run payer code: %w", p.Key(), err)
	}
	tx, err := chain.sender.send(ctx, to, input, msg.Gas)
	if err != nil {
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
	}
	// A deployment's transfer is known by its AuthorizationUsed event
	// (the transaction is Multicall3's).
	sent := sentTx{hash: tx.Hash(), gas: tx.Gas(), batched: w != nil, batch: 1, payerCode: true}
	r.sentMu.Lock()
	r.sent[p.Key()] = sent
	r.sentMu.Unlock()
	log.InfoContext(ctx, "settlement runs the payer's code", "transaction", tx.Hash().Hex(), "gas", tx.Gas(), "estimate", estimate)
	receipt, err := chain.receipts.wait(ctx, tx.Hash())
	if err != nil {
		r.forgetIfTimedOut(p.Key(), err)
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
	}
	r.forget(p.Key())
	if transferred(receipt, sent, asset, auth) {
		return ok(receipt.TxHash, receipt, 1), nil
	}
	return r.payerCodeReverted(ctx, p, chain, asset, auth, receipt)
}

// payerCodeReverted answers a settlement that ran the payer's code and
// whose transaction, receipt, did not make the transfer: settled when the
// authorization was used meanwhile, else refused for good, its payer (and
// the factory of its wallet, when the transaction deployed it) refused for
// PayerCodeRefuseFor. It is never sent again.
func (r *Relayer) payerCodeReverted(ctx context.Context, p *x402.Payment, chain *relayChain, asset common.Address, auth *Authorization, receipt *types.Receipt) (*x402.SettleResponse, error) {
	if receipt.Status != types.ReceiptStatusSuccessful {
		r.revertedGas(chain, receipt)
	}
	resp, err := r.reverted(ctx, p, chain, asset, auth, errors.New("the transaction of the payer's code reverted"), receipt.TxHash.Hex())
	if err != nil || resp.Success {
		return resp, err
	}
	suspects := []common.Address{auth.From}
	_, ep, perr := paymentTransfer(p)
	if perr == nil {
		if w, is6492, _ := parse6492(ep.signature); is6492 {
			suspects = append(suspects, w.factory)
		}
	}
	log := r.logger.With("payment", p.Key(), "payer", auth.From.Hex())
	return r.refusePayerCode(ctx, log, p.Network, resp, suspects, fmt.Sprintf("its transaction %s reverted on chain after %d gas", receipt.TxHash.Hex(), receipt.GasUsed))
}

// refusePayerCode refuses suspects on network for PayerCodeRefuseFor,
// because of why, and returns resp, the settlement's final answer.
func (r *Relayer) refusePayerCode(ctx context.Context, log *slog.Logger, network string, resp *x402.SettleResponse, suspects []common.Address, why string) (*x402.SettleResponse, error) {
	until := r.cfg.Clock.Now().Add(r.cfg.PayerCodeRefuseFor)
	if err := r.refusals.refuse(ctx, network, until, suspects...); err != nil {
		return nil, fmt.Errorf("settle: %w", err)
	}
	log.WarnContext(ctx, "payer code refused", "refused", suspects, "until", until, "reason", resp.ErrorReason, "why", why)
	return resp, nil
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

// transferred reports whether the receipt of a transaction sent for a
// payment shows its transfer: the transaction succeeded, and when it is a
// batch, it holds the authorization's AuthorizationUsed event.
func transferred(receipt *types.Receipt, sent sentTx, asset common.Address, auth *Authorization) bool {
	if !sent.batched {
		return receipt.Status == types.ReceiptStatusSuccessful
	}
	return usedIn(receipt, asset, auth)
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
func (r *Relayer) reverted(ctx context.Context, p *x402.Payment, chain *relayChain, asset common.Address, auth *Authorization, revert error, tx string) (*x402.SettleResponse, error) {
	used, err := authorizationState(ctx, chain.backend, asset, auth)
	if err != nil {
		return nil, fmt.Errorf("settle %s: read authorization state: %w", p.Key(), err)
	}
	if used {
		resp, err := r.settledBy(ctx, chain, p, asset, auth)
		if err != nil {
			return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
		}
		if resp != nil {
			return resp, nil
		}
		return &x402.SettleResponse{ErrorReason: ReasonNonceAlreadyUsed, Transaction: tx, Network: p.Network, Payer: p.Payer}, nil
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
	r.logger.WarnContext(ctx, "settlement reverted", "payment", p.Key(), "reason", reason, "revert", msg, "transaction", tx)
	return &x402.SettleResponse{ErrorReason: reason, Transaction: tx, Network: p.Network, Payer: p.Payer}, nil
}

// FeeWait reports, per network, since when settlements have been waiting
// for the base fee to fall under MaxFee; networks where none wait are
// absent.
func (r *Relayer) FeeWait() map[string]time.Time {
	out := map[string]time.Time{}
	for network, chain := range r.chains {
		if since, waiting := chain.fees.waitingSince(); waiting {
			out[network] = since
		}
	}
	return out
}

// ChainStatus is the relayer's state on one chain.
type ChainStatus struct {
	// Network is the chain's CAIP-2 id.
	Network string
	// Balance is the relayer's native balance, in wei.
	Balance *big.Int
	// BaseFee is the head block's base fee, in wei.
	BaseFee *big.Int
	// FeeWait is set while the base fee is above MaxFee: settlements
	// wait for it to fall.
	FeeWait bool
}

// Status reads the relayer's balance and the base fee on each chain, for
// an operator: FeeWait says whether settlements wait there now, whichever
// process sends them.
func (r *Relayer) Status(ctx context.Context) ([]ChainStatus, error) {
	var out []ChainStatus
	for network, chain := range r.chains {
		balance, err := chain.backend.BalanceAt(ctx, r.address, nil)
		if err != nil {
			return out, fmt.Errorf("balance of relayer on %s: %w", network, err)
		}
		head, err := chain.backend.HeaderByNumber(ctx, nil)
		if err != nil {
			return out, fmt.Errorf("head of %s: %w", network, err)
		}
		base := cmpOr(head.BaseFee, new(big.Int))
		out = append(out, ChainStatus{Network: network, Balance: balance, BaseFee: base,
			FeeWait: r.cfg.MaxFee != nil && base.Cmp(r.cfg.MaxFee) >= 0})
	}
	slices.SortFunc(out, func(a, b ChainStatus) int { return strings.Compare(a.Network, b.Network) })
	return out, nil
}

// MaxFee returns the fee cap per gas (wei) of RelayerConfig.MaxFee, nil
// when none.
func (r *Relayer) MaxFee() *big.Int { return r.cfg.MaxFee }

// Balances returns the relayer's native balance (wei) on each chain.
func (r *Relayer) Balances(ctx context.Context) (map[string]*big.Int, error) {
	out := map[string]*big.Int{}
	for network, chain := range r.chains {
		b, err := chain.backend.BalanceAt(ctx, r.address, nil)
		if err != nil {
			return nil, fmt.Errorf("balance of relayer on %s: %w", network, err)
		}
		out[network] = b
	}
	return out, nil
}

// paymentTransfer decodes the asset and the signed authorization of a
// verified payment. A payment that cannot be read is a *x402.Refusal
// (invalid payload).
func paymentTransfer(p *x402.Payment) (common.Address, *exactPayload, error) {
	raw, err := schemePayload(p.Payload)
	if err != nil {
		return common.Address{}, nil, refuse(ReasonPayload, "payment payload: %v", err)
	}
	ep, err := decodePayload(raw)
	if err != nil {
		return common.Address{}, nil, err
	}
	asset, err := parseAddress("asset", p.Asset)
	if err != nil {
		return common.Address{}, nil, refuse(ReasonPayload, "%v", err)
	}
	return asset, ep, nil
}
