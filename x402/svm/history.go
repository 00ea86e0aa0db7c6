package svm

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	bin "github.com/gagliardetto/binary"
	"github.com/gagliardetto/solana-go"
)

// History reads what landed for an account on a Solana node, at the
// "finalized" commitment (a finalized block is never rolled back, so
// nothing read is undone): the signatures of the transactions naming it
// (getSignaturesForAddress), and the token transfers of those transactions
// (getTransaction in base64, decoded here, with the token balances of its
// meta naming each token account's mint and owner). Its calls go through
// one JSON-RPC client (one HTTP client). It is safe for concurrent use.
type History struct {
	rpc *rpcClient
}

// NewHistory returns a History asking the JSON-RPC endpoint at url
// (RPC_URL_SOLANA) through client; a nil client is an http.Client with a
// 15-second timeout.
func NewHistory(url string, client *http.Client) *History {
	return &History{rpc: newRPCClient(url, client)}
}

// MaxSignatures is the most signatures one getSignaturesForAddress call
// answers.
const MaxSignatures = 1000

// SignatureInfo is a transaction naming an account, as
// getSignaturesForAddress answers it.
type SignatureInfo struct {
	Signature string          `json:"signature"`
	Slot      uint64          `json:"slot"`
	Err       json.RawMessage `json:"err"`
	BlockTime *int64          `json:"blockTime"`
}

// Failed reports whether the transaction failed: it landed and paid its
// fee, and nothing else it did holds.
func (s *SignatureInfo) Failed() bool {
	e := bytes.TrimSpace(s.Err)
	return len(e) > 0 && !bytes.Equal(e, []byte("null"))
}

// Signatures returns up to limit (at most MaxSignatures) signatures of the
// finalized transactions naming account, newest first: those older than
// before and newer than until ("" for either: no bound).
func (h *History) Signatures(ctx context.Context, account solana.PublicKey, before, until string, limit int) ([]SignatureInfo, error) {
	cfg := map[string]any{"commitment": "finalized", "limit": min(max(limit, 1), MaxSignatures)}
	if before != "" {
		cfg["before"] = before
	}
	if until != "" {
		cfg["until"] = until
	}
	var out []SignatureInfo
	if err := h.rpc.call(ctx, "getSignaturesForAddress", []any{account.String(), cfg}, &out); err != nil {
		return nil, fmt.Errorf("signatures of %s: %w", account, err)
	}
	return out, nil
}

// LandedTransaction is a finalized transaction: where and when it landed,
// who paid its fee (and sent it), and the token transfers it made (none
// when it failed).
type LandedTransaction struct {
	Signature string
	Slot      uint64
	// BlockTime is its block's time; zero when the node does not know it.
	BlockTime time.Time
	FeePayer  solana.PublicKey
	Failed    bool
	Transfers []TokenTransfer
}

// TokenTransfer is a Transfer or TransferChecked instruction of SPL Token
// or Token-2022 that a transaction ran, top-level or inner.
type TokenTransfer struct {
	// Index is its place among the transaction's instructions in the
	// order they ran, each top-level one followed by its inner ones.
	Index                          int
	Program                        solana.PublicKey
	Source, Destination, Authority solana.PublicKey
	// Mint is the mint TransferChecked names, else the one the token
	// balances give the source or destination; zero when neither does.
	Mint solana.PublicKey
	// SourceOwner and DestinationOwner are the token accounts' owners as
	// the token balances give them; zero when they do not.
	SourceOwner, DestinationOwner solana.PublicKey
	Amount                        uint64
}

// landedJSON is getTransaction's answer in base64.
type landedJSON struct {
	Slot        uint64   `json:"slot"`
	BlockTime   *int64   `json:"blockTime"`
	Transaction []string `json:"transaction"`
	Meta        *struct {
		Err               json.RawMessage      `json:"err"`
		InnerInstructions []InnerInstructions  `json:"innerInstructions"`
		PreTokenBalances  []tokenBalanceJSON   `json:"preTokenBalances"`
		PostTokenBalances []tokenBalanceJSON   `json:"postTokenBalances"`
		LoadedAddresses   *loadedAddressesJSON `json:"loadedAddresses"`
	} `json:"meta"`
}

type tokenBalanceJSON struct {
	AccountIndex int    `json:"accountIndex"`
	Mint         string `json:"mint"`
	Owner        string `json:"owner"`
}

type loadedAddressesJSON struct {
	Writable []string `json:"writable"`
	Readonly []string `json:"readonly"`
}

// Transactions returns the finalized transactions of signatures, read in
// one request (a JSON-RPC batch of getTransaction calls); a transaction
// the node does not have (yet) is nil.
func (h *History) Transactions(ctx context.Context, signatures []string) ([]*LandedTransaction, error) {
	if len(signatures) == 0 {
		return nil, nil
	}
	raws := make([]*landedJSON, len(signatures))
	calls := make([]rpcCall, len(signatures))
	for i, sig := range signatures {
		calls[i] = rpcCall{Method: "getTransaction", Params: []any{sig, map[string]any{
			"encoding": "base64", "commitment": "finalized", "maxSupportedTransactionVersion": 0,
		}}, Out: &raws[i]}
	}
	if err := h.rpc.batch(ctx, calls...); err != nil {
		return nil, fmt.Errorf("read transactions: %w", err)
	}
	out := make([]*LandedTransaction, len(signatures))
	for i, raw := range raws {
		if raw == nil {
			continue
		}
		tx, err := decodeLanded(signatures[i], raw)
		if err != nil {
			return nil, fmt.Errorf("transaction %s: %w", signatures[i], err)
		}
		out[i] = tx
	}
	return out, nil
}

