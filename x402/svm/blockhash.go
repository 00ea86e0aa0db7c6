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
	// Latest is when the chain reaches LastValidBlockHeight at the slowest
	// (a block every SlowestBlockTime), for a blockhash the node has not
	// named as the newest one made at the chain's height when asked: a
	// transaction sent before Deadline may land until then.
	Latest time.Time
}

// SlowestBlockTime is the time a block is taken to need at the most when
// a blockhash's life is counted to its end (Life.Latest): two slots, a
// block for every other slot, more skipped slots than mainnet has.
const SlowestBlockTime = 2 * x402.SolanaSlotTime

// Blockhashes tells how long the blockhash of a payment transaction lives,
// from a Solana node: the node's lastValidBlockHeight of the blockhashes it
// named as the newest (Latest hands them out; Life records the newest
// confirmed and finalized ones each time it reads the chain), and the
// chain's block height. Concurrent Lifes share one read of the chain, kept
// for a slot (x402.SolanaSlotTime). It is safe for concurrent use.
type Blockhashes struct {
	rpc *rpcClient
	now func() time.Time
	// maxAge is how long a read of the chain answers Life.
	maxAge time.Duration

	mu sync.Mutex
	// known is the lastValidBlockHeight of every blockhash seen as the
	// newest, kept while it may land.
	known map[solana.Hash]uint64
	// chain is the last read of the chain; reading is closed once the
	// read on its way is done (nil: none is).
	chain   chainRead
	reading chan struct{}
}

// chainRead is what one read of the chain learnt.
type chainRead struct {
	// at is when it was asked: the height was at least Height then.
	at     time.Time
	height uint64
	// finalizedLast is the lastValidBlockHeight of the newest finalized
	// blockhash.
	finalizedLast uint64
	err           error
}

// NewBlockhashes returns Blockhashes asking the JSON-RPC endpoint at url
// (RPC_URL_SOLANA) through client; a nil client is an http.Client with a
// 15-second timeout.
func NewBlockhashes(url string, client *http.Client) *Blockhashes {
	return &Blockhashes{rpc: newRPCClient(url, client), now: time.Now, maxAge: x402.SolanaSlotTime, known: map[solana.Hash]uint64{}}
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

// Life returns how long hash lives: from the chain's block height and the
// newest blockhashes, read at most a slot ago (one read for concurrent
// callers), and, for a blockhash the node has not named as the newest, the
// node's isBlockhashValid. An error means the node could not be asked.
func (b *Blockhashes) Life(ctx context.Context, hash solana.Hash) (Life, error) {
	read, err := b.read(ctx)
	if err != nil {
		return Life{}, fmt.Errorf("blockhash life: %w", err)
	}
	b.mu.Lock()
	last, known := b.known[hash]
	b.mu.Unlock()
	valid := known
	if !known {
		last = read.finalizedLast
		var v struct{ Value bool }
		if err := b.rpc.call(ctx, "isBlockhashValid", []any{hash.String(), map[string]string{"commitment": "confirmed"}}, &v); err != nil {
			return Life{}, fmt.Errorf("blockhash life: %w", err)
		}
		valid = v.Value
	}
	life := Life{Height: read.height, LastValidBlockHeight: last, Known: known, Valid: valid && read.height <= last, Deadline: read.at, Latest: read.at}
	if life.Valid {
		// The height was read.height when asked: the chain reaches last
		// no sooner than a block a slot from then.
		life.Deadline = read.at.Add(time.Duration(last-read.height) * x402.SolanaSlotTime)
		// A blockhash not known may be as new as the chain's: it lives at
		// most SolanaBlockhashBlocks blocks from the height read.
		latest := last
		if !known {
			latest = max(last, read.height+x402.SolanaBlockhashBlocks)
		}
		life.Latest = read.at.Add(time.Duration(latest-read.height) * SlowestBlockTime)
	}
	return life, nil
}

// read returns the last read of the chain if it is younger than maxAge,
// else reads it again (once for every caller meanwhile): the block height
// and the newest confirmed and finalized blockhashes, in one request.
func (b *Blockhashes) read(ctx context.Context) (chainRead, error) {
	b.mu.Lock()
	if r := b.chain; !r.at.IsZero() && r.err == nil && b.now().Sub(r.at) < b.maxAge {
		b.mu.Unlock()
		return r, nil
	}
	if wait := b.reading; wait != nil {
		b.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return chainRead{}, ctx.Err()
		}
		// The read waited for answers, however long it took: its height
		// was read at r.at, and deadlines count from then.
		b.mu.Lock()
		r := b.chain
		b.mu.Unlock()
		return r, r.err
	}
	done := make(chan struct{})
	b.reading = done
	b.mu.Unlock()

	// Not the caller's cancellation: the read answers every waiter, and
	// the client's timeout bounds it.
	r := b.readChain(context.WithoutCancel(ctx))
	b.mu.Lock()
	b.chain, b.reading = r, nil
	b.mu.Unlock()
	close(done)
	return r, r.err
}

// readChain asks the node the block height and the newest blockhashes, and
// records them.
func (b *Blockhashes) readChain(ctx context.Context) chainRead {
	var (
		height    uint64
		confirmed latestBlockhash
		finalized latestBlockhash
	)
	at := b.now()
	err := b.rpc.batch(ctx,
		rpcCall{Method: "getBlockHeight", Params: []any{map[string]string{"commitment": "confirmed"}}, Out: &height},
		rpcCall{Method: "getLatestBlockhash", Params: []any{map[string]string{"commitment": "confirmed"}}, Out: &confirmed},
		rpcCall{Method: "getLatestBlockhash", Params: []any{map[string]string{"commitment": "finalized"}}, Out: &finalized},
	)
	if err != nil {
		return chainRead{at: at, err: err}
	}
	b.mu.Lock()
	for _, l := range []latestBlockhash{confirmed, finalized} {
		b.known[l.Value.Blockhash] = l.Value.LastValidBlockHeight
	}
	for h, last := range b.known {
		if last < height {
			delete(b.known, h)
		}
	}
	b.mu.Unlock()
	return chainRead{at: at, height: height, finalizedLast: finalized.Value.LastValidBlockHeight}
}
