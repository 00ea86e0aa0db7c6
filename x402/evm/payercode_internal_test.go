package evm

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"
)

// countingRefusals counts the reads of the refusals it keeps in memory.
type countingRefusals struct {
	*memRefusals
	reads atomic.Int32
}

func (c *countingRefusals) PayerCodeRefused(ctx context.Context, network string, now time.Time) (map[common.Address]time.Time, error) {
	c.reads.Add(1)
	return c.memRefusals.PayerCodeRefused(ctx, network, now)
}

// TestRefusals refuses a wallet through one process's refusals and reads
// it through another's, as the relayer of a worker and the verifier of an
// api do: verification reads the store at most once a second (by its
// clock) and sees the refusal within that second; the process that
// refused sees it at once; a refusal ends at its time, and a longer one is
// kept over a shorter.
func TestRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const network = "eip155:8453"
	wallet, factory, other := common.HexToAddress("0x1"), common.HexToAddress("0xf"), common.HexToAddress("0x2")
	store := &countingRefusals{memRefusals: newMemRefusals(nil)}
	relayer, verifier := newRefusals(store), newRefusals(store)
	t0 := time.Now()

	refusedAt := func(r *refusals, now time.Time, addrs ...common.Address) (common.Address, bool) {
		t.Helper()
		a, _, ok, err := r.cached(ctx, network, now, addrs...)
		require.NoError(t, err)
		return a, ok
	}
	_, ok := refusedAt(verifier, t0, wallet, factory)
	require.False(t, ok)
	require.EqualValues(t, 1, store.reads.Load())

	until := t0.Add(time.Hour)
	require.NoError(t, relayer.refuse(ctx, network, until, wallet, factory, common.Address{}))
	a, ok := refusedAt(relayer, t0, other, factory)
	require.True(t, ok, "the refusing process sees it at once")
	require.Equal(t, factory, a)

	_, ok = refusedAt(verifier, t0.Add(500*time.Millisecond), wallet)
	require.False(t, ok, "read less than a second ago")
	require.EqualValues(t, 2, store.reads.Load(), "one read of the verifier's, one of the relayer's")
	a, ok = refusedAt(verifier, t0.Add(time.Second), other, wallet)
	require.True(t, ok)
	require.Equal(t, wallet, a)
	require.EqualValues(t, 3, store.reads.Load())

	// A clock gone back reads again.
	_, ok = refusedAt(verifier, t0.Add(-time.Minute), wallet)
	require.True(t, ok)
	require.EqualValues(t, 4, store.reads.Load())

	// Fresh reads always ask the store; a shorter refusal keeps the longer.
	require.NoError(t, relayer.refuse(ctx, network, t0.Add(time.Minute), wallet))
	a, end, ok, err := relayer.fresh(ctx, network, t0.Add(30*time.Minute), wallet)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, wallet, a)
	require.Equal(t, until, end)
	_, _, ok, err = relayer.fresh(ctx, network, until, wallet, factory)
	require.NoError(t, err)
	require.False(t, ok, "the refusal ended")
	_, ok = refusedAt(verifier, t0, common.Address{})
	require.False(t, ok, "the zero address is never refused")
}
