package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/model/modeltest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/payclient"
)

// paymentIDCounts is what the ledger holds: the paid calls and the
// settlements confirmed.
func paymentIDCounts(ctx context.Context, t *testing.T, db *dbtest.DB) (calls, settled int) {
	t.Helper()
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM calls`).Scan(&calls))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = $1`, store.EventSettlementConfirmed).Scan(&settled))
	return calls, settled
}

// withPaymentID returns the PAYMENT-SIGNATURE header value payment with
// its payment-identifier id replaced by id, which the signature does not
// cover (a client may send any id, valid or not).
func withPaymentID(t *testing.T, payment, id string) string {
	t.Helper()
	var p map[string]any
	require.NoError(t, x402.DecodeHeader(payment, &p))
	ext := p["extensions"].(map[string]any)[x402.ExtensionPaymentIdentifier].(map[string]any)
	ext["info"].(map[string]any)["id"] = id
	out, err := x402.EncodeHeader(p)
	require.NoError(t, err)
	return out
}

// TestPaymentIdentifier pays on the devchain with payment identifiers
// (x402's payment-identifier extension), each new payment freshly signed:
// the quotes declare the extension over HTTP and MCP; the same id with the
// same request gets the first call's result and PAYMENT-RESPONSE and the
// payer is charged once; with another request it is refused 409; a call
// still running is answered as running, and run once; another payer's
// same id is its own; an id that breaks the rules is a 400, and nothing is
// charged.
func TestPaymentIdentifier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	fake := modeltest.NewServer(t)
	rpc := freeAddr(t)
	env := map[string]string{
		"DATABASE_URL": db.URL, "DB_MAX_CONNS": testMaxConns, "LISTEN_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn",
		"DEVCHAIN_RPC_ADDR": rpc, "GEMINI_API_KEY": modeltest.APIKey, "GEMINI_BASE_URL": fake.URL, "CALL_WAIT": "1s",
	}
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] },
		&options{ops: []opDef{{sleepOp, worker.Bind(sleepOp, sleepWork, false)}}})
	chain, err := ethclient.DialContext(ctx, "http://"+rpc)
	require.NoError(t, err)
	t.Cleanup(chain.Close)

	client := devPayer(t, 6)
	payer := client.Address()
	initial := usdcBalance(ctx, t, chain, payer)
	spent := func() *big.Int { return new(big.Int).Sub(initial, usdcBalance(ctx, t, chain, payer)) }

	t.Run("Declared", func(t *testing.T) {
		resp, _ := post(t, http.DefaultClient, base+"/api/x402/diff", "", "")
		require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
		var pr x402.PaymentRequired
		require.NoError(t, x402.DecodeHeader(resp.Header.Get("PAYMENT-REQUIRED"), &pr))
		want := `{"info":{"required":false},"schema":{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
			"properties":{"required":{"type":"boolean"},"id":{"type":"string","minLength":16,"maxLength":128,"pattern":"^[a-zA-Z0-9_-]+$"}},
			"required":["required"]}}`
		require.JSONEq(t, want, string(pr.Extensions[x402.ExtensionPaymentIdentifier]))

		res := callTool(ctx, t, mcpSession(ctx, t, base, nil), "diff", map[string]any{"a": "x\n", "b": "y\n"}, nil)
		mcpRequired := requirePaymentRequired(t, res, "payment required")
		got, err := json.Marshal(mcpRequired["extensions"].(map[string]any)[x402.ExtensionPaymentIdentifier])
		require.NoError(t, err)
		require.JSONEq(t, want, string(got), "the MCP tools' quotes declare it too")
	})

	diffReq := &payclient.Request{URL: base + "/api/x402/diff", Body: []byte(`{"a":"one\n","b":"two\n"}`), PaymentID: "pay_same_request_000001"}
	var first *payclient.Result
	t.Run("SameIDSameRequest", func(t *testing.T) {
		first, err = client.Do(ctx, diffReq)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, first.Status, string(first.Body))
		require.True(t, first.Settlement.Success)
		// The answer is lost: the client signs a new payment with the
		// same id.
		again, err := client.Do(ctx, diffReq)
		require.NoError(t, err)
		require.NotEqual(t, first.PaymentSignature, again.PaymentSignature, "a new signature")
		require.Equal(t, http.StatusOK, again.Status, string(again.Body))
		require.JSONEq(t, string(first.Body), string(again.Body), "the stored result")
		require.Equal(t, first.Settlement, again.Settlement, "the stored PAYMENT-RESPONSE")
		require.Equal(t, big.NewInt(10_000), spent(), "charged once")
		calls, settled := paymentIDCounts(ctx, t, db)
		require.Equal(t, 1, calls)
		require.Equal(t, 1, settled)
	})

	t.Run("SameIDOtherRequest", func(t *testing.T) {
		for _, other := range []*payclient.Request{
			{URL: base + "/api/x402/diff", Body: []byte(`{"a":"one\n","b":"three\n"}`), PaymentID: diffReq.PaymentID},
			{URL: base + "/api/x402/regex", Body: []byte(`{"pattern":"o","text":"one"}`), PaymentID: diffReq.PaymentID},
		} {
			res, err := client.Do(ctx, other)
			require.NoError(t, err)
			require.Equal(t, http.StatusConflict, res.Status, string(res.Body))
			require.Equal(t, "payment_identifier_conflict", decodeJSON[errorBody](t, res.Body).Error)
			require.Nil(t, res.Settlement)
		}
		require.Equal(t, big.NewInt(10_000), spent(), "nothing more charged")
		calls, _ := paymentIDCounts(ctx, t, db)
		require.Equal(t, 1, calls)
	})

	t.Run("AnotherPayersSameID", func(t *testing.T) {
		other := devPayer(t, 7)
		before := usdcBalance(ctx, t, chain, other.Address())
		res, err := other.Do(ctx, diffReq)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.Status, string(res.Body))
		require.NotEqual(t, decodeJSON[errorBody](t, first.Body).CallID, decodeJSON[errorBody](t, res.Body).CallID, "its own call")
		require.Equal(t, other.Address().Hex(), res.Settlement.Payer)
		require.Equal(t, big.NewInt(10_000), new(big.Int).Sub(before, usdcBalance(ctx, t, chain, other.Address())))
	})

	t.Run("Running", func(t *testing.T) {
		calls, _ := paymentIDCounts(ctx, t, db)
		spentBefore := spent()
		req := &payclient.Request{URL: base + "/api/x402/sleep", Body: []byte(`{"ms":4000}`), PaymentID: "pay_running_call_000001"}
		res, err := client.Do(ctx, req)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, res.Status, string(res.Body))
		type runningBody struct {
			CallID string `json:"call_id"`
			Status string `json:"status"`
			Poll   string `json:"poll"`
		}
		var running runningBody
		require.NoError(t, json.Unmarshal(res.Body, &running))
		again, err := client.Do(ctx, req)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, again.Status, string(again.Body))
		var runningAgain runningBody
		require.NoError(t, json.Unmarshal(again.Body, &runningAgain))
		require.Equal(t, "running", running.Status)
		require.Equal(t, running, runningAgain, "the call running, answered as running")

		resp, err := http.Get(base + running.Poll + "&wait=30")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		done, err := client.Do(ctx, req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, done.Status, string(done.Body))
		require.Equal(t, running.CallID, decodeJSON[errorBody](t, done.Body).CallID)
		after, _ := paymentIDCounts(ctx, t, db)
		require.Equal(t, calls+1, after, "run once")
		require.Equal(t, big.NewInt(10_000), new(big.Int).Sub(spent(), spentBefore), "charged once")
	})

	t.Run("PayCommand", func(t *testing.T) {
		// x402d pay -payment-id, run again after a lost answer.
		spentBefore := spent()
		var outs [2]bytes.Buffer
		for i := range outs {
			args := []string{"pay", "-account", "6", "-payment-id", "pay_command_line_00001", "-d", `{"a":"cli\n","b":"pay\n"}`, base + "/api/x402/diff"}
			require.NoError(t, run(ctx, args, func(string) string { return "" }, &outs[i], io.Discard, nil))
		}
		require.Contains(t, outs[0].String(), "HTTP 200")
		require.Equal(t, outs[0].String(), outs[1].String(), "the same answer")
		require.Equal(t, big.NewInt(10_000), new(big.Int).Sub(spent(), spentBefore), "charged once")
	})

	t.Run("InvalidID", func(t *testing.T) {
		calls, _ := paymentIDCounts(ctx, t, db)
		spentBefore := spent()
		resp, _ := post(t, http.DefaultClient, base+"/api/x402/diff", "", "")
		payment, err := client.Pay(ctx, resp.Header.Get("PAYMENT-REQUIRED"))
		require.NoError(t, err)
		for _, id := range []string{"too_short", "pay_has/a_slash_in_it", "pay_" + strings.Repeat("a", 130)} {
			resp, body := post(t, http.DefaultClient, base+"/api/x402/diff", withPaymentID(t, payment, id), `{"a":"1\n","b":"2\n"}`)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
			require.Equal(t, x402.ReasonInvalidPaymentID, decodeJSON[errorBody](t, body).Error)
		}
		after, _ := paymentIDCounts(ctx, t, db)
		require.Equal(t, calls, after)
		require.Equal(t, spentBefore, spent(), "nothing charged")
	})
}

