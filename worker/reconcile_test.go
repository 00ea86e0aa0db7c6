package worker_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/evmtest"
)

// exhaustingSettler is the relayer whose every settlement attempt fails:
// for the payments named in land after their transfer is mined (the
// answer lost), for the others before anything is sent (the chain
// unreachable). It reconciles as the relayer does.
type exhaustingSettler struct {
	*evm.Relayer
	land map[string]bool
	mu   sync.Mutex
	// landed is the transaction of each payment landed, by nonce.
	landed map[string]string
}

func (s *exhaustingSettler) Settle(ctx context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	if !s.land[p.Nonce] {
		return nil, errors.New("chain unreachable")
	}
	resp, err := s.Relayer.Settle(ctx, p)
	if err == nil && resp.Success {
		s.mu.Lock()
		s.landed[p.Nonce] = resp.Transaction
		s.mu.Unlock()
	}
	return nil, errors.New("settlement answer lost")
}

// TestReconcileExhaustedSettlements exhausts the settle jobs of four calls
// on the devchain: one whose transfer landed though every attempt failed,
// one whose payer canceled the authorization, one whose authorization
// expired unused, one still valid and unused. The reconciliation finds the
// first paid on chain (settlement.confirmed naming its transaction, the
// result released), the second lost (settlement.lost with its amount, the
// result released), the third refused (settlement.failed, nothing charged,
// the result withheld), and settles the fourth once more, which fails
// again: it stays settling, for the next run.
func TestReconcileExhaustedSettlements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	stack := evmtest.New(t)
	network := stack.Chain.Network()
	req := &x402.Requirements{
		Scheme: "exact", Network: network, Amount: "10000", Asset: devchain.USDC.Hex(),
		PayTo: stack.Chain.Account(devchain.PayToAccount).Address.Hex(), MaxTimeoutSeconds: 300,
		Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`),
	}
	sign := func(account int, validBefore int64) (*x402.PaymentPayload, *evm.Authorization) {
		t.Helper()
		key := stack.Chain.Account(account).Key
		var nonce common.Hash
		_, err := rand.Read(nonce[:])
		require.NoError(t, err)
		auth := &evm.Authorization{
			From: crypto.PubkeyToAddress(key.PublicKey), To: common.HexToAddress(req.PayTo), Value: big.NewInt(10_000),
			ValidAfter: big.NewInt(time.Now().Unix() - 600), ValidBefore: big.NewInt(validBefore), Nonce: nonce,
		}
		id, err := evm.ChainID(network)
		require.NoError(t, err)
		sig, err := auth.Sign(key, &evm.Domain{Name: "USD Coin", Version: "2", ChainID: id, VerifyingContract: devchain.USDC})
		require.NoError(t, err)
		raw, err := json.Marshal(x402.ExactEVMPayload{Signature: "0x" + common.Bytes2Hex(sig), Authorization: auth.Wire()})
		require.NoError(t, err)
		return &x402.PaymentPayload{X402Version: 2, Accepted: *req, Payload: raw}, auth
	}
	verified := func(account int) (*x402.Payment, *evm.Authorization) {
		t.Helper()
		payload, auth := sign(account, time.Now().Unix()+300)
		p, err := stack.Verifier.Verify(ctx, req, payload)
		require.NoError(t, err)
		return p, auth
	}
	paid, _ := verified(2)
	lost, lostAuth := verified(3)
	pending, _ := verified(4)
	// Verified while valid (as the api did), expired since.
	payload, auth := sign(5, time.Now().Unix()-60)
	raw, err := payload.Ledger()
	require.NoError(t, err)
	refused := &x402.Payment{Network: network, Payer: auth.From.Hex(), Nonce: auth.Nonce.Hex(), Amount: "10000",
		Asset: devchain.USDC.Hex(), Payload: raw, VerifiedAt: time.Now().Add(-10 * time.Minute).UTC(), ValidBefore: x402.UnixTime(auth.ValidBefore)}

	// The four calls hold their results, settling.
	calls := map[string]*x402.Payment{"paid": paid, "lost": lost, "refused": refused, "pending": pending}
	i := 0
	for id, p := range calls {
		i++
		verified := store.PaymentVerified{Op: "nap", Token: "t-" + id, RequestHash: []byte{byte(i)}, Payment: *p}
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			return store.Append(ctx, tx,
				store.NewEvent{Stream: store.CallStream(id), Type: store.EventCallPaid, Data: store.PaidCall{PaymentVerified: verified, JobID: int64(i)}},
				store.NewEvent{Stream: store.CallStream(id), Type: store.EventJobSucceeded, Data: store.JobSucceeded{JobID: int64(i), Attempt: 1,
					Result: json.RawMessage(`{"call_id":"` + id + `","op":"nap"}`)}})
		}))
	}

	settler := &exhaustingSettler{Relayer: stack.Relayer, land: map[string]bool{paid.Nonce: true}, landed: map[string]string{}}
	client, err := worker.NewClient(&worker.Deps{Pool: db.Pool, Settler: settler, Logger: slog.New(slog.DiscardHandler)},
		&worker.Config{Work: true, FetchPollInterval: 50 * time.Millisecond, ReconcileEvery: time.Hour})
	require.NoError(t, err)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, worker.Stop(client, 10*time.Second)) })

	// Each call's settle job is run to its last attempt.
	for id := range calls {
		_, err := client.Insert(ctx, worker.SettleArgs{CallID: id}, &river.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
	}
	// The payer of the second takes the payment back meanwhile.
	evmtest.CancelAuthorization(t, stack.Chain, stack.Chain.Account(3).Key, lostAuth.From, lostAuth.Nonce)
	wait := func(kind string, state rivertype.JobState, n int) {
		t.Helper()
		timeout := time.After(45 * time.Second)
		for n > 0 {
			select {
			case e := <-events:
				if e.Job.Kind == kind && e.Job.State == state {
					n--
				}
			case <-timeout:
				t.Fatalf("%d %s jobs not %s", n, kind, state)
			}
		}
	}
	wait("settle", rivertype.JobStateDiscarded, len(calls))
	require.Contains(t, settler.landed, paid.Nonce, "the first call's transfer landed")
	for id := range calls {
		c, err := store.CallGetByID(ctx, db.Pool, id)
		require.NoError(t, err)
		require.Equal(t, store.CallSettling, c.State, "%s: settling for ever without the reconciliation", id)
	}

	_, err = client.Insert(ctx, worker.ReconcileArgs{}, nil)
	require.NoError(t, err)
	wait("settle.reconcile", rivertype.JobStateCompleted, 1)

	lastEvent := func(id string) store.Event {
		t.Helper()
		events, err := store.EventListByStream(ctx, db.Pool, store.CallStream(id))
		require.NoError(t, err)
		return events[len(events)-1]
	}
	answer := func(id string) *store.Call {
		t.Helper()
		c, err := store.CallGetByID(ctx, db.Pool, id)
		require.NoError(t, err)
		return c
	}

	c := answer("paid")
	require.Equal(t, store.CallPaid, c.State)
	require.JSONEq(t, `{"call_id":"paid","op":"nap"}`, string(c.Result), "the result is released")
	require.Equal(t, settler.landed[paid.Nonce], c.Settlement.Transaction, "the transaction that landed")
	require.Equal(t, store.EventSettlementConfirmed, lastEvent("paid").Type)

	c = answer("lost")
	require.Equal(t, store.CallLost, c.State)
	require.NotNil(t, c.Result, "the result is released")
	e := lastEvent("lost")
	require.Equal(t, store.EventSettlementLost, e.Type)
	var lostData store.SettlementLost
	require.NoError(t, e.Decode(&lostData))
	require.Equal(t, store.SettlementLost{Network: network, Amount: "10000", Reason: evm.ReasonNonceAlreadyUsed}, lostData)
	finality, err := store.FinalityList(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, finality, 1)
	require.Equal(t, int64(1), finality[0].LostCalls)
	require.Equal(t, "10000", finality[0].LostAmount)

	c = answer("refused")
	require.Equal(t, store.CallUnpaid, c.State, "nothing charged, the result withheld")
	require.Equal(t, evm.ReasonValidBefore, c.Settlement.ErrorReason)
	require.Equal(t, store.EventSettlementFailed, lastEvent("refused").Type)

	c = answer("pending")
	require.Equal(t, store.CallSettling, c.State, "settled again, failed again: for the next run")
	require.Equal(t, store.EventSettlementSubmitted, lastEvent("pending").Type)
}
