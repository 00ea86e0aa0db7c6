package svm_test

import (
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/svm"
)

// chainNode is a Solana JSON-RPC node for settlement: sendTransaction checks
// every signature and lands the transaction; getSignatureStatuses reports it
// processed at the first ask and confirmed after.
type chainNode struct {
	server  *httptest.Server
	balance uint64

	mu     sync.Mutex
	sent   int
	landed map[string]bool // signature -> failed
	asks   map[string]int
}

func newChainNode(t *testing.T, balance uint64) *chainNode {
	n := &chainNode{balance: balance, landed: map[string]bool{}, asks: map[string]int{}}
	n.server = httptest.NewServer(http.HandlerFunc(n.serve))
	t.Cleanup(n.server.Close)
	return n
}

func (n *chainNode) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		ID     json.RawMessage   `json:"id"`
		Method string            `json:"method"`
		Params []json.RawMessage `json:"params"`
	}
	_ = json.Unmarshal(body, &req)
	reply := func(result any) {
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
	}
	fail := func(code int, msg string) {
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": code, "message": msg}})
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch req.Method {
	case "sendTransaction":
		var b64 string
		_ = json.Unmarshal(req.Params[0], &b64)
		tx, err := solana.TransactionFromBase64(b64)
		if err != nil {
			fail(-32602, "failed to deserialize")
			return
		}
		msg, _ := tx.Message.MarshalBinary()
		for i, sig := range tx.Signatures {
			if !ed25519.Verify(ed25519.PublicKey(tx.Message.AccountKeys[i][:]), msg, sig[:]) {
				fail(-32003, "Transaction signature verification failure")
				return
			}
		}
		id := tx.Signatures[0].String()
		if _, ok := n.landed[id]; ok {
			fail(-32002, "Transaction simulation failed: This transaction has already been processed")
			return
		}
		n.sent++
		data := tx.Message.Instructions[2].Data
		n.landed[id] = len(data) == 10 && binary.LittleEndian.Uint64(data[1:9]) > n.balance
		reply(id)
	case "getSignatureStatuses":
		var ids []string
		_ = json.Unmarshal(req.Params[0], &ids)
		failed, ok := n.landed[ids[0]]
		if !ok {
			reply(map[string]any{"context": map[string]any{"slot": 1}, "value": []any{nil}})
			return
		}
		n.asks[ids[0]]++
		status := map[string]any{"slot": 2, "confirmations": 0, "err": nil, "confirmationStatus": "processed"}
		if n.asks[ids[0]] > 1 {
			status["confirmationStatus"] = "confirmed"
		}
		if failed {
			status["err"] = map[string]any{"InstructionError": []any{2, map[string]any{"Custom": 1}}}
		}
		reply(map[string]any{"context": map[string]any{"slot": 2}, "value": []any{status}})
	default:
		fail(-32601, "Method not found")
	}
}

func TestSettler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	node := newChainNode(t, 50_000)
	settler, err := svm.NewSettler(svm.SettlerConfig{Key: f.feePayer, URL: node.server.URL, Poll: time.Millisecond})
	require.NoError(t, err)

	pay := func(amount uint64) *x402.Payment {
		req := f.requirement()
		req.Amount = "10000"
		p := f.parts(t, req, svm.TokenProgram)
		owner := f.authority.PublicKey()
		p.ixs[2] = f.transfer(t, svm.TokenProgram, ata(t, owner, f.mint, svm.TokenProgram), f.mint, ata(t, f.payTo, f.mint, svm.TokenProgram), owner, amount)
		_, b64 := p.build(t)
		raw, err := json.Marshal(paymentPayload(req, b64))
		require.NoError(t, err)
		return &x402.Payment{Network: x402.SolanaMainnet, Payer: owner.String(), Payload: raw}
	}

	p := pay(10_000)
	res, err := settler.Settle(ctx, p)
	require.NoError(t, err)
	require.True(t, res.Success, res.ErrorReason)
	require.NotEmpty(t, res.Transaction)
	require.Equal(t, 1, node.sent)

	// A retry (the first answer lost) finds the transaction and sends nothing.
	again, err := settler.Settle(ctx, p)
	require.NoError(t, err)
	require.Equal(t, res, again)
	require.Equal(t, 1, node.sent)

	// A transfer the chain refuses is a failed settlement, not an error.
	failed, err := settler.Settle(ctx, pay(90_000))
	require.NoError(t, err)
	require.False(t, failed.Success)
	require.Equal(t, svm.ReasonTransactionFailed, failed.ErrorReason)

	// Another fee payer's transaction is not ours to sign.
	other, err := svm.NewSettler(svm.SettlerConfig{Key: newKey(t), URL: node.server.URL, Poll: time.Millisecond})
	require.NoError(t, err)
	refused, err := other.Settle(ctx, pay(10_000))
	require.NoError(t, err)
	require.False(t, refused.Success)

	// An unreachable node is an error: River tries again.
	down, err := svm.NewSettler(svm.SettlerConfig{Key: f.feePayer, URL: "http://127.0.0.1:1", Poll: time.Millisecond})
	require.NoError(t, err)
	_, err = down.Settle(ctx, pay(10_000))
	require.Error(t, err)
}
