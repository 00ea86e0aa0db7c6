package svm

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"

	bin "github.com/gagliardetto/binary"
	"github.com/gagliardetto/solana-go"
	"github.com/mr-tron/base58"

	"github.com/x402d/x402d/x402"
)

// maxTransactionBytes bounds a decoded transaction: Solana's packet size.
const maxTransactionBytes = 1232

// maxInstructions is the most instructions a payment transaction may have:
// compute limit, compute price, the transfer and up to four Lighthouse or
// Memo instructions (the exact scheme allows 3 to 7).
const maxInstructions = 7

// paymentTx is a decoded payment transaction.
type paymentTx struct {
	tx *solana.Transaction
	// message is the serialized message, exactly as signed.
	message []byte
}

// instruction is a compiled instruction with its program and accounts
// resolved to keys.
type instruction struct {
	program  solana.PublicKey
	accounts []solana.PublicKey
	data     []byte
}

// transfer is a TransferChecked instruction.
type transfer struct {
	program     solana.PublicKey
	source      solana.PublicKey
	mint        solana.PublicKey
	destination solana.PublicKey
	authority   solana.PublicKey
	amount      uint64
	decimals    uint8
}

// decodeTransaction decodes the base64 transaction of an exact Solana
// payload. The transaction must be a legacy or v0 transaction with one
// signature slot per required signer, no address table lookups (their
// accounts cannot be read without the chain) and instruction indexes that
// name its static keys.
func decodeTransaction(payload json.RawMessage) (*paymentTx, error) {
	var sp x402.ExactSVMPayload
	if err := json.Unmarshal(payload, &sp); err != nil {
		return nil, fmt.Errorf("payload is not an exact Solana payload: %w", err)
	}
	if sp.Transaction == "" {
		return nil, fmt.Errorf("payload has no transaction")
	}
	raw, err := base64.StdEncoding.DecodeString(sp.Transaction)
	if err != nil {
		return nil, fmt.Errorf("transaction is not base64: %w", err)
	}
	if len(raw) > maxTransactionBytes {
		return nil, fmt.Errorf("transaction of %d bytes is over %d", len(raw), maxTransactionBytes)
	}
	dec := bin.NewBinDecoder(raw)
	tx, err := solana.TransactionFromDecoder(dec)
	if err != nil {
		return nil, fmt.Errorf("decode transaction: %w", err)
	}
	if dec.Remaining() != 0 {
		return nil, fmt.Errorf("%d bytes follow the transaction", dec.Remaining())
	}
	// The message follows the signatures: a compact-u16 count, then 64
	// bytes each.
	sigLen := 1
	if len(tx.Signatures) >= 0x80 {
		sigLen = 2
	}
	message := raw[sigLen+64*len(tx.Signatures):]
	if len(message) == 0 {
		return nil, fmt.Errorf("transaction has no message")
	}
	if message[0]&0x80 != 0 && message[0] != 0x80 {
		return nil, fmt.Errorf("message version %d is not supported", message[0]&0x7f)
	}
	m := &tx.Message
	if len(m.AddressTableLookups) > 0 {
		return nil, fmt.Errorf("address table lookups are not supported")
	}
	n := int(m.Header.NumRequiredSignatures)
	if n == 0 || n > len(m.AccountKeys) || len(tx.Signatures) != n {
		return nil, fmt.Errorf("%d signatures for %d required signers of %d keys", len(tx.Signatures), n, len(m.AccountKeys))
	}
	for i, ci := range m.Instructions {
		if int(ci.ProgramIDIndex) >= len(m.AccountKeys) {
			return nil, fmt.Errorf("instruction %d: program index %d out of range", i, ci.ProgramIDIndex)
		}
		for _, a := range ci.Accounts {
			if int(a) >= len(m.AccountKeys) {
				return nil, fmt.Errorf("instruction %d: account index %d out of range", i, a)
			}
		}
	}
	return &paymentTx{tx: tx, message: message}, nil
}

// messageHash returns the base58 SHA-256 of the transaction's message: what
// names the payment whatever its signatures (a message signed again, or its
// fee payer's slot filled in, is the same payment).
func (p *paymentTx) messageHash() string {
	h := sha256.Sum256(p.message)
	return base58.Encode(h[:])
}

// feePayer returns account key 0, the fee payer.
func (p *paymentTx) feePayer() solana.PublicKey { return p.tx.Message.AccountKeys[0] }

// instructions returns the instructions with their keys resolved.
func (p *paymentTx) instructions() []instruction {
	m := &p.tx.Message
	out := make([]instruction, len(m.Instructions))
	for i, ci := range m.Instructions {
		ix := instruction{program: m.AccountKeys[ci.ProgramIDIndex], data: ci.Data}
		for _, a := range ci.Accounts {
			ix.accounts = append(ix.accounts, m.AccountKeys[a])
		}
		out[i] = ix
	}
	return out
}

// signature returns the signature of key, which must be a required signer.
func (p *paymentTx) signature(key solana.PublicKey) (solana.Signature, bool) {
	m := &p.tx.Message
	for i := 0; i < int(m.Header.NumRequiredSignatures); i++ {
		if m.AccountKeys[i] == key {
			return p.tx.Signatures[i], true
		}
	}
	return solana.Signature{}, false
}

// parseTransfer reads ix as a TransferChecked of SPL Token or Token-2022.
func parseTransfer(ix instruction) (*transfer, bool) {
	if ix.program != TokenProgram && ix.program != Token2022Program {
		return nil, false
	}
	if len(ix.data) != 10 || ix.data[0] != discTransferChecked || len(ix.accounts) < 4 {
		return nil, false
	}
	return &transfer{
		program:     ix.program,
		source:      ix.accounts[0],
		mint:        ix.accounts[1],
		destination: ix.accounts[2],
		authority:   ix.accounts[3],
		amount:      binary.LittleEndian.Uint64(ix.data[1:9]),
		decimals:    ix.data[9],
	}, true
}

// Identify returns the payer (transfer authority, base58) and nonce (the
// base58 SHA-256 of the transaction's message) of an exact Solana payment,
// with no check of the payment and no I/O: what Verifier.Verify returns for
// it. A transaction whose instruction 2 is no TransferChecked is taken for
// a smart wallet's (verifySmartWallet): its payer is its first signer after
// the fee payer.
func Identify(p *x402.PaymentPayload) (payer, nonce string, err error) {
	ptx, err := decodeTransaction(p.Payload)
	if err != nil {
		return "", "", refuse(ReasonCouldNotBeDecoded, "%v", err)
	}
	ixs := ptx.instructions()
	var tr *transfer
	ok := len(ixs) >= 3
	if ok {
		tr, ok = parseTransfer(ixs[2])
	}
	authority := ptx.tx.Message.AccountKeys[0]
	switch {
	case ok:
		authority = tr.authority
	case ptx.tx.Message.Header.NumRequiredSignatures >= 2:
		authority = ptx.tx.Message.AccountKeys[1]
	default:
		return "", "", refuse(ReasonNoTransfer, "instruction 2 is not a TransferChecked of SPL Token or Token-2022, and no wallet signs")
	}
	sig, ok := ptx.signature(authority)
	if !ok || sig.IsZero() {
		return "", "", refuse(ReasonSignatureInvalid, "the transfer authority %s has not signed", authority)
	}
	return authority.String(), ptx.messageHash(), nil
}

// refuse returns a *x402.Refusal.
func refuse(reason, format string, args ...any) error {
	return &x402.Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}
