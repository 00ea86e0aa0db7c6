package svm_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/svm"
)

// TestSettler settles payments on the LiteSVM node: the transfer lands
// once, a retried Settle finds it, a transfer the chain refuses is a failed
// settlement (with the node's preflight or without), and an unreachable
// node is an error.
func TestSettler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	settler, err := svm.NewSettler(&svm.SettlerConfig{Key: f.feePayer, URL: f.node.URL, Poll: 50 * time.Millisecond, Polls: 200})
	require.NoError(t, err)
	owner := f.authority.PublicKey()
	source, dest := ata(t, owner, f.mint, svm.TokenProgram), ata(t, f.payTo, f.mint, svm.TokenProgram)

	pay := func(amount uint64) *x402.Payment {
		req := f.requirement()
		p := f.parts(t, req, svm.TokenProgram)
		p.ixs[2] = f.transfer(t, svm.TokenProgram, source, f.mint, dest, owner, amount)
		_, b64 := p.build(t)
		raw, err := json.Marshal(paymentPayload(req, b64))
		require.NoError(t, err)
		return &x402.Payment{Network: x402.SolanaMainnet, Payer: owner.String(), Payload: raw}
	}

	p := pay(10_000)
	res, err := settler.Settle(ctx, p)
	require.NoError(t, err)
	require.True(t, res.Success, res.ErrorReason)
	require.NotEmpty(t, res.Transaction)
	require.Equal(t, uint64(10_000), f.node.TokenBalance(ctx, dest))
	require.Equal(t, uint64(buyerBalance-10_000), f.node.TokenBalance(ctx, source))

	// A retry (the first answer lost) finds the transaction and sends nothing.
	again, err := settler.Settle(ctx, p)
	require.NoError(t, err)
	require.Equal(t, res, again)
	require.Equal(t, uint64(10_000), f.node.TokenBalance(ctx, dest))

	// A transfer the chain refuses is a failed settlement, not an error.
	failed, err := settler.Settle(ctx, pay(buyerBalance))
	require.NoError(t, err)
	require.False(t, failed.Success)
	require.Equal(t, svm.ReasonTransactionFailed, failed.ErrorReason)

	// Sent without preflight (the verifier simulated it): the transfer
	// lands once; one the chain refuses lands failed, a failed settlement.
	direct, err := svm.NewSettler(&svm.SettlerConfig{Key: f.feePayer, URL: f.node.URL, Poll: 50 * time.Millisecond, Polls: 200, SkipPreflight: true})
	require.NoError(t, err)
	res, err = direct.Settle(ctx, pay(7_000))
	require.NoError(t, err)
	require.True(t, res.Success, res.ErrorReason)
	require.Equal(t, uint64(17_000), f.node.TokenBalance(ctx, dest))
	failed, err = direct.Settle(ctx, pay(buyerBalance-1))
	require.NoError(t, err)
	require.False(t, failed.Success)
	require.Equal(t, svm.ReasonTransactionFailed, failed.ErrorReason)
	require.Equal(t, uint64(17_000), f.node.TokenBalance(ctx, dest))

	// Another fee payer's transaction is not ours to sign.
	other, err := svm.NewSettler(&svm.SettlerConfig{Key: newKey(t), URL: f.node.URL, Poll: time.Millisecond})
	require.NoError(t, err)
	refused, err := other.Settle(ctx, pay(10_000))
	require.NoError(t, err)
	require.False(t, refused.Success)
	require.Equal(t, svm.ReasonFeePayerNotManaged, refused.ErrorReason)
	require.Equal(t, uint64(17_000), f.node.TokenBalance(ctx, dest), "nothing else moved")

	// An unreachable node is an error: River tries again.
	down, err := svm.NewSettler(&svm.SettlerConfig{Key: f.feePayer, URL: "http://127.0.0.1:1", Poll: time.Millisecond})
	require.NoError(t, err)
	_, err = down.Settle(ctx, pay(10_000))
	require.Error(t, err)
}

// TestSettlerCommitment settles a payment at each commitment on the
// LiteSVM node (a block every 400 ms, finalized 32 blocks after it is
// made): at confirmed the settlement is done a block after the transaction
// lands, long before it is finalized; at finalized only once it is.
func TestSettlerCommitment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	owner := f.authority.PublicKey()
	source, dest := ata(t, owner, f.mint, svm.TokenProgram), ata(t, f.payTo, f.mint, svm.TokenProgram)
	for i, c := range []struct {
		commitment svm.Commitment
		status     string
	}{
		{"", "confirmed"}, // the default
		{svm.CommitmentConfirmed, "confirmed"},
		{svm.CommitmentFinalized, "finalized"},
	} {
		settler, err := svm.NewSettler(&svm.SettlerConfig{Key: f.feePayer, URL: f.node.URL, Commitment: c.commitment})
		require.NoError(t, err)
		req := f.requirement()
		p := f.parts(t, req, svm.TokenProgram)
		p.ixs[2] = f.transfer(t, svm.TokenProgram, source, f.mint, dest, owner, uint64(1_000+i)) // a transaction of its own
		_, b64 := p.build(t)
		raw, err := json.Marshal(paymentPayload(req, b64))
		require.NoError(t, err)
		start := time.Now()
		res, err := settler.Settle(ctx, &x402.Payment{Network: x402.SolanaMainnet, Payer: owner.String(), Payload: raw})
		require.NoError(t, err)
		require.True(t, res.Success, res.ErrorReason)
		status, txErr := f.node.SignatureStatus(ctx, res.Transaction)
		require.Empty(t, txErr)
		require.Equal(t, c.status, status, "commitment %q", c.commitment)
		t.Logf("settled at %q in %s", c.commitment, time.Since(start).Round(time.Millisecond))
	}

	_, err := svm.NewSettler(&svm.SettlerConfig{Key: f.feePayer, URL: f.node.URL, Commitment: "processed"})
	require.ErrorContains(t, err, `"processed" is not confirmed or finalized`)
}
