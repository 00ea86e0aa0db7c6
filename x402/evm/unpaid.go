package evm

import (
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402d/x402d/internal/bounded"
)

// unpaidKey names a payer's holding of one asset on one network.
type unpaidKey struct {
	network      string
	asset, payer common.Address
}

// unpaidEntry says that a payer held less than below until until.
type unpaidEntry struct {
	below *big.Int
	until time.Time
}

// unpaidCache remembers the payers found unable to pay (a balance under
// the amount, or a transfer that reverted for the balance) for a short
// while, so that a payer who sends payment after payment from an empty
// wallet is refused again without the chain. It is bounded in entries.
type unpaidCache struct {
	ttl     time.Duration
	entries *bounded.Map[unpaidKey, unpaidEntry]
}

func newUnpaidCache(ttl time.Duration, entries int) *unpaidCache {
	return &unpaidCache{ttl: ttl, entries: bounded.New[unpaidKey, unpaidEntry](entries)}
}

// cannotPay reports whether key's payer was found, less than the cache's
// time ago, to hold less than value.
func (c *unpaidCache) cannotPay(key unpaidKey, value *big.Int, now time.Time) bool {
	e, ok := c.entries.Get(key)
	return ok && now.Before(e.until) && value.Cmp(e.below) >= 0
}

// remember records that key's payer holds less than below now.
func (c *unpaidCache) remember(key unpaidKey, below *big.Int, now time.Time) {
	c.entries.Put(key, unpaidEntry{below: below, until: now.Add(c.ttl)})
}

// revertsForBalance reports whether a token's revert message says the
// payer's balance is under the amount: FiatToken's and OpenZeppelin 4's
// message, OpenZeppelin 5's custom error. A token checks the
// authorization (window, nonce, signature) before it moves the funds, so
// such a revert also says the authorization itself is good.
func revertsForBalance(msg string) bool {
	return strings.Contains(msg, "exceeds balance") || strings.Contains(msg, "ERC20InsufficientBalance")
}
