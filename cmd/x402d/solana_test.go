package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/svmtest"
	"github.com/x402d/x402d/loadgen"
	"github.com/x402d/x402d/model/modeltest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/svm"
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
	s := &solanaService{node: svmtest.Start(t, nil)}
	s.feePayer, s.payTo = fundSolanaSeller(ctx, s.node)
	s.db = dbtest.Schema(ctx, t)
	fake := modeltest.NewServer(t)
	s.model = fake
	all := map[string]string{
		"DATABASE_URL": s.db.URL, "DB_MAX_CONNS": testMaxConns, "LISTEN_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn",
		"DEVCHAIN_RPC_ADDR": freeAddr(t), "GEMINI_API_KEY": modeltest.APIKey, "GEMINI_BASE_URL": fake.URL,
		"FETCH_ALLOW_CIDRS": "127.0.0.1/32", "OPS_TOKEN": testOpsToken,
	}
	maps.Copy(all, solanaSellerEnv(s.node, s.feePayer, s.payTo))
	maps.Copy(all, env)
	s.base = startInProcessWith(ctx, t, "serve", func(k string) string { return all[k] }, &options{})
	return s
}

// fundSolanaSeller gives the seller's fee payer 10 SOL on node and its
// receiving wallet a USDC account, and returns them.
func fundSolanaSeller(ctx context.Context, node *svmtest.Node) (feePayer solana.PrivateKey, payTo solana.PublicKey) {
	feePayer, payTo = svmtest.PayerKey(1000), svmtest.PayerKey(1001).PublicKey()
	node.FundSOL(ctx, feePayer.PublicKey(), 10_000_000_000)
	node.Fund(ctx, payTo, 0, 0, solana.PublicKey{}) // its USDC account exists
	return feePayer, payTo
}

// solanaSellerEnv is the configuration offering Solana USDC settled on
// node by feePayer to payTo.
func solanaSellerEnv(node *svmtest.Node, feePayer solana.PrivateKey, payTo solana.PublicKey) map[string]string {
	return map[string]string{"SOLANA_FEE_PAYER_KEY": feePayer.String(), "RPC_URL_SOLANA": node.URL, "PAY_TO_SOLANA": payTo.String()}
}

// payOnSolanaWithOfficialClient has the official x402 packages
// (compat/pay_ops.mjs with NETWORK=solana: @x402/fetch, @x402/svm) pay
// calls of the service at base on Solana with payer, reading the chain at
// rpcURL.
func payOnSolanaWithOfficialClient(ctx context.Context, t *testing.T, base, rpcURL string, payer solana.PrivateKey, calls []map[string]string) officialPayments {
	t.Helper()
	compat := compatDir(t, "@x402/fetch", "@x402/svm", "litesvm")
	return runPayOps(ctx, t, compat, []string{"NETWORK=solana"}, base, []string{rpcURL, payer.String()}, calls)
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
	checkSolanaLedger(ctx, t, s.db, s.node, s.payTo, payToBefore)

	// The workers read the fee payer's balance (10 SOL at start).
	figures := getMetrics(ctx, t, s.base)
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
	before, payToBefore := s.node.TokenBalance(ctx, payerATA), s.node.TokenBalance(ctx, svmtest.ATA(t, s.payTo, svmtest.USDC))

	start := time.Now()
	out := payOnSolanaWithOfficialClient(ctx, t, s.base, s.node.URL, payer, []map[string]string{{"op": "brief", "body": `{"question":"What is the x402 protocol?"}`}})
	c := out.Calls[0]
	require.Equal(t, x402.SolanaMaxTimeoutSeconds, c.MaxTimeoutSeconds)
	status, body := awaitAnswer(t, s.base, c.Status, c.Body, 2*time.Minute)
	require.Equal(t, http.StatusBadGateway, status, body)
	require.Contains(t, body, `"payment_expired"`)
	elapsed := time.Since(start)
	t.Logf("payment_expired after %s", elapsed)
	require.Less(t, elapsed, time.Duration(x402.SolanaMaxTimeoutSeconds)*time.Second, "ended before the blockhash died, not when the model answered")
	require.Equal(t, before, s.node.TokenBalance(ctx, payerATA), "nothing charged")
	checkSolanaLedger(ctx, t, s.db, s.node, s.payTo, payToBefore)
}

