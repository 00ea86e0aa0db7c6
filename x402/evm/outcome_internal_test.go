package evm

import (
	"fmt"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/require"
)

// batchReceipt returns the receipt of a successful batch of n transfers
// of asset, as Circle's USDC leaves them (AuthorizationUsed and Transfer
// each), and their authorizations; the transfers in skip left no event.
func batchReceipt(asset common.Address, n int, skip map[int]bool) (*types.Receipt, []*Authorization) {
	receipt := &types.Receipt{Status: types.ReceiptStatusSuccessful, TxHash: common.Hash{1}, GasUsed: 44_000 * uint64(n), BlockNumber: big.NewInt(7)}
	auths := make([]*Authorization, n)
	for i := range auths {
		auths[i] = &Authorization{From: common.BigToAddress(big.NewInt(int64(i + 1))), Nonce: common.BigToHash(big.NewInt(int64(1000 + i)))}
		if skip[i] {
			continue
		}
		used := usedTopics(auths[i])
		receipt.Logs = append(receipt.Logs,
			&types.Log{Address: asset, Topics: used[:]},
			&types.Log{Address: asset, Topics: []common.Hash{token.Events["Transfer"].ID, used[1], {}}, Data: make([]byte, 32)})
	}
	return receipt, auths
}

func TestTxOutcome(t *testing.T) {
	t.Parallel()
	asset, other := common.Address{0xaa}, common.Address{0xbb}
	receipt, auths := batchReceipt(asset, 10, map[int]bool{3: true})
	o := newTxOutcome(receipt)
	for i, auth := range auths {
		require.Equal(t, i != 3, o.usedIn(asset, auth), "transfer %d", i)
		require.False(t, o.usedIn(other, auth), "transfer %d on another token", i)
	}
	require.Equal(t, 9, o.usedOf[asset])
	require.Nil(t, o.receipt.Logs, "the outcome keeps no logs")
	require.Len(t, receipt.Logs, 18, "the receipt read is left alone")

	failed := *receipt
	failed.Status = types.ReceiptStatusFailed
	for i, auth := range auths {
		require.False(t, newTxOutcome(&failed).usedIn(asset, auth), "transfer %d of a failed transaction", i)
	}
}

func TestOutcomes_Bounded(t *testing.T) {
	t.Parallel()
	var oc outcomes
	for i := range outcomesKept + 10 {
		h := common.BigToHash(big.NewInt(int64(i + 1)))
		oc.of(h, &types.Receipt{TxHash: h})
	}
	require.Len(t, oc.byTx, outcomesKept)
	_, ok := oc.get(common.BigToHash(big.NewInt(1)))
	require.False(t, ok, "the oldest is dropped")
	_, ok = oc.get(common.BigToHash(big.NewInt(outcomesKept + 10)))
	require.True(t, ok)
	// A replacement's receipt is kept under the hash awaited too.
	awaited, mined := common.Hash{0xa1}, common.Hash{0xa2}
	o := oc.of(awaited, &types.Receipt{TxHash: mined})
	got, ok := oc.get(awaited)
	require.True(t, ok)
	require.Same(t, o, got)
	require.Same(t, o, oc.of(mined, &types.Receipt{TxHash: mined}))
}

// BenchmarkBatchOutcome measures the settle side of a batch of n
// transfers once its receipt came: its outcome read once, then asked by
// each of its n settlements. ns/call is flat in n.
func BenchmarkBatchOutcome(b *testing.B) {
	asset := common.Address{0xaa}
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			receipt, auths := batchReceipt(asset, n, nil)
			b.ReportAllocs()
			for b.Loop() {
				var oc outcomes
				for _, auth := range auths {
					if !oc.of(receipt.TxHash, receipt).usedIn(asset, auth) {
						b.Fatal("transfer not found")
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/call")
		})
	}
}
