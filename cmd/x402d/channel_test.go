package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/model/modeltest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm/channel"
)

// startChannelService starts `serve` on the devchain, as
// startDevchainServiceIn does, with the settings extra added, and returns
// its base URL, the devchain's JSON-RPC URL, a client of it and the
// service's database.
func startChannelService(ctx context.Context, t *testing.T, extra map[string]string) (base, rpcURL string, chain *ethclient.Client, db *dbtest.DB, fake *modeltest.Server) {
	t.Helper()
	db = dbtest.Schema(ctx, t)
	fake = modeltest.NewServer(t)
	rpc := freeAddr(t)
	env := map[string]string{
		"DATABASE_URL": db.URL, "DB_MAX_CONNS": testMaxConns, "LISTEN_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn",
		"DEVCHAIN_RPC_ADDR": rpc, "GEMINI_API_KEY": modeltest.APIKey, "GEMINI_BASE_URL": fake.URL,
		"FETCH_ALLOW_CIDRS": "127.0.0.1/32",
	}
	maps.Copy(env, extra)
	base = startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})
	chain, err := ethclient.DialContext(ctx, "http://"+rpc)
	require.NoError(t, err)
	t.Cleanup(chain.Close)
	return base, "http://" + rpc, chain, db, fake
}

// batchStep is one step's result as compat/batch_pay.mjs reports it.
type batchStep struct {
	Status     int
	Body       string
	Error      string
	Type       string
	Sent       string
	PaymentID  string
	Settlement *struct {
		Success     bool
		ErrorReason string
		Transaction string
		Network     string
		Payer       string
		Amount      string
		Extra       *channel.ResponseExtra
	}
}

// payWithBatchClient runs compat/batch_pay.mjs (the official
// batch-settlement client) against base as development account payer,
// each deposit deposit atomic units ("" for the client's sizing), with the
// environment env added (MODE=mcp: over MCP).
func payWithBatchClient(ctx context.Context, t *testing.T, base, rpcURL string, payer int, deposit string, steps []map[string]any, env ...string) []batchStep {
	t.Helper()
	compat := compatDir(t, "@x402/fetch", "@x402/evm", "@x402/extensions", "@modelcontextprotocol/sdk")
	raw, err := json.Marshal(steps)
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, "node", filepath.Join(compat, "batch_pay.mjs"), base, string(raw))
	cmd.Env = append(os.Environ(), "RPC_URL="+rpcURL, "PAYER="+strconv.Itoa(payer))
	if deposit != "" {
		cmd.Env = append(cmd.Env, "DEPOSIT="+deposit)
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node batch_pay.mjs: %s", stderr.String())
	var out struct{ Steps []batchStep }
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	require.Len(t, out.Steps, len(steps))
	return out.Steps
}

// channelOf returns the one channel row of payer in db.
func channelOf(ctx context.Context, t *testing.T, db *dbtest.DB, payer common.Address) *store.Channel {
	t.Helper()
	var id []byte
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT channel_id FROM channels WHERE payer = $1", payer.Bytes()).Scan(&id))
	c, err := store.ChannelGet(ctx, db.Pool, devchainNetwork, common.BytesToHash(id))
	require.NoError(t, err)
	return c
}

