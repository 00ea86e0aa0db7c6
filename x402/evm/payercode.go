package evm

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402d/x402d/internal/clock"
)

// DefaultPayerCodeGasCap is the default gas cap of a settlement that runs
// the payer's code (RelayerConfig.PayerCodeGasCap). On Circle's USDC a
// transfer from a deployed contract wallet whose isValidSignature checks an
// ECDSA signature uses about 84,000 gas, and one whose transaction also
// deploys the wallet (ERC-6492, a whole wallet contract from its factory)
// about 302,000, given half as much again as its limit (453,000): 500,000
// admits both, and bounds what a wallet whose code reverts can burn to about
// six plain transfers.
const DefaultPayerCodeGasCap = 500_000

// DefaultPayerCodeRefuseFor is how long the wallet, and the factory, whose
// code made a settlement fail after verification are refused by default
// (RelayerConfig.PayerCodeRefuseFor).
const DefaultPayerCodeRefuseFor = 24 * time.Hour

// ReasonPayerCodeRefused is the reason of a payment whose wallet, or the
// factory that deploys it, made an earlier settlement fail after its
// verification (its code answered verification and not the chain): it is
// refused, before any work, until its refusal ends.
const ReasonPayerCodeRefused = "invalid_exact_evm_payer_code_refused"

// refusalsCacheFor is how long verification reuses the refusals of a
// network read from the PayerCodeRefusals: a wallet refused by another
// process is refused by verification here at most this late (its
// settlement, which reads them afresh, is refused meanwhile).
const refusalsCacheFor = time.Second

// PayerCodeRefusals keeps the wallets and wallet factories whose code made
// a settlement fail after its payment was verified, each until its refusal
// ends: verification refuses their payments, and the relayer sends none of
// theirs. It is shared by every process that verifies or settles
// (store.PayerCodeRefusals); the default is memory, right only for a single
// process.
type PayerCodeRefusals interface {
	// RefusePayerCode refuses addrs on network until until (a refusal
	// already longer is kept).
	RefusePayerCode(ctx context.Context, network string, addrs []common.Address, until time.Time) error
	// PayerCodeRefused returns the addresses refused on network at now,
	// each with the end of its refusal.
	PayerCodeRefused(ctx context.Context, network string, now time.Time) (map[common.Address]time.Time, error)
}

// memRefusals is the PayerCodeRefusals of one process.
type memRefusals struct {
	clock   clock.Clock
	mu      sync.Mutex
	refused map[string]map[common.Address]time.Time
}

func newMemRefusals(c clock.Clock) *memRefusals {
	return &memRefusals{clock: clock.Or(c), refused: map[string]map[common.Address]time.Time{}}
}

func (m *memRefusals) RefusePayerCode(_ context.Context, network string, addrs []common.Address, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	byAddr := m.refused[network]
	if byAddr == nil {
		byAddr = map[common.Address]time.Time{}
		m.refused[network] = byAddr
	}
	now := m.clock.Now()
	for a, end := range byAddr {
		// Ended refusals go as new ones come.
		if !now.Before(end) {
			delete(byAddr, a)
		}
	}
	for _, a := range addrs {
		if until.After(byAddr[a]) {
			byAddr[a] = until
		}
	}
	return nil
}

func (m *memRefusals) PayerCodeRefused(_ context.Context, network string, now time.Time) (map[common.Address]time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[common.Address]time.Time{}
	for a, until := range m.refused[network] {
		if now.Before(until) {
			out[a] = until
		}
	}
	return out, nil
}

// refusals reads a PayerCodeRefusals: afresh for a settlement about to
// send (fresh), at most refusalsCacheFor old for verification (cached), so
// that verification adds no round trip to the database but one a second
// per network.
type refusals struct {
	store PayerCodeRefusals

	mu sync.Mutex
	// reads holds each network's refusals as last read.
	reads map[string]*refusalsRead
}

// refusalsRead is a network's refusals as read at readAt; loading is set
// while one caller reads them again (the others use these meanwhile).
type refusalsRead struct {
	refused map[common.Address]time.Time
	readAt  time.Time
	loading bool
}

func newRefusals(store PayerCodeRefusals) *refusals {
	if store == nil {
		store = newMemRefusals(nil)
	}
	return &refusals{store: store, reads: map[string]*refusalsRead{}}
}

