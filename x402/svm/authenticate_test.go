package svm_test

import (
	"context"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/svm"
)

// TestVerifier_Authenticate checks the Solana payments that only prove
// their payer (a new payment under a payment identifier used before): the
// transfer to the seller of its price, signed by its authority; not its
// funds, its blockhash or its simulation.
func TestVerifier_Authenticate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	stranger := newKey(t)
	testCases := []struct {
		name       string
		parts      func(p *parts)
		wantPayer  solana.PublicKey
		wantReason string
	}{
		{name: "ok, the official client's layout", parts: func(p *parts) {}, wantPayer: f.authority.PublicKey()},
		{name: "ok, a dead blockhash", parts: func(p *parts) { p.blockhash = solana.Hash{1} }, wantPayer: f.authority.PublicKey()},
		{name: "ok, more than the authority holds", parts: func(p *parts) {
			p.ixs[2] = f.transfer(t, svm.TokenProgram, ata(t, stranger.PublicKey(), f.mint, svm.TokenProgram), f.mint,
				ata(t, f.payTo, f.mint, svm.TokenProgram), stranger.PublicKey(), 10000)
			p.signers = []solana.PrivateKey{stranger}
		}, wantPayer: stranger.PublicKey()},
		{name: "nok, unsigned by its authority", parts: func(p *parts) { p.signers = nil }, wantReason: svm.ReasonSignatureInvalid},
		{name: "nok, signed by another key", parts: func(p *parts) {
			p.tamper = func(tx *solana.Transaction) { copy(tx.Signatures[1][:], newKey(t)[:64]) }
		}, wantReason: svm.ReasonSignatureInvalid},
		{name: "nok, another amount", parts: f.authorityPays(t, svm.TokenProgram, f.mint, ata(t, f.payTo, f.mint, svm.TokenProgram), 1), wantReason: svm.ReasonAmountMismatch},
		{name: "nok, another recipient", parts: f.authorityPays(t, svm.TokenProgram, f.mint, ata(t, stranger.PublicKey(), f.mint, svm.TokenProgram), 10000), wantReason: svm.ReasonRecipientMismatch},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			req := f.requirement()
			p := f.parts(t, req, svm.TokenProgram)
			tc.parts(p)
			_, b64 := p.build(t)
			payer, err := f.verifier.Authenticate(ctx, req, paymentPayload(req, b64))
			if tc.wantReason != "" {
				r, ok := err.(*x402.Refusal)
				require.True(t, ok, "%v", err)
				require.Equal(t, tc.wantReason, r.Reason, r.Message)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantPayer.String(), payer)
		})
	}
}