// TestOfficialBatchClientPays has the official batch-settlement client
// (compat/batch_pay.mjs) pay regex calls of `serve` on the devchain: a
// deposit (sent on chain once the operation succeeded), vouchers (charged
// off chain, transaction ""), a top-up when the channel's balance runs
// out, a voucher from a client that lost its state (it recovers through the
// corrective 402 and is charged once), and a cooperative refund of what
// was not charged, made by its job (asked, sent, refunded). The channel's
// record and the chain agree.
func TestOfficialBatchClientPays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, rpcURL, chain, db, _ := startChannelService(ctx, t, nil)
	const account = 3
	payer := devAddress(t, account)
	before := usdcBalance(ctx, t, chain, payer)
	regex := map[string]any{"op": "regex", "body": `{"pattern":"\\d+","text":"a1b22","flags":"g"}`}
	steps := payWithBatchClient(ctx, t, base, rpcURL, account, "30000", []map[string]any{
		regex, regex, regex, regex, {"forget": true}, regex, {"refund": "regex"},
	})
	wantTypes := []string{"deposit", "voucher", "voucher", "deposit", "", "voucher", "refund"}
	for i, s := range steps {
		if i == 4 {
			continue
		}
		require.Equal(t, 200, s.Status, "step %d: %s %s", i, s.Body, s.Error)
		require.NotNil(t, s.Settlement, "step %d", i)
		require.True(t, s.Settlement.Success, "step %d", i)
		if i < 6 {
			require.Equal(t, wantTypes[i], s.Type, "step %d", i)
			require.Equal(t, "10000", s.Settlement.Extra.ChargedAmount, "step %d", i)
			require.Equal(t, s.Sent, s.Settlement.Extra.ChannelState.ChargedCumulativeAmount, "step %d", i)
		}
		if s.Type == "voucher" {
			require.Empty(t, s.Settlement.Transaction, "step %d: a voucher sends nothing", i)
		} else {
			require.Len(t, s.Settlement.Transaction, 66, "step %d", i)
		}
	}
	require.Equal(t, "50000", steps[5].Sent, "the client that lost its state signed on the seller's charge")

	c := channelOf(ctx, t, db, payer)
	require.Equal(t, "50000", c.State.Charged.String())
	require.Equal(t, "50000", c.State.Signed.String())
	require.Empty(t, c.BusyCall)
	onchain, err := channel.ReadState(ctx, chain, c.State.ChannelID, nil)
	require.NoError(t, err)
	require.Equal(t, "1", onchain.RefundNonce.String())
	require.Equal(t, onchain.Balance.String(), c.State.OnChain.Balance.String())
	require.Equal(t, "50000", onchain.Balance.String(), "the refund left what was charged")
	require.Equal(t, big.NewInt(50_000), new(big.Int).Sub(before, usdcBalance(ctx, t, chain, payer)), "deposits less the refund")
	require.Equal(t, "10000", steps[6].Settlement.Amount)

	events, err := store.EventListByStream(ctx, db.Pool, store.ChannelStream(devchainNetwork, c.State.ChannelID))
	require.NoError(t, err)
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	require.Equal(t, []string{store.EventChannelOpened, store.EventChannelCharged, store.EventChannelCharged, store.EventChannelCharged,
		store.EventChannelDeposited, store.EventChannelCharged, store.EventChannelCharged,
		store.EventChannelRefundRequested, store.EventChannelRefundSent, store.EventChannelRefunded}, types)
}

// TestOfficialBatchClientPaysOverMCP has the official batch-settlement
// client pay regex tool calls over MCP (compat/batch_pay.mjs, MODE=mcp: the
// official MCP SDK, x402's MCP transport): a deposit, a voucher, a top-up,
// and a client that lost its state recovering through the corrective
// PaymentRequired; each payment response names the charge.
func TestOfficialBatchClientPaysOverMCP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, rpcURL, _, db, _ := startChannelService(ctx, t, nil)
	const account = 4
	regex := map[string]any{"op": "regex", "body": `{"pattern":"\\d+","text":"a1b22","flags":"g"}`}
	steps := payWithBatchClient(ctx, t, base, rpcURL, account, "20000", []map[string]any{regex, regex, regex, {"forget": true}, regex}, "MODE=mcp")
	for i, want := range []string{"deposit", "voucher", "deposit", "", "voucher"} {
		s := steps[i]
		if want == "" {
			continue
		}
		require.Equal(t, 200, s.Status, "step %d: %s %s", i, s.Body, s.Error)
		require.Equal(t, want, s.Type, "step %d", i)
		require.NotNil(t, s.Settlement, "step %d", i)
		require.True(t, s.Settlement.Success, "step %d", i)
		require.Equal(t, "10000", s.Settlement.Extra.ChargedAmount, "step %d", i)
		require.Equal(t, s.Sent, s.Settlement.Extra.ChannelState.ChargedCumulativeAmount, "step %d", i)
		require.Contains(t, s.Body, `"matches"`, "step %d", i)
	}
	require.Equal(t, "40000", steps[4].Sent, "signed on the seller's charge after the corrective PaymentRequired")
	c := channelOf(ctx, t, db, devAddress(t, account))
	require.Equal(t, "40000", c.State.Charged.String())
	require.Equal(t, "40000", c.State.OnChain.Balance.String())
}

