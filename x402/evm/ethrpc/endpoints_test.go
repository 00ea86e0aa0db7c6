package ethrpc_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/logtest"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// fakeNode is a JSON-RPC node on loopback whose answers a test sets: its
// head, nonces, the receipts it has, its answer to sends, and how it
// misbehaves (429 with Retry-After, a status, a delay, a cut connection).
type fakeNode struct {
	*httptest.Server

	mu         sync.Mutex
	head       uint64
	nonce      uint64
	pending    uint64
	receipts   map[common.Hash]bool
	sendErr    string        // "" accepts
	limitNext  int           // answer 429 to this many requests
	retryAfter string        // with this Retry-After
	status     int           // answer every request with this status
	delay      time.Duration // before answering
	cut        bool          // close the connection instead of answering
	calls      map[string]int
	limitedAt  []time.Time // when a 429 was answered, on clock
	clock      clock.Clock // the Endpoints' clock
}

func newFakeNode(t *testing.T, head uint64) *fakeNode {
	t.Helper()
	n := &fakeNode{head: head, receipts: map[common.Hash]bool{}, calls: map[string]int{}, clock: clock.Real()}
	n.Server = httptest.NewServer(http.HandlerFunc(n.serve))
	t.Cleanup(n.Server.Close)
	return n
}

// set changes the node under its lock.
func (n *fakeNode) set(f func(n *fakeNode)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f(n)
}

// count returns how many calls of method the node got (all: "").
func (n *fakeNode) count(method string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if method == "" {
		total := 0
		for _, c := range n.calls {
			total += c
		}
		return total
	}
	return n.calls[method]
}

