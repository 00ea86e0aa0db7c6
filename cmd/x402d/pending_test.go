package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/x402/evm/evmtest"
	"github.com/x402d/x402d/x402/payclient"
)

// pendingFacilitator is a facilitator in front of a real one whose first
// settle answer for a payment, once the real one settled it, is
// settlement_pending with the transaction (x402's non-terminal answer), and
// whose later settle answers for it are success with that transaction, as a
// facilitator that had not seen the receipt yet and then did.
type pendingFacilitator struct {
	target string
	mu     sync.Mutex
	tx     map[string]string // by the request's payload signature
	asked  int
}

func (f *pendingFacilitator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req struct {
		PaymentPayload struct {
			Payload struct {
				Signature string `json:"signature"`
			} `json:"payload"`
		} `json:"paymentPayload"`
	}
	_ = json.Unmarshal(body, &req)
	key := req.PaymentPayload.Payload.Signature
	w.Header().Set("Content-Type", "application/json")
	if strings.HasSuffix(r.URL.Path, "/settle") {
		f.mu.Lock()
		f.asked++
		tx, pending := f.tx[key]
		f.mu.Unlock()
		if pending {
			_ = json.NewEncoder(w).Encode(map[string]any{"success": true, "transaction": tx, "network": "eip155:8453"})
			return
		}
	}
	fwd, err := http.NewRequestWithContext(r.Context(), r.Method, f.target+strings.TrimPrefix(r.URL.Path, "/facilitator"), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	fwd.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(fwd)
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
	if strings.HasSuffix(r.URL.Path, "/settle") && json.Unmarshal(answer, &settled) == nil && settled.Success {
		f.mu.Lock()
		f.tx[key] = settled.Transaction
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"success": false, "errorReason": "settlement_pending", "transaction": settled.Transaction, "network": "eip155:8453"})
		return
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// TestFacilitatorSettlementPending runs the service in facilitator mode,
// without RPC_URL_<CHAIN>, against a facilitator that answers a settlement
// settlement_pending and, asked again, success: the service follows the
// pending transaction rather than record a failed settlement, and the caller
// gets the result, charged once, with the transaction.
func TestFacilitatorSettlementPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stack := evmtest.New(t)
	real := stack.Facilitator(t, "")
	fac := &pendingFacilitator{target: real.URL, tx: map[string]string{}}
	srv := httptest.NewServer(fac)
	t.Cleanup(srv.Close)
	db := dbtest.Schema(ctx, t)
	env := map[string]string{
		"DATABASE_URL": db.URL, "DB_MAX_CONNS": testMaxConns, "LISTEN_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn",
		"SETTLEMENT": "facilitator", "FACILITATOR_URL": srv.URL + "/facilitator", "PAY_TO_EVM": devAddress(t, 7).Hex(),
	}
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})
	client := devPayer(t, 6)
	before := usdcBalance(ctx, t, stack.Chain.Client(), client.Address())
	res, err := client.Do(ctx, &payclient.Request{Method: http.MethodPost, URL: base + "/api/x402/diff", Body: []byte(`{"a":"p\n","b":"q\n"}`)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.True(t, res.Settlement.Success)
	fac.mu.Lock()
	require.Len(t, fac.tx, 1)
	for _, tx := range fac.tx {
		require.Equal(t, tx, res.Settlement.Transaction, "the pending transaction")
	}
	require.GreaterOrEqual(t, fac.asked, 2, "asked again after settlement_pending")
	fac.mu.Unlock()
	require.Equal(t, big.NewInt(10_000), new(big.Int).Sub(before, usdcBalance(ctx, t, stack.Chain.Client(), client.Address())), "charged once")
}
