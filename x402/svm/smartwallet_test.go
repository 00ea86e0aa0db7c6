package svm_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"strings"
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
// transfers the runtime makes in inner instructions, and against the
// official facilitator (@x402/svm's ExactSvmScheme with
// enableSmartWalletVerification, run by testdata/smart_wallet_oracle.mjs on
// the same payments and node): one TransferChecked of exactly the price to
// the seller's token account is accepted, paid by the wallet's key; every
// other case is refused with the official reason. Where the official
// facilitator answers otherwise, the case says so (official).
func TestVerifier_SmartWallet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	const price = 10_000
	nested := svm.SmartWallets{Programs: []solana.PublicKey{svm.AssociatedTokenProgram}}
	budget := func(data ...[]byte) []solana.Instruction {
		var ixs []solana.Instruction
		for _, d := range data {
			ixs = append(ixs, solana.NewInstruction(svm.ComputeBudgetProgram, nil, d))
		}
		return ixs
	}
	limit := func(units uint32) []byte { return binary.LittleEndian.AppendUint32([]byte{2}, units) }
	cuPrice := func(microLamports uint64) []byte { return binary.LittleEndian.AppendUint64([]byte{3}, microLamports) }
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
		// official is the official facilitator's answer when it is not
		// ours: "valid", or its reason.
		official string
	}{
		{name: "ok, the transfer in an inner instruction", amounts: []uint64{price}, smart: &nested},
		{name: "ok, without a memo", amounts: []uint64{price}, smart: &nested,
			ixs: func(w *nestedWallet) []solana.Instruction { return []solana.Instruction{w.recover(t, f, 0)} }},
		{name: "nok, smart wallets not accepted", amounts: []uint64{price}, wantReason: svm.ReasonNoTransfer},
		{name: "nok, a program not on the default list", amounts: []uint64{price}, smart: &svm.SmartWallets{},
			wantReason: svm.ReasonSmartWalletProgramNotAllowed},
		// The official facilitator takes a smart wallet's overpayment.
		{name: "nok, more than the price", amounts: []uint64{price + 1}, smart: &nested, wantReason: svm.ReasonSmartWalletTransferMismatch, official: "valid"},
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
		{name: "ok, compute price at the smart wallets' cap", amounts: []uint64{price}, smart: &nested,
			budget: budget(limit(200_000), cuPrice(svm.DefaultSmartWalletMaxComputeUnitPrice))},
		{name: "nok, compute price over the smart wallets' cap", amounts: []uint64{price}, smart: &nested, wantReason: svm.ReasonSmartWalletPriorityFee,
			budget: budget(limit(200_000), cuPrice(svm.DefaultSmartWalletMaxComputeUnitPrice+1))},
		{name: "nok, compute units over the cap", amounts: []uint64{price}, smart: &nested, wantReason: svm.ReasonSmartWalletComputeUnits,
			budget: budget(limit(svm.DefaultSmartWalletMaxComputeUnits+1), cuPrice(1))},
		{name: "nok, a compute limit of 4 bytes", amounts: []uint64{price}, smart: &nested, wantReason: svm.ReasonSmartWalletMalformedLimit,
			budget: budget(limit(200_000)[:4], cuPrice(1))},
		{name: "nok, a compute price of 8 bytes", amounts: []uint64{price}, smart: &nested, wantReason: svm.ReasonSmartWalletMalformedPrice,
			budget: budget(limit(200_000), cuPrice(1)[:8])},
		{name: "nok, a compute budget instruction without data", amounts: []uint64{price}, smart: &nested, wantReason: svm.ReasonSmartWalletMalformedBudget,
			budget: budget(limit(200_000), []byte{})},
		{name: "nok, another compute budget instruction", amounts: []uint64{price}, smart: &nested, wantReason: svm.ReasonSmartWalletUnsupportedBudget,
			budget: budget(limit(200_000), binary.LittleEndian.AppendUint32([]byte{1}, 64*1024))},
		{name: "nok, memo required and another given", amounts: []uint64{price}, smart: &nested,
			req: func(req *x402.Requirements) { setMemo(f, req, "order-1") }, wantReason: svm.ReasonMemoMismatch},
	}
	type built struct {
		wallet  *nestedWallet
		req     *x402.Requirements
		payload *x402.PaymentPayload
	}
	payments := make([]built, len(testCases))
	oracle := make([]smartWalletCase, len(testCases))
	for i, tc := range testCases {
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
		head := tc.budget
		if head == nil {
			head = budget(limit(200_000), cuPrice(1))
		}
		p := &parts{
			feePayer:  f.feePayer.PublicKey(),
			blockhash: f.node.LatestBlockhash(ctx, "confirmed").Hash,
			ixs:       append(head, ixs...),
			signers:   []solana.PrivateKey{w.key},
		}
		_, b64 := p.build(t)
		payments[i] = built{wallet: w, req: req, payload: paymentPayload(req, b64)}
		oracle[i] = smartWalletCase{Payload: payments[i].payload, Requirements: req, Enabled: tc.smart != nil}
		if tc.smart != nil {
			oracle[i].Programs = tc.smart.Programs
		}
	}
	official := smartWalletOracle(t, f, oracle)
	require.Len(t, official, len(testCases))

	for i, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			b := payments[i]
			v, err := svm.NewVerifier(&svm.VerifierConfig{FeePayer: f.feePayer.PublicKey(), Simulator: svm.NewRPCSimulator(f.node.URL, nil), SmartWallets: tc.smart})
			require.NoError(t, err)

			payment, err := v.Verify(ctx, b.req, b.payload)

			got := "valid"
			if tc.wantReason != "" {
				var refusal *x402.Refusal
				require.ErrorAs(t, err, &refusal)
				require.Equal(t, tc.wantReason, refusal.Reason, refusal.Message)
				got = refusal.Reason
			} else {
				require.NoError(t, err)
				require.Equal(t, b.wallet.key.PublicKey().String(), payment.Payer, "the wallet's key pays")
				require.Equal(t, b.req.Amount, payment.Amount)
				payer, nonce, err := svm.Identify(b.payload)
				require.NoError(t, err)
				require.Equal(t, payment.Payer, payer)
				require.Equal(t, payment.Nonce, nonce)
				// The official facilitator names the transfer's authority
				// (here the wallet's owner token account) as the payer.
				require.Equal(t, ata(t, b.wallet.key.PublicKey(), b.wallet.mints[0], svm.TokenProgram).String(), official[i].Payer)
			}
			want := cmp.Or(tc.official, got)
			if official[i].IsValid {
				require.Equal(t, want, "valid", "the official facilitator accepts it")
			} else {
				reason, _, _ := strings.Cut(official[i].InvalidReason, ":")
				require.Equal(t, want, reason, "the official facilitator's reason: %s", official[i].InvalidReason)
			}
		})
	}

	_, err := svm.NewVerifier(&svm.VerifierConfig{FeePayer: f.feePayer.PublicKey(), SmartWallets: &nested})
	require.ErrorContains(t, err, "smart wallets need a simulator of inner instructions")
}

// smartWalletCase is a payment for testdata/smart_wallet_oracle.mjs.
type smartWalletCase struct {
	Payload      *x402.PaymentPayload `json:"payload"`
	Requirements *x402.Requirements   `json:"requirements"`
	// Enabled turns the official smart wallet verification on, with
	// Programs (nil: its default list).
	Enabled  bool               `json:"enabled"`
	Programs []solana.PublicKey `json:"programs"`
}

// smartWalletOracle returns the official facilitator's answer to each of
// cases, verified on the fixture's node with its fee payer.
func smartWalletOracle(t *testing.T, f *fixture, cases []smartWalletCase) []x402.VerifyResponse {
	t.Helper()
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, c := range cases {
		require.NoError(t, enc.Encode(c))
	}
	out := runOfficial(t, "smart_wallet_oracle.mjs", in.Bytes(), f.node.URL, f.feePayer.String())
	var answers []x402.VerifyResponse
	require.NoError(t, json.Unmarshal(out, &answers), string(out))
	return answers
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
	settler, err := svm.NewSettler(&svm.SettlerConfig{Key: f.feePayer, URL: f.node.URL, Poll: 50 * time.Millisecond, Polls: 200})
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
