package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/svmtest"
	"github.com/x402d/x402d/model/modeltest"
	"github.com/x402d/x402d/x402"
)

// solanaService is `x402d serve` offering Solana next to its devchain, with
// its fee payer and receiving wallet on a LiteSVM node.
type solanaService struct {
	base     string
	node     *svmtest.Node
	feePayer solana.PrivateKey
	payTo    solana.PublicKey
	db       *dbtest.DB
	model    *modeltest.Server
}

// startSolanaService starts a LiteSVM node and `x402d serve` settling Solana
// payments on it (the fake Gemini server, loopback fetches allowed); env
// adds settings.
func startSolanaService(ctx context.Context, t *testing.T, env map[string]string) *solanaService {
	t.Helper()
	s := &solanaService{node: svmtest.Start(t, nil), feePayer: svmtest.PayerKey(1000), payTo: svmtest.PayerKey(1001).PublicKey()}
	s.node.FundSOL(ctx, s.feePayer.PublicKey(), 10_000_000_000)
	s.node.Fund(ctx, s.payTo, 0, 0, solana.PublicKey{}) // its USDC account exists
	s.db = dbtest.Schema(ctx, t)
	fake := modeltest.NewServer(t)
	s.model = fake
	all := map[string]string{
		"DATABASE_URL": s.db.URL, "DB_MAX_CONNS": testMaxConns, "LISTEN_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn",
		"DEVCHAIN_RPC_ADDR": freeAddr(t), "GEMINI_API_KEY": modeltest.APIKey, "GEMINI_BASE_URL": fake.URL,
		"FETCH_ALLOW_CIDRS":    "127.0.0.1/32",
		"SOLANA_FEE_PAYER_KEY": s.feePayer.String(), "RPC_URL_SOLANA": s.node.URL, "PAY_TO_SOLANA": s.payTo.String(),
	}
	for k, v := range env {
		all[k] = v
	}
	s.base = startInProcessWith(ctx, t, "serve", func(k string) string { return all[k] }, &options{})
	return s
}

// officialSolanaPayments is what compat/svm_pay_ops.mjs reports.
type officialSolanaPayments struct {
	Address string
	Calls   []struct {
		Op, QuoteError, Amount, Body string
		QuoteStatus, Status, MS      int
		MaxTimeoutSeconds            int
		Extra                        map[string]any
		QuoteValid, HasBazaar        bool
		Settlement                   *x402.SettleResponse
	}
}

// payOnSolanaWithOfficialClient has the official x402 packages
// (compat/svm_pay_ops.mjs: @x402/fetch, @x402/svm) pay calls of the service
// at base on Solana with payer, reading the chain at rpcURL.
func payOnSolanaWithOfficialClient(ctx context.Context, t *testing.T, base, rpcURL string, payer solana.PrivateKey, calls []map[string]string) officialSolanaPayments {
	t.Helper()
	compat := compatDir(t, "@x402/fetch", "@x402/svm", "litesvm")
	raw, err := json.Marshal(calls)
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, "node", filepath.Join(compat, "svm_pay_ops.mjs"), base, rpcURL, payer.String(), string(raw))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node svm_pay_ops.mjs: %s", stderr.String())
	var out officialSolanaPayments
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	return out
}

