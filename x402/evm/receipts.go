package evm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// receipts hands the relayer's settlements on one chain the receipts of
// the transactions they await: a wait asks for its receipt once, then
// waits for scans of new blocks (one eth_getBlockReceipts per block,
// however many wait) to bring it, looking at the head at the chain's pace
// (firstPause, the time receipts have been taking).
//
// mu guards waiters and scanned; scanMu serialises scans and guards
// lastScan, and is taken before mu. No lock of another part is taken while
// either is held. lag and noBlockReceipts are atomics.
type receipts struct {
	backend Backend
	// nonces names the replacements of a transaction awaited, and hears of
	// each receipt (nonces.onReceipt).
	nonces *nonces
	// passes asks the keeper for a pass, when a wait lasts keepEvery.
	passes passRequests
	// timeout, maxPoll, headCacheFor and keepEvery are ReceiptTimeout,
	// MaxPollInterval, HeadCacheFor and KeepEvery of RelayerConfig.
	timeout, maxPoll, headCacheFor, keepEvery time.Duration
	clock                                     clock.Clock

	mu sync.Mutex
	// waiters maps each hash awaited to its wait (a transaction and its
	// replacements share one).
	waiters map[common.Hash]*receiptWait
	// scanned is the last block whose receipts were handed to waiters.
	scanned uint64

	scanMu sync.Mutex
	// lastScan is when the head was last read, so that many waiters read
	// it about as often as one does (scan).
	lastScan time.Time

	// lag is how long receipts took to come, from the start of their wait
	// (an average over the recent ones, in nanoseconds): it sets when a new
	// wait first looks (firstPause).
	lag atomic.Int64
	// noBlockReceipts is set once the node answered that it has no
	// eth_getBlockReceipts: waiters then ask for their own receipts.
	noBlockReceipts atomic.Bool
	// head is the newest block number read (scan), and headAt when (unix
	// nanoseconds of clock; 0 before the first): freshHead.
	head, headAt atomic.Int64

	// outcomes keeps what the last receipts awaited say (outcome).
	outcomes outcomes
}

func newReceipts(backend Backend, nonces *nonces, passes passRequests, cfg *RelayerConfig) *receipts {
	return &receipts{backend: backend, nonces: nonces, passes: passes, clock: cfg.Clock, timeout: cfg.ReceiptTimeout, maxPoll: cfg.MaxPollInterval,
		headCacheFor: cfg.HeadCacheFor, keepEvery: cfg.KeepEvery, waiters: map[common.Hash]*receiptWait{}}
}

// receiptWait is a transaction awaited by one or more settlements (the
// payments of one batch, retried on their own): ready is closed once its
// receipt is known. Its fields are receipts.mu's; receipt may be read
// without it once ready is closed.
type receiptWait struct {
	ready   chan struct{}
	receipt *types.Receipt
	waiters int
	// hashes are the transactions awaited: the first, and its
	// replacements (follow).
	hashes []common.Hash
}

// deliver hands w its receipt, once; the caller holds receipts.mu.
func (w *receiptWait) deliver(r *types.Receipt) {
	if w.receipt == nil {
		w.receipt = r
		close(w.ready)
	}
}

// errReceiptTimeout is a receipt that did not come within ReceiptTimeout.
var errReceiptTimeout = errors.New("no receipt within the receipt timeout")

// errNoBlockReceipts is a node without eth_getBlockReceipts.
var errNoBlockReceipts = errors.New("the node has no eth_getBlockReceipts")

// outcome returns what the receipt of hash says of the settlements its
// transaction carries: read once per transaction, however many settlements
// (the transfers of a batch, their retries) ask; otherwise as wait.
func (rc *receipts) outcome(ctx context.Context, hash common.Hash) (*txOutcome, error) {
	if o, ok := rc.outcomes.get(hash); ok {
		return o, nil
	}
	receipt, err := rc.wait(ctx, hash)
	if err != nil {
		return nil, err
	}
	return rc.outcomes.of(hash, receipt), nil
}

