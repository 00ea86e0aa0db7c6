package evm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// settledBy returns the successful settlement of p by the transaction
// that used auth (findUse), with its block when the network's policy
// follows settlements until final, or nil when no transfer used it.
func (r *Relayer) settledBy(ctx context.Context, chain *relayChain, p *x402.Payment, asset common.Address, auth *Authorization) (*x402.SettleResponse, error) {
	hash, err := r.findUse(ctx, chain, p, asset, auth)
	if err != nil || hash == (common.Hash{}) {
		return nil, err
	}
	resp := &x402.SettleResponse{Success: true, Transaction: hash.Hex(), Network: p.Network, Payer: p.Payer}
	if !chain.finality.policy.AtReceipt() {
		// Followed until final as any other: from its block (the
		// receipt's outcome kept when this process awaited it).
		var receipt *types.Receipt
		if o, ok := chain.receipts.outcomes.get(hash); ok {
			receipt = o.receipt
		} else if receipt, err = chain.backend.TransactionReceipt(ctx, hash); err != nil {
			return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), err)
		}
		resp.Block = chain.finality.settledBlock(receipt)
	}
	return resp, nil
}

// findUse returns the transaction that used the authorization of p (its
// AuthorizationUsed event), or the zero hash.
func (r *Relayer) findUse(ctx context.Context, chain *relayChain, p *x402.Payment, asset common.Address, auth *Authorization) (common.Hash, error) {
	return findUse(ctx, chain.backend, asset, auth, p.VerifiedAt, r.cfg.LogLookback, r.cfg.LogRange)
}

// LogReader is what looking for a settlement on chain needs: headers (to
// find the blocks of a time window) and event logs.
type LogReader interface {
	ethereum.LogFilterer
	HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error)
}

// DefaultLogLookback is how far back the search for the use of an
// authorization goes when the payment does not say when it was verified,
// unless configured otherwise (RelayerConfig.LogLookback).
const DefaultLogLookback = 24 * time.Hour

// useMargin is how long before a payment's verification the use of its
// authorization is searched for. Verification runs the transfer, so the
// authorization was unused then, but the node read may have lagged the
// chain, and block timestamps are the sequencer's clock, not ours.
const useMargin = 10 * time.Minute

// defaultLogRange is the largest block range of one eth_getLogs request,
// unless configured otherwise.
const defaultLogRange = 2_000

// FindSettlement returns the transaction that used the EIP-3009
// authorization of payment p (its AuthorizationUsed event) on chain, or the
// zero hash when none did (unused, or canceled by the payer). Such a
// transaction moved p's amount to p's payee: the authorization names both,
// and it was verified against the requirement. The blocks searched are
// those the token could have accepted the authorization in (stamped inside
// its validity window) and, when p says when it was verified, not long
// before that; lookback bounds the search of a payment that does not (0 is
// DefaultLogLookback). Clients of a remote facilitator use it to recognise
// their own earlier settlement, whose answer was lost, behind a "nonce
// already used".
func FindSettlement(ctx context.Context, chain LogReader, p *x402.Payment, lookback time.Duration) (common.Hash, error) {
	asset, ep, err := paymentTransfer(p)
	if err != nil {
		return common.Hash{}, fmt.Errorf("find settlement of %s: %w", p.Key(), err)
	}
	if lookback <= 0 {
		lookback = DefaultLogLookback
	}
	hash, err := findUse(ctx, chain, asset, ep.auth, p.VerifiedAt, lookback, defaultLogRange)
	if err != nil {
		return common.Hash{}, fmt.Errorf("find settlement of %s: %w", p.Key(), err)
	}
	return hash, nil
}

// findUse returns the transaction that used auth (its AuthorizationUsed
// event), or the zero hash. The token accepts auth only in a block stamped
// after validAfter and before validBefore, and verification at verifiedAt
// found it unused: the blocks of that window (from useMargin before
// verifiedAt, or from lookback before its end when verifiedAt is zero) are
// searched, oldest first, logRange blocks per request. The window's blocks
// are found by bisection over headers: at most 2·log2(head) header reads, on
// a path taken only when an authorization is found already used. A node
// that prunes history serves only its newest blocks: the search starts no
// earlier than the oldest block it still serves.
func findUse(ctx context.Context, chain LogReader, asset common.Address, auth *Authorization, verifiedAt time.Time, lookback time.Duration, logRange uint64) (common.Hash, error) {
	head, err := chain.HeaderByNumber(ctx, nil)
	if err != nil {
		return common.Hash{}, fmt.Errorf("read head: %w", err)
	}
	// Timestamps t with after < t < before.
	after, before := clampUint64(auth.ValidAfter), clampUint64(auth.ValidBefore)
	if verifiedAt.IsZero() {
		end := min(before, head.Time+1)
		if back := uint64(lookback / time.Second); end > back {
			after = max(after, end-back)
		}
	} else if from := verifiedAt.Add(-useMargin).Unix(); from > 0 {
		after = max(after, uint64(from))
	}
	if before == 0 || after >= before-1 {
		return common.Hash{}, nil
	}
	low, err := firstBlockAfter(ctx, chain, head, 0, after)
	if err != nil {
		return common.Hash{}, err
	}
	end, err := firstBlockAfter(ctx, chain, head, low, before-1)
	if err != nil {
		return common.Hash{}, err
	}
	// Blocks low ≤ n < end are stamped inside the window.
	used := usedTopics(auth)
	topics := [][]common.Hash{{used[0]}, {used[1]}, {used[2]}}
	for from := low; from < end; {
		to := min(end-1, from+logRange-1)
		logs, err := chain.FilterLogs(ctx, ethereum.FilterQuery{
			FromBlock: new(big.Int).SetUint64(from),
			ToBlock:   new(big.Int).SetUint64(to),
			Addresses: []common.Address{asset},
			Topics:    topics,
		})
		if err != nil {
			return common.Hash{}, fmt.Errorf("search AuthorizationUsed logs: %w", err)
		}
		for _, l := range logs {
			if !l.Removed {
				return l.TxHash, nil
			}
		}
		from = to + 1
	}
	return common.Hash{}, nil
}

