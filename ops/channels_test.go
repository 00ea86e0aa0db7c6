package ops_test

import (
	"context"
	"math/big"
	"net/http"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402/evm/channel"
)

// TestOverviewChannels shows, per network, the payment channels held,
// what they charged and did not claim (and since when), their claimed
// totals, what the receivers were settled and what refunds returned.
func TestOverviewChannels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(ctx, t, testToken)
	const network = "eip155:8453"
	chainID := big.NewInt(8453)
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	var ids []common.Hash
	receiver, token := common.HexToAddress("0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"), common.HexToAddress("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")
	for i := range 2 {
		cfg := &channel.Config{Payer: crypto.PubkeyToAddress(key.PublicKey), Receiver: receiver,
			ReceiverAuthorizer: common.HexToAddress("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"), Token: token,
			WithdrawDelay: 900, Salt: common.BigToHash(big.NewInt(int64(i)))}
		st := channel.NewState(cfg, chainID, &channel.OnChain{Balance: big.NewInt(1_000_000), TotalClaimed: big.NewInt(20_000), RefundNonce: big.NewInt(0)})
		st.Charged = big.NewInt(50_000) // 30,000 unclaimed
		st.Signed = big.NewInt(50_000)
		st.Signature, err = channel.Sign(key, channel.VoucherDigest(chainID, st.ChannelID, st.Signed))
		require.NoError(t, err)
		ids = append(ids, st.ChannelID)
		require.NoError(t, pgx.BeginFunc(ctx, s.DB.Pool, func(tx pgx.Tx) error { return store.ChannelPut(ctx, tx, network, st) }))
	}
	require.NoError(t, store.ChannelReceiverSet(ctx, s.DB.Pool, network, store.ChannelReceiver{Receiver: receiver, Token: token},
		big.NewInt(40_000), big.NewInt(25_000)))
	require.NoError(t, pgx.BeginFunc(ctx, s.DB.Pool, func(tx pgx.Tx) error {
		return store.Append(ctx, tx, store.NewEvent{Stream: store.ChannelStream(network, ids[1]), Type: store.EventChannelRefunded,
			Data: store.ChannelRefunded{Transaction: "0x04", Amount: "7000", Nonce: "0"}})
	}))

	resp, body := s.get(t, "/ops", map[string]string{"Authorization": "Bearer " + testToken})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	page := string(body)
	require.Contains(t, page, "Payment channels")
	require.Regexp(t, `<tr><td>eip155:8453</td><td class="n">2</td><td class="n">0.060000</td><td class="n">[^<]+</td>`+
		`<td class="n">0.040000</td><td class="n">0.025000</td><td class="n">0.007000</td></tr>`, page)
}
