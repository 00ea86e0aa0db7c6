package chanpay

import (
	"context"
	"encoding/json"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm/channel"
)

// testPayload returns a batch-settlement payload of type typ whose voucher
// signs amount, on a channel of payer.
func testPayload(t *testing.T, typ string, amount int64) (json.RawMessage, *channel.Config, common.Hash) {
	t.Helper()
	cfg := &channel.Config{Payer: common.HexToAddress("0xA11ce00000000000000000000000000000000001"), Receiver: common.HexToAddress("0x09"),
		ReceiverAuthorizer: common.HexToAddress("0x0a"), Token: common.HexToAddress("0x0b"), WithdrawDelay: 86400, Salt: common.Hash{1}}
	id := cfg.ID(big.NewInt(8453))
	p := map[string]any{"type": typ, "channelConfig": cfg,
		"voucher": map[string]any{"channelId": id, "maxClaimableAmount": big.NewInt(amount).String(), "signature": hexutil.Bytes{1, 2, 3}}}
	if typ == channel.TypeDeposit {
		p["deposit"] = map[string]any{"amount": "100000", "authorization": map[string]any{"erc3009Authorization": map[string]any{
			"validAfter": "0", "validBefore": "99999999999", "salt": common.Hash{2}, "signature": hexutil.Bytes{4}}}}
	}
	raw, err := json.Marshal(p)
	require.NoError(t, err)
	return raw, cfg, id
}

// TestIdentifyAndOffChain: a payload's payer and nonce, read with no I/O,
// tell channel payments from exact ones (x402.SchemeOf); a voucher's
// settlement alone is off chain.
func TestIdentifyAndOffChain(t *testing.T) {
	t.Parallel()
	s := &Scheme{}
	for _, tc := range []struct {
		typ       string
		nonceTail string
		offChain  bool
	}{
		{channel.TypeVoucher, "/30000", true},
		{channel.TypeDeposit, "/30000", false},
		{channel.TypeRefund, "/refund/30000", false},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			raw, cfg, id := testPayload(t, tc.typ, 30_000)
			payer, nonce, err := Identify(&x402.PaymentPayload{Payload: raw})
			require.NoError(t, err)
			require.Equal(t, cfg.Payer.Hex(), payer)
			require.Equal(t, "channel/"+strings.ToLower(id.Hex())+tc.nonceTail, nonce)
			p := &x402.Payment{Network: "eip155:8453", Payer: payer, Nonce: nonce}
			require.Equal(t, x402.SchemeBatchSettlement, x402.SchemeOf(p))
			ledger, err := (&x402.PaymentPayload{X402Version: 2, Payload: raw}).Ledger()
			require.NoError(t, err)
			p.Payload = ledger
			require.Equal(t, tc.offChain, s.OffChain(p))
			// Decoded once: Settle takes what OffChain decoded.
			decoded, ok := p.Decoded.(*channel.Payload)
			require.True(t, ok)
			require.Equal(t, tc.typ, decoded.Type)
			again, err := s.decodePayment(p)
			require.NoError(t, err)
			require.Same(t, decoded, again)
		})
	}
	_, _, err := Identify(&x402.PaymentPayload{Payload: json.RawMessage(`{"type":"claim"}`)})
	require.Error(t, err)
}

// TestCorrective: the corrective refusal keeps the requirement's extra and
// adds the channel's state and its last voucher, in the option of the
// requirement's scheme and network.
func TestCorrective(t *testing.T) {
	t.Parallel()
	_, cfg, _ := testPayload(t, channel.TypeVoucher, 1)
	st := channel.NewState(cfg, big.NewInt(8453), &channel.OnChain{Balance: big.NewInt(100_000), TotalClaimed: big.NewInt(10_000), RefundNonce: big.NewInt(1)})
	st.Charged, st.Signed, st.Signature = big.NewInt(40_000), big.NewInt(40_000), []byte{9, 9}
	req := &x402.Requirements{Scheme: x402.SchemeBatchSettlement, Network: "eip155:8453", Amount: "10000",
		Extra: json.RawMessage(`{"name":"USD Coin","version":"2","receiverAuthorizer":"0x000000000000000000000000000000000000000A","withdrawDelay":86400,"minDeposit":"100000"}`)}
	err := (&Scheme{}).corrective(req, st, &x402.Refusal{Reason: channel.ReasonCumulativeAmountMismatch, Message: "behind"})
	var r *x402.Refusal
	require.ErrorAs(t, err, &r)
	require.Equal(t, channel.ReasonCumulativeAmountMismatch, r.Reason)
	require.NotNil(t, r.Option)
	require.Equal(t, req.Network, r.Option.Network)
	var extra channel.Extra
	require.NoError(t, json.Unmarshal(r.Option.Extra, &extra))
	require.Equal(t, "USD Coin", extra.Name)
	require.Equal(t, uint64(86400), extra.WithdrawDelay)
	require.Equal(t, "40000", extra.ChannelState.ChargedCumulativeAmount)
	require.Equal(t, "100000", extra.ChannelState.Balance)
	require.Equal(t, "1", extra.ChannelState.RefundNonce)
	require.Equal(t, "40000", extra.VoucherState.SignedMaxClaimable)
	require.Equal(t, hexutil.Bytes{9, 9}, extra.VoucherState.Signature)
	require.NotContains(t, string(req.Extra), "channelState", "the quote's own option is left alone")
}

