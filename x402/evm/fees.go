package evm

import (
	"context"
	"fmt"
	"log/slog"
	"math/big"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"

	"github.com/x402d/x402d/internal/clock"
)

// fees is what the relayer knows of the cost of its transactions on one
// chain: the tip and fee cap of recent sends (read at most once per
// cacheFor), the gas limits learnt for transfers of each asset (alone and
// inside batches), the gas limit of the head block, and whether
// settlements wait for the base fee to fall under MaxFee.
//
// mu guards gas, batched and last; blockGas and waitSince are atomics. mu
// is never held while calling out.
type fees struct {
	clock   clock.Clock
	network string
	backend Backend
	logger  *slog.Logger
	// maxFee is RelayerConfig.MaxFee (nil: no cap).
	maxFee *big.Int
	// cacheFor is RelayerConfig.FeeCacheFor.
	cacheFor time.Duration
	// recheck is how long a send waiting for the base fee to fall waits
	// before reading it again (RelayerConfig.KeepEvery).
	recheck time.Duration
	// blockShare is RelayerConfig.BlockGasShare.
	blockShare float64

	mu sync.Mutex
	// gas is the gas limit given to transfers of each asset (gasLimit).
	gas map[common.Address]uint64
	// batched is the gas a transfer of each asset used inside recent
	// batches (batchedGas).
	batched map[common.Address]uint64
	// last are the fees of the latest read.
	last feeQuote

	// blockGas is the gas limit of the head block last read.
	blockGas atomic.Uint64
	// waitSince is when settlements started waiting for the base fee to
	// fall under maxFee (unix nanoseconds; 0: none wait).
	waitSince atomic.Int64
}

// feeQuote are the fee parameters of a transaction, and when they were
// read.
type feeQuote struct {
	tip, feeCap *big.Int
	readAt      time.Time
}

func newFees(network string, backend Backend, cfg *RelayerConfig) *fees {
	return &fees{network: network, backend: backend, clock: cfg.Clock, logger: cfg.Logger, maxFee: cfg.MaxFee, cacheFor: cfg.FeeCacheFor,
		recheck: cfg.KeepEvery, blockShare: cfg.BlockGasShare, gas: map[common.Address]uint64{}, batched: map[common.Address]uint64{}}
}

// current returns the tip and fee cap of a transaction sent now: the
// node's suggested tip and twice the head's base fee above it, read at most
// once per cacheFor, the fee cap never above maxFee. While the head's base
// fee and the tip are above maxFee, current waits for a block that brings
// them under it (or for ctx to end): the chain would not mine the
// transaction.
func (f *fees) current(ctx context.Context) (tip, feeCap *big.Int, err error) {
	f.mu.Lock()
	last := f.last
	f.mu.Unlock()
	if last.tip != nil && f.clock.Now().Sub(last.readAt) < f.cacheFor {
		return last.tip, last.feeCap, nil
	}
	for {
		readAt := f.clock.Now()
		tip, err = f.backend.SuggestGasTipCap(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("suggest gas tip: %w", err)
		}
		if tip.Sign() == 0 {
			tip = big.NewInt(1)
		}
		head, err := f.backend.HeaderByNumber(ctx, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("read head block: %w", err)
		}
		f.blockGas.Store(head.GasLimit)
		base := cmpOr(head.BaseFee, new(big.Int))
		feeCap = new(big.Int).Add(tip, new(big.Int).Mul(base, big.NewInt(2)))
		if capFee := f.maxFee; capFee != nil && feeCap.Cmp(capFee) > 0 {
			if new(big.Int).Add(base, tip).Cmp(capFee) > 0 {
				// Above the operator's cap: wait for the next block.
				if f.waitSince.CompareAndSwap(0, f.clock.Now().UnixNano()) {
					f.logger.WarnContext(ctx, "settlements wait: the base fee is above SETTLEMENT_MAX_FEE_GWEI", "network", f.network, "base_fee_wei", base.String(), "max_fee_wei", capFee.String())
				}
				if clock.Sleep(ctx, f.clock, f.recheck) != nil {
					return nil, nil, fmt.Errorf("base fee %s wei above the maximum %s: %w", base, capFee, context.Cause(ctx))
				}
				continue
			}
			feeCap = new(big.Int).Set(capFee)
		}
		if f.waitSince.Swap(0) != 0 {
			f.logger.InfoContext(ctx, "settlements resume: the base fee is under SETTLEMENT_MAX_FEE_GWEI", "network", f.network, "base_fee_wei", base.String())
		}
		f.mu.Lock()
		f.last = feeQuote{tip: tip, feeCap: feeCap, readAt: readAt}
		f.mu.Unlock()
		return tip, feeCap, nil
	}
}

