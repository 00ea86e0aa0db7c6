package evm

import (
	"sync"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
)

// txOutcome is what the receipt of a settlement transaction says, read
// once per transaction and handed to every settlement it carries: the
// receipt without its logs, and the authorizations whose AuthorizationUsed
// event it holds (a batch's transfers that went through). Asking whether a
// transfer went through is one lookup, whatever the number of transfers the
// transaction carries. It is not modified once built.
type txOutcome struct {
	// receipt is the transaction's receipt without its logs and bloom.
	receipt *types.Receipt
	// used holds the authorizations used, by token, payer and nonce.
	used map[usedAuth]struct{}
	// usedOf counts the authorizations used on each token.
	usedOf map[common.Address]int
}

// usedAuth names one AuthorizationUsed event: the token that emitted it,
// the payer (authorizer) and the nonce.
type usedAuth struct {
	asset common.Address
	payer common.Hash
	nonce common.Hash
}

// newTxOutcome reads receipt: one pass over its logs.
func newTxOutcome(receipt *types.Receipt) *txOutcome {
	o := &txOutcome{}
	trimmed := *receipt
	trimmed.Logs, trimmed.Bloom = nil, types.Bloom{}
	o.receipt = &trimmed
	if receipt.Status != types.ReceiptStatusSuccessful {
		return o
	}
	id := token.Events["AuthorizationUsed"].ID
	for _, l := range receipt.Logs {
		if len(l.Topics) != 3 || l.Topics[0] != id {
			continue
		}
		if o.used == nil {
			o.used, o.usedOf = map[usedAuth]struct{}{}, map[common.Address]int{}
		}
		k := usedAuth{asset: l.Address, payer: l.Topics[1], nonce: l.Topics[2]}
		if _, seen := o.used[k]; !seen {
			o.used[k] = struct{}{}
			o.usedOf[l.Address]++
		}
	}
	return o
}

// usedIn reports whether the transaction succeeded and holds the
// AuthorizationUsed event of auth on asset: the transfer of a batch went
// through.
func (o *txOutcome) usedIn(asset common.Address, auth *Authorization) bool {
	_, ok := o.used[usedAuth{asset: asset, payer: common.BytesToHash(auth.From.Bytes()), nonce: auth.Nonce}]
	return ok
}

// succeeded reports whether the transaction's status is success.
func (o *txOutcome) succeeded() bool { return o.receipt.Status == types.ReceiptStatusSuccessful }

// outcomesKept bounds the outcomes a chain keeps: those of the last
// transactions whose receipts came, so that a settlement retried after
// its first attempt (a job that timed out) finds its batch's outcome
// without reading the receipt again.
const outcomesKept = 256

// outcomes keeps the outcomes of the last outcomesKept transactions, by
// hash. mu guards its fields; no other lock is taken while it is held.
type outcomes struct {
	mu    sync.Mutex
	byTx  map[common.Hash]*txOutcome
	order []common.Hash // oldest first
}

// get returns the outcome of the transaction hash, if kept.
func (oc *outcomes) get(hash common.Hash) (*txOutcome, bool) {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	o, ok := oc.byTx[hash]
	return o, ok
}

// of returns the outcome of receipt, the receipt of the transaction hash
// (or of a replacement of it), read from receipt unless kept already, and
// keeps it under both hashes.
func (oc *outcomes) of(hash common.Hash, receipt *types.Receipt) *txOutcome {
	if o, ok := oc.get(receipt.TxHash); ok {
		oc.keep(hash, o)
		return o
	}
	o := newTxOutcome(receipt)
	oc.keep(receipt.TxHash, o)
	oc.keep(hash, o)
	return o
}

// keep keeps o under hash, dropping the oldest kept beyond outcomesKept.
func (oc *outcomes) keep(hash common.Hash, o *txOutcome) {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if _, ok := oc.byTx[hash]; ok {
		return
	}
	if oc.byTx == nil {
		oc.byTx = map[common.Hash]*txOutcome{}
	}
	if len(oc.order) >= outcomesKept {
		delete(oc.byTx, oc.order[0])
		oc.order = append(oc.order[:0], oc.order[1:]...)
	}
	oc.byTx[hash] = o
	oc.order = append(oc.order, hash)
}
