package svm_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/mr-tron/base58"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/svmtest"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/svm"
)

// fixture is a seller, a buyer holding 1 USDC and a Solana node on LiteSVM
// (internal/svmtest).
type fixture struct {
	feePayer  solana.PrivateKey
	authority solana.PrivateKey
	payTo     solana.PublicKey
	mint      solana.PublicKey
	// mint2022 is a mint of Token-2022 the buyer also holds 1 of.
	mint2022 solana.PublicKey
	node     *svmtest.Node
	verifier *svm.Verifier
}

// buyerBalance is what the buyer holds of each mint.
const buyerBalance = 1_000_000

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{
		feePayer:  newKey(t),
		authority: newKey(t),
		payTo:     newKey(t).PublicKey(),
		mint:      svmtest.USDC,
		mint2022:  newKey(t).PublicKey(),
		node:      svmtest.Start(t, &svmtest.Config{Payers: 1}),
	}
	f.node.FundSOL(ctx, f.feePayer.PublicKey(), 1_000_000_000)
	f.node.Mint(ctx, f.mint2022, svm.Token2022Program, 6)
	for _, mint := range []solana.PublicKey{f.mint, f.mint2022} {
		f.node.Fund(ctx, f.authority.PublicKey(), 0, buyerBalance, mint)
		f.node.Fund(ctx, f.payTo, 0, 0, mint)
	}
	v, err := svm.NewVerifier(&svm.VerifierConfig{
		FeePayer:  f.feePayer.PublicKey(),
		Simulator: svm.NewRPCSimulator(f.node.URL, nil),
	})
	require.NoError(t, err)
	f.verifier = v
	return f
}

func newKey(t *testing.T) solana.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	return solana.PrivateKey(priv)
}

func (f *fixture) requirement() *x402.Requirements {
	extra, _ := json.Marshal(x402.SVMExtra{FeePayer: f.feePayer.PublicKey().String()})
	return &x402.Requirements{
		Scheme:            "exact",
		Network:           x402.SolanaMainnet,
		Amount:            "10000",
		Asset:             f.mint.String(),
		PayTo:             f.payTo.String(),
		MaxTimeoutSeconds: 300,
		Extra:             extra,
	}
}

// parts are what a client puts in a payment transaction.
type parts struct {
	feePayer  solana.PublicKey
	blockhash solana.Hash
	ixs       []solana.Instruction
	signers   []solana.PrivateKey
	legacy    bool
	// tamper changes the transaction after signing.
	tamper func(tx *solana.Transaction)
}

// parts returns the transaction an official client builds for req: compute
// limit, compute price, TransferChecked to the ATA of payTo, memo.
func (f *fixture) parts(t *testing.T, req *x402.Requirements, program solana.PublicKey) *parts {
	t.Helper()
	amount, err := json.Number(req.Amount).Int64()
	require.NoError(t, err)
	owner := f.authority.PublicKey()
	return &parts{
		feePayer:  f.feePayer.PublicKey(),
		blockhash: f.node.LatestBlockhash(context.Background(), "confirmed").Hash,
		ixs: []solana.Instruction{
			computeLimit(20_000),
			computePrice(1),
			f.transfer(t, program, ata(t, owner, f.mint, program), f.mint, ata(t, solana.MustPublicKeyFromBase58(req.PayTo), f.mint, program), owner, uint64(amount)),
			memo("0123456789abcdef"),
		},
		signers: []solana.PrivateKey{f.authority},
	}
}

func (f *fixture) transfer(t *testing.T, program, source, mint, dest, authority solana.PublicKey, amount uint64) solana.Instruction {
	t.Helper()
	data := binary.LittleEndian.AppendUint64([]byte{12}, amount)
	data = append(data, 6)
	return solana.NewInstruction(program, solana.AccountMetaSlice{
		solana.Meta(source).WRITE(), solana.Meta(mint), solana.Meta(dest).WRITE(), solana.Meta(authority).SIGNER(),
	}, data)
}

// authorityPays returns a change of a payment's parts: its transfer becomes
// one of amount of mint, with program, from the authority's token account
// to dest.
func (f *fixture) authorityPays(t *testing.T, program, mint, dest solana.PublicKey, amount uint64) func(*parts) {
	return func(p *parts) {
		owner := f.authority.PublicKey()
		p.ixs[2] = f.transfer(t, program, ata(t, owner, mint, program), mint, dest, owner, amount)
	}
}

