package evm_test

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

// TestFindSettlement_PrunedDevchain settles a payment on a devchain that
// keeps only its newest blocks whole, once it has pruned more than half of
// its blocks, all stamped inside the payment's window: the search for the
// authorization's use starts at the oldest block the node still serves, so
// that FindSettlement finds the settlement, and a restarted relayer settling
// the payment again recognises its own transfer, as on a pruned node or a
// provider that keeps recent history only.
func TestFindSettlement_PrunedDevchain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pruned, err := devchain.New(ctx, &devchain.Config{DataDir: t.TempDir(), History: 64})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pruned.Close()) })
	client := pruned.Client()

	// A transfer a block until the blocks before the middle of the chain
	// are pruned (go-ethereum freezes blocks once a minute): a bisection
	// from block 0 reads a pruned block first.
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		oldest, err := pruned.OldestBlock()
		require.NoError(t, err)
		head, err := client.BlockNumber(ctx)
		require.NoError(t, err)
		if oldest > 0 && oldest > head/2 {
			t.Logf("blocks before %d pruned at block %d", oldest, head)
			break
		}
		require.True(t, time.Now().Before(deadline), "no block pruned by block %d", head)
		_, err = pruned.Transact(ctx, pruned.Account(6), &to, big.NewInt(1), nil)
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
	}
	_, err = client.HeaderByNumber(ctx, big.NewInt(1))
	require.ErrorIs(t, err, ethereum.NotFound, "the node no longer serves block 1")

	v, err := evm.NewVerifier(&evm.VerifierConfig{
		Chains:  map[string]evm.Reader{"eip155:8453": client},
		Relayer: pruned.Account(devchain.RelayerAccount).Address,
	})
	require.NoError(t, err)
	p, err := v.Verify(ctx, requirement(), newPayment(t, pruned.Account(3).Key, requirement()).payload(t, requirement()))
	require.NoError(t, err)
	relayer := func(t *testing.T) *evm.Relayer {
		t.Helper()
		r, err := evm.NewRelayer(&evm.RelayerConfig{
			Key:    pruned.Account(devchain.RelayerAccount).Key,
			Chains: map[string]evm.Backend{"eip155:8453": client},
		})
		require.NoError(t, err)
		require.NoError(t, r.Start(ctx))
		t.Cleanup(r.Stop)
		return r
	}
	first, err := relayer(t).Settle(ctx, p)
	require.NoError(t, err)
	require.True(t, first.Success, first.ErrorReason)

	hash, err := evm.FindSettlement(ctx, client, p, 0)
	require.NoError(t, err)
	require.Equal(t, common.HexToHash(first.Transaction), hash)
	again, err := relayer(t).Settle(ctx, p)
	require.NoError(t, err)
	require.Equal(t, onWire(first), onWire(again), "the settlement found again")
}
