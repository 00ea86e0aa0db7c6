package svm_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/svm"
)

// nestedWallet is a stand-in for a smart wallet on the LiteSVM node, built
// from a program LiteSVM ships: the Associated Token Account program's
// RecoverNested moves, in an inner TransferChecked signed by the program
// for an account it derives (as a smart wallet's vault is), all the USDC
// that a token account owned by another token account of the wallet holds
// (its "nested" account) to the wallet's own USDC account. The wallet is
// the seller (payTo): the transfer pays it, authorised by an account no key
// holds, in the real runtime.
type nestedWallet struct {
	key   solana.PrivateKey
	usdc  solana.PublicKey // the wallet's USDC account: the destination
	mints []solana.PublicKey
}

// newNestedWallet funds a wallet on the fixture's node with one nested USDC
// account per amount.
func newNestedWallet(t *testing.T, f *fixture, amounts ...uint64) *nestedWallet {
	t.Helper()
	ctx := context.Background()
	w := &nestedWallet{key: newKey(t)}
	f.node.FundSOL(ctx, w.key.PublicKey(), 1_000_000_000)
	w.usdc = f.node.Fund(ctx, w.key.PublicKey(), 0, 0, f.mint)
	for _, amount := range amounts {
		ownerMint := newKey(t).PublicKey()
		f.node.Mint(ctx, ownerMint, svm.TokenProgram, 0)
		ownerATA := f.node.Fund(ctx, w.key.PublicKey(), 0, 0, ownerMint)
		f.node.Fund(ctx, ownerATA, 0, amount, f.mint)
		w.mints = append(w.mints, ownerMint)
	}
	return w
}

// recover returns the RecoverNested instruction of the wallet's nested
// account i.
func (w *nestedWallet) recover(t *testing.T, f *fixture, i int) solana.Instruction {
	t.Helper()
	wallet := w.key.PublicKey()
	ownerATA := ata(t, wallet, w.mints[i], svm.TokenProgram)
	return solana.NewInstruction(svm.AssociatedTokenProgram, solana.AccountMetaSlice{
		solana.Meta(ata(t, ownerATA, f.mint, svm.TokenProgram)).WRITE(),
		solana.Meta(f.mint),
		solana.Meta(w.usdc).WRITE(),
		solana.Meta(ownerATA),
		solana.Meta(w.mints[i]),
		solana.Meta(wallet).WRITE().SIGNER(),
		solana.Meta(svm.TokenProgram),
	}, []byte{2})
}

