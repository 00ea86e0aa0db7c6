package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/channel"
	"github.com/x402d/x402d/x402/evm/chanpay"
)

// refundBounds are the refund job's bounds in these tests: a short wait
// for a receipt, and the resend and give-up bounds on the fake clock.
const (
	refundResendAfter = time.Minute
	refundGiveUpAfter = 10 * time.Minute
)

// refunder returns a Claimer of the bench's relayer that makes refunds
// with the test's bounds, on the bench's fake clock; chain, when set,
// stands for the relayer.
func (b *claimBench) refunder(chain worker.ClaimChain) *worker.Claimer {
	b.t.Helper()
	if chain == nil {
		chain = b.relayer
	}
	c, err := worker.NewClaimer(&worker.ClaimConfig{
		Pool: b.db.Pool, Chain: chain, Readers: map[string]worker.ClaimReader{claimNetwork: b.node.Client},
		AuthorizerKey: b.authorizer, Clock: b.clock, Metrics: b.metrics, RefundAwait: 300 * time.Millisecond,
		RefundResendAfter: refundResendAfter, RefundGiveUpAfter: refundGiveUpAfter,
	})
	require.NoError(b.t, err)
	return c
}

// refundAsked opens a channel of 100,000 for dev payer n, charges it
// charged and asks its refund: the channel, the payer's USDC balance
// before the refund and the refund job's args.
func (b *claimBench) refundAsked(n int, charged int64) (*benchChannel, *big.Int, *chanpay.RefundArgs) {
	ch := b.open(n, 100_000)
	b.charge(ch, charged, nil)
	return ch, b.usdc(ch.state.Config.Payer), b.requestRefund(ch)
}

// requestRefund records the request of a refund of what ch holds beyond
// its charge, as the api's admission of a refund payload does (the
// channel held by it), and returns its job's args.
func (b *claimBench) requestRefund(ch *benchChannel) *chanpay.RefundArgs {
	b.t.Helper()
	ctx := context.Background()
	onchain := b.onChain(ch)
	a := &chanpay.RefundArgs{Network: claimNetwork, ChannelID: ch.state.ChannelID, CallID: "refund/test/" + ch.state.ChannelID.Hex()[:10],
		Amount: new(big.Int).Sub(onchain.Balance, ch.state.Charged).String(), Nonce: onchain.RefundNonce.String(), RequestedAt: b.clock.Now()}
	require.NoError(b.t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		return store.ChannelRefundRequest(ctx, tx, claimNetwork, ch.state.ChannelID, store.ChannelRefundRequested{CallID: a.CallID,
			Amount: a.Amount, Nonce: a.Nonce, Charged: ch.state.Charged.String()})
	}))
	require.Equal(b.t, a.CallID, b.row(ch).BusyCall)
	return a
}

// refundRecord returns what the log holds of refund a.
func (b *claimBench) refundRecord(a *chanpay.RefundArgs) *store.ChannelRefundRecord {
	b.t.Helper()
	rec, err := store.ChannelRefundGet(context.Background(), b.db.Pool, claimNetwork, a.ChannelID, a.CallID)
	require.NoError(b.t, err)
	return rec
}

// loseRefund has the node and the relayer lose the transactions the node
// holds unmined: the node drops them, and the relayer's records of them
// go with its process (a new one starts on an emptied nonce store), so
// nothing gives them to the node again.
func (b *claimBench) loseRefund() {
	b.t.Helper()
	ctx := context.Background()
	b.relayer.Stop()
	require.NoError(b.t, b.node.Call(ctx, nil, "anvil_dropAllTransactions"))
	_, err := b.db.Pool.Exec(ctx, "DELETE FROM relayer_txs; DELETE FROM relayer_nonces")
	require.NoError(b.t, err)
	b.relayer = b.newRelayer(evm.FinalityPolicy{})
}

// rawTx returns the signed transaction hash the node holds.
func (b *claimBench) rawTx(hash string) hexutil.Bytes {
	b.t.Helper()
	var raw hexutil.Bytes
	require.NoError(b.t, b.node.Call(context.Background(), &raw, "eth_getRawTransactionByHash", hash))
	require.NotEmpty(b.t, raw)
	return raw
}

// sendRaw hands the node the signed transaction raw, as a node that kept
// it in its pool gives it to the chain later.
func (b *claimBench) sendRaw(raw hexutil.Bytes) error {
	b.t.Helper()
	return b.node.Call(context.Background(), nil, "eth_sendRawTransaction", raw)
}

