package evm_test

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/bits"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/evmtest"
)

func TestRelayer_Settle(t *testing.T) {
	t.Parallel()
	for _, mode := range relayerModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			testRelayerSettle(t, func(t *testing.T, node evm.Backend) *evm.Relayer { return newRelayerOn(t, node, mode.opts...) }, mode.opts != nil)
		})
	}
}

// testRelayerSettle checks the settlements of relayers built by relayerOn;
// isBatched says whether they batch.
func testRelayerSettle(t *testing.T, relayerOn func(t *testing.T, node evm.Backend) *evm.Relayer, isBatched bool) {
	ctx := context.Background()
	v := newVerifier(t)
	r := relayerOn(t, chain.Client())
	payTo := chain.Account(devchain.PayToAccount).Address

	// verified returns a verified payment of key.
	verified := func(t *testing.T, p *payment) *x402.Payment {
		t.Helper()
		got, err := v.Verify(ctx, requirement(), p.payload(t, requirement()))
		require.NoError(t, err)
		return got
	}

	t.Run("MovesExactlyTheAmount", func(t *testing.T) {
		key := fundedKey(t, 25_000)
		from := crypto.PubkeyToAddress(key.PublicKey)
		p := verified(t, newPayment(t, key, requirement()))
		payToBefore := balance(t, payTo)
		resp, err := r.Settle(ctx, p)
		require.NoError(t, err)
		require.True(t, resp.Success, resp.ErrorReason)
		require.Equal(t, "eip155:8453", resp.Network)
		require.Equal(t, from.Hex(), resp.Payer)
		require.Equal(t, int64(15_000), balance(t, from).Int64())
		// Other tests pay the same recipient concurrently: look at this
		// transaction's own transfer.
		receipt, err := chain.Client().TransactionReceipt(ctx, common.HexToHash(resp.Transaction))
		require.NoError(t, err)
		require.Equal(t, types.ReceiptStatusSuccessful, receipt.Status)
		require.Equal(t, big.NewInt(10_000), transferred(t, receipt, from, payTo))
		require.GreaterOrEqual(t, balance(t, payTo).Cmp(new(big.Int).Add(payToBefore, big.NewInt(10_000))), 0)
		tx, _, err := chain.Client().TransactionByHash(ctx, receipt.TxHash)
		require.NoError(t, err)
		sender, err := types.Sender(types.LatestSignerForChainID(big.NewInt(8453)), tx)
		require.NoError(t, err)
		require.Equal(t, r.Address(), sender, "the relayer pays the gas")
		require.Equal(t, chain.Account(devchain.RelayerAccount).Address, sender)
	})

	t.Run("IdempotentAcrossAttemptsAndRestarts", func(t *testing.T) {
		key := fundedKey(t, 10_000)
		p := verified(t, newPayment(t, key, requirement()))
		first, err := r.Settle(ctx, p)
		require.NoError(t, err)
		require.True(t, first.Success)
		// The settlement that sent the transfer knows its gas.
		require.NotNil(t, first.Cost)
		require.Positive(t, first.Cost.GasUsed)
		require.Positive(t, first.Cost.FeeWei().Sign())
		// The job is retried (its completion was lost), in this process
		// and in a restarted one: the same transaction, no second transfer.
		again, err := r.Settle(ctx, p)
		require.NoError(t, err)
		require.Equal(t, onWire(first), onWire(again))
		restarted, err := relayerOn(t, chain.Client()).Settle(ctx, p)
		require.NoError(t, err)
		require.Equal(t, onWire(first), onWire(restarted))
		require.Zero(t, balance(t, crypto.PubkeyToAddress(key.PublicKey)).Sign())
	})

	t.Run("ReceiptLostAfterSend", func(t *testing.T) {
		// The transaction is sent, then the node stops answering before the
		// receipt is read: Settle fails and is retried; the retry reports
		// the transaction sent by the first attempt, and nothing moves
		// twice.
		flaky := &flakyBackend{Backend: chain.Client()}
		flaky.failReceipts.Store(true)
		fr := relayerOn(t, flaky)
		key := fundedKey(t, 30_000)
		p := verified(t, newPayment(t, key, requirement()))
		_, err := fr.Settle(ctx, p)
		require.ErrorContains(t, err, "connection reset")
		flaky.failReceipts.Store(false)
		resp, err := fr.Settle(ctx, p)
		require.NoError(t, err)
		require.True(t, resp.Success)
		require.Equal(t, flaky.sent(), []string{resp.Transaction}, "one transaction, reported by the retry")
		require.Equal(t, int64(20_000), balance(t, crypto.PubkeyToAddress(key.PublicKey)).Int64())
	})

	t.Run("SmartWalletUsesBytesSignature", func(t *testing.T) {
		owner := newKey(t)
		wallet := deployWallet(t, owner, 10_000)
		pay := newPayment(t, owner, requirement())
		pay.auth.From = wallet
		p := verified(t, pay)
		resp, err := r.Settle(ctx, p)
		require.NoError(t, err)
		require.True(t, resp.Success, resp.ErrorReason)
		require.Zero(t, balance(t, wallet).Sign())
		// A wallet's isValidSignature spends what gas it likes: never in a
		// batch, where it could spend the other transfers'.
		tx, _, err := chain.Client().TransactionByHash(ctx, common.HexToHash(resp.Transaction))
		require.NoError(t, err)
		require.Equal(t, devchain.USDC, *tx.To(), "sent to the token, not in a batch")
	})

	t.Run("VZeroOrOneIsNormalized", func(t *testing.T) {
		key := fundedKey(t, 10_000)
		pay := newPayment(t, key, requirement())
		sig, err := pay.auth.Sign(key, pay.domain)
		require.NoError(t, err)
		sig[64] -= 27
		pay.sig = sig
		resp, err := r.Settle(ctx, verified(t, pay))
		require.NoError(t, err)
		require.True(t, resp.Success, resp.ErrorReason)
	})

	t.Run("FundsGoneBeforeSettlement", func(t *testing.T) {
		// Two payments verified against the same 10,000: the second
		// cannot settle.
		key := fundedKey(t, 10_000)
		a := verified(t, newPayment(t, key, requirement()))
		b := verified(t, newPayment(t, key, requirement()))
		resp, err := r.Settle(ctx, a)
		require.NoError(t, err)
		require.True(t, resp.Success)
		resp, err = r.Settle(ctx, b)
		require.NoError(t, err)
		require.False(t, resp.Success)
		require.Equal(t, evm.ReasonInsufficientBalance, resp.ErrorReason)
		if !isBatched {
			require.Empty(t, resp.Transaction, "refused before sending")
		}
	})

	t.Run("CanceledAuthorization", func(t *testing.T) {
		key := fundedKey(t, 10_000)
		pay := newPayment(t, key, requirement())
		p := verified(t, pay)
		evmtest.CancelAuthorization(t, chain, pay.key, pay.auth.From, pay.auth.Nonce)
		resp, err := r.Settle(ctx, p)
		require.NoError(t, err)
		require.False(t, resp.Success)
		require.Equal(t, evm.ReasonNonceAlreadyUsed, resp.ErrorReason)
	})

	t.Run("UnreadablePayload", func(t *testing.T) {
		p := &x402.Payment{Network: "eip155:8453", Payer: "0x1", Nonce: "0x2", Amount: price, Asset: devchain.USDC.Hex(), Payload: json.RawMessage(`{"payload":{}}`)}
		resp, err := r.Settle(ctx, p)
		require.NoError(t, err)
		require.False(t, resp.Success)
		require.Equal(t, evm.ReasonPayload, resp.ErrorReason)
	})

	t.Run("ChainUnreachableIsAnError", func(t *testing.T) {
		dead, err := ethclient.Dial("http://127.0.0.1:1")
		require.NoError(t, err)
		deadRelayer := relayerOn(t, dead)
		p := verified(t, newPayment(t, fundedKey(t, 10_000), requirement()))
		resp, err := deadRelayer.Settle(ctx, p)
		require.Error(t, err, "retry later")
		require.Nil(t, resp)
	})
}

