package evm_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

// The tests below settle on anvil, a node that is not ours, with blocks on
// a clock as on Base, and the relayer's nonces in Postgres as the service
// keeps them. Each ends with the same checks: every settlement done once,
// nothing queued behind a nonce gap, the receiver's balance grown by what
// was settled.

// anvilBundle is a node, the nonce store shared by the relayers of a test,
// and a verifier of the node.
type anvilBundle struct {
	node     *anviltest.Node
	nonces   store.RelayerNonces
	verifier *evm.Verifier
	payTo    common.Address
	start    *big.Int // payTo's balance at the start
}

func setupAnvil(t *testing.T, cfg *anviltest.Config) *anvilBundle {
	t.Helper()
	ctx := context.Background()
	node := anviltest.Start(t, cfg)
	db := dbtest.Schema(ctx, t)
	v, err := evm.NewVerifier(&evm.VerifierConfig{Chains: map[string]evm.Reader{"eip155:8453": node.Client}})
	require.NoError(t, err)
	b := &anvilBundle{node: node, nonces: store.RelayerNonces{DB: db.Pool}, verifier: v,
		payTo: chain.Account(devchain.PayToAccount).Address}
	b.start = b.balance(t, b.payTo)
	return b
}

// relayer returns a relayer of the node through backend (the node itself
// when nil), sharing the bundle's nonce store, as another worker process
// with the same RELAYER_KEY would.
func (b *anvilBundle) relayer(t *testing.T, backend evm.Backend, opts ...func(*evm.RelayerConfig)) *evm.Relayer {
	t.Helper()
	if backend == nil {
		backend = b.node.Client
	}
	cfg := &evm.RelayerConfig{
		Key:          chain.Account(devchain.RelayerAccount).Key,
		Chains:       map[string]evm.Backend{"eip155:8453": backend},
		Nonces:       b.nonces,
		KeepEvery:    200 * time.Millisecond,
		ReplaceAfter: 3 * time.Second,
		OrphanAfter:  3 * time.Second,
		RPCTimeout:   2 * time.Second,
	}
	for _, opt := range opts {
		opt(cfg)
	}
	r, err := evm.NewRelayer(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)
	return r
}

// payments returns n verified payments of the development accounts 0-7.
func (b *anvilBundle) payments(t *testing.T, n int) []*x402.Payment {
	t.Helper()
	out := make([]*x402.Payment, n)
	for i := range out {
		key := devAccountKey(t, i%8)
		p, err := b.verifier.Verify(context.Background(), requirement(), newPayment(t, key, requirement()).payload(t, requirement()))
		require.NoError(t, err)
		out[i] = p
	}
	return out
}

func devAccountKey(t *testing.T, i int) *ecdsa.PrivateKey {
	t.Helper()
	key, err := devchain.DeriveKey(devchain.Mnemonic, uint32(i))
	require.NoError(t, err)
	return key
}

func (b *anvilBundle) balance(t *testing.T, addr common.Address) *big.Int {
	t.Helper()
	token, err := contracts.Load(contracts.FiatTokenV2_2)
	require.NoError(t, err)
	input, err := token.ABI.Pack("balanceOf", addr)
	require.NoError(t, err)
	out, err := b.node.Client.CallContract(context.Background(), ethereum.CallMsg{To: &devchain.USDC, Data: input}, nil)
	require.NoError(t, err)
	v, err := token.ABI.Unpack("balanceOf", out)
	require.NoError(t, err)
	return v[0].(*big.Int)
}

// settleAllOK settles payments concurrently, spread over relayers, and
// requires each to succeed.
func settleAllOK(t *testing.T, payments []*x402.Payment, relayers ...*evm.Relayer) []*x402.SettleResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	results, errs := settleAll(payments, func(i int, p *x402.Payment) (*x402.SettleResponse, error) {
		return settleRetried(ctx, relayers[i%len(relayers)], p)
	})
	for i := range payments {
		require.NoError(t, errs[i], "settlement %d", i)
		require.True(t, results[i].Success, "settlement %d: %s", i, results[i].ErrorReason)
	}
	return results
}

// requireClean requires the node to hold none of the relayer's
// transactions (none queued behind a gap, none pending) once the chain
// caught up, and the receiver to have received n payments.
func (b *anvilBundle) requireClean(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		st, err := b.node.TxPool(ctx)
		return err == nil && st.Pending == 0 && st.Queued == 0
	}, 30*time.Second, 100*time.Millisecond, "the node still holds transactions")
	st, err := b.node.TxPool(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Queued, "transactions queued behind a nonce gap")
	got := new(big.Int).Sub(b.balance(t, b.payTo), b.start)
	want := new(big.Int).Mul(big.NewInt(int64(n)), big.NewInt(10_000))
	require.Equal(t, want.String(), got.String(), "the receiver got each payment once")
}