// wait waits for the receipt of hash: it asks for it once, then waits for
// a scan of new blocks to bring it, looking at the head after firstPause
// and then less often, up to maxPoll. A wait that lasts keepEvery nudges
// the keeper: it may be behind a gap, a dropped or an underpriced
// transaction.
func (rc *receipts) wait(ctx context.Context, hash common.Hash) (*types.Receipt, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, rc.timeout, errReceiptTimeout)
	defer cancel()
	// Registered before the first ask: a transaction mined after that ask
	// is in a block the scans have not reached yet.
	w, err := rc.register(ctx, hash)
	if err != nil {
		return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), err)
	}
	defer rc.unregister(hash)
	receipt, err := rc.backend.TransactionReceipt(ctx, hash)
	if err == nil {
		rc.deliver(w, receipt)
		rc.nonces.onReceipt(ctx, receipt.TxHash)
		return receipt, nil
	}
	if !errors.Is(err, ethereum.NotFound) && !ethrpc.IsIndexing(err) {
		return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), err)
	}
	start := rc.clock.Now()
	maxPause := rc.maxPoll
	pause := rc.firstPause(maxPause)
	// Until twice the time receipts have been taking, the pause stays
	// (a block mined then is found within it); only a wait that lasts
	// longer than that looks less and less often.
	steadyFor := 2 * time.Duration(rc.lag.Load())
	t := rc.clock.NewTimer(pause)
	defer t.Stop()
	for looked := false; ; looked = true {
		if looked {
			t.Reset(pause)
		}
		select {
		case <-w.ready:
			rc.observeLag(rc.clock.Now().Sub(start))
			rc.nonces.onReceipt(ctx, w.receipt.TxHash)
			return w.receipt, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), context.Cause(ctx))
		case <-t.C():
		}
		// The head is read unless another wait read it within this wait's
		// pause: a block mined meanwhile is then found at most a pause
		// later, and many waits read the head about as often as the
		// one with the shortest pause, not once each.
		every := max(pause, rc.headCacheFor)
		if rc.clock.Now().Sub(start) >= steadyFor {
			pause = min(pause*2, maxPause)
		}
		if rc.clock.Now().Sub(start) >= rc.keepEvery {
			rc.passes.ask()
		}
		err := rc.scan(ctx, every)
		if err == nil {
			continue
		}
		if !errors.Is(err, errNoBlockReceipts) {
			return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), err)
		}
		// A node without block receipts: ask for this one, less often.
		maxPause = max(rc.maxPoll, time.Second)
		receipt, err := rc.backend.TransactionReceipt(ctx, hash)
		if err == nil {
			rc.observeLag(rc.clock.Now().Sub(start))
			rc.deliver(w, receipt)
			rc.nonces.onReceipt(ctx, receipt.TxHash)
			return receipt, nil
		}
		if !errors.Is(err, ethereum.NotFound) && !ethrpc.IsIndexing(err) {
			return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), err)
		}
	}
}

// register records that hash is awaited and returns what its receipt
// arrives on. The first waiter after an idle spell reads the head, so that
// only blocks from then on are scanned.
func (rc *receipts) register(ctx context.Context, hash common.Hash) (*receiptWait, error) {
	w, fresh, err := rc.add(ctx, hash)
	if err != nil || !fresh {
		return w, err
	}
	// Replacements of hash sent before the wait began are awaited too;
	// one sent from now on finds the wait and is added by follow. Read
	// with no lock of receipts held: nonces keeps its own.
	for _, h := range rc.nonces.replacements(hash) {
		rc.follow(hash, h)
	}
	return w, nil
}

// add records a waiter of hash; fresh is true when hash was not awaited.
func (rc *receipts) add(ctx context.Context, hash common.Hash) (w *receiptWait, fresh bool, err error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if w, ok := rc.waiters[hash]; ok {
		w.waiters++
		return w, false, nil
	}
	if len(rc.waiters) == 0 {
		readAt := rc.clock.Now()
		head, err := rc.backend.BlockNumber(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("read block number: %w", err)
		}
		rc.sawHead(head, readAt)
		rc.scanned = head
	}
	w = &receiptWait{ready: make(chan struct{}), waiters: 1, hashes: []common.Hash{hash}}
	rc.waiters[hash] = w
	return w, true, nil
}

// unregister forgets a waiter of hash.
func (rc *receipts) unregister(hash common.Hash) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if w, ok := rc.waiters[hash]; ok {
		if w.waiters--; w.waiters <= 0 {
			for _, h := range w.hashes {
				delete(rc.waiters, h)
			}
		}
	}
}

