package evm

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm/channel"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// FinalityPolicy is when a settlement on a chain counts as final: a block
// the node tags (safe, finalized) has reached the settlement's block, or
// Depth blocks are mined on top of it. The zero policy holds a settlement
// final at its receipt (a chain that cannot reorganise, as the devchain).
type FinalityPolicy struct {
	// Tag is "safe" or "finalized", or empty for a depth.
	Tag string
	// Depth is the number of blocks mined on top of a settlement's block
	// before it is final, when Tag is empty.
	Depth uint64
}

// The block tags a FinalityPolicy may name.
const (
	FinalitySafe      = "safe"
	FinalityFinalized = "finalized"
)

// ParseFinality parses a finality policy: "safe", "finalized",
// "depth:N" (N blocks on top), or "receipt" (depth 0: final at once).
func ParseFinality(s string) (FinalityPolicy, error) {
	switch s = strings.TrimSpace(strings.ToLower(s)); s {
	case FinalitySafe, FinalityFinalized:
		return FinalityPolicy{Tag: s}, nil
	case "receipt":
		return FinalityPolicy{}, nil
	}
	if n, ok := strings.CutPrefix(s, "depth:"); ok {
		depth, err := strconv.ParseUint(n, 10, 32)
		if err == nil {
			return FinalityPolicy{Depth: depth}, nil
		}
	}
	return FinalityPolicy{}, fmt.Errorf("finality %q is not safe, finalized, depth:N or receipt", s)
}

// String returns the policy as ParseFinality reads it.
func (p FinalityPolicy) String() string {
	switch {
	case p.Tag != "":
		return p.Tag
	case p.Depth == 0:
		return "receipt"
	}
	return "depth:" + strconv.FormatUint(p.Depth, 10)
}

// AtReceipt reports whether p holds a settlement final at its receipt:
// nothing is followed after it.
func (p FinalityPolicy) AtReceipt() bool { return p.Tag == "" && p.Depth == 0 }

// DefaultFinality returns the finality policy of network by default: its
// entry in x402.Networks, and "finalized" for a network not listed there.
func DefaultFinality(network string) FinalityPolicy {
	if n, ok := x402.NetworkByID(network); ok && n.Finality != "" {
		if p, err := ParseFinality(n.Finality); err == nil {
			return p
		}
	}
	return FinalityPolicy{Tag: FinalityFinalized}
}

// finality is when settlements on one chain are final: its policy, and the
// relayer's nonce at the newest final block, as Follow last read it (the
// relayer's transactions below it are final, and their records may go).
// finalNonce is an atomic; the rest does not change.
type finality struct {
	policy     FinalityPolicy
	finalNonce atomic.Uint64
}

// finalBlock returns the number of the newest block of the chain that the
// policy holds final.
func (f *finality) finalBlock(ctx context.Context, backend Backend) (uint64, error) {
	return f.policy.FinalBlock(ctx, backend)
}

// FinalBlockReader is what FinalityPolicy.FinalBlock reads of a chain: its
// head, and the headers of its tagged blocks.
type FinalBlockReader interface {
	ethereum.BlockNumberReader
	HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error)
}

// FinalBlock returns the number of the newest block of the chain r reads
// that p holds final: the head less Depth, or the block of p's tag.
func (p FinalityPolicy) FinalBlock(ctx context.Context, r FinalBlockReader) (uint64, error) {
	if p.Tag == "" {
		head, err := r.BlockNumber(ctx)
		if err != nil {
			return 0, fmt.Errorf("read block number: %w", err)
		}
		return head - min(head, p.Depth), nil
	}
	tag := rpc.SafeBlockNumber
	if p.Tag == FinalityFinalized {
		tag = rpc.FinalizedBlockNumber
	}
	h, err := r.HeaderByNumber(ctx, big.NewInt(int64(tag)))
	if err != nil {
		return 0, fmt.Errorf("read %s block: %w", p.Tag, err)
	}
	return h.Number.Uint64(), nil
}

