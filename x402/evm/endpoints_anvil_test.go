package evm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

// TestAnvil_Endpoints settles paid calls on anvil through two endpoints,
// proxies on loopback in front of the one node, one of which misbehaves
// as RPC providers do while settlements go on: lagging blocks behind (its
// head, receipts, blocks and latest state those of a node behind), answering
// 429 with Retry-After in bursts, or dying mid-run (its listener closed).
// Every payment is verified and settled once through the endpoints, the
// node is left holding nothing (no nonce gap), and the relayer's nonce
// store holds no nonce the chain has not mined.
func TestAnvil_Endpoints(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		fault func(p *faultProxy)
		mode  []func(*evm.RelayerConfig)
		// check tells that the fault happened and was seen.
		check func(t *testing.T, p *faultProxy, st evm.EndpointStatus, obs *recordingObserver)
	}{
		{
			name:  "Lagging",
			fault: func(p *faultProxy) { p.lag.Store(3) },
			check: func(t *testing.T, p *faultProxy, st evm.EndpointStatus, _ *recordingObserver) {
				require.GreaterOrEqual(t, st.Lag, uint64(2), "the endpoint is seen behind")
				require.Positive(t, p.hidden.Load(), "the lagging endpoint hid blocks it lacks")
			},
		},
		{
			name:  "LimitedInBursts",
			fault: func(p *faultProxy) { p.burst.Store(true) },
			mode:  []func(*evm.RelayerConfig){batched},
			check: func(t *testing.T, p *faultProxy, _ evm.EndpointStatus, obs *recordingObserver) {
				require.Positive(t, p.limited.Load(), "429s were answered")
				require.Positive(t, obs.kind(evm.EndpointLimited), "429s were seen")
			},
		},
		{
			name: "Dying",
			fault: func(p *faultProxy) {
				time.AfterFunc(3*time.Second, p.die)
			},
			check: func(t *testing.T, p *faultProxy, st evm.EndpointStatus, _ *recordingObserver) {
				require.True(t, p.dead.Load(), "the endpoint died")
				require.Positive(t, p.served.Load(), "the endpoint served before it died")
				require.False(t, st.In, "the dead endpoint is out")
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupAnvil(t, &anviltest.Config{BlockTime: time.Second})
			faulty, healthy := newFaultProxy(t, b.node.URL), newFaultProxy(t, b.node.URL)
			obs := map[string]*recordingObserver{}
			var obsMu sync.Mutex
			var logs syncBuffer
			e, err := evm.NewEndpoints(ctx, &evm.EndpointsConfig{
				Network:      "eip155:8453",
				URLs:         []string{faulty.URL + "/v2/SECRETKEY", healthy.URL + "/v2/SECRETKEY"},
				CallTimeout:  time.Second,
				ProbeEvery:   200 * time.Millisecond,
				LimitBackoff: 200 * time.Millisecond,
				Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
				Observe: func(_, endpoint string) evm.EndpointObserver {
					obsMu.Lock()
					defer obsMu.Unlock()
					o := &recordingObserver{kinds: map[string]int{}}
					obs[endpoint] = o
					return o
				},
			})
			require.NoError(t, err)
			tt.fault(faulty)
			require.NoError(t, e.Start(ctx))
			t.Cleanup(e.Stop)

			v, err := evm.NewVerifier(&evm.VerifierConfig{Chains: map[string]evm.Reader{"eip155:8453": e}})
			require.NoError(t, err)
			r := b.relayer(t, e, tt.mode...)
			const n = 30
			payments := make([]*x402.Payment, n)
			for i := range payments {
				p, err := v.Verify(ctx, requirement(), newPayment(t, devAccountKey(t, i%8), requirement()).payload(t, requirement()))
				require.NoError(t, err)
				payments[i] = p
			}
			settleSpread(t, payments, 200*time.Millisecond, r)
			b.requireClean(t, n)

			relayerAddr := chain.Account(devchain.RelayerAccount).Address
			mined, err := b.node.Client.NonceAt(ctx, relayerAddr, nil)
			require.NoError(t, err)
			left, err := b.nonces.OutstandingNonces(ctx, "eip155:8453", relayerAddr, mined)
			require.NoError(t, err)
			require.Empty(t, left, "nonces allocated and never mined")

			name := e.Status()[0].Name
			tt.check(t, faulty, e.Status()[0], obs[name])
			require.NotContains(t, logs.String(), "SECRETKEY", "logs name the host, never the URL")
		})
	}
}

// settleSpread starts the settlement of each payment interval after the
// previous one, so that settlements go on throughout a run, retries each
// until it succeeds (as River retries a job), and requires every one to
// succeed.
func settleSpread(t *testing.T, payments []*x402.Payment, interval time.Duration, r *evm.Relayer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	results := make([]*x402.SettleResponse, len(payments))
	errs := make([]error, len(payments))
	var wg sync.WaitGroup
	for i, p := range payments {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * interval)
			for {
				results[i], errs[i] = r.Settle(ctx, p)
				if errs[i] == nil || ctx.Err() != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	for i := range payments {
		require.NoError(t, errs[i], "settlement %d", i)
		require.True(t, results[i].Success, "settlement %d: %s", i, results[i].ErrorReason)
	}
}

// faultProxy forwards JSON-RPC to a node on loopback and misbehaves as an
// RPC provider does: lag blocks behind the node (eth_blockNumber answers
// the head less lag; receipts, blocks and block receipts above that are
// null, and the latest state and nonce are read at that block), answering
// 429 with Retry-After: 1 in bursts (the first half of every two seconds),
// or dead (its listener and connections closed).
type faultProxy struct {
	*httptest.Server
	target string

	lag     atomic.Uint64
	burst   atomic.Bool
	dead    atomic.Bool
	served  atomic.Int64 // requests answered
	hidden  atomic.Int64 // answers nulled as above the lagging head
	limited atomic.Int64 // 429s answered
	start   time.Time
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	p := &faultProxy{target: target, start: time.Now()}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Server.Close)
	return p
}

// die closes the proxy's listener and its connections: later calls are
// refused.
func (p *faultProxy) die() {
	p.dead.Store(true)
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

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if p.burst.Load() && time.Since(p.start)%(2*time.Second) < time.Second {
		p.limited.Add(1)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
		return
	}
	var req rpcMessage
	if lag := p.lag.Load(); lag > 0 && json.Unmarshal(body, &req) == nil && req.Method != "" {
		out, ok := p.lagging(r.Context(), &req, lag)
		if !ok {
			http.Error(w, "node unreachable", http.StatusBadGateway)
			return
		}
		p.served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	out, err := p.forward(r.Context(), body)
	if err != nil {
		http.Error(w, "node unreachable", http.StatusBadGateway)
		return
	}
	p.served.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func (p *faultProxy) forward(ctx context.Context, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// call forwards one request and decodes its answer.
func (p *faultProxy) call(ctx context.Context, req *rpcMessage) (*rpcMessage, bool) {
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
func (p *faultProxy) lagging(ctx context.Context, req *rpcMessage, lag uint64) (*rpcMessage, bool) {
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
	// blockArg returns the number a block argument names (a tag: the
	// head), and whether it is above the lagging head.
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
			p.hidden.Add(1)
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
			p.hidden.Add(1)
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
