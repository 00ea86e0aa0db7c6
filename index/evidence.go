package index

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/svm"
)

// The events the chain reader reads, by their topic: ERC-20's Transfer and
// EIP-3009's AuthorizationUsed, which FiatToken (USDC) emits in the
// transaction that uses a payer's authorization.
var (
	transferTopic          = crypto.Keccak256Hash([]byte("Transfer(address,address,uint256)"))
	authorizationUsedTopic = crypto.Keccak256Hash([]byte("AuthorizationUsed(address,bytes32)"))
)

// Chain is what the chain reader needs of a network's JSON-RPC endpoints
// (*evm.Endpoints): the head and the tagged blocks of the finality policy,
// logs, and blocks and receipts as JSON (an OP-stack chain's deposit
// transactions are types go-ethereum does not decode).
type Chain interface {
	BlockNumber(ctx context.Context) (uint64, error)
	HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error)
	FilterLogs(ctx context.Context, q ethereum.FilterQuery) ([]types.Log, error)
	CallAt(ctx context.Context, block uint64, result any, method string, args ...any) error
}

var _ Chain = (*evm.Endpoints)(nil)

// DefaultChainMaxRange is the most blocks one eth_getLogs call of the
// chain reader asks for unless configured (INDEX_CHAIN_MAX_RANGE): within
// what the common providers allow for a filter on addresses.
const DefaultChainMaxRange = 1000

// DefaultSolanaCallsPerSecond is the most calls a second the chain reader
// makes to a Solana node unless configured
// (INDEX_SOLANA_CALLS_PER_SECOND): the common providers' free plans allow
// 10 requests a second.
const DefaultSolanaCallsPerSecond = 10

