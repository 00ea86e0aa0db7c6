package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/params"
	"github.com/gagliardetto/solana-go"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/model/modeltest"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/evmtest"
	"github.com/x402d/x402d/x402/payclient"
)

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// devAddress is development account i's address.
func devAddress(t *testing.T, i uint32) common.Address {
	key, err := devchain.DeriveKey(devchain.Mnemonic, i)
	require.NoError(t, err)
	return crypto.PubkeyToAddress(key.PublicKey)
}

// devPayer is the payment client (x402d pay's) of development account i,
// paying on Base.
func devPayer(t testing.TB, i uint32) *payclient.Client {
	t.Helper()
	key, err := devchain.DeriveKey(devchain.Mnemonic, i)
	require.NoError(t, err)
	payer, err := payclient.New(&payclient.Config{Key: key, Network: "eip155:8453"})
	require.NoError(t, err)
	return payer
}

// transact sends data to to (nil: a contract creation) from key on the
// chain of client and returns its receipt once mined, failing t if it
// reverted: for tests that move the devchain of a service, or anvil.
func transact(ctx context.Context, t *testing.T, client *ethclient.Client, key *ecdsa.PrivateKey, to *common.Address, data []byte) *types.Receipt {
	t.Helper()
	from := crypto.PubkeyToAddress(key.PublicKey)
	chainID, err := client.ChainID(ctx)
	require.NoError(t, err)
	gas, err := client.EstimateGas(ctx, ethereum.CallMsg{From: from, To: to, Data: data})
	require.NoError(t, err)
	head, err := client.HeaderByNumber(ctx, nil)
	require.NoError(t, err)
	nonce, err := client.PendingNonceAt(ctx, from)
	require.NoError(t, err)
	tip := big.NewInt(params.GWei)
	tx, err := types.SignNewTx(key, types.LatestSignerForChainID(chainID), &types.DynamicFeeTx{
		ChainID: chainID, Nonce: nonce, GasTipCap: tip, GasFeeCap: new(big.Int).Add(tip, new(big.Int).Mul(head.BaseFee, big.NewInt(2))),
		Gas: gas + gas/5, To: to, Data: data,
	})
	require.NoError(t, err)
	require.NoError(t, client.SendTransaction(ctx, tx))
	var r *types.Receipt
	require.Eventually(t, func() bool {
		r, err = client.TransactionReceipt(ctx, tx.Hash())
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "transaction %s not mined", tx.Hash())
	require.Equal(t, types.ReceiptStatusSuccessful, r.Status, "transaction %s reverted", tx.Hash())
	return r
}

// fundedWallet deploys a contract wallet (its creation code with the
// constructor's arguments) from development account funder on the chain
// of client and sends it usdc atomic units of USDC.
func fundedWallet(ctx context.Context, t *testing.T, client *ethclient.Client, funder uint32, code []byte, usdc int64) common.Address {
	t.Helper()
	key, err := devchain.DeriveKey(devchain.Mnemonic, funder)
	require.NoError(t, err)
	wallet := transact(ctx, t, client, key, nil, code).ContractAddress
	token, err := contracts.Load(contracts.FiatTokenV2_2)
	require.NoError(t, err)
	fund, err := token.ABI.Pack("transfer", wallet, big.NewInt(usdc))
	require.NoError(t, err)
	transact(ctx, t, client, key, &devchain.USDC, fund)
	return wallet
}

// usdcBalance reads balanceOf(who) of the devchain's USDC over JSON-RPC.
func usdcBalance(ctx context.Context, t *testing.T, c *ethclient.Client, who common.Address) *big.Int {
	data := append(common.FromHex("0x70a08231"), common.LeftPadBytes(who.Bytes(), 32)...)
	out, err := c.CallContract(ctx, ethereum.CallMsg{To: &devchain.USDC, Data: data}, nil)
	require.NoError(t, err)
	return new(big.Int).SetBytes(out)
}

// startDevchainService runs `x402d serve` with the real payment step on an
// embedded devchain, the fake Gemini server and loopback fetches allowed.
func startDevchainService(ctx context.Context, t *testing.T) (base string, chain *ethclient.Client) {
	base, chain, _ = startDevchainServiceDB(ctx, t)
	return base, chain
}

// startDevchainServiceDB is startDevchainService that also returns the
// service's database.
func startDevchainServiceDB(ctx context.Context, t testing.TB) (base string, chain *ethclient.Client, db *dbtest.DB) {
	db = dbtest.Schema(ctx, t)
	base, chain = startDevchainServiceIn(ctx, t, db)
	return base, chain, db
}

// startDevchainServiceIn is startDevchainService on the database db.
func startDevchainServiceIn(ctx context.Context, t testing.TB, db *dbtest.DB) (base string, chain *ethclient.Client) {
	fake := modeltest.NewServer(t)
	rpc := freeAddr(t)
	env := map[string]string{
		"DATABASE_URL": db.URL, "DB_MAX_CONNS": testMaxConns, "LISTEN_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn",
		"DEVCHAIN_RPC_ADDR": rpc, "GEMINI_API_KEY": modeltest.APIKey, "GEMINI_BASE_URL": fake.URL,
		"FETCH_ALLOW_CIDRS": "127.0.0.1/32",
	}
	base = startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})
	chain, err := ethclient.DialContext(ctx, "http://"+rpc)
	require.NoError(t, err)
	t.Cleanup(chain.Close)
	return base, chain
}

