package evm_test

import (
	"context"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
)

// receiptCounter is a Backend counting the receipts read by transaction
// (eth_getTransactionReceipt) and the block receipts read.
type receiptCounter struct {
	evm.Backend
	mu     sync.Mutex
	byTx   map[common.Hash]int
	blocks int
}

func (c *receiptCounter) TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error) {
	c.mu.Lock()
	if c.byTx == nil {
		c.byTx = map[common.Hash]int{}
	}
	c.byTx[hash]++
	c.mu.Unlock()
	return c.Backend.TransactionReceipt(ctx, hash)
}

func (c *receiptCounter) BlockReceipts(ctx context.Context, block rpc.BlockNumberOrHash) ([]*types.Receipt, error) {
	c.mu.Lock()
	c.blocks++
	c.mu.Unlock()
	return c.Backend.BlockReceipts(ctx, block)
}

// reads returns the most times one transaction's receipt was read, and
// the transactions read.
func (c *receiptCounter) reads() (most, txs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.byTx {
		most = max(most, n)
	}
	return most, len(c.byTx)
}

// TestRelayer_BatchReceiptReadOnce settles concurrent payments in batches
// on a network whose settlements are followed to a depth (their block is
// read from the receipt), then settles them all again (each job run
// twice, found settled by the batch that used its authorization): each
// batch's receipt is read at most once, however many payments it carried
// and however often they are settled.
func TestRelayer_BatchReceiptReadOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newVerifier(t)
	counter := &receiptCounter{Backend: chain.Client()}
	r := newRelayerOn(t, counter, batched, func(cfg *evm.RelayerConfig) {
		cfg.Finality = map[string]evm.FinalityPolicy{"eip155:8453": {Depth: 1}}
	})
	const n = 40
	payments := verifiedPayments(t, v, fundedKeys(t, n, 10_000))
	settle := func(_ int, p *x402.Payment) (*x402.SettleResponse, error) { return r.Settle(ctx, p) }
	results, errs := settleAll(payments, settle)
	requireSettled(t, payments, results, errs)
	batches := map[string]bool{}
	for _, res := range results {
		batches[res.Transaction] = true
	}
	require.Less(t, len(batches), n/2, "the payments share batches")

	again, errs := settleAll(payments, settle)
	for i := range payments {
		require.NoError(t, errs[i], "settlement %d", i)
		require.True(t, again[i].Success, "settlement %d: %s", i, again[i].ErrorReason)
		require.Equal(t, results[i].Transaction, again[i].Transaction, "settlement %d: found settled by its batch", i)
	}
	most, txs := counter.reads()
	t.Logf("%d payments settled twice: %d batches; receipts of %d transactions read, at most %d times each", n, len(batches), txs, most)
	require.LessOrEqual(t, most, 1, "a transaction's receipt is read once")
}
