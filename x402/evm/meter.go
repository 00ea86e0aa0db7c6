package evm

import (
	"context"
	"errors"
	"math/big"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
)

// Purposes of RPC calls, carried in the context (WithPurpose) and counted
// by Meter.
const (
	// PurposeVerify: the reads that verify a payment (Verifier.Verify).
	PurposeVerify = "verify"
	// PurposeReserve: the reads of payers' balances that reserve a
	// payment against its payer's other payments in flight
	// (Verifier.Balance). They wait for the chain as verification's do.
	PurposeReserve = "reserve"
	// PurposeSettle: what settling a payment sends and reads
	// (Relayer.Settle), its receipts and nonce keeping included, and the
	// reconciliation of one whose attempts all failed (Relayer.Reconcile).
	PurposeSettle = "settle"
	// PurposeFinality: following settlements until final, and the keeper's
	// rounds that go with it (Relayer.Follow, Carried, Keep).
	PurposeFinality = "finality"
	// PurposeRelayer: the relayer's other reads (its balance, its status).
	PurposeRelayer = "relayer"
	// PurposeOther: calls whose context names no purpose.
	PurposeOther = "other"
)

type purposeKey struct{}

// WithPurpose returns ctx naming the purpose of the RPC calls made with it.
func WithPurpose(ctx context.Context, purpose string) context.Context {
	return context.WithValue(ctx, purposeKey{}, purpose)
}

// PurposeOf returns the purpose ctx names (WithPurpose), or PurposeOther.
func PurposeOf(ctx context.Context) string {
	if p, ok := ctx.Value(purposeKey{}).(string); ok {
		return p
	}
	return PurposeOther
}

// ErrBusy is the error of a verification's RPC call that found the chain's
// RPC busy for longer than MeterConfig.VerifyWait: the payment is not
// verified now and the client may try again.
var ErrBusy = errors.New("the chain's RPC endpoint is busy with settlements")

// DefaultVerifyConcurrency is MeterConfig.VerifyConcurrency's default.
const DefaultVerifyConcurrency = 64

// MeterConfig configures Meter.
type MeterConfig struct {
	// VerifyConcurrency is how many RPC calls may be in flight on the
	// chain, settlement's included, for a verification's call to start:
	// settlement's calls never wait, verification's wait for room, so
	// that a flood of payments to verify cannot take the RPC endpoint's
	// rate limit from settlement. Defaults to DefaultVerifyConcurrency.
	VerifyConcurrency int
	// VerifyWait is how long a verification's call waits for room before
	// it fails with ErrBusy. Defaults to 2 s.
	VerifyWait time.Duration
	// Observe, when set, is called once for every RPC call, with its
	// purpose (PurposeOf its context) and its JSON-RPC method.
	Observe func(purpose, method string)
}

// Meter returns b with every RPC call counted by purpose (Observe) and
// verification's calls given way to the others (VerifyConcurrency). One
// metered Backend serves both the Verifier and the Relayer of a chain, so
// that they share its bound.
func Meter(b Backend, cfg MeterConfig) Backend {
	if cfg.VerifyConcurrency <= 0 {
		cfg.VerifyConcurrency = DefaultVerifyConcurrency
	}
	if cfg.VerifyWait <= 0 {
		cfg.VerifyWait = 2 * time.Second
	}
	return &meteredBackend{b: b, cfg: cfg, gate: &priorityGate{limit: cfg.VerifyConcurrency}}
}

// priorityGate counts the RPC calls in flight on a chain. Calls of the
// privileged kind always start; the others start only while fewer than
// limit calls are in flight, in the order they came.
type priorityGate struct {
	mu       sync.Mutex
	limit    int
	inflight int
	waiters  []chan struct{}
}

// enter lets a privileged call in.
func (g *priorityGate) enter() {
	g.mu.Lock()
	g.inflight++
	g.mu.Unlock()
}

