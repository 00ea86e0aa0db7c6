package evm_test

import (
	"context"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

// TestRelayerSend sends transactions of any call through the relayer on
// anvil with Circle's USDC, at the same time as settlements of the same
// relayer: each Send is awaited to its receipt, all share the relayer's
// one nonce sequence (no nonce twice, none left queued behind a gap), and
// a call that would revert is refused by its estimate without a nonce.
func TestRelayerSend(t *testing.T) {
	t.Parallel()
	b := setupAnvil(t, &anviltest.Config{BlockTime: -1})
	r := b.relayer(t, nil)
	const network = "eip155:8453"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	id, err := r.ChainID(network)
	require.NoError(t, err)
	require.Equal(t, int64(anviltest.ChainID), id.Int64())
	_, err = r.ChainID("eip155:1")
	require.Error(t, err, "a network the relayer has no client of")

	token, err := contracts.Load(contracts.FiatTokenV2_2)
	require.NoError(t, err)
	to := common.HexToAddress("0x00000000000000000000000000000000000d0e5e") // no payer, no payee
	before := b.balance(t, to)
	const sends = 4
	transfer, err := token.ABI.Pack("transfer", to, big.NewInt(7))
	require.NoError(t, err)

	payments := b.payments(t, sends)
	var wg sync.WaitGroup
	receipts := make([]*types.Receipt, sends)
	errs := make([]error, sends)
	for i := range sends {
		wg.Go(func() {
			gas := uint64(0)
			if i%2 == 1 {
				gas = 100_000 // given: sent without an estimate
			}
			hash, err := r.Send(ctx, network, devchain.USDC, transfer, gas)
			if err != nil {
				errs[i] = err
				return
			}
			receipts[i], errs[i] = r.Await(ctx, network, hash)
		})
	}
	settleAllOK(t, payments, r)
	wg.Wait()
	nonces := map[uint64]bool{}
	for i := range sends {
		require.NoError(t, errs[i], "send %d", i)
		require.Equal(t, types.ReceiptStatusSuccessful, receipts[i].Status, "send %d", i)
		tx, _, err := b.node.Client.TransactionByHash(ctx, receipts[i].TxHash)
		require.NoError(t, err)
		require.False(t, nonces[tx.Nonce()], "nonce %d twice", tx.Nonce())
		nonces[tx.Nonce()] = true
		if i%2 == 1 {
			require.Equal(t, uint64(100_000), tx.Gas())
		}
	}
	require.Equal(t, new(big.Int).Add(before, big.NewInt(7*sends)), b.balance(t, to))
	b.requireClean(t, sends)

	// A transfer of more than the relayer holds reverts: the estimate
	// refuses it and nothing is sent.
	mined, err := b.node.Client.NonceAt(ctx, r.Address(), nil)
	require.NoError(t, err)
	tooMuch, err := token.ABI.Pack("transfer", to, new(big.Int).Lsh(big.NewInt(1), 200))
	require.NoError(t, err)
	_, err = r.Send(ctx, network, devchain.USDC, tooMuch, 0)
	require.Error(t, err)
	require.True(t, evm.IsRevert(err), "%v", err)
	_, err = r.Call(ctx, network, devchain.USDC, tooMuch)
	require.True(t, evm.IsRevert(err), "%v", err)
	again, err := b.node.Client.NonceAt(ctx, r.Address(), nil)
	require.NoError(t, err)
	require.Equal(t, mined, again, "no transaction for a refused send")
	_, err = r.Send(ctx, "eip155:1", common.Address{}, nil, 21_000)
	require.Error(t, err)
}
