package metrics_test

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402/evm/channel"
)

// TestChannelFigures: the channels held, their unclaimed charges and the
// age of the oldest, their claimed totals and what the receivers were
// settled, per network, read
// from the database at the scrape; the claim transactions' gas and
// channels counted as they are mined.
func TestChannelFigures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network = "eip155:8453"
	chainID := big.NewInt(8453)
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	cfg := &channel.Config{Payer: crypto.PubkeyToAddress(key.PublicKey), Receiver: common.HexToAddress("0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"),
		ReceiverAuthorizer: common.HexToAddress("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"), Token: common.HexToAddress("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
		WithdrawDelay: 900}
	st := channel.NewState(cfg, chainID, &channel.OnChain{Balance: big.NewInt(1_000_000), TotalClaimed: big.NewInt(5_000), RefundNonce: big.NewInt(0)})
	st.Charged, st.Signed = big.NewInt(35_000), big.NewInt(35_000)
	st.Signature, err = channel.Sign(key, channel.VoucherDigest(chainID, st.ChannelID, st.Signed))
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return store.ChannelPut(ctx, tx, network, st) }))
	_, err = db.Pool.Exec(ctx, "UPDATE channels SET unclaimed_since = now() - interval '90 seconds'")
	require.NoError(t, err)
	require.NoError(t, store.ChannelReceiverSet(ctx, db.Pool, network, store.ChannelReceiver{Receiver: cfg.Receiver, Token: cfg.Token},
		big.NewInt(12_000), big.NewInt(12_000)))
	m := metrics.New(&metrics.Config{Pool: db.Pool})
	m.ChannelTx(network, store.ClaimKindClaim, "mined", 70_000, 2)
	fams := scrape(t, m)
	labels := map[string]string{"network": network}
	for name, want := range map[string]float64{
		"x402d_channels": 1, "x402d_channel_unclaimed": 30_000, "x402d_channel_claimed": 5_000, "x402d_channel_settled": 12_000,
		"x402d_channel_refunded": 0, "x402d_channel_claimed_channels_total": 2,
	} {
		got, ok := value(fams, name, labels)
		require.True(t, ok, name)
		require.Equal(t, want, got, name)
	}
	age, ok := value(fams, "x402d_channel_unclaimed_oldest_seconds", labels)
	require.True(t, ok)
	require.InDelta(t, 90, age, 10)
	gas, ok := value(fams, "x402d_channel_transaction_gas_total", map[string]string{"network": network, "kind": "claim"})
	require.True(t, ok)
	require.Equal(t, 70_000.0, gas)
}