// TestRefund_Made: the refund job signs the refund, sends it, records it
// sent, then refunded with the channel's state after it; the channel is
// freed and run again the job does nothing.
func TestRefund_Made(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClaimBench(t, evm.FinalityPolicy{})
	ch, payer, a := b.refundAsked(0, 30_000)
	b.metrics = metrics.New(&metrics.Config{})
	c := b.refunder(nil)
	snooze, err := c.Refund(ctx, a)
	require.NoError(t, err)
	require.Zero(t, snooze)
	rec := b.refundRecord(a)
	require.Len(t, rec.Sent, 1)
	require.NotNil(t, rec.Refunded)
	require.Equal(t, rec.Sent[0].Transaction, rec.Refunded.Transaction)
	require.Equal(t, "70000", rec.Refunded.Amount)
	require.Equal(t, "30000", rec.Refunded.Balance)
	require.Equal(t, big.NewInt(70_000), new(big.Int).Sub(b.usdc(ch.state.Config.Payer), payer))
	row := b.row(ch)
	require.Empty(t, row.BusyCall)
	require.Equal(t, "1", row.State.OnChain.RefundNonce.String())
	require.Equal(t, "30000", row.State.OnChain.Balance.String())

	sent := b.nonce()
	_, err = c.Refund(ctx, a)
	require.NoError(t, err)
	require.Equal(t, sent, b.nonce(), "a refund recorded is not made again")
	rec2 := httptest.NewRecorder()
	b.metrics.Handler().ServeHTTP(rec2, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Contains(t, rec2.Body.String(), `x402d_channel_transactions_total{kind="refund",network="eip155:8453",outcome="mined"} 1`)
}

// dyingChain is the relayer, and a process that dies right after its
// first send: the transaction goes out, the run ends before it records it.
type dyingChain struct {
	*evm.Relayer
	sent bool
}

func (c *dyingChain) SendTx(ctx context.Context, network string, to common.Address, input []byte, gas uint64) (*types.Transaction, error) {
	tx, err := c.Relayer.SendTx(ctx, network, to, input, gas)
	if err != nil || c.sent {
		return tx, err
	}
	c.sent = true
	return nil, errors.New("killed")
}

// TestRefund_RunAgainAfterCrash: a run that dies between its refund's
// send and its record (River runs the job again) leaves the refund to the
// chain; the next run reads the channel's refund nonce on chain, finds
// the refund mined, records it with its transaction (its Refunded event)
// and sends nothing: one refund for one request.
func TestRefund_RunAgainAfterCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClaimBench(t, evm.FinalityPolicy{})
	ch, payer, a := b.refundAsked(1, 10_000)
	before := b.nonce()
	_, err := b.refunder(&dyingChain{Relayer: b.relayer}).Refund(ctx, a)
	require.ErrorContains(t, err, "killed")
	require.Empty(t, b.refundRecord(a).Sent, "the send was not recorded")
	require.Eventually(t, func() bool { return b.onChain(ch).RefundNonce.Sign() > 0 }, 10*time.Second, 20*time.Millisecond, "the refund sent is mined")

	_, err = b.refunder(nil).Refund(ctx, a)
	require.NoError(t, err)
	require.Equal(t, before+1, b.nonce(), "one refund transaction")
	rec := b.refundRecord(a)
	require.NotNil(t, rec.Refunded)
	require.Len(t, rec.Refunded.Transaction, 66, "found by its Refunded event")
	require.Equal(t, "90000", rec.Refunded.Amount)
	require.Equal(t, big.NewInt(90_000), new(big.Int).Sub(b.usdc(ch.state.Config.Payer), payer), "refunded once")
	require.Empty(t, b.row(ch).BusyCall)
}

