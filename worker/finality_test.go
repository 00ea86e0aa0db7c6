package worker_test

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/leaktest"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

// TestFollower_FinalityThenStop follows a transaction mined on the devchain
// through a started relayer whose finality is two blocks on top: pending
// after a round before they are mined, then recorded final (its row gone). Start and Stop
// are done once however often they are called, and once the follower and
// the relayer stopped no goroutine of theirs is left (not parallel, so that
// other tests' goroutines are not counted).
func TestFollower_FinalityThenStop(t *testing.T) {
	leaktest.Check(t)
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	chain, err := devchain.New(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = chain.Close() })
	network := chain.Network()
	relayer, err := evm.NewRelayer(&evm.RelayerConfig{
		Key:      chain.Account(devchain.RelayerAccount).Key,
		Chains:   map[string]evm.Backend{network: chain.Client()},
		Finality: map[string]evm.FinalityPolicy{network: {Depth: 2}},
		KeepIdle: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, relayer.Start(ctx))
	t.Cleanup(relayer.Stop)

	// A transaction mined, watched as a paid call's settlement.
	payTo := chain.Account(devchain.PayToAccount).Address
	mine := func() {
		t.Helper()
		_, err := chain.Transact(ctx, chain.Account(1), &payTo, big.NewInt(1), nil)
		require.NoError(t, err)
	}
	receipt, err := chain.Transact(ctx, chain.Account(1), &payTo, big.NewInt(1), nil)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO settlement_watch (network, tx_hash, block, block_hash, calls, amount) VALUES ($1, $2, $3, $4, $5, 10000)`,
		network, receipt.TxHash.Hex(), receipt.BlockNumber.Int64(), receipt.BlockHash.Hex(), []string{"call-1"})
	require.NoError(t, err)
	watched := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM settlement_watch`).Scan(&n))
		return n
	}

	f, err := worker.NewFollower(&worker.FollowerConfig{Pool: db.Pool, Finality: relayer, Settler: relayer, Every: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, f.Round(ctx))
	require.Equal(t, 1, watched(), "final before two blocks on top")
	require.NoError(t, f.Start(ctx))
	require.NoError(t, f.Start(ctx))
	mine()
	mine()
	require.Eventually(t, func() bool { return watched() == 0 }, 10*time.Second, 20*time.Millisecond, "not recorded final")
	var final int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = 'settlement.final'`).Scan(&final))
	require.Equal(t, 1, final)
	f.Stop()
	f.Stop()
	relayer.Stop()
}