// TestOfficialClientPaysEveryOperationOnSolana has the official x402
// packages (@x402/fetch, @x402/svm) pay each sellable operation on Solana,
// settled on a LiteSVM node: @x402/core validates every quote, the payer's
// and the receiver's USDC balances move by exactly the prices.
func TestOfficialClientPaysEveryOperationOnSolana(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><head><title>Page</title></head><body>x</body></html>")
	}))
	defer page.Close()
	s := startSolanaService(ctx, t, nil)
	payer := svmtest.PayerKey(3)
	payerATA, payToATA := svmtest.ATA(t, payer.PublicKey(), svmtest.USDC), svmtest.ATA(t, s.payTo, svmtest.USDC)
	payerBefore, payToBefore := s.node.TokenBalance(ctx, payerATA), s.node.TokenBalance(ctx, payToATA)

	out := payOnSolanaWithOfficialClient(ctx, t, s.base, s.node.URL, payer, sellableCalls(page.URL+"/"))
	require.Equal(t, payer.PublicKey().String(), out.Address)
	require.Len(t, out.Calls, 7)
	var total uint64
	for _, c := range out.Calls {
		require.Equal(t, http.StatusPaymentRequired, c.QuoteStatus, c.Op)
		require.True(t, c.QuoteValid, "%s: @x402/core refuses our quote: %s", c.Op, c.QuoteError)
		require.Equal(t, x402.SolanaMaxTimeoutSeconds, c.MaxTimeoutSeconds, c.Op)
		require.NotEmpty(t, c.Extra["recentBlockhash"], "%s: the quote hands out a blockhash", c.Op)
		require.NotZero(t, c.Extra["lastValidBlockHeight"], c.Op)
		require.Equal(t, http.StatusOK, c.Status, "%s: %s", c.Op, c.Body)
		require.NotNil(t, c.Settlement, c.Op)
		require.True(t, c.Settlement.Success, c.Op)
		require.Equal(t, payer.PublicKey().String(), c.Settlement.Payer, c.Op)
		require.Equal(t, x402.SolanaMainnet, c.Settlement.Network, c.Op)
		_, err := solana.SignatureFromBase58(c.Settlement.Transaction)
		require.NoError(t, err, c.Op)
		amount, err := strconv.ParseUint(c.Amount, 10, 64)
		require.NoError(t, err, c.Op)
		total += amount
		t.Logf("%s paid on Solana in %d ms", c.Op, c.MS)
	}
	require.Equal(t, uint64(1_570_000), total)
	require.Equal(t, total, payerBefore-s.node.TokenBalance(ctx, payerATA))
	require.Equal(t, total, s.node.TokenBalance(ctx, payToATA)-payToBefore)

	// The workers read the fee payer's balance (10 SOL at start).
	resp, err := http.Get(s.base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	figures, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^x402d_solana_fee_payer_balance_lamports (\S+)$`).FindSubmatch(figures)
	require.NotNil(t, m, "no fee payer balance in /metrics")
	lamports, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	require.InDelta(t, 10_000_000_000, lamports, 1_000_000, "fee payer balance as read")
}

// TestSolanaPaymentExpires has the official client pay a brief on Solana
// whose model answers after 75 s, longer than the payment's blockhash
// lives: the call ends 502 payment_expired once no run could end and
// settle in time, well before the model would answer, and nothing is
// charged.
func TestSolanaPaymentExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startSolanaService(ctx, t, nil)
	s.model.SetHandler(func(*modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Delay: 75 * time.Second, Text: "too late"}
	})
	payer := svmtest.PayerKey(4)
	payerATA := svmtest.ATA(t, payer.PublicKey(), svmtest.USDC)
	before := s.node.TokenBalance(ctx, payerATA)

	start := time.Now()
	out := payOnSolanaWithOfficialClient(ctx, t, s.base, s.node.URL, payer, []map[string]string{{"op": "brief", "body": `{"question":"What is the x402 protocol?"}`}})
	c := out.Calls[0]
	require.Equal(t, x402.SolanaMaxTimeoutSeconds, c.MaxTimeoutSeconds)
	status, body := c.Status, c.Body
	if status == http.StatusAccepted {
		var running struct{ Poll string }
		require.NoError(t, json.Unmarshal([]byte(body), &running), body)
		for status == http.StatusAccepted && time.Since(start) < 2*time.Minute {
			resp, err := http.Get(s.base + running.Poll + "&wait=30")
			require.NoError(t, err)
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			status, body = resp.StatusCode, string(raw)
		}
	}
	require.Equal(t, http.StatusBadGateway, status, body)
	require.Contains(t, body, `"payment_expired"`)
	elapsed := time.Since(start)
	t.Logf("payment_expired after %s", elapsed)
	require.Less(t, elapsed, time.Duration(x402.SolanaMaxTimeoutSeconds)*time.Second, "ended before the blockhash died, not when the model answered")
	require.Equal(t, before, s.node.TokenBalance(ctx, payerATA), "nothing charged")
}

// solanaRequirement returns the Solana option of op's quote.
func solanaRequirement(t *testing.T, base, op string) *x402.Requirements {
	t.Helper()
	resp, err := http.Post(base+"/api/x402/"+op, "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	var pr x402.PaymentRequired
	require.NoError(t, x402.DecodeHeader(resp.Header.Get("PAYMENT-REQUIRED"), &pr))
	for i := range pr.Accepts {
		if pr.Accepts[i].Network == x402.SolanaMainnet {
			return &pr.Accepts[i]
		}
	}
	t.Fatalf("no Solana option in %+v", pr.Accepts)
	return nil
}

// postPaid posts body to op with the payment header and returns the status,
// the body and the decoded PAYMENT-RESPONSE (nil when absent).
func postPaid(t *testing.T, base, op, body, header string) (int, string, *x402.SettleResponse) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/api/x402/"+op, bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("PAYMENT-SIGNATURE", header)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var settled *x402.SettleResponse
	if h := resp.Header.Get("PAYMENT-RESPONSE"); h != "" {
		settled = &x402.SettleResponse{}
		require.NoError(t, x402.DecodeHeader(h, settled))
	}
	return resp.StatusCode, string(raw), settled
}

// TestSolanaDuplicatePayments sends the same Solana payment again, the
// same transaction with other bytes in the fee payer's slot, and one
// payment twice at once: each is one call, settled once, and the payer's
// and receiver's USDC move by one price per payment.
func TestSolanaDuplicatePayments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startSolanaService(ctx, t, nil)
	payer := svmtest.PayerKey(5)
	payerATA, payToATA := svmtest.ATA(t, payer.PublicKey(), svmtest.USDC), svmtest.ATA(t, s.payTo, svmtest.USDC)
	payerBefore, payToBefore := s.node.TokenBalance(ctx, payerATA), s.node.TokenBalance(ctx, payToATA)
	const body = `{"a":"x\n","b":"y\n"}`

	req := solanaRequirement(t, s.base, "diff")
	tx := s.node.PaymentTransaction(ctx, req, payer, "first")
	header := svmtest.PaymentHeader(t, req, tx)
	status, result, settled := postPaid(t, s.base, "diff", body, header)
	require.Equal(t, http.StatusOK, status, result)
	require.True(t, settled.Success)

	// The same header again: the stored result, no second transfer.
	status, again, resent := postPaid(t, s.base, "diff", body, header)
	require.Equal(t, http.StatusOK, status, again)
	require.JSONEq(t, result, again)
	require.Equal(t, settled.Transaction, resent.Transaction)

	// The same message with the fee payer's slot filled in by the caller:
	// the same payment.
	copy(tx.Signatures[0][:], svmtest.PayerKey(99)[:64])
	forged := svmtest.PaymentHeader(t, req, tx)
	require.NotEqual(t, header, forged)
	status, again, _ = postPaid(t, s.base, "diff", body, forged)
	require.Equal(t, http.StatusOK, status, again)
	require.JSONEq(t, result, again)
	status, refused, _ := postPaid(t, s.base, "diff", `{"a":"other\n","b":"y\n"}`, forged)
	require.Equal(t, http.StatusPaymentRequired, status, refused)
	require.Contains(t, refused, "payment_already_used")

	// One payment sent twice at once: one call.
	second := svmtest.PaymentHeader(t, req, s.node.PaymentTransaction(ctx, req, payer, "second"))
	type answer struct {
		status int
		body   string
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			st, b, _ := postPaid(t, s.base, "diff", body, second)
			answers <- answer{st, b}
		}()
	}
	a, b := <-answers, <-answers
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.Equal(t, http.StatusOK, b.status, b.body)
	var ca, cb struct {
		CallID string `json:"call_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(a.body), &ca))
	require.NoError(t, json.Unmarshal([]byte(b.body), &cb))
	require.Equal(t, ca.CallID, cb.CallID)

	require.Equal(t, uint64(20_000), payerBefore-s.node.TokenBalance(ctx, payerATA), "two payments, each charged once")
	require.Equal(t, uint64(20_000), s.node.TokenBalance(ctx, payToATA)-payToBefore)
}