func computeLimit(units uint32) solana.Instruction {
	return solana.NewInstruction(svm.ComputeBudgetProgram, nil, binary.LittleEndian.AppendUint32([]byte{2}, units))
}

func computePrice(microLamports uint64) solana.Instruction {
	return solana.NewInstruction(svm.ComputeBudgetProgram, nil, binary.LittleEndian.AppendUint64([]byte{3}, microLamports))
}

func memo(s string) solana.Instruction {
	return solana.NewInstruction(svm.MemoProgram, nil, []byte(s))
}

func lighthouse() solana.Instruction {
	return solana.NewInstruction(svm.LighthouseProgram, nil, []byte{4, 1, 2, 3})
}

func ata(t *testing.T, owner, mint, program solana.PublicKey) solana.PublicKey {
	t.Helper()
	a, err := svm.AssociatedTokenAddress(owner, mint, program)
	require.NoError(t, err)
	return a
}

// build returns the signed transaction and its base64.
func (p *parts) build(t *testing.T) (*solana.Transaction, string) {
	t.Helper()
	tx, err := solana.NewTransaction(p.ixs, p.blockhash, solana.TransactionPayer(p.feePayer))
	require.NoError(t, err)
	if !p.legacy {
		tx.Message.SetVersion(solana.MessageVersionV0)
	}
	_, err = tx.PartialSign(func(key solana.PublicKey) *solana.PrivateKey {
		for _, k := range p.signers {
			if k.PublicKey() == key {
				return &k
			}
		}
		return nil
	})
	require.NoError(t, err)
	if p.tamper != nil {
		p.tamper(tx)
	}
	b64, err := tx.ToBase64()
	require.NoError(t, err)
	return tx, b64
}

func paymentPayload(req *x402.Requirements, txBase64 string) *x402.PaymentPayload {
	raw, _ := json.Marshal(x402.ExactSVMPayload{Transaction: txBase64})
	return &x402.PaymentPayload{X402Version: 2, Accepted: *req, Payload: raw}
}

func TestVerifier_Accepts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	// LiteSVM has no Lighthouse program: a payment calling it is checked
	// without the simulation.
	unsimulated, err := svm.NewVerifier(&svm.VerifierConfig{FeePayer: f.feePayer.PublicKey()})
	require.NoError(t, err)
	testCases := []struct {
		name     string
		req      func(req *x402.Requirements)
		parts    func(p *parts)
		verifier *svm.Verifier
	}{
		{name: "ok, v0 with memo", parts: func(p *parts) {}},
		{name: "ok, legacy transaction", parts: func(p *parts) { p.legacy = true }},
		{name: "ok, three instructions", parts: func(p *parts) { p.ixs = p.ixs[:3] }},
		{name: "ok, two lighthouse and a memo", parts: func(p *parts) { p.ixs = append(p.ixs[:3], lighthouse(), lighthouse(), memo("x")) }, verifier: unsimulated},
		{name: "ok, highest compute price", parts: func(p *parts) { p.ixs[1] = computePrice(svm.MaxComputeUnitPrice) }},
		{name: "ok, the whole balance", req: func(req *x402.Requirements) { req.Amount = strconv.Itoa(buyerBalance) }, parts: func(p *parts) {}},
		{
			name:  "ok, Token-2022",
			req:   func(req *x402.Requirements) { req.Asset = f.mint2022.String() },
			parts: f.authorityPays(t, svm.Token2022Program, f.mint2022, ata(t, f.payTo, f.mint2022, svm.Token2022Program), 10000),
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			req := f.requirement()
			if tc.req != nil {
				tc.req(req)
			}
			p := f.parts(t, req, svm.TokenProgram)
			tc.parts(p)
			tx, b64 := p.build(t)
			payload := paymentPayload(req, b64)
			v := f.verifier
			if tc.verifier != nil {
				v = tc.verifier
			}

			payment, err := v.Verify(ctx, req, payload)
			require.NoError(t, err)

			msg, err := tx.Message.MarshalBinary()
			require.NoError(t, err)
			msgHash := sha256.Sum256(msg)
			require.Equal(t, x402.SolanaMainnet, payment.Network)
			require.Equal(t, f.authority.PublicKey().String(), payment.Payer)
			require.Equal(t, base58.Encode(msgHash[:]), payment.Nonce, "the message names the payment")
			require.Equal(t, req.Amount, payment.Amount)
			require.Equal(t, req.Asset, payment.Asset)
			var back x402.PaymentPayload
			require.NoError(t, json.Unmarshal(payment.Payload, &back))
			require.Equal(t, *payload, back)

			payer, nonce, err := svm.Identify(payload)
			require.NoError(t, err)
			require.Equal(t, payment.Payer, payer)
			require.Equal(t, payment.Nonce, nonce)
		})
	}
}

