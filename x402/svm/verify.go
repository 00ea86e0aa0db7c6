package svm

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/x402d/x402d/x402"
)

// Simulator runs a transaction on a Solana node without committing it.
type Simulator interface {
	// Simulate simulates the base64 transaction. A transaction that fails
	// is a *SimulationError; another error means the node could not be
	// asked (try again).
	Simulate(ctx context.Context, txBase64 string) error
}

// SimulationError is a transaction that fails in simulation.
type SimulationError struct {
	// Err is the node's error: the transaction error as JSON
	// ({"InstructionError":[2,{"Custom":1}]}) or a JSON-RPC error message.
	Err string
	// Logs are the program logs of the simulation, if any.
	Logs []string
}

func (e *SimulationError) Error() string { return "simulation failed: " + e.Err }

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// FeePayer is the seller's fee payer: the key that pays the fees of
	// payment transactions and settles them. Required.
	FeePayer solana.PublicKey
	// Simulator simulates payment transactions before they are accepted.
	// Nil skips simulation.
	Simulator Simulator
	// Blockhashes tells how long a payment's blockhash lives: its
	// payment's ValidBefore is when it dies. Nil leaves ValidBefore zero
	// (no deadline).
	Blockhashes *Blockhashes
	// SmartWallets, when set, accepts payments made by smart wallets
	// (verifySmartWallet), as the official facilitator does with
	// enableSmartWalletVerification. It needs a Simulator that reports
	// inner instructions (RPCSimulator). Nil accepts only the exact
	// scheme's layout.
	SmartWallets *SmartWallets
	// Balances reads the balances of payers' token accounts, for
	// Verifier.Balance. Nil: Balance fails.
	Balances *TokenBalances
}

// Verifier verifies exact Solana payments. It implements
// x402.SchemeVerifier.
type Verifier struct {
	feePayer     solana.PublicKey
	simulator    Simulator
	blockhashes  *Blockhashes
	smartWallets *SmartWallets
	balances     *TokenBalances
}

var _ x402.SchemeVerifier = (*Verifier)(nil)

// NewVerifier returns a Verifier.
func NewVerifier(cfg *VerifierConfig) (*Verifier, error) {
	if cfg.FeePayer.IsZero() {
		return nil, errors.New("svm verifier: no fee payer configured")
	}
	if cfg.SmartWallets != nil {
		if _, ok := cfg.Simulator.(innerSimulator); !ok {
			return nil, errors.New("svm verifier: smart wallets need a simulator of inner instructions")
		}
	}
	return &Verifier{feePayer: cfg.FeePayer, simulator: cfg.Simulator, blockhashes: cfg.Blockhashes, smartWallets: cfg.SmartWallets,
		balances: cfg.Balances}, nil
}

// FeePayer returns the fee payer payments must name.
func (v *Verifier) FeePayer() solana.PublicKey { return v.feePayer }

// Verify checks payload against req, the seller's own requirement for the
// network the payload names, in the order of the official TypeScript
// facilitator, and returns the payment. A payment that is not acceptable is
// a *x402.Refusal; another error means the requirement is malformed or the
// node could not be asked (try again).
//
// With VerifierConfig.SmartWallets, a payment whose transaction is not laid
// out as the exact scheme's (a refusal of layoutReasons) is checked again as
// a smart wallet's (verifySmartWallet), as the official facilitator does
// with enableSmartWalletVerification.
func (v *Verifier) Verify(ctx context.Context, req *x402.Requirements, payload *x402.PaymentPayload) (*x402.Payment, error) {
	p, err := v.verify(ctx, req, payload)
	r, refused := errors.AsType[*x402.Refusal](err)
	if refused && r.Reason != ReasonSimulationFailed {
		// Refused before the simulation, for the transaction's own
		// content: it could not have been accepted at any time.
		r.NeverValid = true
	}
	if refused && v.smartWallets != nil && layoutReasons[r.Reason] {
		return v.verifySmartWallet(ctx, req, payload)
	}
	return p, err
}

