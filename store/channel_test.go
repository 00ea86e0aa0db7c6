package store_test

import (
	"context"
	"fmt"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402/evm/channel"
)

// testChannel returns the record of a channel on chain 84532 with balance
// and claimed on chain, charged nothing past it, signed by a real key.
func testChannel(t testing.TB, balance, claimed int64) (*channel.State, func(amount int64) (*big.Int, []byte)) {
	t.Helper()
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	cfg := &channel.Config{
		Payer: crypto.PubkeyToAddress(key.PublicKey), Receiver: common.HexToAddress("0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"),
		ReceiverAuthorizer: common.HexToAddress("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"),
		Token:              common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e"), WithdrawDelay: 86400,
		Salt: common.HexToHash("0x01"),
	}
	chainID := big.NewInt(84532)
	s := channel.NewState(cfg, chainID, &channel.OnChain{Balance: big.NewInt(balance), TotalClaimed: big.NewInt(claimed), RefundNonce: big.NewInt(0)})
	sign := func(amount int64) (*big.Int, []byte) {
		sig, err := channel.Sign(key, channel.VoucherDigest(chainID, s.ChannelID, big.NewInt(amount)))
		require.NoError(t, err)
		return big.NewInt(amount), sig
	}
	return s, sign
}

// putChannel puts the record s of a channel on network (ChannelPut).
func putChannel(ctx context.Context, t testing.TB, db *dbtest.DB, network string, s *channel.State) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return store.ChannelPut(ctx, tx, network, s) }))
}