func TestVerifier_Refusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	stranger := newKey(t)

	testCases := []struct {
		name string
		// req changes the seller's requirement; the client pays it.
		req func(req *x402.Requirements)
		// parts changes what the client builds.
		parts func(p *parts)
		// payload changes the payload after signing.
		payload    func(pp *x402.PaymentPayload)
		wantReason string
	}{
		{
			name:       "nok, scheme of the payload",
			payload:    func(pp *x402.PaymentPayload) { pp.Accepted.Scheme = "upto" },
			wantReason: svm.ReasonScheme,
		},
		{
			name:       "nok, scheme of the requirement",
			req:        func(req *x402.Requirements) { req.Scheme = "upto" },
			wantReason: svm.ReasonScheme,
		},
		{
			name:       "nok, network",
			payload:    func(pp *x402.PaymentPayload) { pp.Accepted.Network = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1" },
			wantReason: svm.ReasonNetworkMismatch,
		},
		{
			name:       "nok, requirement names no fee payer",
			req:        func(req *x402.Requirements) { req.Extra = json.RawMessage(`{"memo":"m"}`) },
			wantReason: svm.ReasonMissingFeePayer,
		},
		{
			name: "nok, requirement names another fee payer",
			req: func(req *x402.Requirements) {
				req.Extra = json.RawMessage(`{"feePayer":"` + stranger.PublicKey().String() + `"}`)
			},
			wantReason: svm.ReasonFeePayerNotManaged,
		},
		{
			name:       "nok, transaction paid by another fee payer",
			parts:      func(p *parts) { p.feePayer = stranger.PublicKey() },
			wantReason: svm.ReasonFeePayerNotManaged,
		},
		{
			name:       "nok, payload is an EVM payload",
			payload:    func(pp *x402.PaymentPayload) { pp.Payload = json.RawMessage(`{"signature":"0x12","authorization":{}}`) },
			wantReason: svm.ReasonCouldNotBeDecoded,
		},
		{
			name:       "nok, transaction is not base64",
			payload:    func(pp *x402.PaymentPayload) { pp.Payload = json.RawMessage(`{"transaction":"not base64!"}`) },
			wantReason: svm.ReasonCouldNotBeDecoded,
		},
		{
			name:       "nok, transaction truncated",
			payload:    func(pp *x402.PaymentPayload) { editTx(pp, func(raw []byte) []byte { return raw[:len(raw)-20] }) },
			wantReason: svm.ReasonCouldNotBeDecoded,
		},
		{
			name:       "nok, bytes after the transaction",
			payload:    func(pp *x402.PaymentPayload) { editTx(pp, func(raw []byte) []byte { return append(raw, 0) }) },
			wantReason: svm.ReasonCouldNotBeDecoded,
		},
		{
			name: "nok, address table lookup",
			parts: func(p *parts) {
				p.tamper = func(tx *solana.Transaction) {
					tx.Message.SetAddressTableLookups([]solana.MessageAddressTableLookup{{AccountKey: stranger.PublicKey(), ReadonlyIndexes: []byte{0}}})
				}
			},
			wantReason: svm.ReasonCouldNotBeDecoded,
		},
		{
			name:       "nok, two instructions",
			parts:      func(p *parts) { p.ixs = p.ixs[:2] },
			wantReason: svm.ReasonInstructionsLength,
		},
		{
			name:       "nok, eight instructions",
			parts:      func(p *parts) { p.ixs = append(p.ixs, memo("a"), memo("b"), memo("c"), memo("d")) },
			wantReason: svm.ReasonInstructionsLength,
		},
		{
			name:       "nok, no compute limit first",
			parts:      func(p *parts) { p.ixs[0] = memo("limit") },
			wantReason: svm.ReasonComputeLimit,
		},
		{
			name:       "nok, compute price where the limit goes",
			parts:      func(p *parts) { p.ixs[0] = computePrice(1) },
			wantReason: svm.ReasonComputeLimit,
		},
		{
			name:       "nok, compute limit where the price goes",
			parts:      func(p *parts) { p.ixs[1] = computeLimit(1) },
			wantReason: svm.ReasonComputePrice,
		},
		{
			name:       "nok, compute price too high",
			parts:      func(p *parts) { p.ixs[1] = computePrice(svm.MaxComputeUnitPrice + 1) },
			wantReason: svm.ReasonComputePriceTooHigh,
		},
		{
			name: "nok, Transfer instead of TransferChecked",
			parts: func(p *parts) {
				ix := p.ixs[2].(*solana.GenericInstruction)
				ix.DataBytes = append([]byte{3}, ix.DataBytes[1:9]...)
			},
			wantReason: svm.ReasonNoTransfer,
		},
		{
			name: "nok, TransferChecked of another program",
			parts: func(p *parts) {
				p.ixs[2].(*solana.GenericInstruction).ProgID = stranger.PublicKey()
			},
			wantReason: svm.ReasonNoTransfer,
		},
		{
			name: "nok, fee payer is the transfer authority",
			parts: func(p *parts) {
				fp := f.feePayer.PublicKey()
				p.ixs[2] = f.transfer(t, svm.TokenProgram, ata(t, fp, f.mint, svm.TokenProgram), f.mint, ata(t, f.payTo, f.mint, svm.TokenProgram), fp, 10000)
			},
			wantReason: svm.ReasonFeePayerTransferring,
		},
		{
			name: "nok, source is the fee payer's token account",
			parts: func(p *parts) {
				p.ixs[2] = f.transfer(t, svm.TokenProgram, ata(t, f.feePayer.PublicKey(), f.mint, svm.TokenProgram), f.mint,
					ata(t, f.payTo, f.mint, svm.TokenProgram), f.authority.PublicKey(), 10000)
			},
			wantReason: svm.ReasonFeePayerTransferring,
		},
		{
			name:       "nok, another mint",
			parts:      f.authorityPays(t, svm.TokenProgram, stranger.PublicKey(), ata(t, f.payTo, stranger.PublicKey(), svm.TokenProgram), 10000),
			wantReason: svm.ReasonMintMismatch,
		},
		{
			name:       "nok, pays the owner instead of its token account",
			parts:      f.authorityPays(t, svm.TokenProgram, f.mint, f.payTo, 10000),
			wantReason: svm.ReasonRecipientMismatch,
		},
		{
			name:       "nok, pays the Token-2022 account with SPL Token",
			parts:      f.authorityPays(t, svm.TokenProgram, f.mint, ata(t, f.payTo, f.mint, svm.Token2022Program), 10000),
			wantReason: svm.ReasonRecipientMismatch,
		},
		{
			name:       "nok, pays more than the price",
			parts:      f.authorityPays(t, svm.TokenProgram, f.mint, ata(t, f.payTo, f.mint, svm.TokenProgram), 10001),
			wantReason: svm.ReasonAmountMismatch,
		},
		{
			name:       "nok, unknown fourth instruction",
			parts:      func(p *parts) { p.ixs[3] = computeLimit(1) },
			wantReason: svm.ReasonUnknownFourth,
		},
		{
			name:       "nok, unknown fifth instruction",
			parts:      func(p *parts) { p.ixs = append(p.ixs, computePrice(1)) },
			wantReason: svm.ReasonUnknownFifth,
		},
		{
			name: "nok, unknown sixth instruction",
			parts: func(p *parts) {
				p.ixs = append(p.ixs, lighthouse(), memo(""))
				p.ixs[5] = solana.NewInstruction(solana.SystemProgramID, nil, []byte{2})
			},
			wantReason: svm.ReasonUnknownSixth,
		},
		{
			name: "nok, unknown seventh instruction",
			parts: func(p *parts) {
				p.ixs = append(p.ixs, lighthouse(), memo("a"), solana.NewInstruction(solana.SystemProgramID, nil, []byte{2}))
			},
			wantReason: svm.ReasonUnknownSeventh,
		},
		{
			name: "nok, fee payer named in a memo's accounts",
			parts: func(p *parts) {
				p.ixs[3] = solana.NewInstruction(svm.MemoProgram, solana.AccountMetaSlice{solana.Meta(f.feePayer.PublicKey())}, []byte("m"))
			},
			wantReason: svm.ReasonFeePayerTransferring,
		},
		{
			name:       "nok, fee payer named as the transfer's destination",
			parts:      f.authorityPays(t, svm.TokenProgram, f.mint, f.feePayer.PublicKey(), 10000),
			wantReason: svm.ReasonFeePayerTransferring,
		},
		{
			name:       "nok, memo required and absent",
			req:        func(req *x402.Requirements) { setMemo(f, req, "order-1") },
			parts:      func(p *parts) { p.ixs = p.ixs[:3] },
			wantReason: svm.ReasonMemoCount,
		},
		{
			name:       "nok, memo differs",
			req:        func(req *x402.Requirements) { setMemo(f, req, "order-1") },
			wantReason: svm.ReasonMemoMismatch,
		},
		{
			name:       "nok, authority has not signed",
			parts:      func(p *parts) { p.signers = nil },
			wantReason: svm.ReasonSignatureInvalid,
		},
		{
			name: "nok, authority is not a signer",
			parts: func(p *parts) {
				p.ixs[2].(*solana.GenericInstruction).AccountValues[3].IsSigner = false
			},
			wantReason: svm.ReasonSignatureInvalid,
		},
		{
			name:       "nok, signature altered",
			parts:      func(p *parts) { p.tamper = func(tx *solana.Transaction) { tx.Signatures[1][7] ^= 1 } },
			wantReason: svm.ReasonSignatureInvalid,
		},
		{
			name: "nok, message changed after signing",
			parts: func(p *parts) {
				p.tamper = func(tx *solana.Transaction) { tx.Message.RecentBlockhash = solana.Hash(stranger.PublicKey()) }
			},
			wantReason: svm.ReasonSignatureInvalid,
		},
		{
			name:       "nok, simulation fails: balance below the price",
			req:        func(req *x402.Requirements) { req.Amount = strconv.Itoa(buyerBalance + 1) },
			wantReason: svm.ReasonSimulationFailed,
		},
		{
			name: "nok, simulation fails: the receiver has no token account",
			req: func(req *x402.Requirements) {
				req.PayTo = stranger.PublicKey().String()
			},
			wantReason: svm.ReasonSimulationFailed,
		},
		{
			name:       "nok, simulation fails: the blockhash is unknown",
			parts:      func(p *parts) { p.blockhash = solana.HashFromBytes([]byte("not a blockhash of this chain!!!")) },
			wantReason: svm.ReasonSimulationFailed,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			req := f.requirement()
			if tc.req != nil {
				tc.req(req)
			}
			p := f.parts(t, req, svm.TokenProgram)
			if tc.parts != nil {
				tc.parts(p)
			}
			_, b64 := p.build(t)
			payload := paymentPayload(f.requirement(), b64)
			payload.Accepted = *req
			if tc.payload != nil {
				tc.payload(payload)
			}
			_, err := f.verifier.Verify(ctx, req, payload)
			var refusal *x402.Refusal
			require.ErrorAs(t, err, &refusal)
			require.Equal(t, tc.wantReason, refusal.Reason, refusal.Message)
			// Only the simulation's refusal depends on the chain: the
			// others could never be accepted, and ask no ledger.
			require.Equal(t, tc.wantReason != svm.ReasonSimulationFailed, refusal.NeverValid)
		})
	}
}