// TestRefund_ReceiptNeverComes: a refund whose transaction the node and
// the relayer lose is never mined. Resent: once RefundResendAfter passed
// (the fake clock), the job sends the refund again in a new transaction,
// which is mined and recorded: the payer is refunded once, the channel
// freed. GivenUp: past RefundGiveUpAfter, a transaction of the refund
// can still be mined (the relayer's nonce it took is unused): the refund
// is not given up, its channel held; once another transaction of the
// relayer used that nonce, the refund is recorded failed
// (wait_for_receipt_failed) and the channel freed, nothing refunded: the
// refund's first transaction, which a node kept, is refused.
func TestRefund_ReceiptNeverComes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		advance time.Duration
	}{{"Resent", refundResendAfter}, {"GivenUp", refundGiveUpAfter}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := newClaimBench(t, evm.FinalityPolicy{})
			ch, payer, a := b.refundAsked(2, 20_000)
			require.NoError(t, b.node.Call(ctx, nil, "evm_setAutomine", false))

			snooze, err := b.refunder(nil).Refund(ctx, a)
			require.NoError(t, err)
			require.Positive(t, snooze, "unmined: the job looks again later")
			require.Len(t, b.refundRecord(a).Sent, 1)
			require.Equal(t, a.CallID, b.row(ch).BusyCall, "held while the refund is made")
			withheld := b.rawTx(b.refundRecord(a).Sent[0].Transaction)

			b.loseRefund()
			c := b.refunder(nil)
			snooze, err = c.Refund(ctx, a)
			require.NoError(t, err)
			require.Positive(t, snooze, "not sent again before RefundResendAfter")
			require.Len(t, b.refundRecord(a).Sent, 1)

			b.clock.Advance(tc.advance)
			snooze, err = c.Refund(ctx, a)
			require.NoError(t, err)
			rec := b.refundRecord(a)
			if tc.name == "GivenUp" {
				require.Positive(t, snooze, "its transaction can still be mined: not given up")
				require.Nil(t, rec.Failed)
				require.Equal(t, a.CallID, b.row(ch).BusyCall)
				b.loseRefund()
				// The relayer's next transaction takes the refund's nonce.
				_, err := b.relayer.Send(ctx, claimNetwork, b.payTo, nil, 21_000)
				require.NoError(t, err)
				require.NoError(t, b.node.Mine(ctx))
				b.clock.Advance(refundResendAfter)
				snooze, err = b.refunder(nil).Refund(ctx, a)
				require.NoError(t, err)
				rec = b.refundRecord(a)
				require.Zero(t, snooze)
				require.NotNil(t, rec.Failed)
				require.Equal(t, channel.ReasonWaitForReceiptFailed, rec.Failed.Reason)
				require.Equal(t, rec.Sent[len(rec.Sent)-1].Transaction, rec.Failed.Transaction)
				require.Empty(t, b.row(ch).BusyCall, "the channel is freed")
				require.ErrorContains(t, b.sendRaw(withheld), "nonce", "the refund's transaction can never be mined")
				require.NoError(t, b.node.Mine(ctx))
				require.Zero(t, b.onChain(ch).RefundNonce.Sign(), "nothing refunded")
				require.Equal(t, payer, b.usdc(ch.state.Config.Payer))
				return
			}
			require.Positive(t, snooze)
			require.Len(t, rec.Sent, 2, "sent again")
			require.NotEqual(t, rec.Sent[0].Transaction, rec.Sent[1].Transaction)
			require.NoError(t, b.node.Mine(ctx))
			_, err = c.Refund(ctx, a)
			require.NoError(t, err)
			rec = b.refundRecord(a)
			require.NotNil(t, rec.Refunded)
			require.Equal(t, rec.Sent[1].Transaction, rec.Refunded.Transaction)
			require.Equal(t, big.NewInt(80_000), new(big.Int).Sub(b.usdc(ch.state.Config.Payer), payer), "refunded once")
			require.Equal(t, "1", b.onChain(ch).RefundNonce.String())
			require.Empty(t, b.row(ch).BusyCall, "the channel is freed")
		})
	}
}

// TestRefund_RefusedBySimulation: a refund whose run reverts (signed with
// a refund nonce the chain no longer has) sends nothing and is recorded
// failed, refund_simulation_failed, its channel freed.
func TestRefund_RefusedBySimulation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClaimBench(t, evm.FinalityPolicy{})
	ch, _, a := b.refundAsked(3, 10_000)
	// A refund nonce the chain will never take: the chain's is 0, and a
	// nonce behind it would read as the refund made.
	a.Nonce = "7"
	before := b.nonce()
	_, err := b.refunder(nil).Refund(ctx, a)
	require.NoError(t, err)
	require.Equal(t, before, b.nonce(), "nothing sent")
	rec := b.refundRecord(a)
	require.Empty(t, rec.Sent)
	require.NotNil(t, rec.Failed)
	require.Equal(t, channel.ReasonRefundSimulationFailed, rec.Failed.Reason)
	require.Contains(t, rec.Failed.Message, "InvalidRefundNonce")
	require.Empty(t, b.row(ch).BusyCall, "the channel is freed")
}

// refundPayload returns the requirement of the bench's channels and a
// refund payload of ch as the official client signs it (a zero-charge
// voucher on the channel's charge), asking amount back ("" for all).
func (b *claimBench) refundPayload(ch *benchChannel, amount string) (*x402.Requirements, *x402.PaymentPayload) {
	b.t.Helper()
	return b.payload(ch, channel.TypeRefund, ch.state.Charged, amount)
}

