package evm_test

import (
	"context"
	"errors"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// rpcCounter counts the RPC calls a metered Backend makes, by purpose.
type rpcCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *rpcCounter) observe(purpose, method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[purpose]++
}

func (c *rpcCounter) count(purpose string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[purpose]
}

// meteredVerifier returns a verifier of the shared chain whose RPC calls
// counter counts.
func meteredVerifier(t *testing.T, counter *rpcCounter) *evm.Verifier {
	t.Helper()
	node := evm.Meter(chain.Client(), &evm.MeterConfig{Observe: counter.observe})
	v, err := evm.NewVerifier(&evm.VerifierConfig{
		Chains:  map[string]evm.Reader{"eip155:8453": node},
		Relayer: chain.Account(devchain.RelayerAccount).Address,
	})
	require.NoError(t, err)
	return v
}

// guardCalls returns a context whose chain guard counts its calls in n and
// answers err.
func guardCalls(n *int, err error) context.Context {
	return x402.WithChainGuard(context.Background(), func() error { *n++; return err })
}

func TestVerifier_EmptyWalletRefusedAgainWithoutRPC(t *testing.T) {
	t.Parallel()
	counter := &rpcCounter{}
	v := meteredVerifier(t, counter)
	empty := newKey(t)

	var guarded int
	_, err := v.Verify(guardCalls(&guarded, nil), requirement(), newPayment(t, empty, requirement()).payload(t, requirement()))
	requireRefusal(t, err, evm.ReasonInsufficientBalance)
	first := counter.count(ethrpc.PurposeVerify)
	require.Equal(t, 1, guarded, "the chain is read once the payment passed the offline checks")
	// The asset's code once, and the simulation, whose revert names the
	// balance: no further reads to say why.
	require.LessOrEqual(t, first, 2)
	require.Zero(t, counter.count(ethrpc.PurposeUnnamed), "every call of Verify is counted as verification's")

	for range 10 {
		_, err = v.Verify(guardCalls(&guarded, nil), requirement(), newPayment(t, empty, requirement()).payload(t, requirement()))
		requireRefusal(t, err, evm.ReasonInsufficientBalance)
	}
	require.Equal(t, first, counter.count(ethrpc.PurposeVerify), "refused again from what is known")
	require.Equal(t, 1, guarded)

	// A payment signed by another key for the empty payer is not refused
	// from the cache for the balance: its signature is checked on chain.
	bad := newPayment(t, chain.Account(1).Key, requirement())
	bad.auth.From = crypto.PubkeyToAddress(empty.PublicKey)
	_, err = v.Verify(guardCalls(&guarded, nil), requirement(), bad.payload(t, requirement()))
	requireRefusal(t, err, evm.ReasonSignature)

	// A funded payer is not refused for the empty one.
	_, err = v.Verify(context.Background(), requirement(), newPayment(t, fundedKey(t, 20_000), requirement()).payload(t, requirement()))
	require.NoError(t, err)
}

func TestVerifier_OfflineRefusalsReadNoChain(t *testing.T) {
	t.Parallel()
	counter := &rpcCounter{}
	v := meteredVerifier(t, counter)
	payer := chain.Account(1).Key
	testCases := []struct {
		name       string
		pay        func(p *payment)
		wantReason string
		wantNever  bool
	}{
		{name: "pays someone else", pay: func(p *payment) { p.auth.To = chain.Account(5).Address }, wantReason: evm.ReasonRecipientMismatch, wantNever: true},
		{name: "expires", pay: func(p *payment) { p.auth.ValidBefore = big.NewInt(time.Now().Unix() + 3) }, wantReason: evm.ReasonValidBefore},
		{name: "not valid yet", pay: func(p *payment) { p.auth.ValidAfter = big.NewInt(time.Now().Unix() + 60) }, wantReason: evm.ReasonValidAfter, wantNever: true},
		{name: "underpays", pay: func(p *payment) { p.auth.Value = big.NewInt(1) }, wantReason: evm.ReasonValueMismatch, wantNever: true},
		{name: "underpays, signed by another key", pay: func(p *payment) { p.auth.Value = big.NewInt(1); p.key = chain.Account(2).Key }, wantReason: evm.ReasonSignature, wantNever: true},
		{name: "smart wallet signature, underpays", pay: func(p *payment) { p.auth.Value = big.NewInt(1); p.sig = make([]byte, 160) }, wantReason: evm.ReasonValueMismatch, wantNever: true},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPayment(t, payer, requirement())
			tc.pay(p)
			var guarded int
			_, err := v.Verify(guardCalls(&guarded, nil), requirement(), p.payload(t, requirement()))
			requireRefusal(t, err, tc.wantReason)
			var refusal *x402.Refusal
			require.True(t, errors.As(err, &refusal))
			require.Equal(t, tc.wantNever, refusal.NeverValid)
			require.Zero(t, guarded)
		})
	}
	require.Zero(t, counter.count(ethrpc.PurposeVerify), "no RPC call for a payment refused without the chain")
}

func TestVerifier_GuardRefusesChainReads(t *testing.T) {
	t.Parallel()
	counter := &rpcCounter{}
	v := meteredVerifier(t, counter)
	limited := errors.New("limited")
	var guarded int
	_, err := v.Verify(guardCalls(&guarded, limited), requirement(), newPayment(t, newKey(t), requirement()).payload(t, requirement()))
	require.ErrorIs(t, err, limited)
	require.Equal(t, 1, guarded)
	require.Zero(t, counter.count(ethrpc.PurposeVerify))
}

func TestMeter_SettlementCounted(t *testing.T) {
	t.Parallel()
	counter := &rpcCounter{}
	node := evm.Meter(chain.Client(), &evm.MeterConfig{Observe: counter.observe})
	r := newRelayerOn(t, node)
	v := newVerifier(t)
	p, err := v.Verify(context.Background(), requirement(), newPayment(t, fundedKey(t, 10_000), requirement()).payload(t, requirement()))
	require.NoError(t, err)
	resp, err := r.Settle(context.Background(), p)
	require.NoError(t, err)
	require.True(t, resp.Success, resp.ErrorReason)
	require.Positive(t, counter.count(ethrpc.PurposeSettle))
	require.Zero(t, counter.count(ethrpc.PurposeVerify))
	_, err = r.Balances(evm.WithPurpose(context.Background(), evm.PurposeRelayer))
	require.NoError(t, err)
	require.Positive(t, counter.count(evm.PurposeRelayer))
}
