//go:build scenario

package devchain_test

import (
	"context"
	"fmt"
	"math/big"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/x402d/x402d/x402/devchain"
)

// TestChainMemory measures the chain's memory as it mines: eight accounts
// each send token transfers to new addresses (a storage slot each, as a
// payment's authorization is), one at a time, each awaiting its receipt
// (small blocks, as steady settlement makes), DEVCHAIN_SOAK_TXS in all
// (default 24,000), with the chain in memory and then on disk; the live heap
// and the resident size are logged at each eighth. Not part of CI: `go test
// -tags scenario -run TestChainMemory -v ./x402/devchain` (TestChain_MemoryBounded
// checks in CI what bounds the chain's memory, and docs/performance.md has the
// service's soak).
func TestChainMemory(t *testing.T) {
	total := 24_000
	if v := os.Getenv("DEVCHAIN_SOAK_TXS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		total = n
	}
	for _, tt := range []struct{ name, dir string }{{"memory", ""}, {"disk", t.TempDir()}} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			chain, err := devchain.New(ctx, &devchain.Config{DataDir: tt.dir})
			require.NoError(t, err)
			defer func() { require.NoError(t, chain.Close()) }()
			client := chain.Client()
			head, err := client.HeaderByNumber(ctx, nil)
			require.NoError(t, err)
			signer := types.LatestSignerForChainID(chain.ChainID())
			accounts := chain.Accounts()[1:9]
			nonces := make([]uint64, len(accounts))
			const rounds = 8
			for round := range rounds {
				var g errgroup.Group
				for i, a := range accounts {
					g.Go(func() error {
						for range total / rounds / len(accounts) {
							to := common.BigToAddress(new(big.Int).SetUint64(uint64(i+1)<<32 | nonces[i] + 1))
							data := append(common.FromHex("0xa9059cbb"), common.LeftPadBytes(to.Bytes(), 32)...)
							data = append(data, common.LeftPadBytes([]byte{1}, 32)...)
							tx, err := types.SignNewTx(a.Key, signer, &types.DynamicFeeTx{
								ChainID: chain.ChainID(), Nonce: nonces[i], GasTipCap: big.NewInt(1),
								GasFeeCap: new(big.Int).Mul(head.BaseFee, big.NewInt(4)), Gas: 100_000, To: &devchain.USDC, Data: data,
							})
							if err != nil {
								return err
							}
							if err := client.SendTransaction(ctx, tx); err != nil {
								return err
							}
							nonces[i]++
							r, err := chain.WaitMined(ctx, tx.Hash())
							if err != nil {
								return err
							}
							if r.Status != types.ReceiptStatusSuccessful {
								return fmt.Errorf("transfer %s failed", tx.Hash().Hex())
							}
						}
						return nil
					})
				}
				require.NoError(t, g.Wait())
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				block, err := client.BlockNumber(ctx)
				require.NoError(t, err)
				t.Logf("%s: %d transfers, %d blocks: live heap %.1f MB, resident %s", tt.name, (round+1)*total/rounds, block,
					float64(ms.HeapAlloc)/(1<<20), residentSize())
			}
		})
	}
}

// residentSize returns this process's resident set size (VmRSS).
func residentSize() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