// payload returns the requirement of the bench's channels and a payload
// of ch of type typ, its voucher for cumulative, asking amount back (a
// refund's; "" for none).
func (b *claimBench) payload(ch *benchChannel, typ string, cumulative *big.Int, amount string) (*x402.Requirements, *x402.PaymentPayload) {
	b.t.Helper()
	extra, err := json.Marshal(channel.Extra{ReceiverAuthorizer: ch.state.Config.ReceiverAuthorizer, WithdrawDelay: ch.state.Config.WithdrawDelay,
		Name: devchain.TokenName, Version: devchain.TokenVersion})
	require.NoError(b.t, err)
	req := &x402.Requirements{Scheme: channel.Scheme, Network: claimNetwork, Amount: "10000", Asset: devchain.USDC.Hex(),
		PayTo: b.payTo.Hex(), MaxTimeoutSeconds: 60, Extra: extra}
	sig, err := channel.Sign(devKey(b.t, ch.payer), channel.VoucherDigest(b.chainID, ch.state.ChannelID, cumulative))
	require.NoError(b.t, err)
	p := map[string]any{"type": typ, "channelConfig": ch.state.Config,
		"voucher": map[string]any{"channelId": ch.state.ChannelID, "maxClaimableAmount": cumulative.String(), "signature": hexutil.Bytes(sig)}}
	if amount != "" {
		p["amount"] = amount
	}
	raw, err := json.Marshal(p)
	require.NoError(b.t, err)
	return req, &x402.PaymentPayload{X402Version: 2, Accepted: *req, Payload: raw}
}

