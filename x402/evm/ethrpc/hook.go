package ethrpc

import (
	"context"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
)

// hook runs around every call of a hooked Backend: it is given the call's
// context and JSON-RPC method and returns the context to call with and
// what to run once the call is over, or an error that fails the call
// without making it.
type hook func(ctx context.Context, method string) (context.Context, func(), error)

// hooked is a Backend whose every method runs through its hook: the one
// place the methods of Backend are wrapped (WithTimeout and Meter are
// hooks). TestWithTimeout_EveryMethod checks that none is missed.
type hooked struct {
	b    Backend
	hook hook
}

// WithTimeout returns b with every call bounded by timeout: each method of
// Backend, SubscribeFilterLogs included (its subscription, once open, is
// not bounded).
func WithTimeout(b Backend, timeout time.Duration) Backend {
	return &hooked{b: b, hook: func(ctx context.Context, _ string) (context.Context, func(), error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		return ctx, cancel, nil
	}}
}

// call runs f through h's hook.
func call[T any](ctx context.Context, h *hooked, method string, f func(ctx context.Context) (T, error)) (T, error) {
	ctx, done, err := h.hook(ctx, method)
	if err != nil {
		var zero T
		return zero, err
	}
	defer done()
	return f(ctx)
}

func (h *hooked) ChainID(ctx context.Context) (*big.Int, error) {
	return call(ctx, h, "eth_chainId", h.b.ChainID)
}

func (h *hooked) CallContract(ctx context.Context, msg ethereum.CallMsg, block *big.Int) ([]byte, error) {
	return call(ctx, h, "eth_call", func(ctx context.Context) ([]byte, error) { return h.b.CallContract(ctx, msg, block) })
}

func (h *hooked) CodeAt(ctx context.Context, account common.Address, block *big.Int) ([]byte, error) {
	return call(ctx, h, "eth_getCode", func(ctx context.Context) ([]byte, error) { return h.b.CodeAt(ctx, account, block) })
}

func (h *hooked) BlockNumber(ctx context.Context) (uint64, error) {
	return call(ctx, h, "eth_blockNumber", h.b.BlockNumber)
}

func (h *hooked) EstimateGas(ctx context.Context, msg ethereum.CallMsg) (uint64, error) {
	return call(ctx, h, "eth_estimateGas", func(ctx context.Context) (uint64, error) { return h.b.EstimateGas(ctx, msg) })
}

func (h *hooked) FilterLogs(ctx context.Context, q ethereum.FilterQuery) ([]types.Log, error) {
	return call(ctx, h, "eth_getLogs", func(ctx context.Context) ([]types.Log, error) { return h.b.FilterLogs(ctx, q) })
}

func (h *hooked) SubscribeFilterLogs(ctx context.Context, q ethereum.FilterQuery, ch chan<- types.Log) (ethereum.Subscription, error) {
	return call(ctx, h, "eth_subscribe", func(ctx context.Context) (ethereum.Subscription, error) {
		return h.b.SubscribeFilterLogs(ctx, q, ch)
	})
}

func (h *hooked) SendTransaction(ctx context.Context, tx *types.Transaction) error {
	_, err := call(ctx, h, "eth_sendRawTransaction", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, h.b.SendTransaction(ctx, tx)
	})
	return err
}

func (h *hooked) HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error) {
	return call(ctx, h, "eth_getBlockByNumber", func(ctx context.Context) (*types.Header, error) { return h.b.HeaderByNumber(ctx, number) })
}

func (h *hooked) PendingNonceAt(ctx context.Context, account common.Address) (uint64, error) {
	return call(ctx, h, "eth_getTransactionCount", func(ctx context.Context) (uint64, error) { return h.b.PendingNonceAt(ctx, account) })
}

func (h *hooked) NonceAt(ctx context.Context, account common.Address, block *big.Int) (uint64, error) {
	return call(ctx, h, "eth_getTransactionCount", func(ctx context.Context) (uint64, error) { return h.b.NonceAt(ctx, account, block) })
}

func (h *hooked) BalanceAt(ctx context.Context, account common.Address, block *big.Int) (*big.Int, error) {
	return call(ctx, h, "eth_getBalance", func(ctx context.Context) (*big.Int, error) { return h.b.BalanceAt(ctx, account, block) })
}

func (h *hooked) SuggestGasTipCap(ctx context.Context) (*big.Int, error) {
	return call(ctx, h, "eth_maxPriorityFeePerGas", h.b.SuggestGasTipCap)
}

func (h *hooked) TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error) {
	return call(ctx, h, "eth_getTransactionReceipt", func(ctx context.Context) (*types.Receipt, error) { return h.b.TransactionReceipt(ctx, hash) })
}

func (h *hooked) BlockReceipts(ctx context.Context, block rpc.BlockNumberOrHash) ([]*types.Receipt, error) {
	return call(ctx, h, "eth_getBlockReceipts", func(ctx context.Context) ([]*types.Receipt, error) { return h.b.BlockReceipts(ctx, block) })
}