// TestRelayer_FindsItsOwnUse settles a payment, lets blocks pass, and
// settles it again in a restarted relayer (a settlement job rescued after a
// crash): the authorization is used, and the retry recognises its own
// transfer by searching the blocks stamped inside the authorization's
// window, from shortly before the payment was verified.
func TestRelayer_FindsItsOwnUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newVerifier(t)
	key := fundedKey(t, 10_000)
	p, err := v.Verify(ctx, requirement(), newPayment(t, key, requirement()).payload(t, requirement()))
	require.NoError(t, err)
	first, err := newRelayer(t).Settle(ctx, p)
	require.NoError(t, err)
	require.True(t, first.Success, first.ErrorReason)
	sent, err := chain.Client().TransactionReceipt(ctx, common.HexToHash(first.Transaction))
	require.NoError(t, err)
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	for {
		head, err := chain.Client().BlockNumber(ctx)
		require.NoError(t, err)
		if head > sent.BlockNumber.Uint64()+5 {
			break
		}
		_, err = chain.Transact(ctx, chain.Account(6), &to, big.NewInt(1), nil)
		require.NoError(t, err)
	}
	settleAgain := func(t *testing.T, p *x402.Payment, opts ...func(*evm.RelayerConfig)) *x402.SettleResponse {
		t.Helper()
		opts = append(opts, func(c *evm.RelayerConfig) { c.LogRange = 2 })
		resp, err := newRelayerOn(t, chain.Client(), opts...).Settle(ctx, p)
		require.NoError(t, err)
		return resp
	}

	t.Run("VerifiedAt", func(t *testing.T) {
		require.Equal(t, onWire(first), onWire(settleAgain(t, p)))
	})
	t.Run("VerifiedLongAfterTheTransfer", func(t *testing.T) {
		// Verification found the authorization unused: a use stamped well
		// before it is not searched for.
		late := *p
		late.VerifiedAt = time.Now().Add(11 * time.Minute)
		resp := settleAgain(t, &late)
		require.False(t, resp.Success, "the transfer precedes the window searched")
		require.Equal(t, evm.ReasonNonceAlreadyUsed, resp.ErrorReason)
	})
	t.Run("NoVerifiedAt", func(t *testing.T) {
		// A payment stored before VerifiedAt was recorded: the lookback
		// before the end of its window.
		old := *p
		old.VerifiedAt = time.Time{}
		require.Equal(t, onWire(first), onWire(settleAgain(t, &old)))
		resp := settleAgain(t, &old, func(c *evm.RelayerConfig) { c.LogLookback = time.Second })
		require.False(t, resp.Success, "the transfer is older than the lookback")
		require.Equal(t, evm.ReasonNonceAlreadyUsed, resp.ErrorReason)
	})
}