// TestChannelRows drives a channel's row through its events and the
// admission's hold, as the paid pipeline does: put (adopted) and read
// back, held by one call and not by another, charged by the call holding
// it (which frees it) and refused a charge that does not follow the row's,
// freed without a charge by its call's failure (its replay key set
// aside), refunded.
func TestChannelRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network = "eip155:84532"
	s, sign := testChannel(t, 1_000_000, 20_000)

	putChannel(ctx, t, db, network, s)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, store.ChannelAdopt(ctx, tx, network, s), store.ErrConflict, "a record is never replaced by the chain's view")
	require.NoError(t, tx.Rollback(ctx))
	got, err := store.ChannelGet(ctx, db.Pool, network, s.ChannelID)
	require.NoError(t, err)
	require.Equal(t, s.Config, got.State.Config)
	require.Equal(t, "20000", got.State.Charged.String())
	require.Nil(t, got.State.Signed)
	require.Nil(t, got.UnclaimedSince)
	require.Empty(t, got.BusyCall)
	_, err = store.ChannelGet(ctx, db.Pool, "eip155:8453", s.ChannelID)
	require.ErrorIs(t, err, store.ErrNotFound)

	hold := func(call string, charged int64) bool {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		ok, err := store.ChannelHold(ctx, tx, network, s.ChannelID, call, big.NewInt(charged))
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		return ok
	}
	stream := store.ChannelStream(network, s.ChannelID)
	charge := func(call string, amount, charged int64) error {
		signed, sig := sign(charged)
		return appendTx(ctx, t, db, store.NewEvent{Stream: stream, Type: store.EventChannelCharged, Data: store.ChannelCharged{
			CallID: call, Amount: big.NewInt(amount).String(), Charged: big.NewInt(charged).String(), Signed: signed.String(), Signature: sig}})
	}

	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"holds of one admission: refused for a stale charge, then held, then busy", func(t *testing.T) {
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			held, err := store.ChannelHoldMany(ctx, tx, []store.ChannelHoldRequest{
				{Network: network, ID: s.ChannelID, CallID: "c0", Charged: big.NewInt(10_000)},
				{Network: network, ID: s.ChannelID, CallID: "c1", Charged: big.NewInt(20_000)},
				{Network: network, ID: s.ChannelID, CallID: "c3", Charged: big.NewInt(20_000)},
				{Network: "eip155:8453", ID: s.ChannelID, CallID: "c4", Charged: big.NewInt(20_000)},
			})
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			require.Equal(t, []bool{false, true, false, false}, held)
		}},
		{"busy", func(t *testing.T) { require.False(t, hold("c2", 20_000)) }},
		{"charge by another call refused", func(t *testing.T) {
			require.ErrorIs(t, charge("c2", 10_000, 30_000), store.ErrConflict)
		}},
		{"charge not following the row refused", func(t *testing.T) {
			require.ErrorIs(t, charge("c1", 10_000, 40_000), store.ErrConflict)
		}},
		{"charged and freed", func(t *testing.T) {
			require.NoError(t, charge("c1", 10_000, 30_000))
			c, err := store.ChannelGet(ctx, db.Pool, network, s.ChannelID)
			require.NoError(t, err)
			require.Equal(t, "30000", c.State.Charged.String())
			require.Equal(t, "30000", c.State.Signed.String())
			require.NotNil(t, c.UnclaimedSince)
			require.Empty(t, c.BusyCall)
			require.Equal(t, "10000", c.State.Unclaimed().String())
		}},
		{"a failed call frees its channel and its replay key", func(t *testing.T) {
			v := verified("n-c3")
			v.Payment = paytest.ExactEVM("0xA11ce00000000000000000000000000000000001", "n-c3")
			require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: store.CallStream("c3"), Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: v, JobID: 1}}))
			require.True(t, hold("c3", 30_000))
			require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: store.CallStream("c3"), Type: store.EventJobFailed, Data: store.JobFailed{JobID: 1, Error: "operation_failed"}}))
			c, err := store.ChannelGet(ctx, db.Pool, network, s.ChannelID)
			require.NoError(t, err)
			require.Empty(t, c.BusyCall)
			_, err = store.CallGetByPaymentKey(ctx, db.Pool, v.Payment.Key())
			require.ErrorIs(t, err, store.ErrNotFound)
			// The same payment admits a new call.
			require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: store.CallStream("c4"), Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: v, JobID: 2}}))
		}},
		{"refunded", func(t *testing.T) {
			require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: stream, Type: store.EventChannelRefunded, Data: store.ChannelRefunded{
				CallID: "c5", Transaction: "0x01", Amount: "970000", Nonce: "0", Balance: "30000"}}))
			c, err := store.ChannelGet(ctx, db.Pool, network, s.ChannelID)
			require.NoError(t, err)
			require.Equal(t, "30000", c.State.OnChain.Balance.String())
			require.Equal(t, "1", c.State.OnChain.RefundNonce.String())
			require.ErrorIs(t, appendTx(ctx, t, db, store.NewEvent{Stream: stream, Type: store.EventChannelRefunded, Data: store.ChannelRefunded{
				CallID: "c5", Transaction: "0x01", Amount: "1", Nonce: "0", Balance: "29999"}}), store.ErrConflict)
		}},
	} {
		t.Run(tc.name, tc.run)
	}
	events, err := store.EventListByStream(ctx, db.Pool, stream)
	require.NoError(t, err)
	types := make([]string, len(events))
	for i, e := range events {
		types[i] = e.Type
	}
	require.Equal(t, []string{store.EventChannelAdopted, store.EventChannelCharged, store.EventChannelRefunded}, types)
}

