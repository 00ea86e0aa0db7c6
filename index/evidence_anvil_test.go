package index

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// rpcCounter is a JSON-RPC endpoint on loopback in front of a node that
// counts the calls by method, and the eth_getLogs calls that read
// transfers into payTo addresses (no topic 1) apart from those that look
// for fundings (a topic 1).
type rpcCounter struct {
	*httptest.Server
	mu        sync.Mutex
	calls     map[string]int
	transfers int
	fundings  int
}

func newRPCCounter(t testing.TB, target string) *rpcCounter {
	t.Helper()
	c := &rpcCounter{calls: map[string]int{}}
	client := &http.Client{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.count(body)
		resp, err := client.Post(target, "application/json", bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(c.Server.Close)
	return c
}

type rpcCall struct {
	Method string            `json:"method"`
	Params []json.RawMessage `json:"params"`
}

func (c *rpcCounter) count(body []byte) {
	var calls []rpcCall
	if bytes.HasPrefix(bytes.TrimSpace(body), []byte("[")) {
		_ = json.Unmarshal(body, &calls)
	} else {
		var one rpcCall
		_ = json.Unmarshal(body, &one)
		calls = append(calls, one)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, call := range calls {
		c.calls[call.Method]++
		if call.Method != "eth_getLogs" || len(call.Params) == 0 {
			continue
		}
		var q struct {
			Topics []json.RawMessage `json:"topics"`
		}
		_ = json.Unmarshal(call.Params[0], &q)
		if len(q.Topics) > 1 && string(q.Topics[1]) != "null" {
			c.fundings++
		} else {
			c.transfers++
		}
	}
}

// take returns the counts since the last take and resets them.
func (c *rpcCounter) take() (calls map[string]int, transfers, fundings int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls, transfers, fundings = c.calls, c.transfers, c.fundings
	c.calls, c.transfers, c.fundings = map[string]int{}, 0, 0
	return calls, transfers, fundings
}

// usdcChain sends USDC transfers and EIP-3009 settlements on an anvil
// node with Circle's USDC.
type usdcChain struct {
	t     testing.TB
	node  *anviltest.Node
	token *contracts.Artifact
	// withVRS is the name of transferWithAuthorization's (v, r, s)
	// overload in the token's ABI.
	withVRS string
}

func newUSDCChain(t testing.TB, node *anviltest.Node) *usdcChain {
	t.Helper()
	token, err := contracts.Load(contracts.FiatTokenV2_2)
	require.NoError(t, err)
	c := &usdcChain{t: t, node: node, token: token}
	for name, m := range token.ABI.Methods {
		if m.RawName == "transferWithAuthorization" && len(m.Inputs) == 9 {
			c.withVRS = name
		}
	}
	require.NotEmpty(t, c.withVRS)
	return c
}

// devKey returns development account i's key.
func devKey(t testing.TB, i uint32) *ecdsa.PrivateKey {
	t.Helper()
	key, err := devchain.DeriveKey(devchain.Mnemonic, i)
	require.NoError(t, err)
	return key
}

func addr(key *ecdsa.PrivateKey) common.Address { return crypto.PubkeyToAddress(key.PublicKey) }

// transfer sends value from from's key to to (a plain transfer) and
// returns its receipt.
func (c *usdcChain) transfer(from *ecdsa.PrivateKey, to common.Address, value int64) *types.Receipt {
	c.t.Helper()
	data, err := c.token.ABI.Pack("transfer", to, big.NewInt(value))
	require.NoError(c.t, err)
	return c.node.Transact(from, devchain.USDC, data)
}

// settlementData returns the call of an EIP-3009 settlement: payer's
// authorization of value to payTo.
func (c *usdcChain) settlementData(payer *ecdsa.PrivateKey, payTo common.Address, value int64) []byte {
	c.t.Helper()
	var nonce common.Hash
	_, err := rand.Read(nonce[:])
	require.NoError(c.t, err)
	auth := evm.Authorization{From: addr(payer), To: payTo, Value: big.NewInt(value), ValidAfter: big.NewInt(0),
		ValidBefore: big.NewInt(time.Now().Add(time.Hour).Unix()), Nonce: nonce}
	sig, err := auth.Sign(payer, &evm.Domain{Name: "USD Coin", Version: "2", ChainID: big.NewInt(anviltest.ChainID), VerifyingContract: devchain.USDC})
	require.NoError(c.t, err)
	data, err := c.token.ABI.Pack(c.withVRS, auth.From, auth.To, auth.Value, auth.ValidAfter, auth.ValidBefore, auth.Nonce,
		sig[64], common.BytesToHash(sig[:32]), common.BytesToHash(sig[32:64]))
	require.NoError(c.t, err)
	return data
}

// settle has sender send payer's EIP-3009 authorization of value to payTo
// and returns its receipt.
func (c *usdcChain) settle(sender, payer *ecdsa.PrivateKey, payTo common.Address, value int64) *types.Receipt {
	c.t.Helper()
	return c.node.Transact(sender, devchain.USDC, c.settlementData(payer, payTo, value))
}

// sellerItem is a listing's item of resource, paid to payTo on network.
func sellerItem(resource, network, asset string, payTo common.Address) map[string]any {
	return map[string]any{"resource": resource, "type": "http", "x402Version": 2,
		"accepts": []any{map[string]any{"scheme": "exact", "network": network, "amount": "10000", "asset": asset, "payTo": payTo.Hex()}}}
}

// chainRiver returns a River client, started, that runs the chain reader's
// job as the worker does, and the function that runs one job and waits
// for it.
func chainRiver(ctx context.Context, t *testing.T, db *dbtest.DB, reader *ChainReader) func() {
	t.Helper()
	workers := river.NewWorkers()
	require.NoError(t, RegisterChain(reader)(workers))
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{
		Queues:            map[string]river.QueueConfig{jobs.QueueIndex: {MaxWorkers: 1}},
		Workers:           workers,
		FetchPollInterval: 100 * time.Millisecond,
		TestOnly:          true,
		Logger:            slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	completed, cancel := rc.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	t.Cleanup(cancel)
	require.NoError(t, rc.Start(ctx))
	t.Cleanup(func() { require.NoError(t, rc.Stop(context.WithoutCancel(ctx))) })
	return func() {
		t.Helper()
		res, err := rc.Insert(ctx, ChainArgs{}, nil)
		require.NoError(t, err)
		require.False(t, res.UniqueSkippedAsDuplicate)
		select {
		case e := <-completed:
			require.Equal(t, river.EventKindJobCompleted, e.Kind, "%+v", e.Job.Errors)
			require.Equal(t, "index.chain", e.Job.Kind)
		case <-time.After(30 * time.Second):
			t.Fatal("the chain job did not finish")
		}
		// The job is unique per minute: clear the way for the next run.
		_, err = rc.JobDelete(ctx, res.Job.ID)
		require.NoError(t, err)
	}
}

// TestEvidenceAnvil makes, on anvil with Circle's USDC, EIP-3009
// settlements sent by a known facilitator, by another relayer and by the
// seller itself, plain transfers, a payment of the seller to itself and a
// payer funded by the seller; the chain reader, run as River runs it,
// counts them per seller with their senders and wash signal, with one
// eth_getLogs call for the range's transfers; then a reorganisation
// replaces the blocks of the wash payments and the figures drop.
func TestEvidenceAnvil(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
	db := dbtest.Schema(ctx, t)
	chain := newUSDCChain(t, node)
	counter := newRPCCounter(t, node.URL)
	endpoints, err := ethrpc.New(ctx, &ethrpc.Config{Network: "eip155:8453", URLs: []string{counter.URL}})
	require.NoError(t, err)
	require.NoError(t, endpoints.Start(ctx))
	t.Cleanup(endpoints.Stop)

	sellerA, sellerB := devKey(t, 2), devKey(t, 3)
	facilitator, relayer := devKey(t, 4), devKey(t, 5)
	payer1, payer2 := devKey(t, 6), devKey(t, 7)
	wash, err := crypto.GenerateKey()
	require.NoError(t, err)

	// The index lists alpha (paid to A), beta (paid to B), gamma (paid on
	// Polygon, a network without endpoints) and delta (no payTo).
	src := &listing{items: []map[string]any{
		sellerItem("https://alpha.test/pay", "eip155:8453", usdc, addr(sellerA)),
		sellerItem("https://beta.test/pay", "eip155:8453", usdc, addr(sellerB)),
		sellerItem("https://gamma.test/pay", "eip155:137", "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359", addr(sellerA)),
		{"resource": "https://delta.test/pay", "type": "http", "x402Version": 2, "accepts": []any{}},
	}}
	srv := httptest.NewServer(src)
	t.Cleanup(srv.Close)
	require.NoError(t, newCrawler(db, srv.URL, 100).FullPass(ctx, nil))

	reader := NewChainReader(&ChainReaderConfig{Pool: db.Pool, Chains: map[string]Chain{"eip155:8453": endpoints},
		Finality: map[string]evm.FinalityPolicy{"eip155:8453": {}}, Facilitators: map[string]string{lower(addr(facilitator)): "TestFac"}})
	runJob := chainRiver(ctx, t, db, reader)
	r := NewReader(db.Pool, nil)

	// Before any read: nothing measured.
	d, err := r.HostDetail(ctx, "alpha.test")
	require.NoError(t, err)
	require.Nil(t, d.Host.Evidence)
	runJob() // the cursor starts at the head
	counter.take()

	chain.settle(facilitator, payer1, addr(sellerA), 10_000)
	chain.settle(facilitator, payer1, addr(sellerA), 10_000)
	chain.settle(relayer, payer2, addr(sellerA), 20_000)
	chain.transfer(payer2, addr(sellerA), 5_000)
	chain.settle(sellerB, payer1, addr(sellerB), 30_000)
	// The wash: A funds a new payer, which pays A (A settles it), and A
	// pays itself.
	funding := chain.transfer(sellerA, addr(wash), 100_000)
	chain.settle(sellerA, wash, addr(sellerA), 50_000)
	chain.transfer(sellerA, addr(sellerA), 1_000)

	runJob()
	calls, transfers, fundings := counter.take()
	require.Equal(t, 1, transfers, "one eth_getLogs call reads the range's transfers")
	require.Equal(t, 1, fundings, "one eth_getLogs call looks for the new payers' fundings")
	require.Equal(t, 7, calls["eth_getTransactionReceipt"], "the receipt of each transaction holding a transfer, once")
	require.Zero(t, calls["eth_getBlockReceipts"], "a block's receipts are read whole only for many transfers")

	d, err = r.HostDetail(ctx, "alpha.test")
	require.NoError(t, err)
	a := d.Host.Evidence
	require.NotNil(t, a)
	require.Equal(t, []string{"eip155:8453"}, a.Networks)
	require.Equal(t, EvidenceWindow{Transactions: 6, VolumeUSDC: "0.096000", Payers: 4}, a.Last30d)
	require.Equal(t, a.Last30d, a.Last24h)
	require.Equal(t, a.Last30d, a.Last7d)
	require.Equal(t, int64(4), a.Settlements30d, "the plain transfers are not EIP-3009 settlements")
	senders := map[string]EvidenceSender{}
	for _, s := range a.Senders {
		senders[s.Address] = s
	}
	require.Equal(t, EvidenceSender{Address: lower(addr(facilitator)), Class: SenderFacilitator, Name: "TestFac", Transactions: 2, VolumeUSDC: "0.020000"}, senders[lower(addr(facilitator))])
	require.Equal(t, EvidenceSender{Address: lower(addr(relayer)), Class: SenderOther, Transactions: 1, VolumeUSDC: "0.020000"}, senders[lower(addr(relayer))])
	require.Equal(t, EvidenceSender{Address: lower(addr(payer2)), Class: SenderPayer, Transactions: 1, VolumeUSDC: "0.005000"}, senders[lower(addr(payer2))])
	require.Equal(t, EvidenceSender{Address: lower(addr(sellerA)), Class: SenderSeller, Transactions: 2, VolumeUSDC: "0.051000"}, senders[lower(addr(sellerA))])
	require.Len(t, a.Senders, 4)
	require.Equal(t, lower(addr(wash)), *a.Wash.TopPayer)
	require.InDelta(t, 50_000.0/96_000, *a.Wash.TopPayerShare, 1e-9)
	require.Equal(t, new(int64(1)), a.Wash.FundedPayers, "the payer A funded before it paid")
	require.Equal(t, int64(1), a.Wash.SelfPayments, "A paid itself")
	require.Len(t, d.PayTos, 1)
	require.Equal(t, a.Last30d, d.PayTos[0].Evidence.Last30d)

	d, err = r.HostDetail(ctx, "beta.test")
	require.NoError(t, err)
	b := d.Host.Evidence
	require.NotNil(t, b)
	require.Equal(t, EvidenceWindow{Transactions: 1, VolumeUSDC: "0.030000", Payers: 1}, b.Last30d)
	require.Equal(t, []EvidenceSender{{Address: lower(addr(sellerB)), Class: SenderSeller, Transactions: 1, VolumeUSDC: "0.030000"}}, b.Senders)
	require.Equal(t, Wash{TopPayer: new(lower(addr(payer1))), TopPayerShare: new(1.0), FundedPayers: new(int64(0))}, b.Wash)
	// Not measured: a payTo on a network without endpoints, or none.
	for _, host := range []string{"gamma.test", "delta.test"} {
		d, err = r.HostDetail(ctx, host)
		require.NoError(t, err)
		require.Nil(t, d.Host.Evidence, host)
		require.Empty(t, d.PayTos, host)
	}

	// Sorts and filters.
	ans, err := r.Search(ctx, HostQuery{Sort: "volume_30d", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"alpha.test", "beta.test"}, hostNames(ans.Hosts)[:2], "the measured first, the most volume first")
	for _, tc := range []struct {
		q    HostQuery
		want []string
	}{
		{HostQuery{MinPayers: 2}, []string{"alpha.test"}},
		{HostQuery{MinVolumeUSDC: "0.03"}, []string{"alpha.test", "beta.test"}},
		{HostQuery{MinVolumeUSDC: "0.031"}, []string{"alpha.test"}},
		{HostQuery{MaxTopPayerShare: new(0.9)}, []string{"alpha.test"}},
	} {
		tc.q.Sort = "host"
		require.NoError(t, tc.q.Check())
		ans, err := r.Search(ctx, tc.q)
		require.NoError(t, err)
		require.Equal(t, tc.want, hostNames(ans.Hosts), "%+v", tc.q)
	}

	// A reorganisation replaces the blocks from the funding on: the wash
	// is undone, and the figures drop.
	head, err := node.Client.BlockNumber(ctx)
	require.NoError(t, err)
	depth := head - funding.BlockNumber.Uint64() + 1
	require.NoError(t, node.Call(ctx, nil, "anvil_reorg", depth, []any{}))
	runJob()
	d, err = r.HostDetail(ctx, "alpha.test")
	require.NoError(t, err)
	a = d.Host.Evidence
	require.NotNil(t, a)
	require.Equal(t, EvidenceWindow{Transactions: 4, VolumeUSDC: "0.045000", Payers: 2}, a.Last30d)
	require.Equal(t, int64(3), a.Settlements30d)
	require.Equal(t, Wash{TopPayer: new(lower(addr(payer2))), TopPayerShare: new(25_000.0 / 45_000), FundedPayers: new(int64(0))}, a.Wash)
	require.Len(t, a.Senders, 3, "the seller sent nothing left")
	d, err = r.HostDetail(ctx, "beta.test")
	require.NoError(t, err)
	require.Equal(t, EvidenceWindow{Transactions: 1, VolumeUSDC: "0.030000", Payers: 1}, d.Host.Evidence.Last30d, "before the reorganisation: kept")
}

func hostNames(hosts []Host) []string {
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = h.Host
	}
	return out
}

// TestEvidenceFinality reads only up to the block the network's finality
// policy holds final: a transfer fewer than depth blocks deep is not
// counted yet, and is once it is deep enough.
func TestEvidenceFinality(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
	db := dbtest.Schema(ctx, t)
	chain := newUSDCChain(t, node)
	endpoints, err := ethrpc.New(ctx, &ethrpc.Config{Network: "eip155:8453", URLs: []string{node.URL}})
	require.NoError(t, err)
	require.NoError(t, endpoints.Start(ctx))
	t.Cleanup(endpoints.Stop)
	seller, payer := devKey(t, 2), devKey(t, 6)
	srv := httptest.NewServer(&listing{items: []map[string]any{sellerItem("https://alpha.test/pay", "eip155:8453", usdc, addr(seller))}})
	t.Cleanup(srv.Close)
	require.NoError(t, newCrawler(db, srv.URL, 100).FullPass(ctx, nil))

	const depth = 5
	reader := NewChainReader(&ChainReaderConfig{Pool: db.Pool, Chains: map[string]Chain{"eip155:8453": endpoints},
		Finality: map[string]evm.FinalityPolicy{"eip155:8453": {Depth: depth}}})
	_, err = reader.Run(ctx)
	require.NoError(t, err)
	// The cursor starts depth blocks below the head: mine past it first.
	for range depth {
		require.NoError(t, node.Mine(ctx))
	}
	paid := chain.transfer(payer, addr(seller), 7_000)
	run, err := reader.Run(ctx)
	require.NoError(t, err)
	require.Zero(t, run.Transfers, "not final yet")
	cur, err := store.ChainCursorGet(ctx, db.Pool, "eip155:8453")
	require.NoError(t, err)
	require.Less(t, cur.Block, paid.BlockNumber.Uint64())
	for range depth {
		require.NoError(t, node.Mine(ctx))
	}
	run, err = reader.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, run.Transfers)
	d, err := NewReader(db.Pool, nil).HostDetail(ctx, "alpha.test")
	require.NoError(t, err)
	require.Equal(t, EvidenceWindow{Transactions: 1, VolumeUSDC: "0.007000", Payers: 1}, d.Host.Evidence.Last30d)
}
