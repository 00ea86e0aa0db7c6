package svm

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/gagliardetto/solana-go"
	"github.com/mr-tron/base58"

	"github.com/x402d/x402d/x402"
)

// Reasons a smart wallet's payment is refused, spelled as the official
// TypeScript facilitator spells them.
const (
	ReasonSmartWalletProgramNotAllowed   = "invalid_exact_svm_smart_wallet_program_not_allowed"
	ReasonSmartWalletFeePayerNotIsolated = "invalid_exact_svm_smart_wallet_fee_payer_not_isolated"
	ReasonSmartWalletMalformedBudget     = "invalid_exact_svm_smart_wallet_malformed_compute_budget"
	ReasonSmartWalletMalformedLimit      = "invalid_exact_svm_smart_wallet_malformed_compute_limit"
	ReasonSmartWalletMalformedPrice      = "invalid_exact_svm_smart_wallet_malformed_compute_price"
	ReasonSmartWalletUnsupportedBudget   = "invalid_exact_svm_smart_wallet_unsupported_compute_budget_instruction"
	ReasonSmartWalletComputeUnits        = "invalid_exact_svm_smart_wallet_compute_units_too_high"
	ReasonSmartWalletPriorityFee         = "invalid_exact_svm_smart_wallet_priority_fee_too_high"
	ReasonSmartWalletSimulationFailed    = "invalid_exact_svm_smart_wallet_simulation_failed"
	ReasonSmartWalletNoTransfer          = "invalid_exact_svm_smart_wallet_no_transfer_in_simulation"
	ReasonSmartWalletTransferMismatch    = "invalid_exact_svm_smart_wallet_transfer_mismatch"
	ReasonSmartWalletMultipleTransfers   = "invalid_exact_svm_smart_wallet_multiple_matching_transfers"
	// ReasonTransferNotConfirmed is a smart wallet's settlement whose
	// transaction succeeded on chain without the transfer it simulated.
	ReasonTransferNotConfirmed = "post_settlement_transfer_not_confirmed"
)

// Limits of a smart wallet's compute budget, as in the official packages.
const (
	DefaultSmartWalletMaxComputeUnits     = 400_000
	DefaultSmartWalletMaxComputeUnitPrice = 50_000 // µlamports a compute unit
)

// DefaultSmartWalletPrograms returns the programs a smart wallet's
// transaction may call by default, the official facilitator's list: Squads
// Multisig v4, Squads Smart Account, Swig (both), SPL Governance, Metaplex
// Core and Lighthouse.
func DefaultSmartWalletPrograms() []solana.PublicKey {
	return []solana.PublicKey{
		solana.MustPublicKeyFromBase58("SQDS4ep65T869zMMBKyuUq6aD6EgTu8psMjkvj52pCf"),
		solana.MustPublicKeyFromBase58("SMRTzfY6DfH5ik3TKiyLFfXexV8uSG3d2UksSCYdunG"),
		solana.MustPublicKeyFromBase58("SWiGmQedKzMz1tiTqoJCWeGDnGXfNBp2PkXLkpCAtQo"),
		solana.MustPublicKeyFromBase58("swigypWHEksbC64pWKwah1WTeh9JXwx8H1rJHLdbQMB"),
		solana.MustPublicKeyFromBase58("GovER5Lthms3bLBqWub97yVrMmEogzX7xNjdXpPPCVZw"),
		solana.MustPublicKeyFromBase58("CoREENxT6tW1HoK8ypY1SxRMZTcVPm7R94rH4PZNhX7d"),
		LighthouseProgram,
	}
}

// ParseSmartWalletPrograms reads program addresses (base58), the word
// "official" standing for DefaultSmartWalletPrograms.
func ParseSmartWalletPrograms(list []string) ([]solana.PublicKey, error) {
	var out []solana.PublicKey
	for _, s := range list {
		if s == "official" {
			out = append(out, DefaultSmartWalletPrograms()...)
			continue
		}
		key, err := solana.PublicKeyFromBase58(s)
		if err != nil {
			return nil, fmt.Errorf("smart wallet program %q: %w", s, err)
		}
		out = append(out, key)
	}
	return out, nil
}