// sellableCalls is one valid request per sellable operation.
func sellableCalls(page string) []map[string]string {
	return []map[string]string{
		{"op": "brief", "body": `{"question":"What is the x402 protocol?"}`},
		{"op": "data-clean", "body": `{"data":"a,b\n1, x\n1, x\n"}`},
		{"op": "code-review", "body": `{"code":"eval(input())\n","language":"python"}`},
		{"op": "url-meta", "body": `{"url":"` + page + `"}`},
		{"op": "csv-json", "body": `{"data":"a;b\n1;2\n","to":"json"}`},
		{"op": "regex", "body": `{"pattern":"\\d+","text":"a1b22","flags":"g"}`},
		{"op": "diff", "body": `{"a":"x\n","b":"y\n"}`},
	}
}

// TestOfficialClientPaysEveryOperation has the official x402 packages from
// npm (@x402/fetch, @x402/evm, viem) pay each sellable operation of a running
// service on the devchain; @x402/core decodes and validates every quote; the
// payer's balance moves by exactly the prices, the receiver's by the same.
func TestOfficialClientPaysEveryOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	compat := compatDir(t, "@x402/fetch")

	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><head><title>Page</title></head><body>x</body></html>")
	}))
	defer page.Close()
	base, chain := startDevchainService(ctx, t)
	const account = 3
	payer, payTo := devAddress(t, account), devAddress(t, devchain.PayToAccount)
	payerBefore, payToBefore := usdcBalance(ctx, t, chain, payer), usdcBalance(ctx, t, chain, payTo)

	out := payWithOfficialClient(ctx, t, compat, base, account, sellableCalls(page.URL+"/"))
	require.Equal(t, payer.Hex(), out.Address)
	require.Len(t, out.Calls, 7)
	total := new(big.Int)
	for _, c := range out.Calls {
		require.Equal(t, http.StatusPaymentRequired, c.QuoteStatus, c.Op)
		require.True(t, c.QuoteValid, "%s: @x402/core refuses our quote: %s", c.Op, c.QuoteError)
		require.True(t, c.HasBazaar, c.Op)
		require.Equal(t, http.StatusOK, c.Status, "%s: %s", c.Op, c.Body)
		require.NotNil(t, c.Settlement, c.Op)
		require.True(t, c.Settlement.Success, c.Op)
		require.Equal(t, payer.Hex(), c.Settlement.Payer, c.Op)
		require.Equal(t, "eip155:8453", c.Settlement.Network, c.Op)
		amount, ok := new(big.Int).SetString(c.Amount, 10)
		require.True(t, ok, c.Op)
		total.Add(total, amount)
	}
	// brief 0.25 + data-clean 0.5 + code-review 0.75 + url-meta 0.03 +
	// csv-json 0.02 + regex 0.01 + diff 0.01 = 1.57 USDC.
	require.Equal(t, big.NewInt(1_570_000), total)
	require.Equal(t, total, new(big.Int).Sub(payerBefore, usdcBalance(ctx, t, chain, payer)))
	require.Equal(t, total, new(big.Int).Sub(usdcBalance(ctx, t, chain, payTo), payToBefore))
}

