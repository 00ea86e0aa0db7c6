package svm_test

import (
	"context"
	"math/big"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/svm"
)

// TestVerifier_Balance reads, for verified payments, the balance of the
// token account their transfer moves funds from, as the chain shows it
// now: the payer's own account under SPL Token and Token-2022, and a smart
// wallet's account found by simulation (refused once the transaction no
// longer pays the price).
func TestVerifier_Balance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	const price = 10_000
	v, err := svm.NewVerifier(&svm.VerifierConfig{FeePayer: f.feePayer.PublicKey(), Simulator: svm.NewRPCSimulator(f.node.URL, nil),
		SmartWallets: &svm.SmartWallets{Programs: []solana.PublicKey{svm.AssociatedTokenProgram}},
		Balances:     svm.NewTokenBalances(f.node.URL, nil)})
	require.NoError(t, err)
	owner := f.authority.PublicKey()

	for _, tc := range []struct {
		name    string
		program solana.PublicKey
		mint    solana.PublicKey
	}{
		{"SPL Token", svm.TokenProgram, f.mint},
		{"Token-2022", svm.Token2022Program, f.mint2022},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := f.requirement()
			req.Asset = tc.mint.String()
			p := f.parts(t, req, tc.program)
			f.authorityPays(t, tc.program, tc.mint, ata(t, f.payTo, tc.mint, tc.program), price)(p)
			_, b64 := p.build(t)
			payment, err := v.Verify(ctx, req, paymentPayload(req, b64))
			require.NoError(t, err)

			got, err := v.Balance(ctx, payment)
			require.NoError(t, err)
			require.Equal(t, big.NewInt(buyerBalance), got)
			// The chain as it is now, not as verification saw it.
			f.node.Fund(ctx, owner, 0, 12_345, tc.mint)
			got, err = v.Balance(ctx, payment)
			require.NoError(t, err)
			require.Equal(t, big.NewInt(12_345), got)
			f.node.Fund(ctx, owner, 0, buyerBalance, tc.mint)
		})
	}

	t.Run("smart wallet", func(t *testing.T) {
		w := newNestedWallet(t, f, price)
		req := f.requirement()
		req.PayTo = w.key.PublicKey().String()
		p := &parts{
			feePayer:  f.feePayer.PublicKey(),
			blockhash: f.node.LatestBlockhash(ctx, "confirmed").Hash,
			ixs:       []solana.Instruction{computeLimit(200_000), computePrice(1), w.recover(t, f, 0), memo("m")},
			signers:   []solana.PrivateKey{w.key},
		}
		_, b64 := p.build(t)
		payment, err := v.Verify(ctx, req, paymentPayload(req, b64))
		require.NoError(t, err)

		got, err := v.Balance(ctx, payment)
		require.NoError(t, err)
		require.Equal(t, big.NewInt(price), got, "the nested account the wallet pays from")
		// The nested account holds more than the price now: the
		// transaction no longer pays it.
		ownerATA := ata(t, w.key.PublicKey(), w.mints[0], svm.TokenProgram)
		f.node.Fund(ctx, ownerATA, 0, price+1, f.mint)
		_, err = v.Balance(ctx, payment)
		var refusal *x402.Refusal
		require.ErrorAs(t, err, &refusal)
		require.Equal(t, svm.ReasonSmartWalletNoTransfer, refusal.Reason, refusal.Message)
	})

	t.Run("no balances configured", func(t *testing.T) {
		req := f.requirement()
		_, b64 := f.parts(t, req, svm.TokenProgram).build(t)
		payment, err := f.verifier.Verify(ctx, req, paymentPayload(req, b64))
		require.NoError(t, err)
		_, err = f.verifier.Balance(ctx, payment)
		require.Error(t, err)
	})
}