// SmartWallets configures the verification of payments made by smart
// wallets: a transaction that calls a smart wallet program, which moves the
// tokens from an account of its own (its vault) in an inner instruction.
// The simulation's inner instructions must hold exactly one TransferChecked
// of the price to the seller's associated token account, checked as the
// exact scheme's own transfer is (mint, destination, exact amount).
type SmartWallets struct {
	// Programs are the programs the transaction may call besides the
	// Compute Budget and Memo programs. Empty: DefaultSmartWalletPrograms.
	Programs []solana.PublicKey
	// MaxComputeUnits bounds SetComputeUnitLimit. 0:
	// DefaultSmartWalletMaxComputeUnits.
	MaxComputeUnits uint32
	// MaxComputeUnitPrice bounds SetComputeUnitPrice, in µlamports a
	// compute unit. 0: DefaultSmartWalletMaxComputeUnitPrice.
	MaxComputeUnitPrice uint64
}

// layoutReasons are the refusals of the exact scheme's layout after which a
// transaction is checked as a smart wallet's, as the official facilitator's
// LAYOUT_RECOVERABLE_REASONS.
var layoutReasons = map[string]bool{
	ReasonInstructionsLength: true, ReasonNoTransfer: true, ReasonComputeLimit: true, ReasonComputePrice: true,
	ReasonUnknownFourth: true, ReasonUnknownFifth: true, ReasonUnknownSixth: true, ReasonUnknownSeventh: true,
}

// InnerInstructions are the inner instructions one instruction of a
// transaction made, as simulateTransaction answers them.
type InnerInstructions struct {
	// Index is the instruction's.
	Index        int                `json:"index"`
	Instructions []InnerInstruction `json:"instructions"`
}

// InnerInstruction is an inner instruction in any of the forms a node
// answers it in: parsed (SPL Token's, as jsonParsed), partially decoded
// (ProgramID, Accounts as addresses, Data in base58) or compiled
// (ProgramIDIndex, Accounts as indexes of the transaction's keys).
type InnerInstruction struct {
	ProgramID      string          `json:"programId,omitempty"`
	ProgramIDIndex *int            `json:"programIdIndex,omitempty"`
	Accounts       json.RawMessage `json:"accounts,omitempty"`
	Data           string          `json:"data,omitempty"`
	Parsed         json.RawMessage `json:"parsed,omitempty"`
}

// innerSimulator is a Simulator that reports inner instructions.
type innerSimulator interface {
	Simulator
	SimulateInner(ctx context.Context, txBase64 string) ([]InnerInstructions, error)
}

