// Package evmtest starts a devchain with the service's EVM verifier and
// relayer on it, for tests that pay over the real chain code.
package evmtest

import (
	"context"
	"testing"

	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

// Stack is a running devchain and the verifier and relayer of it.
type Stack struct {
	// Chain is the devchain.
	Chain *devchain.Chain
	// Verifier verifies payments against Chain.
	Verifier *evm.Verifier
	// Relayer settles payments on Chain from development account
	// devchain.RelayerAccount.
	Relayer *evm.Relayer
}

// New starts a devchain with a verifier and a started relayer of it, the
// relayer stopped and the devchain closed by tb's cleanup; tb fails if any
// cannot be built.
func New(tb testing.TB) *Stack {
	tb.Helper()
	chain, err := devchain.New(context.Background(), nil)
	if err != nil {
		tb.Fatalf("evmtest: start devchain: %v", err)
	}
	tb.Cleanup(func() { _ = chain.Close() })
	verifier, err := evm.NewVerifier(&evm.VerifierConfig{Chains: map[string]evm.Reader{chain.Network(): chain.Client()}})
	if err != nil {
		tb.Fatalf("evmtest: verifier: %v", err)
	}
	relayer, err := evm.NewRelayer(&evm.RelayerConfig{
		Key: chain.Account(devchain.RelayerAccount).Key, Chains: map[string]evm.Backend{chain.Network(): chain.Client()},
	})
	if err != nil {
		tb.Fatalf("evmtest: relayer: %v", err)
	}
	if err := relayer.Start(context.Background()); err != nil {
		tb.Fatalf("evmtest: start relayer: %v", err)
	}
	tb.Cleanup(relayer.Stop)
	return &Stack{Chain: chain, Verifier: verifier, Relayer: relayer}
}
