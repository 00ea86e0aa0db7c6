package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

// TestPayerCodeRefusals refuses wallets and factories on a network: each
// is read back with the end of its refusal until it ends, a longer refusal
// is kept over a shorter, networks are apart, and the rows of ended
// refusals are deleted by the next refusal.
func TestPayerCodeRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	s := store.PayerCodeRefusals{DB: db.Pool}
	const base, arb = "eip155:8453", "eip155:42161"
	wallet, factory, gone := common.HexToAddress("0x1"), common.HexToAddress("0xf"), common.HexToAddress("0x9")
	now := time.Now().UTC().Truncate(time.Microsecond)
	day := now.Add(24 * time.Hour)

	require.NoError(t, s.RefusePayerCode(ctx, base, []common.Address{gone}, now.Add(-time.Second)))
	require.NoError(t, s.RefusePayerCode(ctx, base, []common.Address{wallet, factory}, day))
	require.NoError(t, s.RefusePayerCode(ctx, base, []common.Address{wallet}, now.Add(time.Hour)))
	require.NoError(t, s.RefusePayerCode(ctx, arb, []common.Address{factory}, now.Add(time.Hour)))

	for _, tc := range []struct {
		network string
		at      time.Time
		want    map[common.Address]time.Time
	}{
		{base, now, map[common.Address]time.Time{wallet: day, factory: day}},
		{arb, now, map[common.Address]time.Time{factory: now.Add(time.Hour)}},
		{arb, now.Add(2 * time.Hour), map[common.Address]time.Time{}},
		{base, day, map[common.Address]time.Time{}},
	} {
		got, err := s.PayerCodeRefused(ctx, tc.network, tc.at)
		require.NoError(t, err)
		require.Len(t, got, len(tc.want), "%s at %s", tc.network, tc.at)
		for a, until := range tc.want {
			require.True(t, until.Equal(got[a]), "%s on %s: %s, want %s", a.Hex(), tc.network, got[a], until)
		}
	}
	var rows int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM payer_code_refusals WHERE address = $1`, gone.Hex()).Scan(&rows))
	require.Zero(t, rows, "an ended refusal's row is deleted")
}