// Authenticate checks that payload, for req, is an exact Solana payment
// whose third instruction moves req's amount of req's mint to req's payTo
// and whose transfer authority signed the transaction (every signer but
// the fee payer, as Verify checks them), and returns the authority
// (x402.Authenticator). The layout of its other instructions, its
// blockhash and its simulation are not checked: a payment only
// authenticated is never sent.
func (v *Verifier) Authenticate(_ context.Context, req *x402.Requirements, payload *x402.PaymentPayload) (string, error) {
	r, err := v.requirementOf(req, payload)
	if err != nil {
		return "", err
	}
	ptx, err := decodeTransaction(payload.Payload)
	if err != nil {
		return "", refuse(ReasonCouldNotBeDecoded, "%v", err)
	}
	ixs := ptx.instructions()
	if len(ixs) < 3 {
		return "", refuse(ReasonInstructionsLength, "%d instructions, want 3 to %d", len(ixs), maxInstructions)
	}
	tr, ok := parseTransfer(ixs[2])
	if !ok {
		return "", refuse(ReasonNoTransfer, "instruction 2 is not a TransferChecked of SPL Token or Token-2022")
	}
	if tr.mint != r.mint {
		return "", refuse(ReasonMintMismatch, "the transfer moves %s, not %s", tr.mint, r.mint)
	}
	wantDest, err := AssociatedTokenAddress(r.payTo, r.mint, tr.program)
	if err != nil || tr.destination != wantDest {
		return "", refuse(ReasonRecipientMismatch, "the transfer pays %s, not the token account of %s", tr.destination, r.payTo)
	}
	if tr.amount != r.amount {
		return "", refuse(ReasonAmountMismatch, "the transfer moves %d, the price is %d", tr.amount, r.amount)
	}
	if _, ok := ptx.signature(tr.authority); !ok {
		return "", refuse(ReasonSignatureInvalid, "the transfer authority %s is not a signer of the transaction", tr.authority)
	}
	if err := ptx.checkSignatures(); err != nil {
		return "", err
	}
	return tr.authority.String(), nil
}

// requirement is what a Verifier reads of the seller's requirement.
type requirement struct {
	extra  x402.SVMExtra
	mint   solana.PublicKey
	payTo  solana.PublicKey
	amount uint64
}

// requirementOf checks the scheme, the network and the fee payer of a
// payment against req, the seller's requirement, and reads the rest.
func (v *Verifier) requirementOf(req *x402.Requirements, payload *x402.PaymentPayload) (*requirement, error) {
	if req.Scheme != "exact" || payload.Accepted.Scheme != "exact" {
		return nil, refuse(ReasonScheme, "scheme %q is not exact", payload.Accepted.Scheme)
	}
	if payload.Accepted.Network != req.Network {
		return nil, refuse(ReasonNetworkMismatch, "payment is for %s, not %s", payload.Accepted.Network, req.Network)
	}
	var r requirement
	if len(req.Extra) > 0 {
		if err := json.Unmarshal(req.Extra, &r.extra); err != nil {
			return nil, fmt.Errorf("verify: requirement extra: %w", err)
		}
	}
	if r.extra.FeePayer == "" {
		return nil, refuse(ReasonMissingFeePayer, "the requirement names no fee payer")
	}
	if r.extra.FeePayer != v.feePayer.String() {
		return nil, refuse(ReasonFeePayerNotManaged, "fee payer %s is not %s", r.extra.FeePayer, v.feePayer)
	}
	var err error
	if r.mint, err = solana.PublicKeyFromBase58(req.Asset); err != nil {
		return nil, fmt.Errorf("verify: requirement asset %q: %w", req.Asset, err)
	}
	if r.payTo, err = solana.PublicKeyFromBase58(req.PayTo); err != nil {
		return nil, fmt.Errorf("verify: requirement payTo %q: %w", req.PayTo, err)
	}
	if r.amount, err = strconv.ParseUint(req.Amount, 10, 64); err != nil {
		return nil, fmt.Errorf("verify: requirement amount %q: %w", req.Amount, err)
	}
	return &r, nil
}