func TestVerifier_NodeDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream unavailable", http.StatusBadGateway)
	}))
	t.Cleanup(down.Close)
	v, err := svm.NewVerifier(&svm.VerifierConfig{FeePayer: f.feePayer.PublicKey(), Simulator: svm.NewRPCSimulator(down.URL, nil)})
	require.NoError(t, err)
	req := f.requirement()
	_, b64 := f.parts(t, req, svm.TokenProgram).build(t)

	_, err = v.Verify(context.Background(), req, paymentPayload(req, b64))
	require.Error(t, err)
	var refusal *x402.Refusal
	require.False(t, errors.As(err, &refusal), "an unreachable node is not a refusal: %v", err)

	// Without a simulator the same payment is accepted.
	v, err = svm.NewVerifier(&svm.VerifierConfig{FeePayer: f.feePayer.PublicKey()})
	require.NoError(t, err)
	_, err = v.Verify(context.Background(), req, paymentPayload(req, b64))
	require.NoError(t, err)
}

func TestIdentify_Refusals(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	req := f.requirement()
	testCases := []struct {
		name       string
		parts      func(p *parts)
		payload    func(pp *x402.PaymentPayload)
		wantReason string
	}{
		{name: "nok, not a transaction", payload: func(pp *x402.PaymentPayload) { pp.Payload = json.RawMessage(`{"transaction":"AQID"}`) }, wantReason: svm.ReasonCouldNotBeDecoded},
		{name: "nok, no transfer", parts: func(p *parts) { p.ixs[2] = memo("x") }, wantReason: svm.ReasonNoTransfer},
		{name: "nok, unsigned", parts: func(p *parts) { p.signers = nil }, wantReason: svm.ReasonSignatureInvalid},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			p := f.parts(t, req, svm.TokenProgram)
			if tc.parts != nil {
				tc.parts(p)
			}
			_, b64 := p.build(t)
			payload := paymentPayload(req, b64)
			if tc.payload != nil {
				tc.payload(payload)
			}
			_, _, err := svm.Identify(payload)
			var refusal *x402.Refusal
			require.ErrorAs(t, err, &refusal)
			require.Equal(t, tc.wantReason, refusal.Reason)
		})
	}
}

