package anviltest_test

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/x402/devchain"
)

// TestStart_PlacesContracts starts anvil and reads the token and Multicall3
// at their Base addresses, and the state again after a restart.
func TestStart_PlacesContracts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})

	id, err := node.Client.ChainID(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(8453), id.Int64())

	token, err := contracts.Load(contracts.DevUSDC)
	require.NoError(t, err)
	key, err := devchain.DeriveKey(devchain.Mnemonic, 3)
	require.NoError(t, err)
	holder := crypto.PubkeyToAddress(key.PublicKey)
	balance := func() *big.Int {
		input, err := token.ABI.Pack("balanceOf", holder)
		require.NoError(t, err)
		out, err := node.Client.CallContract(ctx, ethereum.CallMsg{To: &devchain.USDC, Data: input}, nil)
		require.NoError(t, err)
		v, err := token.ABI.Unpack("balanceOf", out)
		require.NoError(t, err)
		return v[0].(*big.Int)
	}
	require.Equal(t, "1000000000000", balance().String())
	input, err := token.ABI.Pack("name")
	require.NoError(t, err)
	out, err := node.Client.CallContract(ctx, ethereum.CallMsg{To: &devchain.USDC, Data: input}, nil)
	require.NoError(t, err)
	name, err := token.ABI.Unpack("name", out)
	require.NoError(t, err)
	require.Equal(t, "USD Coin", name[0])

	code, err := node.Client.CodeAt(ctx, devchain.Multicall, nil)
	require.NoError(t, err)
	require.NotEmpty(t, code)

	require.NoError(t, node.Mine(ctx))
	head, err := node.Client.BlockNumber(ctx)
	require.NoError(t, err)
	node.Restart()
	after, err := node.Client.BlockNumber(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, after, head, "the restarted node keeps its blocks")
	require.Equal(t, "1000000000000", balance().String(), "the restarted node keeps its state")
}