// TestRefund_AskedThenMadeByItsJob runs a refund as the service does,
// the River client aside: chanpay's Refund verifies the payload, holds the
// channel and queues the job, and returns the refund pending; the same
// payload asked again meanwhile waits for the same refund (no second
// request), another (a partial refund) is refused channel_busy; the job
// queued makes the refund, and the pending refund's outcome is its answer:
// the amount refunded, the channel's state after it.
func TestRefund_AskedThenMadeByItsJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClaimBench(t, evm.FinalityPolicy{})
	ch := b.open(4, 100_000)
	b.charge(ch, 10_000, nil)
	scheme, err := chanpay.New(&chanpay.Config{Pool: b.db.Pool, Chains: map[string]channel.Caller{claimNetwork: b.node.Client},
		Sender: b.relayer, ReceiverAuthorizer: b.authorizer, Clock: b.clock})
	require.NoError(t, err)
	req, payload := b.refundPayload(ch, "")

	first, err := scheme.Refund(ctx, req, payload)
	require.NoError(t, err)
	resp, err := first.Outcome(ctx)
	require.NoError(t, err)
	require.Nil(t, resp, "pending until its job makes it")
	busy := b.row(ch).BusyCall
	require.Contains(t, busy, "refund/")

	again, err := scheme.Refund(ctx, req, payload)
	require.NoError(t, err)
	require.Equal(t, first.Stream, again.Stream)
	_, partial := b.refundPayload(ch, "5000")
	_, err = scheme.Refund(ctx, req, partial)
	var refusal *x402.Refusal
	require.ErrorAs(t, err, &refusal)
	require.Equal(t, channel.ReasonChannelBusy, refusal.Reason)

	var raw []byte
	var n int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) OVER (), args FROM river_job WHERE kind = 'channel.refund'`).Scan(&n, &raw))
	require.Equal(t, 1, n, "one request, one job")
	var args chanpay.RefundArgs
	require.NoError(t, json.Unmarshal(raw, &args))
	require.Equal(t, busy, args.CallID)
	require.Equal(t, "90000", args.Amount)
	_, err = b.refunder(nil).Refund(ctx, &args)
	require.NoError(t, err)

	for _, p := range []*x402.PendingRefund{first, again} {
		resp, err := p.Outcome(ctx)
		require.NoError(t, err)
		require.NotNil(t, resp)
		require.True(t, resp.Success)
		require.Equal(t, "90000", resp.Amount)
		require.Len(t, resp.Transaction, 66)
		var extra channel.ResponseExtra
		require.NoError(t, json.Unmarshal(resp.Extra, &extra))
		require.Equal(t, "10000", extra.ChannelState.Balance)
		require.Equal(t, "1", extra.ChannelState.RefundNonce)
		require.Equal(t, "10000", extra.ChannelState.ChargedCumulativeAmount)
	}
	require.Empty(t, b.row(ch).BusyCall)
}

// TestRefund_MinedAfterGiveUpTime: a refund whose transaction the relayer
// and its node lost, but another node kept, is not given up past
// RefundGiveUpAfter while that transaction can still be mined (the
// relayer's nonce it took is unused): its channel stays held. Mined late,
// it is recorded refunded with the chain's balance after it (a claim
// round run before leaves it to the job), and a voucher beyond that
// balance is refused.
func TestRefund_MinedAfterGiveUpTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClaimBench(t, evm.FinalityPolicy{})
	ch, payer, a := b.refundAsked(5, 20_000)
	require.NoError(t, b.node.Call(ctx, nil, "evm_setAutomine", false))
	_, err := b.refunder(nil).Refund(ctx, a)
	require.NoError(t, err)
	withheld := b.rawTx(b.refundRecord(a).Sent[0].Transaction)

	b.loseRefund()
	b.clock.Advance(refundGiveUpAfter)
	snooze, err := b.refunder(nil).Refund(ctx, a)
	require.NoError(t, err)
	require.Positive(t, snooze)
	rec := b.refundRecord(a)
	require.Nil(t, rec.Failed, "its first transaction can still be mined: not given up")
	require.Equal(t, a.CallID, b.row(ch).BusyCall, "held")

	// The node that kept the first transaction gives it to the chain; the
	// relayer lost the one it sent again.
	b.loseRefund()
	require.NoError(t, b.sendRaw(withheld))
	require.NoError(t, b.node.Mine(ctx))
	// A claim round between: its watcher leaves the Refunded log to the
	// refund's job, which awaits its outcome.
	require.NoError(t, b.claimer(time.Hour, 1_000_000_000).Round(ctx, claimNetwork))
	require.Equal(t, a.CallID, b.row(ch).BusyCall)
	require.Equal(t, "100000", b.row(ch).State.OnChain.Balance.String())
	_, err = b.refunder(nil).Refund(ctx, a)
	require.NoError(t, err)
	rec = b.refundRecord(a)
	require.Nil(t, rec.Failed)
	require.NotNil(t, rec.Refunded)
	require.Equal(t, rec.Sent[0].Transaction, rec.Refunded.Transaction)
	require.Equal(t, big.NewInt(80_000), new(big.Int).Sub(b.usdc(ch.state.Config.Payer), payer))
	row := b.row(ch)
	require.Empty(t, row.BusyCall)
	require.Equal(t, b.onChain(ch).Balance, row.State.OnChain.Balance, "the record is the chain's")
	require.Equal(t, "20000", row.State.OnChain.Balance.String())

	scheme, err := chanpay.New(&chanpay.Config{Pool: b.db.Pool, Chains: map[string]channel.Caller{claimNetwork: b.node.Client},
		Sender: b.relayer, ReceiverAuthorizer: b.authorizer, Clock: b.clock})
	require.NoError(t, err)
	req, voucher := b.payload(ch, channel.TypeVoucher, big.NewInt(30_000), "")
	_, err = scheme.Verify(ctx, req, voucher)
	var refusal *x402.Refusal
	require.ErrorAs(t, err, &refusal, "a voucher beyond the channel's balance")
	require.Equal(t, channel.ReasonCumulativeExceedsBalance, refusal.Reason)
}

// downReader is the chain's reader of a node that cannot be reached.
type downReader struct{ worker.ClaimReader }

func (downReader) CallContract(context.Context, ethereum.CallMsg, *big.Int) ([]byte, error) {
	return nil, errors.New("node unreachable")
}

func (downReader) BlockNumber(context.Context) (uint64, error) {
	return 0, errors.New("node unreachable")
}

// TestRefund_OutOfAttempts: a refund job whose last attempt fails (its
// node cannot be reached), worked by River, records the refund failed
// and frees its channel when no transaction of it was sent (Unsent);
// with one sent (Sent), which the chain cannot tell unminable, the job
// snoozes, the refund not recorded failed, its channel held.
func TestRefund_OutOfAttempts(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name string
		sent bool
	}{{"Unsent", false}, {"Sent", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := newClaimBench(t, evm.FinalityPolicy{})
			ch, _, a := b.refundAsked(i, 20_000)
			if tc.sent {
				require.NoError(t, b.node.Call(ctx, nil, "evm_setAutomine", false))
				_, err := b.refunder(nil).Refund(ctx, a)
				require.NoError(t, err)
				require.Len(t, b.refundRecord(a).Sent, 1)
			}
			c, err := worker.NewClaimer(&worker.ClaimConfig{Pool: b.db.Pool, Chain: b.relayer,
				Readers:       map[string]worker.ClaimReader{claimNetwork: downReader{b.node.Client}},
				AuthorizerKey: b.authorizer, Clock: b.clock, RefundResendAfter: time.Hour})
			require.NoError(t, err)
			client, err := worker.NewClient(&worker.Deps{Pool: b.db.Pool, Settler: &paytest.Payments{}, Logger: slog.New(slog.DiscardHandler),
				Register: []func(*river.Workers) error{c.Register}}, &worker.Config{Work: true, FetchPollInterval: 50 * time.Millisecond})
			require.NoError(t, err)
			_, err = client.Insert(ctx, *a, &river.InsertOpts{Queue: jobs.QueueSettlement, MaxAttempts: 1})
			require.NoError(t, err)
			require.NoError(t, client.Start(ctx))
			t.Cleanup(func() { require.NoError(t, worker.Stop(client, 5*time.Second)) })
			var state string
			require.Eventually(t, func() bool {
				require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT state FROM river_job WHERE kind = 'channel.refund'`).Scan(&state))
				return state != "available" && state != "running"
			}, 30*time.Second, 50*time.Millisecond)
			rec := b.refundRecord(a)
			if !tc.sent {
				require.Equal(t, "discarded", state)
				require.NotNil(t, rec.Failed)
				require.Equal(t, channel.ReasonWaitForReceiptFailed, rec.Failed.Reason)
				require.Empty(t, b.row(ch).BusyCall, "the channel is freed")
				return
			}
			require.Equal(t, "scheduled", state, "snoozed")
			require.Nil(t, rec.Failed, "its transaction can still be mined")
			require.Equal(t, a.CallID, b.row(ch).BusyCall, "held")
		})
	}
}

