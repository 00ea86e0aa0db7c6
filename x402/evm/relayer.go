package evm

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/x402d/x402d/x402"
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
	// KeepEvery is the shortest time between two looks at the relayer's
	// outstanding nonces on a chain, taken while settlements await
	// receipts. Defaults to 1 s.
	KeepEvery time.Duration
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
	// Logger receives settlement logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// Relayer settles exact EVM payments by sending transferWithAuthorization
// from its own key. It implements x402.Settler and is safe for concurrent
// use.
type Relayer struct {
	cfg     RelayerConfig
	address common.Address
	chains  map[string]*relayChain
	logger  *slog.Logger

	// nonces and owner: see RelayerConfig.Nonces and Owner.
	nonces NonceStore
	owner  string

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

// relayChain is the relayer's state on one chain.
type relayChain struct {
	network string
	backend Backend
	signer  types.Signer
	// policy is when a settlement on the chain is final
	// (RelayerConfig.Finality).
	policy FinalityPolicy
	// finalNonce is the relayer's nonce at the newest final block, as
	// Follow last read it: the transactions below it are final.
	finalNonce atomic.Uint64

	// ownMu guards own, the transactions this process sent and awaits by
	// nonce (until seen mined: minedTx, keep), and mined, the chain's count of the relayer's mined
	// transactions as last read (minedKnown once read).
	ownMu      sync.Mutex
	own        map[uint64]*ownTx
	mined      uint64
	minedKnown bool
	// keepMu lets one caller at a time resolve outstanding nonces (keep);
	// lastKeep is when one last did.
	keepMu   sync.Mutex
	lastKeep time.Time
	// lastForget is when a receipt last had the NonceStore forget the
	// nonces mined (unix nanoseconds; mined).
	lastForget atomic.Int64
	// blockGas is the gas limit of the head block last read.
	blockGas atomic.Uint64
	// feeWaitSince is when settlements started waiting for the base fee to
	// fall under MaxFee (unix nanoseconds; 0: none wait).
	feeWaitSince atomic.Int64

	// receiptsMu guards the settlements waiting for a receipt and the
	// last block whose receipts were handed to them.
	receiptsMu sync.Mutex
	waiters    map[common.Hash]*receiptWait
	scanned    uint64
	// scanMu serialises scans of new blocks; lastScan is when the head was
	// last read, so that many waiters read it about as often as one does
	// (scan).
	scanMu   sync.Mutex
	lastScan time.Time
	// receiptLag is how long receipts took to come, from the start of
	// their wait (an average over the recent ones, in nanoseconds): it sets
	// when a new wait first looks (firstPause).
	receiptLag atomic.Int64
	// noBlockReceipts is set once the node answered that it has no
	// eth_getBlockReceipts: waiters then ask for their own receipts.
	noBlockReceipts atomic.Bool

	// batch, when the chain has a Multicall3-compatible contract, sends
	// the transfers of concurrent settlements in shared transactions.
	batch *batcher
	// senders is how many processes were last seen sending with the
	// relayer's key on the chain (keep), this one included; 0 until then.
	senders atomic.Int64

	// gasMu guards gas, the gas limit given to transfers of each asset
	// (gasLimit), batched, the gas a transfer of each asset used inside
	// recent batches (batchedGas), and fees, the tip and fee cap of recent
	// sends.
	gasMu   sync.Mutex
	gas     map[common.Address]uint64
	batched map[common.Address]uint64
	fees    fees
}

// fees are the fee parameters of a transaction, and when they were read.
type fees struct {
	tip, feeCap *big.Int
	readAt      time.Time
}

// gasLimit returns the gas limit for a transfer of asset learnt from an
// earlier estimate, if any.
func (c *relayChain) gasLimit(asset common.Address) (uint64, bool) {
	c.gasMu.Lock()
	defer c.gasMu.Unlock()
	gas, ok := c.gas[asset]
	return gas, ok
}

// learnGas records the gas limit for transfers of asset from an estimate:
// half as much again, because a transfer to an account holding none of the
// token writes a fresh storage slot (about 17,000 gas more than one to an
// account holding some), and a limit set too high costs nothing (only the
// gas used is paid). It returns the limit.
func (c *relayChain) learnGas(asset common.Address, estimate uint64) uint64 {
	limit := estimate + estimate/2
	c.gasMu.Lock()
	c.gas[asset] = limit
	c.gasMu.Unlock()
	return limit
}

// forgetGas drops the gas limits learnt for asset: a transfer ran out of
// them.
func (c *relayChain) forgetGas(asset common.Address) {
	c.gasMu.Lock()
	delete(c.gas, asset)
	delete(c.batched, asset)
	c.gasMu.Unlock()
}

// batchedGas returns the gas limit for a transfer of asset inside a batch,
// learnt from the receipts of recent batches, if any: a quarter more than
// such a transfer used. It is well under the limit of a transfer sent alone
// (which pays a transaction's 21,000 gas, and reads the token's code cold),
// and what a batch asks for decides how many batches a block takes: a block
// admits a transaction only while the gas its earlier transactions used
// plus the new one's limit fit.
func (c *relayChain) batchedGas(asset common.Address) (uint64, bool) {
	c.gasMu.Lock()
	defer c.gasMu.Unlock()
	used, ok := c.batched[asset]
	return used + used/4, ok
}

// learnBatchedGas records what each of n transfers of asset used in a
// batch whose transfers all succeeded, beyond the transaction's own 21,000
// gas (which batchOverhead counts): a higher figure at once, a lower one an
// eighth of the way (one cheap batch, its payees already holding the token,
// does not set the limit of the next).
func (c *relayChain) learnBatchedGas(asset common.Address, gasUsed uint64, n int) {
	if n == 0 || gasUsed <= params.TxGas {
		return
	}
	per := (gasUsed - params.TxGas) / uint64(n)
	c.gasMu.Lock()
	defer c.gasMu.Unlock()
	if cur, ok := c.batched[asset]; ok && per < cur {
		per = cur - (cur-per)/8
	}
	c.batched[asset] = per
}

// errNoBlockReceipts is a node without eth_getBlockReceipts.
var errNoBlockReceipts = errors.New("the node has no eth_getBlockReceipts")

// isMethodNotFound reports whether a JSON-RPC call failed because the node
// does not have the method.
func isMethodNotFound(err error) bool {
	var rerr rpc.Error
	return errors.As(err, &rerr) && rerr.ErrorCode() == -32601
}

// receiptWait is a transaction awaited by one or more settlements (the
// payments of one batch, retried on their own): ready is closed once its
// receipt is known.
type receiptWait struct {
	ready   chan struct{}
	receipt *types.Receipt
	waiters int
	// hashes are the transactions awaited: the first, and its
	// replacements (follow).
	hashes []common.Hash
}

// deliver hands w its receipt, once; the caller holds receiptsMu.
func (w *receiptWait) deliver(r *types.Receipt) {
	if w.receipt == nil {
		w.receipt = r
		close(w.ready)
	}
}

// deliver hands w a receipt a waiter found by asking for it, so that the
// other waiters of the same transaction have it too.
func (c *relayChain) deliver(w *receiptWait, r *types.Receipt) {
	c.receiptsMu.Lock()
	w.deliver(r)
	c.receiptsMu.Unlock()
}

// register records that hash is awaited and returns what its receipt
// arrives on. The first waiter after an idle spell reads the head, so that
// only blocks from then on are scanned.
func (c *relayChain) register(ctx context.Context, hash common.Hash) (*receiptWait, error) {
	c.receiptsMu.Lock()
	defer c.receiptsMu.Unlock()
	if w, ok := c.waiters[hash]; ok {
		w.waiters++
		return w, nil
	}
	if len(c.waiters) == 0 {
		head, err := c.backend.BlockNumber(ctx)
		if err != nil {
			return nil, fmt.Errorf("read block number: %w", err)
		}
		c.scanned = head
	}
	w := &receiptWait{ready: make(chan struct{}), waiters: 1, hashes: []common.Hash{hash}}
	c.waiters[hash] = w
	// Replacements of hash sent before this wait began are awaited too.
	c.ownMu.Lock()
	for _, o := range c.own {
		if slices.Contains(o.hashes, hash) {
			for _, h := range o.hashes {
				if h != hash {
					c.waiters[h] = w
					w.hashes = append(w.hashes, h)
				}
			}
		}
	}
	c.ownMu.Unlock()
	return w, nil
}

// unregister forgets a waiter of hash.
func (c *relayChain) unregister(hash common.Hash) {
	c.receiptsMu.Lock()
	defer c.receiptsMu.Unlock()
	if w, ok := c.waiters[hash]; ok {
		if w.waiters--; w.waiters <= 0 {
			for _, h := range w.hashes {
				delete(c.waiters, h)
			}
		}
	}
}

// firstPause is how long a new wait for a receipt pauses before its first
// look at the head: a quarter of how long receipts took to come on this
// chain, at least 2 ms and at most maxPause. On a chain that mines on
// arrival it is 2 ms; on one with 2 s blocks, maxPause from the start, so
// that the waits started while a block is awaited do not add reads of the
// head.
func (c *relayChain) firstPause(maxPause time.Duration) time.Duration {
	return min(max(time.Duration(c.receiptLag.Load())/4, 2*time.Millisecond), maxPause)
}

// observeLag adds the time a receipt took to come to receiptLag's average
// (an exponential one, over about the last eight).
func (c *relayChain) observeLag(d time.Duration) {
	for {
		old := c.receiptLag.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if c.receiptLag.CompareAndSwap(old, next) {
			return
		}
	}
}

// scan reads the head, at most once per every, and hands the receipts of
// each block mined since the last scan to their waiters: one receipts
// request per block, whatever the number of waiters (a node answers a
// single receipt lookup by reading the whole block, so per-waiter lookups
// grew with the square of the block's size).
func (c *relayChain) scan(ctx context.Context, every time.Duration) error {
	if c.noBlockReceipts.Load() {
		return errNoBlockReceipts
	}
	c.scanMu.Lock()
	defer c.scanMu.Unlock()
	if time.Since(c.lastScan) < every {
		return nil
	}
	c.lastScan = time.Now()
	head, err := c.backend.BlockNumber(ctx)
	if err != nil {
		return fmt.Errorf("read block number: %w", err)
	}
	c.receiptsMu.Lock()
	from := c.scanned + 1
	c.receiptsMu.Unlock()
	for n := from; n <= head; n++ {
		receipts, err := c.backend.BlockReceipts(ctx, rpc.BlockNumberOrHashWithNumber(rpc.BlockNumber(n)))
		if isMethodNotFound(err) {
			c.noBlockReceipts.Store(true)
			return errNoBlockReceipts
		}
		if err != nil {
			return fmt.Errorf("receipts of block %d: %w", n, err)
		}
		c.receiptsMu.Lock()
		for _, r := range receipts {
			if w, ok := c.waiters[r.TxHash]; ok {
				w.deliver(r)
			}
		}
		if n > c.scanned {
			c.scanned = n
		}
		c.receiptsMu.Unlock()
	}
	return nil
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
	c.ExpiryMargin = cmp.Or(c.ExpiryMargin, 6*time.Second)
	c.ReplaceAfter = cmp.Or(c.ReplaceAfter, 12*time.Second)
	c.OrphanAfter = cmp.Or(c.OrphanAfter, 45*time.Second)
	if c.BlockGasShare <= 0 || c.BlockGasShare > 1 {
		c.BlockGasShare = DefaultBlockGasShare
	}
	if c.Nonces == nil {
		c.Nonces = newMemNonces()
	}
	if c.Owner == "" {
		c.Owner = fmt.Sprintf("relayer-%016x", rand.Uint64())
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	r := &Relayer{
		nonces:  c.Nonces,
		owner:   c.Owner,
		cfg:     c,
		address: crypto.PubkeyToAddress(c.Key.PublicKey),
		chains:  map[string]*relayChain{},
		logger:  c.Logger,
		sent:    map[string]sentTx{},
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
		chain := &relayChain{network: network, backend: timeoutBackend{Backend: backend, timeout: c.RPCTimeout},
			signer: types.LatestSignerForChainID(id), own: map[uint64]*ownTx{}, policy: policy,
			waiters: map[common.Hash]*receiptWait{}, gas: map[common.Address]uint64{}, batched: map[common.Address]uint64{}}
		if multicall, ok := c.Multicall[network]; ok {
			chain.batch = &batcher{multicall: multicall, maxBatch: c.MaxBatch, linger: c.BatchLinger, full: make(chan struct{}, 1), mined: make(chan struct{}, 1)}
		}
		r.chains[network] = chain
	}
	for network := range c.Multicall {
		if r.chains[network] == nil {
			return nil, fmt.Errorf("evm relayer: multicall for %s, which has no client", network)
		}
	}
	return r, nil
}

// Address returns the relayer's address, which pays the gas.
func (r *Relayer) Address() common.Address { return r.address }

// Settle moves the funds of a verified payment. A payment that cannot be
// settled is a SettleResponse with Success false and the reason; an error
// means the chain could not be reached or the receipt did not come in time,
// and Settle should be called again: a payment whose authorization is
// already used on chain (by an earlier attempt that crashed or timed out)
// is reported settled with the transaction that used it.
func (r *Relayer) Settle(ctx context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	ctx = WithPurpose(ctx, PurposeSettle)
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
		resp.Block = chain.settledBlock(receipt)
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
		receipt, err := r.waitReceipt(ctx, chain, prev.hash)
		if err != nil {
			r.forgetIfTimedOut(p.Key(), err)
			return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
		}
		r.forget(p.Key())
		if transferred(receipt, prev, asset, auth) {
			return okCost(receipt.TxHash, receipt, prev.batch), nil
		}
	}

	// An authorization about to expire is not sent: its transaction could
	// be mined after validBefore (and revert, at our cost) or never. It is
	// settled only if an earlier attempt's transfer went through.
	if auth.ValidBefore.Cmp(big.NewInt(time.Now().Add(r.cfg.ExpiryMargin).Unix())) < 0 {
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
		return r.settleDeploying(ctx, p, chain, asset, auth, deploy, okCost)
	}
	input, err := transferInput(auth, sig)
	if err != nil {
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
	}
	msg := ethereum.CallMsg{From: r.address, To: &asset, Data: input}
	batched := chain.batch != nil
	if batched {
		// A payer with code (a contract wallet, an EIP-7702 delegation)
		// has the token call its isValidSignature, whose gas only it
		// bounds: inside a batch it could spend the gas of the transfers
		// after it, so its transfer goes in a transaction of its own.
		code, err := chain.backend.CodeAt(ctx, auth.From, nil)
		if err != nil {
			return nil, fmt.Errorf("settle %s: read code of %s: %w", p.Key(), auth.From.Hex(), err)
		}
		batched = len(code) == 0
	}
	gas, known := chain.gasLimit(asset)
	switch {
	case !known:
		var estimate uint64
		if estimate, err = chain.backend.EstimateGas(ctx, msg); err == nil {
			gas = chain.learnGas(asset, estimate)
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
		if inBatch, ok := chain.batchedGas(asset); ok && inBatch < gas {
			gas = inBatch
		}
		it := &batchItem{key: p.Key(), asset: asset, input: input, gas: gas}
		if err := r.settleBatched(ctx, chain, it); err != nil {
			r.forgetIfTimedOut(p.Key(), err)
			return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
		}
		sent, receipt = sentTx{hash: it.receipt.TxHash, gas: it.tx.Gas(), batched: true, batch: it.batch}, it.receipt
	} else {
		tx, err := r.send(ctx, chain, asset, input, gas)
		if err != nil {
			return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
		}
		sent = sentTx{hash: tx.Hash(), gas: tx.Gas(), batch: 1}
		r.sentMu.Lock()
		r.sent[p.Key()] = sent
		r.sentMu.Unlock()
		log.DebugContext(ctx, "settlement sent", "transaction", tx.Hash().Hex(), "nonce", tx.Nonce())
		if receipt, err = r.waitReceipt(ctx, chain, tx.Hash()); err != nil {
			r.forgetIfTimedOut(p.Key(), err)
			return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
		}
	}
	r.forget(p.Key())
	if transferred(receipt, sent, asset, auth) {
		return okCost(receipt.TxHash, receipt, sent.batch), nil
	}
	if receipt.Status != types.ReceiptStatusSuccessful && receipt.GasUsed >= sent.gas {
		// Out of gas: the limit learnt is too low for this transfer (the
		// token was upgraded, or its storage grew). The authorization is
		// unused unless somebody else used it meanwhile; the next attempt
		// estimates again and finds out.
		chain.forgetGas(asset)
		return nil, fmt.Errorf("settle %s: transaction %s ran out of gas (limit %d); the next attempt estimates again", p.Key(), sent.hash.Hex(), sent.gas)
	}
	// The transfer failed: run it again for the reason.
	_, err = chain.backend.CallContract(ctx, msg, nil)
	switch {
	case err == nil:
		// It runs now: inside a batch it ran out of the gas learnt (a
		// call gets at most 63/64 of what is left).
		chain.forgetGas(asset)
		return nil, fmt.Errorf("settle %s: the transfer failed in %s but runs now; the next attempt estimates its gas again", p.Key(), sent.hash.Hex())
	case !isRevert(err):
		return nil, fmt.Errorf("settle %s: run failed transfer: %w", p.Key(), err)
	}
	return r.reverted(ctx, p, chain, asset, auth, err, sent.hash.Hex())
}

// settleDeploying settles p, whose payer is a wallet w deploys: one
// transaction to Multicall3 deploys it and makes the transfer, both or
// neither.
func (r *Relayer) settleDeploying(ctx context.Context, p *x402.Payment, chain *relayChain, asset common.Address, auth *Authorization, w *wrapped6492,
	ok func(common.Hash, *types.Receipt, int) *x402.SettleResponse) (*x402.SettleResponse, error) {
	input, err := deployAndTransfer(w, asset, auth)
	if err != nil {
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
	}
	multicall := Multicall3
	gas, err := chain.backend.EstimateGas(ctx, ethereum.CallMsg{From: r.address, To: &multicall, Data: input})
	if err != nil {
		if !isRevert(err) {
			return nil, fmt.Errorf("settle %s: run deployment and transfer: %w", p.Key(), err)
		}
		return r.reverted(ctx, p, chain, asset, auth, err, "")
	}
	// The estimate is that of this very call; a margin for the storage the
	// deployment writes first.
	gas += gas / 4
	tx, err := r.send(ctx, chain, multicall, input, gas)
	if err != nil {
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
	}
	sent := sentTx{hash: tx.Hash(), gas: tx.Gas(), batched: true, batch: 1}
	r.sentMu.Lock()
	r.sent[p.Key()] = sent
	r.sentMu.Unlock()
	r.logger.InfoContext(ctx, "settlement deploys the payer's wallet (ERC-6492)", "payment", p.Key(), "factory", w.factory.Hex(), "transaction", tx.Hash().Hex())
	receipt, err := r.waitReceipt(ctx, chain, tx.Hash())
	if err != nil {
		r.forgetIfTimedOut(p.Key(), err)
		return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
	}
	r.forget(p.Key())
	if transferred(receipt, sent, asset, auth) {
		return ok(receipt.TxHash, receipt, 1), nil
	}
	return r.reverted(ctx, p, chain, asset, auth, errors.New("the deployment and transfer reverted"), receipt.TxHash.Hex())
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

// errReceiptTimeout is a receipt that did not come within ReceiptTimeout.
var errReceiptTimeout = errors.New("no receipt within the receipt timeout")

// reverted answers a transfer that reverted (run before sending, or mined
// with status 0 as tx): settled if the authorization was used meanwhile,
// else the reason the official packages give.
func (r *Relayer) reverted(ctx context.Context, p *x402.Payment, chain *relayChain, asset common.Address, auth *Authorization, revert error, tx string) (*x402.SettleResponse, error) {
	used, err := authorizationState(ctx, chain.backend, asset, auth)
	if err != nil {
		return nil, fmt.Errorf("settle %s: read authorization state: %w", p.Key(), err)
	}
	if used {
		hash, err := r.findUse(ctx, chain, p, asset, auth)
		if err != nil {
			return nil, fmt.Errorf("settle %s: %w", p.Key(), err)
		}
		if hash != (common.Hash{}) {
			resp := &x402.SettleResponse{Success: true, Transaction: hash.Hex(), Network: p.Network, Payer: p.Payer}
			if !chain.policy.AtReceipt() {
				// Followed until final as any other: from its block.
				receipt, err := chain.backend.TransactionReceipt(ctx, hash)
				if err != nil {
					return nil, fmt.Errorf("settle %s: receipt of %s: %w", p.Key(), hash.Hex(), err)
				}
				resp.Block = chain.settledBlock(receipt)
			}
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

// fees returns the tip and fee cap of a transaction sent now: the node's
// suggested tip and twice the head's base fee above it, read at most once
// per FeeCacheFor, the fee cap never above MaxFee. While the head's base fee
// and the tip are above MaxFee, fees waits for a block that brings them
// under it (or for ctx to end): the chain would not mine the transaction.
func (r *Relayer) fees(ctx context.Context, chain *relayChain) (tip, feeCap *big.Int, err error) {
	chain.gasMu.Lock()
	f := chain.fees
	chain.gasMu.Unlock()
	if f.tip != nil && time.Since(f.readAt) < r.cfg.FeeCacheFor {
		return f.tip, f.feeCap, nil
	}
	for {
		readAt := time.Now()
		tip, err = chain.backend.SuggestGasTipCap(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("suggest gas tip: %w", err)
		}
		if tip.Sign() == 0 {
			tip = big.NewInt(1)
		}
		head, err := chain.backend.HeaderByNumber(ctx, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("read head block: %w", err)
		}
		chain.blockGas.Store(head.GasLimit)
		base := cmpOr(head.BaseFee, new(big.Int))
		feeCap = new(big.Int).Add(tip, new(big.Int).Mul(base, big.NewInt(2)))
		if capFee := r.cfg.MaxFee; capFee != nil && feeCap.Cmp(capFee) > 0 {
			if new(big.Int).Add(base, tip).Cmp(capFee) > 0 {
				// Above the operator's cap: wait for the next block.
				if chain.feeWaitSince.CompareAndSwap(0, time.Now().UnixNano()) {
					r.logger.WarnContext(ctx, "settlements wait: the base fee is above SETTLEMENT_MAX_FEE_GWEI", "network", chain.network, "base_fee_wei", base.String(), "max_fee_wei", capFee.String())
				}
				select {
				case <-ctx.Done():
					return nil, nil, fmt.Errorf("base fee %s wei above the maximum %s: %w", base, capFee, context.Cause(ctx))
				case <-time.After(r.cfg.KeepEvery):
				}
				continue
			}
			feeCap = new(big.Int).Set(capFee)
		}
		if chain.feeWaitSince.Swap(0) != 0 {
			r.logger.InfoContext(ctx, "settlements resume: the base fee is under SETTLEMENT_MAX_FEE_GWEI", "network", chain.network, "base_fee_wei", base.String())
		}
		chain.gasMu.Lock()
		chain.fees = fees{tip: tip, feeCap: feeCap, readAt: readAt}
		chain.gasMu.Unlock()
		return tip, feeCap, nil
	}
}

// FeeWait reports, per network, since when settlements have been waiting
// for the base fee to fall under MaxFee; networks where none wait are
// absent.
func (r *Relayer) FeeWait() map[string]time.Time {
	out := map[string]time.Time{}
	for network, chain := range r.chains {
		if since := chain.feeWaitSince.Load(); since != 0 {
			out[network] = time.Unix(0, since)
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

// batchGas is the most gas one batch transaction may ask for on chain:
// BlockGasShare of the last block gas limit read, and never above
// maxBatchGas (EIP-7825's cap of a transaction).
func (r *Relayer) batchGas(chain *relayChain) uint64 {
	limit := uint64(maxBatchGas)
	if block := chain.blockGas.Load(); block > 0 {
		limit = min(limit, uint64(float64(block)*r.cfg.BlockGasShare))
	}
	return limit
}

// timeoutBackend bounds every call to a chain's node by its own timeout.
type timeoutBackend struct {
	Backend
	timeout time.Duration
}

func (b timeoutBackend) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.timeout)
}

func (b timeoutBackend) ChainID(ctx context.Context) (*big.Int, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.ChainID(ctx)
}

func (b timeoutBackend) CallContract(ctx context.Context, msg ethereum.CallMsg, block *big.Int) ([]byte, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.CallContract(ctx, msg, block)
}

func (b timeoutBackend) CodeAt(ctx context.Context, account common.Address, block *big.Int) ([]byte, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.CodeAt(ctx, account, block)
}

func (b timeoutBackend) BlockNumber(ctx context.Context) (uint64, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.BlockNumber(ctx)
}

func (b timeoutBackend) EstimateGas(ctx context.Context, msg ethereum.CallMsg) (uint64, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.EstimateGas(ctx, msg)
}

func (b timeoutBackend) FilterLogs(ctx context.Context, q ethereum.FilterQuery) ([]types.Log, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.FilterLogs(ctx, q)
}

func (b timeoutBackend) SendTransaction(ctx context.Context, tx *types.Transaction) error {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.SendTransaction(ctx, tx)
}

func (b timeoutBackend) HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.HeaderByNumber(ctx, number)
}

func (b timeoutBackend) PendingNonceAt(ctx context.Context, account common.Address) (uint64, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.PendingNonceAt(ctx, account)
}

func (b timeoutBackend) NonceAt(ctx context.Context, account common.Address, block *big.Int) (uint64, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.NonceAt(ctx, account, block)
}

func (b timeoutBackend) BalanceAt(ctx context.Context, account common.Address, block *big.Int) (*big.Int, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.BalanceAt(ctx, account, block)
}

func (b timeoutBackend) SuggestGasTipCap(ctx context.Context) (*big.Int, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.SuggestGasTipCap(ctx)
}

func (b timeoutBackend) TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.TransactionReceipt(ctx, hash)
}

func (b timeoutBackend) BlockReceipts(ctx context.Context, block rpc.BlockNumberOrHash) ([]*types.Receipt, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.BlockReceipts(ctx, block)
}

// maxNonceRetries bounds how many times one send moves to another nonce
// after finding its nonce taken; past it the settlement fails and its job
// is retried later.
const maxNonceRetries = 64

// isAlreadyKnown reports whether a node refused a transaction because it
// already has it (geth says "already known", anvil "transaction already
// imported").
func isAlreadyKnown(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "already known") || strings.Contains(msg, "already imported")
}

// waitReceipt waits for the receipt of hash: it asks for it once, then
// waits for a scan of new blocks to bring it, looking at the head after
// firstPause and then less often, up to MaxPollInterval.
func (r *Relayer) waitReceipt(ctx context.Context, chain *relayChain, hash common.Hash) (*types.Receipt, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, r.cfg.ReceiptTimeout, errReceiptTimeout)
	defer cancel()
	// Registered before the first ask: a transaction mined after that ask
	// is in a block the scans have not reached yet.
	w, err := chain.register(ctx, hash)
	if err != nil {
		return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), err)
	}
	defer chain.unregister(hash)
	receipt, err := chain.backend.TransactionReceipt(ctx, hash)
	if err == nil {
		chain.deliver(w, receipt)
		r.mined(ctx, chain, receipt.TxHash)
		return receipt, nil
	}
	if !errors.Is(err, ethereum.NotFound) && !isIndexing(err) {
		return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), err)
	}
	start := time.Now()
	maxPause := r.cfg.MaxPollInterval
	pause := chain.firstPause(maxPause)
	// Until twice the time receipts have been taking, the pause stays
	// (a block mined then is found within it); only a wait that lasts
	// longer than that looks less and less often.
	steadyFor := 2 * time.Duration(chain.receiptLag.Load())
	for {
		select {
		case <-w.ready:
			chain.observeLag(time.Since(start))
			r.mined(ctx, chain, w.receipt.TxHash)
			return w.receipt, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), context.Cause(ctx))
		case <-time.After(pause):
		}
		// The head is read unless another wait read it within this wait's
		// pause: a block mined meanwhile is then found at most a pause
		// later, and many waits read the head about as often as the
		// one with the shortest pause, not once each.
		every := max(pause, r.cfg.HeadCacheFor)
		if time.Since(start) >= steadyFor {
			pause = min(pause*2, maxPause)
		}
		if time.Since(start) >= r.cfg.KeepEvery {
			// A wait this long may be behind a gap, a dropped or an
			// underpriced transaction: resolve the outstanding nonces.
			r.keep(ctx, chain)
		}
		err := chain.scan(ctx, every)
		if err == nil {
			continue
		}
		if !errors.Is(err, errNoBlockReceipts) {
			return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), err)
		}
		// A node without block receipts: ask for this one, less often.
		maxPause = max(r.cfg.MaxPollInterval, time.Second)
		receipt, err := chain.backend.TransactionReceipt(ctx, hash)
		if err == nil {
			chain.observeLag(time.Since(start))
			chain.deliver(w, receipt)
			r.mined(ctx, chain, receipt.TxHash)
			return receipt, nil
		}
		if !errors.Is(err, ethereum.NotFound) && !isIndexing(err) {
			return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), err)
		}
	}
}