// TestChannelChargedTogether: the charges of one Append, each on its own
// channel, are made together (one statement), each as its own would be: a
// charge that does not follow its row refuses them all, and a channel
// charged twice in one Append takes both in order.
func TestChannelChargedTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network = "eip155:84532"
	type ch struct {
		s    *channel.State
		sign func(int64) (*big.Int, []byte)
	}
	chans := make([]ch, 3)
	for i := range chans {
		chans[i].s, chans[i].sign = testChannel(t, 1_000_000, 0)
		putChannel(ctx, t, db, network, chans[i].s)
	}
	charge := func(i int, call string, amount, charged int64) store.NewEvent {
		signed, sig := chans[i].sign(charged)
		return store.NewEvent{Stream: store.ChannelStream(network, chans[i].s.ChannelID), Type: store.EventChannelCharged, Data: store.ChannelCharged{
			CallID: call, Amount: big.NewInt(amount).String(), Charged: big.NewInt(charged).String(), Signed: signed.String(), Signature: sig}}
	}
	charged := func() []string {
		out := make([]string, len(chans))
		for i, c := range chans {
			row, err := store.ChannelGet(ctx, db.Pool, network, c.s.ChannelID)
			require.NoError(t, err)
			out[i] = row.State.Charged.String()
		}
		return out
	}

	require.ErrorIs(t, appendTx(ctx, t, db, charge(0, "a1", 10, 10), charge(1, "b1", 10, 20), charge(2, "c1", 10, 10)), store.ErrConflict,
		"the second does not follow its row")
	require.Equal(t, []string{"0", "0", "0"}, charged(), "none is made")
	require.NoError(t, appendTx(ctx, t, db, charge(0, "a1", 10, 10), charge(1, "b1", 20, 20), charge(2, "c1", 30, 30)))
	require.Equal(t, []string{"10", "20", "30"}, charged())
	require.NoError(t, appendTx(ctx, t, db, charge(0, "a2", 5, 15), charge(0, "a3", 5, 20), charge(1, "b2", 1, 21)))
	require.Equal(t, []string{"20", "21", "30"}, charged())
	row, err := store.ChannelGet(ctx, db.Pool, network, chans[0].s.ChannelID)
	require.NoError(t, err)
	require.Equal(t, "20", row.State.Signed.String(), "the last voucher of the channel")

	// ChannelList: the records of those that have one, another network's
	// not among them.
	keys := []store.ChannelKey{{Network: network, ID: chans[2].s.ChannelID}, {Network: "eip155:8453", ID: chans[1].s.ChannelID},
		{Network: network, ID: common.HexToHash("0x02")}, {Network: network, ID: chans[0].s.ChannelID}}
	rows, err := store.ChannelList(ctx, db.Pool, keys)
	require.NoError(t, err)
	got := map[common.Hash]string{}
	for _, r := range rows {
		require.Equal(t, network, r.Network)
		got[r.State.ChannelID] = r.State.Charged.String()
	}
	require.Equal(t, map[common.Hash]string{chans[0].s.ChannelID: "20", chans[2].s.ChannelID: "30"}, got)
}

// TestChannelOpened opens a channel by its deposit's event, charges the
// deposit's voucher with it, and tops it up.
func TestChannelOpened(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network = "eip155:84532"
	s, sign := testChannel(t, 0, 0)
	stream := store.ChannelStream(network, s.ChannelID)
	signed, sig := sign(10_000)
	require.NoError(t, appendTx(ctx, t, db,
		store.NewEvent{Stream: stream, Type: store.EventChannelOpened, Data: store.ChannelOpened{Config: &s.Config, CallID: "c1", Transaction: "0x02", Amount: "100000", Balance: "100000"}},
		store.NewEvent{Stream: stream, Type: store.EventChannelCharged, Data: store.ChannelCharged{CallID: "c1", Amount: "10000", Charged: "10000", Signed: signed.String(), Signature: sig}},
	))
	c, err := store.ChannelGet(ctx, db.Pool, network, s.ChannelID)
	require.NoError(t, err)
	require.Equal(t, "100000", c.State.OnChain.Balance.String())
	require.Equal(t, "10000", c.State.Charged.String())
	require.Equal(t, s.ChannelID, c.State.ChannelID)
	require.NoError(t, appendTx(ctx, t, db,
		store.NewEvent{Stream: stream, Type: store.EventChannelDeposited, Data: store.ChannelOpened{CallID: "c2", Transaction: "0x03", Amount: "50000", Balance: "150000"}}))
	c, err = store.ChannelGet(ctx, db.Pool, network, s.ChannelID)
	require.NoError(t, err)
	require.Equal(t, "150000", c.State.OnChain.Balance.String())
}

