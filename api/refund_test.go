package api

import (
	"context"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/regex"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm/channel"
)

// pendingRefunds is the test double's payments with refunds: each refund
// asked is pending on a channel stream, its outcome what the channel's
// events of it say (as chanpay's).
type pendingRefunds struct {
	paytest.Payments
	pool    *dbtest.DB
	network string
	id      common.Hash
	asked   chan string
}

func (p *pendingRefunds) Refund(_ context.Context, _, header string) (*x402.PendingRefund, error) {
	p.asked <- header
	return &x402.PendingRefund{Stream: store.ChannelStream(p.network, p.id), Outcome: func(ctx context.Context) (*x402.SettleResponse, error) {
		rec, err := store.ChannelRefundGet(ctx, p.pool.Pool, p.network, p.id, header)
		switch {
		case err != nil:
			return nil, err
		case rec.Failed != nil:
			return nil, &x402.Refusal{Reason: rec.Failed.Reason, Message: rec.Failed.Message}
		case rec.Refunded != nil:
			return &x402.SettleResponse{Success: true, Network: p.network, Transaction: rec.Refunded.Transaction, Amount: rec.Refunded.Amount}, nil
		}
		return nil, nil
	}}, nil
}

// TestRefundAwaitsItsOutcome: a refund request waits for its refund's
// outcome, appended by another process (the refund job), woken by its
// event's NOTIFY (the wait itself never ends on the fake clock): 200 with
// its PAYMENT-RESPONSE when refunded, the 402 of its reason when it
// failed.
func TestRefundAwaitsItsOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	listener := store.NewListener(db.Pool.Config().ConnConfig, slog.New(slog.DiscardHandler))
	require.NoError(t, listener.Start(ctx))
	t.Cleanup(listener.Stop)
	const network = "eip155:8453"
	cfg := channel.Config{Payer: common.HexToAddress("0xA11ce00000000000000000000000000000000002"), Receiver: common.HexToAddress("0x09"),
		ReceiverAuthorizer: common.HexToAddress("0x0a"), Token: common.HexToAddress("0x0b"), WithdrawDelay: 86400}
	st := channel.NewState(&cfg, big.NewInt(8453), &channel.OnChain{Balance: big.NewInt(100_000), TotalClaimed: new(big.Int), RefundNonce: new(big.Int)})
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return store.ChannelPut(ctx, tx, network, st) }))
	payments := &pendingRefunds{pool: db, network: network, id: st.ChannelID, asked: make(chan string, 1)}
	s, err := New(&Config{
		Ops: []jobs.Operation{regex.Op}, Payments: payments, Pool: db.Pool, River: rc, Listener: listener,
		Metrics: metrics.New(&metrics.Config{}), Logger: slog.New(slog.DiscardHandler), Clock: clock.NewFake(time.Now()),
	})
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name    string
		outcome store.NewEvent
		status  int
		check   func(t *testing.T, resp *http.Response)
	}{
		{"Refunded", store.NewEvent{Type: store.EventChannelRefunded, Data: store.ChannelRefunded{CallID: "refund-1",
			Transaction: "0x" + common.Bytes2Hex(make([]byte, 32)), Amount: "70000", Nonce: "0", Balance: "30000"}},
			http.StatusOK, func(t *testing.T, resp *http.Response) {
				var settled x402.SettleResponse
				require.NoError(t, x402.DecodeHeader(resp.Header.Get(headerPaymentResponse), &settled))
				require.True(t, settled.Success)
				require.Equal(t, "70000", settled.Amount)
			}},
		{"Failed", store.NewEvent{Type: store.EventChannelRefundFailed, Data: store.ChannelRefundFailed{CallID: "refund-2",
			Reason: channel.ReasonRefundTransactionFailed, Message: "reverted"}},
			http.StatusPaymentRequired, func(t *testing.T, resp *http.Response) {
				var required x402.PaymentRequired
				require.NoError(t, x402.DecodeHeader(resp.Header.Get(headerPaymentRequired), &required))
				require.Equal(t, channel.ReasonRefundTransactionFailed, required.Error)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			callID := map[string]string{"Refunded": "refund-1", "Failed": "refund-2"}[tc.name]
			answered := make(chan *http.Response, 1)
			rctx, cancel := context.WithCancel(ctx)
			t.Cleanup(cancel)
			go func() {
				req, _ := http.NewRequestWithContext(rctx, http.MethodGet, srv.URL+"/api/x402/regex", nil)
				req.Header.Set(headerPaymentSignature, callID)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					close(answered)
					return
				}
				answered <- resp
			}()
			require.Equal(t, callID, <-payments.asked)
			select {
			case resp := <-answered:
				t.Fatalf("answered %d before the refund's outcome", resp.StatusCode)
			case <-time.After(100 * time.Millisecond):
			}
			e := tc.outcome
			e.Stream = store.ChannelStream(payments.network, payments.id)
			require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return store.Append(ctx, tx, e) }))
			select {
			case resp, ok := <-answered:
				require.True(t, ok, "the request failed")
				defer resp.Body.Close()
				require.Equal(t, tc.status, resp.StatusCode)
				tc.check(t, resp)
			case <-time.After(10 * time.Second):
				t.Fatal("the outcome's NOTIFY did not wake the request")
			}
		})
	}
}