// TestAnvil_SharedKey settles through two relayers with one key and one
// nonce store, as two worker processes do, batched through Multicall3 and
// a transaction each: no nonce is used twice, none is left a gap.
func TestAnvil_SharedKey(t *testing.T) {
	t.Parallel()
	for _, mode := range relayerModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			b := setupAnvil(t, &anviltest.Config{BlockTime: time.Second})
			a, c := b.relayer(t, nil, mode.opts...), b.relayer(t, nil, mode.opts...)
			payments := b.payments(t, 24)
			results := settleAllOK(t, payments, a, c)
			b.requireClean(t, len(payments))
			for _, r := range results[:2] {
				if r.Cost != nil {
					require.Positive(t, r.Cost.GasUsed)
				}
			}
		})
	}
}

// TestAnvil_DroppedTransaction drops the relayer's transaction from the
// node's pool after it is sent: the relayer replaces it, and the
// settlement completes.
func TestAnvil_DroppedTransaction(t *testing.T) {
	t.Parallel()
	b := setupAnvil(t, &anviltest.Config{BlockTime: 2 * time.Second})
	dropper := &dropSends{Backend: b.node.Client, node: b.node}
	dropper.drop.Store(1)
	r := b.relayer(t, dropper)
	settleAllOK(t, b.payments(t, 1), r)
	require.EqualValues(t, 0, dropper.drop.Load(), "a transaction was dropped")
	b.requireClean(t, 1)
}

// TestAnvil_LostTransactionBehindOthers has the node lose a transaction
// (and, as anvil does, those after it) with more than a few sent before
// it, none mined: every later one waits behind the gap, and the relayer,
// told by the node which nonce it lacks, gives them again at its next pass
// rather than when they have waited ReplaceAfter or become the lowest.
func TestAnvil_LostTransactionBehindOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAnvil(t, &anviltest.Config{BlockTime: time.Hour})
	mined, err := b.node.Client.NonceAt(ctx, chain.Account(devchain.RelayerAccount).Address, nil)
	require.NoError(t, err)
	const n = 16
	dropper := &dropNonce{Backend: b.node.Client, node: b.node, nonce: mined + 11}
	r := b.relayer(t, dropper, func(c *evm.RelayerConfig) { c.ReplaceAfter = time.Minute })
	payments := b.payments(t, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		settleAllOK(t, payments, r)
	}()
	require.Eventually(t, func() bool { return dropper.dropped.Load() }, 60*time.Second, 10*time.Millisecond, "the transaction is lost")
	lost := time.Now()
	require.Eventually(t, func() bool {
		st, err := b.node.TxPool(ctx)
		return err == nil && st.Pending == n && st.Queued == 0
	}, 3*time.Second, 20*time.Millisecond, "the lost transaction is given again")
	t.Logf("the pool was whole again %s after the loss", time.Since(lost).Round(time.Millisecond))
	require.NoError(t, b.node.Mine(ctx))
	<-done
	b.requireClean(t, n)
}

// TestAnvil_KeeperWithoutWaits has the node lose a transaction while no
// settlement awaits its receipt (the settlement's wait ended before
// KeepEvery, so it never asked for a pass): the keeper, on its own
// goroutine, gives it to the node again at an idle pass, and the
// settlement's next attempt finds its payment settled by it.
func TestAnvil_KeeperWithoutWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAnvil(t, &anviltest.Config{BlockTime: time.Hour})
	dropper := &dropSends{Backend: b.node.Client, node: b.node}
	dropper.drop.Store(1)
	r := b.relayer(t, dropper, func(c *evm.RelayerConfig) {
		c.ReceiptTimeout = 300 * time.Millisecond
		c.KeepEvery = time.Second
		c.KeepIdle = 500 * time.Millisecond
		c.ReplaceAfter = time.Minute
	})
	p := b.payments(t, 1)[0]
	_, err := r.Settle(ctx, p)
	require.ErrorContains(t, err, "no receipt within the receipt timeout")
	require.Equal(t, int32(0), dropper.drop.Load(), "the transaction was dropped")
	require.Eventually(t, func() bool {
		st, err := b.node.TxPool(ctx)
		return err == nil && st.Pending == 1
	}, 10*time.Second, 20*time.Millisecond, "the lost transaction is given again")
	require.NoError(t, b.node.Mine(ctx))
	settleAllOK(t, []*x402.Payment{p}, r)
	b.requireClean(t, 1)
}

