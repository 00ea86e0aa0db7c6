package api

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// TestAdmitterPaymentIdentified admits 60 calls at once, each with its own
// payment, in groups sharing transactions: three payers each send 20
// payments under one payment identifier (two payers the same id). One call
// per payer and id is recorded with its job; every other one is refused
// with store.ErrConflict and leaves no call and no job.
func TestAdmitterPaymentIdentified(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	admit := newAdmitter(db.Pool, rc, nil, false, nil)

	type sender struct{ payer, id string }
	senders := []sender{{"0xa", "pay_shared_id_0000001"}, {"0xb", "pay_shared_id_0000001"}, {"0xa", "pay_other_id_00000001"}}
	const each = 20
	errs := make([]error, len(senders)*each)
	var wg sync.WaitGroup
	for i := range errs {
		s := senders[i%len(senders)]
		wg.Go(func() {
			errs[i] = admit.Commit(ctx, &admission{
				callID: fmt.Sprintf("call%03d", i),
				verified: store.PaymentVerified{Op: "diff", Token: "tok", RequestHash: []byte{1},
					Payment: x402.Payment{Network: "eip155:8453", Payer: s.payer, Nonce: fmt.Sprintf("n%d", i), Amount: "1", Payload: json.RawMessage(`{}`)}},
				job:        river.InsertManyParams{Args: admitTestArgs{N: i}, InsertOpts: &river.InsertOpts{Queue: "pure"}},
				identified: &store.PaymentIdentified{Payer: s.payer, ID: s.id},
			})
		})
	}
	wg.Wait()
	admitted := map[sender]string{}
	for i, err := range errs {
		if err != nil {
			require.ErrorIs(t, err, store.ErrConflict)
			continue
		}
		s := senders[i%len(senders)]
		require.NotContains(t, admitted, s, "one call per payer and id")
		admitted[s] = fmt.Sprintf("call%03d", i)
	}
	require.Len(t, admitted, len(senders))
	for s, callID := range admitted {
		c, err := store.CallGetByPaymentID(ctx, db.Pool, s.payer, s.id)
		require.NoError(t, err)
		require.Equal(t, callID, c.ID)
	}
	var calls, jobs int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls").Scan(&calls))
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'admit_test'").Scan(&jobs))
	require.Equal(t, len(senders), calls)
	require.Equal(t, len(senders), jobs, "the refused calls' jobs were rolled back")
}
