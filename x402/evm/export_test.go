package evm

// Held returns what r holds for settlements on all its chains: the
// transactions it awaits (own), the receipts awaited (waiters), the payments
// with a transaction sent (sent), and the nonces its in-memory NonceStore
// keeps (0 with another store). Tests check that they are bounded by the
// settlements in flight, not by those ever made.
func Held(r *Relayer) (own, waiters, sent, nonces int) {
	for _, c := range r.chains {
		c.ownMu.Lock()
		own += len(c.own)
		c.ownMu.Unlock()
		c.receiptsMu.Lock()
		waiters += len(c.waiters)
		c.receiptsMu.Unlock()
	}
	r.sentMu.Lock()
	sent = len(r.sent)
	r.sentMu.Unlock()
	if m, ok := r.nonces.(*memNonces); ok {
		m.mu.Lock()
		for _, out := range m.out {
			nonces += len(out)
		}
		m.mu.Unlock()
	}
	return own, waiters, sent, nonces
}
