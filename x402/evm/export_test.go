package evm

import (
	"context"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402d/x402d/internal/clock"
)

// Held returns what r holds for settlements on all its chains: the
// transactions it awaits (own), the receipts awaited (waiters), the payments
// with a transaction sent (sent), and the nonces its in-memory NonceStore
// keeps (0 with another store). Tests check that they are bounded by the
// settlements in flight, not by those ever made.
func Held(r *Relayer) (own, waiters, sent, nonces int) {
	for _, c := range r.chains {
		own += c.nonces.held()
		waiters += c.receipts.held()
	}
	r.sentMu.Lock()
	sent = len(r.sent)
	r.sentMu.Unlock()
	if m, ok := r.cfg.Nonces.(*memNonces); ok {
		m.mu.Lock()
		for _, out := range m.out {
			nonces += len(out)
		}
		m.mu.Unlock()
	}
	return own, waiters, sent, nonces
}

// PayerCodes returns the answers of a chain's payerCodes on backend, whose
// head is fresh for maxPoll after sawHead records it (by clk).
func PayerCodes(backend Backend, clk clock.Clock, maxPoll time.Duration) (hasCode func(context.Context, common.Address) (bool, error), sawHead func(uint64)) {
	rc := &receipts{backend: backend, clock: clk, maxPoll: maxPoll}
	c := &payerCodes{backend: backend, heads: rc}
	return c.hasCode, func(head uint64) { rc.sawHead(head, clk.Now()) }
}
