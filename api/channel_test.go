package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm/channel"
)

// TestAdmitterHoldsChannels: the admission of a batch-settlement payment
// holds its channel busy in the call's transaction, or records nothing
// (unheld): a payment checked against a charge the channel no longer has,
// one whose channel another call holds, and, of many payments of one
// channel admitted at once, all but one. Other payments in the same group
// are admitted; the channel is held by the call admitted.
func TestAdmitterHoldsChannels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	admit := newAdmitter(db.Pool, rc, nil, false, nil)
	const network = "eip155:8453"
	put := func(salt byte) common.Hash {
		cfg := channel.Config{Payer: common.HexToAddress("0xA11ce00000000000000000000000000000000001"), Receiver: common.HexToAddress("0x09"),
			ReceiverAuthorizer: common.HexToAddress("0x0a"), Token: common.HexToAddress("0x0b"), WithdrawDelay: 86400, Salt: common.Hash{salt}}
		s := channel.NewState(&cfg, big.NewInt(8453), &channel.OnChain{Balance: big.NewInt(1_000_000), TotalClaimed: big.NewInt(20_000), RefundNonce: new(big.Int)})
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return store.ChannelPut(ctx, tx, network, s) }))
		return s.ChannelID
	}
	n := 0
	adm := func(id common.Hash, charged int64) *admission {
		n++
		a := &admission{
			callID: fmt.Sprintf("call%03d", n),
			verified: store.PaymentVerified{Op: "diff", Token: "tok", RequestHash: []byte{1},
				Payment: x402.Payment{Network: network, Payer: "0xabc", Nonce: fmt.Sprintf("n%d", n), Amount: "1", Payload: json.RawMessage(`{}`)}},
			job:     river.InsertManyParams{Args: admitTestArgs{N: n}, InsertOpts: &river.InsertOpts{Queue: "pure"}},
			network: network,
		}
		if id != (common.Hash{}) {
			a.hold = &x402.ChannelHold{ChannelID: id, Charged: big.NewInt(charged)}
		}
		return a
	}
	recorded := func(a *admission) bool {
		var calls int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls WHERE id = $1", a.callID).Scan(&calls))
		return calls == 1
	}
	busyWith := func(id common.Hash) string {
		c, err := store.ChannelGet(ctx, db.Pool, network, id)
		require.NoError(t, err)
		return c.BusyCall
	}

	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"held", func(t *testing.T) {
			id := put(1)
			a := adm(id, 20_000)
			require.NoError(t, admit.Commit(ctx, a))
			require.False(t, a.unheld)
			require.True(t, recorded(a))
			require.Equal(t, a.callID, busyWith(id))
		}},
		{"stale charge", func(t *testing.T) {
			id := put(2)
			a := adm(id, 10_000)
			require.NoError(t, admit.Commit(ctx, a))
			require.True(t, a.unheld)
			require.False(t, recorded(a))
			require.Empty(t, busyWith(id))
		}},
		{"busy", func(t *testing.T) {
			id := put(3)
			first, second := adm(id, 20_000), adm(id, 20_000)
			require.NoError(t, admit.Commit(ctx, first))
			require.NoError(t, admit.Commit(ctx, second))
			require.False(t, first.unheld)
			require.True(t, second.unheld)
			require.False(t, recorded(second))
			require.Equal(t, first.callID, busyWith(id))
		}},
		{"one of many at once, others admitted beside", func(t *testing.T) {
			id := put(4)
			batch := make([]*admission, 20)
			for i := range batch {
				if i%2 == 0 {
					batch[i] = adm(id, 20_000)
				} else {
					batch[i] = adm(common.Hash{}, 0)
				}
			}
			var wg sync.WaitGroup
			errs := make([]error, len(batch))
			for i, a := range batch {
				wg.Go(func() { errs[i] = admit.Commit(ctx, a) })
			}
			wg.Wait()
			held := ""
			for i, a := range batch {
				require.NoError(t, errs[i])
				if a.hold == nil {
					require.True(t, recorded(a), "a payment of no channel is admitted")
					continue
				}
				if !a.unheld {
					require.Empty(t, held, "one call holds the channel")
					held = a.callID
				}
				require.Equal(t, !a.unheld, recorded(a))
			}
			require.Equal(t, held, busyWith(id))
		}},
	} {
		t.Run(tc.name, tc.run)
	}
}
