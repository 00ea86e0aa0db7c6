package evm_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
)

// TestAnvil_CheckChain checks Circle's USDC on anvil against the network
// table: Base's entry matches; an entry whose domain or decimals differ,
// the token renamed on chain, or a node of another chain are refused,
// naming the network and both values.
func TestAnvil_CheckChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
	base, ok := x402.NetworkByID("eip155:8453")
	require.True(t, ok)

	t.Run("Match", func(t *testing.T) {
		require.NoError(t, evm.CheckChain(ctx, base.ID, node.Client))
		require.NoError(t, evm.CheckToken(ctx, node.Client, base))
	})

	t.Run("TableDiffers", func(t *testing.T) {
		wrong := base
		wrong.Name, wrong.Version, wrong.Decimals = "USDC", "1", 18
		err := evm.CheckToken(ctx, node.Client, wrong)
		require.Error(t, err)
		for _, want := range []string{
			`check eip155:8453: token 0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913: name() is "USD Coin" on chain, "USDC" in the network table`,
			`check eip155:8453: token 0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913: version() is "2" on chain, "1" in the network table`,
			`check eip155:8453: token 0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913: decimals() is "6" on chain, "18" in the network table`,
		} {
			require.Contains(t, err.Error(), want)
		}
	})

	t.Run("NotAToken", func(t *testing.T) {
		wrong := base
		wrong.Asset = "0x000000000000000000000000000000000000bEEF"
		require.ErrorContains(t, evm.CheckToken(ctx, node.Client, wrong), "check eip155:8453: token 0x000000000000000000000000000000000000bEEF: name(): the contract answers no string")
	})

	t.Run("OtherChain", func(t *testing.T) {
		require.ErrorContains(t, evm.CheckChain(ctx, "eip155:42161", node.Client), "check eip155:42161: the RPC endpoint serves chain 8453, the network's is 42161")
	})

	t.Run("TokenRenamed", func(t *testing.T) {
		renamed := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
		require.NoError(t, renamed.RenameUSDC(ctx, "USD Coin (bridged)"))
		require.ErrorContains(t, evm.CheckChain(ctx, base.ID, renamed.Client),
			`check eip155:8453: token 0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913: name() is "USD Coin (bridged)" on chain, "USD Coin" in the network table`)
		v, err := evm.NewVerifier(&evm.VerifierConfig{Chains: map[string]evm.Reader{base.ID: renamed.Client}})
		require.NoError(t, err)
		require.ErrorContains(t, v.CheckChains(ctx), `name() is "USD Coin (bridged)" on chain`)
	})
}