// dropNonce drops the first transaction of nonce it sends from the node's
// pool once the node holds it with the transactions that follow it.
type dropNonce struct {
	evm.Backend
	node    *anviltest.Node
	nonce   uint64
	dropped atomic.Bool
	hash    atomic.Pointer[common.Hash]
	later   sync.Map // nonces above nonce+2 that were sent
}

// SendTransaction sends tx and, once the transaction of the chosen nonce
// and one of a nonce at least three above it have both been sent (in
// whichever order the relayer's concurrent sends made), drops the former.
func (d *dropNonce) SendTransaction(ctx context.Context, tx *types.Transaction) error {
	if err := d.Backend.SendTransaction(ctx, tx); err != nil {
		return err
	}
	switch n := tx.Nonce(); {
	case n == d.nonce:
		h := tx.Hash()
		d.hash.CompareAndSwap(nil, &h)
	case n > d.nonce+2:
		d.later.Store(n, true)
	}
	laterSent := false
	d.later.Range(func(any, any) bool { laterSent = true; return false })
	if h := d.hash.Load(); h != nil && laterSent && !d.dropped.Swap(true) {
		return d.node.Call(ctx, nil, "anvil_dropTransaction", *h)
	}
	return nil
}

// dropSends drops the next drop transactions it sends from the node's pool
// right after sending them.
type dropSends struct {
	evm.Backend
	node *anviltest.Node
	drop atomic.Int32
}

func (d *dropSends) SendTransaction(ctx context.Context, tx *types.Transaction) error {
	if err := d.Backend.SendTransaction(ctx, tx); err != nil {
		return err
	}
	if d.drop.Add(-1) >= 0 {
		return d.node.Call(ctx, nil, "anvil_dropTransaction", tx.Hash())
	}
	d.drop.Store(0)
	return nil
}

// spikeAfterSend raises the next block's base fee to 50 gwei after each
// transaction it sends is taken.
type spikeAfterSend struct {
	evm.Backend
	node   *anviltest.Node
	spikes atomic.Int32
}

func (s *spikeAfterSend) SendTransaction(ctx context.Context, tx *types.Transaction) error {
	if err := s.Backend.SendTransaction(ctx, tx); err != nil {
		return err
	}
	if tx.GasFeeCap().Cmp(big.NewInt(50e9)) < 0 {
		s.spikes.Add(1)
		return s.node.Call(ctx, nil, "anvil_setNextBlockBaseFeePerGas", "0x"+big.NewInt(50e9).Text(16))
	}
	return nil
}

// TestAnvil_OrphanedNonce leaves a nonce allocated by a process that died
// before sending: the later settlements' transactions queue behind it
// until a relayer fills it.
func TestAnvil_OrphanedNonce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAnvil(t, &anviltest.Config{BlockTime: time.Second})
	relayerAddr := chain.Account(devchain.RelayerAccount).Address
	mined, err := b.node.Client.NonceAt(ctx, relayerAddr, nil)
	require.NoError(t, err)
	_, err = b.nonces.AllocateNonce(ctx, "eip155:8453", relayerAddr, mined, "a-process-that-died")
	require.NoError(t, err)
	r := b.relayer(t, nil)
	settleAllOK(t, b.payments(t, 3), r)
	b.requireClean(t, 3)
}