// TestFindSettlement_BlocksOfTheWindow checks which blocks the search for
// an authorization's use reads: those stamped inside its validity window,
// found by bisection over headers, on a chain whose timestamps repeat (the
// devchain's), on one where they grow by two seconds (Base's), and on nodes
// that pruned the older blocks (answering null for them, or geth's
// pruned-history error).
func TestFindSettlement_BlocksOfTheWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pay := newPayment(t, chain.Account(3).Key, requirement())
	p, err := newVerifier(t).Verify(ctx, requirement(), pay.payload(t, requirement()))
	require.NoError(t, err)
	after, before := pay.auth.ValidAfter.Uint64(), pay.auth.ValidBefore.Uint64()
	verified := uint64(p.VerifiedAt.Unix())
	// Blocks stamped after lo and before before are searched: lo is ten
	// minutes before verification (or validAfter, if later).
	lo := max(after, verified-600)

	testCases := []struct {
		name  string
		times []uint64 // block n is stamped times[n]
		p     func(p *x402.Payment)
		// lookback is FindSettlement's; 0 is the default.
		lookback time.Duration
		// Blocks before pruned are not served: their headers are read as
		// NotFound, or as prunedErr when set.
		pruned    uint64
		prunedErr error
		// The blocks searched, first and last; none when first > last.
		first, last uint64
	}{
		{
			name:  "whole chain inside the window",
			times: []uint64{lo + 1, lo + 1, lo + 2, lo + 2, lo + 2, before - 1},
			first: 0, last: 5,
		},
		{
			name:  "blocks at the window's ends are outside it",
			times: []uint64{lo - 5, lo, lo, lo + 1, before - 1, before, before, before + 3},
			first: 3, last: 4,
		},
		{
			name:  "from ten minutes before verification",
			times: []uint64{after - 2, verified - 601, verified - 600, verified - 599, verified - 599, verified, verified},
			first: 3, last: 6,
		},
		{
			name:  "Base: a block every two seconds",
			times: stamps(verified-3000, 2, 4000),
			// The last block stamped before validBefore: the ceiling of
			// (before - stamp of block 0) / 2, less one (before - verified
			// is odd when the signing and the verification fell in
			// different seconds).
			first: 1201, last: (before-verified+3000+1)/2 - 1,
		},
		{
			name:     "no VerifiedAt: the lookback before validBefore",
			times:    stamps(verified-100_000, 1, 200_000),
			p:        func(p *x402.Payment) { p.VerifiedAt = time.Time{} },
			lookback: 100 * time.Second,
			first:    before - verified + 99_901, last: before - verified + 99_999,
		},
		{
			name:   "pruned node: from the oldest block it serves",
			times:  stamps(lo-100, 1, 400),
			pruned: 250,
			first:  250, last: 399,
		},
		{
			name:      "pruned node answering geth's pruned-history error",
			times:     stamps(lo-100, 1, 400),
			pruned:    250,
			prunedErr: prunedHistory{},
			first:     250, last: 399,
		},
		{
			name:   "pruned before the window",
			times:  stamps(lo-100, 1, 400),
			pruned: 50,
			first:  101, last: 399,
		},
		{
			name:  "every block before the window",
			times: []uint64{lo - 3, lo - 1, lo},
			first: 3, last: 2,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := *p
			if tc.p != nil {
				tc.p(&q)
			}
			sc := &stampedChain{times: tc.times, pruned: tc.pruned, prunedErr: tc.prunedErr}
			hash, err := evm.FindSettlement(ctx, sc, &q, tc.lookback)
			require.NoError(t, err)
			require.Zero(t, hash)
			if tc.first > tc.last {
				require.Empty(t, sc.ranges, "no block is searched")
			} else {
				require.Equal(t, tc.first, sc.ranges[0][0], "first block searched")
				require.Equal(t, tc.last, sc.ranges[len(sc.ranges)-1][1], "last block searched")
				for i := 1; i < len(sc.ranges); i++ {
					require.Equal(t, sc.ranges[i-1][1]+1, sc.ranges[i][0], "ranges follow each other")
				}
			}
			n := len(tc.times)
			require.LessOrEqual(t, sc.headers, 2*(bits.Len(uint(n))+1), "headers read for %d blocks", n)
		})
	}
}