// TestCallListToSettleHeld reads calls to settle with the record of the
// channel each holds, in one statement: the record as ChannelGet reads
// it for the call that holds a channel, none for a call that holds none,
// and none from CallListToSettle.
func TestCallListToSettleHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network = "eip155:84532"
	s, sign := testChannel(t, 1_000_000, 20_000)
	s.Signed, s.Signature = sign(20_000)
	putChannel(ctx, t, db, network, s)
	for i, call := range []string{"held", "free"} {
		v := verified("n-" + call)
		v.Payment = paytest.ExactEVM("0xA11ce00000000000000000000000000000000001", "n-"+call)
		require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: store.CallStream(call), Type: store.EventCallPaid,
			Data: store.PaidCall{PaymentVerified: v, JobID: int64(i + 1)}}))
	}
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	ok, err := store.ChannelHold(ctx, tx, network, s.ChannelID, "held", big.NewInt(20_000))
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, tx.Commit(ctx))
	want, err := store.ChannelGet(ctx, db.Pool, network, s.ChannelID)
	require.NoError(t, err)
	require.Equal(t, "held", want.BusyCall)

	calls, err := store.CallListToSettleHeld(ctx, db.Pool, []string{"held", "free", "nope"})
	require.NoError(t, err)
	require.Len(t, calls, 2)
	byID := map[string]*store.Call{}
	for _, c := range calls {
		byID[c.ID] = c
	}
	require.Equal(t, want, byID["held"].Payment.Record)
	require.NotEmpty(t, byID["held"].Payment.Payload)
	require.Nil(t, byID["free"].Payment.Record)
	require.NotEmpty(t, byID["free"].Payment.Payload)

	plain, err := store.CallListToSettle(ctx, db.Pool, []string{"held"})
	require.NoError(t, err)
	require.Len(t, plain, 1)
	require.Nil(t, plain[0].Payment.Record)
	require.Equal(t, byID["held"].Payment.Payload, plain[0].Payment.Payload)
}

// BenchmarkCallListToSettleHeld reads the payments of a group of 50
// voucher calls and their channels' records, as the transaction that
// records their results and charges them does: the calls, then each
// channel by itself (ChannelGet), against both in one statement.
func BenchmarkCallListToSettleHeld(b *testing.B) {
	ctx := context.Background()
	db := dbtest.Schema(ctx, b)
	const network = "eip155:84532"
	ids := make([]string, 50)
	channels := make([]common.Hash, len(ids))
	for i := range ids {
		s, _ := testChannel(b, 1_000_000, 0)
		putChannel(ctx, b, db, network, s)
		ids[i], channels[i] = fmt.Sprintf("call-%d", i), s.ChannelID
		v := verified("n-" + ids[i])
		v.Payment = paytest.ExactEVM("0xA11ce00000000000000000000000000000000001", "n-"+ids[i])
		require.NoError(b, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if err := store.Append(ctx, tx, store.NewEvent{Stream: store.CallStream(ids[i]), Type: store.EventCallPaid,
				Data: store.PaidCall{PaymentVerified: v, JobID: int64(i + 1)}}); err != nil {
				return err
			}
			ok, err := store.ChannelHold(ctx, tx, network, s.ChannelID, ids[i], big.NewInt(0))
			require.True(b, ok)
			return err
		}))
	}
	b.Run("calls, then each channel", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			calls, err := store.CallListToSettle(ctx, db.Pool, ids)
			require.NoError(b, err)
			require.Len(b, calls, len(ids))
			for _, id := range channels {
				_, err := store.ChannelGet(ctx, db.Pool, network, id)
				require.NoError(b, err)
			}
		}
	})
	b.Run("calls with their channels", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			calls, err := store.CallListToSettleHeld(ctx, db.Pool, ids)
			require.NoError(b, err)
			for _, c := range calls {
				require.NotNil(b, c.Payment.Record)
			}
		}
	})
}
