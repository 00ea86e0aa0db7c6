package anviltest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
)

// Proxy is a JSON-RPC endpoint on loopback in front of a node that
// misbehaves as RPC providers do: lagging blocks behind the node
// (eth_blockNumber answers the head less Lag; receipts, blocks and block
// receipts above that are null, and the latest state and nonces are read
// at that block), answering 429 with Retry-After: 1 in bursts (the first
// second of every two, while Burst is set), dead (Die closes its
// listener and connections), or lying (a head Ahead of the node's, and the
// receipts LieReceipt made up).
type Proxy struct {
	*httptest.Server
	target string
	start  time.Time
	client *http.Client

	// Lag is how many blocks the proxy is behind the node (0: none).
	Lag atomic.Uint64
	// Burst makes the proxy answer 429 in bursts.
	Burst atomic.Bool
	// Dead is set once Die closed the proxy.
	Dead atomic.Bool
	// Ahead is how many blocks ahead of the node's the head the proxy
	// answers (eth_blockNumber) is: a head no other endpoint reports.
	Ahead atomic.Uint64

	// lies are the receipts the proxy answers for transactions (by hash,
	// as the request names it) whatever the node says.
	mu   sync.Mutex
	lies map[string]json.RawMessage
	// Served counts the requests answered (forwarded or from the lagging
	// head); HiddenBlocks the blocks and block receipts, HiddenReceipts the
	// receipts, answered null as above the lagging head; Limited the 429s.
	Served, HiddenBlocks, HiddenReceipts, Limited atomic.Int64
}

// NewProxy starts a Proxy in front of the node at target (a URL), closed
// when t ends; it forwards faithfully until told otherwise.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 256
	p := &Proxy{target: target, start: time.Now(), client: &http.Client{Transport: transport}}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Server.Close)
	t.Cleanup(transport.CloseIdleConnections)
	return p
}

// LieReceipt makes the proxy answer receipt for the transaction hash (0x
// and 64 hex digits, lower case), whatever the node says.
func (p *Proxy) LieReceipt(hash string, receipt json.RawMessage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lies == nil {
		p.lies = map[string]json.RawMessage{}
	}
	p.lies[hash] = receipt
}

// lie answers req as the lying proxy does, when it lies about it.
func (p *Proxy) lie(ctx context.Context, req *rpcMessage) (*rpcMessage, bool) {
	switch req.Method {
	case "eth_blockNumber":
		ahead := p.Ahead.Load()
		if ahead == 0 {
			return nil, false
		}
		resp, ok := p.call(ctx, req)
		var head hexutil.Uint64
		if !ok || json.Unmarshal(resp.Result, &head) != nil {
			return nil, false
		}
		out, _ := json.Marshal(hexutil.Uint64(uint64(head) + ahead))
		return &rpcMessage{JSONRPC: "2.0", ID: req.ID, Result: out}, true
	case "eth_getTransactionReceipt":
		var hash string
		if len(req.Params) == 0 || json.Unmarshal(req.Params[0], &hash) != nil {
			return nil, false
		}
		p.mu.Lock()
		receipt, ok := p.lies[strings.ToLower(hash)]
		p.mu.Unlock()
		if !ok {
			return nil, false
		}
		return &rpcMessage{JSONRPC: "2.0", ID: req.ID, Result: receipt}, true
	}
	return nil, false
}

// Die closes the proxy's listener and its connections: later calls are
// refused.
func (p *Proxy) Die() {
	p.Dead.Store(true)
	p.Server.Listener.Close()
	p.Server.CloseClientConnections()
}