// ChainReaderConfig configures a ChainReader.
type ChainReaderConfig struct {
	// Pool is the index's database. Required.
	Pool *pgxpool.Pool
	// Chains are the networks read (CAIP-2 eip155:<id>, each listed in
	// x402.Networks for its USDC address) and their endpoints.
	Chains map[string]Chain
	// Assets are the USDC token of networks besides the network table's
	// (a test chain's); a network listed in x402.Networks takes its asset.
	Assets map[string]common.Address
	// Finality is the finality policy of each network (FINALITY_<CHAIN>):
	// blocks are read up to the newest the policy holds final. A network
	// without one takes evm.DefaultFinality.
	Finality map[string]evm.FinalityPolicy
	// MaxRange is the most blocks one eth_getLogs call asks for. Defaults
	// to DefaultChainMaxRange.
	MaxRange uint64
	// MaxRanges is the most ranges of MaxRange blocks a network is read in
	// by one run (the rest by the next). Defaults to 20.
	MaxRanges int
	// MaxAddresses is the most payTo addresses one eth_getLogs call names
	// (a topic OR-list); more are read in several calls. Defaults to 1000.
	MaxAddresses int
	// ReceiptsByTx is the most transactions of a block holding transfers
	// whose receipts are read one by one; a block with more has all its
	// receipts read at once. Defaults to 8.
	ReceiptsByTx int
	// StartBack is how many blocks before the newest final one a network
	// is first read from. Defaults to 0: from the first run on.
	StartBack uint64
	// ReorgDepth is how far back reading starts again when the last block
	// read was replaced (a reorganisation): what was counted there is
	// forgotten and read again. Defaults to 64.
	ReorgDepth uint64
	// FundingLookback is how many blocks before a payer's first payment
	// are looked at for a USDC transfer from the payTo to it (a payer
	// funded by the seller). Defaults to MaxRange.
	FundingLookback uint64
	// Facilitators are addresses known to send settlements besides
	// KnownFacilitators, by name, spelt as the reader records senders
	// (EVM: lower-case hex; Solana: base58).
	Facilitators map[string]string
	// Solana are the Solana networks read (CAIP-2 solana:<genesis hash>,
	// listed in x402.Networks for its USDC mint) and their nodes.
	Solana map[string]SolanaChain
	// SolanaPage is the most signatures one getSignaturesForAddress call
	// asks for. Defaults to 100.
	SolanaPage int
	// SolanaAccounts is the most payTo addresses of a Solana network one
	// run reads, the least recently read first (the rest by the next
	// runs). Defaults to 100.
	SolanaAccounts int
	// SolanaTransactions is the most transactions of a Solana network one
	// run reads (getTransaction); a run stops after the page that reaches
	// it. Defaults to 1000.
	SolanaTransactions int
	// SolanaCallGap is the least time between two calls of a run to a
	// Solana node (a JSON-RPC batch of n calls counts n), within its
	// provider's rate limit; 0: none. A 429 ends the network's run, the
	// next resumes from the cursors.
	SolanaCallGap time.Duration
	// StaleAfter is how long a host's figures are kept before they are
	// counted again without a new transfer (the windows move). Defaults to
	// 10 minutes.
	StaleAfter time.Duration
	// RefreshLimit is the most hosts whose figures one run counts.
	// Defaults to 2000.
	RefreshLimit int
	// Clock defaults to the real one.
	Clock clock.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// ChainReader reads, on each EVM network with endpoints and on Solana
// (readSolana), the USDC transfers into the payTo addresses the index's
// listings name, and counts each host's figures from them (Evidence).
//
// A run reads each network from its cursor (the last block read) up to the
// newest block its finality policy holds final, in ranges of MaxRange
// blocks, with one eth_getLogs call a range: Transfer logs of the
// network's USDC whose to (topic 2) is any of the watched payTo addresses,
// named in one topic OR-list (MaxAddresses at most, or several calls).
// Each block holding a match is then read once as JSON (its time and
// hash), with the receipts of the matching transactions (each one's
// sender, and whether it used the payer's EIP-3009 authorization): one by
// one when they are few (ReceiptsByTx), else the block's at once
// (eth_getBlockReceipts). So the calls grow with the blocks and
// transactions that pay a listed seller, never with a chain's traffic.
// The transfers and the cursor are recorded together, so a run cut short
// resumes where the last range ended.
//
// A reorganisation undoes counted transfers: each run reads the hash of the
// cursor's block again, and when the block was replaced, everything read
// after ReorgDepth blocks before it is forgotten and read again. Reading up
// to the finality policy's block alone would make this rare; the check
// also covers chains held final at their receipt.
//
// New payers of a payTo are then looked at for a funding: a USDC transfer
// from the payTo to them within FundingLookback blocks before their first
// payment (one eth_getLogs call for a batch of payers whose payments are
// near one another).
type ChainReader struct {
	cfg          ChainReaderConfig
	facilitators map[string]string
	clock        clock.Clock
	logger       *slog.Logger
}

// NewChainReader returns the chain reader of config, of which it keeps a
// copy.
func NewChainReader(config *ChainReaderConfig) *ChainReader {
	cfg := *config
	cfg.MaxRange = cmp.Or(cfg.MaxRange, DefaultChainMaxRange)
	cfg.MaxRanges = cmp.Or(cfg.MaxRanges, 20)
	cfg.MaxAddresses = cmp.Or(cfg.MaxAddresses, 1000)
	cfg.ReorgDepth = cmp.Or(cfg.ReorgDepth, 64)
	cfg.ReceiptsByTx = cmp.Or(cfg.ReceiptsByTx, 8)
	cfg.FundingLookback = cmp.Or(cfg.FundingLookback, cfg.MaxRange)
	cfg.StaleAfter = cmp.Or(cfg.StaleAfter, 10*time.Minute)
	cfg.RefreshLimit = cmp.Or(cfg.RefreshLimit, 2000)
	cfg.SolanaPage = min(cmp.Or(cfg.SolanaPage, 100), svm.MaxSignatures)
	cfg.SolanaAccounts = cmp.Or(cfg.SolanaAccounts, 100)
	cfg.SolanaTransactions = cmp.Or(cfg.SolanaTransactions, 1000)
	facilitators := KnownFacilitators()
	maps.Copy(facilitators, cfg.Facilitators)
	return &ChainReader{cfg: cfg, facilitators: facilitators, clock: clock.Or(cfg.Clock), logger: cmp.Or(cfg.Logger, slog.Default())}
}

// Networks returns the networks the reader reads, in order: the EVM
// networks, then Solana's.
func (r *ChainReader) Networks() []string {
	return append(slices.Sorted(maps.Keys(r.cfg.Chains)), slices.Sorted(maps.Keys(r.cfg.Solana))...)
}

// ChainRun is what one run of the reader did.
type ChainRun struct {
	// Ranges is how many block ranges were read, over all networks.
	Ranges int
	// Transfers is how many transfers were recorded.
	Transfers int
	// Reorgs is how many networks were read again after a reorganisation.
	Reorgs int
	// Pages is how many pages of a Solana token account's signatures
	// were read.
	Pages int
	// Hosts is how many hosts' figures were counted.
	Hosts int
}

// Run reads every network once (a network that fails is logged and left
// for the next run; the first error is returned) and counts the figures of
// the hosts whose transfers changed or whose figures are stale. A run
// started while another reads (a run longer than the schedule's interval,
// in any process) does nothing.
func (r *ChainReader) Run(ctx context.Context) (*ChainRun, error) {
	run := &ChainRun{}
	unlock, ok, err := store.ChainReaderLock(ctx, r.cfg.Pool)
	if err != nil || !ok {
		return run, err
	}
	defer unlock()
	var touched []string
	var firstErr error
	for _, network := range r.Networks() {
		read := r.readNetwork
		if _, ok := r.cfg.Solana[network]; ok {
			read = r.readSolana
		}
		t, err := read(ctx, network, run)
		touched = append(touched, t...)
		if err != nil {
			r.logger.WarnContext(ctx, "index: read chain", "network", network, "error", err)
			firstErr = cmp.Or(firstErr, err)
		}
	}
	if err := r.refresh(ctx, touched, run); err != nil {
		return run, err
	}
	return run, firstErr
}

// rpcBlock is the part of a block (eth_getBlockByNumber without its
// transactions) the reader uses.
type rpcBlock struct {
	Hash      common.Hash    `json:"hash"`
	Timestamp hexutil.Uint64 `json:"timestamp"`
}

// rpcReceipt is the part of a receipt (eth_getBlockReceipts) the reader
// uses.
type rpcReceipt struct {
	TxHash    common.Hash    `json:"transactionHash"`
	From      common.Address `json:"from"`
	BlockHash common.Hash    `json:"blockHash"`
	Logs      []struct {
		Address common.Address `json:"address"`
		Topics  []common.Hash  `json:"topics"`
	} `json:"logs"`
}

// block reads block n's hash and time.
func block(ctx context.Context, chain Chain, n uint64) (*rpcBlock, error) {
	var b rpcBlock
	if err := chain.CallAt(ctx, n, &b, "eth_getBlockByNumber", hexutil.Uint64(n), false); err != nil {
		return nil, fmt.Errorf("read block %d: %w", n, err)
	}
	return &b, nil
}

// errReorg is a block read in a range that is not the one its logs came
// from: the chain reorganised meanwhile.
var errReorg = errors.New("the chain reorganised while it was read")

// readNetwork reads network from its cursor up to its final block (at most
// MaxRanges ranges) and looks for the fundings of its new payers. It
// returns the payTo addresses whose transfers changed.
func (r *ChainReader) readNetwork(ctx context.Context, network string, run *ChainRun) ([]string, error) {
	chain := r.cfg.Chains[network]
	usdc, ok := r.cfg.Assets[network]
	if n, listed := x402.NetworkByID(network); !ok && listed && strings.HasPrefix(network, "eip155:") {
		usdc, ok = common.HexToAddress(n.Asset), true
	}
	if !ok {
		return nil, fmt.Errorf("network %s: not an EVM network of the network table (its USDC is not known)", network)
	}
	policy, ok := r.cfg.Finality[network]
	if !ok {
		policy = evm.DefaultFinality(network)
	}
	final, err := policy.FinalBlock(ctx, chain)
	if err != nil {
		return nil, err
	}
	now := r.clock.Now()
	var touched []string
	cur, err := store.ChainCursorGet(ctx, r.cfg.Pool, network)
	switch {
	case errors.Is(err, store.ErrNotFound):
		start := final - min(final, r.cfg.StartBack)
		b, err := block(ctx, chain, start)
		if err != nil {
			return nil, err
		}
		cur = &store.ChainCursor{Network: network, Block: start, BlockHash: b.Hash.Hex(), StartedBlock: start, StartedAt: now}
		if err := store.ChainCursorSet(ctx, r.cfg.Pool, cur, now); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	default:
		b, err := block(ctx, chain, cur.Block)
		if err != nil {
			return nil, err
		}
		if b.Hash.Hex() != cur.BlockHash {
			if touched, err = r.rewind(ctx, chain, cur, now); err != nil {
				return nil, err
			}
			run.Reorgs++
		}
	}

	payTos, err := store.ChainPayTos(ctx, r.cfg.Pool, network)
	if err != nil {
		return touched, err
	}
	if err := store.ChainWatch(ctx, r.cfg.Pool, network, payTos, cur.Block, now); err != nil {
		return touched, err
	}
	for range r.cfg.MaxRanges {
		if cur.Block >= final {
			break
		}
		to := min(final, cur.Block+r.cfg.MaxRange)
		ts, hash, err := r.readRange(ctx, chain, network, usdc, payTos, cur.Block+1, to)
		if err != nil {
			return touched, err
		}
		next := *cur
		next.Block, next.BlockHash = to, hash
		err = pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
			if err := store.TransfersAdd(ctx, tx, ts); err != nil {
				return err
			}
			return store.ChainCursorSet(ctx, tx, &next, r.clock.Now())
		})
		if err != nil {
			return touched, err
		}
		cur = &next
		run.Ranges++
		run.Transfers += len(ts)
		for _, t := range ts {
			touched = append(touched, t.PayTo)
		}
	}
	funded, err := r.checkFunding(ctx, chain, network, usdc)
	return append(touched, funded...), err
}

