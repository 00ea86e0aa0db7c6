package evm

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
)

// Multicall3 is the address of Multicall3, deployed by the same keyless
// transaction on most EVM chains (Base among them); the devchain places its
// Multicall3-compatible contract there too.
var Multicall3 = common.HexToAddress("0xcA11bde05977b3631167028862bE2a173976CA11")

// multicallABI is the part of Multicall3's interface the relayer uses:
// aggregate3 runs calls in order, each allowed to fail or not.
var multicallABI = func() abi.ABI {
	const def = `[{"type":"function","name":"aggregate3","stateMutability":"payable","inputs":[
{"name":"calls","type":"tuple[]","components":[{"name":"target","type":"address"},{"name":"allowFailure","type":"bool"},{"name":"callData","type":"bytes"}]}],
"outputs":[{"name":"returnData","type":"tuple[]","components":[{"name":"success","type":"bool"},{"name":"returnData","type":"bytes"}]}]}]`
	parsed, err := abi.JSON(strings.NewReader(def))
	if err != nil {
		panic(err)
	}
	return parsed
}()

// call3 is one call of aggregate3.
type call3 struct {
	Target       common.Address
	AllowFailure bool
	CallData     []byte
}

// maxBatchGas bounds the gas limit of a batch transaction: EIP-7825 (in
// Osaka, on Base and the devchain) caps a transaction at 2^24 gas.
const maxBatchGas = 1<<24 - 1<<20

// batchOverhead is the gas a batch transaction is given beyond the sum of
// its transfers' limits: a transaction's intrinsic 21,000 gas, Multicall3's
// own work, and the first reads of the token's contracts and accounts,
// cold in a transaction (on Circle's USDC a lone transfer in a batch uses
// about 92k gas, each further one about 44k).
const batchOverhead = 60_000

// learnFromBatch is the fewest transfers a batch holds for its gas to
// teach what a batched transfer uses: in a smaller one the cold reads of
// the first weigh too much.
const learnFromBatch = 8

// batcher sends the transfers of concurrent settlements on one chain in
// shared transactions, through a Multicall3-compatible contract. Batches go
// out at most once per linger: when the chain is idle a transfer is sent at
// once, in a batch of its own; under load, the transfers that arrive within
// a linger share one transaction (one signature, one pool entry, one
// receipt), each allowed to fail on its own. A batch is sent early when it
// is full (maxBatch transfers, or maxBatchGas).
//
// mu guards pending, oldest, gas, leading and lastSend, and is never held
// while calling out; unmined is an atomic. The goroutines it starts (the
// one that sends, and one awaiting each batch's receipt) are the
// relayer's (startstop.Base.Go): Relayer.Stop ends them and waits.
type batcher struct {
	multicall common.Address
	maxBatch  int
	linger    time.Duration

	mu       sync.Mutex
	pending  []*batchItem
	oldest   time.Time // when the oldest of pending arrived
	gas      uint64    // the gas of pending's transfers
	leading  bool      // a goroutine sends pending's batches
	lastSend time.Time
	// full wakes the leading goroutine before its linger ends.
	full chan struct{}

	// unmined is the gas asked for by the batches sent whose receipts have
	// not come; mined wakes a goroutine waiting for it to fall.
	unmined atomic.Uint64
	mined   chan struct{}
}

// busyLinger is how long the transfers of a batch gather while earlier
// batches await a block: a fortieth of Base's block time, so that a batch
// seldom misses the block it would have made, and few transfers go alone.
// A longer gathering adds its time to every settlement's latency
// (docs/performance.md, Tuning choices).
const busyLinger = 50 * time.Millisecond

// maxUnmined is how many blocks' worth of gas (as the batches' limits
// count it) the batches of a key may ask for before earlier ones are
// mined, shared among the processes sending with it. Transfers arriving beyond it wait in the batcher, where they join
// larger batches, instead of in the node's pool: a pool holding more than
// the next blocks can take only grows, the base fee climbs past the fee
// caps of the transactions waiting, and a node may drop them.
const maxUnmined = 2

