package devchain

import (
	"context"
	"fmt"
	"math/big"
	"runtime"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/rawdb"
	"github.com/ethereum/go-ethereum/core/state"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// TestChain_MemoryBounded checks that what the chain keeps in memory of
// the state its transactions write is bounded in bytes, however many it
// mines: token transfers to new addresses (a storage slot each, as a
// payment's authorization is), in rounds; after each, the state's write
// buffer is within dirtyCacheMB, and no part of the state is kept per
// block (no snapshot, and the hash scheme: the path scheme keeps the
// changes of each of the newest 128 blocks in memory, each as large as its
// block's payments). The live heap after a collection is logged at each
// round.
func TestChain_MemoryBounded(t *testing.T) {
	const rounds, perRound = 4, 800
	ctx := context.Background()
	chain, err := New(ctx, &Config{DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, chain.Close()) })
	client := chain.Client()
	head, err := client.HeaderByNumber(ctx, nil)
	require.NoError(t, err)
	signer := types.LatestSignerForChainID(chain.ChainID())
	accounts := chain.Accounts()[1:9]
	nonces := make([]uint64, len(accounts))
	// transfer sends n transfers from the accounts, 4 from each before
	// awaiting the last one's receipt: small blocks, as steady settlement
	// makes.
	transfer := func(t *testing.T, n int) {
		t.Helper()
		var g errgroup.Group
		for i, a := range accounts {
			g.Go(func() error {
				var last common.Hash
				for range n / len(accounts) {
					to := common.BigToAddress(new(big.Int).SetUint64(uint64(i+1)<<32 | nonces[i] + 1))
					data := append(common.FromHex("0xa9059cbb"), common.LeftPadBytes(to.Bytes(), 32)...)
					data = append(data, common.LeftPadBytes([]byte{1}, 32)...)
					tx, err := types.SignNewTx(a.Key, signer, &types.DynamicFeeTx{
						ChainID: chain.ChainID(), Nonce: nonces[i], GasTipCap: big.NewInt(1),
						GasFeeCap: new(big.Int).Mul(head.BaseFee, big.NewInt(4)), Gas: 100_000, To: &USDC, Data: data,
					})
					if err != nil {
						return err
					}
					if err := client.SendTransaction(ctx, tx); err != nil {
						return err
					}
					nonces[i]++
					last = tx.Hash()
					if nonces[i]%4 == 0 {
						if err := awaitReceipt(ctx, chain, last); err != nil {
							return err
						}
					}
				}
				return awaitReceipt(ctx, chain, last)
			})
		}
		require.NoError(t, g.Wait())
	}
	bc := chain.backend.BlockChain()
	require.Equal(t, rawdb.HashScheme, bc.TrieDB().Scheme())
	require.Nil(t, bc.Snapshots(), "a state snapshot keeps the state of the newest blocks in memory")
	for round := range rounds {
		transfer(t, perRound)
		_, dirty, _ := bc.TrieDB().Size()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("%d transfers, %d blocks: state write buffer %.2f MB, live heap %.1f MB", (round+1)*perRound,
			bc.CurrentBlock().Number.Uint64(), float64(dirty)/(1<<20), float64(ms.HeapAlloc)/(1<<20))
		if bc.CurrentBlock().Number.Uint64() > state.TriesInMemory {
			// Flushed, past the newest blocks, at each block.
			require.LessOrEqual(t, float64(dirty), float64(dirtyCacheMB<<20), "the state's write buffer is past its bound")
		}
	}
	require.Greater(t, bc.CurrentBlock().Number.Uint64(), uint64(state.TriesInMemory),
		"the buffer is flushed only past the newest %d blocks: mine more", state.TriesInMemory)
}

// awaitReceipt waits, a minute at most, for the receipt of transaction
// hash, which must show success.
func awaitReceipt(ctx context.Context, chain *Chain, hash common.Hash) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r, err := chain.WaitMined(ctx, hash)
	if err != nil {
		return fmt.Errorf("transaction %s not mined in a minute: %w", hash.Hex(), err)
	}
	if r.Status != types.ReceiptStatusSuccessful {
		return fmt.Errorf("transaction %s failed", hash.Hex())
	}
	return nil
}