// TestSolanaSettlementFaults pays on Solana while the node loses the
// answers to sendTransaction and getSignatureStatuses, drops a sent
// transaction, and restarts: every call is answered once and each payment
// moves its price once.
func TestSolanaSettlementFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startSolanaService(ctx, t, nil)
	payer := svmtest.PayerKey(6)
	payerATA, payToATA := svmtest.ATA(t, payer.PublicKey(), svmtest.USDC), svmtest.ATA(t, s.payTo, svmtest.USDC)
	payerBefore, payToBefore := s.node.TokenBalance(ctx, payerATA), s.node.TokenBalance(ctx, payToATA)

	faults := []struct {
		name   string
		before func()
	}{
		{"the answer to sendTransaction lost", func() { s.node.DropAnswers(ctx, "sendTransaction", 1) }},
		{"the answers to getSignatureStatuses lost", func() { s.node.DropAnswers(ctx, "getSignatureStatuses", 2) }},
		{"the sent transaction dropped by the leader", func() { s.node.IgnoreSends(ctx, 1) }},
		{"the node restarted", func() { s.node.Restart() }},
	}
	for i, f := range faults {
		req := solanaRequirement(t, s.base, "diff")
		header := svmtest.PaymentHeader(t, req, s.node.PaymentTransaction(ctx, req, payer, "fault-"+strconv.Itoa(i)))
		f.before()
		body := `{"a":"` + strconv.Itoa(i) + `\n","b":"y\n"}`
		status, result, _ := postPaid(t, s.base, "diff", body, header)
		start := time.Now()
		for status == http.StatusAccepted && time.Since(start) < time.Minute {
			var running struct{ Poll string }
			require.NoError(t, json.Unmarshal([]byte(result), &running), result)
			resp, err := http.Get(s.base + running.Poll + "&wait=30")
			require.NoError(t, err)
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			status, result = resp.StatusCode, string(raw)
		}
		require.Equal(t, http.StatusOK, status, "%s: %s", f.name, result)
		t.Logf("%s: answered", f.name)
	}
	n := uint64(len(faults)) * 10_000
	require.Equal(t, n, payerBefore-s.node.TokenBalance(ctx, payerATA), "each payment charged once")
	require.Equal(t, n, s.node.TokenBalance(ctx, payToATA)-payToBefore)
}