func TestAssociatedTokenAddress(t *testing.T) {
	t.Parallel()
	// Addresses as `spl-token address --owner ... --token ...` prints them.
	testCases := []struct {
		name, owner, mint string
		program           solana.PublicKey
		want              string
	}{
		{"ok, USDC", "3h1zGmCwsRJnVk5BuRNMLsPaQu1y2aqXqXDWYCgrp5UG", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", svm.TokenProgram, "3uetDDizgTtadDHZzyy9BqxrjQcozMEkxzbKhfZF4tG3"},
		{"ok, USDC, another owner", "AAAGuCgkmxYDTiBvzx1QT5XEjqXPRtQaiEXQo4gatD2o", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", svm.TokenProgram, "Cra8woRQhnHsGAmFWcCN1m7A9J44ykNfGpehi6dMBuKR"},
		{"ok, Token-2022", "AAAGuCgkmxYDTiBvzx1QT5XEjqXPRtQaiEXQo4gatD2o", "CKfatsPMUf8SkiURsDXs7eK6GWb4Jsd6UDbs7twMCWxo", svm.Token2022Program, "GPtCoaz35vdCrFbyhxcRrkYvECrUkrBX6CoRZEv8EQDw"},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := svm.AssociatedTokenAddress(solana.MustPublicKeyFromBase58(tc.owner), solana.MustPublicKeyFromBase58(tc.mint), tc.program)
			require.NoError(t, err)
			require.Equal(t, tc.want, got.String())
		})
	}
}

