package api

import (
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/store"
)

// TestBalanceCache: a balance read is given for store.ReserveFresh, a
// later read replaces it and an earlier one does not, and the cache holds
// balanceCacheEntries payers at most.
func TestBalanceCache(t *testing.T) {
	t.Parallel()
	var c balanceCache
	k := balanceKey{"eip155:8453", "0xUSDC", "0xA11ce"}
	at := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	_, _, ok := c.get(k, at)
	require.False(t, ok)

	c.put(k, big.NewInt(20_000), at)
	for _, tc := range []struct {
		after time.Duration
		ok    bool
	}{{0, true}, {store.ReserveFresh - time.Millisecond, true}, {store.ReserveFresh, false}} {
		b, read, ok := c.get(k, at.Add(tc.after))
		require.Equal(t, tc.ok, ok, tc.after)
		if ok {
			require.Equal(t, big.NewInt(20_000), b)
			require.Equal(t, at, read)
		}
	}

	c.put(k, big.NewInt(10_000), at.Add(time.Second))
	c.put(k, big.NewInt(30_000), at)
	b, read, ok := c.get(k, at.Add(time.Second))
	require.True(t, ok)
	require.Equal(t, big.NewInt(10_000), b, "the later read is kept")
	require.Equal(t, at.Add(time.Second), read)

	for i := range balanceCacheEntries + 10 {
		c.put(balanceKey{"eip155:8453", "0xUSDC", fmt.Sprint(i)}, big.NewInt(1), at.Add(time.Second))
	}
	require.LessOrEqual(t, len(c.m), balanceCacheEntries)
}