// verifySmartWallet checks a payment whose transaction is not laid out as
// the exact scheme's, in the order of the official facilitator's
// verifySmartWalletTransaction: every program called is a smart wallet's
// (or Compute Budget, Memo), no instruction names the fee payer, the
// compute budget is within the limits, the memo is the requirement's,
// every signer but the fee payer has signed; then the simulation's
// TransferChecked instructions, top-level and inner, hold exactly one of
// the price, of the requirement's mint, to the associated token account of
// payTo, and none moves the fee payer's funds. The payer is the first
// signer after the fee payer (the wallet's key): it is read from the
// message alone, so that the payment's key does not depend on the chain.
func (v *Verifier) verifySmartWallet(ctx context.Context, req *x402.Requirements, payload *x402.PaymentPayload) (*x402.Payment, error) {
	r, err := v.requirementOf(req, payload)
	if err != nil {
		return nil, err
	}
	ptx, err := decodeTransaction(payload.Payload)
	if err != nil {
		return nil, neverValid(refuse(ReasonCouldNotBeDecoded, "%v", err))
	}
	sw := v.smartWallets
	programs := sw.Programs
	if len(programs) == 0 {
		programs = DefaultSmartWalletPrograms()
	}
	ixs := ptx.instructions()
	for i, ix := range ixs {
		if ix.program != ComputeBudgetProgram && ix.program != MemoProgram && !slices.Contains(programs, ix.program) {
			return nil, neverValid(refuse(ReasonSmartWalletProgramNotAllowed, "instruction %d calls %s, not a smart wallet program accepted", i, ix.program))
		}
	}
	for i, ix := range ixs {
		if ix.program == v.feePayer || slices.Contains(ix.accounts, v.feePayer) {
			return nil, neverValid(refuse(ReasonSmartWalletFeePayerNotIsolated, "instruction %d names the fee payer %s", i, v.feePayer))
		}
	}
	if err := sw.checkComputeBudget(ixs); err != nil {
		return nil, neverValid(err)
	}
	if r.extra.Memo != "" {
		var memos []instruction
		for _, ix := range ixs {
			if ix.program == MemoProgram {
				memos = append(memos, ix)
			}
		}
		if len(memos) != 1 {
			return nil, neverValid(refuse(ReasonMemoCount, "%d memo instructions, want 1", len(memos)))
		}
		if string(memos[0].data) != r.extra.Memo {
			return nil, neverValid(refuse(ReasonMemoMismatch, "memo %q is not %q", memos[0].data, r.extra.Memo))
		}
	}
	m := &ptx.tx.Message
	if m.Header.NumRequiredSignatures < 2 {
		return nil, neverValid(refuse(ReasonSignatureInvalid, "no signer but the fee payer"))
	}
	if err := ptx.checkSignatures(); err != nil {
		return nil, neverValid(err)
	}

	if err := x402.GuardChain(ctx); err != nil {
		return nil, err
	}
	var sp x402.ExactSVMPayload
	_ = json.Unmarshal(payload.Payload, &sp) // decoded above
	inner, err := v.simulator.(innerSimulator).SimulateInner(ctx, sp.Transaction)
	if se, ok := errors.AsType[*SimulationError](err); ok {
		return nil, refuse(ReasonSmartWalletSimulationFailed, "%s", se.Err)
	}
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	var transfers []*transfer
	for _, ix := range ixs {
		if tr, ok := parseTransfer(ix); ok {
			transfers = append(transfers, tr)
		}
	}
	transfers = append(transfers, innerTransfers(inner, m.AccountKeys)...)
	match, err := v.matchTransfer(transfers, r)
	if err != nil {
		return nil, err
	}
	return v.payment(ctx, req, payload, ptx, m.AccountKeys[1], match.amount, r.mint)
}

// matchTransfer returns the one transfer of transfers that pays r
// (paysPrice). A transfer from the fee payer, or none or several that pay
// r, is refused.
func (v *Verifier) matchTransfer(transfers []*transfer, r *requirement) (*transfer, error) {
	var matches []*transfer
	for _, t := range transfers {
		feePayerATA, err := AssociatedTokenAddress(v.feePayer, t.mint, t.program)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		if t.authority == v.feePayer || t.source == feePayerATA {
			return nil, refuse(ReasonFeePayerTransferring, "a transfer moves the fee payer's funds")
		}
		ok, err := t.paysPrice(r.mint, r.payTo, r.amount)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		if ok {
			matches = append(matches, t)
		}
	}
	switch {
	case len(matches) == 1:
		return matches[0], nil
	case len(matches) > 1:
		return nil, refuse(ReasonSmartWalletMultipleTransfers, "%d transfers pay the price", len(matches))
	case len(transfers) == 0:
		return nil, refuse(ReasonSmartWalletNoTransfer, "the simulation makes no TransferChecked")
	}
	return nil, refuse(ReasonSmartWalletTransferMismatch, "none of the %d transfers moves %d of %s to the token account of %s",
		len(transfers), r.amount, r.mint, r.payTo)
}

// paysPrice reports whether t moves exactly amount of mint to the
// associated token account of payTo (under t's token program), as the
// exact scheme's own transfer must.
func (t *transfer) paysPrice(mint, payTo solana.PublicKey, amount uint64) (bool, error) {
	dest, err := AssociatedTokenAddress(payTo, mint, t.program)
	if err != nil {
		return false, err
	}
	return t.mint == mint && t.destination == dest && t.amount == amount, nil
}

// staticLayout reports whether ixs are laid out as the exact scheme's
// (instruction 2 is its TransferChecked), rather than a smart wallet's.
func staticLayout(ixs []instruction) bool {
	if len(ixs) < 3 {
		return false
	}
	_, ok := parseTransfer(ixs[2])
	return ok
}