// BenchmarkDecodePayment decodes a voucher's payment for OffChain and then
// Settle, as the worker's results transaction does: once, kept on the
// payment, and, for comparison, twice (what they did before).
func BenchmarkDecodePayment(b *testing.B) {
	raw, _, _ := testPayload(&testing.T{}, channel.TypeVoucher, 30_000)
	ledger, err := (&x402.PaymentPayload{X402Version: 2, Payload: raw}).Ledger()
	if err != nil {
		b.Fatal(err)
	}
	s := &Scheme{}
	for _, bc := range []struct {
		name  string
		twice bool
	}{{"once", false}, {"twice", true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p := &x402.Payment{Payload: ledger}
				if !s.OffChain(p) {
					b.Fatal("not off chain")
				}
				if bc.twice {
					p.Decoded = nil
				}
				if _, err := s.decodePayment(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSettleTakesRecord: a voucher's settlement charges the channel's
// record read with its call (x402.Payment.Record), once, with no read of
// its own; a record of another channel is not taken, and without one the
// channel is read from the database (here it has no row: refused).
func TestSettleTakesRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	s := &Scheme{cfg: Config{Pool: db.Pool}}
	raw, cfg, id := testPayload(t, channel.TypeVoucher, 30_000)
	ledger, err := (&x402.PaymentPayload{X402Version: 2, Payload: raw}).Ledger()
	require.NoError(t, err)
	const network = "eip155:8453"
	record := func(network string, id common.Hash) *store.Channel {
		st := channel.NewState(cfg, big.NewInt(8453), &channel.OnChain{Balance: big.NewInt(100_000), TotalClaimed: big.NewInt(0), RefundNonce: big.NewInt(0)})
		st.ChannelID = id
		st.Charged = big.NewInt(20_000)
		return &store.Channel{Network: network, State: *st, BusyCall: "c1"}
	}
	for _, tc := range []struct {
		name    string
		record  any
		charged string
	}{
		{"the call's record", record(network, id), "30000"},
		{"none: read, no row", nil, ""},
		{"another channel's", record(network, common.Hash{9}), ""},
		{"another network's", record("eip155:84532", id), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &x402.Payment{Network: network, Payer: cfg.Payer.Hex(), Amount: "10000", Payload: ledger, Record: tc.record}
			resp, err := s.Settle(x402.WithCall(ctx, "c1"), p)
			require.NoError(t, err)
			require.Nil(t, p.Record, "taken once")
			if tc.charged == "" {
				require.False(t, resp.Success)
				require.Equal(t, channel.ReasonMissingChannel, resp.ErrorReason)
				return
			}
			require.True(t, resp.Success, resp.ErrorReason)
			events, ok := resp.Ledger.([]store.NewEvent)
			require.True(t, ok)
			require.Len(t, events, 1)
			charged, ok := events[0].Data.(store.ChannelCharged)
			require.True(t, ok)
			require.Equal(t, store.ChannelCharged{CallID: "c1", Amount: "10000", Charged: tc.charged, Signed: "30000", Signature: hexutil.Bytes{1, 2, 3}}, charged)
		})
	}
}

// TestConfigsKept: a payload decoded through channel.Configs equals its
// decoding without, again and again; the caller's copy is its own; a
// malformed configuration is refused every time, never kept.
func TestConfigsKept(t *testing.T) {
	t.Parallel()
	cs := channel.NewConfigs(4)
	raw, cfg, _ := testPayload(t, channel.TypeVoucher, 30_000)
	want, err := channel.Decode(raw)
	require.NoError(t, err)
	for range 3 {
		got, err := cs.Decode(raw)
		require.NoError(t, err)
		require.Equal(t, want, got)
		require.Equal(t, *cfg, got.Config)
		got.Config.Payer = common.HexToAddress("0x01")
	}
	bad := json.RawMessage(strings.Replace(string(raw), `"withdrawDelay":86400`, `"withdrawDelay":"86400"`, 1))
	require.NotEqual(t, string(raw), string(bad))
	for range 2 {
		_, err := cs.Decode(bad)
		var r *x402.Refusal
		require.ErrorAs(t, err, &r)
		require.Equal(t, channel.ReasonVoucherPayload, r.Reason)
	}
}

// BenchmarkDecodeVoucher decodes a voucher's payload as Verify does, its
// channel's configuration decoded each time or kept (channel.Configs).
func BenchmarkDecodeVoucher(b *testing.B) {
	raw, _, _ := testPayload(&testing.T{}, channel.TypeVoucher, 30_000)
	for _, bc := range []struct {
		name string
		cs   *channel.Configs
	}{{"each", nil}, {"kept", channel.NewConfigs(configsKept)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.cs.Decode(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