// compatDir returns compat/ once node and the npm packages pkgs are
// installed.
func compatDir(t *testing.T, pkgs ...string) string {
	t.Helper()
	_, err := exec.LookPath("node")
	require.NoError(t, err, "node (v20+) is needed for the compatibility test; run: go tool task npm")
	compat, err := filepath.Abs("../../compat")
	require.NoError(t, err)
	for _, pkg := range pkgs {
		_, err = os.Stat(filepath.Join(compat, "node_modules", pkg))
		require.NoError(t, err, "the npm package %s is missing; run: go tool task npm", pkg)
	}
	return compat
}

// officialPayments is what compat/pay_ops.mjs reports: the paying address
// and, per call, the quote as @x402/core read it (its option on the paying
// network) and the paid answer.
type officialPayments struct {
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

// payWithOfficialClient has the official x402 packages (compat/pay_ops.mjs)
// pay calls of the service at base with development account account.
func payWithOfficialClient(ctx context.Context, t *testing.T, compat, base string, account int, calls []map[string]string) officialPayments {
	t.Helper()
	return runPayOps(ctx, t, compat, nil, base, []string{strconv.Itoa(account)}, calls)
}

// runPayOps runs compat/pay_ops.mjs with the environment env added, its
// arguments the base URL, args (the payer's) and calls, and returns its
// report.
func runPayOps(ctx context.Context, t *testing.T, compat string, env []string, base string, args []string, calls []map[string]string) officialPayments {
	t.Helper()
	raw, err := json.Marshal(calls)
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, "node", append(append([]string{filepath.Join(compat, "pay_ops.mjs"), base}, args...), string(raw))...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node pay_ops.mjs: %s", stderr.String())
	var out officialPayments
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	return out
}

// TestGoClientPaysAndReplays pays with our own client (x402d pay's), then
// resends the settled header: the same request gets the stored result, a
// different request is refused, and the chain moved the money once.
func TestGoClientPaysAndReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, chain := startDevchainService(ctx, t)
	client := devPayer(t, 4)
	payer := client.Address()
	before := usdcBalance(ctx, t, chain, payer)

	req := &payclient.Request{Method: http.MethodPost, URL: base + "/api/x402/diff", Body: []byte(`{"a":"1\n","b":"2\n"}`)}
	res, err := client.Do(ctx, req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.NotNil(t, res.Settlement)
	require.True(t, res.Settlement.Success)

	again, err := client.Resend(ctx, req, res.PaymentSignature)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, again.Status, string(again.Body))
	require.JSONEq(t, string(res.Body), string(again.Body))

	other := &payclient.Request{Method: http.MethodPost, URL: base + "/api/x402/diff", Body: []byte(`{"a":"3\n","b":"4\n"}`)}
	refused, err := client.Resend(ctx, other, res.PaymentSignature)
	require.NoError(t, err)
	require.Equal(t, http.StatusPaymentRequired, refused.Status)
	require.Contains(t, string(refused.Body), "payment_already_used")

	require.Equal(t, big.NewInt(10_000), new(big.Int).Sub(before, usdcBalance(ctx, t, chain, payer)))

	// Invalid body: 400, nothing verified or charged.
	bad, err := client.Do(ctx, &payclient.Request{Method: http.MethodPost, URL: base + "/api/x402/diff", Body: []byte(`{"a":1}`)})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, bad.Status, string(bad.Body))
	require.Equal(t, big.NewInt(10_000), new(big.Int).Sub(before, usdcBalance(ctx, t, chain, payer)))
}