// rewind forgets what was read of cur's network in the ReorgDepth blocks
// up to its cursor (not before where reading began), whose block was
// replaced, and moves the cursor back there.
func (r *ChainReader) rewind(ctx context.Context, chain Chain, cur *store.ChainCursor, now time.Time) ([]string, error) {
	back := max(cur.Block-min(cur.Block, r.cfg.ReorgDepth), cur.StartedBlock)
	b, err := block(ctx, chain, back)
	if err != nil {
		return nil, err
	}
	r.logger.WarnContext(ctx, "index: chain reorganised: reading again", "network", cur.Network, "block", cur.Block, "from", back+1)
	var payTos []string
	err = pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		var err error
		if payTos, err = store.ChainRewind(ctx, tx, cur.Network, back); err != nil {
			return err
		}
		cur.Block, cur.BlockHash = back, b.Hash.Hex()
		return store.ChainCursorSet(ctx, tx, cur, now)
	})
	return payTos, err
}

// addressTopics returns addrs (lower-case hex) as topics.
func addressTopics(addrs []string) []common.Hash {
	out := make([]common.Hash, len(addrs))
	for i, a := range addrs {
		out[i] = common.BytesToHash(common.HexToAddress(a).Bytes())
	}
	return out
}

// lower returns a's lower-case hex.
func lower(a common.Address) string { return strings.ToLower(a.Hex()) }