func (n *fakeNode) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID     json.RawMessage   `json:"id"`
		Method string            `json:"method"`
		Params []json.RawMessage `json:"params"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	n.mu.Lock()
	n.calls[req.Method]++
	delay, cut, status := n.delay, n.cut, n.status
	limited := n.limitNext > 0
	if limited {
		n.limitNext--
		n.limitedAt = append(n.limitedAt, n.clock.Now())
	}
	retryAfter := n.retryAfter
	n.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	switch {
	case cut:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	case limited:
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
		return
	case status != 0:
		http.Error(w, http.StatusText(status), status)
		return
	}
	result, rpcErr := n.answer(req.Method, req.Params)
	out := map[string]any{"jsonrpc": "2.0", "id": req.ID}
	if rpcErr != "" {
		out["error"] = map[string]any{"code": -32000, "message": rpcErr}
	} else {
		out["result"] = result
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (n *fakeNode) answer(method string, params []json.RawMessage) (any, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch method {
	case "eth_chainId":
		return "0x2105", ""
	case "eth_blockNumber":
		return hexutil.Uint64(n.head), ""
	case "eth_getTransactionCount":
		if strings.Contains(string(params[1]), "pending") {
			return hexutil.Uint64(n.pending), ""
		}
		return hexutil.Uint64(n.nonce), ""
	case "eth_getTransactionReceipt":
		var h common.Hash
		_ = json.Unmarshal(params[0], &h)
		if !n.receipts[h] {
			return nil, ""
		}
		return &types.Receipt{Status: 1, TxHash: h, Logs: []*types.Log{}, BlockNumber: new(big.Int).SetUint64(n.head)}, ""
	case "eth_getBlockReceipts":
		var arg struct {
			BlockNumber hexutil.Uint64 `json:"blockNumber"`
		}
		_ = json.Unmarshal(params[0], &arg)
		if uint64(arg.BlockNumber) > n.head {
			return nil, ""
		}
		return []*types.Receipt{}, ""
	case "eth_getBlockByNumber":
		num := n.head
		var s string
		_ = json.Unmarshal(params[0], &s)
		if s != "latest" {
			v, _ := hexutil.DecodeUint64(s)
			if v > n.head {
				return nil, ""
			}
			num = v
		}
		return &types.Header{Number: new(big.Int).SetUint64(num), Difficulty: new(big.Int), BaseFee: big.NewInt(1)}, ""
	case "eth_sendRawTransaction":
		if n.sendErr != "" {
			return nil, n.sendErr
		}
		return common.Hash{1}, ""
	case "eth_call":
		return "0x", ""
	}
	return nil, "the method " + method + " does not exist"
}

// endpointsBundle is Endpoints over fake nodes, with what it logged and
// recorded.
type endpointsBundle struct {
	nodes []*fakeNode
	e     *ethrpc.Endpoints
	logs  *logtest.Buffer
	obs   map[string]*recordingObserver
}

// startEndpoints starts Endpoints over nodes, with fast settings that opts
// may change.
func startEndpoints(t *testing.T, nodes []*fakeNode, opts ...func(*ethrpc.Config)) *endpointsBundle {
	t.Helper()
	b := &endpointsBundle{nodes: nodes, logs: &logtest.Buffer{}, obs: map[string]*recordingObserver{}}
	var obsMu sync.Mutex
	cfg := &ethrpc.Config{
		Network:      "eip155:8453",
		CallTimeout:  500 * time.Millisecond,
		ProbeEvery:   50 * time.Millisecond,
		LimitBackoff: 100 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Observe: func(network, endpoint string) ethrpc.Observer {
			obsMu.Lock()
			defer obsMu.Unlock()
			o := &recordingObserver{kinds: map[string]int{}}
			b.obs[endpoint] = o
			return o
		},
	}
	for _, n := range nodes {
		cfg.URLs = append(cfg.URLs, n.URL+"/v3/SECRETKEY")
	}
	for _, opt := range opts {
		opt(cfg)
	}
	e, err := ethrpc.New(context.Background(), cfg)
	require.NoError(t, err)
	require.NoError(t, e.Start(context.Background()))
	t.Cleanup(e.Stop)
	b.e = e
	return b
}

// observer returns the observer of node i.
func (b *endpointsBundle) observer(t *testing.T, i int) *recordingObserver {
	t.Helper()
	name, err := ethrpc.RedactURL(b.nodes[i].URL)
	require.NoError(t, err)
	return b.obs[name]
}

// recordingObserver records an endpoint's figures.
type recordingObserver struct {
	mu    sync.Mutex
	calls int
	kinds map[string]int
	lag   uint64
	in    bool
}

func (o *recordingObserver) ObserveCall(_ time.Duration, kind string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if kind != "" {
		o.kinds[kind]++
	}
}

func (o *recordingObserver) SetLag(blocks uint64) {
	o.mu.Lock()
	o.lag = blocks
	o.mu.Unlock()
}

func (o *recordingObserver) SetIn(in bool) {
	o.mu.Lock()
	o.in = in
	o.mu.Unlock()
}

func (o *recordingObserver) kind(k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.kinds[k]
}

// TestEndpoints_ReadsAvoidLagging has one endpoint ten blocks behind: the
// head answered is the one both endpoints have (a head only one reports is
// not believed), reads of the latest state and of blocks it lacks never go
// to it, and its lag is recorded.
func TestEndpoints_ReadsAvoidLagging(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ahead, behind := newFakeNode(t, 100), newFakeNode(t, 90)
	b := startEndpoints(t, []*fakeNode{behind, ahead})
	for range 20 {
		head, err := b.e.BlockNumber(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 90, head)
		_, err = b.e.CallContract(ctx, ethereum.CallMsg{}, nil)
		require.NoError(t, err)
		_, err = b.e.BlockReceipts(ctx, rpc.BlockNumberOrHashWithNumber(95))
		require.NoError(t, err)
	}
	require.Zero(t, behind.count("eth_call"))
	require.Zero(t, behind.count("eth_getBlockReceipts"))
	st := b.e.Status()
	require.EqualValues(t, 10, st[0].Lag)
	require.EqualValues(t, 0, st[1].Lag)
	require.EqualValues(t, 10, b.observer(t, 0).lag)
	require.Contains(t, b.logs.String(), "rpc endpoint behind the others")

	// Caught up, it takes reads again.
	behind.set(func(n *fakeNode) { n.head = 100 })
	require.Eventually(t, func() bool {
		_, err := b.e.CallContract(ctx, ethereum.CallMsg{}, nil)
		return err == nil && behind.count("eth_call") > 0
	}, 5*time.Second, 10*time.Millisecond)
}

// TestEndpoints_FoundElsewhere looks for receipts, block receipts and
// headers one endpoint lacks: they are looked for on the others before
// NotFound is answered, and a receipt counts once two endpoints report it
// (one that only one of several reports is NotFound).
func TestEndpoints_FoundElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := common.HexToHash("0xabc")
	for _, tt := range []struct {
		name      string
		has       []bool // which of the two nodes has the receipt
		wantFound bool
	}{
		{name: "OnBoth", has: []bool{true, true}, wantFound: true},
		{name: "OnFirstOnly", has: []bool{true, false}},
		{name: "OnSecondOnly", has: []bool{false, true}},
		{name: "OnNone", has: []bool{false, false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			nodes := []*fakeNode{newFakeNode(t, 100), newFakeNode(t, 100)}
			for i, n := range nodes {
				n.receipts[tx] = tt.has[i]
			}
			b := startEndpoints(t, nodes)
			for range 6 { // whichever node is asked first
				r, err := b.e.TransactionReceipt(ctx, tx)
				if !tt.wantFound {
					require.ErrorIs(t, err, ethereum.NotFound)
					continue
				}
				require.NoError(t, err)
				require.Equal(t, tx, r.TxHash)
			}
		})
	}
	t.Run("BlockAheadOfOne", func(t *testing.T) {
		t.Parallel()
		// Both in step as far as the heads read say, but one has a block
		// the other has not yet.
		a, c := newFakeNode(t, 100), newFakeNode(t, 100)
		b := startEndpoints(t, []*fakeNode{a, c}, func(cfg *ethrpc.Config) { cfg.ProbeEvery = time.Hour })
		a.set(func(n *fakeNode) { n.head = 101 })
		for range 6 {
			_, err := b.e.BlockReceipts(ctx, rpc.BlockNumberOrHashWithNumber(101))
			require.NoError(t, err)
			h, err := b.e.HeaderByNumber(ctx, big.NewInt(101))
			require.NoError(t, err)
			require.EqualValues(t, 101, h.Number.Uint64())
		}
		_, err := b.e.BlockReceipts(ctx, rpc.BlockNumberOrHashWithNumber(102))
		require.ErrorIs(t, err, ethereum.NotFound)
		_, err = b.e.HeaderByNumber(ctx, big.NewInt(102))
		require.ErrorIs(t, err, ethereum.NotFound)
	})
}

// TestEndpoints_Nonces reads nonces: the latest from the endpoints at the
// highest head (never one behind), the pending one the highest of all.
func TestEndpoints_Nonces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name                string
		heads               []uint64
		nonces, pendings    []uint64
		wantNonce, wantPend uint64
	}{
		{name: "InStep", heads: []uint64{100, 100}, nonces: []uint64{5, 6}, pendings: []uint64{9, 8}, wantNonce: 6, wantPend: 9},
		{name: "OneBehind", heads: []uint64{100, 80}, nonces: []uint64{5, 3}, pendings: []uint64{9, 4}, wantNonce: 5, wantPend: 9},
		{name: "BehindSaysMore", heads: []uint64{80, 100}, nonces: []uint64{7, 5}, pendings: []uint64{12, 9}, wantNonce: 5, wantPend: 12},
		{name: "Three", heads: []uint64{100, 99, 60}, nonces: []uint64{5, 5, 2}, pendings: []uint64{7, 11, 3}, wantNonce: 5, wantPend: 11},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var nodes []*fakeNode
			for i, h := range tt.heads {
				n := newFakeNode(t, h)
				n.nonce, n.pending = tt.nonces[i], tt.pendings[i]
				nodes = append(nodes, n)
			}
			b := startEndpoints(t, nodes)
			for range 4 {
				got, err := b.e.NonceAt(ctx, common.Address{1}, nil)
				require.NoError(t, err)
				require.Equal(t, tt.wantNonce, got)
				got, err = b.e.PendingNonceAt(ctx, common.Address{1})
				require.NoError(t, err)
				require.Equal(t, tt.wantPend, got)
			}
		})
	}
}

// TestEndpoints_Send sends to every endpoint and answers as the relayer
// needs: accepted if one not behind accepted it, else the refusal of one
// not behind with the node's own text.
func TestEndpoints_Send(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	tx, err := types.SignNewTx(key, types.LatestSignerForChainID(big.NewInt(8453)), &types.DynamicFeeTx{ChainID: big.NewInt(8453), Gas: 21_000, GasFeeCap: big.NewInt(1), GasTipCap: big.NewInt(1)})
	require.NoError(t, err)
	for _, tt := range []struct {
		name    string
		heads   []uint64
		errs    []string // each node's refusal, "" accepts
		status  []int    // each node's HTTP status, 0 answers
		wantErr string   // "" accepted
	}{
		{name: "AllAccept", heads: []uint64{100, 100}, errs: []string{"", ""}},
		{name: "AcceptedAndKnown", heads: []uint64{100, 100}, errs: []string{"", "already known"}},
		{name: "KnownAndImported", heads: []uint64{100, 100}, errs: []string{"already known", "transaction already imported"}, wantErr: "already"},
		{name: "AcceptedAndTooLow", heads: []uint64{100, 100}, errs: []string{"nonce too low", ""}},
		{name: "TooLowAndBehindAccepts", heads: []uint64{100, 80}, errs: []string{"nonce too low", ""}, wantErr: "nonce too low"},
		{name: "DownAndUnderpriced", heads: []uint64{100, 100}, errs: []string{"", "replacement transaction underpriced"}, status: []int{http.StatusServiceUnavailable, 0}, wantErr: "replacement transaction underpriced"},
		{name: "DownAndAccepts", heads: []uint64{100, 100}, errs: []string{"", ""}, status: []int{http.StatusBadGateway, 0}},
		{name: "AllDown", heads: []uint64{100, 100}, errs: []string{"", ""}, status: []int{http.StatusBadGateway, http.StatusBadGateway}, wantErr: "502"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var nodes []*fakeNode
			for range tt.heads {
				nodes = append(nodes, newFakeNode(t, 0))
			}
			for i, n := range nodes {
				n.head = tt.heads[i]
			}
			b := startEndpoints(t, nodes, func(cfg *ethrpc.Config) { cfg.FailAfter = 100 })
			for i, n := range nodes {
				n.set(func(n *fakeNode) {
					n.sendErr = tt.errs[i]
					if tt.status != nil {
						n.status = tt.status[i]
					}
				})
			}
			err := b.e.SendTransaction(ctx, tx)
			if tt.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tt.wantErr)
				require.NotContains(t, err.Error(), "SECRETKEY")
			}
			for _, n := range nodes {
				require.Equal(t, 1, n.count("eth_sendRawTransaction"), "each endpoint gets the transaction")
			}
		})
	}
}

// TestEndpoints_RateLimited answers 429 from one endpoint: it is not
// called again until its Retry-After (seconds or a date) has passed, or,
// without one, a back-off that doubles; the other takes the calls. The
// endpoints' clock is a Fake the test moves.
func TestEndpoints_RateLimited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name       string
		retryAfter func(now time.Time) string
		wantQuiet  time.Duration // the limited node hears nothing this long
	}{
		{name: "Seconds", retryAfter: func(time.Time) string { return "1" }, wantQuiet: time.Second},
		{name: "Date", retryAfter: func(now time.Time) string { return now.Add(2 * time.Second).Format(http.TimeFormat) }, wantQuiet: 2 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := clock.NewFake(t0)
			limited, other := newFakeNode(t, 100), newFakeNode(t, 100)
			limited.clock = fake
			b := startEndpoints(t, []*fakeNode{limited, other}, onClock(fake))
			limited.set(func(n *fakeNode) { n.limitNext, n.retryAfter = 1, tt.retryAfter(fake.Now()) })
			// Calls until the limited node answered its 429.
			require.Eventually(t, func() bool {
				_, err := b.e.CallContract(ctx, ethereum.CallMsg{}, nil)
				require.NoError(t, err)
				return limited.count("") > 0 && len(limitedAtOf(limited)) == 1
			}, 5*time.Second, time.Millisecond)
			at := limitedAtOf(limited)[0]
			heard := limited.count("")
			for fake.Now().Sub(at) < tt.wantQuiet {
				_, err := b.e.CallContract(ctx, ethereum.CallMsg{}, nil)
				require.NoError(t, err)
				fake.Advance(5 * time.Millisecond)
			}
			require.Equal(t, heard, limited.count(""), "the limited endpoint was called before its Retry-After")
			require.Equal(t, 1, b.observer(t, 0).kind(ethrpc.RateLimited))
			require.Contains(t, b.logs.String(), "rpc endpoint limited (429)")
			// Once its Retry-After has passed, it takes calls again.
			require.Eventually(t, func() bool {
				_, err := b.e.CallContract(ctx, ethereum.CallMsg{}, nil)
				require.NoError(t, err)
				return limited.count("") > heard
			}, 5*time.Second, time.Millisecond)
		})
	}
	t.Run("BackOff", func(t *testing.T) {
		t.Parallel()
		fake := clock.NewFake(t0)
		limited, other := newFakeNode(t, 100), newFakeNode(t, 100)
		limited.clock = fake
		b := startEndpoints(t, []*fakeNode{limited, other}, onClock(fake), func(cfg *ethrpc.Config) { cfg.ProbeEvery = time.Hour })
		limited.set(func(n *fakeNode) { n.limitNext = 1000 })
		for fake.Now().Sub(t0) < 1400*time.Millisecond {
			_, err := b.e.CallContract(ctx, ethereum.CallMsg{}, nil)
			require.NoError(t, err)
			fake.Advance(2 * time.Millisecond)
		}
		// 100, 200, 400, 800 ms: the fourth 429 comes 700 ms in, the fifth
		// not before 1.5 s.
		got := limitedAtOf(limited)
		require.Len(t, got, 4, "the back-off doubles")
		for i := 1; i < len(got); i++ {
			require.GreaterOrEqual(t, got[i].Sub(got[i-1]), 100*time.Millisecond<<(i-1), "pause %d", i)
		}
	})
	t.Run("AllLimitedWait", func(t *testing.T) {
		t.Parallel()
		fake := clock.NewFake(t0)
		a, c := newFakeNode(t, 100), newFakeNode(t, 100)
		b := startEndpoints(t, []*fakeNode{a, c}, onClock(fake), func(cfg *ethrpc.Config) { cfg.ProbeEvery = time.Hour })
		for _, n := range []*fakeNode{a, c} {
			n.set(func(n *fakeNode) { n.limitNext, n.retryAfter = 1, "1" })
		}
		err := afterWaiting(t, fake, time.Second, func() error {
			_, err := b.e.CallContract(ctx, ethereum.CallMsg{}, nil)
			return err
		})
		require.NoError(t, err, "the call waits for a limited endpoint rather than failing")

		for _, n := range []*fakeNode{a, c} {
			n.set(func(n *fakeNode) { n.limitNext, n.retryAfter = 1, "30" })
		}
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = b.e.CallContract(short, ethereum.CallMsg{}, nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), time.Second, "the wait ends with ctx")
	})
}

// afterWaiting runs call while every endpoint is limited: it requires the
// call to wait on the clock (beside the probes' ticker) rather than end,
// moves the clock d, and returns the call's error.
func afterWaiting(t *testing.T, fake *clock.Fake, d time.Duration, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	require.NoError(t, fake.Wait(t.Context(), 2))
	select {
	case err := <-done:
		t.Fatalf("the call ended while every endpoint is limited: %v", err)
	default:
	}
	fake.Advance(d)
	return <-done
}

// onClock sets the endpoints' clock.
func onClock(c clock.Clock) func(*ethrpc.Config) {
	return func(cfg *ethrpc.Config) { cfg.Clock = c }
}

// TestEndpoints_SendAllLimited sends while every endpoint answers 429: the
// send waits for the first to be free again and goes there, rather than
// failing.
func TestEndpoints_SendAllLimited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, c := newFakeNode(t, 100), newFakeNode(t, 100)
	b := startEndpoints(t, []*fakeNode{a, c}, onClock(fake), func(cfg *ethrpc.Config) { cfg.ProbeEvery = time.Hour })
	a.set(func(n *fakeNode) { n.limitNext, n.retryAfter = 1, "1" })
	c.set(func(n *fakeNode) { n.limitNext, n.retryAfter = 1, "2" })
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	tx, err := types.SignNewTx(key, types.LatestSignerForChainID(big.NewInt(8453)), &types.DynamicFeeTx{ChainID: big.NewInt(8453), Gas: 21_000})
	require.NoError(t, err)
	require.NoError(t, afterWaiting(t, fake, time.Second, func() error { return b.e.SendTransaction(ctx, tx) }))
	require.Equal(t, 2, a.count("eth_sendRawTransaction"), "429, then sent when free")
	require.Equal(t, 1, c.count("eth_sendRawTransaction"), "still limited when the first was free")
}

func limitedAtOf(n *fakeNode) []time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]time.Time(nil), n.limitedAt...)
}

// TestEndpoints_OutAndBack fails one endpoint in each way an endpoint
// fails: after FailAfter failures running it is out, its calls answered by
// the other, each failure counted by kind; it rejoins once it answers a
// probe again.
func TestEndpoints_OutAndBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name     string
		fail     func(n *fakeNode)
		wantKind string
	}{
		{name: "ServerError", fail: func(n *fakeNode) { n.status = http.StatusServiceUnavailable }, wantKind: ethrpc.TransportFailed},
		{name: "ConnectionCut", fail: func(n *fakeNode) { n.cut = true }, wantKind: ethrpc.TransportFailed},
		{name: "Timeout", fail: func(n *fakeNode) { n.delay = 5 * time.Second }, wantKind: ethrpc.TimedOut},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			failing, other := newFakeNode(t, 100), newFakeNode(t, 100)
			b := startEndpoints(t, []*fakeNode{failing, other}, func(cfg *ethrpc.Config) {
				// Long enough for a loopback answer on a loaded machine,
				// far shorter than the failing node's delay.
				cfg.CallTimeout = time.Second
				cfg.ProbeEvery = 100 * time.Millisecond
			})
			failing.set(tt.fail)
			for range 10 {
				_, err := b.e.CallContract(ctx, ethereum.CallMsg{}, nil)
				require.NoError(t, err, "the other endpoint answers")
			}
			require.Eventually(t, func() bool { return !b.e.Status()[0].In }, 5*time.Second, 10*time.Millisecond)
			require.GreaterOrEqual(t, b.observer(t, 0).kind(tt.wantKind), 3)
			require.Contains(t, b.logs.String(), "rpc endpoint taken out")
			require.NotContains(t, b.logs.String(), "SECRETKEY", "logs name the host, never the URL")
			heard := failing.count("eth_call")
			for range 10 {
				_, err := b.e.CallContract(ctx, ethereum.CallMsg{}, nil)
				require.NoError(t, err)
			}
			require.Equal(t, heard, failing.count("eth_call"), "an endpoint out takes no calls")

			failing.set(func(n *fakeNode) { n.status, n.cut, n.delay = 0, false, 0 })
			require.Eventually(t, func() bool { return b.e.Status()[0].In }, 5*time.Second, 10*time.Millisecond)
			require.Contains(t, b.logs.String(), "rpc endpoint back")
		})
	}
}

// TestEndpoints_AllOut has every endpoint fail: a call is tried on each
// and fails with the error of the last, its URL redacted.
func TestEndpoints_AllOut(t *testing.T) {
	t.Parallel()
	a, c := newFakeNode(t, 100), newFakeNode(t, 100)
	b := startEndpoints(t, []*fakeNode{a, c})
	for _, n := range []*fakeNode{a, c} {
		n.set(func(n *fakeNode) { n.status = http.StatusBadGateway })
	}
	_, err := b.e.CallContract(context.Background(), ethereum.CallMsg{}, nil)
	require.ErrorContains(t, err, "502")
	require.NotContains(t, err.Error(), "SECRETKEY")
	a.set(func(n *fakeNode) { n.status = 0 })
	_, err = b.e.CallContract(context.Background(), ethereum.CallMsg{}, nil)
	require.NoError(t, err)
}

// TestRedactURL names endpoints without what may carry a secret.
func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		url, want, wantErr string
	}{
		{url: "https://base-mainnet.g.alchemy.com/v2/SECRETKEY", want: "https://base-mainnet.g.alchemy.com"},
		{url: "https://user:SECRET@rpc.example:8443/path?key=SECRET", want: "https://rpc.example:8443"},
		{url: "wss://rpc.example/ws/SECRET", want: "wss://rpc.example"},
		{url: "http://127.0.0.1:8545", want: "http://127.0.0.1:8545"},
		{url: "ftp://rpc.example/SECRET", wantErr: `scheme "ftp"`},
		{url: "rpc.example/SECRET", wantErr: `scheme ""`},
		{url: "https:///SECRET", wantErr: "no host"},
	} {
		got, err := ethrpc.RedactURL(tt.url)
		if tt.wantErr != "" {
			require.ErrorContains(t, err, tt.wantErr, tt.url)
			require.NotContains(t, err.Error(), "SECRET")
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.want, got)
	}
	e, err := ethrpc.New(context.Background(), &ethrpc.Config{Network: "eip155:8453",
		URLs: []string{"https://rpc.example/KEY1", "https://other.example/KEY", "https://rpc.example/KEY2"}})
	require.NoError(t, err)
	defer e.Stop()
	var names []string
	for _, s := range e.Status() {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"https://rpc.example#1", "https://other.example", "https://rpc.example#3"}, names)
}

// TestEndpoints_StopLeavesNothing starts and stops endpoints: no goroutine
// of theirs is left (not parallel, so that other tests' goroutines are not
// counted).
func TestEndpoints_StopLeavesNothing(t *testing.T) {
	a, c := newFakeNode(t, 100), newFakeNode(t, 90)
	fake := clock.NewFake(time.Now())
	e, err := ethrpc.New(context.Background(), &ethrpc.Config{Network: "eip155:8453",
		URLs: []string{a.URL, c.URL}, ProbeEvery: 10 * time.Millisecond, Clock: fake})
	require.NoError(t, err)
	require.NoError(t, e.Start(context.Background()))
	for range 5 {
		_, err := e.BlockNumber(context.Background())
		require.NoError(t, err)
		require.NoError(t, e.SendTransaction(context.Background(), types.NewTx(&types.LegacyTx{})))
	}
	// A probe of the heads runs.
	probed := a.count("eth_blockNumber")
	fake.Advance(10 * time.Millisecond)
	require.Eventually(t, func() bool { return a.count("eth_blockNumber") > probed }, 5*time.Second, time.Millisecond)
	require.NotEmpty(t, endpointGoroutines())
	e.Stop()
	e.Stop()
	a.Close()
	c.Close()
	require.Eventually(t, func() bool { return len(endpointGoroutines()) == 0 }, 5*time.Second, 10*time.Millisecond,
		"goroutines left: %v", endpointGoroutines())
}

// endpointGoroutines returns the stacks of the goroutines of Endpoints and
// of HTTP client connections (no other test runs beside the test above,
// and the package's devchain has none).
func endpointGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "ethrpc.(*Endpoints)") || strings.Contains(g, "net/http.(*persistConn)") {
			out = append(out, g)
		}
	}
	return out
}

// TestEndpoints_WrongChain refuses an endpoint serving another chain.
func TestEndpoints_WrongChain(t *testing.T) {
	t.Parallel()
	n := newFakeNode(t, 1)
	e, err := ethrpc.New(context.Background(), &ethrpc.Config{Network: "eip155:1", URLs: []string{n.URL + "/SECRETKEY"}})
	require.NoError(t, err)
	defer e.Stop()
	err = e.Start(context.Background())
	require.ErrorContains(t, err, "serves chain 8453")
	require.NotContains(t, err.Error(), "SECRETKEY")
}
