package anviltest_test

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm/channel"
)

// TestStart_PlacesContracts starts anvil and reads Circle's USDC and
// Multicall3 at their Base addresses, and the state again after a restart.
func TestStart_PlacesContracts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})

	id, err := node.Client.ChainID(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(8453), id.Int64())

	token, err := contracts.Load(contracts.FiatTokenV2_2)
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
	read := func(method string) any {
		input, err := token.ABI.Pack(method)
		require.NoError(t, err)
		out, err := node.Client.CallContract(ctx, ethereum.CallMsg{To: &devchain.USDC, Data: input}, nil)
		require.NoError(t, err, method)
		v, err := token.ABI.Unpack(method, out)
		require.NoError(t, err)
		return v[0]
	}
	// The EIP-712 domain of USDC on Base: "USD Coin", version "2".
	require.Equal(t, "USD Coin", read("name"))
	require.Equal(t, "2", read("version"))
	require.Equal(t, "USDC", read("symbol"))
	require.Equal(t, uint8(6), read("decimals"))
	require.Equal(t, "10000000000000", read("totalSupply").(*big.Int).String())

	// The proxy is Circle's, handed to its admin: the admin may not call
	// the token through it.
	proxy, err := contracts.Load(contracts.FiatTokenProxy)
	require.NoError(t, err)
	code, err := node.Client.CodeAt(ctx, devchain.USDC, nil)
	require.NoError(t, err)
	require.Equal(t, proxy.DeployedBytecode, code)
	input, err := token.ABI.Pack("name")
	require.NoError(t, err)
	_, err = node.Client.CallContract(ctx, ethereum.CallMsg{From: anviltest.ProxyAdmin, To: &devchain.USDC, Data: input}, nil)
	require.ErrorContains(t, err, "Cannot call fallback function from the proxy admin")

	multicall, err := contracts.Load(contracts.Multicall3)
	require.NoError(t, err)
	code, err = node.Client.CodeAt(ctx, devchain.Multicall, nil)
	require.NoError(t, err)
	require.Equal(t, multicall.DeployedBytecode, code)

	// batch-settlement's contracts at the canonical addresses.
	for addr, name := range map[common.Address]string{
		channel.SettlementAddress: contracts.BatchSettlement, channel.CollectorAddress: contracts.ERC3009DepositCollector,
	} {
		a, err := contracts.Load(name)
		require.NoError(t, err)
		code, err := node.Client.CodeAt(ctx, addr, nil)
		require.NoError(t, err)
		require.Equal(t, a.DeployedBytecode, code, name)
	}

	require.NoError(t, node.Mine(ctx))
	head, err := node.Client.BlockNumber(ctx)
	require.NoError(t, err)
	node.Restart()
	after, err := node.Client.BlockNumber(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, after, head, "the restarted node keeps its blocks")
	require.Equal(t, "1000000000000", balance().String(), "the restarted node keeps its state")
}
