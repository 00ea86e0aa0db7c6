package evm

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/x402d/x402d/internal/clock"
)

// nonces is the relayer's account of its nonces on one chain, as this
// process sees it: the chain's count of the relayer's mined transactions
// (the floor of every allocation), and the transactions this process sent
// and awaits, by nonce, until they are seen mined. Allocation itself is the
// NonceStore's, shared by every process sending with the key; so is the
// record of each nonce's signed transaction, kept until the block that
// mined it is final.
//
// mu guards own, mined, minedKnown and changes. Where both are held,
// receipts.mu is taken first (receipts.register); mu is never held while
// calling out (the node, the NonceStore, another part's lock).
type nonces struct {
	clock    clock.Clock
	network  string
	address  common.Address
	backend  Backend
	store    NonceStore
	owner    string
	finality *finality
	logger   *slog.Logger
	// forgetEvery is the shortest time between two forgettings of the
	// final nonces on a receipt (RelayerConfig.KeepEvery).
	forgetEvery time.Duration

	mu sync.Mutex
	// own holds this process's transactions awaited, by nonce.
	own map[uint64]*ownTx
	// mined is the chain's count of the relayer's mined transactions as
	// last known (once minedKnown): read from the node, or raised by a
	// receipt.
	mined      uint64
	minedKnown bool
	// changes counts the changes of mined, so that a read of the node knows
	// whether mined changed while it was in flight (readMined).
	changes uint64

	// lastForget is when a receipt last had the NonceStore forget the
	// final nonces (unix nanoseconds; onReceipt).
	lastForget atomic.Int64
}

// ownTx is a transaction this process sent and still awaits: its latest
// version (a replacement has the same nonce and call, higher fees), every
// hash it had, and when it was last sent. Its fields are nonces.mu's.
type ownTx struct {
	tx     *types.Transaction
	hashes []common.Hash
	sentAt time.Time
	// failed is set when its last send got no answer or an error that may
	// pass: the keeper sends it again.
	failed bool
}

// floor returns the chain's count of the relayer's mined transactions, as
// last known (read from the node when never read): the lowest nonce an
// allocation may give.
func (n *nonces) floor(ctx context.Context) (uint64, error) {
	n.mu.Lock()
	mined, known := n.mined, n.minedKnown
	n.mu.Unlock()
	if known {
		return mined, nil
	}
	return n.readMined(ctx)
}

// readMined reads the chain's count of the relayer's mined transactions
// from the node and takes it as the count known: the one rule of every
// read. The count may go down: a reorganisation undid the transactions from
// it on, which the keeper then gives to the node again from their records
// (and it is logged). But a count that changed while the read was in flight
// (a receipt raised it, another read took a newer answer) is newer than this
// read's lower answer, and stays.
func (n *nonces) readMined(ctx context.Context) (uint64, error) {
	n.mu.Lock()
	seen := n.changes
	n.mu.Unlock()
	count, err := n.backend.NonceAt(ctx, n.address, nil)
	if err != nil {
		return 0, fmt.Errorf("read relayer nonce: %w", err)
	}
	n.mu.Lock()
	before, known := n.mined, n.minedKnown
	if known && count < before && n.changes != seen {
		count = before
	}
	if !known || count != before {
		n.mined, n.minedKnown = count, true
		n.changes++
	}
	n.mu.Unlock()
	if known && count < before {
		n.logger.WarnContext(ctx, "the relayer's mined transactions went back: a reorganisation undid them, and they are given to the node again",
			"network", n.network, "mined", count, "was", before)
	}
	return count, nil
}

// allocate returns a nonce for a new transaction: the NonceStore's next,
// at least the chain's count of mined transactions.
func (n *nonces) allocate(ctx context.Context) (uint64, error) {
	floor, err := n.floor(ctx)
	if err != nil {
		return 0, err
	}
	nonce, err := n.store.AllocateNonce(ctx, n.network, n.address, floor, n.owner)
	if err != nil {
		return 0, fmt.Errorf("allocate relayer nonce: %w", err)
	}
	return nonce, nil
}

// record writes tx to the NonceStore, so that this process or another can
// send it again, and tracks it as this process's.
func (n *nonces) record(ctx context.Context, tx *types.Transaction) error {
	raw, err := tx.MarshalBinary()
	if err != nil {
		return fmt.Errorf("encode transaction: %w", err)
	}
	if err := n.store.RecordNonce(ctx, n.network, n.address, tx.Nonce(), n.owner, raw); err != nil {
		return fmt.Errorf("record relayer transaction %d: %w", tx.Nonce(), err)
	}
	n.track(tx)
	return nil
}

// track records tx as this process's latest transaction of its nonce.
func (n *nonces) track(tx *types.Transaction) {
	n.mu.Lock()
	defer n.mu.Unlock()
	o := n.own[tx.Nonce()]
	if o == nil {
		o = &ownTx{}
		n.own[tx.Nonce()] = o
	}
	o.tx, o.sentAt, o.failed = tx, n.clock.Now(), false
	o.hashes = append(o.hashes, tx.Hash())
}

// untrack stops awaiting nonce: it is not this process's to wait for.
func (n *nonces) untrack(nonce uint64) {
	n.mu.Lock()
	delete(n.own, nonce)
	n.mu.Unlock()
}

