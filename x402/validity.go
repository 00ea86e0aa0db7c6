package x402

import (
	"context"
	"math/big"
	"time"
)

type validForKey struct{}

// WithValidFor returns ctx asking a SchemeVerifier to refuse a payment
// whose authorization expires less than d after its verification: the
// operation's time budget and the settlement window, so that the work it
// pays for can end and be settled before the payment stops being
// settleable. A scheme whose payments name no such time (Solana's expire
// with their blockhash, a minute or so) applies its own margin only.
func WithValidFor(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, validForKey{}, d)
}

// ValidFor returns the least validity ctx asks of a payment (WithValidFor),
// or 0.
func ValidFor(ctx context.Context) time.Duration {
	d, _ := ctx.Value(validForKey{}).(time.Duration)
	return d
}

// BalanceReader reads payers' balances, against which verification
// reserves the payments in flight. *Seller implements it.
type BalanceReader interface {
	// Reserves reports whether payments on network are reserved against
	// their payer's balance: whether Balance can read it.
	Reserves(network string) bool
	// Balance returns what p's payer holds of p's asset on p's network,
	// read from the chain now. An error means the chain could not be read.
	Balance(ctx context.Context, p *Payment) (*big.Int, error)
}