// TestOfficialBatchClientRetriesWithPaymentID: the official
// batch-settlement client pays with a payment identifier (the official
// helper) through a proxy that loses the first paid answer after the
// service gave it; the client pays again, a new payment under the same id,
// gets the call's stored result and is charged once.
func TestOfficialBatchClientRetriesWithPaymentID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, rpcURL, chain, db, _ := startChannelService(ctx, t, nil)
	proxy := newLossyProxy(t, base)

	const account = 6
	payer := devAddress(t, account)
	before := usdcBalance(ctx, t, chain, payer)
	body := `{"pattern":"\\d+","text":"a1b22","flags":"g"}`
	steps := payWithBatchClient(ctx, t, proxy.URL, rpcURL, account, "50000", []map[string]any{
		{"op": "regex", "body": body, "paymentId": true},
		{"op": "regex", "body": body, "paymentId": "same"},
		{"op": "regex", "body": body},
	})
	require.Equal(t, -1, steps[0].Status, "the first answer was lost")
	require.EqualValues(t, http.StatusOK, proxy.lostStatus.Load(), "after the service answered it")
	require.Equal(t, http.StatusOK, steps[1].Status, steps[1].Body+steps[1].Error)
	require.Equal(t, steps[0].PaymentID, steps[1].PaymentID)
	require.NotNil(t, steps[1].Settlement)
	require.True(t, steps[1].Settlement.Success)
	require.Equal(t, "10000", steps[1].Settlement.Extra.ChannelState.ChargedCumulativeAmount, "the first call's answer")
	// The next call pays on from the one charge.
	require.Equal(t, http.StatusOK, steps[2].Status, steps[2].Body+steps[2].Error)
	var calls int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM calls").Scan(&calls))
	require.Equal(t, 2, calls, "the payment under the same id ran nothing")
	c := channelOf(ctx, t, db, payer)
	require.Equal(t, "20000", c.State.Charged.String(), "charged once for the call paid twice, once for the next")
	require.Equal(t, big.NewInt(50_000), new(big.Int).Sub(before, usdcBalance(ctx, t, chain, payer)), "one deposit")
}