// awaitAnswer follows a call answered 202 (still running) through its poll
// URL until it ends or limit passes, and returns its last status and body;
// any other answer is returned as it is.
func awaitAnswer(t *testing.T, base string, status int, body string, limit time.Duration) (int, string) {
	t.Helper()
	start := time.Now()
	for status == http.StatusAccepted && time.Since(start) < limit {
		var running struct{ Poll string }
		require.NoError(t, json.Unmarshal([]byte(body), &running), body)
		resp, err := http.Get(base + running.Poll + "&wait=30")
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		status, body = resp.StatusCode, string(raw)
	}
	return status, body
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
	checkSolanaLedger(ctx, t, s.db, s.node, s.payTo, payToBefore)
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
		status, result = awaitAnswer(t, s.base, status, result, time.Minute)
		require.Equal(t, http.StatusOK, status, "%s: %s", f.name, result)
		t.Logf("%s: answered", f.name)
	}
	n := uint64(len(faults)) * 10_000
	require.Equal(t, n, payerBefore-s.node.TokenBalance(ctx, payerATA), "each payment charged once")
	require.Equal(t, n, s.node.TokenBalance(ctx, payToATA)-payToBefore)
	checkSolanaLedger(ctx, t, s.db, s.node, s.payTo, payToBefore)
}

// TestSolanaSignatureRecordedBeforeSend holds the node's first
// sendTransaction of a paid call before handling it: while the settlement
// waits for the node's answer, the ledger already names the transaction
// held (its fee payer's signature, in the call's job.succeeded) and nothing
// has landed; once the node lets it go, the call is answered with that very
// transaction, settled once.
func TestSolanaSignatureRecordedBeforeSend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startSolanaService(ctx, t, nil)
	payer := svmtest.PayerKey(7)
	payToBefore := s.node.TokenBalance(ctx, svmtest.ATA(t, s.payTo, svmtest.USDC))
	req := solanaRequirement(t, s.base, "diff")
	header := svmtest.PaymentHeader(t, req, s.node.PaymentTransaction(ctx, req, payer, "held"))

	s.node.HoldSends(ctx, 1, 3*time.Second)
	type answer struct {
		status  int
		body    string
		settled *x402.SettleResponse
	}
	answered := make(chan answer, 1)
	go func() {
		status, body, settled := postPaid(t, s.base, "diff", `{"a":"x\n","b":"y\n"}`, header)
		answered <- answer{status, body, settled}
	}()
	var held []string
	require.Eventually(t, func() bool {
		held = s.node.Held(ctx)
		return len(held) > 0
	}, 30*time.Second, 20*time.Millisecond, "no send reached the node")
	require.Len(t, held, 1)
	recorded := transactionsByCall(ctx, t, s.db, store.EventJobSucceeded)
	require.Len(t, recorded, 1)
	for _, txs := range recorded {
		require.Equal(t, held, txs, "the ledger names the transaction while its send is held")
	}
	status, _ := s.node.SignatureStatus(ctx, held[0])
	require.Empty(t, status, "nothing landed while the send is held")

	a := <-answered
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.True(t, a.settled.Success)
	require.Equal(t, held[0], a.settled.Transaction)
	checkSolanaLedger(ctx, t, s.db, s.node, s.payTo, payToBefore)
}