// batchItem is one transfer waiting for, or sent in, a batch.
type batchItem struct {
	key   string
	asset common.Address
	input []byte
	gas   uint64

	// Set before done is closed: the batch's transaction (nil if it could
	// not be sent), the outcome of its receipt (shared by the batch's
	// items), or why there is none.
	tx      *types.Transaction
	outcome *txOutcome
	err     error
	done    chan struct{}
	// batch is the number of transfers of the batch it went in.
	batch int
}

// settleBatched sends it in a batch and waits for the batch's receipt. The
// batch may serve other settlements: it is not cut short when ctx ends
// (ReceiptTimeout bounds it, and Relayer.Stop), but settleBatched then
// returns at once.
func (r *Relayer) settleBatched(ctx context.Context, chain *relayChain, it *batchItem) error {
	b := chain.batch
	it.done = make(chan struct{})
	b.mu.Lock()
	if len(b.pending) == 0 {
		b.oldest = r.cfg.Clock.Now()
	}
	b.pending = append(b.pending, it)
	b.gas += it.gas
	lead := !b.leading
	b.leading = true
	if len(b.pending) >= b.maxBatch || b.gas+batchOverhead > chain.fees.batchGas() {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()
	if lead {
		r.life.Go(ctx, func(ctx context.Context) { r.sendBatches(ctx, chain) })
	}
	select {
	case <-it.done:
		return it.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// sendBatches sends the batches of the transfers waiting, each at least a
// linger after the one before (sooner when full), until none wait.
func (r *Relayer) sendBatches(ctx context.Context, chain *relayChain) {
	b := chain.batch
	for {
		b.mu.Lock()
		wait := b.lastSend.Add(b.linger).Sub(r.cfg.Clock.Now())
		if b.unmined.Load() > 0 {
			// Batches sent wait for a block: this one would most likely
			// join them in it, so it gathers a while first rather than
			// going out with a transfer or two, each paying for the
			// cold reads of a batch's first.
			wait = max(wait, b.oldest.Add(busyLinger).Sub(r.cfg.Clock.Now()))
		}
		b.mu.Unlock()
		if wait > 0 {
			t := r.cfg.Clock.NewTimer(wait)
			select {
			case <-t.C():
			case <-b.full:
				t.Stop()
			}
		}
		// Wait for blocks to take the batches sent (a receipt, or a
		// block time at most: a receipt may never come for a dropped
		// transaction, which the keeper sends again). Processes sending
		// with the same key share the allowance.
		// (Once the relayer stops, the batches go at once: their sends
		// fail, and their settlements with them.)
		for block := chain.fees.blockGas.Load(); block > 0 && ctx.Err() == nil && b.unmined.Load() >= maxUnmined*block/uint64(max(1, chain.keeper.senders.Load())); {
			t := r.cfg.Clock.NewTimer(r.cfg.KeepEvery)
			select {
			case <-b.mined:
			case <-t.C():
			case <-ctx.Done():
			}
			t.Stop()
			block = chain.fees.blockGas.Load()
		}
		if chain.fees.blockGas.Load() == 0 {
			// The first batch: learn the block gas limit before sizing it,
			// or it could ask for more than a block holds and never be
			// mined.
			if head, err := chain.backend.HeaderByNumber(ctx, nil); err == nil {
				chain.fees.learnBlock(head)
			}
		}
		b.mu.Lock()
		n, gas, limit := 0, uint64(batchOverhead), chain.fees.batchGas()
		for n < len(b.pending) && n < b.maxBatch && (n == 0 || gas+b.pending[n].gas <= limit) {
			gas += b.pending[n].gas
			n++
		}
		items := b.pending[:n:n]
		b.pending = b.pending[n:]
		b.oldest = r.cfg.Clock.Now()
		b.gas -= gas - batchOverhead
		b.lastSend = b.oldest
		more := len(b.pending) > 0
		b.leading = more
		b.mu.Unlock()
		if n > 0 {
			r.sendBatch(ctx, chain, items, gas)
		}
		if !more {
			return
		}
	}
}

// sendBatch sends items in one aggregate3 transaction with gas, records it
// as sent for each of their payments (a retry waits for it instead of
// sending again), and hands each item the outcome of the transaction's
// receipt once it comes, read once for the batch (on a goroutine of its own, so that the next batch is not held
// up, and on the relayer's span: Relayer.Stop waits for it).
func (r *Relayer) sendBatch(ctx context.Context, chain *relayChain, items []*batchItem, gas uint64) {
	finish := func(tx *types.Transaction, outcome *txOutcome, err error) {
		for _, it := range items {
			it.tx, it.outcome, it.err, it.batch = tx, outcome, err, len(items)
			close(it.done)
		}
	}
	calls := make([]call3, len(items))
	for i, it := range items {
		calls[i] = call3{Target: it.asset, AllowFailure: true, CallData: it.input}
	}
	input, err := multicallABI.Pack("aggregate3", calls)
	if err != nil {
		finish(nil, nil, fmt.Errorf("encode batch of %d transfers: %w", len(items), err))
		return
	}
	sendCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	tx, err := chain.sender.send(sendCtx, chain.batch.multicall, input, gas)
	cancel()
	if err != nil {
		finish(nil, nil, fmt.Errorf("send batch of %d transfers: %w", len(items), err))
		return
	}
	r.sentMu.Lock()
	for _, it := range items {
		r.sent[it.key] = sentTx{hash: tx.Hash(), gas: tx.Gas(), batched: true, batch: len(items)}
	}
	r.sentMu.Unlock()
	b := chain.batch
	b.unmined.Add(tx.Gas())
	r.life.Go(ctx, func(ctx context.Context) {
		outcome, err := chain.receipts.outcome(ctx, tx.Hash())
		b.unmined.Add(-tx.Gas())
		select {
		case b.mined <- struct{}{}:
		default:
		}
		if err != nil {
			finish(tx, nil, fmt.Errorf("batch of %d transfers: %w", len(items), err))
			return
		}
		learnFrom(chain.fees, outcome, items)
		finish(tx, outcome, nil)
	})
}

// CheckMulticall checks that every chain the relayer batches on has code at
// its batching contract's address: without it every batch would "succeed"
// without moving anything.
func (r *Relayer) CheckMulticall(ctx context.Context) error {
	for network, chain := range r.chains {
		if chain.batch == nil {
			continue
		}
		code, err := chain.backend.CodeAt(ctx, chain.batch.multicall, nil)
		if err != nil {
			return fmt.Errorf("evm relayer: read code of %s on %s: %w", chain.batch.multicall.Hex(), network, err)
		}
		if len(code) == 0 {
			return fmt.Errorf("evm relayer: no contract at %s on %s to batch settlements through", chain.batch.multicall.Hex(), network)
		}
	}
	return nil
}

// learnFrom learns the gas of a transfer inside a batch from the outcome
// of a batch of one asset's transfers that all succeeded (each left its
// AuthorizationUsed event): a failed transfer stops early and would teach
// too low a figure.
func learnFrom(fees *fees, o *txOutcome, items []*batchItem) {
	if !o.succeeded() || len(items) < learnFromBatch {
		return
	}
	asset := items[0].asset
	for _, it := range items {
		if it.asset != asset {
			return
		}
	}
	if o.usedOf[asset] == len(items) {
		fees.learnBatchedGas(asset, o.receipt.GasUsed, len(items))
	}
}

// usedTopics returns the topics of auth's AuthorizationUsed event: the
// event's id, the payer, the nonce.
func usedTopics(auth *Authorization) [3]common.Hash {
	return [3]common.Hash{token.Events["AuthorizationUsed"].ID, common.BytesToHash(auth.From.Bytes()), auth.Nonce}
}
