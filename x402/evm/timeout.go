package evm

import (
	"context"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
)

// timeoutBackend bounds every call to a chain's node by its own timeout
// (RelayerConfig.RPCTimeout): each method of Backend but
// SubscribeFilterLogs, which opens a subscription rather than making a
// call, and which neither the relayer nor the verifier uses
// (TestTimeoutBackend_EveryMethod checks them all).
type timeoutBackend struct {
	Backend
	timeout time.Duration
}

func (b timeoutBackend) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.timeout)
}

func (b timeoutBackend) ChainID(ctx context.Context) (*big.Int, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.ChainID(ctx)
}

func (b timeoutBackend) CallContract(ctx context.Context, msg ethereum.CallMsg, block *big.Int) ([]byte, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.CallContract(ctx, msg, block)
}

func (b timeoutBackend) CodeAt(ctx context.Context, account common.Address, block *big.Int) ([]byte, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.CodeAt(ctx, account, block)
}

func (b timeoutBackend) BlockNumber(ctx context.Context) (uint64, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.BlockNumber(ctx)
}

func (b timeoutBackend) EstimateGas(ctx context.Context, msg ethereum.CallMsg) (uint64, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.EstimateGas(ctx, msg)
}

func (b timeoutBackend) FilterLogs(ctx context.Context, q ethereum.FilterQuery) ([]types.Log, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.FilterLogs(ctx, q)
}

func (b timeoutBackend) SendTransaction(ctx context.Context, tx *types.Transaction) error {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.SendTransaction(ctx, tx)
}

func (b timeoutBackend) HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.HeaderByNumber(ctx, number)
}

func (b timeoutBackend) PendingNonceAt(ctx context.Context, account common.Address) (uint64, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.PendingNonceAt(ctx, account)
}

func (b timeoutBackend) NonceAt(ctx context.Context, account common.Address, block *big.Int) (uint64, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.NonceAt(ctx, account, block)
}

func (b timeoutBackend) BalanceAt(ctx context.Context, account common.Address, block *big.Int) (*big.Int, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.BalanceAt(ctx, account, block)
}

func (b timeoutBackend) SuggestGasTipCap(ctx context.Context) (*big.Int, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.SuggestGasTipCap(ctx)
}

func (b timeoutBackend) TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.TransactionReceipt(ctx, hash)
}

func (b timeoutBackend) BlockReceipts(ctx context.Context, block rpc.BlockNumberOrHash) ([]*types.Receipt, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	return b.Backend.BlockReceipts(ctx, block)
}