// TestSolanaSmartWalletPays pays a call with a smart wallet's transaction,
// SOLANA_SMART_WALLET_PROGRAMS naming the Associated Token Account program
// as the stand-in smart wallet (x402/svm's nestedWallet: its RecoverNested
// moves, in an inner TransferChecked the program signs for, the USDC a
// token account of the seller's wallet holds to the wallet's USDC account):
// the call is answered 200, settled once with the price moved by the inner
// transfer, the same payment resent gets the same answer, and a service
// accepting no smart wallet refuses it with nothing sent.
func TestSolanaSmartWalletPays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startSolanaService(ctx, t, map[string]string{"SOLANA_SMART_WALLET_PROGRAMS": "official," + svm.AssociatedTokenProgram.String()})
	// The seller's own wallet signs (its key is a development key): the
	// token account the program empties is one of its own.
	wallet := svmtest.PayerKey(1001)
	require.Equal(t, s.payTo, wallet.PublicKey())
	s.node.FundSOL(ctx, wallet.PublicKey(), 1_000_000_000)
	ownerMint := svmtest.PayerKey(2001).PublicKey()
	s.node.Mint(ctx, ownerMint, svm.TokenProgram, 0)
	ownerATA := s.node.Fund(ctx, wallet.PublicKey(), 0, 0, ownerMint)
	nested := s.node.Fund(ctx, ownerATA, 0, 10_000, solana.PublicKey{})
	payToATA := svmtest.ATA(t, s.payTo, svmtest.USDC)
	payToBefore := s.node.TokenBalance(ctx, payToATA)

	req := solanaRequirement(t, s.base, "diff")
	var extra x402.SVMExtra
	require.NoError(t, json.Unmarshal(req.Extra, &extra))
	tx, err := solana.NewTransaction([]solana.Instruction{
		solana.NewInstruction(svm.ComputeBudgetProgram, nil, []byte{2, 0x40, 0x0d, 0x03, 0}), // 200,000 units
		solana.NewInstruction(svm.ComputeBudgetProgram, nil, []byte{3, 1, 0, 0, 0, 0, 0, 0, 0}),
		solana.NewInstruction(svm.AssociatedTokenProgram, solana.AccountMetaSlice{
			solana.Meta(nested).WRITE(), solana.Meta(svmtest.USDC), solana.Meta(payToATA).WRITE(),
			solana.Meta(ownerATA), solana.Meta(ownerMint), solana.Meta(wallet.PublicKey()).WRITE().SIGNER(), solana.Meta(svm.TokenProgram),
		}, []byte{2}),
		solana.NewInstruction(svm.MemoProgram, nil, []byte("smart wallet")),
	}, solana.MustHashFromBase58(extra.RecentBlockhash), solana.TransactionPayer(solana.MustPublicKeyFromBase58(extra.FeePayer)))
	require.NoError(t, err)
	tx.Message.SetVersion(solana.MessageVersionV0)
	_, err = tx.PartialSign(func(k solana.PublicKey) *solana.PrivateKey {
		if k == wallet.PublicKey() {
			return &wallet
		}
		return nil
	})
	require.NoError(t, err)
	header := svmtest.PaymentHeader(t, req, tx)

	// A service accepting no smart wallet refuses it, nothing sent.
	plain := startSolanaService(ctx, t, nil)
	status, refused, _ := postPaid(t, plain.base, "diff", `{"a":"1\n","b":"2\n"}`, header)
	require.Equal(t, http.StatusPaymentRequired, status, refused)

	status, result, settled := postPaid(t, s.base, "diff", `{"a":"1\n","b":"2\n"}`, header)
	require.Equal(t, http.StatusOK, status, result)
	require.True(t, settled.Success)
	require.Equal(t, wallet.PublicKey().String(), settled.Payer)
	require.Equal(t, uint64(10_000), s.node.TokenBalance(ctx, payToATA)-payToBefore, "the inner transfer paid the price")
	var account struct{ Value json.RawMessage }
	require.NoError(t, s.node.Call(ctx, &account, "getAccountInfo", nested.String(), map[string]string{"encoding": "base64"}))
	require.Equal(t, "null", string(account.Value), "the wallet's nested account emptied and closed")

	status, again, resent := postPaid(t, s.base, "diff", `{"a":"1\n","b":"2\n"}`, header)
	require.Equal(t, http.StatusOK, status, again)
	require.JSONEq(t, result, again)
	require.Equal(t, settled.Transaction, resent.Transaction)
	checkSolanaLedger(ctx, t, s.db, s.node, s.payTo, payToBefore)
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