// stamps returns the timestamps of n blocks from start, step apart.
func stamps(start, step uint64, n int) []uint64 {
	times := make([]uint64, n)
	for i := range times {
		times[i] = start + uint64(i)*step
	}
	return times
}

// stampedChain is a chain of blocks with given timestamps and no logs: the
// input of the search for an authorization's use, which it records. Blocks
// before pruned are not served: reading one answers NotFound, or prunedErr
// when set.
type stampedChain struct {
	times     []uint64
	pruned    uint64
	prunedErr error
	headers   int
	ranges    [][2]uint64
}

func (c *stampedChain) HeaderByNumber(_ context.Context, number *big.Int) (*types.Header, error) {
	n := uint64(len(c.times) - 1)
	if number != nil {
		n = number.Uint64()
		c.headers++
		if n < c.pruned {
			return nil, cmp.Or(c.prunedErr, error(ethereum.NotFound))
		}
	}
	return &types.Header{Number: new(big.Int).SetUint64(n), Time: c.times[n]}, nil
}

func (c *stampedChain) FilterLogs(_ context.Context, q ethereum.FilterQuery) ([]types.Log, error) {
	if q.FromBlock.Uint64() < c.pruned {
		return nil, fmt.Errorf("logs of pruned block %d", q.FromBlock)
	}
	c.ranges = append(c.ranges, [2]uint64{q.FromBlock.Uint64(), q.ToBlock.Uint64()})
	return nil, nil
}

// prunedHistory is geth's answer for a block older than the history it
// keeps.
type prunedHistory struct{}

func (prunedHistory) Error() string  { return "pruned history unavailable" }
func (prunedHistory) ErrorCode() int { return 4444 }

func (c *stampedChain) SubscribeFilterLogs(context.Context, ethereum.FilterQuery, chan<- types.Log) (ethereum.Subscription, error) {
	return nil, errors.New("not supported")
}

func TestRelayer_Concurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newVerifier(t)
	counting := &countingBackend{Backend: chain.Client()}
	r := newRelayerOn(t, counting)
	const n = 40
	payments := verifiedPayments(t, v, fundedKeys(t, n, 10_000))
	first, err := chain.Client().BlockNumber(ctx)
	require.NoError(t, err)
	start := time.Now()
	results, errs := settleAll(payments, func(_ int, p *x402.Payment) (*x402.SettleResponse, error) { return r.Settle(ctx, p) })
	t.Logf("%d concurrent settlements in %s", n, time.Since(start))
	last, err := chain.Client().BlockNumber(ctx)
	require.NoError(t, err)
	// Receipts come by block: one lookup of each settlement's own receipt
	// right after sending, then one request per new block for everyone.
	require.LessOrEqual(t, counting.receipts.Load(), int64(n))
	require.LessOrEqual(t, counting.blocks.Load(), int64(last-first))
	t.Logf("%d receipt lookups, %d block receipt requests over %d blocks", counting.receipts.Load(), counting.blocks.Load(), last-first)
	requireSettled(t, payments, results, errs)
	seen := map[string]bool{}
	for _, res := range results {
		require.False(t, seen[res.Transaction])
		seen[res.Transaction] = true
	}
}

// TestRelayer_PollsAtTheChainsPace settles on a chain whose blocks come
// every 200 ms (the devchain behind a node that holds the transactions it is
// sent until its next block), a settlement starting every 5 ms, each in a
// transaction of its own: the relayer reads the head at the pace of the
// chain, not at a pace that grows with the settlements waiting, and every
// settlement goes through.
func TestRelayer_PollsAtTheChainsPace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newVerifier(t)
	node := newSlowBlocks(t, 200*time.Millisecond)
	r := newRelayerOn(t, node, withOwnKey(t))
	const warm, n = 3, 40
	payments := verifiedPayments(t, v, fundedKeys(t, warm+n, 10_000))

	// The relayer learns how long receipts take on this chain: one
	// settlement after the other, each sent just after a block and waiting
	// for the next.
	for _, p := range payments[:warm] {
		_, err := r.Settle(ctx, p)
		require.NoError(t, err)
	}

	heads := node.heads.Load()
	start := time.Now()
	results, errs := settleSpaced(payments[warm:], 5*time.Millisecond, func(_ int, p *x402.Payment) (*x402.SettleResponse, error) {
		return r.Settle(ctx, p)
	})
	elapsed := time.Since(start)
	heads = node.heads.Load() - heads
	requireSettled(t, payments[warm:], results, errs)
	require.NoError(t, node.err())
	t.Logf("%d settlements in %s: %d head reads", n, elapsed, heads)
	// A settlement that waits for a block looks at the head at most every
	// MaxPollInterval (50 ms), and a fresh one sooner, by what it learnt of
	// the chain (about a quarter of 200 ms here): a few reads per block,
	// whatever the number waiting. (9-12 reads in about 0.4 s alone, up to
	// 20 with other tests running; 102 when each wait read the head on its
	// own schedule, 56-65 with either half of the change alone.)
	require.LessOrEqual(t, heads, int64(elapsed/(15*time.Millisecond))+6)
}