// checkTransfer checks, once a smart wallet's settlement (a transaction
// not laid out as the exact scheme's) has succeeded on chain, that the
// transaction did make the transfer its simulation made: between the
// simulation and the settlement the wallet's program may have gone another
// way, as the official facilitator's post-settlement check guards against.
// The transaction's TransferChecked instructions, top-level and inner (from
// getTransaction), must hold one of the price to the seller's token
// account; otherwise the settlement fails with ReasonTransferNotConfirmed.
func (s *Settler) checkTransfer(ctx context.Context, p *x402.Payment, res *x402.SettleResponse) (*x402.SettleResponse, error) {
	var payload x402.PaymentPayload
	if err := json.Unmarshal(p.Payload, &payload); err != nil {
		return nil, fmt.Errorf("settle: payment payload: %w", err)
	}
	ptx, err := decodeTransaction(payload.Payload)
	if err != nil {
		return nil, fmt.Errorf("settle: %w", err)
	}
	ixs := ptx.instructions()
	if staticLayout(ixs) {
		return res, nil
	}
	mint, err := solana.PublicKeyFromBase58(p.Asset)
	if err != nil {
		return nil, fmt.Errorf("settle: asset %q: %w", p.Asset, err)
	}
	payTo, err := solana.PublicKeyFromBase58(payload.Accepted.PayTo)
	if err != nil {
		return nil, fmt.Errorf("settle: payTo %q: %w", payload.Accepted.PayTo, err)
	}
	amount, err := strconv.ParseUint(p.Amount, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("settle: amount %q: %w", p.Amount, err)
	}
	var landed *struct {
		Meta struct {
			InnerInstructions []InnerInstructions `json:"innerInstructions"`
		} `json:"meta"`
	}
	err = s.rpc.call(ctx, "getTransaction", []any{res.Transaction, map[string]any{
		"encoding": "jsonParsed", "commitment": "confirmed", "maxSupportedTransactionVersion": 0,
	}}, &landed)
	if err != nil {
		return nil, fmt.Errorf("settle: %w", err)
	}
	if landed == nil {
		return nil, fmt.Errorf("settle: transaction %s not found by getTransaction", res.Transaction)
	}
	var transfers []*transfer
	for _, ix := range ixs {
		if tr, ok := parseTransfer(ix); ok {
			transfers = append(transfers, tr)
		}
	}
	transfers = append(transfers, innerTransfers(landed.Meta.InnerInstructions, ptx.tx.Message.AccountKeys)...)
	for _, t := range transfers {
		ok, err := t.paysPrice(mint, payTo, amount)
		if err != nil {
			return nil, fmt.Errorf("settle: %w", err)
		}
		if ok {
			return res, nil
		}
	}
	return &x402.SettleResponse{Success: false, ErrorReason: ReasonTransferNotConfirmed, Transaction: res.Transaction, Network: p.Network, Payer: p.Payer}, nil
}

// checkComputeBudget checks the Compute Budget instructions of a smart
// wallet's transaction as the official facilitator does: SetComputeUnitLimit
// and SetComputeUnitPrice within the limits, no other.
func (sw *SmartWallets) checkComputeBudget(ixs []instruction) error {
	maxUnits := uint64(sw.MaxComputeUnits)
	if maxUnits == 0 {
		maxUnits = DefaultSmartWalletMaxComputeUnits
	}
	maxPrice := sw.MaxComputeUnitPrice
	if maxPrice == 0 {
		maxPrice = DefaultSmartWalletMaxComputeUnitPrice
	}
	for i, ix := range ixs {
		if ix.program != ComputeBudgetProgram {
			continue
		}
		switch {
		case len(ix.data) == 0:
			return refuse(ReasonSmartWalletMalformedBudget, "instruction %d: a Compute Budget instruction without data", i)
		case ix.data[0] == discSetComputeUnitLimit:
			if len(ix.data) < 5 {
				return refuse(ReasonSmartWalletMalformedLimit, "instruction %d: SetComputeUnitLimit of %d bytes", i, len(ix.data))
			}
			if units := uint64(binary.LittleEndian.Uint32(ix.data[1:5])); units > maxUnits {
				return refuse(ReasonSmartWalletComputeUnits, "instruction %d: %d compute units, at most %d", i, units, maxUnits)
			}
		case ix.data[0] == discSetComputeUnitPrice:
			if len(ix.data) < 9 {
				return refuse(ReasonSmartWalletMalformedPrice, "instruction %d: SetComputeUnitPrice of %d bytes", i, len(ix.data))
			}
			if price := binary.LittleEndian.Uint64(ix.data[1:9]); price > maxPrice {
				return refuse(ReasonSmartWalletPriorityFee, "instruction %d: compute unit price %d µlamports, at most %d", i, price, maxPrice)
			}
		default:
			return refuse(ReasonSmartWalletUnsupportedBudget, "instruction %d: Compute Budget instruction %d", i, ix.data[0])
		}
	}
	return nil
}