// readRange reads the transfers into payTos in blocks from to to (one
// eth_getLogs call per MaxAddresses of payTos), then each block holding
// one, and returns them with the hash of block to.
func (r *ChainReader) readRange(ctx context.Context, chain Chain, network string, usdc common.Address, payTos []string, from, to uint64) ([]store.Transfer, string, error) {
	var logs []types.Log
	for chunk := range slices.Chunk(payTos, r.cfg.MaxAddresses) {
		got, err := chain.FilterLogs(ctx, ethereum.FilterQuery{
			FromBlock: new(big.Int).SetUint64(from), ToBlock: new(big.Int).SetUint64(to), Addresses: []common.Address{usdc},
			Topics: [][]common.Hash{{transferTopic}, nil, addressTopics(chunk)},
		})
		if err != nil {
			return nil, "", fmt.Errorf("read transfers of blocks %d-%d: %w", from, to, err)
		}
		logs = append(logs, got...)
	}
	byBlock := map[uint64][]types.Log{}
	for _, l := range logs {
		if l.Removed || len(l.Topics) != 3 || len(l.Data) != 32 {
			continue
		}
		byBlock[l.BlockNumber] = append(byBlock[l.BlockNumber], l)
	}
	var ts []store.Transfer
	endHash := ""
	for _, n := range slices.Sorted(maps.Keys(byBlock)) {
		b, err := block(ctx, chain, n)
		if err != nil {
			return nil, "", err
		}
		receipts, err := r.receipts(ctx, chain, n, byBlock[n])
		if err != nil {
			return nil, "", err
		}
		byTx := map[common.Hash]*rpcReceipt{}
		for i := range receipts {
			if receipts[i].BlockHash != b.Hash {
				return nil, "", fmt.Errorf("block %d: %w", n, errReorg)
			}
			byTx[receipts[i].TxHash] = &receipts[i]
		}
		for _, l := range byBlock[n] {
			rc := byTx[l.TxHash]
			if l.BlockHash != b.Hash || rc == nil {
				return nil, "", fmt.Errorf("block %d: %w", n, errReorg)
			}
			payer := common.BytesToAddress(l.Topics[1].Bytes())
			eip3009 := false
			for _, rl := range rc.Logs {
				if rl.Address == usdc && len(rl.Topics) == 3 && rl.Topics[0] == authorizationUsedTopic && common.BytesToAddress(rl.Topics[1].Bytes()) == payer {
					eip3009 = true
				}
			}
			ts = append(ts, store.Transfer{
				Network: network, TxHash: l.TxHash.Hex(), LogIndex: l.Index, Block: n, BlockHash: b.Hash.Hex(),
				At: time.Unix(int64(b.Timestamp), 0).UTC(), Payer: lower(payer), PayTo: lower(common.BytesToAddress(l.Topics[2].Bytes())),
				Amount: new(big.Int).SetBytes(l.Data).String(), Sender: lower(rc.From), EIP3009: eip3009,
			})
		}
		if n == to {
			endHash = b.Hash.Hex()
		}
	}
	if endHash == "" {
		b, err := block(ctx, chain, to)
		if err != nil {
			return nil, "", err
		}
		endHash = b.Hash.Hex()
	}
	return ts, endHash, nil
}