// TestAnvil_OfficialBatchClientPays has the official batch-settlement
// client pay `serve` settling in rpc mode on anvil with Circle's USDC and
// the channel contracts at their canonical addresses, 2-second blocks: a
// deposit, vouchers, a top-up and a cooperative refund; the chain and the
// channel's record agree, and the deposits' transactions are followed
// until final.
func TestAnvil_OfficialBatchClientPays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, nil)
	db := dbtest.Schema(ctx, t)
	env := anvilChannelEnv(t, node, db)
	env["FINALITY_EIP155_8453"] = "depth:2"
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})

	const account = 3
	payer := devAddress(t, account)
	before := usdcBalance(ctx, t, node.Client, payer)
	regex := map[string]any{"op": "regex", "body": `{"pattern":"\\d+","text":"a1b22","flags":"g"}`}
	steps := payWithBatchClient(ctx, t, base, node.URL, account, "20000", []map[string]any{regex, regex, regex, {"refund": "regex"}})
	for i, want := range []string{"deposit", "voucher", "deposit", ""} {
		s := steps[i]
		require.Equal(t, 200, s.Status, "step %d: %s %s", i, s.Body, s.Error)
		require.Equal(t, want, s.Type, "step %d (the refund's own client is not watched)", i)
		require.True(t, s.Settlement.Success, "step %d", i)
	}
	c := channelOf(ctx, t, db, payer)
	require.Equal(t, "30000", c.State.Charged.String())
	onchain, err := channel.ReadState(ctx, node.Client, c.State.ChannelID, nil)
	require.NoError(t, err)
	require.Equal(t, "30000", onchain.Balance.String(), "the refund left what was charged")
	require.Equal(t, onchain.Balance.String(), c.State.OnChain.Balance.String())
	require.Equal(t, big.NewInt(30_000), new(big.Int).Sub(before, usdcBalance(ctx, t, node.Client, payer)))
	// The deposits' transactions are followed until final, as exact
	// settlements are: two calls in settlement_watch, then final.
	var mined int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = $1 AND stream = $2`,
		store.EventSettlementMined, store.ChainStream(devchainNetwork)).Scan(&mined))
	require.Equal(t, 2, mined, "the two deposits' blocks recorded")
	require.Eventually(t, func() bool {
		var left, final int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM settlement_watch`).Scan(&left))
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(sum((data->>'calls')::int), 0) FROM events WHERE type = $1 AND stream = $2`,
			store.EventSettlementFinal, store.ChainStream(devchainNetwork)).Scan(&final))
		return left == 0 && final == 2
	}, 60*time.Second, 200*time.Millisecond, "the deposits' settlement.final")
	requireNodeClean(t, node)
}

// TestAnvil_ReorganisationUndoesDeposit: a channel's deposit, followed
// until final as exact settlements are, is undone by a reorganisation
// (anvil forgets its block and transactions): it is sent again, becomes
// final, and the channel holds it once, charged once.
func TestAnvil_ReorganisationUndoesDeposit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: time.Second})
	db := dbtest.Schema(ctx, t)
	env := anvilChannelEnv(t, node, db)
	env["FINALITY_EIP155_8453"] = fmt.Sprintf("depth:%d", followDepth)
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})

	const account = 2
	payer := devAddress(t, account)
	before := usdcBalance(ctx, t, node.Client, payer)
	regex := map[string]any{"op": "regex", "body": `{"pattern":"\\d+","text":"a1b22","flags":"g"}`}
	steps := payWithBatchClient(ctx, t, base, node.URL, account, "100000", []map[string]any{regex, regex})
	for i, s := range steps {
		require.Equal(t, 200, s.Status, "step %d: %s %s", i, s.Body, s.Error)
	}
	var pending int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(sum(cardinality(calls)), 0) FROM settlement_watch`).Scan(&pending))
	require.Equal(t, 1, pending, "the deposit awaits finality")

	reorgWatched(ctx, t, node, db)
	require.NoError(t, node.Call(ctx, nil, "anvil_dropAllTransactions"))
	require.Eventually(t, func() bool {
		var left int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM settlement_watch`).Scan(&left))
		return left == 0
	}, 90*time.Second, 200*time.Millisecond, "the deposit still awaits finality")
	var lost, final int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = $1`, store.EventSettlementLost).Scan(&lost))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(sum((data->>'calls')::int), 0) FROM events WHERE type = $1`, store.EventSettlementFinal).Scan(&final))
	require.Zero(t, lost)
	require.Equal(t, 1, final)
	c := channelOf(ctx, t, db, payer)
	require.Equal(t, "20000", c.State.Charged.String(), "charged once each call")
	onchain, err := channel.ReadState(ctx, node.Client, c.State.ChannelID, nil)
	require.NoError(t, err)
	require.Equal(t, "100000", onchain.Balance.String(), "the deposit on chain once")
	require.Equal(t, big.NewInt(100_000), new(big.Int).Sub(before, usdcBalance(ctx, t, node.Client, payer)))
	requireNodeClean(t, node)
}

// voucherClient signs voucher payments of development account account's
// channel (opened by the official client) in Go, as the official client
// would: for tests of the seller's rules the official client never breaks
// on purpose.
type voucherClient struct {
	t      *testing.T
	base   string
	config channel.Config
	id     common.Hash
	key    *ecdsa.PrivateKey
}

// header returns the PAYMENT-SIGNATURE of a voucher of cumulative amount
// for op (its quote's batch-settlement option).
func (v *voucherClient) header(ctx context.Context, op string, amount int64) string {
	return v.headerWithID(ctx, op, amount, "")
}

// headerWithID is header with a payment identifier id ("" for none).
func (v *voucherClient) headerWithID(ctx context.Context, op string, amount int64, id string) string {
	return v.encode(ctx, op, map[string]any{"type": "voucher", "channelConfig": v.config, "voucher": v.voucher(amount, v.key)}, id)
}

// headerSignedBy is header with the voucher signed by key.
func (v *voucherClient) headerSignedBy(ctx context.Context, op string, amount int64, key *ecdsa.PrivateKey) string {
	return v.encode(ctx, op, map[string]any{"type": "voucher", "channelConfig": v.config, "voucher": v.voucher(amount, key)}, "")
}

// depositHeader returns the PAYMENT-SIGNATURE of a deposit of deposit into
// the channel with a voucher of cumulative amount: the deposit's EIP-3009
// authorization (from the channel's payer to the collector) and the
// voucher signed by the client's key.
func (v *voucherClient) depositHeader(ctx context.Context, op string, deposit, amount int64) string {
	t := v.t
	chainID := big.NewInt(8453)
	auth := channel.ReceiveAuthorization{From: v.config.Payer, Value: big.NewInt(deposit), ValidAfter: new(big.Int),
		ValidBefore: big.NewInt(time.Now().Add(time.Hour).Unix()), Nonce: channel.DepositNonce(v.id, common.Hash{0x5a})}
	sig, err := channel.Sign(v.key, channel.ReceiveAuthorizationDigest(chainID, devchain.USDC, devchain.TokenName, devchain.TokenVersion, &auth))
	require.NoError(t, err)
	return v.encode(ctx, op, map[string]any{"type": "deposit", "channelConfig": v.config, "voucher": v.voucher(amount, v.key),
		"deposit": map[string]any{"amount": strconv.FormatInt(deposit, 10), "authorization": map[string]any{"erc3009Authorization": map[string]any{
			"validAfter": auth.ValidAfter.String(), "validBefore": auth.ValidBefore.String(), "salt": common.Hash{0x5a}, "signature": hexutil.Bytes(sig)}}}}, "")
}

// voucher returns the wire voucher of cumulative amount of the channel,
// signed by key.
func (v *voucherClient) voucher(amount int64, key *ecdsa.PrivateKey) map[string]any {
	sig, err := channel.Sign(key, channel.VoucherDigest(big.NewInt(8453), v.id, big.NewInt(amount)))
	require.NoError(v.t, err)
	return map[string]any{"channelId": v.id, "maxClaimableAmount": strconv.FormatInt(amount, 10), "signature": hexutil.Bytes(sig)}
}

// option returns the batch-settlement option of op's quote.
func (v *voucherClient) option(ctx context.Context, op string) *x402.Requirements {
	t := v.t
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.base+"/api/x402/"+op, strings.NewReader("{}"))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	var required x402.PaymentRequired
	require.NoError(t, x402.DecodeHeader(resp.Header.Get("PAYMENT-REQUIRED"), &required))
	for i := range required.Accepts {
		if required.Accepts[i].Scheme == channel.Scheme {
			return &required.Accepts[i]
		}
	}
	require.FailNow(t, "the quote offers no batch-settlement")
	return nil
}

// encode returns the PAYMENT-SIGNATURE of payload for op (its quote's
// batch-settlement option), with a payment identifier id ("" for none).
func (v *voucherClient) encode(ctx context.Context, op string, payload map[string]any, id string) string {
	t := v.t
	raw, err := json.Marshal(payload)
	require.NoError(t, err)
	p := x402.PaymentPayload{X402Version: 2, Accepted: *v.option(ctx, op), Payload: raw}
	if id != "" {
		p.Extensions = map[string]json.RawMessage{x402.ExtensionPaymentIdentifier: json.RawMessage(`{"info":{"required":false,"id":"` + id + `"}}`)}
	}
	header, err := x402.EncodeHeader(p)
	require.NoError(t, err)
	return header
}

// paidCall is one answer to a paid request.
type paidCall struct {
	status     int
	body       string
	settlement *x402.SettleResponse
	required   *x402.PaymentRequired
}

// postVoucher sends body to op with the payment header.
func postVoucher(ctx context.Context, t *testing.T, base, op, body, header string) paidCall {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/x402/"+op, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("PAYMENT-SIGNATURE", header)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := paidCall{status: resp.StatusCode, body: string(b)}
	if h := resp.Header.Get("PAYMENT-RESPONSE"); h != "" {
		out.settlement = &x402.SettleResponse{}
		require.NoError(t, x402.DecodeHeader(h, out.settlement))
	}
	if h := resp.Header.Get("PAYMENT-REQUIRED"); h != "" {
		out.required = &x402.PaymentRequired{}
		require.NoError(t, x402.DecodeHeader(h, out.required))
	}
	return out
}

// TestChannelVoucherRules: on a channel the official client opened, the
// seller's rules for vouchers: a failed operation charges nothing and the
// same voucher then pays the same request; that voucher sent again gets
// the stored result and PAYMENT-RESPONSE, and with another request is
// refused; a second call of the channel while one runs is answered
// channel_busy; a voucher behind the seller's charge gets the corrective
// 402 with the channel's state and last voucher.
func TestChannelVoucherRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, rpcURL, _, db, model := startChannelService(ctx, t, nil)
	const account = 5
	regexBody := `{"pattern":"\\d+","text":"a1b22","flags":"g"}`
	steps := payWithBatchClient(ctx, t, base, rpcURL, account, "1000000", []map[string]any{{"op": "regex", "body": regexBody}})
	require.Equal(t, 200, steps[0].Status, steps[0].Body+steps[0].Error)
	payer := devAddress(t, account)
	c := channelOf(ctx, t, db, payer)
	key, err := devchain.DeriveKey(devchain.Mnemonic, account)
	require.NoError(t, err)
	v := &voucherClient{t: t, base: base, config: c.State.Config, id: c.State.ChannelID, key: key}
	charged := func() string { return channelOf(ctx, t, db, payer).State.Charged.String() }
	require.Equal(t, "10000", charged())

	// The model refuses the first brief: the operation fails.
	model.Enqueue(modeltest.ErrorReply(http.StatusBadRequest, "refused"))
	briefBody := `{"question":"What is the x402 protocol?"}`
	header := v.header(ctx, "brief", 260_000)
	failed := postVoucher(ctx, t, base, "brief", briefBody, header)
	require.Equal(t, http.StatusBadGateway, failed.status, failed.body)
	require.Equal(t, "10000", charged(), "a failed operation charges nothing")
	require.Empty(t, channelOf(ctx, t, db, payer).BusyCall)

	paid := postVoucher(ctx, t, base, "brief", briefBody, header)
	require.Equal(t, http.StatusOK, paid.status, paid.body)
	require.NotNil(t, paid.settlement)
	require.True(t, paid.settlement.Success)
	require.Empty(t, paid.settlement.Transaction)
	require.Equal(t, "260000", charged(), "the same voucher paid once the operation could run")
	var extra channel.ResponseExtra
	require.NoError(t, json.Unmarshal(paid.settlement.Extra, &extra))
	require.Equal(t, "250000", extra.ChargedAmount)
	require.Equal(t, "260000", extra.ChannelState.ChargedCumulativeAmount)

	again := postVoucher(ctx, t, base, "brief", briefBody, header)
	require.Equal(t, http.StatusOK, again.status, again.body)
	require.JSONEq(t, paid.body, again.body, "the stored result")
	require.Equal(t, paid.settlement, again.settlement, "and its PAYMENT-RESPONSE")
	require.Equal(t, "260000", charged())

	other := postVoucher(ctx, t, base, "brief", `{"question":"Another question?"}`, header)
	require.Equal(t, http.StatusPaymentRequired, other.status, other.body)
	require.Contains(t, other.body, "payment_already_used")

	// The page url-meta reads, answering /slow when released.
	release := make(chan struct{})
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><head><title>Page</title></head><body>x</body></html>")
	}))
	t.Cleanup(page.Close)

	// channel_busy: a call of the channel runs (its page answers when
	// released); another voucher of the channel meanwhile is refused.
	slow := make(chan paidCall, 1)
	slowHeader := v.header(ctx, "url-meta", 290_000)
	go func() { slow <- postVoucher(ctx, t, base, "url-meta", `{"url":"`+page.URL+`/slow"}`, slowHeader) }()
	require.Eventually(t, func() bool { return channelOf(ctx, t, db, payer).BusyCall != "" }, 10*time.Second, 10*time.Millisecond)
	busy := postVoucher(ctx, t, base, "regex", regexBody, v.header(ctx, "regex", 270_000))
	require.Equal(t, http.StatusPaymentRequired, busy.status, busy.body)
	require.Equal(t, channel.ReasonChannelBusy, busy.required.Error)
	close(release)
	done := <-slow
	require.Equal(t, http.StatusOK, done.status, done.body)
	require.Equal(t, "290000", charged())

	// The corrective 402: a voucher signed on a charge the seller left
	// behind carries the channel's state and last voucher.
	behind := postVoucher(ctx, t, base, "regex", regexBody, v.header(ctx, "regex", 270_000))
	require.Equal(t, http.StatusPaymentRequired, behind.status, behind.body)
	require.Equal(t, channel.ReasonCumulativeAmountMismatch, behind.required.Error)
	var corrective *x402.Requirements
	for i := range behind.required.Accepts {
		if behind.required.Accepts[i].Scheme == channel.Scheme {
			corrective = &behind.required.Accepts[i]
		}
	}
	require.NotNil(t, corrective)
	var cx channel.Extra
	require.NoError(t, json.Unmarshal(corrective.Extra, &cx))
	require.NotNil(t, cx.ChannelState)
	require.Equal(t, "290000", cx.ChannelState.ChargedCumulativeAmount)
	require.NotNil(t, cx.VoucherState)
	require.Equal(t, "290000", cx.VoucherState.SignedMaxClaimable)
	require.Equal(t, "exact", behind.required.Accepts[0].Scheme, "exact stays first")
	require.Equal(t, "290000", charged())

	// payment-identifier with vouchers: the id's call answers a new
	// voucher under it for the same request, charged once; another
	// request under it is 409.
	const id = "pay_channel_0123456789"
	first := postVoucher(ctx, t, base, "regex", regexBody, v.headerWithID(ctx, "regex", 300_000, id))
	require.Equal(t, http.StatusOK, first.status, first.body)
	retried := postVoucher(ctx, t, base, "regex", regexBody, v.headerWithID(ctx, "regex", 310_000, id))
	require.Equal(t, http.StatusOK, retried.status, retried.body)
	require.JSONEq(t, first.body, retried.body)
	require.Equal(t, first.settlement, retried.settlement)
	require.Equal(t, "300000", charged(), "charged once")
	conflict := postVoucher(ctx, t, base, "regex", `{"pattern":"b","text":"abc"}`, v.headerWithID(ctx, "regex", 310_000, id))
	require.Equal(t, http.StatusConflict, conflict.status, conflict.body)
	require.Equal(t, "300000", charged())
}

// TestOfficialBatchClientRefundsSplit runs the compose layout on the
// devchain, an `x402d api` process and an `x402d worker` process apart:
// the official batch-settlement client pays two calls and refunds its
// channel through the api process, which verifies the refund and queues
// it; the worker process's refund job sends it, and the api answers 200
// with its PAYMENT-RESPONSE once the job recorded it. The chain and the
// channel's record agree, the channel is free.
func TestOfficialBatchClientRefundsSplit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	env, chain := startDevchainProcess(ctx, t, db)
	env["CALL_WAIT"], env["JOB_TIMEOUT"], env["JOB_RESCUE_AFTER"] = "25s", "2m", "3m"
	api := startChild(t, "api", env)
	startChild(t, "worker", env)

	const account = 7
	payer := devAddress(t, account)
	before := usdcBalance(ctx, t, chain, payer)
	regex := map[string]any{"op": "regex", "body": `{"pattern":"\\d+","text":"a1b22","flags":"g"}`}
	rpcURL := "http://" + env["DEVCHAIN_RPC_ADDR"]
	steps := payWithBatchClient(ctx, t, api.addr, rpcURL, account, "100000", []map[string]any{regex, regex, {"refund": "regex"}})
	for i, s := range steps {
		require.Equal(t, http.StatusOK, s.Status, "step %d: %s %s", i, s.Body, s.Error)
		require.NotNil(t, s.Settlement, "step %d", i)
		require.True(t, s.Settlement.Success, "step %d", i)
	}
	refund := steps[2].Settlement
	require.Equal(t, "80000", refund.Amount, "what was not charged")
	require.Len(t, refund.Transaction, 66)
	require.Equal(t, "1", refund.Extra.ChannelState.RefundNonce)
	require.Equal(t, "20000", refund.Extra.ChannelState.Balance)

	c := channelOf(ctx, t, db, payer)
	require.Empty(t, c.BusyCall, "the refund freed the channel")
	onchain, err := channel.ReadState(ctx, chain, c.State.ChannelID, nil)
	require.NoError(t, err)
	require.Equal(t, "1", onchain.RefundNonce.String())
	require.Equal(t, "20000", onchain.Balance.String())
	require.Equal(t, onchain.Balance.String(), c.State.OnChain.Balance.String())
	require.Equal(t, big.NewInt(20_000), new(big.Int).Sub(before, usdcBalance(ctx, t, chain, payer)), "the deposit less the refund")
	require.Eventually(t, func() bool {
		var done int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'channel.refund' AND state = 'completed'`).Scan(&done))
		return done == 1
	}, 10*time.Second, 50*time.Millisecond, "the refund was the worker's job")
}