// wait lets another call in once fewer than limit are in flight, or fails
// with ErrBusy after wait, or with ctx's error.
func (g *priorityGate) wait(ctx context.Context, wait time.Duration) error {
	g.mu.Lock()
	if g.inflight < g.limit && len(g.waiters) == 0 {
		g.inflight++
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	g.waiters = append(g.waiters, ch)
	g.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var err error
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err = ErrBusy
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, w := range g.waiters {
		if w == ch {
			g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
			return err
		}
	}
	// Let in meanwhile: give the place back.
	g.leaveLocked()
	return err
}

// leave ends a call that entered.
func (g *priorityGate) leave() {
	g.mu.Lock()
	g.leaveLocked()
	g.mu.Unlock()
}

func (g *priorityGate) leaveLocked() {
	g.inflight--
	for g.inflight < g.limit && len(g.waiters) > 0 {
		ch := g.waiters[0]
		g.waiters[0] = nil
		g.waiters = g.waiters[1:]
		g.inflight++
		close(ch)
	}
}

// meteredBackend is Meter's Backend.
type meteredBackend struct {
	b    Backend
	cfg  MeterConfig
	gate *priorityGate
}

// start counts a call of method and lets it in; the caller calls done
// when it ends.
func (m *meteredBackend) start(ctx context.Context, method string) (done func(), err error) {
	purpose := PurposeOf(ctx)
	if purpose == PurposeVerify || purpose == PurposeReserve {
		if err := m.gate.wait(ctx, m.cfg.VerifyWait); err != nil {
			return nil, err
		}
	} else {
		m.gate.enter()
	}
	if m.cfg.Observe != nil {
		m.cfg.Observe(purpose, method)
	}
	return m.gate.leave, nil
}

func (m *meteredBackend) ChainID(ctx context.Context) (*big.Int, error) {
	done, err := m.start(ctx, "eth_chainId")
	if err != nil {
		return nil, err
	}
	defer done()
	return m.b.ChainID(ctx)
}

func (m *meteredBackend) CallContract(ctx context.Context, msg ethereum.CallMsg, block *big.Int) ([]byte, error) {
	done, err := m.start(ctx, "eth_call")
	if err != nil {
		return nil, err
	}
	defer done()
	return m.b.CallContract(ctx, msg, block)
}

func (m *meteredBackend) CodeAt(ctx context.Context, account common.Address, block *big.Int) ([]byte, error) {
	done, err := m.start(ctx, "eth_getCode")
	if err != nil {
		return nil, err
	}
	defer done()
	return m.b.CodeAt(ctx, account, block)
}

func (m *meteredBackend) BlockNumber(ctx context.Context) (uint64, error) {
	done, err := m.start(ctx, "eth_blockNumber")
	if err != nil {
		return 0, err
	}
	defer done()
	return m.b.BlockNumber(ctx)
}

func (m *meteredBackend) EstimateGas(ctx context.Context, msg ethereum.CallMsg) (uint64, error) {
	done, err := m.start(ctx, "eth_estimateGas")
	if err != nil {
		return 0, err
	}
	defer done()
	return m.b.EstimateGas(ctx, msg)
}

func (m *meteredBackend) FilterLogs(ctx context.Context, q ethereum.FilterQuery) ([]types.Log, error) {
	done, err := m.start(ctx, "eth_getLogs")
	if err != nil {
		return nil, err
	}
	defer done()
	return m.b.FilterLogs(ctx, q)
}

func (m *meteredBackend) SubscribeFilterLogs(ctx context.Context, q ethereum.FilterQuery, ch chan<- types.Log) (ethereum.Subscription, error) {
	done, err := m.start(ctx, "eth_subscribe")
	if err != nil {
		return nil, err
	}
	defer done()
	return m.b.SubscribeFilterLogs(ctx, q, ch)
}

func (m *meteredBackend) SendTransaction(ctx context.Context, tx *types.Transaction) error {
	done, err := m.start(ctx, "eth_sendRawTransaction")
	if err != nil {
		return err
	}
	defer done()
	return m.b.SendTransaction(ctx, tx)
}

func (m *meteredBackend) HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error) {
	done, err := m.start(ctx, "eth_getBlockByNumber")
	if err != nil {
		return nil, err
	}
	defer done()
	return m.b.HeaderByNumber(ctx, number)
}

func (m *meteredBackend) PendingNonceAt(ctx context.Context, account common.Address) (uint64, error) {
	done, err := m.start(ctx, "eth_getTransactionCount")
	if err != nil {
		return 0, err
	}
	defer done()
	return m.b.PendingNonceAt(ctx, account)
}

func (m *meteredBackend) NonceAt(ctx context.Context, account common.Address, block *big.Int) (uint64, error) {
	done, err := m.start(ctx, "eth_getTransactionCount")
	if err != nil {
		return 0, err
	}
	defer done()
	return m.b.NonceAt(ctx, account, block)
}

func (m *meteredBackend) BalanceAt(ctx context.Context, account common.Address, block *big.Int) (*big.Int, error) {
	done, err := m.start(ctx, "eth_getBalance")
	if err != nil {
		return nil, err
	}
	defer done()
	return m.b.BalanceAt(ctx, account, block)
}

func (m *meteredBackend) SuggestGasTipCap(ctx context.Context) (*big.Int, error) {
	done, err := m.start(ctx, "eth_maxPriorityFeePerGas")
	if err != nil {
		return nil, err
	}
	defer done()
	return m.b.SuggestGasTipCap(ctx)
}

func (m *meteredBackend) TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error) {
	done, err := m.start(ctx, "eth_getTransactionReceipt")
	if err != nil {
		return nil, err
	}
	defer done()
	return m.b.TransactionReceipt(ctx, hash)
}

func (m *meteredBackend) BlockReceipts(ctx context.Context, block rpc.BlockNumberOrHash) ([]*types.Receipt, error) {
	done, err := m.start(ctx, "eth_getBlockReceipts")
	if err != nil {
		return nil, err
	}
	defer done()
	return m.b.BlockReceipts(ctx, block)
}