func (v *Verifier) verify(ctx context.Context, req *x402.Requirements, payload *x402.PaymentPayload) (*x402.Payment, error) {
	r, err := v.requirementOf(req, payload)
	if err != nil {
		return nil, err
	}
	extra, mint, payTo, amount := r.extra, r.mint, r.payTo, r.amount

	ptx, err := decodeTransaction(payload.Payload)
	if err != nil {
		return nil, refuse(ReasonCouldNotBeDecoded, "%v", err)
	}
	if fp := ptx.feePayer(); fp != v.feePayer {
		return nil, refuse(ReasonFeePayerNotManaged, "the transaction's fee payer is %s, not %s", fp, v.feePayer)
	}
	ixs := ptx.instructions()
	if len(ixs) < 3 || len(ixs) > maxInstructions {
		return nil, refuse(ReasonInstructionsLength, "%d instructions, want 3 to %d", len(ixs), maxInstructions)
	}
	// The compute budget instructions are read as the official facilitator
	// reads them (its codecs decode the leading discriminator and integer
	// and ignore what follows; the runtime does the same), and the price is
	// capped at MaxComputeUnitPrice, inclusive.
	if ix := ixs[0]; ix.program != ComputeBudgetProgram || len(ix.data) < 5 || ix.data[0] != discSetComputeUnitLimit {
		return nil, refuse(ReasonComputeLimit, "instruction 0 is not SetComputeUnitLimit")
	}
	if ix := ixs[1]; ix.program != ComputeBudgetProgram || len(ix.data) < 9 || ix.data[0] != discSetComputeUnitPrice {
		return nil, refuse(ReasonComputePrice, "instruction 1 is not SetComputeUnitPrice")
	}
	if price := binary.LittleEndian.Uint64(ixs[1].data[1:9]); price > MaxComputeUnitPrice {
		return nil, refuse(ReasonComputePriceTooHigh, "compute unit price %d µlamports is over %d", price, MaxComputeUnitPrice)
	}
	tr, ok := parseTransfer(ixs[2])
	if !ok {
		return nil, refuse(ReasonNoTransfer, "instruction 2 is not a TransferChecked of SPL Token or Token-2022")
	}
	feePayerATA, err := AssociatedTokenAddress(v.feePayer, tr.mint, tr.program)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if tr.source == feePayerATA {
		return nil, refuse(ReasonFeePayerTransferring, "the transfer moves the fee payer's funds")
	}
	// The fee payer signs whatever it is named in: it may pay fees and
	// nothing else, so no instruction may name it (as the exact scheme
	// requires).
	for i, ix := range ixs {
		if ix.program == v.feePayer || slices.Contains(ix.accounts, v.feePayer) {
			return nil, refuse(ReasonFeePayerTransferring, "instruction %d names the fee payer %s", i, v.feePayer)
		}
	}
	if tr.mint != mint {
		return nil, refuse(ReasonMintMismatch, "the transfer moves %s, not %s", tr.mint, mint)
	}
	wantDest, err := AssociatedTokenAddress(payTo, mint, tr.program)
	if err != nil {
		return nil, refuse(ReasonRecipientMismatch, "%v", err)
	}
	if tr.destination != wantDest {
		return nil, refuse(ReasonRecipientMismatch, "the transfer pays %s, not %s (the token account of %s)", tr.destination, wantDest, payTo)
	}
	if tr.amount != amount {
		return nil, refuse(ReasonAmountMismatch, "the transfer moves %d, the price is %d", tr.amount, amount)
	}
	unknown := [...]string{ReasonUnknownFourth, ReasonUnknownFifth, ReasonUnknownSixth, ReasonUnknownSeventh}
	var memos [][]byte
	for i, ix := range ixs[3:] {
		switch ix.program {
		case MemoProgram:
			memos = append(memos, ix.data)
		case LighthouseProgram:
		default:
			return nil, refuse(unknown[i], "instruction %d calls %s, neither Lighthouse nor Memo", i+3, ix.program)
		}
	}
	if extra.Memo != "" {
		if len(memos) != 1 {
			return nil, refuse(ReasonMemoCount, "%d memo instructions, want 1", len(memos))
		}
		if !bytes.Equal(memos[0], []byte(extra.Memo)) {
			return nil, refuse(ReasonMemoMismatch, "memo %q is not %q", memos[0], extra.Memo)
		}
	}
	if _, ok := ptx.signature(tr.authority); !ok {
		return nil, refuse(ReasonSignatureInvalid, "the transfer authority %s is not a signer of the transaction", tr.authority)
	}
	if err := ptx.checkSignatures(); err != nil {
		return nil, err
	}
	if v.simulator != nil {
		// Every check that needs no chain is passed: the caller's guard
		// may stop the chain read.
		if err := x402.GuardChain(ctx); err != nil {
			return nil, err
		}
		var sp x402.ExactSVMPayload
		_ = json.Unmarshal(payload.Payload, &sp) // decoded above
		if err := v.simulator.Simulate(ctx, sp.Transaction); err != nil {
			var se *SimulationError
			if errors.As(err, &se) {
				return nil, refuse(ReasonSimulationFailed, "%s", se.Err)
			}
			return nil, fmt.Errorf("verify: %w", err)
		}
	}
	return v.payment(ctx, req, payload, ptx, tr.authority, tr.amount, mint)
}