// slowBlocks is a node that holds the transactions sent to it until its
// next block: every interval of mine it passes them on to the devchain,
// which mines them at once. It counts the reads of the head.
type slowBlocks struct {
	evm.Backend
	heads atomic.Int64

	mu   sync.Mutex
	held []*types.Transaction
	// passing are the transactions being passed on.
	passing []*types.Transaction
	sendErr error
}

func (s *slowBlocks) SendTransaction(_ context.Context, tx *types.Transaction) error {
	s.mu.Lock()
	s.held = append(s.held, tx)
	s.mu.Unlock()
	return nil
}

// PendingNonceAt counts the transactions held, as a node counts those in
// its pool: the keeper, which asks, finds none of them lost.
func (s *slowBlocks) PendingNonceAt(ctx context.Context, account common.Address) (uint64, error) {
	n, err := s.Backend.PendingNonceAt(ctx, account)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	held := map[uint64]bool{}
	for _, tx := range append(s.held, s.passing...) {
		held[tx.Nonce()] = true
	}
	for held[n] {
		n++
	}
	return n, nil
}

func (s *slowBlocks) BlockNumber(ctx context.Context) (uint64, error) {
	s.heads.Add(1)
	return s.Backend.BlockNumber(ctx)
}

// newSlowBlocks returns a slowBlocks node in front of the devchain that
// passes on what it holds every interval until the test ends.
func newSlowBlocks(t *testing.T, interval time.Duration) *slowBlocks {
	node := &slowBlocks{Backend: chain.Client()}
	node.mine(t, interval)
	return node
}

// withOwnKey has a relayer pay its gas from a key of its own, given an
// ether by devchain account 7, so that its nonces are no other relayer's.
func withOwnKey(t *testing.T) func(*evm.RelayerConfig) {
	t.Helper()
	key := newKey(t)
	to := crypto.PubkeyToAddress(key.PublicKey)
	_, err := chain.Transact(context.Background(), chain.Account(7), &to, big.NewInt(1e18), nil)
	require.NoError(t, err)
	return func(cfg *evm.RelayerConfig) { cfg.Key = key }
}

// mine passes the transactions held on every interval until the test ends.
func (s *slowBlocks) mine(t *testing.T, interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s.mu.Lock()
			txs := s.held
			s.held, s.passing = nil, txs
			s.mu.Unlock()
			for _, tx := range txs {
				if err := s.Backend.SendTransaction(ctx, tx); err != nil && ctx.Err() == nil {
					s.mu.Lock()
					s.sendErr = errors.Join(s.sendErr, err)
					s.mu.Unlock()
				}
			}
			s.mu.Lock()
			s.passing = nil
			s.mu.Unlock()
		}
	}()
}

// err is what the devchain answered to the transactions passed on, if it
// refused any.
func (s *slowBlocks) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sendErr
}

