package devchain_test

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/x402/devchain"
)

// TestChain_HistoryPruned mines token transfers, a block each, on a chain
// keeping 32 blocks whole, until the oldest blocks are pruned (go-ethereum
// moves blocks to its freezer once a minute): the blocks kept are bounded,
// the newest 32 answer their receipts and logs, and every block keeps its
// header while eth_getBlockByNumber finds no pruned block.
func TestChain_HistoryPruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const history = 32
	chain, err := devchain.New(ctx, &devchain.Config{DataDir: t.TempDir(), History: history})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, chain.Close()) })
	client := chain.Client()
	token, err := contracts.Load(contracts.DevUSDC)
	require.NoError(t, err)
	input, err := token.ABI.Pack("transfer", common.HexToAddress("0x000000000000000000000000000000000000dEaD"), big.NewInt(1))
	require.NoError(t, err)
	transfer := func(t *testing.T) *types.Receipt {
		t.Helper()
		receipt, err := chain.Transact(ctx, chain.Account(6), &devchain.USDC, nil, input)
		require.NoError(t, err)
		require.Equal(t, types.ReceiptStatusSuccessful, receipt.Status)
		return receipt
	}
	first := transfer(t)
	oldest, err := chain.OldestBlock()
	require.NoError(t, err)
	require.Zero(t, oldest)
	// Only the number of the oldest block kept is watched: a block read
	// again and again stays in go-ethereum's caches after it is pruned.
	deadline := time.Now().Add(3 * time.Minute)
	last := first
	for oldest <= first.BlockNumber.Uint64() {
		require.True(t, time.Now().Before(deadline), "block %d not pruned by block %d", first.BlockNumber, last.BlockNumber)
		last = transfer(t)
		oldest, err = chain.OldestBlock()
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("blocks before %d pruned at block %d", oldest, last.BlockNumber)
	head := last.BlockNumber.Uint64()
	require.LessOrEqual(t, oldest, head-history+1, "a block of the newest %d pruned", history)
	_, err = client.TransactionReceipt(ctx, first.TxHash)
	require.ErrorIs(t, err, ethereum.NotFound, "a pruned block's transactions are out of the index")
	_, err = client.BlockReceipts(ctx, rpcBlock(first.BlockNumber))
	require.Error(t, err, "a pruned block has no receipts")
	// As on a pruned node, the block is not found (ethclient's
	// HeaderByNumber reads eth_getBlockByNumber), but its header is.
	_, err = client.HeaderByNumber(ctx, first.BlockNumber)
	require.ErrorIs(t, err, ethereum.NotFound, "a pruned block is not found")
	var header *types.Header
	require.NoError(t, client.Client().CallContext(ctx, &header, "eth_getHeaderByNumber", hexutil.EncodeBig(first.BlockNumber)))
	require.NotNil(t, header, "a pruned block keeps its header")
	require.Equal(t, first.BlockHash, header.Hash())

	// The newest blocks are whole: receipts by hash and by block, and
	// their logs.
	for n := head - history + 1; n <= head; n++ {
		receipts, err := client.BlockReceipts(ctx, rpcBlock(new(big.Int).SetUint64(n)))
		require.NoError(t, err, "receipts of block %d", n)
		require.Len(t, receipts, 1, "block %d", n)
		_, err = client.TransactionReceipt(ctx, receipts[0].TxHash)
		require.NoError(t, err, "receipt of block %d's transaction", n)
	}
	logs, err := client.FilterLogs(ctx, ethereum.FilterQuery{FromBlock: new(big.Int).SetUint64(head - history + 1),
		ToBlock: last.BlockNumber, Addresses: []common.Address{devchain.USDC}})
	require.NoError(t, err)
	require.Len(t, logs, history, "one Transfer a block")
}

// rpcBlock names block n for BlockReceipts.
func rpcBlock(n *big.Int) rpc.BlockNumberOrHash {
	return rpc.BlockNumberOrHashWithNumber(rpc.BlockNumber(n.Int64()))
}
