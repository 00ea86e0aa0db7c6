// Package svm verifies x402 payments of the exact scheme on Solana: a
// partially-signed versioned transaction whose TransferChecked instruction
// pays the seller, checked the way the official TypeScript facilitator
// checks it (x402.md §6), then simulated on a Solana RPC node.
package svm

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gagliardetto/solana-go"
)

// Reasons a payment is refused, spelled as the official TypeScript packages
// spell theirs (x402.md §6).
const (
	ReasonScheme               = "unsupported_scheme"
	ReasonNetworkMismatch      = "network_mismatch"
	ReasonMissingFeePayer      = "invalid_exact_svm_payload_missing_fee_payer"
	ReasonFeePayerNotManaged   = "fee_payer_not_managed_by_facilitator"
	ReasonCouldNotBeDecoded    = "invalid_exact_svm_payload_transaction_could_not_be_decoded"
	ReasonInstructionsLength   = "invalid_exact_svm_payload_transaction_instructions_length"
	ReasonComputeLimit         = "invalid_exact_svm_payload_transaction_instructions_compute_limit_instruction"
	ReasonComputePrice         = "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction"
	ReasonComputePriceTooHigh  = "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction_too_high"
	ReasonNoTransfer           = "invalid_exact_svm_payload_no_transfer_instruction"
	ReasonFeePayerTransferring = "invalid_exact_svm_payload_transaction_fee_payer_transferring_funds"
	ReasonMintMismatch         = "invalid_exact_svm_payload_mint_mismatch"
	ReasonRecipientMismatch    = "invalid_exact_svm_payload_recipient_mismatch"
	ReasonAmountMismatch       = "invalid_exact_svm_payload_amount_mismatch"
	ReasonUnknownFourth        = "invalid_exact_svm_payload_unknown_fourth_instruction"
	ReasonUnknownFifth         = "invalid_exact_svm_payload_unknown_fifth_instruction"
	ReasonUnknownSixth         = "invalid_exact_svm_payload_unknown_sixth_instruction"
	ReasonUnknownSeventh       = "invalid_exact_svm_payload_unknown_seventh_instruction"
	ReasonMemoCount            = "invalid_exact_svm_payload_memo_count"
	ReasonMemoMismatch         = "invalid_exact_svm_payload_memo_mismatch"
	ReasonSignatureInvalid     = "invalid_exact_svm_payload_signature_invalid"
	ReasonSimulationFailed     = "transaction_simulation_failed"
)

// MaxComputeUnitPrice is the highest SetComputeUnitPrice accepted, in
// microlamports per compute unit (5 lamports), as in the official packages.
const MaxComputeUnitPrice = 5_000_000

// Programs a payment transaction may call.
var (
	ComputeBudgetProgram   = solana.MustPublicKeyFromBase58("ComputeBudget111111111111111111111111111111")
	TokenProgram           = solana.MustPublicKeyFromBase58("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA")
	Token2022Program       = solana.MustPublicKeyFromBase58("TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb")
	AssociatedTokenProgram = solana.MustPublicKeyFromBase58("ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL")
	LighthouseProgram      = solana.MustPublicKeyFromBase58("L2TExMFKdjpN9kozasaurPirfHy9P8sbXoAN1qA3S95")
	MemoProgram            = solana.MustPublicKeyFromBase58("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr")
)

// Instruction discriminators (the first data byte).
const (
	discSetComputeUnitLimit = 2
	discSetComputeUnitPrice = 3
	discTransferChecked     = 12
)

// AssociatedTokenAddress returns the associated token account of owner for
// mint under tokenProgram (SPL Token or Token-2022): the program-derived
// address of seeds (owner, tokenProgram, mint) under the Associated Token
// Account program.
func AssociatedTokenAddress(owner, mint, tokenProgram solana.PublicKey) (solana.PublicKey, error) {
	addr, _, err := solana.FindProgramAddress([][]byte{owner[:], tokenProgram[:], mint[:]}, AssociatedTokenProgram)
	if err != nil {
		return solana.PublicKey{}, fmt.Errorf("associated token account of %s for %s: %w", owner, mint, err)
	}
	return addr, nil
}

// ParsePrivateKey reads a Solana private key as operators keep it: base58
// of the 64-byte keypair, or the JSON byte array that solana-keygen writes.
func ParsePrivateKey(s string) (solana.PrivateKey, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") {
		var b []byte
		var ints []int
		if err := json.Unmarshal([]byte(s), &ints); err != nil {
			return nil, fmt.Errorf("parse solana key: %w", err)
		}
		for _, n := range ints {
			if n < 0 || n > 255 {
				return nil, fmt.Errorf("parse solana key: byte %d out of range", n)
			}
			b = append(b, byte(n))
		}
		key := solana.PrivateKey(b)
		if err := key.Validate(); err != nil {
			return nil, fmt.Errorf("parse solana key: %w", err)
		}
		return key, nil
	}
	key, err := solana.PrivateKeyFromBase58(s)
	if err != nil {
		return nil, fmt.Errorf("parse solana key: %w", err)
	}
	if err := key.Validate(); err != nil {
		return nil, fmt.Errorf("parse solana key: %w", err)
	}
	return key, nil
}