// receipts reads the receipts of the transactions of logs, all in block n:
// one by one (eth_getTransactionReceipt) when they are at most
// ReceiptsByTx, else the whole block's at once (eth_getBlockReceipts, a
// large answer on a busy chain, and dearer with most providers).
func (r *ChainReader) receipts(ctx context.Context, chain Chain, n uint64, logs []types.Log) ([]rpcReceipt, error) {
	var txs []common.Hash
	for _, l := range logs {
		if !slices.Contains(txs, l.TxHash) {
			txs = append(txs, l.TxHash)
		}
	}
	if len(txs) > r.cfg.ReceiptsByTx {
		var receipts []rpcReceipt
		if err := chain.CallAt(ctx, n, &receipts, "eth_getBlockReceipts", hexutil.Uint64(n)); err != nil {
			return nil, fmt.Errorf("read receipts of block %d: %w", n, err)
		}
		return receipts, nil
	}
	receipts := make([]rpcReceipt, len(txs))
	for i, tx := range txs {
		if err := chain.CallAt(ctx, n, &receipts[i], "eth_getTransactionReceipt", tx); err != nil {
			return nil, fmt.Errorf("read receipt of %s: %w", tx.Hex(), err)
		}
	}
	return receipts, nil
}

// fundingBatch is the most payers one run looks at for a funding, and
// fundingCalls the most eth_getLogs calls it makes for them.
const (
	fundingBatch = 500
	fundingCalls = 10
)

// checkFunding looks at the payers of network not looked at yet for a
// USDC transfer from their payTo within FundingLookback blocks before
// their first payment, in batches of payers whose first payments are
// within MaxRange blocks of each other (one eth_getLogs call each:
// from any of the batch's payTo addresses to any of its payers). It
// returns the payTo addresses that funded a payer.
func (r *ChainReader) checkFunding(ctx context.Context, chain Chain, network string, usdc common.Address) ([]string, error) {
	payers, err := store.ChainPayersUnchecked(ctx, r.cfg.Pool, network, fundingBatch)
	if err != nil || len(payers) == 0 {
		return nil, err
	}
	var funded []string
	for calls := 0; calls < fundingCalls && len(payers) > 0; calls++ {
		// payers are by first block: a batch is those within MaxRange of
		// the first.
		n := 1
		for n < len(payers) && payers[n].FirstBlock-payers[0].FirstBlock < r.cfg.MaxRange {
			n++
		}
		batch := payers[:n]
		payers = payers[n:]
		from := batch[0].FirstBlock - min(batch[0].FirstBlock, r.cfg.FundingLookback)
		to := batch[len(batch)-1].FirstBlock
		payTos, targets := map[string]bool{}, map[string]bool{}
		for _, p := range batch {
			payTos[p.PayTo], targets[p.Payer] = true, true
		}
		logs, err := chain.FilterLogs(ctx, ethereum.FilterQuery{
			FromBlock: new(big.Int).SetUint64(from), ToBlock: new(big.Int).SetUint64(to), Addresses: []common.Address{usdc},
			Topics: [][]common.Hash{{transferTopic}, addressTopics(slices.Sorted(maps.Keys(payTos))), addressTopics(slices.Sorted(maps.Keys(targets)))},
		})
		if err != nil {
			return funded, fmt.Errorf("read fundings of blocks %d-%d: %w", from, to, err)
		}
		for i := range batch {
			p := &batch[i]
			if p.Payer == p.PayTo {
				// A payment to itself is counted as one (SelfPayments).
				continue
			}
			for _, l := range logs {
				if l.Removed || len(l.Topics) != 3 {
					continue
				}
				src, dst := lower(common.BytesToAddress(l.Topics[1].Bytes())), lower(common.BytesToAddress(l.Topics[2].Bytes()))
				if src == p.PayTo && dst == p.Payer && l.BlockNumber <= p.FirstBlock && l.BlockNumber+r.cfg.FundingLookback >= p.FirstBlock {
					p.FundedBlock = max(p.FundedBlock, l.BlockNumber)
				}
			}
			if p.FundedBlock > 0 {
				funded = append(funded, p.PayTo)
			}
		}
		if err := store.ChainPayersChecked(ctx, r.cfg.Pool, network, batch); err != nil {
			return funded, err
		}
	}
	return funded, nil
}