func TestParsePrivateKey(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	array, err := json.Marshal(func() []int {
		out := make([]int, len(key))
		for i, b := range key {
			out[i] = int(b)
		}
		return out
	}())
	require.NoError(t, err)
	for _, s := range []string{key.String(), " " + key.String() + "\n", string(array)} {
		got, err := svm.ParsePrivateKey(s)
		require.NoError(t, err)
		require.Equal(t, key.PublicKey(), got.PublicKey())
	}
	for _, s := range []string{"", "not-base58-0OIl", key.PublicKey().String(), "[1,2,3]", "[300]"} {
		_, err := svm.ParsePrivateKey(s)
		require.Error(t, err, "%q", s)
	}
}

func setMemo(f *fixture, req *x402.Requirements, m string) {
	req.Extra, _ = json.Marshal(x402.SVMExtra{FeePayer: f.feePayer.PublicKey().String(), Memo: m})
}

// editTx rewrites the raw transaction of an exact Solana payload.
func editTx(pp *x402.PaymentPayload, edit func(raw []byte) []byte) {
	var sp x402.ExactSVMPayload
	_ = json.Unmarshal(pp.Payload, &sp)
	raw, _ := base64.StdEncoding.DecodeString(sp.Transaction)
	pp.Payload, _ = json.Marshal(x402.ExactSVMPayload{Transaction: base64.StdEncoding.EncodeToString(edit(raw))})
}

// The package plugs into the seller as its "solana" scheme.
var _ = x402.Scheme{Verifier: (*svm.Verifier)(nil), Identify: svm.Identify}

// TestVerifier_SameMessage checks that a payment is named by its message:
// the same transaction with its fee payer's slot filled in by someone else
// is the same payment (one replay key), never a second one.
func TestVerifier_SameMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	req := f.requirement()
	p := f.parts(t, req, svm.TokenProgram)
	_, b64 := p.build(t)
	p.tamper = func(tx *solana.Transaction) { copy(tx.Signatures[0][:], newKey(t)[:64]) }
	_, other := p.build(t)
	require.NotEqual(t, b64, other)

	first, err := f.verifier.Verify(ctx, req, paymentPayload(req, b64))
	require.NoError(t, err)
	second, err := f.verifier.Verify(ctx, req, paymentPayload(req, other))
	require.NoError(t, err)
	require.Equal(t, first.Key(), second.Key())
	payer, nonce, err := svm.Identify(paymentPayload(req, other))
	require.NoError(t, err)
	require.Equal(t, first.Payer, payer)
	require.Equal(t, first.Nonce, nonce)
}