// fresh returns the first of addrs refused on network at now, read from
// the store, and the end of its refusal.
func (r *refusals) fresh(ctx context.Context, network string, now time.Time, addrs ...common.Address) (common.Address, time.Time, bool, error) {
	refused, err := r.store.PayerCodeRefused(ctx, network, now)
	if err != nil {
		return common.Address{}, time.Time{}, false, fmt.Errorf("read payer code refusals of %s: %w", network, err)
	}
	r.mu.Lock()
	r.reads[network] = &refusalsRead{refused: refused, readAt: now}
	r.mu.Unlock()
	a, until, ok := firstRefused(refused, now, addrs)
	return a, until, ok, nil
}

// cached returns the first of addrs refused on network at now, as read at
// most refusalsCacheFor before now (by the caller's clock: a read stamped
// after now is read again), and the end of its refusal.
func (r *refusals) cached(ctx context.Context, network string, now time.Time, addrs ...common.Address) (common.Address, time.Time, bool, error) {
	r.mu.Lock()
	read := r.reads[network]
	if age := now.Sub(readAt(read)); read == nil || (!read.loading && (age >= refusalsCacheFor || age < 0)) {
		if read == nil {
			read = &refusalsRead{}
			r.reads[network] = read
		}
		read.loading = true
		r.mu.Unlock()
		refused, err := r.store.PayerCodeRefused(ctx, network, now)
		r.mu.Lock()
		read.loading = false
		if err != nil {
			r.mu.Unlock()
			return common.Address{}, time.Time{}, false, fmt.Errorf("read payer code refusals of %s: %w", network, err)
		}
		read = &refusalsRead{refused: refused, readAt: now}
		r.reads[network] = read
	}
	refused := read.refused
	r.mu.Unlock()
	a, until, ok := firstRefused(refused, now, addrs)
	return a, until, ok, nil
}

// refuse refuses addrs (the zero address left out) on network until until,
// and has the next reads here see it.
func (r *refusals) refuse(ctx context.Context, network string, until time.Time, addrs ...common.Address) error {
	addrs = slices.DeleteFunc(slices.Clone(addrs), func(a common.Address) bool { return a == (common.Address{}) })
	if err := r.store.RefusePayerCode(ctx, network, addrs, until); err != nil {
		return fmt.Errorf("refuse payer code %v on %s: %w", addrs, network, err)
	}
	r.mu.Lock()
	delete(r.reads, network)
	r.mu.Unlock()
	return nil
}

// readAt returns when read was read (the zero time for none).
func readAt(read *refusalsRead) time.Time {
	if read == nil {
		return time.Time{}
	}
	return read.readAt
}

// firstRefused returns the first of addrs that refused holds at now.
func firstRefused(refused map[common.Address]time.Time, now time.Time, addrs []common.Address) (common.Address, time.Time, bool) {
	for _, a := range addrs {
		if until, ok := refused[a]; ok && now.Before(until) {
			return a, until, true
		}
	}
	return common.Address{}, time.Time{}, false
}

// payerCodes answers whether payers have code (a contract wallet, an
// EIP-7702 delegation) for the settlements of one chain: read once per
// payer per block, not once per settlement. Code can appear in any block
// (a delegation is one transaction), so an answer, read at the latest
// block, serves only the settlements made while the newest block the
// relayer has read is the one it had read before the answer, and only
// while that read is fresh (receipts.freshHead: a block mined since is seen
// within the receipts' pause); otherwise the code is read again, as it is
// for every settlement while none awaits a receipt. The answers kept are
// those of one block, at most one a payer settling in it.
type payerCodes struct {
	backend Backend
	heads   *receipts

	mu    sync.Mutex
	block uint64
	has   map[common.Address]bool
}

// hasCode reports whether payer has code now, as of the newest block read.
func (c *payerCodes) hasCode(ctx context.Context, payer common.Address) (bool, error) {
	head, fresh := c.heads.freshHead()
	if fresh {
		c.mu.Lock()
		has, ok := c.has[payer]
		ok = ok && c.block == head
		c.mu.Unlock()
		if ok {
			return has, nil
		}
	}
	code, err := c.backend.CodeAt(ctx, payer, nil)
	if err != nil {
		return false, fmt.Errorf("read code of %s: %w", payer.Hex(), err)
	}
	if fresh {
		c.mu.Lock()
		if c.block != head || c.has == nil {
			c.block, c.has = head, map[common.Address]bool{}
		}
		c.has[payer] = len(code) > 0
		c.mu.Unlock()
	}
	return len(code) > 0, nil
}
