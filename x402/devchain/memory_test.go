package devchain

import (
	"context"
	"fmt"
	"math/big"
	"runtime"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// TestChain_MemoryFlat checks that the chain keeps nothing per transaction
// in memory beyond bounded caches: token transfers to new addresses (a
// storage slot each, as a payment's authorization is), in two batches after
// a warm-up, and the live heap after a collection grows by less than
// maxBytesPerTx a transfer over the second batch. The state's write buffer
// stays within its bound, and no state is kept per block in memory (no
// snapshot). Not parallel: the heap is the process's.
func TestChain_MemoryFlat(t *testing.T) {
	const (
		warm, batch = 2000, 3000
		// What stays growing per transfer is go-ethereum's transaction
		// fetcher's cache of mined transactions' hashes (about 115 bytes
		// each, up to 32,768); the path scheme's state kept per block, or a
		// write buffer of go-ethereum's default size, is 600 bytes and
		// more.
		maxBytesPerTx = 400
	)
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
	// transfer sends n transfers from the accounts, 16 from each before
	// awaiting the last one's receipt.
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
					if nonces[i]%16 == 0 {
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
	live := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	transfer(t, warm)
	before := live()
	transfer(t, batch)
	middle := live()
	transfer(t, batch)
	after := live()
	blocks, err := client.BlockNumber(ctx)
	require.NoError(t, err)
	perTx := (float64(after) - float64(middle)) / batch
	t.Logf("%d blocks: live heap %.1f MB after %d transfers, %.1f MB after %d, %.1f MB after %d (%+.0f bytes a transfer)",
		blocks, float64(before)/(1<<20), warm, float64(middle)/(1<<20), warm+batch, float64(after)/(1<<20), warm+2*batch, perTx)
	require.Less(t, perTx, float64(maxBytesPerTx), "the chain's live heap grows with its transactions")

	bc := chain.backend.BlockChain()
	require.Nil(t, bc.Snapshots(), "no state snapshot: it keeps the state of the newest blocks in memory")
	_, dirty, _ := bc.TrieDB().Size()
	require.LessOrEqual(t, float64(dirty), float64(dirtyCacheMB<<20), "the state's write buffer past its bound")
}

// awaitReceipt waits for the receipt of transaction hash, which must show
// success.
func awaitReceipt(ctx context.Context, chain *Chain, hash common.Hash) error {
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := chain.Client().TransactionReceipt(ctx, hash)
		if err == nil {
			if r.Status != types.ReceiptStatusSuccessful {
				return fmt.Errorf("transaction %s failed", hash.Hex())
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("transaction %s not mined in a minute: %w", hash.Hex(), err)
		}
		time.Sleep(time.Millisecond)
	}
}
