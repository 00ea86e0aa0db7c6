package evm_test

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

// TestAnvil_IsRevert tells the node's answers apart on anvil: a call that
// reverts (with a reason, or with none) is a revert; a call at a block
// past the node's head, as a call at "latest" fails when a
// reorganisation shortens the chain under it, is not (it was, and a good
// payment in flight during a reorganisation was refused 402).
func TestAnvil_IsRevert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
	empty := common.HexToAddress("0x00000000000000000000000000000000000e3e7e")
	transfer := append(common.FromHex("0xa9059cbb"), append(common.LeftPadBytes(empty.Bytes(), 32), common.LeftPadBytes(big.NewInt(1).Bytes(), 32)...)...)
	head, err := node.Client.BlockNumber(ctx)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		msg    ethereum.CallMsg
		block  *big.Int
		revert bool
	}{
		{name: "transfer beyond the balance", msg: ethereum.CallMsg{From: empty, To: &devchain.USDC, Data: transfer}, revert: true},
		{name: "unknown function, no reason", msg: ethereum.CallMsg{From: empty, To: &devchain.USDC, Data: common.FromHex("0xdeadbeef")}, revert: true},
		{name: "block past the head", msg: ethereum.CallMsg{From: empty, To: &devchain.USDC, Data: transfer}, block: new(big.Int).SetUint64(head + 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := node.Client.CallContract(ctx, tc.msg, tc.block)
			require.Error(t, err)
			require.Equal(t, tc.revert, evm.IsRevert(err), "%v", err)
		})
	}
}