// TestRelayer_Batched settles concurrent payments through the devchain's
// Multicall3-compatible contract: they share few transactions, each
// payment moves once, and the ones that cannot settle (a canceled
// authorization, funds gone) fail alone with their reasons while the rest
// of their batch goes through.
func TestRelayer_Batched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newVerifier(t)
	flaky := &flakyBackend{Backend: chain.Client()}
	r := newRelayerOn(t, flaky, batched)
	const n = 60
	payments := make([]*x402.Payment, n)
	want := make([]string, n) // "" for success, else the failure reason
	txs := map[string]bool{}  // the transactions that moved funds, all sent by r
	keys := fundedKeys(t, n, 10_000)
	for i := range payments {
		key := keys[i]
		pay := newPayment(t, key, requirement())
		p, err := v.Verify(ctx, requirement(), pay.payload(t, requirement()))
		require.NoError(t, err)
		payments[i] = p
		switch i % 20 {
		case 7:
			evmtest.CancelAuthorization(t, chain, pay.key, pay.auth.From, pay.auth.Nonce)
			want[i] = evm.ReasonNonceAlreadyUsed
		case 13:
			// The funds leave after verification, by another payment.
			other, err := v.Verify(ctx, requirement(), newPayment(t, key, requirement()).payload(t, requirement()))
			require.NoError(t, err)
			resp, err := r.Settle(ctx, other)
			require.NoError(t, err)
			require.True(t, resp.Success, resp.ErrorReason)
			txs[resp.Transaction] = true
			want[i] = evm.ReasonInsufficientBalance
		}
	}
	sentBefore := len(flaky.sent())
	results, errs := settleAll(payments, func(_ int, p *x402.Payment) (*x402.SettleResponse, error) { return r.Settle(ctx, p) })
	sent := len(flaky.sent()) - sentBefore
	shared := false
	for i, p := range payments {
		require.NoError(t, errs[i], "settlement %d", i)
		payer := common.HexToAddress(p.Payer)
		if want[i] != "" {
			require.False(t, results[i].Success, "settlement %d", i)
			require.Equal(t, want[i], results[i].ErrorReason, "settlement %d", i)
			continue
		}
		require.True(t, results[i].Success, "settlement %d: %s", i, results[i].ErrorReason)
		require.Zero(t, balance(t, payer).Sign(), "settlement %d moved its amount once", i)
		txs[results[i].Transaction] = true
		receipt, err := chain.Client().TransactionReceipt(ctx, common.HexToHash(results[i].Transaction))
		require.NoError(t, err)
		require.Equal(t, big.NewInt(10_000), transferred(t, receipt, payer, chain.Account(devchain.PayToAccount).Address))
		tx, _, err := chain.Client().TransactionByHash(ctx, receipt.TxHash)
		require.NoError(t, err)
		require.Equal(t, devchain.Multicall, *tx.To())
		// Each settlement's cost is its share of the batch's gas.
		if cost := results[i].Cost; cost != nil {
			require.LessOrEqual(t, cost.GasUsed*uint64(cost.Batch), receipt.GasUsed, "settlement %d", i)
			require.Equal(t, receipt.EffectiveGasPrice.String(), cost.GasPriceWei)
			shared = shared || cost.Batch > 1
		}
	}
	require.True(t, shared, "some settlements share a batch's gas")
	for tx := range txs {
		require.Contains(t, flaky.sent(), tx)
	}
	require.Less(t, sent, n/3, "settlements share transactions")
	t.Logf("%d concurrent settlements in %d transactions", n, sent)

	// Settled again (a job run twice): the same batch transaction,
	// nothing moves twice.
	again, err := r.Settle(ctx, payments[0])
	require.NoError(t, err)
	require.Equal(t, onWire(results[0]), onWire(again))
}

// TestRelayer_SharedKey settles concurrently through two relayers with the
// same key, as two worker processes do: their nonces collide in the node's
// pool, and every settlement must still go through on its first call.
func TestRelayer_SharedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newVerifier(t)
	relayers := []*evm.Relayer{newRelayer(t), newRelayer(t)}
	payments := verifiedPayments(t, v, fundedKeys(t, 60, 10_000))
	results, errs := settleAll(payments, func(i int, p *x402.Payment) (*x402.SettleResponse, error) { return relayers[i%2].Settle(ctx, p) })
	requireSettled(t, payments, results, errs)
}

// TestRelayer_NodeWithoutBlockReceipts settles through a node that has no
// eth_getBlockReceipts (JSON-RPC -32601): each settlement asks for its own
// receipt instead.
func TestRelayer_NodeWithoutBlockReceipts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newVerifier(t)
	// Blocks come every 100 ms, so that the receipts are not there at
	// once: the settlements wait for them, from a relayer key of its own
	// (the devchain takes each transaction as the node passes it on).
	slow := newSlowBlocks(t, 100*time.Millisecond)
	node := &noBlockReceiptsBackend{Backend: slow}
	r := newRelayerOn(t, node, withOwnKey(t))
	payments := verifiedPayments(t, v, fundedKeys(t, 5, 10_000))
	results, errs := settleAll(payments, func(_ int, p *x402.Payment) (*x402.SettleResponse, error) { return r.Settle(ctx, p) })
	requireSettled(t, payments, results, errs)
	require.Positive(t, node.asked.Load())
	require.NoError(t, slow.err())
}

// noBlockReceiptsBackend is a node without eth_getBlockReceipts.
type noBlockReceiptsBackend struct {
	evm.Backend
	asked atomic.Int64
}

func (b *noBlockReceiptsBackend) BlockReceipts(context.Context, rpc.BlockNumberOrHash) ([]*types.Receipt, error) {
	b.asked.Add(1)
	return nil, methodNotFound{}
}

// methodNotFound is the JSON-RPC error of an unknown method.
type methodNotFound struct{}

func (methodNotFound) Error() string {
	return "the method eth_getBlockReceipts does not exist/is not available"
}
func (methodNotFound) ErrorCode() int { return -32601 }

// transferred returns the amount a receipt's Transfer events move from one
// address to another.
func transferred(t *testing.T, receipt *types.Receipt, from, to common.Address) *big.Int {
	t.Helper()
	topic := crypto.Keccak256Hash([]byte("Transfer(address,address,uint256)"))
	sum := new(big.Int)
	for _, l := range receipt.Logs {
		if l.Address == devchain.USDC && len(l.Topics) == 3 && l.Topics[0] == topic &&
			common.BytesToAddress(l.Topics[1].Bytes()) == from && common.BytesToAddress(l.Topics[2].Bytes()) == to {
			sum.Add(sum, new(big.Int).SetBytes(l.Data))
		}
	}
	return sum
}