// TestRefund_SeenAfterFailure: a refund recorded failed (its transaction
// lost, the relayer nonce it took used by another, its channel freed)
// whose signature someone who saw its transaction sends in a transaction
// of their own: until the next claim round a voucher beyond the chain's
// balance is accepted on the row's; that round's watcher reads the
// Refunded log no refund records and records it (channel.refund_seen):
// the row's balance and refund nonce are the chain's, a round after
// records nothing more. Free: a voucher beyond the balance left is then
// refused. Held: a call holding the channel when the refund is seen
// keeps it.
func TestRefund_SeenAfterFailure(t *testing.T) {
	t.Parallel()
	for i, held := range []bool{false, true} {
		t.Run(map[bool]string{false: "Free", true: "Held"}[held], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := newClaimBench(t, evm.FinalityPolicy{})
			ch := b.open(i, 100_000)
			b.charge(ch, 20_000, nil)
			c := b.claimer(time.Hour, 1_000_000_000)
			require.NoError(t, c.Round(ctx, claimNetwork), "the watcher's cursor set")

			a := b.requestRefund(ch)
			require.NoError(t, b.node.Call(ctx, nil, "evm_setAutomine", false))
			_, err := b.refunder(nil).Refund(ctx, a)
			require.NoError(t, err)
			sent, _, err := b.node.Client.TransactionByHash(ctx, common.HexToHash(b.refundRecord(a).Sent[0].Transaction))
			require.NoError(t, err)
			b.loseRefund()
			_, err = b.relayer.Send(ctx, claimNetwork, b.payTo, nil, 21_000)
			require.NoError(t, err)
			require.NoError(t, b.node.Mine(ctx))
			b.clock.Advance(refundGiveUpAfter)
			_, err = b.refunder(nil).Refund(ctx, a)
			require.NoError(t, err)
			require.NotNil(t, b.refundRecord(a).Failed, "recorded failed")
			require.Empty(t, b.row(ch).BusyCall)
			require.NoError(t, b.node.Call(ctx, nil, "evm_setAutomine", true))

			const call = "c-after-refund"
			if held {
				require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
					ok, err := store.ChannelHold(ctx, tx, claimNetwork, ch.state.ChannelID, call, ch.state.Charged)
					require.True(t, ok)
					return err
				}))
			}
			payer := b.usdc(ch.state.Config.Payer)
			mined := b.node.Transact(devKey(t, 5), channel.SettlementAddress, sent.Data())
			require.Equal(t, types.ReceiptStatusSuccessful, mined.Status)
			require.Equal(t, big.NewInt(80_000), new(big.Int).Sub(b.usdc(ch.state.Config.Payer), payer), "refunded by the signature")
			require.Equal(t, "100000", b.row(ch).State.OnChain.Balance.String(), "the record is above the chain's balance")

			scheme, err := chanpay.New(&chanpay.Config{Pool: b.db.Pool, Chains: map[string]channel.Caller{claimNetwork: b.node.Client},
				Sender: b.relayer, ReceiverAuthorizer: b.authorizer, Clock: b.clock})
			require.NoError(t, err)
			req, voucher := b.payload(ch, channel.TypeVoucher, big.NewInt(30_000), "")
			if !held {
				_, err = scheme.Verify(ctx, req, voucher)
				require.NoError(t, err, "accepted on the row's balance")
			}

			seen := func() []store.ChannelRefundSeen {
				rows, err := b.db.Pool.Query(ctx, `SELECT data FROM events WHERE stream = $1 AND type = $2 ORDER BY id`,
					store.ChannelStream(claimNetwork, ch.state.ChannelID), store.EventChannelRefundSeen)
				require.NoError(t, err)
				raw, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
				require.NoError(t, err)
				out := make([]store.ChannelRefundSeen, len(raw))
				for i := range raw {
					require.NoError(t, json.Unmarshal(raw[i], &out[i]))
				}
				return out
			}
			require.NoError(t, c.Round(ctx, claimNetwork))
			row := b.row(ch)
			require.Equal(t, b.onChain(ch).Balance, row.State.OnChain.Balance, "the record is the chain's")
			require.Equal(t, "20000", row.State.OnChain.Balance.String())
			require.Equal(t, "1", row.State.OnChain.RefundNonce.String())
			got := seen()
			require.Len(t, got, 1)
			require.Equal(t, mined.TxHash.Hex(), got[0].Transaction)
			require.Equal(t, devAddr(t, 5).Hex(), got[0].Sender)
			require.Equal(t, "80000", got[0].Amount)
			require.NoError(t, c.Round(ctx, claimNetwork))
			require.Len(t, seen(), 1, "recorded once")
			if held {
				require.Equal(t, call, row.BusyCall, "the call holding the channel keeps it")
				return
			}
			require.Empty(t, row.BusyCall)
			_, err = scheme.Verify(ctx, req, voucher)
			var refusal *x402.Refusal
			require.ErrorAs(t, err, &refusal, "a voucher beyond the channel's balance")
			require.Equal(t, channel.ReasonCumulativeExceedsBalance, refusal.Reason)
		})
	}
}

