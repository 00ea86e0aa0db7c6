package evm

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402d/x402d/internal/clock"
)

// NonceStore allocates a relayer's nonces on a chain among every process
// that sends with the same key, and keeps each allocated nonce's signed
// transaction until the chain has mined one of that nonce. The service's
// implementation is in Postgres (store.RelayerNonces), shared by every
// worker; without one a Relayer keeps its nonces in memory, which is right
// only for a key no other process uses.
type NonceStore interface {
	// AllocateNonce returns a nonce of address on network that no caller
	// was given before, at least floor (the chain's count of the address's
	// mined transactions), and records it as owner's, with no transaction
	// yet.
	AllocateNonce(ctx context.Context, network string, address common.Address, floor uint64, owner string) (uint64, error)
	// RecordNonce records raw, a signed transaction of nonce, as the one to
	// send again for it, and owner as the process that last acted on it.
	RecordNonce(ctx context.Context, network string, address common.Address, nonce uint64, owner string, raw []byte) error
	// TouchNonces records that owner, alive, still awaits nonces: they are
	// not another process's to send again or fill.
	TouchNonces(ctx context.Context, network string, address common.Address, owner string, nonces []uint64) error
	// OutstandingNonces forgets the nonces below final (mined in blocks
	// held final: no reorganisation gives them back) and returns those
	// from floor on (not mined, as far as the chain says now), lowest
	// first. The nonces in between are kept with their transactions, to be
	// given to the node again if a reorganisation undoes them.
	OutstandingNonces(ctx context.Context, network string, address common.Address, final, floor uint64) ([]OutstandingNonce, error)
}

// OutstandingNonce is an allocated nonce the chain has not mined yet.
type OutstandingNonce struct {
	// Nonce is the nonce.
	Nonce uint64
	// Owner is the process that last acted on it.
	Owner string
	// Raw is its last signed transaction; nil when none was recorded (the
	// process that allocated it died before signing).
	Raw []byte
	// UpdatedAt is when it was allocated or last recorded.
	UpdatedAt time.Time
}

// memNonces is the NonceStore of a Relayer given none: the nonces of this
// process only. mu guards next and out.
type memNonces struct {
	clock clock.Clock
	mu    sync.Mutex
	next  map[string]uint64
	out   map[string]map[uint64]*OutstandingNonce
}

func newMemNonces(c clock.Clock) *memNonces {
	return &memNonces{clock: clock.Or(c), next: map[string]uint64{}, out: map[string]map[uint64]*OutstandingNonce{}}
}

func (m *memNonces) AllocateNonce(_ context.Context, network string, address common.Address, floor uint64, owner string) (uint64, error) {
	key := network + "/" + address.Hex()
	m.mu.Lock()
	defer m.mu.Unlock()
	n := max(m.next[key], floor)
	m.next[key] = n + 1
	if m.out[key] == nil {
		m.out[key] = map[uint64]*OutstandingNonce{}
	}
	m.out[key][n] = &OutstandingNonce{Nonce: n, Owner: owner, UpdatedAt: m.clock.Now()}
	return n, nil
}

func (m *memNonces) RecordNonce(_ context.Context, network string, address common.Address, nonce uint64, owner string, raw []byte) error {
	key := network + "/" + address.Hex()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.out[key] == nil {
		m.out[key] = map[uint64]*OutstandingNonce{}
	}
	m.out[key][nonce] = &OutstandingNonce{Nonce: nonce, Owner: owner, Raw: raw, UpdatedAt: m.clock.Now()}
	return nil
}

func (m *memNonces) TouchNonces(_ context.Context, network string, address common.Address, owner string, nonces []uint64) error {
	key := network + "/" + address.Hex()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range nonces {
		if o := m.out[key][n]; o != nil {
			o.Owner, o.UpdatedAt = owner, m.clock.Now()
		}
	}
	return nil
}

func (m *memNonces) OutstandingNonces(_ context.Context, network string, address common.Address, final, floor uint64) ([]OutstandingNonce, error) {
	key := network + "/" + address.Hex()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []OutstandingNonce
	for n, o := range m.out[key] {
		if n < final {
			delete(m.out[key], n)
			continue
		}
		if n >= floor {
			out = append(out, *o)
		}
	}
	slices.SortFunc(out, func(a, b OutstandingNonce) int { return cmpUint64(a.Nonce, b.Nonce) })
	return out, nil
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