// settledBlock returns where receipt's transaction was mined when the
// policy follows settlements after their receipt, and nil when it holds
// them final at once.
func (f *finality) settledBlock(receipt *types.Receipt) *x402.SettledBlock {
	if f.policy.AtReceipt() || receipt == nil || receipt.BlockNumber == nil {
		return nil
	}
	return &x402.SettledBlock{Number: receipt.BlockNumber.Uint64(), Hash: receipt.BlockHash.Hex()}
}

// forgetBelow is the nonce below which the relayer's recorded transactions
// on the chain may be forgotten, given mined, the chain's count of its
// mined ones: all of those when settlements are final at their receipt,
// else those mined in blocks held final (read by Follow; none until then),
// which no reorganisation can undo and the keeper will never need to give
// again.
func (f *finality) forgetBelow(mined uint64) uint64 {
	if f.policy.AtReceipt() {
		return mined
	}
	return min(f.finalNonce.Load(), mined)
}

// Follow implements x402.Finality: it sets the state of each of txs, the
// relayer's settlement transactions on network. A transaction whose block
// is not final yet is pending, without a look at it: a reorganisation
// meanwhile is met by the keeper, which gives the node back what it lost
// (keeper.go). Once its block is final, the receipts of that block, one request
// for every transaction in it, say whether it is still there; one that is
// not is looked for by its hash (mined again elsewhere: moved) and is gone
// otherwise. Each call also reads the relayer's nonce at the final block,
// so that the transactions below it are forgotten and none sooner.
func (r *Relayer) Follow(ctx context.Context, network string, txs []x402.FollowedTx) (uint64, error) {
	ctx = ethrpc.WithPurpose(ctx, ethrpc.PurposeFinality)
	chain := r.chains[network]
	if chain == nil {
		return 0, fmt.Errorf("follow %s: no chain client", network)
	}
	if chain.finality.policy.AtReceipt() {
		for i := range txs {
			txs[i].State = x402.TxFinal
		}
		return chain.backend.BlockNumber(ctx)
	}
	final, err := chain.finality.finalBlock(ctx, chain.backend)
	if err != nil {
		return 0, fmt.Errorf("follow %s: %w", network, err)
	}
	nonce, err := chain.backend.NonceAt(ctx, r.address, new(big.Int).SetUint64(final))
	if err != nil {
		return 0, fmt.Errorf("follow %s: relayer nonce at block %d: %w", network, final, err)
	}
	chain.finality.finalNonce.Store(nonce)
	byBlock := map[uint64][]int{}
	for i := range txs {
		txs[i].State = x402.TxPending
		if txs[i].Block.Number <= final {
			byBlock[txs[i].Block.Number] = append(byBlock[txs[i].Block.Number], i)
		}
	}
	for n, idx := range byBlock {
		receipts, err := blockReceipts(ctx, chain, n, txs, idx)
		if err != nil {
			return 0, fmt.Errorf("follow %s: %w", network, err)
		}
		for _, i := range idx {
			tx := &txs[i]
			receipt := receipts[common.HexToHash(tx.Transaction)]
			if receipt == nil {
				// Not in its block any more: mined again elsewhere, or
				// gone from the chain.
				receipt, err = chain.backend.TransactionReceipt(ctx, common.HexToHash(tx.Transaction))
				if errors.Is(err, ethereum.NotFound) || err != nil && ethrpc.IsIndexing(err) {
					tx.State = x402.TxGone
					continue
				}
				if err != nil {
					return 0, fmt.Errorf("follow %s: receipt of %s: %w", network, tx.Transaction, err)
				}
			}
			if receipt.BlockHash.Hex() == tx.Block.Hash && receipt.BlockNumber.Uint64() == tx.Block.Number {
				tx.State = x402.TxFinal
				continue
			}
			tx.State = x402.TxMoved
			tx.Block = x402.SettledBlock{Number: receipt.BlockNumber.Uint64(), Hash: receipt.BlockHash.Hex()}
			r.logger.WarnContext(ctx, "settlement transaction mined again in another block after a reorganisation", "network", network,
				"transaction", tx.Transaction, "block", tx.Block.Number)
		}
	}
	return final, nil
}