// TestVerifier_SmartWallet checks the smart wallet path against the
// transfers the runtime makes in inner instructions: one TransferChecked of
// exactly the price to the seller's token account is accepted, paid by the
// wallet's key; every other case is refused with the official reason.
func TestVerifier_SmartWallet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	const price = 10_000
	nested := svm.SmartWallets{Programs: []solana.PublicKey{svm.AssociatedTokenProgram}}
	testCases := []struct {
		name string
		// amounts are the wallet's nested accounts' balances.
		amounts []uint64
		// smart configures the verifier (nil: no smart wallets).
		smart *svm.SmartWallets
		req   func(req *x402.Requirements)
		// ixs are the transaction's instructions after the compute
		// budget's (nil: the first nested account's recovery and a memo).
		ixs        func(w *nestedWallet) []solana.Instruction
		budget     []solana.Instruction
		wantReason string
	}{
		{name: "ok, the transfer in an inner instruction", amounts: []uint64{price}, smart: &nested},
		{name: "ok, without a memo", amounts: []uint64{price}, smart: &nested,
			ixs: func(w *nestedWallet) []solana.Instruction { return []solana.Instruction{w.recover(t, f, 0)} }},
		{name: "nok, smart wallets not accepted", amounts: []uint64{price}, wantReason: svm.ReasonNoTransfer},
		{name: "nok, a program not on the default list", amounts: []uint64{price}, smart: &svm.SmartWallets{},
			wantReason: svm.ReasonSmartWalletProgramNotAllowed},
		{name: "nok, more than the price", amounts: []uint64{price + 1}, smart: &nested, wantReason: svm.ReasonSmartWalletTransferMismatch},
		{name: "nok, less than the price", amounts: []uint64{price - 1}, smart: &nested, wantReason: svm.ReasonSmartWalletTransferMismatch},
		{name: "nok, pays another receiver", amounts: []uint64{price}, smart: &nested,
			req: func(req *x402.Requirements) { req.PayTo = f.payTo.String() }, wantReason: svm.ReasonSmartWalletTransferMismatch},
		{name: "nok, pays the price twice", amounts: []uint64{price, price}, smart: &nested, wantReason: svm.ReasonSmartWalletMultipleTransfers,
			ixs: func(w *nestedWallet) []solana.Instruction {
				return []solana.Instruction{w.recover(t, f, 0), w.recover(t, f, 1)}
			}},
		{name: "nok, no transfer in the simulation", amounts: []uint64{price}, smart: &nested, wantReason: svm.ReasonSmartWalletNoTransfer,
			ixs: func(w *nestedWallet) []solana.Instruction {
				wallet := w.key.PublicKey()
				// CreateIdempotent of an account that exists: nothing moves.
				return []solana.Instruction{solana.NewInstruction(svm.AssociatedTokenProgram, solana.AccountMetaSlice{
					solana.Meta(wallet).WRITE().SIGNER(), solana.Meta(w.usdc).WRITE(), solana.Meta(wallet), solana.Meta(f.mint),
					solana.Meta(solana.SystemProgramID), solana.Meta(svm.TokenProgram),
				}, []byte{1}), memo("m")}
			}},
		{name: "nok, the simulation fails", amounts: []uint64{price}, smart: &nested, wantReason: svm.ReasonSmartWalletSimulationFailed,
			ixs: func(w *nestedWallet) []solana.Instruction {
				ix := w.recover(t, f, 0).(*solana.GenericInstruction)
				ix.AccountValues[4] = solana.Meta(f.mint) // not the owner account's mint
				return []solana.Instruction{ix}
			}},
		{name: "nok, the fee payer named", amounts: []uint64{price}, smart: &nested, wantReason: svm.ReasonSmartWalletFeePayerNotIsolated,
			ixs: func(w *nestedWallet) []solana.Instruction {
				return []solana.Instruction{w.recover(t, f, 0), solana.NewInstruction(svm.MemoProgram, solana.AccountMetaSlice{solana.Meta(f.feePayer.PublicKey())}, []byte("m"))}
			}},
		{name: "nok, compute price over the smart wallets' cap", amounts: []uint64{price}, smart: &nested, wantReason: svm.ReasonSmartWalletPriorityFee,
			budget: []solana.Instruction{computeLimit(200_000), computePrice(svm.DefaultSmartWalletMaxComputeUnitPrice + 1)}},
		{name: "ok, compute price at the smart wallets' cap", amounts: []uint64{price}, smart: &nested,
			budget: []solana.Instruction{computeLimit(200_000), computePrice(svm.DefaultSmartWalletMaxComputeUnitPrice)}},
		{name: "nok, compute units over the cap", amounts: []uint64{price}, smart: &nested, wantReason: svm.ReasonSmartWalletComputeUnits,
			budget: []solana.Instruction{computeLimit(svm.DefaultSmartWalletMaxComputeUnits + 1), computePrice(1)}},
		{name: "nok, another compute budget instruction", amounts: []uint64{price}, smart: &nested, wantReason: svm.ReasonSmartWalletComputeBudget,
			budget: []solana.Instruction{computeLimit(200_000), solana.NewInstruction(svm.ComputeBudgetProgram, nil, binary.LittleEndian.AppendUint32([]byte{1}, 64*1024))}},
		{name: "nok, memo required and another given", amounts: []uint64{price}, smart: &nested,
			req: func(req *x402.Requirements) { setMemo(f, req, "order-1") }, wantReason: svm.ReasonMemoMismatch},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			w := newNestedWallet(t, f, tc.amounts...)
			req := f.requirement()
			req.PayTo = w.key.PublicKey().String()
			if tc.req != nil {
				tc.req(req)
			}
			ixs := []solana.Instruction{w.recover(t, f, 0), memo("0123456789abcdef")}
			if tc.ixs != nil {
				ixs = tc.ixs(w)
			}
			budget := []solana.Instruction{computeLimit(200_000), computePrice(1)}
			if tc.budget != nil {
				budget = tc.budget
			}
			p := &parts{
				feePayer:  f.feePayer.PublicKey(),
				blockhash: f.node.LatestBlockhash(ctx, "confirmed").Hash,
				ixs:       append(budget, ixs...),
				signers:   []solana.PrivateKey{w.key},
			}
			_, b64 := p.build(t)
			payload := paymentPayload(req, b64)
			v, err := svm.NewVerifier(&svm.VerifierConfig{FeePayer: f.feePayer.PublicKey(), Simulator: svm.NewRPCSimulator(f.node.URL, nil), SmartWallets: tc.smart})
			require.NoError(t, err)

			payment, err := v.Verify(ctx, req, payload)

			if tc.wantReason != "" {
				var refusal *x402.Refusal
				require.ErrorAs(t, err, &refusal)
				require.Equal(t, tc.wantReason, refusal.Reason, refusal.Message)
				return
			}
			require.NoError(t, err)
			require.Equal(t, w.key.PublicKey().String(), payment.Payer, "the wallet's key pays")
			require.Equal(t, req.Amount, payment.Amount)
			payer, nonce, err := svm.Identify(payload)
			require.NoError(t, err)
			require.Equal(t, payment.Payer, payer)
			require.Equal(t, payment.Nonce, nonce)
		})
	}

	_, err := svm.NewVerifier(&svm.VerifierConfig{FeePayer: f.feePayer.PublicKey(), SmartWallets: &nested})
	require.ErrorContains(t, err, "smart wallets need a simulator of inner instructions")
}

