package ops_test

import (
	"context"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm/channel"
)

// TestOverviewChannels shows, per network, the payment channels held,
// what they charged and did not claim (and since when), and what claims,
// settles and refunds moved: a claim a reorganisation undid for good is
// not counted.
func TestOverviewChannels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(ctx, t, testToken)
	const network = "eip155:8453"
	chainID := big.NewInt(8453)
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	var ids []common.Hash
	for i := range 2 {
		cfg := &channel.Config{Payer: crypto.PubkeyToAddress(key.PublicKey), Receiver: common.HexToAddress("0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"),
			ReceiverAuthorizer: common.HexToAddress("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"), Token: common.HexToAddress("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
			WithdrawDelay: 900, Salt: common.BigToHash(big.NewInt(int64(i)))}
		st := channel.NewState(cfg, chainID, &channel.OnChain{Balance: big.NewInt(1_000_000), TotalClaimed: big.NewInt(20_000), RefundNonce: big.NewInt(0)})
		st.Charged = big.NewInt(50_000) // 30,000 unclaimed
		st.Signed = big.NewInt(50_000)
		st.Signature, err = channel.Sign(key, channel.VoucherDigest(chainID, st.ChannelID, st.Signed))
		require.NoError(t, err)
		ids = append(ids, st.ChannelID)
		require.NoError(t, pgx.BeginFunc(ctx, s.DB.Pool, func(tx pgx.Tx) error { return store.ChannelPut(ctx, tx, network, st) }))
	}
	record := func(tx string, kind string, amount int64) {
		require.NoError(t, pgx.BeginFunc(ctx, s.DB.Pool, func(dbtx pgx.Tx) error {
			return store.ChannelClaimRecord(ctx, dbtx, &store.ChannelClaimTx{Network: network, Kind: kind, Channels: ids[:1], Amount: big.NewInt(amount),
				GasUsed: 80_000, FollowedTx: x402.FollowedTx{Transaction: tx, Block: x402.SettledBlock{Number: 9, Hash: "0x09"}}})
		}))
	}
	record("0x01", store.ClaimKindClaim, 20_000)
	record("0x02", store.ClaimKindSettle, 20_000)
	record("0x03", store.ClaimKindClaim, 5_000)
	require.NoError(t, store.ChannelClaimGone(ctx, s.DB.Pool, network, "0x03", time.Now(), true))
	require.NoError(t, pgx.BeginFunc(ctx, s.DB.Pool, func(tx pgx.Tx) error {
		return store.Append(ctx, tx, store.NewEvent{Stream: store.ChannelStream(network, ids[1]), Type: store.EventChannelRefunded,
			Data: store.ChannelRefunded{Transaction: "0x04", Amount: "7000", Nonce: "0"}})
	}))

	resp, body := s.get(t, "/ops", map[string]string{"Authorization": "Bearer " + testToken})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	page := string(body)
	require.Contains(t, page, "Payment channels")
	require.Regexp(t, `<tr><td>eip155:8453</td><td class="n">2</td><td class="n">0.060000</td><td class="n">[^<]+</td>`+
		`<td class="n">0.020000</td><td class="n">0.020000</td><td class="n">0.007000</td></tr>`, page)
}
