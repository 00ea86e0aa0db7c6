package api

import (
	"context"
	"math/big"
	"sync"
	"time"

	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// A verified payment is reserved against its payer's balance as its call is
// admitted (store.Reserve): the verification's simulated transfer shows the
// balance covers it, which is enough while nothing else of the payer's is in
// flight; otherwise the payment is weighed against a balance read from the
// chain, by this payment or, within store.ReserveFresh, by another payment
// of the payer (balanceCache), so that a payer's many concurrent calls cost
// about one read of its balance every few seconds, not one each.

// maxBalanceReads bounds the balance reads of one payment's reservation
// (store.ReserveNeedsBalance): past them it is answered 503
// verification_unavailable, nothing charged.
const maxBalanceReads = 2

// balanceCacheEntries bounds the payers whose balance a process keeps.
const balanceCacheEntries = 10_000

// reservation returns the reservation of payment, verified for call
// callID, against its payer's balance, or nil when payments of its network
// are not reserved (their scheme reads no balances, x402.BalanceReader).
// Its balance is the one read for the payer moments ago, if any.
func (s *Server) reservation(callID string, payment *x402.Payment) *store.Reservation {
	if s.balances == nil || payment.ValidBefore.IsZero() || !s.balances.Reserves(payment.Network) {
		return nil
	}
	amount, ok := new(big.Int).SetString(payment.Amount, 10)
	if !ok {
		return nil
	}
	until := payment.ValidBefore
	if payment.ReserveUntil.After(until) {
		until = payment.ReserveUntil
	}
	r := &store.Reservation{CallID: callID, Network: payment.Network, Asset: payment.Asset, Payer: payment.Payer,
		Amount: amount, ValidBefore: until, Read: payment.VerifiedAt}
	if b, read, ok := s.balanceCache.get(balanceKey{r.Network, r.Asset, r.Payer}, s.cfg.Clock.Now()); ok {
		r.Balance, r.Read, r.Cached = b, read, true
	}
	return r
}

// readBalance reads the balance of r's payer from the chain into r, and
// keeps it for the payer's next payments.
func (s *Server) readBalance(ctx context.Context, r *store.Reservation, payment *x402.Payment) error {
	read := s.cfg.Clock.Now().UTC()
	b, err := s.balances.Balance(ctx, payment)
	if err != nil {
		return err
	}
	r.Balance, r.Read, r.Cached = b, read, false
	s.balanceCache.put(balanceKey{r.Network, r.Asset, r.Payer}, b, read)
	return nil
}

// balanceText is how a refusal for want of funds names the balance: as
// read, or, when it was not, as verification showed it.
func balanceText(balance, amount *big.Int) string {
	if balance == nil {
		return "at least " + amount.String()
	}
	return balance.String()
}

// balanceKey names a payer's balance of an asset on a network.
type balanceKey struct{ network, asset, payer string }

// balanceCache keeps the balances read for reservations while they are
// fresh (store.ReserveFresh), at most balanceCacheEntries of them.
type balanceCache struct {
	mu sync.Mutex
	m  map[balanceKey]balanceRead
}

type balanceRead struct {
	balance *big.Int
	read    time.Time
}

// get returns k's balance and when it was read, if that was less than
// store.ReserveFresh before now.
func (c *balanceCache) get(k balanceKey, now time.Time) (*big.Int, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || now.Sub(e.read) >= store.ReserveFresh {
		return nil, time.Time{}, false
	}
	return e.balance, e.read, true
}

// put keeps k's balance, read at read, unless a later read is kept.
func (c *balanceCache) put(k balanceKey, balance *big.Int, read time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[balanceKey]balanceRead{}
	}
	if e, ok := c.m[k]; ok && e.read.After(read) {
		return
	}
	if len(c.m) >= balanceCacheEntries {
		for k, e := range c.m {
			if read.Sub(e.read) >= store.ReserveFresh {
				delete(c.m, k)
			}
		}
		if len(c.m) >= balanceCacheEntries {
			clear(c.m)
		}
	}
	c.m[k] = balanceRead{balance: balance, read: read}
}
