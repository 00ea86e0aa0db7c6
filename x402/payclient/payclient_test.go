package payclient_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/evmtest"
	"github.com/x402d/x402d/x402/payclient"
)

// seller is a paid endpoint that verifies and settles itself on a devchain
// with the evm package, the way the service does (verify, run, settle,
// answer with PAYMENT-RESPONSE).
type seller struct {
	accepts  []x402.Requirements
	verifier *evm.Verifier
	relayer  *evm.Relayer
}

func (s *seller) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	required := func(reason string) {
		pr := x402.PaymentRequired{X402Version: 2, Error: reason, Accepts: s.accepts,
			Resource: x402.ResourceInfo{URL: "http://" + r.Host + r.URL.Path, MimeType: "application/json"}}
		raw, _ := json.Marshal(pr)
		w.Header().Set(x402.HeaderPaymentRequired, base64.StdEncoding.EncodeToString(raw))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = w.Write(raw)
	}
	header := r.Header.Get(x402.HeaderPaymentSignature)
	if header == "" {
		required("payment required")
		return
	}
	raw, err := base64.StdEncoding.DecodeString(header)
	var payload x402.PaymentPayload
	if err == nil {
		err = json.Unmarshal(raw, &payload)
	}
	if err != nil {
		http.Error(w, `{"error":"invalid_payment"}`, http.StatusBadRequest)
		return
	}
	var req *x402.Requirements
	for i, a := range s.accepts {
		if a.Scheme == payload.Accepted.Scheme && a.Network == payload.Accepted.Network && a.Amount == payload.Accepted.Amount &&
			a.Asset == payload.Accepted.Asset && a.PayTo == payload.Accepted.PayTo {
			req = &s.accepts[i]
		}
	}
	if req == nil {
		required("No matching payment requirements")
		return
	}
	p, err := s.verifier.Verify(r.Context(), req, &payload)
	var refusal *x402.Refusal
	if errors.As(err, &refusal) {
		required(refusal.Reason)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	resp, err := s.relayer.Settle(r.Context(), p)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	settled, _ := json.Marshal(resp)
	w.Header().Set(x402.HeaderPaymentResponse, base64.StdEncoding.EncodeToString(settled))
	if !resp.Success {
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = w.Write([]byte(`{}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"echo":` + string(body) + `}`))
}

func TestClient_PaysEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stack := evmtest.New(t)
	chain, verifier, relayer := stack.Chain, stack.Verifier, stack.Relayer
	payTo := chain.Account(devchain.PayToAccount).Address
	base := x402.Requirements{
		Scheme: "exact", Network: "eip155:8453", Amount: "12345", Asset: devchain.USDC.Hex(),
		PayTo: payTo.Hex(), MaxTimeoutSeconds: 120, Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`),
	}
	sepolia := base
	sepolia.Network, sepolia.Asset, sepolia.Amount = "eip155:84532", "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "99"
	sepolia.Extra = json.RawMessage(`{"name":"USDC","version":"2"}`)
	solana := x402.Requirements{Scheme: "exact", Network: "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", Amount: "12345",
		Asset: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", PayTo: "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4",
		MaxTimeoutSeconds: 60, Extra: json.RawMessage(`{"feePayer":"2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"}`)}
	srv := httptest.NewServer(&seller{accepts: []x402.Requirements{solana, sepolia, base}, verifier: verifier, relayer: relayer})
	t.Cleanup(srv.Close)

	payer := chain.Account(4)
	client, err := payclient.New(&payclient.Config{Key: payer.Key})
	require.NoError(t, err)
	balance := func(addr common.Address) *big.Int {
		b, err := chain.BalanceOf(ctx, addr)
		require.NoError(t, err)
		return b
	}
	payerBefore, payToBefore := balance(payer.Address), balance(payTo)

	req := &payclient.Request{URL: srv.URL + "/api/x402/echo", Body: []byte(`{"text":"hi"}`)}
	res, err := client.Do(ctx, req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.JSONEq(t, `{"echo":{"text":"hi"}}`, string(res.Body))
	require.Len(t, res.Required.Accepts, 3)
	require.Equal(t, "eip155:8453", res.Accepted.Network, "the requirement of the client's chain")
	require.NotNil(t, res.Settlement)
	require.True(t, res.Settlement.Success)
	require.Equal(t, payer.Address.Hex(), res.Settlement.Payer)
	require.Equal(t, "eip155:8453", res.Settlement.Network)

	// Exactly the price moved, from the payer to the seller; the relayer
	// paid the gas.
	require.Equal(t, big.NewInt(12345), new(big.Int).Sub(payerBefore, balance(payer.Address)))
	require.Equal(t, big.NewInt(12345), new(big.Int).Sub(balance(payTo), payToBefore))
	receipt, err := chain.Client().TransactionReceipt(ctx, common.HexToHash(res.Settlement.Transaction))
	require.NoError(t, err)
	require.Equal(t, uint64(1), receipt.Status)

	// What was signed: the requirement verbatim, a window from 10 minutes
	// ago to maxTimeoutSeconds ahead.
	raw, err := base64.StdEncoding.DecodeString(res.PaymentSignature)
	require.NoError(t, err)
	var sent x402.PaymentPayload
	require.NoError(t, json.Unmarshal(raw, &sent))
	require.Equal(t, base, sent.Accepted)
	require.Equal(t, srv.URL+"/api/x402/echo", sent.Resource.URL)
	var inner x402.ExactEVMPayload
	require.NoError(t, json.Unmarshal(sent.Payload, &inner))
	after, _ := new(big.Int).SetString(inner.Authorization.ValidAfter, 10)
	before, _ := new(big.Int).SetString(inner.Authorization.ValidBefore, 10)
	require.Equal(t, int64(720), new(big.Int).Sub(before, after).Int64())

	// The same header again, after settlement: refused, nothing moves.
	payerAfter := balance(payer.Address)
	replay, err := client.Resend(ctx, req, res.PaymentSignature)
	require.NoError(t, err)
	require.Equal(t, http.StatusPaymentRequired, replay.Status)
	require.Equal(t, evm.ReasonNonceAlreadyUsed, replay.Refusal)
	require.Equal(t, payerAfter, balance(payer.Address))

	// A client on a chain the seller does not offer cannot pay.
	other, err := payclient.New(&payclient.Config{Key: payer.Key, Network: "eip155:137"})
	require.NoError(t, err)
	_, err = other.Do(ctx, req)
	require.ErrorContains(t, err, "no exact payment on eip155:137")

	// A payer without funds is refused with the reason.
	poor, err := crypto.GenerateKey()
	require.NoError(t, err)
	broke, err := payclient.New(&payclient.Config{Key: poor})
	require.NoError(t, err)
	res, err = broke.Do(ctx, req)
	require.NoError(t, err)
	require.Equal(t, http.StatusPaymentRequired, res.Status)
	require.Equal(t, evm.ReasonInsufficientBalance, res.Refusal)
}

func TestClient_FreeResource(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Empty(t, r.Header.Get(x402.HeaderPaymentSignature))
		_, _ = w.Write([]byte(`{"free":true}`))
	}))
	t.Cleanup(srv.Close)
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	client, err := payclient.New(&payclient.Config{Key: key})
	require.NoError(t, err)
	res, err := client.Do(context.Background(), &payclient.Request{Method: http.MethodGet, URL: srv.URL})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Status)
	require.Nil(t, res.Required)
	require.Nil(t, res.Settlement)
	require.JSONEq(t, `{"free":true}`, string(res.Body))
}

// TestClient_PayKeepsTheQuote pays quotes by their PAYMENT-REQUIRED header
// values, as the load generator does: the same quote again gets a payment
// of its own (a fresh nonce), and another quote is paid as it says, not as
// the one before.
func TestClient_PayKeepsTheQuote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	header := func(amount string) string {
		raw, err := json.Marshal(x402.PaymentRequired{X402Version: 2, Resource: x402.ResourceInfo{URL: "http://127.0.0.1/api/x402/diff"},
			Accepts: []x402.Requirements{{Scheme: "exact", Network: "eip155:8453", Amount: amount, Asset: devchain.USDC.Hex(),
				PayTo: devchain.USDC.Hex(), MaxTimeoutSeconds: 60, Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`)}}})
		require.NoError(t, err)
		return base64.StdEncoding.EncodeToString(raw)
	}
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	client, err := payclient.New(&payclient.Config{Key: key})
	require.NoError(t, err)
	pay := func(h string) (amount, value, nonce string) {
		t.Helper()
		sig, err := client.Pay(ctx, h)
		require.NoError(t, err)
		raw, err := base64.StdEncoding.DecodeString(sig)
		require.NoError(t, err)
		var sent x402.PaymentPayload
		require.NoError(t, json.Unmarshal(raw, &sent))
		var inner x402.ExactEVMPayload
		require.NoError(t, json.Unmarshal(sent.Payload, &inner))
		return sent.Accepted.Amount, inner.Authorization.Value, inner.Authorization.Nonce
	}
	cheap, dear := header("777"), header("12345")
	nonces := map[string]bool{}
	for _, tc := range []struct {
		header, amount string
	}{{dear, "12345"}, {dear, "12345"}, {cheap, "777"}, {cheap, "777"}, {dear, "12345"}} {
		amount, value, nonce := pay(tc.header)
		require.Equal(t, tc.amount, amount)
		require.Equal(t, tc.amount, value)
		require.False(t, nonces[nonce], "a nonce used twice")
		nonces[nonce] = true
	}
	_, err = client.Pay(ctx, "not base64!")
	require.ErrorContains(t, err, "not base64")

	// Concurrent payments of the kept quote share it (go test -race).
	sigs := make([]string, 8)
	var wg sync.WaitGroup
	for i := range sigs {
		wg.Go(func() { sigs[i], _ = client.Pay(ctx, dear) })
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, sig := range sigs {
		require.NotEmpty(t, sig)
		require.False(t, seen[sig])
		seen[sig] = true
	}
}

// BenchmarkPay pays one quote again and again, as the load generator does
// (go test -run '^$' -bench Pay ./x402/payclient).
func BenchmarkPay(b *testing.B) {
	raw, err := json.Marshal(x402.PaymentRequired{X402Version: 2, Resource: x402.ResourceInfo{URL: "http://127.0.0.1/api/x402/diff"},
		Accepts: []x402.Requirements{{Scheme: "exact", Network: "eip155:8453", Amount: "10000", Asset: devchain.USDC.Hex(),
			PayTo: devchain.USDC.Hex(), MaxTimeoutSeconds: 60, Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`)}}})
	require.NoError(b, err)
	header := base64.StdEncoding.EncodeToString(raw)
	key, err := crypto.GenerateKey()
	require.NoError(b, err)
	client, err := payclient.New(&payclient.Config{Key: key})
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := client.Pay(context.Background(), header); err != nil {
			b.Fatal(err)
		}
	}
}