// TestPaymentIdentifierTwoProcesses sends payments of one payer with one
// payment identifier, each freshly signed, to two api processes at once
// and then again to an api process started after the others stopped: one
// call is run and charged, and every answer is its result.
func TestPaymentIdentifierTwoProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	env, chain := startDevchainProcess(ctx, t, db)
	apis := []*child{startChild(t, "api", env), startChild(t, "api", env)}
	startChild(t, "worker", env)

	client := devPayer(t, 8)
	before := usdcBalance(ctx, t, chain, client.Address())
	body := []byte(`{"a":"alpha\n","b":"beta\n"}`)
	const id = "pay_two_processes_00001"
	results := make([]*payclient.Result, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			res, err := client.Do(ctx, &payclient.Request{URL: apis[i%2].addr + "/api/x402/diff", Body: body, PaymentID: id})
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = res
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	callID := ""
	for _, res := range results {
		require.Equal(t, http.StatusOK, res.Status, string(res.Body))
		got := decodeJSON[errorBody](t, res.Body).CallID
		require.True(t, callID == "" || got == callID, "one call for one id")
		callID = got
	}

	for _, api := range apis {
		api.stop(t)
	}
	later := startChild(t, "api", env)
	res, err := client.Do(ctx, &payclient.Request{URL: later.addr + "/api/x402/diff", Body: body, PaymentID: id})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, callID, decodeJSON[errorBody](t, res.Body).CallID, "kept in Postgres")
	require.Equal(t, results[0].Settlement, res.Settlement)

	calls, settled := paymentIDCounts(ctx, t, db)
	require.Equal(t, 1, calls)
	require.Equal(t, 1, settled)
	require.Equal(t, big.NewInt(10_000), new(big.Int).Sub(before, usdcBalance(ctx, t, chain, client.Address())), "charged once")
}