// TestSolanaSettlesAtCommitment pays a call on Solana with
// SOLANA_COMMITMENT unset and set to finalized: the call is answered once
// its transaction is confirmed, or finalized (32 blocks, 12.8 s, later on
// the LiteSVM node), and its price moves once. SETTLE_GRACE is 8 s, shorter
// than finalization: the run's attempt has finalization's time on top of
// it, so that no second attempt starts while it waits.
func TestSolanaSettlesAtCommitment(t *testing.T) {
	t.Parallel()
	for i, commitment := range []string{"", "finalized"} {
		t.Run("commitment="+commitment, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := startSolanaService(ctx, t, map[string]string{"SOLANA_COMMITMENT": commitment, "SETTLE_GRACE": "8s"})
			payer := svmtest.PayerKey(1 + i)
			payerATA := svmtest.ATA(t, payer.PublicKey(), svmtest.USDC)
			before := s.node.TokenBalance(ctx, payerATA)
			req := solanaRequirement(t, s.base, "diff")
			start := time.Now()
			status, body, settled := postPaid(t, s.base, "diff", `{"a":"1\n","b":"2\n"}`,
				svmtest.PaymentHeader(t, req, s.node.PaymentTransaction(ctx, req, payer, "commitment")))
			require.Equal(t, http.StatusOK, status, body)
			require.True(t, settled.Success)
			confirmation, txErr := s.node.SignatureStatus(ctx, settled.Transaction)
			require.Empty(t, txErr)
			want := cmp.Or(commitment, "confirmed")
			require.Equal(t, want, confirmation, "the transaction when the call was answered")
			require.Equal(t, uint64(10_000), before-s.node.TokenBalance(ctx, payerATA))
			checkSolanaLedger(ctx, t, s.db, s.node, s.payTo, 0)
			var again int
			require.NoError(t, s.db.Pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE type = $1", store.EventSettlementSubmitted).Scan(&again))
			require.Zero(t, again, "a second settlement attempt started while the first waited for %s", want)
			t.Logf("answered at %s after %s", want, time.Since(start).Round(time.Millisecond))
		})
	}
}

// solanaSplit is the split layout offering Solana: a LiteSVM node, an
// `x402d devchain` process, an `x402d api` process and the environment of
// worker processes, all on one database, with short job timeouts for tests
// that kill workers.
type solanaSplit struct {
	node  *svmtest.Node
	payTo solana.PublicKey
	db    *dbtest.DB
	env   map[string]string
	api   *child
}

// startSolanaSplit starts the split layout; env adds settings.
func startSolanaSplit(ctx context.Context, t *testing.T, env map[string]string) *solanaSplit {
	t.Helper()
	s := &solanaSplit{node: svmtest.Start(t, nil), db: dbtest.Schema(ctx, t)}
	feePayer, payTo := fundSolanaSeller(ctx, s.node)
	s.payTo = payTo
	s.env, _ = startDevchainProcess(ctx, t, s.db)
	maps.Copy(s.env, solanaSellerEnv(s.node, feePayer, payTo))
	maps.Copy(s.env, env)
	s.api = startChild(t, "api", s.env)
	return s
}

// solanaDiff is the paid call of the Solana load tests, and its price.
var solanaDiff = loadgen.Request{Op: "diff", Body: `{"a":"one\ntwo\n","b":"one\n2\n"}`}

