package evm_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
)

// TestRelayer_DevchainFinalByDefault follows a settlement on the devchain
// under Base's default finality (the node's safe block), as a service in
// rpc mode on `x402d devchain` does without FINALITY_EIP155_8453: the
// devchain tags its head safe, so that the settlement is final at the
// first look.
func TestRelayer_DevchainFinalByDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.Equal(t, evm.FinalityPolicy{Tag: evm.FinalitySafe}, evm.DefaultFinality("eip155:8453"))
	r := newRelayer(t)
	p, err := newVerifier(t).Verify(ctx, requirement(), newPayment(t, fundedKey(t, 25_000), requirement()).payload(t, requirement()))
	require.NoError(t, err)
	resp, err := r.Settle(ctx, p)
	require.NoError(t, err)
	require.True(t, resp.Success, resp.ErrorReason)
	require.NotNil(t, resp.Block, "a settlement under a safe-block policy is followed after its receipt")
	txs := []x402.FollowedTx{{Transaction: resp.Transaction, Block: *resp.Block}}
	final, err := r.Follow(ctx, "eip155:8453", txs)
	require.NoError(t, err)
	require.GreaterOrEqual(t, final, resp.Block.Number)
	require.Equal(t, x402.TxFinal, txs[0].State)
}
