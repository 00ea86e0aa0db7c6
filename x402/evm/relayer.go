package evm

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

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

// paymentTransfer reads the asset and the signed authorization of a
// verified payment: from the compact form it was read from the ledger in
// (x402.Payment.ExactEVM), else decoded from its payload; both are checked
// alike (parsePayload). A payment that cannot be read is a *x402.Refusal
// (invalid payload).
func paymentTransfer(p *x402.Payment) (common.Address, *exactPayload, error) {
	var ep *exactPayload
	var err error
	if w, ok := p.ExactEVM(); ok {
		ep, err = parsePayload(w)
	} else {
		var raw json.RawMessage
		if raw, err = schemePayload(p.Payload); err != nil {
			return common.Address{}, nil, refuse(ReasonPayload, "payment payload: %v", err)
		}
		ep, err = decodePayload(raw)
	}
	if err != nil {
		return common.Address{}, nil, err
	}
	asset, err := parseAddress("asset", p.Asset)
	if err != nil {
		return common.Address{}, nil, refuse(ReasonPayload, "%v", err)
	}
	return asset, ep, nil
}