// TestRefund_Reorganisation: a refund mined and recorded (its
// channel_claims row pending) is undone by a reorganisation that replaces
// its block with an empty one, and the node and the relayer lose its
// transaction (the node drops it, a new relayer process starts on an
// emptied nonce store: no keeper gives it to the node again). The claim
// round follows it: found in no block, then, past GoneAfter on the fake
// clock, made again (channel.refund_undone) in a transaction the round
// follows until final. The payer is paid back once, the channel's balance
// and refund nonce on record are the chain's, the undone row is gone and
// the totals count the refund once. SentAgain: the refund nonce on chain
// is still the refund's, so the refund is signed again and sent by the
// relayer. MinedByAnother: someone else sent the refund's signature in a
// transaction of their own after the reorganisation; that transaction is
// recorded in its place, nothing sent. Keeper: the relayer keeps its
// records, its keeper gives the node the same transaction again, which
// is mined in another block: its row is moved and ends final, nothing
// made again.
func TestRefund_Reorganisation(t *testing.T) {
	t.Parallel()
	for i, name := range []string{"SentAgain", "MinedByAnother", "Keeper"} {
		byAnother, keeper := name == "MinedByAnother", name == "Keeper"
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := newClaimBench(t, evm.FinalityPolicy{Depth: 5})
			ch, payer, a := b.refundAsked(i, 30_000)
			_, err := b.refunder(nil).Refund(ctx, a)
			require.NoError(t, err)
			first := b.refundRecord(a).Refunded.Transaction
			require.NotEmpty(t, first)
			claimRow := func(tx string) (kind, state string, block int64) {
				require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT kind, state, block_number FROM channel_claims WHERE transaction = $1", tx).
					Scan(&kind, &state, &block))
				return kind, state, block
			}
			kind, state, block := claimRow(first)
			require.Equal(t, store.ClaimKindRefund, kind, "the refund is recorded with its channel.refunded")
			require.Equal(t, "pending", state)
			require.Equal(t, big.NewInt(70_000), new(big.Int).Sub(b.usdc(ch.state.Config.Payer), payer))
			sent, _, err := b.node.Client.TransactionByHash(ctx, common.HexToHash(first))
			require.NoError(t, err)

			head, err := b.node.Client.BlockNumber(ctx)
			require.NoError(t, err)
			if !keeper {
				b.relayer.Stop()
			}
			require.NoError(t, b.node.Call(ctx, nil, "anvil_reorg", head-uint64(block)+1, []any{}))
			require.NoError(t, b.node.Call(ctx, nil, "anvil_dropAllTransactions"))
			undone := b.onChain(ch)
			require.Zero(t, undone.RefundNonce.Sign(), "the reorganisation undid the refund")
			require.Equal(t, "100000", undone.Balance.String())
			require.Equal(t, payer, b.usdc(ch.state.Config.Payer))
			if keeper {
				require.Eventually(t, func() bool { return b.onChain(ch).RefundNonce.Sign() > 0 }, 10*time.Second, 50*time.Millisecond,
					"the keeper has the node mine the refund again")
			} else {
				_, err = b.db.Pool.Exec(ctx, "DELETE FROM relayer_txs; DELETE FROM relayer_nonces")
				require.NoError(t, err)
				b.relayer = b.newRelayer(evm.FinalityPolicy{Depth: 5})
			}
			want := ""
			if byAnother {
				mined := b.node.Transact(devKey(t, 5), channel.SettlementAddress, sent.Data())
				require.Equal(t, types.ReceiptStatusSuccessful, mined.Status)
				want = mined.TxHash.Hex()
			}
			relayed := b.nonce()

			c := b.claimerWith(func(c *worker.ClaimConfig) {
				c.Interval, c.MinAmount, c.GoneAfter = time.Hour, big.NewInt(1_000_000_000), 5*time.Second
			})
			require.Eventually(t, func() bool {
				require.NoError(t, b.node.Mine(ctx))
				b.clock.Advance(time.Second)
				require.NoError(t, c.Round(ctx, claimNetwork))
				var pending int
				require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM channel_claims WHERE state = 'pending'").Scan(&pending))
				return pending == 0 && b.onChain(ch).RefundNonce.Sign() > 0
			}, 30*time.Second, 50*time.Millisecond, "the refund is made again and becomes final")

			onChain, row := b.onChain(ch), b.row(ch)
			require.Equal(t, "1", onChain.RefundNonce.String())
			require.Equal(t, "30000", onChain.Balance.String())
			require.Equal(t, onChain.Balance, row.State.OnChain.Balance, "the row's balance is the chain's")
			require.Equal(t, onChain.RefundNonce, row.State.OnChain.RefundNonce, "the row's refund nonce is the chain's")
			require.Equal(t, big.NewInt(70_000), new(big.Int).Sub(b.usdc(ch.state.Config.Payer), payer), "paid back once")
			totals, err := store.ChannelTotalsList(ctx, b.db.Pool)
			require.NoError(t, err)
			require.Equal(t, "70000", totals[0].Refunded.String(), "the refund counts once")
			var seen, undoneEvents int
			require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE type = $1), count(*) FILTER (WHERE type = $2) FROM events",
				store.EventChannelRefundSeen, store.EventChannelRefundUndone).Scan(&seen, &undoneEvents))
			require.Zero(t, seen, "the watcher knows the transaction")
			_, state, moved := claimRow(first)
			if keeper {
				require.Equal(t, "final", state, "the same refund, mined again, is final")
				require.NotEqual(t, block, moved, "in another block")
				require.Zero(t, undoneEvents, "nothing made again")
				return
			}
			require.Equal(t, "gone", state, "the undone transaction counts no more")

			var raw []byte
			require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT data FROM events WHERE stream = $1 AND type = $2",
				store.ChannelStream(claimNetwork, ch.state.ChannelID), store.EventChannelRefundUndone).Scan(&raw))
			var ev store.ChannelRefundUndone
			require.NoError(t, json.Unmarshal(raw, &ev))
			require.Equal(t, first, ev.Undone)
			require.Equal(t, a.CallID, ev.CallID)
			require.NotEmpty(t, ev.Transaction)
			require.NotEqual(t, first, ev.Transaction)
			require.Equal(t, "70000", ev.Amount)
			require.Equal(t, "1", ev.RefundNonce)
			if byAnother {
				require.Equal(t, want, ev.Transaction, "the transaction that made it is recorded")
				require.Equal(t, relayed, b.nonce(), "nothing sent")
			} else {
				require.Equal(t, relayed+1, b.nonce(), "sent again once")
			}
			kind, state, _ = claimRow(ev.Transaction)
			require.Equal(t, store.ClaimKindRefund, kind)
			require.Equal(t, "final", state, "the refund made again is followed until final")
		})
	}
}