// markFailed marks this process's transaction of nonce to be sent again
// by the keeper.
func (n *nonces) markFailed(nonce uint64) {
	n.mu.Lock()
	if o := n.own[nonce]; o != nil {
		o.failed = true
	}
	n.mu.Unlock()
}

// sent notes what a node's answer to tx says of its nonce: taken, sent
// now; used by a mined transaction, no longer awaited; unanswered or
// refused, to be sent again by the keeper.
func (n *nonces) sent(tx *types.Transaction, outcome sendOutcome) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch o := n.own[tx.Nonce()]; {
	case outcome == sendNonceUsed:
		delete(n.own, tx.Nonce())
	case o == nil:
	case outcome == sendTaken:
		o.failed, o.sentAt = false, n.clock.Now()
	case outcome == sendUnanswered || outcome == sendRefused:
		o.failed = true
	}
}

// replacements returns the other hashes of the transaction of this
// process that had hash (replacements sent before a wait for hash began).
func (n *nonces) replacements(hash common.Hash) []common.Hash {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []common.Hash
	for _, o := range n.own {
		if slices.Contains(o.hashes, hash) {
			for _, h := range o.hashes {
				if h != hash {
					out = append(out, h)
				}
			}
		}
	}
	return out
}

// onReceipt records that the transaction hash of this process is mined: its
// nonce and those below are forgotten here at once (minedTx), and in the
// NonceStore once final (finality.forgetBelow), at most once per
// forgetEvery. The keeper forgets them too, but it runs only every few
// seconds or behind a long wait: on a chain whose receipts come sooner,
// memory and the store would keep a transaction per settlement for ever.
// So they hold the transactions in flight and those not yet final.
func (n *nonces) onReceipt(ctx context.Context, hash common.Hash) {
	n.minedTx(hash)
	now, last := n.clock.Now().UnixNano(), n.lastForget.Load()
	if now-last < int64(n.forgetEvery) || !n.lastForget.CompareAndSwap(last, now) {
		return
	}
	n.mu.Lock()
	floor, known := n.mined, n.minedKnown
	n.mu.Unlock()
	if !known {
		return
	}
	if _, err := n.store.OutstandingNonces(ctx, n.network, n.address, n.finality.forgetBelow(floor), floor); err != nil {
		n.logger.WarnContext(ctx, "relayer could not forget its mined nonces", "network", n.network, "error", err)
	}
}

// minedTx forgets this process's transactions of the nonce of hash, whose
// receipt came, and of every lower nonce, and raises the count of mined
// transactions past it: an account's transactions are mined in nonce order.
func (n *nonces) minedTx(hash common.Hash) {
	n.mu.Lock()
	defer n.mu.Unlock()
	nonce, found := uint64(0), false
	for k, o := range n.own {
		if slices.Contains(o.hashes, hash) {
			nonce, found = k, true
			break
		}
	}
	if !found {
		return
	}
	for k := range n.own {
		if k <= nonce {
			delete(n.own, k)
		}
	}
	if n.minedKnown && nonce+1 > n.mined {
		n.mined = nonce + 1
		n.changes++
	}
}

// awaited forgets this process's transactions below mined and returns the
// nonces of the others.
func (n *nonces) awaited(mined uint64) []uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []uint64
	for k := range n.own {
		if k < mined {
			delete(n.own, k)
			continue
		}
		out = append(out, k)
	}
	return out
}

// touch records in the NonceStore that this process, alive, still awaits
// nonces: they are not another process's to send again or fill.
func (n *nonces) touch(ctx context.Context, nonces []uint64) error {
	if err := n.store.TouchNonces(ctx, n.network, n.address, n.owner, nonces); err != nil {
		return fmt.Errorf("touch outstanding nonces: %w", err)
	}
	return nil
}

// outstanding has the NonceStore forget the nonces final and returns those
// from mined on, whichever process allocated them, lowest first.
func (n *nonces) outstanding(ctx context.Context, mined uint64) ([]OutstandingNonce, error) {
	out, err := n.store.OutstandingNonces(ctx, n.network, n.address, n.finality.forgetBelow(mined), mined)
	if err != nil {
		return nil, fmt.Errorf("read outstanding nonces: %w", err)
	}
	return out, nil
}

// adopt records in the NonceStore that this process acted last on nonce,
// another process's, whose transaction raw it sent again.
func (n *nonces) adopt(ctx context.Context, nonce uint64, raw []byte) error {
	return n.store.RecordNonce(ctx, n.network, n.address, nonce, n.owner, raw)
}

// ownState is what this process knows of its transaction of a nonce.
type ownState struct {
	tx     *types.Transaction
	sentAt time.Time
	failed bool
}

// ownOf returns this process's latest transaction of nonce, if it awaits
// one.
func (n *nonces) ownOf(nonce uint64) (ownState, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	o := n.own[nonce]
	if o == nil {
		return ownState{}, false
	}
	return ownState{tx: o.tx, sentAt: o.sentAt, failed: o.failed}, true
}

// held returns how many transactions this process awaits.
func (n *nonces) held() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.own)
}