// rpcMessage is a JSON-RPC request or answer.
type rpcMessage struct {
	JSONRPC string            `json:"jsonrpc"`
	ID      json.RawMessage   `json:"id,omitempty"`
	Method  string            `json:"method,omitempty"`
	Params  []json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage   `json:"result,omitempty"`
	Error   json.RawMessage   `json:"error,omitempty"`
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if p.Burst.Load() && time.Since(p.start)%(2*time.Second) < time.Second {
		p.Limited.Add(1)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
		return
	}
	var req rpcMessage
	if json.Unmarshal(body, &req) == nil && req.Method != "" {
		if out, ok := p.lie(r.Context(), &req); ok {
			p.Served.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(out)
			return
		}
	}
	if lag := p.Lag.Load(); lag > 0 && json.Unmarshal(body, &req) == nil && req.Method != "" {
		out, ok := p.lagging(r.Context(), &req, lag)
		if !ok {
			http.Error(w, "node unreachable", http.StatusBadGateway)
			return
		}
		p.Served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	out, err := p.forward(r.Context(), body)
	if err != nil {
		http.Error(w, "node unreachable", http.StatusBadGateway)
		return
	}
	p.Served.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func (p *Proxy) forward(ctx context.Context, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// call forwards one request and decodes its answer.
func (p *Proxy) call(ctx context.Context, req *rpcMessage) (*rpcMessage, bool) {
	body, _ := json.Marshal(req)
	out, err := p.forward(ctx, body)
	if err != nil {
		return nil, false
	}
	var resp rpcMessage
	if json.Unmarshal(out, &resp) != nil {
		return nil, false
	}
	return &resp, true
}

// lagging answers req as a node lag blocks behind the target would.
func (p *Proxy) lagging(ctx context.Context, req *rpcMessage, lag uint64) (*rpcMessage, bool) {
	headResp, ok := p.call(ctx, &rpcMessage{JSONRPC: "2.0", ID: json.RawMessage("1"), Method: "eth_blockNumber", Params: []json.RawMessage{}})
	if !ok {
		return nil, false
	}
	var real hexutil.Uint64
	if json.Unmarshal(headResp.Result, &real) != nil {
		return nil, false
	}
	head := uint64(real) - min(lag, uint64(real))
	headArg, _ := json.Marshal(hexutil.Uint64(head))
	null := &rpcMessage{JSONRPC: "2.0", ID: req.ID, Result: json.RawMessage("null")}
	// above reports whether a block argument (a number, or an object
	// with one) names a block above the lagging head.
	above := func(arg json.RawMessage) bool {
		var s string
		if json.Unmarshal(arg, &s) != nil {
			var obj struct {
				BlockNumber *hexutil.Uint64 `json:"blockNumber"`
			}
			if json.Unmarshal(arg, &obj) != nil || obj.BlockNumber == nil {
				return false
			}
			return uint64(*obj.BlockNumber) > head
		}
		n, err := hexutil.DecodeUint64(s)
		return err == nil && n > head
	}
	isTag := func(arg json.RawMessage) bool {
		s := strings.Trim(string(arg), `"`)
		return s == "latest" || s == "pending" || s == "safe" || s == "finalized"
	}
	switch req.Method {
	case "eth_blockNumber":
		return &rpcMessage{JSONRPC: "2.0", ID: req.ID, Result: headArg}, true
	case "eth_getBlockByNumber", "eth_getBlockReceipts":
		if len(req.Params) > 0 && above(req.Params[0]) {
			p.HiddenBlocks.Add(1)
			return null, true
		}
		if len(req.Params) > 0 && isTag(req.Params[0]) {
			req.Params[0] = headArg
		}
	case "eth_getTransactionReceipt":
		resp, ok := p.call(ctx, req)
		if !ok {
			return nil, false
		}
		var rc struct {
			BlockNumber hexutil.Uint64 `json:"blockNumber"`
		}
		if json.Unmarshal(resp.Result, &rc) == nil && uint64(rc.BlockNumber) > head {
			p.HiddenReceipts.Add(1)
			return null, true
		}
		return resp, true
	case "eth_getTransactionCount", "eth_call", "eth_getBalance", "eth_getCode":
		// The latest state is the lagging head's (the pending nonce too:
		// this node has not seen the transactions since).
		if last := len(req.Params) - 1; last >= 1 && isTag(req.Params[last]) {
			req.Params[last] = headArg
		}
	}
	return p.call(ctx, req)
}
