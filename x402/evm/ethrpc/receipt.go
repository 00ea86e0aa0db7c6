package ethrpc

import (
	"context"
	"math/big"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
)

// receiptJSON is the part of a JSON-RPC receipt that the service reads:
// what settles a payment (status, gas, price), where it is mined (block),
// and the address and topics of its logs (a token's AuthorizationUsed and
// Transfer events). The rest (the bloom, the logs' data, the cumulative
// gas) is skipped, not decoded: a batch's receipt holds two logs a
// transfer.
type receiptJSON struct {
	TxHash            common.Hash     `json:"transactionHash"`
	BlockHash         common.Hash     `json:"blockHash"`
	BlockNumber       *hexutil.Big    `json:"blockNumber"`
	TransactionIndex  hexutil.Uint    `json:"transactionIndex"`
	Status            hexutil.Uint64  `json:"status"`
	GasUsed           hexutil.Uint64  `json:"gasUsed"`
	EffectiveGasPrice *hexutil.Big    `json:"effectiveGasPrice"`
	ContractAddress   *common.Address `json:"contractAddress"`
	Logs              []logJSON       `json:"logs"`
}

// logJSON is the part of a receipt's log that the service reads.
type logJSON struct {
	Address common.Address `json:"address"`
	Topics  []common.Hash  `json:"topics"`
	Removed bool           `json:"removed"`
}

// receipt returns r as a types.Receipt holding only the fields read (no
// bloom, no log data).
func (r *receiptJSON) receipt() *types.Receipt {
	out := &types.Receipt{TxHash: r.TxHash, BlockHash: r.BlockHash, TransactionIndex: uint(r.TransactionIndex),
		Status: uint64(r.Status), GasUsed: uint64(r.GasUsed)}
	if r.BlockNumber != nil {
		out.BlockNumber = (*big.Int)(r.BlockNumber)
	}
	if r.EffectiveGasPrice != nil {
		out.EffectiveGasPrice = (*big.Int)(r.EffectiveGasPrice)
	}
	if r.ContractAddress != nil {
		out.ContractAddress = *r.ContractAddress
	}
	if len(r.Logs) > 0 {
		var number uint64
		if out.BlockNumber != nil {
			number = out.BlockNumber.Uint64()
		}
		logs := make([]types.Log, len(r.Logs))
		out.Logs = make([]*types.Log, len(r.Logs))
		for i, l := range r.Logs {
			logs[i] = types.Log{Address: l.Address, Topics: l.Topics, Removed: l.Removed, TxHash: r.TxHash, BlockHash: r.BlockHash,
				BlockNumber: number}
			out.Logs[i] = &logs[i]
		}
	}
	return out
}

// transactionReceipt reads the receipt of hash from c as far as the
// service needs it (receiptJSON), or NotFound.
func transactionReceipt(ctx context.Context, c *ethclient.Client, hash common.Hash) (*types.Receipt, error) {
	var r *receiptJSON
	if err := c.Client().CallContext(ctx, &r, "eth_getTransactionReceipt", hash); err != nil {
		return nil, err
	}
	if r == nil {
		return nil, ethereum.NotFound
	}
	return r.receipt(), nil
}

// blockReceipts reads the receipts of a block from c as far as the
// service needs them (receiptJSON), or NotFound.
func blockReceipts(ctx context.Context, c *ethclient.Client, block rpc.BlockNumberOrHash) ([]*types.Receipt, error) {
	var rs []*receiptJSON
	if err := c.Client().CallContext(ctx, &rs, "eth_getBlockReceipts", block); err != nil {
		return nil, err
	}
	if rs == nil {
		return nil, ethereum.NotFound
	}
	out := make([]*types.Receipt, len(rs))
	for i, r := range rs {
		out[i] = r.receipt()
	}
	return out, nil
}
