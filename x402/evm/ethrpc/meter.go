package ethrpc

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/x402d/x402d/internal/clock"
)

// Purposes of RPC calls, carried in the context (WithPurpose) and counted
// by Meter.
const (
	// PurposeVerify: the reads that verify a payment (evm.Verifier.Verify).
	PurposeVerify = "verify"
	// PurposeReserve: the reads of payers' balances that reserve a
	// payment against its payer's other payments in flight
	// (evm.Verifier.Balance). They wait for the chain as verification's do.
	PurposeReserve = "reserve"
	// PurposeSettle: what settling a payment sends and reads
	// (evm.Relayer.Settle), its receipts and nonce keeping included, and the
	// reconciliation of one whose attempts all failed (evm.Relayer.Reconcile).
	PurposeSettle = "settle"
	// PurposeFinality: following settlements until final, and the keeper's
	// rounds that go with it (Relayer.Follow, Carried, Keep).
	PurposeFinality = "finality"
	// PurposeRelayer: the relayer's other reads (its balance, its status).
	PurposeRelayer = "relayer"
	// PurposeUnnamed: calls whose context names no purpose (counted as
	// "other").
	PurposeUnnamed = "other"
)

type purposeKey struct{}

// WithPurpose returns ctx naming the purpose of the RPC calls made with it.
func WithPurpose(ctx context.Context, purpose string) context.Context {
	return context.WithValue(ctx, purposeKey{}, purpose)
}

// PurposeOf returns the purpose ctx names (WithPurpose), or PurposeUnnamed.
func PurposeOf(ctx context.Context) string {
	if p, ok := ctx.Value(purposeKey{}).(string); ok {
		return p
	}
	return PurposeUnnamed
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
	// Clock times the waits of verification's calls. Defaults to
	// clock.Real().
	Clock clock.Clock
}

// Meter returns b with every RPC call counted by purpose (Observe) and
// verification's calls given way to the others (VerifyConcurrency). One
// metered Backend serves both the Verifier and the Relayer of a chain, so
// that they share its bound.
func Meter(b Backend, cfg *MeterConfig) Backend {
	c := *cfg
	if c.VerifyConcurrency <= 0 {
		c.VerifyConcurrency = DefaultVerifyConcurrency
	}
	if c.VerifyWait <= 0 {
		c.VerifyWait = 2 * time.Second
	}
	c.Clock = clock.Or(c.Clock)
	gate := &priorityGate{limit: c.VerifyConcurrency, clock: c.Clock}
	return &hooked{b: b, hook: func(ctx context.Context, method string) (context.Context, func(), error) {
		purpose := PurposeOf(ctx)
		if purpose == PurposeVerify || purpose == PurposeReserve {
			if err := gate.wait(ctx, c.VerifyWait); err != nil {
				return nil, nil, err
			}
		} else {
			gate.enter()
		}
		if c.Observe != nil {
			c.Observe(purpose, method)
		}
		return ctx, gate.leave, nil
	}}
}

// priorityGate counts the RPC calls in flight on a chain. Calls of the
// privileged kind always start; the others start only while fewer than
// limit calls are in flight, in the order they came.
type priorityGate struct {
	clock    clock.Clock
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
	timer := g.clock.NewTimer(wait)
	defer timer.Stop()
	var err error
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C():
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
