package x402

import "context"

type chainGuardKey struct{}

// WithChainGuard returns ctx carrying guard, which a SchemeVerifier calls
// (GuardChain) once a payment has passed every check it can make without
// the chain, before it first reads the chain for it. An error of guard ends
// the verification with that error: the caller's way to bound the chain
// reads its clients cause (a rate per client address, say).
func WithChainGuard(ctx context.Context, guard func() error) context.Context {
	return context.WithValue(ctx, chainGuardKey{}, guard)
}

// GuardChain calls the guard ctx carries (WithChainGuard), if any, before a
// SchemeVerifier reads the chain to verify a payment.
func GuardChain(ctx context.Context) error {
	if guard, ok := ctx.Value(chainGuardKey{}).(func() error); ok && guard != nil {
		return guard()
	}
	return nil
}