// TestSolanaQuoteRenewsBlockhash checks that the Solana option of the
// quotes (HTTP and the fast path alike) hands out the node's newest
// blockhash, renewed as blocks pass, and that a payment naming it is
// accepted long after the service started.
func TestSolanaQuoteRenewsBlockhash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startSolanaService(ctx, t, nil)
	extra := func() x402.SVMExtra {
		var e x402.SVMExtra
		require.NoError(t, json.Unmarshal(solanaRequirement(t, s.base, "regex").Extra, &e))
		return e
	}
	first := extra()
	require.NotEmpty(t, first.RecentBlockhash)
	require.Eventually(t, func() bool {
		next := extra()
		return next.RecentBlockhash != first.RecentBlockhash && next.LastValidBlockHeight > first.LastValidBlockHeight
	}, 10*time.Second, 200*time.Millisecond)
	last := extra()
	require.LessOrEqual(t, last.LastValidBlockHeight-s.node.BlockHeight(ctx, "confirmed"), uint64(x402.SolanaBlockhashBlocks))
	require.Greater(t, last.LastValidBlockHeight-s.node.BlockHeight(ctx, "confirmed"), uint64(x402.SolanaBlockhashBlocks-15), "renewed within a few blocks")

	req := solanaRequirement(t, s.base, "diff")
	status, body, settled := postPaid(t, s.base, "diff", `{"a":"1\n","b":"2\n"}`,
		svmtest.PaymentHeader(t, req, s.node.PaymentTransaction(ctx, req, svmtest.PayerKey(7), "renewed")))
	require.Equal(t, http.StatusOK, status, body)
	require.True(t, settled.Success)
}