// firstBlockAfter returns the number of the first block from from up to
// head that the node serves and that is stamped after t, or head's number
// plus one if none is. Timestamps never decrease along a chain, and a node
// that prunes history serves its blocks from its oldest kept up to its
// head: a block it no longer serves (not found, or pruned) sorts before
// every block it serves, so that bisection finds the answer among those it
// serves, in about log2(head-from) header reads, whatever it pruned.
func firstBlockAfter(ctx context.Context, chain LogReader, head *types.Header, from, t uint64) (uint64, error) {
	n := head.Number.Uint64()
	if head.Time <= t {
		return n + 1, nil
	}
	low, high := min(from, n), n // the answer is in [low, high]
	for low < high {
		mid := low + (high-low)/2
		h, err := chain.HeaderByNumber(ctx, new(big.Int).SetUint64(mid))
		switch {
		case isPruned(err):
			low = mid + 1
		case err != nil:
			return 0, fmt.Errorf("read header %d: %w", mid, err)
		case h.Time > t:
			high = mid
		default:
			low = mid + 1
		}
	}
	return low, nil
}

// prunedHistoryCode is the JSON-RPC error code of geth's answer for a block
// older than the history it keeps ("pruned history unavailable").
const prunedHistoryCode = 4444

// isPruned reports whether err is a node's answer for a block it does not
// serve below its head: not found (a pruned node answers null for the
// block; the caller reads only blocks up to the head it was given), or
// geth's pruned-history error.
func isPruned(err error) bool {
	if errors.Is(err, ethereum.NotFound) {
		return true
	}
	var coded rpc.Error
	return errors.As(err, &coded) && coded.ErrorCode() == prunedHistoryCode
}

// clampUint64 returns v, or math.MaxUint64 when v does not fit.
func clampUint64(v *big.Int) uint64 {
	if !v.IsUint64() {
		return math.MaxUint64
	}
	return v.Uint64()
}

// Reconcile implements x402.Reconciler: what the chain shows of p's
// authorization. Used, it is paid when the transaction that used it is
// found (its AuthorizationUsed event; followed until final from its block
// when the network's policy follows settlements), lost otherwise (its nonce
// used without a transfer: canceled by the payer); unused, it is refused
// once a block the network's policy holds final is stamped at or after its
// validBefore (no later block can use it), and pending before.
func (r *Relayer) Reconcile(ctx context.Context, p *x402.Payment) (x402.Reconciliation, *x402.SettleResponse, error) {
	ctx = ethrpc.WithPurpose(ctx, ethrpc.PurposeSettle)
	chain := r.chains[p.Network]
	if chain == nil {
		return x402.ReconcilePending, nil, fmt.Errorf("reconcile %s: no chain client for %s", p.Key(), p.Network)
	}
	asset, ep, err := paymentTransfer(p)
	if err != nil {
		return x402.ReconcilePending, nil, fmt.Errorf("reconcile %s: %w", p.Key(), err)
	}
	auth := ep.auth
	used, err := authorizationState(ctx, chain.backend, asset, auth)
	if err != nil {
		return x402.ReconcilePending, nil, fmt.Errorf("reconcile %s: read authorization state: %w", p.Key(), err)
	}
	if used {
		resp, err := r.settledBy(ctx, chain, p, asset, auth)
		if err != nil {
			return x402.ReconcilePending, nil, fmt.Errorf("reconcile %s: %w", p.Key(), err)
		}
		if resp == nil {
			return x402.ReconcileLost, &x402.SettleResponse{ErrorReason: ReasonNonceAlreadyUsed, Network: p.Network, Payer: p.Payer}, nil
		}
		return x402.ReconcilePaid, resp, nil
	}
	// Refused only once a block the network's policy holds final is
	// stamped past the window: a reorganisation could otherwise mine the
	// transfer in a block of another branch stamped inside it.
	final, err := chain.finality.finalBlock(ctx, chain.backend)
	if err != nil {
		return x402.ReconcilePending, nil, fmt.Errorf("reconcile %s: %w", p.Key(), err)
	}
	header, err := chain.backend.HeaderByNumber(ctx, new(big.Int).SetUint64(final))
	if err != nil {
		return x402.ReconcilePending, nil, fmt.Errorf("reconcile %s: read block %d: %w", p.Key(), final, err)
	}
	if header.Time >= clampUint64(auth.ValidBefore) {
		return x402.ReconcileRefused, &x402.SettleResponse{ErrorReason: ReasonValidBefore, Network: p.Network, Payer: p.Payer}, nil
	}
	return x402.ReconcilePending, nil, nil
}

var _ x402.Reconciler = (*Relayer)(nil)