// stale makes the next read of the fees ask the chain again: a transaction
// that sat unmined was priced by fees the chain has moved past.
func (f *fees) stale() {
	f.mu.Lock()
	f.last.readAt = time.Time{}
	f.mu.Unlock()
}

// raised returns the fees of a new transaction of the nonce of tx: at
// least the chain's of now (read afresh), at least factor times tx's, the
// fee cap never above maxFee.
func (f *fees) raised(ctx context.Context, tx *types.Transaction, factor int64) (tip, feeCap *big.Int, err error) {
	f.stale()
	tip, feeCap, err = f.current(ctx)
	if err != nil {
		return nil, nil, err
	}
	n := big.NewInt(factor)
	tip = bigMax(tip, new(big.Int).Mul(tx.GasTipCap(), n))
	feeCap = bigMax(feeCap, new(big.Int).Mul(tx.GasFeeCap(), n))
	if f.maxFee != nil {
		feeCap = bigMin(feeCap, f.maxFee)
		tip = bigMin(tip, feeCap)
	}
	return tip, feeCap, nil
}

// waitingSince returns since when settlements have been waiting for the
// base fee to fall under maxFee, and whether they do.
func (f *fees) waitingSince() (time.Time, bool) {
	since := f.waitSince.Load()
	return time.Unix(0, since), since != 0
}

// learnBlock records the gas limit of the head block.
func (f *fees) learnBlock(head *types.Header) { f.blockGas.Store(head.GasLimit) }

// batchGas is the most gas one batch transaction may ask for: blockShare
// of the last block gas limit read, and never above maxBatchGas
// (EIP-7825's cap of a transaction).
func (f *fees) batchGas() uint64 {
	limit := uint64(maxBatchGas)
	if block := f.blockGas.Load(); block > 0 {
		limit = min(limit, uint64(float64(block)*f.blockShare))
	}
	return limit
}

// gasLimit returns the gas limit for a transfer of asset learnt from an
// earlier estimate, if any.
func (f *fees) gasLimit(asset common.Address) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	gas, ok := f.gas[asset]
	return gas, ok
}

// learnGas records the gas limit for transfers of asset from an estimate:
// half as much again, because a transfer to an account holding none of the
// token writes a fresh storage slot (about 17,000 gas more than one to an
// account holding some), and a limit set too high costs nothing (only the
// gas used is paid). It returns the limit.
func (f *fees) learnGas(asset common.Address, estimate uint64) uint64 {
	limit := estimate + estimate/2
	f.mu.Lock()
	f.gas[asset] = limit
	f.mu.Unlock()
	return limit
}

// forgetGas drops the gas limits learnt for asset: a transfer ran out of
// them.
func (f *fees) forgetGas(asset common.Address) {
	f.mu.Lock()
	delete(f.gas, asset)
	delete(f.batched, asset)
	f.mu.Unlock()
}

// batchedGas returns the gas limit for a transfer of asset inside a batch,
// learnt from the receipts of recent batches, if any: a quarter more than
// such a transfer used. It is well under the limit of a transfer sent alone
// (which pays a transaction's 21,000 gas, and reads the token's code cold),
// and what a batch asks for decides how many batches a block takes: a block
// admits a transaction only while the gas its earlier transactions used
// plus the new one's limit fit.
func (f *fees) batchedGas(asset common.Address) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	used, ok := f.batched[asset]
	return used + used/4, ok
}

// learnBatchedGas records what each of n transfers of asset used in a
// batch whose transfers all succeeded, beyond the transaction's own 21,000
// gas (which batchOverhead counts): a higher figure at once, a lower one an
// eighth of the way (one cheap batch, its payees already holding the token,
// does not set the limit of the next).
func (f *fees) learnBatchedGas(asset common.Address, gasUsed uint64, n int) {
	if n == 0 || gasUsed <= params.TxGas {
		return
	}
	per := (gasUsed - params.TxGas) / uint64(n)
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.batched[asset]; ok && per < cur {
		per = cur - (cur-per)/8
	}
	f.batched[asset] = per
}

// bump returns v raised by an eighth (and at least 1): above the tenth
// geth and anvil ask of a replacement.
func bump(v *big.Int) *big.Int {
	b := new(big.Int).Div(v, big.NewInt(8))
	if b.Sign() == 0 {
		b.SetInt64(1)
	}
	return b.Add(b, v)
}

func bigMax(a, b *big.Int) *big.Int {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

func bigMin(a, b *big.Int) *big.Int {
	if a.Cmp(b) <= 0 {
		return a
	}
	return b
}

func cmpOr(v, def *big.Int) *big.Int {
	if v == nil {
		return def
	}
	return v
}