// TestDiscoveryDocuments checks /.well-known/x402.json, the Bazaar list and
// the OpenAPI document (validated by kin-openapi) of a running service.
func TestDiscoveryDocuments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, _ := startDevchainService(ctx, t)
	get := func(path string) (int, []byte) {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, body
	}

	status, body := get("/.well-known/x402.json")
	require.Equal(t, http.StatusOK, status)
	var wk struct {
		X402Version int               `json:"x402Version"`
		Facilitator *string           `json:"facilitator"`
		Networks    []string          `json:"networks"`
		Resources   []json.RawMessage `json:"resources"`
	}
	require.NoError(t, json.Unmarshal(body, &wk))
	require.Equal(t, 2, wk.X402Version)
	require.Nil(t, wk.Facilitator)
	require.Equal(t, []string{"eip155:8453", "eip155:42161", "eip155:137", "eip155:43114", "eip155:1329", "eip155:196",
		"solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"}, wk.Networks)
	require.Len(t, wk.Resources, 7)
	require.Contains(t, string(body), `"facilitator":null`)

	type list struct {
		X402Version int `json:"x402Version"`
		Items       []struct {
			Resource string              `json:"resource"`
			Type     string              `json:"type"`
			Accepts  []x402.Requirements `json:"accepts"`
		} `json:"items"`
		Pagination struct{ Limit, Offset, Total int } `json:"pagination"`
	}
	status, body = get("/api/x402/discovery/resources?type=http&limit=5&offset=0")
	require.Equal(t, http.StatusOK, status)
	var page list
	require.NoError(t, json.Unmarshal(body, &page))
	require.Equal(t, 2, page.X402Version)
	require.Len(t, page.Items, 5)
	require.Equal(t, 7, page.Pagination.Total)
	require.Equal(t, "http", page.Items[0].Type)
	require.Equal(t, "eip155:8453", page.Items[0].Accepts[0].Network)
	status, body = get("/api/x402/discovery/resources?limit=5&offset=5")
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, json.Unmarshal(body, &page))
	require.Len(t, page.Items, 2)
	for _, bad := range []string{"limit=0", "limit=101", "limit=x", "offset=-1"} {
		status, body = get("/api/x402/discovery/resources?" + bad)
		require.Equal(t, http.StatusBadRequest, status, bad)
		require.Contains(t, string(body), `"error":"invalid_request"`, bad)
	}

	status, body = get("/openapi.json")
	require.Equal(t, http.StatusOK, status)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(body)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(ctx))
	require.Equal(t, "3.1.0", doc.OpenAPI)
	require.Equal(t, "2.0.0", doc.Info.Version)
	for _, p := range []string{"/api/x402/diff", "/api/x402/brief", "/api/x402/calls/{id}", "/api/x402/discovery/resources",
		"/.well-known/x402.json", "/api/xindex/summary", "/api/xindex/hosts", "/x402-index", "/healthz", "/readyz"} {
		require.NotNil(t, doc.Paths.Value(p), p)
	}
	diff := doc.Paths.Value("/api/x402/diff").Post.Responses.Value("200").Value.Content["application/json"].Schema.Value
	require.Contains(t, diff.Properties, "unified")
	require.Contains(t, diff.Properties, "call_id")
}