// innerTransfers returns the TransferChecked instructions of SPL Token and
// Token-2022 among inner, in any form a node answers them; keys are the
// transaction's account keys (for the compiled form).
func innerTransfers(inner []InnerInstructions, keys []solana.PublicKey) []*transfer {
	var out []*transfer
	for _, group := range inner {
		for _, ii := range group.Instructions {
			if tr, ok := ii.transfer(keys); ok {
				out = append(out, tr)
			}
		}
	}
	return out
}

// transfer reads ii as a TransferChecked of SPL Token or Token-2022.
func (ii *InnerInstruction) transfer(keys []solana.PublicKey) (*transfer, bool) {
	if len(ii.Parsed) > 0 {
		var parsed struct {
			Type string `json:"type"`
			Info struct {
				Source, Mint, Destination, Authority, MultisigAuthority string
				TokenAmount                                             struct {
					Amount   string `json:"amount"`
					Decimals uint8  `json:"decimals"`
				} `json:"tokenAmount"`
			} `json:"info"`
		}
		program, err := solana.PublicKeyFromBase58(ii.ProgramID)
		if err != nil || program != TokenProgram && program != Token2022Program {
			return nil, false
		}
		if json.Unmarshal(ii.Parsed, &parsed) != nil || parsed.Type != "transferChecked" {
			return nil, false
		}
		in := parsed.Info
		tr := &transfer{program: program, decimals: in.TokenAmount.Decimals}
		for _, f := range []struct {
			to  *solana.PublicKey
			key string
		}{{&tr.source, in.Source}, {&tr.mint, in.Mint}, {&tr.destination, in.Destination}, {&tr.authority, cmp.Or(in.Authority, in.MultisigAuthority)}} {
			if *f.to, err = solana.PublicKeyFromBase58(f.key); err != nil {
				return nil, false
			}
		}
		if tr.amount, err = strconv.ParseUint(in.TokenAmount.Amount, 10, 64); err != nil {
			return nil, false
		}
		return tr, true
	}
	ix, ok := ii.instruction(keys)
	if !ok {
		return nil, false
	}
	return parseTransfer(ix)
}

// instruction returns ii, partially decoded or compiled (not parsed),
// with its program and accounts resolved to keys; keys are the
// transaction's account keys (for the compiled form).
func (ii *InnerInstruction) instruction(keys []solana.PublicKey) (instruction, bool) {
	data, err := base58.Decode(ii.Data)
	if err != nil {
		return instruction{}, false
	}
	ix := instruction{data: data}
	if ii.ProgramIDIndex != nil {
		var idx []int
		if *ii.ProgramIDIndex < 0 || *ii.ProgramIDIndex >= len(keys) || json.Unmarshal(ii.Accounts, &idx) != nil {
			return instruction{}, false
		}
		ix.program = keys[*ii.ProgramIDIndex]
		for _, i := range idx {
			if i < 0 || i >= len(keys) {
				return instruction{}, false
			}
			ix.accounts = append(ix.accounts, keys[i])
		}
		return ix, true
	}
	var addrs []string
	if ix.program, err = solana.PublicKeyFromBase58(ii.ProgramID); err != nil || json.Unmarshal(ii.Accounts, &addrs) != nil {
		return instruction{}, false
	}
	for _, a := range addrs {
		key, err := solana.PublicKeyFromBase58(a)
		if err != nil {
			return instruction{}, false
		}
		ix.accounts = append(ix.accounts, key)
	}
	return ix, true
}

// neverValid marks a refusal made for the transaction's own content: it
// could not have been accepted at any time.
func neverValid(err error) error {
	if r, ok := errors.AsType[*x402.Refusal](err); ok {
		r.NeverValid = true
	}
	return err
}