const solanaDiffPrice = 10_000 // $0.01

// balances reads the USDC of payer and of the receiver.
func (s *solanaSplit) balances(ctx context.Context, t *testing.T, payer solana.PublicKey) (payerUSDC, payToUSDC uint64) {
	t.Helper()
	return s.node.TokenBalance(ctx, svmtest.ATA(t, payer, svmtest.USDC)), s.node.TokenBalance(ctx, svmtest.ATA(t, s.payTo, svmtest.USDC))
}

// checkPaidOnce checks a load run of solanaDiff calls paid by payer, whose
// balances were payerBefore and payToBefore: every call was answered 200
// once, naming the one transaction its ledger records, confirmed on the
// node and its own; the USDC of the payer and of the receiver moved by
// exactly the prices of the calls answered; and the ledger is clean.
func (s *solanaSplit) checkPaidOnce(ctx context.Context, t *testing.T, rep *loadgen.Report, payer solana.PublicKey, payerBefore, payToBefore uint64) {
	t.Helper()
	require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
	checkCalls(ctx, t, s.db, rep)
	payerAfter, payToAfter := s.balances(ctx, t, payer)
	requirePaidOnce(ctx, t, s.db, rep, big.NewInt(solanaDiffPrice), new(big.Int).SetUint64(payerBefore-payerAfter))
	require.Equal(t, uint64(rep.Calls)*solanaDiffPrice, payToAfter-payToBefore, "the receiver got exactly the calls answered")
	paidBy := checkSolanaLedger(ctx, t, s.db, s.node, s.payTo, payToBefore)
	for _, o := range rep.Outcomes {
		require.Equal(t, paidBy[o.CallID], o.Tx, "the transaction call %s was answered with", o.CallID)
	}
	var resettled int
	require.NoError(t, s.db.Pool.QueryRow(ctx, `SELECT count(DISTINCT stream) FROM events WHERE type = $1 AND (data->>'attempt')::int > 1`,
		store.EventSettlementSubmitted).Scan(&resettled))
	t.Logf("%d calls paid on Solana; %d settlements attempted again after a kill", rep.Calls, resettled)
}

// TestSolanaLoadWorkersKilled is TestLoadWorkersKilledOnDevchain paid on
// Solana: an api and two worker processes settling on a LiteSVM node, a
// worker SIGKILLed every 1.5 s during paid load, wherever its settlements
// are. Every call is answered 200 once with its own confirmed transaction,
// the payer's and receiver's USDC move by exactly the prices of the calls
// answered, and the ledger is clean.
func TestSolanaLoadWorkersKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startSolanaSplit(ctx, t, nil)
	stopKilling := killWorkers(t, s.env, 1500*time.Millisecond)
	payer := svmtest.PayerKey(8)
	payerBefore, payToBefore := s.balances(ctx, t, payer.PublicKey())
	rep, err := loadgen.Run(ctx, loadgen.Config{
		BaseURL: s.api.addr, Requests: []loadgen.Request{solanaDiff},
		Payer: s.node.Payer(payer), Concurrency: 16, Duration: 6 * time.Second, Retry: true, RetryFor: 150 * time.Second,
	})
	t.Logf("%d workers killed", stopKilling(2))
	require.NoError(t, err)
	t.Log(rep)
	s.checkPaidOnce(ctx, t, rep, payer.PublicKey(), payerBefore, payToBefore)
}

// TestSolanaWorkersKilledBeforeConfirmation SIGKILLs both worker
// processes while settlements they sent are on the node but have not
// reached the commitment they wait for (confirmed, the default, and
// finalized): the node makes no block for a while during paid load, so the
// transactions sent meanwhile are processed and wait for the next block
// (and at finalized 32 more). The settlements' retries on the workers
// started in their place find them by their signatures (the fee payer's
// signature is deterministic) and send nothing twice: every call is
// answered 200 once, each payment moves its price once, and the ledger is
// clean.
func TestSolanaWorkersKilledBeforeConfirmation(t *testing.T) {
	t.Parallel()
	for i, commitment := range []string{"", "finalized"} {
		t.Run("commitment="+commitment, func(t *testing.T) {
			t.Parallel()
			killBeforeCommitment(t, commitment, svmtest.PayerKey(1+i))
		})
	}
}