// TestRPCSettlement runs the service in rpc mode against a chain reached over
// JSON-RPC (a devchain standing in for Base): with no receiving address every
// paid operation answers 503 with no quote; with one, a payment settles.
func TestRPCSettlement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	chain, err := devchain.New(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = chain.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = chain.Serve(ctx, ln) }()
	relayer, err := devchain.DeriveKey(devchain.Mnemonic, devchain.RelayerAccount)
	require.NoError(t, err)

	start := func(payTo, batch string) string {
		db := dbtest.Schema(ctx, t)
		env := map[string]string{
			"DATABASE_URL": db.URL, "DB_MAX_CONNS": testMaxConns, "LISTEN_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn",
			"SETTLEMENT": "rpc", "RPC_URL_EIP155_8453": "http://" + ln.Addr().String(),
			"RELAYER_KEY": common.Bytes2Hex(crypto.FromECDSA(relayer)), "PAY_TO_EVM": payTo, "SETTLEMENT_BATCH": batch,
		}
		return startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})
	}

	unsold := start("", "")
	for _, op := range []string{"diff", "regex"} {
		resp, err := http.Post(unsold+"/api/x402/"+op, "application/json", nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, op)
		require.Empty(t, resp.Header.Get("PAYMENT-REQUIRED"), op)
	}

	// A transaction per payment by default; through Multicall3 with
	// SETTLEMENT_BATCH=on.
	payTo := devAddress(t, 7)
	client := devPayer(t, 5)
	for _, tt := range []struct {
		batch string
		to    common.Address
	}{{"", devchain.USDC}, {"on", evm.Multicall3}} {
		base := start(payTo.Hex(), tt.batch)
		before, err := chain.BalanceOf(ctx, payTo)
		require.NoError(t, err)
		res, err := client.Do(ctx, &payclient.Request{Method: http.MethodPost, URL: base + "/api/x402/diff", Body: []byte(`{"a":"1\n","b":"2\n"}`)})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.Status, string(res.Body))
		require.True(t, res.Settlement.Success)
		after, err := chain.BalanceOf(ctx, payTo)
		require.NoError(t, err)
		require.Equal(t, big.NewInt(10_000), new(big.Int).Sub(after, before))
		tx, _, err := chain.Client().TransactionByHash(ctx, common.HexToHash(res.Settlement.Transaction))
		require.NoError(t, err)
		require.Equal(t, tt.to, *tx.To(), "SETTLEMENT_BATCH=%q", tt.batch)
	}
}

// TestFacilitatorSettlement runs the service in facilitator mode against a
// facilitator on loopback that settles on a devchain standing in for Base,
// with RPC_URL_EIP155_8453 pointing at that chain. A payment settles through
// the facilitator; when the facilitator's answer to /settle is lost after it
// settled, the retry is refused as nonce_already_used, and the service finds
// its settlement on chain: the caller gets the result, charged once.
func TestFacilitatorSettlement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stack := evmtest.New(t)
	fac := stack.Facilitator(t, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = stack.Chain.Serve(ctx, ln) }()
	db := dbtest.Schema(ctx, t)
	payTo := devAddress(t, 7)
	env := map[string]string{
		"DATABASE_URL": db.URL, "DB_MAX_CONNS": testMaxConns, "LISTEN_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn",
		"SETTLEMENT": "facilitator", "FACILITATOR_URL": fac.URL, "RPC_URL_EIP155_8453": "http://" + ln.Addr().String(),
		"PAY_TO_EVM": payTo.Hex(),
	}
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})
	client := devPayer(t, 6)
	payer := client.Address()
	before := usdcBalance(ctx, t, stack.Chain.Client(), payer)

	for i, lost := range []int32{0, 1} {
		fac.LoseSettleAnswers.Store(lost)
		body := fmt.Sprintf(`{"a":"%d\n","b":"x\n"}`, i)
		res, err := client.Do(ctx, &payclient.Request{Method: http.MethodPost, URL: base + "/api/x402/diff", Body: []byte(body)})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.Status, "lost answers %d: %s", lost, res.Body)
		require.True(t, res.Settlement.Success)
		receipt, err := stack.Chain.Client().TransactionReceipt(ctx, common.HexToHash(res.Settlement.Transaction))
		require.NoError(t, err)
		require.Equal(t, uint64(1), receipt.Status)
		require.Zero(t, fac.LoseSettleAnswers.Load(), "the facilitator's answer was lost")
	}
	require.Equal(t, big.NewInt(20_000), new(big.Int).Sub(before, usdcBalance(ctx, t, stack.Chain.Client(), payer)), "two calls, each charged once")
}

