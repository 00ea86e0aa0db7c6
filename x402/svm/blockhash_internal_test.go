package svm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/svmtest"
	"github.com/x402d/x402d/x402"
)

// TestBlockhashes_SharedRead checks that concurrent Lifes share one read of
// the chain, kept for a slot: one getBlockHeight for all of them, no
// isBlockhashValid for a blockhash the node named as the newest, one for a
// stranger; the deadline counts from when the height was read.
func TestBlockhashes_SharedRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := svmtest.Start(t, &svmtest.Config{Payers: 1})
	b := NewBlockhashes(node.URL, nil)
	var mu sync.Mutex
	clock := time.Now()
	b.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	bh, err := b.Latest(ctx)
	require.NoError(t, err)
	calls := func(method string) int { return node.Stats(ctx, false).Methods[method].Calls }
	node.Stats(ctx, true)

	const concurrent = 20
	lives := make([]Life, concurrent)
	var wg sync.WaitGroup
	for i := range concurrent {
		wg.Go(func() {
			l, err := b.Life(ctx, bh.Hash)
			if err == nil {
				lives[i] = l
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1, calls("getBlockHeight"), "one read for every Life")
	require.Zero(t, calls("isBlockhashValid"))
	for _, l := range lives {
		require.True(t, l.Valid)
		require.True(t, l.Known)
		require.Equal(t, bh.LastValidBlockHeight, l.LastValidBlockHeight)
		require.Equal(t, clock.Add(time.Duration(l.LastValidBlockHeight-l.Height)*x402.SolanaSlotTime), l.Deadline)
	}

	stranger, err := b.Life(ctx, solana.HashFromBytes([]byte("not a blockhash of this chain!!!")))
	require.NoError(t, err)
	require.False(t, stranger.Valid)
	require.Equal(t, 1, calls("isBlockhashValid"), "a blockhash the node never named as the newest is asked")
	require.Equal(t, 1, calls("getBlockHeight"))

	mu.Lock()
	clock = clock.Add(x402.SolanaSlotTime)
	mu.Unlock()
	_, err = b.Life(ctx, bh.Hash)
	require.NoError(t, err)
	require.Equal(t, 2, calls("getBlockHeight"), "a read a slot old is read again")
}

// TestBlockhashes_LatestOfUnknown checks the latest end of the life of a
// blockhash the node never named as the newest: its deadline counts from
// the newest finalized blockhash's last valid height at a block a slot,
// its latest end from the newest last valid height a blockhash could have
// (the height read and SolanaBlockhashBlocks) at a block every
// SlowestBlockTime.
func TestBlockhashes_LatestOfUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Blocks fast enough for a finalized block soon, slow enough for a
	// blockhash to live through the test (150 blocks, 7.5 s).
	node := svmtest.Start(t, &svmtest.Config{SlotTime: 50 * time.Millisecond, Payers: 1})
	require.Eventually(t, func() bool { return node.BlockHeight(ctx, "finalized") > 0 }, 30*time.Second, 20*time.Millisecond)
	b := NewBlockhashes(node.URL, nil)
	clock := time.Now()
	b.now = func() time.Time { return clock }
	b.maxAge = time.Hour // one read of the chain answers every Life here
	bh, err := b.Latest(ctx)
	require.NoError(t, err)

	life, err := b.Life(ctx, bh.Hash)
	require.NoError(t, err)
	require.True(t, life.Known, "handed out")
	require.Equal(t, clock.Add(time.Duration(life.LastValidBlockHeight-life.Height)*SlowestBlockTime), life.Latest)

	b.mu.Lock()
	clear(b.known)
	b.mu.Unlock()
	life, err = b.Life(ctx, bh.Hash)
	require.NoError(t, err)
	require.True(t, life.Valid)
	require.False(t, life.Known)
	require.Less(t, life.LastValidBlockHeight, life.Height+x402.SolanaBlockhashBlocks, "the finalized blockhash's")
	require.Equal(t, clock.Add(time.Duration(life.LastValidBlockHeight-life.Height)*x402.SolanaSlotTime), life.Deadline)
	require.Equal(t, clock.Add(x402.SolanaBlockhashBlocks*SlowestBlockTime), life.Latest)
}