// TestAnvil_FeeSpike raises the next block's base fee far above what the
// relayer's transactions offer: they are replaced with higher fees and
// mined. With SETTLEMENT_MAX_FEE below the spike, settlements wait, say so,
// and go once the fee falls back.
func TestAnvil_FeeSpike(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("Replaced", func(t *testing.T) {
		t.Parallel()
		b := setupAnvil(t, &anviltest.Config{BlockTime: 2 * time.Second})
		// Each transaction taken is overtaken by a spike in the next
		// block's base fee: it sits in the pool until replaced.
		spiker := &spikeAfterSend{Backend: b.node.Client, node: b.node}
		r := b.relayer(t, spiker)
		settleAllOK(t, b.payments(t, 2), r)
		require.Positive(t, spiker.spikes.Load())
		b.requireClean(t, 2)
	})
	t.Run("RefusedUnderBaseFee", func(t *testing.T) {
		t.Parallel()
		// A relayer whose fees were read before a spike: the node refuses
		// its transaction, which is priced again at the same nonce.
		b := setupAnvil(t, &anviltest.Config{BlockTime: time.Second})
		r := b.relayer(t, nil, func(c *evm.RelayerConfig) { c.FeeCacheFor = time.Hour })
		settleAllOK(t, b.payments(t, 1), r)
		require.NoError(t, b.node.Call(ctx, nil, "anvil_setNextBlockBaseFeePerGas", "0x"+big.NewInt(50e9).Text(16)))
		require.NoError(t, b.node.Mine(ctx))
		settleAllOK(t, b.payments(t, 2), r)
		b.requireClean(t, 3)
	})
	t.Run("CappedWaits", func(t *testing.T) {
		t.Parallel()
		b := setupAnvil(t, &anviltest.Config{BlockTime: time.Second})
		r := b.relayer(t, nil, func(c *evm.RelayerConfig) { c.MaxFee = big.NewInt(5e9) })
		require.NoError(t, b.node.Call(ctx, nil, "anvil_setNextBlockBaseFeePerGas", "0x"+big.NewInt(50e9).Text(16)))
		require.NoError(t, b.node.Mine(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			settleAllOK(t, b.payments(t, 2), r)
		}()
		require.Eventually(t, func() bool { return len(r.FeeWait()) == 1 }, 20*time.Second, 50*time.Millisecond, "settlements wait for the fee")
		select {
		case <-done:
			t.Fatal("settled above SETTLEMENT_MAX_FEE")
		default:
		}
		require.NoError(t, b.node.Call(ctx, nil, "anvil_setNextBlockBaseFeePerGas", "0x"+big.NewInt(1e9).Text(16)))
		<-done
		require.Empty(t, r.FeeWait())
		b.requireClean(t, 2)
	})
}

// TestAnvil_NodeRestarted restarts the node from its dumped state while
// settlements wait for their block: the pool's transactions are lost and
// the relayer sends them again.
func TestAnvil_NodeRestarted(t *testing.T) {
	t.Parallel()
	b := setupAnvil(t, &anviltest.Config{BlockTime: 2 * time.Second})
	proxy := newRPCProxy(t, b.node.URL)
	client, err := ethclient.Dial(proxy.URL)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	r := b.relayer(t, client, batched)
	payments := b.payments(t, 6)
	done := make(chan struct{})
	go func() {
		defer close(done)
		settleAllOK(t, payments, r)
	}()
	require.Eventually(t, func() bool {
		st, err := b.node.TxPool(context.Background())
		return err == nil && st.Pending > 0
	}, 20*time.Second, 20*time.Millisecond, "a settlement is sent")
	b.node.Restart()
	<-done
	b.requireClean(t, len(payments))
}

// TestAnvil_AnswersLost loses the node's answers to the relayer's sends
// (the node took the transaction, the answer never came) and delays the
// others: the relayer keeps the nonce, sends the same transaction again,
// and every settlement completes once.
func TestAnvil_AnswersLost(t *testing.T) {
	t.Parallel()
	b := setupAnvil(t, &anviltest.Config{BlockTime: time.Second})
	proxy := newRPCProxy(t, b.node.URL)
	proxy.loseSends.Store(1)
	proxy.delay.Store(int64(50 * time.Millisecond))
	client, err := ethclient.Dial(proxy.URL)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	r := b.relayer(t, client, batched)
	payments := b.payments(t, 12)
	settleAllOK(t, payments, r)
	require.LessOrEqual(t, proxy.loseSends.Load(), int32(0), "answers were lost")
	b.requireClean(t, len(payments))
}

// rpcProxy forwards JSON-RPC to a node on loopback, delaying answers by
// delay and cutting the connection after forwarding the next loseSends
// eth_sendRawTransaction requests (the node got them, their answers never
// come).
type rpcProxy struct {
	*httptest.Server
	delay     atomic.Int64
	loseSends atomic.Int32
}

func newRPCProxy(t *testing.T, target string) *rpcProxy {
	t.Helper()
	p := &rpcProxy{}
	u, err := url.Parse(target)
	require.NoError(t, err)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if d := time.Duration(p.delay.Load()); d > 0 {
			// A slow node: it answers after d, unless the client left.
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, u.String(), strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if strings.Contains(string(body), "eth_sendRawTransaction") && p.loseSends.Add(-1) >= 0 {
			// The node took it; the answer is lost with the connection.
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
					return
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}))
	t.Cleanup(p.Server.Close)
	return p
}