// killBeforeCommitment is TestSolanaWorkersKilledBeforeConfirmation at
// SOLANA_COMMITMENT commitment, paid by payer.
func killBeforeCommitment(t *testing.T, commitment string, payer solana.PrivateKey) {
	ctx := context.Background()
	s := startSolanaSplit(ctx, t, map[string]string{"SOLANA_COMMITMENT": commitment})
	workers := []*child{startChild(t, "worker", s.env), startChild(t, "worker", s.env)}
	payerBefore, payToBefore := s.balances(ctx, t, payer.PublicKey())

	type result struct {
		rep *loadgen.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := loadgen.Run(ctx, loadgen.Config{
			BaseURL: s.api.addr, Requests: []loadgen.Request{solanaDiff},
			Payer: s.node.Payer(payer), Concurrency: 16, Duration: 6 * time.Second, Retry: true, RetryFor: 150 * time.Second,
		})
		done <- result{rep, err}
	}()
	// moved is how many payments moved the payer's USDC on the node;
	// settled how many settlements reached their commitment in the ledger.
	moved := func() int {
		payerNow, _ := s.balances(ctx, t, payer.PublicKey())
		return int((payerBefore - payerNow) / solanaDiffPrice)
	}
	settled := func() int {
		var n int
		require.NoError(t, s.db.Pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE type = $1", store.EventSettlementConfirmed).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return moved() >= 10 }, 60*time.Second, 50*time.Millisecond, "no settlement under way")

	// No block for 5 s: the settlements sent meanwhile are processed (the
	// payer's USDC has moved) and none reaches its commitment. Which have
	// reached it is asked of the node, once the pause has begun, for every
	// transaction the ledger names before sending it: the ledger's own
	// settlement.confirmed may lag.
	s.node.Pause(ctx, 5*time.Second)
	want := svm.Commitment(commitment)
	if want == "" {
		want = svm.CommitmentConfirmed
	}
	var atCommitment int
	sent := map[string]bool{}
	for _, txs := range transactionsByCall(ctx, t, s.db, store.EventJobSucceeded, store.EventSettlementSubmitted) {
		for _, tx := range txs {
			if tx == "" || sent[tx] {
				continue
			}
			sent[tx] = true
			if status, failed := s.node.SignatureStatus(ctx, tx); failed == "" && (status == string(svm.CommitmentFinalized) || status == string(want)) {
				atCommitment++
			}
		}
	}
	var waiting int
	require.Eventually(t, func() bool {
		waiting = moved() - atCommitment
		return waiting >= 3
	}, 3*time.Second, 50*time.Millisecond, "no settlements waiting for their commitment")
	for i, w := range workers {
		w.kill()
		workers[i] = startChild(t, "worker", s.env)
	}
	t.Logf("both workers killed with %d settlements sent and not at their commitment (%d at it on the node, %d in the ledger)", waiting, atCommitment, settled())

	r := <-done
	require.NoError(t, r.err)
	t.Log(r.rep)
	s.checkPaidOnce(ctx, t, r.rep, payer.PublicKey(), payerBefore, payToBefore)
}

// transactionsByCall returns, for each call, the transaction its events of
// types name (job.succeeded and settlement.submitted: the one named before
// sending, "" for none; settlement.confirmed: its response's), in order,
// each event decoded as the store reads it (Event.Decode), in whichever
// form it was written.
func transactionsByCall(ctx context.Context, t *testing.T, db *dbtest.DB, types ...string) map[string][]string {
	t.Helper()
	rows, err := db.Pool.Query(ctx, "SELECT stream, type, data, bin FROM events WHERE type = ANY($1) ORDER BY id", types)
	require.NoError(t, err)
	defer rows.Close()
	byCall := map[string][]string{}
	for rows.Next() {
		var e store.Event
		require.NoError(t, rows.Scan(&e.Stream, &e.Type, &e.Data, &e.Bin))
		var tx string
		switch e.Type {
		case store.EventJobSucceeded:
			var v store.JobSucceeded
			require.NoError(t, e.Decode(&v))
			tx = v.Transaction
		case store.EventSettlementSubmitted:
			var v store.SettlementSubmitted
			require.NoError(t, e.Decode(&v))
			tx = v.Transaction
		case store.EventSettlementConfirmed:
			var v store.SettlementDone
			require.NoError(t, e.Decode(&v))
			tx = v.Response.Transaction
		default:
			t.Fatalf("no transaction in %s", e.Type)
		}
		byCall[store.CallOfStream(e.Stream)] = append(byCall[store.CallOfStream(e.Stream)], tx)
	}
	require.NoError(t, rows.Err())
	return byCall
}

// checkSolanaLedger waits for every call on db to reach a final state and
// checks the ledger against the node: each paid call has one
// settlement.confirmed naming its own transaction, which succeeded on the
// node at confirmed or finalized, and which its job.succeeded and every
// settlement.submitted recorded before sending; no other call has one; and
// the paid calls' amounts add up to what payTo's USDC account received
// since it held payToBefore. It returns the transaction of each paid call.
func checkSolanaLedger(ctx context.Context, t *testing.T, db *dbtest.DB, node *svmtest.Node, payTo solana.PublicKey, payToBefore uint64) map[string]string {
	t.Helper()
	awaitCallsFinal(ctx, t, db)

	// call id -> transactions of its settlement.confirmed
	confirmed := transactionsByCall(ctx, t, db, store.EventSettlementConfirmed)
	// call id -> transactions its attempts recorded before sending
	recorded := transactionsByCall(ctx, t, db, store.EventJobSucceeded, store.EventSettlementSubmitted)

	rows, err := db.Pool.Query(ctx, "SELECT id, state, amount FROM calls")
	require.NoError(t, err)
	defer rows.Close() // a failed check must not keep the pool's connection
	var paid uint64
	seen := map[string]string{} // transaction -> call id
	for rows.Next() {
		var id, state, amount string
		require.NoError(t, rows.Scan(&id, &state, &amount))
		if state != store.CallPaid {
			require.Empty(t, confirmed[id], "call %s is %s but has a settlement.confirmed", id, state)
			continue
		}
		require.Len(t, confirmed[id], 1, "paid call %s settled %d times", id, len(confirmed[id]))
		tx := confirmed[id][0]
		require.NotContains(t, seen, tx, "transaction %s settles calls %s and %s", tx, seen[tx], id)
		seen[tx] = id
		require.NotEmpty(t, recorded[id], "paid call %s recorded no settlement attempt", id)
		for _, r := range recorded[id] {
			require.Equal(t, tx, r, "the transaction paid call %s recorded before sending", id)
		}
		status, txErr := node.SignatureStatus(ctx, tx)
		require.Contains(t, []string{"confirmed", "finalized"}, status, "transaction %s of paid call %s", tx, id)
		require.Empty(t, txErr, "transaction %s of paid call %s", tx, id)
		n, err := strconv.ParseUint(amount, 10, 64)
		require.NoError(t, err, id)
		paid += n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, paid, node.TokenBalance(ctx, svmtest.ATA(t, payTo, svmtest.USDC))-payToBefore,
		"the paid calls' amounts and what the receiver got differ")
	paidBy := make(map[string]string, len(seen))
	for tx, id := range seen {
		paidBy[id] = tx
	}
	return paidBy
}