// TestRelayer_GasLearnt checks that the gas of a transfer is estimated once
// per asset and reused, and that a transfer running out of the gas learnt
// (the token grew costlier since) fails its attempt without charging, after
// which the next attempt estimates again and settles once.
func TestRelayer_GasLearnt(t *testing.T) {
	t.Parallel()
	for _, mode := range relayerModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			// Too low an estimate: a transaction of its own gets half as
			// much again; a batch gets that plus its own allowance (which
			// alone is short of a lone transfer's cold reads).
			lowEstimate := uint64(30_000)
			if mode.opts != nil {
				lowEstimate = 1
			}
			testGasLearnt(t, lowEstimate, mode.opts...)
		})
	}
}

func testGasLearnt(t *testing.T, lowEstimate uint64, opts ...func(*evm.RelayerConfig)) {
	ctx := context.Background()
	v := newVerifier(t)
	counting := &countingBackend{Backend: chain.Client()}
	r := newRelayerOn(t, counting, opts...)
	settle := func(t *testing.T, key *ecdsa.PrivateKey) (*x402.SettleResponse, error) {
		t.Helper()
		p, err := v.Verify(ctx, requirement(), newPayment(t, key, requirement()).payload(t, requirement()))
		require.NoError(t, err)
		return r.Settle(ctx, p)
	}

	for range 3 {
		resp, err := settle(t, fundedKey(t, 10_000))
		require.NoError(t, err)
		require.True(t, resp.Success, resp.ErrorReason)
	}
	require.Equal(t, int64(1), counting.estimates.Load(), "the gas of later transfers is not estimated again")

	// A node whose estimate is too low for the transfer: the limit learnt
	// from it runs out.
	lying := &countingBackend{Backend: chain.Client(), estimateAs: lowEstimate}
	r = newRelayerOn(t, lying, opts...)
	key := fundedKey(t, 10_000)
	p, err := v.Verify(ctx, requirement(), newPayment(t, key, requirement()).payload(t, requirement()))
	require.NoError(t, err)
	_, err = r.Settle(ctx, p)
	// A transaction of its own runs out of gas; inside a batch the
	// transfer's call does, and the batch goes on.
	require.Error(t, err)
	require.Regexp(t, "ran out of gas|runs now", err.Error())
	require.Equal(t, int64(10_000), balance(t, crypto.PubkeyToAddress(key.PublicKey)).Int64(), "nothing moved")
	lying.estimateAs = 0
	resp, err := r.Settle(ctx, p)
	require.NoError(t, err)
	require.True(t, resp.Success, resp.ErrorReason)
	require.Equal(t, int64(2), lying.estimates.Load(), "the retry estimated again")
	require.Zero(t, balance(t, crypto.PubkeyToAddress(key.PublicKey)).Sign())
}

// countingBackend counts the receipt requests and gas estimates made
// through it; with estimateAs set, it answers every estimate with that.
type countingBackend struct {
	evm.Backend
	receipts, blocks, estimates atomic.Int64
	estimateAs                  uint64
}

func (c *countingBackend) EstimateGas(ctx context.Context, msg ethereum.CallMsg) (uint64, error) {
	c.estimates.Add(1)
	gas, err := c.Backend.EstimateGas(ctx, msg)
	if err == nil && c.estimateAs > 0 {
		gas = c.estimateAs
	}
	return gas, err
}

func (c *countingBackend) TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error) {
	c.receipts.Add(1)
	return c.Backend.TransactionReceipt(ctx, hash)
}

func (c *countingBackend) BlockReceipts(ctx context.Context, block rpc.BlockNumberOrHash) ([]*types.Receipt, error) {
	c.blocks.Add(1)
	return c.Backend.BlockReceipts(ctx, block)
}

// flakyBackend is a chain whose node fails to answer receipt requests while
// failReceipts is set, and that records the transactions sent through it.
type flakyBackend struct {
	evm.Backend
	failReceipts atomic.Bool
	mu           sync.Mutex
	hashes       []string
}

// SendTransaction records the transactions the node took (not those it
// refused: other tests' relayers share the key, so a nonce may be taken).
func (f *flakyBackend) SendTransaction(ctx context.Context, tx *types.Transaction) error {
	if err := f.Backend.SendTransaction(ctx, tx); err != nil {
		return err
	}
	f.mu.Lock()
	f.hashes = append(f.hashes, tx.Hash().Hex())
	f.mu.Unlock()
	return nil
}

func (f *flakyBackend) TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error) {
	if f.failReceipts.Load() {
		return nil, errors.New("read tcp 127.0.0.1:8545: connection reset by peer")
	}
	return f.Backend.TransactionReceipt(ctx, hash)
}

func (f *flakyBackend) BlockReceipts(ctx context.Context, block rpc.BlockNumberOrHash) ([]*types.Receipt, error) {
	if f.failReceipts.Load() {
		return nil, errors.New("read tcp 127.0.0.1:8545: connection reset by peer")
	}
	return f.Backend.BlockReceipts(ctx, block)
}

func (f *flakyBackend) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.hashes...)
}