// TestAnvil_SmartWallets pays from contract wallets on Circle's USDC, which
// checks their signatures itself (EIP-1271): a wallet already deployed, and
// one not deployed yet whose ERC-6492 signature carries the factory call;
// settlement deploys it and moves the funds, alone and in a batch.
func TestAnvil_SmartWallets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, mode := range relayerModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			b := setupAnvil(t, &anviltest.Config{BlockTime: time.Second})
			// wallet returns a new wallet's address, funded, and the call
			// that deploys it.
			wallet := func(owner *ecdsa.PrivateKey) (common.Address, []byte) {
				var salt [32]byte
				_, err := rand.Read(salt[:])
				require.NoError(t, err)
				return b.fundedWallet(t, owner, salt)
			}

			deployedOwner := newKey(t)
			deployed, deploy := wallet(deployedOwner)
			b.node.Transact(devAccountKey(t, 7), devchain.WalletFactory, deploy)
			pay := newPayment(t, deployedOwner, requirement())
			pay.auth.From = deployed
			p1, err := b.verifier.Verify(ctx, requirement(), pay.payload(t, requirement()))
			require.NoError(t, err)
			require.Equal(t, deployed.Hex(), p1.Payer)

			laterOwner := newKey(t)
			later, deployLater := wallet(laterOwner)
			p2, err := b.verifier.Verify(ctx, requirement(), payment6492(t, laterOwner, later, devchain.WalletFactory, deployLater, laterOwner))
			require.NoError(t, err)
			code, err := b.node.Client.CodeAt(ctx, later, nil)
			require.NoError(t, err)
			require.Empty(t, code, "verification deployed nothing")

			settleAllOK(t, []*x402.Payment{p1, p2}, b.relayer(t, nil, mode.opts...))
			code, err = b.node.Client.CodeAt(ctx, later, nil)
			require.NoError(t, err)
			require.NotEmpty(t, code, "settlement deployed the wallet")
			for _, w := range []common.Address{deployed, later} {
				require.Zero(t, b.balance(t, w).Sign(), "wallet %s paid", w)
			}
			b.requireClean(t, 2)
		})
	}
}

// TestAnvil_BatchGas settles two waves of payments in batches on Circle's
// USDC: the first wave's batches ask for the gas of transfers sent alone
// (an estimate, half as much again), the second's for a quarter more than
// the first wave's transfers used inside their batches; every transfer
// still has the gas it needs.
func TestAnvil_BatchGas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAnvil(t, &anviltest.Config{BlockTime: time.Second})
	r := b.relayer(t, nil, batched)
	// ratio returns the smallest and the largest ratio of gas limit to gas
	// used among the batches of results holding 8 transfers or more (each
	// leaves two logs: Transfer and AuthorizationUsed).
	ratio := func(results []*x402.SettleResponse) (lo, hi float64) {
		lo = 1e9
		seen := map[string]bool{}
		for _, res := range results {
			if seen[res.Transaction] {
				continue
			}
			seen[res.Transaction] = true
			h := common.HexToHash(res.Transaction)
			tx, _, err := b.node.Client.TransactionByHash(ctx, h)
			require.NoError(t, err)
			receipt, err := b.node.Client.TransactionReceipt(ctx, h)
			require.NoError(t, err)
			f := float64(tx.Gas()) / float64(receipt.GasUsed)
			if len(receipt.Logs) < 2*8 {
				continue // too small a batch to teach or be taught
			}
			lo, hi = min(lo, f), max(hi, f)
		}
		return lo, hi
	}
	first := settleAllOK(t, b.payments(t, 24), r)
	lo1, _ := ratio(first)
	second := settleAllOK(t, b.payments(t, 24), r)
	lo2, hi2 := ratio(second)
	t.Logf("gas limit over gas used: first wave from %.2f, second wave %.2f-%.2f", lo1, lo2, hi2)
	require.Greater(t, lo1, 1.6, "the first batches ask for a transfer's gas alone")
	require.Less(t, lo1, 1e9, "the first wave had a batch of 8 or more")
	require.Less(t, hi2, 1.45, "later batches ask for what batched transfers use, and a quarter more")
	require.Greater(t, lo2, 1.0)
	require.Less(t, lo2, 1e9, "the second wave had a batch of 8 or more")
	b.requireClean(t, 48)
}