// deliver hands w a receipt a waiter found by asking for it, so that the
// other waiters of the same transaction have it too.
func (rc *receipts) deliver(w *receiptWait, r *types.Receipt) {
	rc.mu.Lock()
	w.deliver(r)
	rc.mu.Unlock()
}

// follow makes the settlements awaiting the receipt of old await that of
// next too (a replacement: whichever is mined is the one). Following a
// replacement twice does nothing.
func (rc *receipts) follow(old, next common.Hash) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if w, ok := rc.waiters[old]; ok && !slices.Contains(w.hashes, next) {
		rc.waiters[next] = w
		w.hashes = append(w.hashes, next)
	}
}

// held returns how many hashes are awaited.
func (rc *receipts) held() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.waiters)
}

// firstPause is how long a new wait for a receipt pauses before its first
// look at the head: a quarter of how long receipts took to come on this
// chain, at least 2 ms and at most maxPause. On a chain that mines on
// arrival it is 2 ms; on one with 2 s blocks, maxPause from the start, so
// that the waits started while a block is awaited do not add reads of the
// head.
func (rc *receipts) firstPause(maxPause time.Duration) time.Duration {
	return min(max(time.Duration(rc.lag.Load())/4, 2*time.Millisecond), maxPause)
}

// observeLag adds the time a receipt took to come to lag's average (an
// exponential one, over about the last eight).
// sawHead records head, the chain's newest block number as read at readAt
// (when the read was asked).
func (rc *receipts) sawHead(head uint64, readAt time.Time) {
	rc.head.Store(int64(head))
	rc.headAt.Store(readAt.UnixNano())
}

// freshHead returns the newest block number read, when it was read less
// than maxPoll ago: while settlements await receipts the head is read at
// least that often (wait), and a later block would most likely have been
// seen. ok is false otherwise (no wait is going on).
func (rc *receipts) freshHead() (head uint64, ok bool) {
	at := rc.headAt.Load()
	if at == 0 || rc.clock.Now().Sub(time.Unix(0, at)) >= rc.maxPoll {
		return 0, false
	}
	return uint64(rc.head.Load()), true
}

func (rc *receipts) observeLag(d time.Duration) {
	for {
		old := rc.lag.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if rc.lag.CompareAndSwap(old, next) {
			return
		}
	}
}

// scan reads the head, at most once per every, and hands the receipts of
// each block mined since the last scan to their waiters: one receipts
// request per block, whatever the number of waiters (a node answers a
// single receipt lookup by reading the whole block, so per-waiter lookups
// grew with the square of the block's size).
func (rc *receipts) scan(ctx context.Context, every time.Duration) error {
	if rc.noBlockReceipts.Load() {
		return errNoBlockReceipts
	}
	rc.scanMu.Lock()
	defer rc.scanMu.Unlock()
	if rc.clock.Now().Sub(rc.lastScan) < every {
		return nil
	}
	rc.lastScan = rc.clock.Now()
	head, err := rc.backend.BlockNumber(ctx)
	if err != nil {
		return fmt.Errorf("read block number: %w", err)
	}
	rc.sawHead(head, rc.lastScan)
	rc.mu.Lock()
	from := rc.scanned + 1
	rc.mu.Unlock()
	for n := from; n <= head; n++ {
		receipts, err := rc.blockReceipts(ctx, n)
		if err != nil {
			return err
		}
		rc.mu.Lock()
		for _, r := range receipts {
			if w, ok := rc.waiters[r.TxHash]; ok {
				w.deliver(r)
			}
		}
		if n > rc.scanned {
			rc.scanned = n
		}
		rc.mu.Unlock()
	}
	return nil
}

// blockReceipts returns the receipts of block n in one request, or
// errNoBlockReceipts from a node without eth_getBlockReceipts (which it
// remembers).
func (rc *receipts) blockReceipts(ctx context.Context, n uint64) ([]*types.Receipt, error) {
	if rc.noBlockReceipts.Load() {
		return nil, errNoBlockReceipts
	}
	receipts, err := rc.backend.BlockReceipts(ctx, rpc.BlockNumberOrHashWithNumber(rpc.BlockNumber(n)))
	if ethrpc.IsMethodNotFound(err) {
		rc.noBlockReceipts.Store(true)
		return nil, errNoBlockReceipts
	}
	if err != nil {
		return nil, fmt.Errorf("receipts of block %d: %w", n, err)
	}
	return receipts, nil
}
