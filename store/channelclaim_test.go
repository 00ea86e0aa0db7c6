package store_test

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// claimedEvent appends the channel.claimed of the channel of stream: its
// claimed total on chain is total (undone: after the claim undone).
func claimedEvent(ctx context.Context, t *testing.T, db *dbtest.DB, stream, total, undone string) {
	t.Helper()
	require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: stream, Type: store.EventChannelClaimed,
		Data: store.ChannelClaimed{Transaction: "0xc1", TotalClaimed: total, Undone: undone}}))
}

// TestChannelClaimRows drives a channel's row through the claims' events:
// charged past its claimed total it is listed to claim (and counted by the
// policy's figures); channel.claimed raises its claimed total (never
// lowers it, but for a claim undone) and dates the charges left; a claim
// refused at a charge leaves it out until its charge moves; a withdrawal
// makes it urgent until it ends. The claim records are followed: pending, moved, gone,
// final; the watcher's cursor and the claim lock.
func TestChannelClaimRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network = "eip155:84532"
	s, sign := testChannel(t, 1_000_000, 20_000)
	s.Charged = big.NewInt(50_000)
	s.Signed, s.Signature = sign(50_000)
	putChannel(ctx, t, db, network, s)
	other, _ := testChannel(t, 1_000_000, 0) // nothing charged: never listed
	putChannel(ctx, t, db, network, other)
	stream := store.ChannelStream(network, s.ChannelID)

	list := func(urgentOnly bool, also ...common.Hash) []store.ChannelToClaim {
		rows, err := store.ChannelListToClaim(ctx, db.Pool, network, 10, urgentOnly, also, nil)
		require.NoError(t, err)
		return rows
	}
	rows := list(false)
	require.Len(t, rows, 1)
	require.Equal(t, s.ChannelID, rows[0].State.ChannelID)
	require.Equal(t, s.Config, rows[0].State.Config)
	require.Equal(t, "50000", rows[0].State.Signed.String())
	require.Empty(t, list(true), "nothing urgent")
	require.Len(t, list(true, s.ChannelID), 1, "named urgent")
	except, err := store.ChannelListToClaim(ctx, db.Pool, network, 10, false, nil, []common.Hash{s.ChannelID})
	require.NoError(t, err)
	require.Empty(t, except, "claimed by the round already")
	u, err := store.ChannelUnclaimed(ctx, db.Pool, network)
	require.NoError(t, err)
	require.Equal(t, 1, u.Channels)
	require.Equal(t, "30000", u.Amount.String())
	require.False(t, u.Oldest.IsZero())
	since := u.Oldest

	claimed := func(total, undone string) { claimedEvent(ctx, t, db, stream, total, undone) }
	row := func() *store.Channel {
		c, err := store.ChannelGet(ctx, db.Pool, network, s.ChannelID)
		require.NoError(t, err)
		return c
	}
	claimed("40000", "")
	require.Equal(t, "40000", row().State.OnChain.TotalClaimed.String())
	require.NotNil(t, row().UnclaimedSince)
	require.True(t, row().UnclaimedSince.Equal(since), "the charges left date from the oldest of them (the adoption's), not the claim")
	claimed("30000", "")
	require.Equal(t, "40000", row().State.OnChain.TotalClaimed.String(), "a lower total does not lower it")
	claimed("50000", "")
	require.Equal(t, "50000", row().State.OnChain.TotalClaimed.String())
	require.Nil(t, row().UnclaimedSince, "all claimed")
	require.Empty(t, list(false))
	claimed("20000", "0xc1")
	require.Equal(t, "20000", row().State.OnChain.TotalClaimed.String(), "an undone claim sets it back")
	require.True(t, row().UnclaimedSince.Equal(since), "its charges unclaimed again date from the oldest")

	require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: stream, Type: store.EventChannelClaimRefused,
		Data: store.ChannelClaimRefused{Charged: "50000", Reason: "InvalidSignature"}}))
	require.Empty(t, list(false), "refused at this charge")
	u, err = store.ChannelUnclaimed(ctx, db.Pool, network)
	require.NoError(t, err)
	require.Zero(t, u.Channels)
	signed, sig := sign(60_000)
	require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: stream, Type: store.EventChannelCharged, Data: store.ChannelCharged{
		CallID: "c1", Amount: "10000", Charged: "60000", Signed: signed.String(), Signature: sig}}))
	require.Len(t, list(false), 1, "the charge moved: tried again")

	require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: stream, Type: store.EventChannelWithdrawInitiated,
		Data: store.ChannelWithdrawInitiated{Block: 7, Transaction: "0xw", At: 1_700_000_000, FinalizeAfter: 1_700_086_400, Amount: "5"}}))
	require.Equal(t, uint64(1_700_000_000), row().State.OnChain.WithdrawRequestedAt)
	require.Len(t, list(true), 1, "a withdrawal makes it urgent")
	require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: stream, Type: store.EventChannelWithdrawFinalized,
		Data: store.ChannelWithdrawFinalized{Block: 9, Transaction: "0xf", Amount: "5", Balance: "999995"}}))
	require.Zero(t, row().State.OnChain.WithdrawRequestedAt, "the withdrawal ended")
	require.Equal(t, "999995", row().State.OnChain.Balance.String())
	require.Empty(t, list(true), "nothing urgent once it ended")
	held, err := store.ChannelHeld(ctx, db.Pool, network, []common.Hash{s.ChannelID, {0x01}})
	require.NoError(t, err)
	require.Equal(t, map[common.Hash]bool{s.ChannelID: true}, held)
	networks, err := store.ChannelNetworkList(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, []string{network}, networks)

	// The records of claims and settles, followed.
	rec := func(tx, kind string) {
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(dbtx pgx.Tx) error {
			return store.ChannelClaimRecord(ctx, dbtx, &store.ChannelClaimTx{Network: network, Kind: kind, Channels: []common.Hash{s.ChannelID},
				Receiver: s.Config.Receiver, Token: s.Config.Token, Amount: big.NewInt(100), GasUsed: 1,
				FollowedTx: x402.FollowedTx{Transaction: tx, Block: x402.SettledBlock{Number: 5, Hash: "0x05"}}})
		}))
	}
	rec("0xa", store.ClaimKindClaim)
	rec("0xb", store.ClaimKindSettle)
	pending, err := store.ChannelClaimPendingList(ctx, db.Pool, network, 10)
	require.NoError(t, err)
	require.Len(t, pending, 2)
	require.Equal(t, []common.Hash{s.ChannelID}, pending[0].Channels)
	require.Equal(t, s.Config.Receiver, pending[1].Receiver)
	now := time.Now()
	require.NoError(t, store.ChannelClaimGone(ctx, db.Pool, network, "0xa", now, false))
	require.NoError(t, store.ChannelClaimMove(ctx, db.Pool, network, "0xb", x402.SettledBlock{Number: 6, Hash: "0x06"}))
	pending, err = store.ChannelClaimPendingList(ctx, db.Pool, network, 10)
	require.NoError(t, err)
	require.False(t, pending[0].GoneSince.IsZero())
	require.Equal(t, uint64(6), pending[1].Block.Number)
	require.NoError(t, store.ChannelClaimGone(ctx, db.Pool, network, "0xa", now, true))
	require.NoError(t, store.ChannelClaimFinal(ctx, db.Pool, network, []string{"0xb"}))
	pending, err = store.ChannelClaimPendingList(ctx, db.Pool, network, 10)
	require.NoError(t, err)
	require.Empty(t, pending)
	totals, err := store.ChannelTotalsList(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, totals, 1)
	require.Equal(t, 2, totals[0].Channels)
	require.Equal(t, "20000", totals[0].Claimed.String(), "the rows' claimed totals (the undone claim taken back)")
	require.Zero(t, totals[0].Settled.Sign(), "no receiver's totals read yet")
	require.NoError(t, store.ChannelReceiverSet(ctx, db.Pool, network, store.ChannelReceiver{Receiver: s.Config.Receiver, Token: s.Config.Token},
		big.NewInt(20_000), big.NewInt(15_000)))
	require.NoError(t, store.ChannelReceiverSet(ctx, db.Pool, network, store.ChannelReceiver{Receiver: s.Config.Receiver, Token: s.Config.Token},
		big.NewInt(20_000), big.NewInt(20_000)))
	totals, err = store.ChannelTotalsList(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, "20000", totals[0].Settled.String(), "the receiver's settled total as last read")

	_, known, err := store.ChannelClaimCursor(ctx, db.Pool, network)
	require.NoError(t, err)
	require.False(t, known)
	require.NoError(t, store.ChannelClaimCursorSet(ctx, db.Pool, network, 42))
	next, known, err := store.ChannelClaimCursor(ctx, db.Pool, network)
	require.NoError(t, err)
	require.True(t, known)
	require.Equal(t, uint64(42), next)

	a, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer a.Release()
	b, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer b.Release()
	mine, err := store.ChannelClaimLock(ctx, a, network)
	require.NoError(t, err)
	require.True(t, mine)
	mine, err = store.ChannelClaimLock(ctx, b, network)
	require.NoError(t, err)
	require.False(t, mine, "one process claims a network at a time")
	require.NoError(t, store.ChannelClaimUnlock(ctx, a, network))
	mine, err = store.ChannelClaimLock(ctx, b, network)
	require.NoError(t, err)
	require.True(t, mine)
	require.NoError(t, store.ChannelClaimUnlock(ctx, b, network))
}

