package ethrpc

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
)

// Backend is the JSON-RPC of a chain that Endpoints offers and Meter and
// WithTimeout wrap. *ethclient.Client satisfies it.
type Backend interface {
	ethereum.ChainIDReader
	ethereum.ContractCaller
	ethereum.BlockNumberReader
	ethereum.GasEstimator
	ethereum.LogFilterer
	ethereum.TransactionSender
	CodeAt(ctx context.Context, account common.Address, blockNumber *big.Int) ([]byte, error)
	HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error)
	PendingNonceAt(ctx context.Context, account common.Address) (uint64, error)
	NonceAt(ctx context.Context, account common.Address, blockNumber *big.Int) (uint64, error)
	BalanceAt(ctx context.Context, account common.Address, blockNumber *big.Int) (*big.Int, error)
	SuggestGasTipCap(ctx context.Context) (*big.Int, error)
	TransactionReceipt(ctx context.Context, txHash common.Hash) (*types.Receipt, error)
	BlockReceipts(ctx context.Context, blockNrOrHash rpc.BlockNumberOrHash) ([]*types.Receipt, error)
}

// ChainID returns the chain id of a CAIP-2 eip155 network name such as
// eip155:8453.
func ChainID(network string) (*big.Int, error) {
	ref, ok := strings.CutPrefix(network, "eip155:")
	if !ok || ref == "" || len(ref) > 32 || (len(ref) > 1 && ref[0] == '0') {
		return nil, fmt.Errorf("network %q is not eip155:<chain id>", network)
	}
	id, ok := new(big.Int).SetString(ref, 10)
	if !ok || id.Sign() <= 0 {
		return nil, fmt.Errorf("network %q is not eip155:<chain id>", network)
	}
	return id, nil
}

// IsMethodNotFound reports whether a JSON-RPC call failed because the node
// does not have the method.
func IsMethodNotFound(err error) bool {
	var rerr rpc.Error
	return errors.As(err, &rerr) && rerr.ErrorCode() == -32601
}

// IsIndexing reports whether a node answered that it is still indexing
// transactions: the receipt is not available yet.
func IsIndexing(err error) bool {
	return strings.Contains(err.Error(), "transaction indexing is in progress")
}

// IsAlreadyKnown reports whether a node refused a transaction because it
// already has it (geth says "already known", anvil "transaction already
// imported").
func IsAlreadyKnown(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "already known") || strings.Contains(msg, "already imported")
}