// TestSolanaOffered checks that the Solana option is quoted exactly when its
// three settings are present, with the fee payer in extra.
func TestSolanaOffered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	feePayer := solana.PrivateKey(priv)
	quote := func(extra map[string]string) x402.PaymentRequired {
		db := dbtest.Schema(ctx, t)
		env := map[string]string{"DATABASE_URL": db.URL, "DB_MAX_CONNS": testMaxConns, "LISTEN_ADDR": "127.0.0.1:0",
			"LOG_LEVEL": "warn", "DEVCHAIN_RPC_ADDR": freeAddr(t)}
		for k, v := range extra {
			env[k] = v
		}
		base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})
		resp, err := http.Post(base+"/api/x402/regex", "application/json", nil)
		require.NoError(t, err)
		resp.Body.Close()
		var pr x402.PaymentRequired
		require.NoError(t, x402.DecodeHeader(resp.Header.Get("PAYMENT-REQUIRED"), &pr))
		return pr
	}
	solanaEnv := map[string]string{"SOLANA_FEE_PAYER_KEY": feePayer.String(), "RPC_URL_SOLANA": "http://127.0.0.1:1",
		"PAY_TO_SOLANA": "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"}
	pr := quote(solanaEnv)
	require.Len(t, pr.Accepts, 3, "exact on Base and Solana, then batch-settlement on Base")
	require.Equal(t, x402.SchemeBatchSettlement, pr.Accepts[2].Scheme)
	sol := pr.Accepts[1]
	require.Equal(t, x402.SolanaMainnet, sol.Network)
	require.Equal(t, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", sol.Asset)
	require.Equal(t, "10000", sol.Amount)
	require.Equal(t, solanaEnv["PAY_TO_SOLANA"], sol.PayTo)
	require.JSONEq(t, `{"feePayer":"`+feePayer.PublicKey().String()+`"}`, string(sol.Extra))

	delete(solanaEnv, "RPC_URL_SOLANA")
	require.Len(t, quote(solanaEnv).Accepts, 2, "no Solana option it cannot settle")
}

// TestPaidMissingFieldIsNotCharged pays, with real signed payments on the
// devchain, one call of each operation without one of its required
// fields: each is 400 invalid_request naming the field, nothing is
// recorded, and the payer's balance does not move.
func TestPaidMissingFieldIsNotCharged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, chain, db := startDevchainServiceDB(ctx, t)
	client := devPayer(t, 5)
	before := usdcBalance(ctx, t, chain, client.Address())
	for _, tc := range []struct{ op, body, field string }{
		{"regex", `{"text":"a1b22","flags":"g"}`, "pattern"},
		{"diff", `{"a":"x\n"}`, "b"},
		{"csv-json", `{"to":"json"}`, "data"},
		{"url-meta", `{}`, "url"},
		{"brief", `{}`, "question"},
		{"data-clean", `{}`, "data"},
		{"code-review", `{"code":"eval(input())\n"}`, "language"},
	} {
		res, err := client.Do(ctx, &payclient.Request{Method: http.MethodPost, URL: base + "/api/x402/" + tc.op, Body: []byte(tc.body)})
		require.NoError(t, err, tc.op)
		require.Equal(t, http.StatusBadRequest, res.Status, "%s: %s", tc.op, res.Body)
		require.NotEmpty(t, res.PaymentSignature, "%s: the request carried a signed payment", tc.op)
		e := decodeJSON[errorBody](t, res.Body)
		require.Equal(t, "invalid_request", e.Error, tc.op)
		require.Equal(t, tc.field, e.Field, tc.op)
		require.Nil(t, res.Settlement, tc.op)
	}
	require.Zero(t, countCalls(ctx, t, db), "nothing recorded, nothing queued")
	require.Equal(t, before, usdcBalance(ctx, t, chain, client.Address()), "nothing charged")
}