// decodeLanded decodes getTransaction's answer for signature.
func decodeLanded(signature string, raw *landedJSON) (*LandedTransaction, error) {
	if len(raw.Transaction) != 2 || raw.Transaction[1] != "base64" {
		return nil, fmt.Errorf("transaction is not [data, \"base64\"]")
	}
	if raw.Meta == nil {
		return nil, fmt.Errorf("transaction has no meta")
	}
	data, err := base64.StdEncoding.DecodeString(raw.Transaction[0])
	if err != nil {
		return nil, fmt.Errorf("transaction is not base64: %w", err)
	}
	tx, err := solana.TransactionFromDecoder(bin.NewBinDecoder(data))
	if err != nil {
		return nil, fmt.Errorf("decode transaction: %w", err)
	}
	m := &tx.Message
	if len(tx.Signatures) == 0 || len(m.AccountKeys) == 0 || tx.Signatures[0].String() != signature {
		return nil, fmt.Errorf("the node answered another transaction")
	}
	keys := append([]solana.PublicKey(nil), m.AccountKeys...)
	if la := raw.Meta.LoadedAddresses; la != nil {
		for _, a := range append(append([]string(nil), la.Writable...), la.Readonly...) {
			key, err := solana.PublicKeyFromBase58(a)
			if err != nil {
				return nil, fmt.Errorf("loaded address %q: %w", a, err)
			}
			keys = append(keys, key)
		}
	}
	if len(m.AddressTableLookups) > 0 && len(keys) == len(m.AccountKeys) {
		return nil, fmt.Errorf("the transaction looks addresses up and the node did not answer them")
	}
	lt := &LandedTransaction{Signature: signature, Slot: raw.Slot, FeePayer: keys[0]}
	if raw.BlockTime != nil {
		lt.BlockTime = time.Unix(*raw.BlockTime, 0).UTC()
	}
	if e := bytes.TrimSpace(raw.Meta.Err); len(e) > 0 && !bytes.Equal(e, []byte("null")) {
		lt.Failed = true
		return lt, nil
	}
	// Each token account's mint and owner: before the transaction, else
	// after it (an account it made).
	type account struct{ mint, owner solana.PublicKey }
	accounts := map[solana.PublicKey]account{}
	for _, balances := range [][]tokenBalanceJSON{raw.Meta.PostTokenBalances, raw.Meta.PreTokenBalances} {
		for _, b := range balances {
			mint, err1 := solana.PublicKeyFromBase58(b.Mint)
			owner, err2 := solana.PublicKeyFromBase58(b.Owner)
			if b.AccountIndex < 0 || b.AccountIndex >= len(keys) || err1 != nil || err2 != nil {
				return nil, fmt.Errorf("token balance of account %d: not an account, mint and owner", b.AccountIndex)
			}
			accounts[keys[b.AccountIndex]] = account{mint: mint, owner: owner}
		}
	}
	add := func(ix instruction, index int) {
		tr, ok := parseTokenTransfer(ix)
		if !ok {
			return
		}
		t := TokenTransfer{Index: index, Program: tr.program, Source: tr.source, Destination: tr.destination, Authority: tr.authority,
			Mint: tr.mint, Amount: tr.amount}
		src, dst := accounts[tr.source], accounts[tr.destination]
		t.SourceOwner, t.DestinationOwner = src.owner, dst.owner
		if t.Mint.IsZero() {
			t.Mint = src.mint
		}
		if t.Mint.IsZero() {
			t.Mint = dst.mint
		}
		lt.Transfers = append(lt.Transfers, t)
	}
	n := 0
	for i, ci := range m.Instructions {
		ix, ok := compiled(ci, keys)
		if !ok {
			return nil, fmt.Errorf("instruction %d: an index out of range", i)
		}
		add(ix, n)
		n++
		for _, group := range raw.Meta.InnerInstructions {
			if group.Index != i {
				continue
			}
			for j := range group.Instructions {
				ix, ok := group.Instructions[j].instruction(keys)
				if !ok {
					return nil, fmt.Errorf("inner instruction %d of %d: not a compiled instruction of its keys", j, i)
				}
				add(ix, n)
				n++
			}
		}
	}
	return lt, nil
}

// compiled returns ci with its program and accounts resolved to keys.
func compiled(ci solana.CompiledInstruction, keys []solana.PublicKey) (instruction, bool) {
	if int(ci.ProgramIDIndex) >= len(keys) {
		return instruction{}, false
	}
	ix := instruction{program: keys[ci.ProgramIDIndex], data: ci.Data}
	for _, a := range ci.Accounts {
		if int(a) >= len(keys) {
			return instruction{}, false
		}
		ix.accounts = append(ix.accounts, keys[a])
	}
	return ix, true
}

// discTransfer is SPL Token's Transfer (the mint unchecked).
const discTransfer = 3

// parseTokenTransfer reads ix as a TransferChecked or a Transfer of SPL
// Token or Token-2022 (a Transfer's mint is left zero).
func parseTokenTransfer(ix instruction) (*transfer, bool) {
	if tr, ok := parseTransfer(ix); ok {
		return tr, true
	}
	if ix.program != TokenProgram && ix.program != Token2022Program {
		return nil, false
	}
	if len(ix.data) != 9 || ix.data[0] != discTransfer || len(ix.accounts) < 3 {
		return nil, false
	}
	return &transfer{program: ix.program, source: ix.accounts[0], destination: ix.accounts[1], authority: ix.accounts[2],
		amount: binary.LittleEndian.Uint64(ix.data[1:9])}, true
}
