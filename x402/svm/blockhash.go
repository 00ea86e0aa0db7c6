package svm

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/x402d/x402d/x402"
)

// Blockhash is a recent blockhash with the last block height at which a
// transaction naming it may land.
type Blockhash struct {
	Hash                 solana.Hash
	LastValidBlockHeight uint64
}

// Life is what Blockhashes.Life learns of a transaction's blockhash.
type Life struct {
	// Valid reports whether a transaction naming it may still land.
	Valid bool
	// Height is the chain's block height (confirmed) when asked.
	Height uint64
	// LastValidBlockHeight is the last block height at which a transaction
	// naming it may land.
	LastValidBlockHeight uint64
	// Known is set when LastValidBlockHeight is the node's own figure (the
	// blockhash was the newest one once, handed out or seen); otherwise it
	// is the estimate for a blockhash fetched as the client paid, at the
	// commitment clients fetch it at by default (finalized).
	Known bool
	// Deadline is when the chain reaches LastValidBlockHeight at the
	// fastest (a block every x402.SolanaSlotTime): a transaction sent after
	// it may not land.
	Deadline time.Time
}

// Blockhashes tells how long the blockhash of a payment transaction lives,
// from a Solana node: the node's lastValidBlockHeight of the blockhashes it
// named as the newest (Latest hands them out; Life records the newest
// confirmed and finalized ones each time it asks), and the chain's block
// height. It is safe for concurrent use.
type Blockhashes struct {
	rpc *rpcClient
	now func() time.Time

	mu sync.Mutex
	// known is the lastValidBlockHeight of every blockhash seen as the
	// newest, kept while it may land.
	known map[solana.Hash]uint64
}

// NewBlockhashes returns Blockhashes asking the JSON-RPC endpoint at url
// (RPC_URL_SOLANA) through client; a nil client is an http.Client with a
// 15-second timeout.
func NewBlockhashes(url string, client *http.Client) *Blockhashes {
	return &Blockhashes{rpc: newRPCClient(url, client), now: time.Now, known: map[solana.Hash]uint64{}}
}

type latestBlockhash struct {
	Value struct {
		Blockhash            solana.Hash `json:"blockhash"`
		LastValidBlockHeight uint64      `json:"lastValidBlockHeight"`
	} `json:"value"`
}

// Latest returns the newest confirmed blockhash, and remembers it: a
// payment naming it has an exact deadline.
func (b *Blockhashes) Latest(ctx context.Context) (Blockhash, error) {
	var out latestBlockhash
	if err := b.rpc.call(ctx, "getLatestBlockhash", []any{map[string]string{"commitment": "confirmed"}}, &out); err != nil {
		return Blockhash{}, err
	}
	bh := Blockhash{Hash: out.Value.Blockhash, LastValidBlockHeight: out.Value.LastValidBlockHeight}
	b.mu.Lock()
	b.known[bh.Hash] = bh.LastValidBlockHeight
	b.mu.Unlock()
	return bh, nil
}

// Life asks the node, in one request, the chain's block height, whether
// hash is valid and the newest blockhashes, and returns how long hash
// lives. An error means the node could not be asked.
func (b *Blockhashes) Life(ctx context.Context, hash solana.Hash) (Life, error) {
	var (
		height    uint64
		valid     struct{ Value bool }
		confirmed latestBlockhash
		finalized latestBlockhash
	)
	err := b.rpc.batch(ctx,
		rpcCall{Method: "getBlockHeight", Params: []any{map[string]string{"commitment": "confirmed"}}, Out: &height},
		rpcCall{Method: "isBlockhashValid", Params: []any{hash.String(), map[string]string{"commitment": "confirmed"}}, Out: &valid},
		rpcCall{Method: "getLatestBlockhash", Params: []any{map[string]string{"commitment": "confirmed"}}, Out: &confirmed},
		rpcCall{Method: "getLatestBlockhash", Params: []any{map[string]string{"commitment": "finalized"}}, Out: &finalized},
	)
	if err != nil {
		return Life{}, fmt.Errorf("blockhash life: %w", err)
	}
	now := b.now()
	b.mu.Lock()
	for _, l := range []latestBlockhash{confirmed, finalized} {
		b.known[l.Value.Blockhash] = l.Value.LastValidBlockHeight
	}
	for h, last := range b.known {
		if last < height {
			delete(b.known, h)
		}
	}
	last, known := b.known[hash]
	b.mu.Unlock()
	if !known {
		last = finalized.Value.LastValidBlockHeight
	}
	life := Life{Height: height, LastValidBlockHeight: last, Known: known, Valid: valid.Value && height <= last, Deadline: now}
	if life.Valid {
		life.Deadline = now.Add(time.Duration(last-height) * x402.SolanaSlotTime)
	}
	return life, nil
}