// blockReceipts returns the receipts of block n that are among txs[idx],
// by hash: the block's receipts in one request, or each transaction's on a
// node without eth_getBlockReceipts.
func blockReceipts(ctx context.Context, chain *relayChain, n uint64, txs []x402.FollowedTx, idx []int) (map[common.Hash]*types.Receipt, error) {
	out := map[common.Hash]*types.Receipt{}
	receipts, err := chain.receipts.blockReceipts(ctx, n)
	switch {
	case err == nil:
		for _, rc := range receipts {
			out[rc.TxHash] = rc
		}
		return out, nil
	case !errors.Is(err, errNoBlockReceipts):
		return nil, err
	}
	for _, i := range idx {
		hash := common.HexToHash(txs[i].Transaction)
		rc, err := chain.backend.TransactionReceipt(ctx, hash)
		if errors.Is(err, ethereum.NotFound) || err != nil && ethrpc.IsIndexing(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), err)
		}
		if rc.BlockNumber.Uint64() == n {
			out[hash] = rc
		}
	}
	return out, nil
}

// Carried implements x402.Finality: whether transaction tx, as mined now,
// made the transfer of each of payments (its AuthorizationUsed event is in
// the receipt of a successful transaction). A transaction not mined
// carries nothing.
func (r *Relayer) Carried(ctx context.Context, network, tx string, payments []*x402.Payment) ([]bool, error) {
	ctx = ethrpc.WithPurpose(ctx, ethrpc.PurposeFinality)
	chain := r.chains[network]
	if chain == nil {
		return nil, fmt.Errorf("carried by %s: no chain client for %s", tx, network)
	}
	out := make([]bool, len(payments))
	receipt, err := chain.backend.TransactionReceipt(ctx, common.HexToHash(tx))
	if errors.Is(err, ethereum.NotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("carried by %s: receipt: %w", tx, err)
	}
	// Read afresh (the chain may have reorganised since), once for all of
	// payments.
	outcome := newTxOutcome(receipt)
	for i, p := range payments {
		if x402.SchemeOf(p) == x402.SchemeBatchSettlement {
			// A channel's deposit: its EIP-3009 authorization, to the
			// deposit collector, used.
			token, auth, err := depositAuthorization(p)
			if err != nil {
				return nil, fmt.Errorf("carried by %s: %s: %w", tx, p.Key(), err)
			}
			out[i] = outcome.usedIn(token, auth)
			continue
		}
		asset, ep, err := paymentTransfer(p)
		if err != nil {
			return nil, fmt.Errorf("carried by %s: %s: %w", tx, p.Key(), err)
		}
		out[i] = outcome.usedIn(asset, ep.auth)
	}
	return out, nil
}

// depositAuthorization returns the token and the EIP-3009 authorization of
// a batch-settlement deposit payment: the payer's receiveWithAuthorization
// whose nonce binds it to the channel (channel.DepositNonce).
func depositAuthorization(p *x402.Payment) (common.Address, *Authorization, error) {
	raw, err := schemePayload(p.Payload)
	if err != nil {
		return common.Address{}, nil, err
	}
	d, err := channel.Decode(raw)
	if err != nil {
		return common.Address{}, nil, err
	}
	if d.Deposit == nil || d.Deposit.ERC3009 == nil {
		return common.Address{}, nil, fmt.Errorf("payment %s is no EIP-3009 deposit", p.Key())
	}
	return d.Config.Token, &Authorization{From: d.Config.Payer, Nonce: channel.DepositNonce(d.Voucher.ChannelID, d.Deposit.ERC3009.Salt)}, nil
}

var _ x402.Finality = (*Relayer)(nil)