// TestSettler_SmartWallet settles smart wallets' payments on the LiteSVM
// node: one whose transaction makes the transfer it simulated is settled,
// and the seller's USDC moves by the price; one whose wallet changed
// between the simulation and the settlement (its nested account holds one
// more, so the transaction moves more than the price) succeeds on chain but
// is a failed settlement, ReasonTransferNotConfirmed: the call is not
// taken for paid.
func TestSettler_SmartWallet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	const price = 10_000
	v, err := svm.NewVerifier(&svm.VerifierConfig{FeePayer: f.feePayer.PublicKey(), Simulator: svm.NewRPCSimulator(f.node.URL, nil),
		SmartWallets: &svm.SmartWallets{Programs: []solana.PublicKey{svm.AssociatedTokenProgram}}})
	require.NoError(t, err)
	settler, err := svm.NewSettler(svm.SettlerConfig{Key: f.feePayer, URL: f.node.URL, Poll: 50 * time.Millisecond, Polls: 200})
	require.NoError(t, err)
	for _, changed := range []bool{false, true} {
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
		if changed {
			ownerATA := ata(t, w.key.PublicKey(), w.mints[0], svm.TokenProgram)
			f.node.Fund(ctx, ownerATA, 0, price+1, f.mint)
		}

		res, err := settler.Settle(ctx, payment)

		require.NoError(t, err)
		status, txErr := f.node.SignatureStatus(ctx, res.Transaction)
		require.NotEmpty(t, status, "the transaction landed")
		require.Empty(t, txErr, "and succeeded")
		if !changed {
			require.True(t, res.Success, res.ErrorReason)
			require.Equal(t, uint64(price), f.node.TokenBalance(ctx, w.usdc))
			continue
		}
		require.False(t, res.Success)
		require.Equal(t, svm.ReasonTransferNotConfirmed, res.ErrorReason)
		require.Equal(t, uint64(price+1), f.node.TokenBalance(ctx, w.usdc), "the wallet moved more than the price")
	}
}
