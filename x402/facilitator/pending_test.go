package facilitator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/facilitator"
)

const pendingTx = "0x8f3a5e1c9b2d4f6a7e8c0b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a"

// scriptedFacilitator is a facilitator on loopback whose /settle answers,
// in the wire format of the official ones, the bodies of answers in turn
// (the last one again once they are used up), each with status 200.
type scriptedFacilitator struct {
	mu      sync.Mutex
	answers []string
	asked   int
}

func (f *scriptedFacilitator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		X402Version    int             `json:"x402Version"`
		PaymentPayload json.RawMessage `json:"paymentPayload"`
	}
	if r.URL.Path != "/settle" || json.NewDecoder(r.Body).Decode(&body) != nil || body.X402Version != 2 || len(body.PaymentPayload) == 0 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	answer := f.answers[min(f.asked, len(f.answers)-1)]
	f.asked++
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, answer)
}

func pendingPayment(t *testing.T) *x402.Payment {
	t.Helper()
	raw, err := json.Marshal(&x402.PaymentPayload{X402Version: 2, Accepted: x402.Requirements{Scheme: "exact", Network: "eip155:8453"},
		Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	return &x402.Payment{Network: "eip155:8453", Payer: "0x00000000000000000000000000000000000000aa", Nonce: "0x01", Amount: "10000",
		Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", Payload: raw}
}

// TestSettlePending has a facilitator answer settlement_pending (x402's
// non-terminal settle answer, success false with the transaction
// broadcast) and then, asked again, each way it may end: the settlement is
// followed, never taken for a refusal, and ends settled in the pending
// transaction, refused, or, still pending past PendingWait, an error that
// names the transaction (tried again later).
func TestSettlePending(t *testing.T) {
	t.Parallel()
	const pending = `{"success":false,"errorReason":"settlement_pending","transaction":"` + pendingTx + `","network":"eip155:8453","payer":"0x00000000000000000000000000000000000000aa"}`
	tests := []struct {
		name    string
		answers []string
		// success and reason are the answer; pendingErr an error instead.
		success    bool
		reason     string
		pendingErr bool
	}{
		{name: "ThenSettled", answers: []string{pending, pending,
			`{"success":true,"transaction":"` + pendingTx + `","network":"eip155:8453","payer":"0x00000000000000000000000000000000000000aa"}`},
			success: true},
		{name: "ThenAlreadyUsed", answers: []string{pending,
			`{"success":false,"errorReason":"invalid_exact_evm_nonce_already_used","transaction":"","network":"eip155:8453"}`},
			success: true},
		{name: "ThenRefused", answers: []string{pending,
			`{"success":false,"errorReason":"invalid_exact_evm_insufficient_balance","transaction":"","network":"eip155:8453"}`},
			reason: evm.ReasonInsufficientBalance},
		{name: "StillPending", answers: []string{pending}, pendingErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &scriptedFacilitator{answers: tt.answers}
			srv := httptest.NewServer(f)
			t.Cleanup(srv.Close)
			c, err := facilitator.New(&facilitator.Config{URL: srv.URL, PendingPoll: 5 * time.Millisecond, PendingWait: 500 * time.Millisecond})
			require.NoError(t, err)
			resp, err := c.Settle(context.Background(), pendingPayment(t))
			if tt.pendingErr {
				var pe *x402.PendingError
				require.ErrorAs(t, err, &pe)
				require.Equal(t, pendingTx, pe.Transaction)
				require.Nil(t, resp)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.success, resp.Success, resp.ErrorReason)
			require.Equal(t, tt.reason, resp.ErrorReason)
			if tt.success {
				require.Equal(t, pendingTx, resp.Transaction)
			}
		})
	}
}

// pendingProxy is a facilitator in front of a real one whose settle
// answers it turns into settlement_pending with the same transaction, as a
// facilitator that broadcast a transaction and did not wait for its
// receipt; it answers every later settle of the same payment pending too.
type pendingProxy struct {
	target string
	mu     sync.Mutex
	tx     string
}

func (p *pendingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	tx := p.tx
	p.mu.Unlock()
	if r.URL.Path == "/settle" && tx != "" {
		_ = json.NewEncoder(w).Encode(map[string]any{"success": false, "errorReason": "settlement_pending", "transaction": tx, "network": "eip155:8453"})
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.Path, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	var settled struct {
		Success     bool   `json:"success"`
		Transaction string `json:"transaction"`
	}
	if r.URL.Path == "/settle" && json.Unmarshal(answer, &settled) == nil && settled.Success {
		p.mu.Lock()
		p.tx = settled.Transaction
		p.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"success": false, "errorReason": "settlement_pending", "transaction": settled.Transaction, "network": "eip155:8453"})
		return
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// TestSettlePendingFollowedOnChain settles through a facilitator that
// answers settlement_pending for a transaction it sent: a client that
// reads the chain follows the transaction to its receipt and answers the
// payment settled in it, moved once.
func TestSettlePendingFollowedOnChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	proxy := &pendingProxy{target: b.facilitator.URL}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	c, err := facilitator.New(&facilitator.Config{URL: srv.URL, Header: http.Header{"Authorization": {token}}, PendingPoll: 20 * time.Millisecond,
		Chains: map[string]evm.LogReader{b.chain.Network(): b.chain.Client()}})
	require.NoError(t, err)

	req := b.requirement()
	payload := b.pay(t, 6, req)
	p, err := c.Verify(ctx, req, payload)
	require.NoError(t, err)
	before, err := b.chain.BalanceOf(ctx, b.chain.Account(6).Address)
	require.NoError(t, err)
	resp, err := c.Settle(ctx, p)
	require.NoError(t, err)
	require.True(t, resp.Success, resp.ErrorReason)
	proxy.mu.Lock()
	require.Equal(t, proxy.tx, resp.Transaction)
	proxy.mu.Unlock()
	receipt, err := b.chain.Client().TransactionReceipt(ctx, common.HexToHash(resp.Transaction))
	require.NoError(t, err)
	require.Equal(t, uint64(1), receipt.Status)
	after, err := b.chain.BalanceOf(ctx, b.chain.Account(6).Address)
	require.NoError(t, err)
	require.Equal(t, big.NewInt(10_000), new(big.Int).Sub(before, after), "moved once")
}

// TestSettlePendingThenRetried follows a settlement the facilitator keeps
// pending past PendingWait (an error, tried again later), then tries it
// again once the facilitator answers nonce_already_used, as it does once its
// transaction used the authorization: the client that saw the pending
// transaction answers the payment settled in it, even without a chain
// client to look it up.
func TestSettlePendingThenRetried(t *testing.T) {
	t.Parallel()
	const pending = `{"success":false,"errorReason":"settlement_pending","transaction":"` + pendingTx + `","network":"eip155:8453"}`
	f := &scriptedFacilitator{answers: []string{pending}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := facilitator.New(&facilitator.Config{URL: srv.URL, PendingPoll: 5 * time.Millisecond, PendingWait: 100 * time.Millisecond})
	require.NoError(t, err)
	p := pendingPayment(t)
	_, err = c.Settle(context.Background(), p)
	var pe *x402.PendingError
	require.ErrorAs(t, err, &pe)

	f.mu.Lock()
	f.answers, f.asked = []string{`{"success":false,"errorReason":"invalid_exact_evm_nonce_already_used","transaction":"","network":"eip155:8453"}`}, 0
	f.mu.Unlock()
	resp, err := c.Settle(context.Background(), p)
	require.NoError(t, err)
	require.True(t, resp.Success, resp.ErrorReason)
	require.Equal(t, pendingTx, resp.Transaction)
}