// TestRelayer_CheckMulticall checks that batching through an address without
// code is refused at start, and accepted at the devchain's Multicall3.
func TestRelayer_CheckMulticall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.NoError(t, newRelayerOn(t, chain.Client(), batched).CheckMulticall(ctx))
	require.NoError(t, newRelayer(t).CheckMulticall(ctx), "nothing to check without batching")
	nowhere := newRelayerOn(t, chain.Client(), func(cfg *evm.RelayerConfig) {
		cfg.Multicall = map[string]common.Address{"eip155:8453": common.HexToAddress("0x000000000000000000000000000000000000bEEF")}
	})
	require.ErrorContains(t, nowhere.CheckMulticall(ctx), "no contract at 0x000000000000000000000000000000000000bEEF on eip155:8453")
}

// verifiedPayments returns a payment of each key, verified by v.
func verifiedPayments(t *testing.T, v *evm.Verifier, keys []*ecdsa.PrivateKey) []*x402.Payment {
	t.Helper()
	payments := make([]*x402.Payment, len(keys))
	for i, key := range keys {
		p, err := v.Verify(context.Background(), requirement(), newPayment(t, key, requirement()).payload(t, requirement()))
		require.NoError(t, err)
		payments[i] = p
	}
	return payments
}

// requireSettled requires each payment's settlement (results and errs, by
// payment) to have succeeded and moved its payer's whole balance.
func requireSettled(t *testing.T, payments []*x402.Payment, results []*x402.SettleResponse, errs []error) {
	t.Helper()
	for i, p := range payments {
		require.NoError(t, errs[i], "settlement %d", i)
		require.True(t, results[i].Success, "settlement %d: %s", i, results[i].ErrorReason)
		require.Zero(t, balance(t, common.HexToAddress(p.Payer)).Sign(), "settlement %d", i)
	}
}

// settleAll settles every payment at once with settle (given each
// payment's index) and returns what each got.
func settleAll(payments []*x402.Payment, settle func(i int, p *x402.Payment) (*x402.SettleResponse, error)) ([]*x402.SettleResponse, []error) {
	return settleSpaced(payments, 0, settle)
}

// settleSpaced is settleAll with the settlement of payment i started
// i×interval after the first: arrivals spread over the real time of a
// chain that mines by its own clock.
func settleSpaced(payments []*x402.Payment, interval time.Duration, settle func(i int, p *x402.Payment) (*x402.SettleResponse, error)) ([]*x402.SettleResponse, []error) {
	results := make([]*x402.SettleResponse, len(payments))
	errs := make([]error, len(payments))
	var wg sync.WaitGroup
	for i, p := range payments {
		wg.Go(func() {
			if interval > 0 {
				time.Sleep(time.Duration(i) * interval)
			}
			results[i], errs[i] = settle(i, p)
		})
	}
	wg.Wait()
	return results, errs
}

// settleRetried settles p on r until it settles or ctx ends, as River
// retries a settlement job, a moment after each error.
func settleRetried(ctx context.Context, r *evm.Relayer, p *x402.Payment) (*x402.SettleResponse, error) {
	for {
		resp, err := r.Settle(ctx, p)
		if err == nil || ctx.Err() != nil {
			return resp, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// onWire is what the payer is told of a settlement: the response without
// the seller's own cost.
func onWire(r *x402.SettleResponse) x402.SettleResponse {
	c := *r
	c.Cost = nil
	return c
}

// TestRelayer_NotSentNearExpiry does not send a transfer whose
// authorization expires within ExpiryMargin: it could be mined after
// validBefore. The payment fails as the official packages say, and nothing
// moves; one whose transfer went out before is still found settled.
func TestRelayer_NotSentNearExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newVerifier(t)
	key := fundedKey(t, 20_000)
	expiring := func() *x402.Payment {
		pay := newPayment(t, key, requirement())
		pay.auth.ValidBefore = big.NewInt(time.Now().Add(20 * time.Second).Unix())
		p, err := v.Verify(ctx, requirement(), pay.payload(t, requirement()))
		require.NoError(t, err)
		require.Equal(t, pay.auth.ValidBefore.Int64(), p.ValidBefore.Unix())
		return p
	}
	late := newRelayerOn(t, chain.Client(), func(c *evm.RelayerConfig) { c.ExpiryMargin = 30 * time.Second })
	resp, err := late.Settle(ctx, expiring())
	require.NoError(t, err)
	require.False(t, resp.Success)
	require.Equal(t, evm.ReasonValidBefore, resp.ErrorReason)
	require.Empty(t, resp.Transaction)
	require.Equal(t, int64(20_000), balance(t, crypto.PubkeyToAddress(key.PublicKey)).Int64(), "nothing moved")

	// Settled in time by one relayer, then retried close to expiry: found.
	p := expiring()
	first, err := newRelayer(t).Settle(ctx, p)
	require.NoError(t, err)
	require.True(t, first.Success)
	again, err := late.Settle(ctx, p)
	require.NoError(t, err)
	require.Equal(t, onWire(first), onWire(again))
}