// TestChannelUnclaimedSince: a channel's unclaimed charges date from the
// oldest of them, whatever claims came since: a partial claim dates them
// from the first charge it left (partly) unclaimed, not from the claim;
// a claim that moves nothing keeps the date; a claim undone dates them
// from the oldest charge it left unclaimed again.
func TestChannelUnclaimedSince(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network = "eip155:84532"
	s, sign := testChannel(t, 1_000_000, 20_000)
	s.Charged = big.NewInt(20_000)
	putChannel(ctx, t, db, network, s)
	stream := store.ChannelStream(network, s.ChannelID)
	since := func() *time.Time {
		c, err := store.ChannelGet(ctx, db.Pool, network, s.ChannelID)
		require.NoError(t, err)
		return c.UnclaimedSince
	}
	require.Nil(t, since(), "all claimed")

	// Charges to 30,000, 40,000 and 50,000, each at its own time.
	at := map[int64]time.Time{}
	charge := func(to int64) {
		signed, sig := sign(to)
		require.NoError(t, appendTx(ctx, t, db, store.NewEvent{Stream: stream, Type: store.EventChannelCharged, Data: store.ChannelCharged{
			CallID: "c", Amount: "10000", Charged: signed.String(), Signed: signed.String(), Signature: sig}}))
		events, err := store.EventListByStream(ctx, db.Pool, stream)
		require.NoError(t, err)
		at[to] = events[len(events)-1].CreatedAt
	}
	for _, to := range []int64{30_000, 40_000, 50_000} {
		charge(to)
	}
	require.True(t, since().Equal(at[30_000]))
	claimed := func(total, undone string) { claimedEvent(ctx, t, db, stream, total, undone) }

	claimed("35000", "")
	require.True(t, since().Equal(at[40_000]), "the charge to 40,000 is partly unclaimed: %s, want %s", since(), at[40_000])
	claimed("30000", "")
	require.True(t, since().Equal(at[40_000]), "a claim that moves nothing keeps the date")
	claimed("40000", "")
	require.True(t, since().Equal(at[50_000]))
	claimed("20000", "0xc1")
	require.True(t, since().Equal(at[30_000]), "undone: the charges from 30,000 on are unclaimed again")
	claimed("50000", "")
	require.Nil(t, since(), "all claimed")
	charge(60_000)
	require.True(t, since().Equal(at[60_000]))
}