// TestAnvil_PoolBounded settles many more payments than a block holds
// (blocks of 3M gas, a second apart): the relayer keeps the transactions
// it has sent and not yet seen mined to two blocks' gas, the rest waiting
// in the batcher, and every payment is settled once. Two relayers sharing
// the key (two worker processes) share the two blocks.
func TestAnvil_PoolBounded(t *testing.T) {
	t.Parallel()
	for _, relayers := range []int{1, 2} {
		t.Run(fmt.Sprintf("%dRelayers", relayers), func(t *testing.T) {
			t.Parallel()
			testPoolBounded(t, relayers)
		})
	}
}

func testPoolBounded(t *testing.T, n int) {
	ctx := context.Background()
	const blockGas = 3_000_000
	b := setupAnvil(t, &anviltest.Config{BlockTime: time.Second, GasLimit: blockGas})
	rs := make([]*evm.Relayer, n)
	for i := range rs {
		rs[i] = b.relayer(t, nil, batched)
	}
	payments := b.payments(t, 300)
	var most atomic.Uint64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var content struct {
				Pending map[string]map[string]struct {
					Gas hexutil.Uint64 `json:"gas"`
				} `json:"pending"`
			}
			if err := b.node.Call(ctx, &content, "txpool_content"); err != nil {
				continue
			}
			var gas uint64
			for _, txs := range content.Pending {
				for _, tx := range txs {
					gas += uint64(tx.Gas)
				}
			}
			if gas > most.Load() {
				most.Store(gas)
			}
		}
	}()
	settleAllOK(t, payments, rs...)
	close(stop)
	<-watched
	t.Logf("the most gas the pending transactions of %d relayers asked for: %d (blocks of %d)", n, most.Load(), blockGas)
	require.Positive(t, most.Load())
	// Two blocks, and a batch each relayer may send just under it (and,
	// with two, before each has seen the other: a keeping pass).
	require.LessOrEqual(t, most.Load(), uint64(2*blockGas+n*n*blockGas/10))
	b.requireClean(t, len(payments))
}

// TestAnvil_BusyBatchesGather settles payments arriving one every 10 ms on
// 2-second blocks: once a batch awaits its block, the next ones gather for
// a while (busyLinger) rather than going out every linger with a transfer
// or two, each paying for a batch's cold reads.
func TestAnvil_BusyBatchesGather(t *testing.T) {
	t.Parallel()
	b := setupAnvil(t, &anviltest.Config{BlockTime: 2 * time.Second})
	r := b.relayer(t, nil, batched)
	payments := b.payments(t, 60)
	results, errs := settleSpaced(payments, 10*time.Millisecond, func(_ int, p *x402.Payment) (*x402.SettleResponse, error) {
		return r.Settle(context.Background(), p)
	})
	txs := map[string]bool{}
	for i := range payments {
		require.NoError(t, errs[i])
		require.True(t, results[i].Success, results[i].ErrorReason)
		txs[results[i].Transaction] = true
	}
	t.Logf("60 payments arriving over 600 ms settled in %d transactions", len(txs))
	// Every 20 ms (the linger) would be about 30; 12 on a quiet machine,
	// 17 seen while other suites loaded its two cores.
	require.LessOrEqual(t, len(txs), 20)
	b.requireClean(t, len(payments))
}

// fundedWallet returns the address of the devchain wallet factory's wallet
// of owner and salt, not deployed, funded with 10,000 of the token, and the
// call that deploys it.
func (b *anvilBundle) fundedWallet(t *testing.T, owner *ecdsa.PrivateKey, salt [32]byte) (common.Address, []byte) {
	t.Helper()
	ctx := context.Background()
	factory, err := contracts.Load(contracts.DevWalletFactory)
	require.NoError(t, err)
	token, err := contracts.Load(contracts.FiatTokenV2_2)
	require.NoError(t, err)
	input, err := factory.ABI.Pack("addressOf", crypto.PubkeyToAddress(owner.PublicKey), salt)
	require.NoError(t, err)
	out, err := b.node.Client.CallContract(ctx, ethereum.CallMsg{To: &devchain.WalletFactory, Data: input}, nil)
	require.NoError(t, err)
	vals, err := factory.ABI.Unpack("addressOf", out)
	require.NoError(t, err)
	addr := vals[0].(common.Address)
	transfer, err := token.ABI.Pack("transfer", addr, big.NewInt(10_000))
	require.NoError(t, err)
	b.node.Transact(devAccountKey(t, 7), devchain.USDC, transfer)
	deploy, err := factory.ABI.Pack("deploy", crypto.PubkeyToAddress(owner.PublicKey), salt)
	require.NoError(t, err)
	return addr, deploy
}
