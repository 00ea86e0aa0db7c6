package index

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// scaleNetworks are the six EVM networks of the network table, each read
// through its own endpoint in front of one anvil (Base's chain, its USDC at
// Base's address: the reader is told so for the five others).
var scaleNetworks = []string{"eip155:8453", "eip155:42161", "eip155:137", "eip155:43114", "eip155:1329", "eip155:196"}

// TestEvidenceScale has the chain reader keep up with 2-second blocks on
// six networks while settlements arrive for 1,000 sellers (five a block,
// from ten payers, each to a seller drawn at random): each run reads each
// network up to its head with one eth_getLogs call for the range's
// transfers (the 1,000 payTo addresses in one topic OR-list), one for the
// new payers' fundings at most, and each block holding a transfer once;
// every settlement is counted on each network. It logs the run's time and
// calls (docs/performance.md).
func TestEvidenceScale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: 2 * time.Second})
	db := dbtest.Schema(ctx, t)
	chain := newUSDCChain(t, node)

	const sellers, perBlock, rounds = 1000, 5, 4
	roundEvery := 10 * time.Second
	var items []map[string]any
	payTos := make([]common.Address, sellers)
	for i := range payTos {
		payTos[i] = common.BigToAddress(big.NewInt(int64(0x5e11e0000 + i)))
		items = append(items, sellerItem(fmt.Sprintf("https://seller%d.test/pay", i), "eip155:8453", usdc, payTos[i]))
	}
	srv := httptest.NewServer(&listing{items: items})
	t.Cleanup(srv.Close)
	require.NoError(t, NewCrawler(&CrawlerConfig{Pool: db.Pool, Sources: []string{srv.URL}, PageSize: 500, PagesPerRun: 10, Gap: -1}).FullPass(ctx, nil))
	// Every seller is listed on every network.
	_, err := db.Pool.Exec(ctx, `UPDATE index_resources SET accepts = (
		SELECT jsonb_agg(jsonb_set(accepts->0, '{network}', to_jsonb(n))) FROM unnest($1::text[]) n)`, scaleNetworks)
	require.NoError(t, err)

	counters := map[string]*rpcCounter{}
	chains := map[string]Chain{}
	assets := map[string]common.Address{}
	for _, n := range scaleNetworks {
		counters[n] = newRPCCounter(t, node.URL)
		e, err := ethrpc.New(ctx, &ethrpc.Config{Network: "eip155:8453", URLs: []string{counters[n].URL}, ProbeEvery: time.Minute})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		t.Cleanup(e.Stop)
		chains[n], assets[n] = e, devchain.USDC
	}
	finality := map[string]evm.FinalityPolicy{}
	for _, n := range scaleNetworks {
		finality[n] = evm.FinalityPolicy{} // anvil: final at once
	}
	// A block with more than two transfers has its receipts read whole.
	reader := NewChainReader(&ChainReaderConfig{Pool: db.Pool, Chains: chains, Assets: assets, Finality: finality, ReceiptsByTx: 2})
	_, err = reader.Run(ctx) // the cursors start at the head
	require.NoError(t, err)

	// Settlements: perBlock every 2 s, sent by one relayer.
	payers := make([]*ecdsa.PrivateKey, 9)
	for i := range payers {
		payers[i] = devKey(t, uint32(i))
	}
	relayer := devKey(t, 9)
	nonce, err := node.Client.PendingNonceAt(ctx, addr(relayer))
	require.NoError(t, err)
	sendCtx, stopSending := context.WithCancel(ctx)
	var sent int
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(2 * time.Second / perBlock)
		defer tick.Stop()
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-sendCtx.Done():
				return
			case <-tick.C:
			}
			data := chain.settlementData(payers[rng.IntN(len(payers))], payTos[rng.IntN(sellers)], 10_000)
			tx := types.NewTx(&types.DynamicFeeTx{ChainID: big.NewInt(anviltest.ChainID), Nonce: nonce, To: &devchain.USDC, Data: data, Gas: 200_000,
				GasTipCap: big.NewInt(params.GWei), GasFeeCap: big.NewInt(100 * params.GWei)})
			signed, err := types.SignTx(tx, types.LatestSignerForChainID(big.NewInt(anviltest.ChainID)), relayer)
			if err == nil {
				err = node.Client.SendTransaction(ctx, signed)
			}
			if err != nil {
				t.Errorf("send settlement: %v", err)
				return
			}
			nonce++
			sent++
		}
	})

	var durations []time.Duration
	var blockReceipts int
	read := map[string]uint64{}
	for _, n := range scaleNetworks {
		cur, err := store.ChainCursorGet(ctx, db.Pool, n)
		require.NoError(t, err)
		read[n] = cur.Block
	}
	for range rounds {
		time.Sleep(roundEvery)
		for _, c := range counters {
			c.take()
		}
		head, err := node.Client.BlockNumber(ctx)
		require.NoError(t, err)
		start := time.Now()
		run, err := reader.Run(ctx)
		require.NoError(t, err)
		durations = append(durations, time.Since(start))
		require.Equal(t, len(scaleNetworks), run.Ranges, "one range a network a run")
		for _, n := range scaleNetworks {
			cur, err := store.ChainCursorGet(ctx, db.Pool, n)
			require.NoError(t, err)
			require.GreaterOrEqual(t, cur.Block, head, "%s: read up to the head", n)
			calls, transfers, fundings := counters[n].take()
			require.Equal(t, 1, transfers, "%s: one eth_getLogs call for the range's transfers", n)
			require.LessOrEqual(t, fundings, 1, "%s: one eth_getLogs call at most for the fundings", n)
			t.Logf("%s: %d blocks, eth_getLogs %d (+%d fundings), eth_getBlockByNumber %d, eth_getBlockReceipts %d, eth_getTransactionReceipt %d, other %d",
				n, cur.Block-read[n], transfers, fundings, calls["eth_getBlockByNumber"], calls["eth_getBlockReceipts"], calls["eth_getTransactionReceipt"],
				total(calls)-calls["eth_getLogs"]-calls["eth_getBlockReceipts"]-calls["eth_getBlockByNumber"]-calls["eth_getTransactionReceipt"])
			blockReceipts += calls["eth_getBlockReceipts"]
			read[n] = cur.Block
		}
		t.Logf("run over %d networks: %v (%d transfers, %d hosts counted)", len(scaleNetworks), durations[len(durations)-1], run.Transfers, run.Hosts)
	}
	stopSending()
	wg.Wait()
	require.Positive(t, blockReceipts, "some blocks had their receipts read whole")
	slices.Sort(durations)
	require.Less(t, durations[len(durations)-1], roundEvery, "a run takes less than the blocks it reads")
	t.Logf("%d settlements sent; runs: %v", sent, durations)

	// Once the last is mined, every settlement is counted on every network.
	require.Eventually(t, func() bool {
		st, err := node.TxPool(ctx)
		require.NoError(t, err)
		return st.Pending == 0 && st.Queued == 0
	}, 10*time.Second, 100*time.Millisecond)
	_, err = reader.Run(ctx)
	require.NoError(t, err)
	var counted []int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(n ORDER BY network) FROM (SELECT network, count(*)::int n FROM index_transfers GROUP BY network) c`).Scan(&counted))
	require.Equal(t, slices.Repeat([]int{sent}, len(scaleNetworks)), counted)
}

func total(calls map[string]int) int {
	n := 0
	for _, c := range calls {
		n += c
	}
	return n
}