// TestOfficialClientRetriesWithPaymentID has the official x402 client
// (@x402/fetch and @x402/evm's exact client, compat/pay_retry_id.mjs) pay
// a call with a payment identifier from the official helper
// (@x402/extensions/payment-identifier) through a loopback proxy that
// loses the answer to the first paid request after the service gave it;
// the client signs a new payment with the same id, gets the result, and
// is charged once on chain.
func TestOfficialClientRetriesWithPaymentID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	compat := compatDir(t, "@x402/fetch", "@x402/evm", "@x402/extensions")
	base, chain, db := startDevchainServiceDB(ctx, t)
	proxy := newLossyProxy(t, base)

	const account = 2
	payer, payTo := devAddress(t, account), devAddress(t, devchain.PayToAccount)
	payerBefore, payToBefore := usdcBalance(ctx, t, chain, payer), usdcBalance(ctx, t, chain, payTo)
	cmd := exec.CommandContext(ctx, "node", filepath.Join(compat, "pay_retry_id.mjs"), proxy.URL+"/api/x402/diff", "2", `{"a":"lost\n","b":"found\n"}`)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node pay_retry_id.mjs: %s", stderr.String())
	var out struct {
		Address, ID string
		Attempts    []struct {
			Status      int
			Body, Error string
			Settlement  *x402.SettleResponse
			Sent        struct{ Signature, ID string }
		}
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	require.Equal(t, payer.Hex(), out.Address)
	require.Len(t, out.Attempts, 2, stdout.String())
	first, second := out.Attempts[0], out.Attempts[1]
	require.Zero(t, first.Status, "the first answer was lost: %s", first.Error)
	require.EqualValues(t, http.StatusOK, proxy.lostStatus.Load(), "after the service answered it")
	require.Equal(t, http.StatusOK, second.Status, second.Body)
	require.NotEqual(t, first.Sent.Signature, second.Sent.Signature, "the retry is a new payment")
	require.Equal(t, out.ID, first.Sent.ID)
	require.Equal(t, out.ID, second.Sent.ID)
	require.NotNil(t, second.Settlement)
	require.True(t, second.Settlement.Success)
	require.Equal(t, payer.Hex(), second.Settlement.Payer)

	calls, settled := paymentIDCounts(ctx, t, db)
	require.Equal(t, 1, calls)
	require.Equal(t, 1, settled)
	price := big.NewInt(10_000) // diff: $0.01
	require.Equal(t, price, new(big.Int).Sub(payerBefore, usdcBalance(ctx, t, chain, payer)), "charged once")
	require.Equal(t, price, new(big.Int).Sub(usdcBalance(ctx, t, chain, payTo), payToBefore))
}