// payment returns the payment of a transaction ptx that passed its checks,
// paid by payer: its deadline is when its blockhash dies (refused with
// ReasonSimulationFailed when it is dead already).
func (v *Verifier) payment(ctx context.Context, req *x402.Requirements, payload *x402.PaymentPayload, ptx *paymentTx,
	payer solana.PublicKey, amount uint64, mint solana.PublicKey) (*x402.Payment, error) {
	var validBefore, reserveUntil time.Time
	if v.blockhashes != nil {
		if err := x402.GuardChain(ctx); err != nil {
			return nil, err
		}
		life, err := v.blockhashes.Life(ctx, ptx.tx.Message.RecentBlockhash)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		if !life.Valid {
			return nil, refuse(ReasonSimulationFailed, "the blockhash %s is no longer valid (block height %d, last valid %d)",
				ptx.tx.Message.RecentBlockhash, life.Height, life.LastValidBlockHeight)
		}
		validBefore, reserveUntil = life.Deadline, life.Latest
	}
	raw, err := payload.Ledger()
	if err != nil {
		return nil, fmt.Errorf("verify: encode payload: %w", err)
	}
	return &x402.Payment{
		Network: req.Network,
		Payer:   payer.String(),
		Nonce:   ptx.messageHash(),
		Amount:  strconv.FormatUint(amount, 10),
		Asset:   mint.String(),
		Payload: raw,
		// The run and settlement of the call end before the transaction
		// could no longer land, as EIP-3009's validBefore bounds them.
		ValidBefore: validBefore,
		// Its reservation counts while the transaction may still land,
		// however slowly the chain makes blocks.
		ReserveUntil: reserveUntil,
	}, nil
}

// checkSignatures checks that every required signer but the fee payer (key
// 0, which signs at settlement) has signed the message, the transfer
// authority among them: a transfer authority that is not a signer cannot
// move funds.
func (p *paymentTx) checkSignatures() error {
	m := &p.tx.Message
	for i := 1; i < int(m.Header.NumRequiredSignatures); i++ {
		key, sig := m.AccountKeys[i], p.tx.Signatures[i]
		if sig.IsZero() {
			return refuse(ReasonSignatureInvalid, "signer %s has not signed", key)
		}
		if !sig.Verify(key, p.message) {
			return refuse(ReasonSignatureInvalid, "the signature of %s does not verify", key)
		}
	}
	return nil
}