// findUse returns the transaction that used the authorization of p (its
// AuthorizationUsed event), or the zero hash.
func (r *Relayer) findUse(ctx context.Context, chain *relayChain, p *x402.Payment, asset common.Address, auth *Authorization) (common.Hash, error) {
	return findUse(ctx, chain.backend, asset, auth, p.VerifiedAt, r.cfg.LogLookback, r.cfg.LogRange)
}

// LogReader is what looking for a settlement on chain needs: headers (to
// find the blocks of a time window) and event logs.
type LogReader interface {
	ethereum.LogFilterer
	HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error)
}

// DefaultLogLookback is how far back the search for the use of an
// authorization goes when the payment does not say when it was verified,
// unless configured otherwise (RelayerConfig.LogLookback).
const DefaultLogLookback = 24 * time.Hour

// useMargin is how long before a payment's verification the use of its
// authorization is searched for. Verification runs the transfer, so the
// authorization was unused then, but the node read may have lagged the
// chain, and block timestamps are the sequencer's clock, not ours.
const useMargin = 10 * time.Minute

// defaultLogRange is the largest block range of one eth_getLogs request,
// unless configured otherwise.
const defaultLogRange = 2_000

// FindSettlement returns the transaction that used the EIP-3009
// authorization of payment p (its AuthorizationUsed event) on chain, or the
// zero hash when none did (unused, or canceled by the payer). Such a
// transaction moved p's amount to p's payee: the authorization names both,
// and it was verified against the requirement. The blocks searched are
// those the token could have accepted the authorization in (stamped inside
// its validity window) and, when p says when it was verified, not long
// before that; lookback bounds the search of a payment that does not (0 is
// DefaultLogLookback). Clients of a remote facilitator use it to recognise
// their own earlier settlement, whose answer was lost, behind a "nonce
// already used".
func FindSettlement(ctx context.Context, chain LogReader, p *x402.Payment, lookback time.Duration) (common.Hash, error) {
	asset, ep, err := paymentTransfer(p)
	if err != nil {
		return common.Hash{}, fmt.Errorf("find settlement of %s: %w", p.Key(), err)
	}
	if lookback <= 0 {
		lookback = DefaultLogLookback
	}
	hash, err := findUse(ctx, chain, asset, ep.auth, p.VerifiedAt, lookback, defaultLogRange)
	if err != nil {
		return common.Hash{}, fmt.Errorf("find settlement of %s: %w", p.Key(), err)
	}
	return hash, nil
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

// findUse returns the transaction that used auth (its AuthorizationUsed
// event), or the zero hash. The token accepts auth only in a block stamped
// after validAfter and before validBefore, and verification at verifiedAt
// found it unused: the blocks of that window (from useMargin before
// verifiedAt, or from lookback before its end when verifiedAt is zero) are
// searched, oldest first, logRange blocks per request. The window's blocks
// are found by bisection over headers: at most 2·log2(head) header reads, on
// a path taken only when an authorization is found already used.
func findUse(ctx context.Context, chain LogReader, asset common.Address, auth *Authorization, verifiedAt time.Time, lookback time.Duration, logRange uint64) (common.Hash, error) {
	head, err := chain.HeaderByNumber(ctx, nil)
	if err != nil {
		return common.Hash{}, fmt.Errorf("read head: %w", err)
	}
	// Timestamps t with after < t < before.
	after, before := clampUint64(auth.ValidAfter), clampUint64(auth.ValidBefore)
	if verifiedAt.IsZero() {
		end := min(before, head.Time+1)
		if back := uint64(lookback / time.Second); end > back {
			after = max(after, end-back)
		}
	} else if from := verifiedAt.Add(-useMargin).Unix(); from > 0 {
		after = max(after, uint64(from))
	}
	if before == 0 || after >= before-1 {
		return common.Hash{}, nil
	}
	low, err := firstBlockAfter(ctx, chain, head, 0, after)
	if err != nil {
		return common.Hash{}, err
	}
	end, err := firstBlockAfter(ctx, chain, head, low, before-1)
	if err != nil {
		return common.Hash{}, err
	}
	// Blocks low ≤ n < end are stamped inside the window.
	used := usedTopics(auth)
	topics := [][]common.Hash{{used[0]}, {used[1]}, {used[2]}}
	for from := low; from < end; {
		to := min(end-1, from+logRange-1)
		logs, err := chain.FilterLogs(ctx, ethereum.FilterQuery{
			FromBlock: new(big.Int).SetUint64(from),
			ToBlock:   new(big.Int).SetUint64(to),
			Addresses: []common.Address{asset},
			Topics:    topics,
		})
		if err != nil {
			return common.Hash{}, fmt.Errorf("search AuthorizationUsed logs: %w", err)
		}
		for _, l := range logs {
			if !l.Removed {
				return l.TxHash, nil
			}
		}
		from = to + 1
	}
	return common.Hash{}, nil
}

// firstBlockAfter returns the number of the first block from from up to
// head stamped after t, or head's number plus one if none is. Timestamps
// never decrease along a chain, so it bisects: about log2(head-from) header
// reads.
func firstBlockAfter(ctx context.Context, chain LogReader, head *types.Header, from, t uint64) (uint64, error) {
	n := head.Number.Uint64()
	if head.Time <= t {
		return n + 1, nil
	}
	low, high := min(from, n), n // the answer is in [low, high]
	for low < high {
		mid := low + (high-low)/2
		h, err := chain.HeaderByNumber(ctx, new(big.Int).SetUint64(mid))
		if err != nil {
			return 0, fmt.Errorf("read header %d: %w", mid, err)
		}
		if h.Time > t {
			high = mid
		} else {
			low = mid + 1
		}
	}
	return low, nil
}

// clampUint64 returns v, or math.MaxUint64 when v does not fit.
func clampUint64(v *big.Int) uint64 {
	if !v.IsUint64() {
		return math.MaxUint64
	}
	return v.Uint64()
}

// isIndexing reports whether a node answered that it is still indexing
// transactions: the receipt is not available yet.
func isIndexing(err error) bool {
	return strings.Contains(err.Error(), "transaction indexing is in progress")
}

func cmpOr(v, def *big.Int) *big.Int {
	if v == nil {
		return def
	}
	return v
}
