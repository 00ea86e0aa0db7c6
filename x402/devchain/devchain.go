// Package devchain is the embedded development chain: an in-process EVM
// built from go-ethereum's parts (a node kept in memory or on disk, its transaction pool
// and block builder) with chain id 8453 and an EIP-3009 USDC-like token
// (contracts.DevUSDC) at the Base USDC address
// 0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913, so that quotes built for Base
// work unchanged against it.
//
// A Multicall3-compatible batching contract (contracts.DevMulticall) sits at
// Multicall3's address, 0xcA11bde05977b3631167028862bE2a173976CA11, where
// Base has Multicall3: the relayer settles many payments in one transaction
// through it.
//
// The payment channels of x402's batch-settlement scheme
// (contracts.BatchSettlement) and their EIP-3009 deposit collector
// (contracts.ERC3009DepositCollector) sit at the canonical addresses the
// official x402 packages use (channel.SettlementAddress,
// channel.CollectorAddress).
//
// The ten accounts of the standard development mnemonic (Mnemonic) are
// funded with 1,000,000 USDC and 10,000 ETH each. Account 0 deployed the
// token and may mint more.
//
// The chain mines a block as soon as a transaction enters its pool
// (automine), whether it came through Client or over HTTP from another
// process, and as many blocks a second as arrivals ask for: it is a
// proof-of-authority (clique) chain with period 0, as `geth --dev` was, whose
// only signer is the chain itself. Clique lets consecutive blocks share a
// timestamp (a block's time is the later of its parent's and the wall
// clock's second), which proof-of-stake rules forbid: with them a chain that
// mines on demand either runs ahead of the wall clock, until EIP-3009
// authorizations valid by the wall clock are expired on chain, or mines at
// most one block a second. Clique chains stop before Shanghai, so the EVM is
// London's (no PUSH0, MCOPY or transient storage): the contracts are compiled
// for it (evmVersion paris).
//
// The chain never reorganises: it tags each block safe and finalized as
// soon as it is mined, so that clients waiting for those tags (the
// relayer's default finality on Base) hold it final at once. Kept on disk
// (Config.DataDir), its memory stays bounded however many payments it
// settles: its state's write buffer and read caches are bounded in bytes,
// go-ethereum's other caches by a count of blocks or transactions. With
// Config.History it keeps only its newest blocks whole and cuts older ones
// to their headers, as a pruned node does.
//
// Serve exposes its JSON-RPC (namespaces eth, net, web3, txpool)
// over HTTP so that other processes, wallets (viem) and tests use the same
// chain.
//
// New assembles a node itself (ethclient/simulated.Backend hides its node
// and seals proof-of-stake blocks only): it needs the node's transaction
// pool to mine on arrival, its block builder and chain to seal and insert
// blocks, and its RPC server to serve a listener of the caller's choosing.
package devchain

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/beacon/engine"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/consensus/beacon"
	"github.com/ethereum/go-ethereum/consensus/clique"
	"github.com/ethereum/go-ethereum/core"
	"github.com/ethereum/go-ethereum/core/rawdb"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/eth"
	"github.com/ethereum/go-ethereum/eth/ethconfig"
	"github.com/ethereum/go-ethereum/eth/filters"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/miner"
	"github.com/ethereum/go-ethereum/node"
	"github.com/ethereum/go-ethereum/p2p"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/x402d/x402d/x402/evm"
)

// USDC is the address of USDC on Base, where the devchain places its token.
var USDC = common.HexToAddress("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")

// Multicall is the address of Multicall3 on Base and most EVM chains
// (evm.Multicall3), where the devchain places its batching contract
// (contracts.DevMulticall).
var Multicall = evm.Multicall3

// WalletFactory is where the devchain places its wallet factory
// (contracts.DevWalletFactory): wallets it deploys at counterfactual
// addresses pay with ERC-6492 signatures before they exist.
var WalletFactory = common.HexToAddress("0x0000000000000000000000000000000000006492")

// Roles of development accounts (contract.md).
const (
	// DeployerAccount deployed the token and may mint.
	DeployerAccount = 0
	// RelayerAccount pays gas for settlement on the devchain (RELAYER_KEY's
	// default).
	RelayerAccount = 8
	// PayToAccount receives payments on the devchain (PAY_TO_EVM's default).
	PayToAccount = 9
	// ReceiverAuthorizerAccount signs the seller's claims and refunds of
	// payment channels on the devchain (RECEIVER_AUTHORIZER_KEY's
	// default); it holds nothing and sends nothing.
	ReceiverAuthorizerAccount = 10
)

// Token parameters of the devchain's USDC.
const (
	// TokenName and TokenVersion are the token's EIP-712 domain, the
	// "extra" of EVM payment requirements.
	TokenName    = "USD Coin"
	TokenVersion = "2"
	// TokenDecimals is the number of decimals of the token.
	TokenDecimals = 6
)

// gasLimit is the devchain's block gas limit: room for several thousand
// settlements per block, so that a block that gathered a burst stays below
// its gas target and the base fee does not climb under the fee caps of
// transactions already sent.
const gasLimit = 600_000_000

// Config configures a devchain. The zero value is the standard devchain.
type Config struct {
	// ChainID is the chain id. Defaults to 8453 (Base).
	ChainID uint64
	// Accounts is the number of development accounts funded. Defaults to
	// 10.
	Accounts int
	// USDC is each account's token balance in atomic units. Defaults to
	// 1,000,000 USDC (1e12).
	USDC *big.Int
	// ETH is each account's balance in wei. Defaults to 10,000 ETH.
	ETH *big.Int
	// Logger receives the chain's log lines. Defaults to slog.Default().
	Logger *slog.Logger
	// DataDir, when set, is where the chain keeps its blocks, receipts and
	// state: in a directory of its own that New makes inside it and Close
	// removes (every start is a new chain), read through small caches
	// (diskCacheMB), so that the process's memory stays bounded however
	// many blocks it mines. Empty: everything in memory, which grows with
	// every block (for tests and short runs).
	DataDir string
	// History, when positive and DataDir is set, is how many of the newest
	// blocks the chain keeps whole: older blocks keep their headers but
	// lose their transactions and receipts (eth_getBlockByNumber answers
	// null for them, their transactions and logs are not found), as on a
	// pruned node. Blocks are cut once go-ethereum has moved them out of
	// its key-value store into its freezer (once a minute), so up to a
	// minute of blocks beyond History may still be whole. Zero keeps every
	// block.
	History uint64
}

// diskCacheMB is the memory, in MiB, of each of the read caches of a chain
// kept on disk: the database's (block cache and write buffers) and the
// trie's clean nodes. go-ethereum's defaults (2 GiB and 614 MiB), sized for
// mainnet, let a devchain grow to gigabytes before either is full.
const diskCacheMB = 16

// dirtyCacheMB is the state's write buffer, in MiB: the trie nodes the
// newest blocks wrote, flushed to the database, oldest first, past it. It
// fills with the state each payment writes and is in the Go heap at
// several times its accounted size: go-ethereum's default (1 GiB) is
// memory growing with every payment.
const dirtyCacheMB = 1

func (c *Config) withDefaults() *Config {
	out := *c
	out.ChainID = cmp.Or(out.ChainID, 8453)
	out.Accounts = cmp.Or(out.Accounts, 10)
	if out.USDC == nil {
		out.USDC = new(big.Int).Mul(big.NewInt(1_000_000), big.NewInt(1_000_000))
	}
	if out.ETH == nil {
		out.ETH = new(big.Int).Mul(big.NewInt(10_000), big.NewInt(params.Ether))
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

// Account is a development account.
type Account struct {
	// Address is the account's address.
	Address common.Address
	// Key is the account's private key.
	Key *ecdsa.PrivateKey
}

// Chain is a running devchain.
type Chain struct {
	cfg      *Config
	chainID  *big.Int
	accounts []Account
	stack    *node.Node
	backend  *eth.Ethereum
	// sealKey signs the blocks as sealer, the chain's only signer.
	sealKey *ecdsa.PrivateKey
	sealer  common.Address
	server  *rpc.Server
	client  *ethclient.Client

	stop chan struct{}

	// dataDir is the chain's own data directory, removed by Close; empty
	// when the chain is in memory.
	dataDir string

	// txMu guards nonces, the next nonce of each account Transact used.
	txMu   sync.Mutex
	nonces map[common.Address]uint64

	done  chan struct{}
	close sync.Once
	// pruned is closed when prune returns; nil when the chain keeps every
	// block.
	pruned chan struct{}
}

// New starts a devchain. Close releases it.
func New(ctx context.Context, cfg *Config) (*Chain, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	cfg = cfg.withDefaults()
	if cfg.Accounts < 1 {
		return nil, fmt.Errorf("devchain: %d accounts", cfg.Accounts)
	}
	chainConfig := *params.AllCliqueProtocolChanges
	chainConfig.ChainID = new(big.Int).SetUint64(cfg.ChainID)
	chainConfig.Clique = &params.CliqueConfig{Period: 0, Epoch: 30000}
	// The chain's own signer: a key of this run, the only one the genesis
	// authorizes.
	sealKey, err := crypto.GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("devchain: signer key: %w", err)
	}
	sealer := crypto.PubkeyToAddress(sealKey.PublicKey)

	accounts := make([]Account, cfg.Accounts)
	alloc := types.GenesisAlloc{}
	mints := map[common.Address]*big.Int{}
	for i := range accounts {
		key, err := DeriveKey(Mnemonic, uint32(i))
		if err != nil {
			return nil, fmt.Errorf("devchain: %w", err)
		}
		accounts[i] = Account{Address: crypto.PubkeyToAddress(key.PublicKey), Key: key}
		alloc[accounts[i].Address] = types.Account{Balance: new(big.Int).Set(cfg.ETH)}
		mints[accounts[i].Address] = cfg.USDC
	}
	placed, err := ContractAlloc(&chainConfig, accounts[DeployerAccount].Address, mints)
	if err != nil {
		return nil, fmt.Errorf("devchain: %w", err)
	}
	maps.Copy(alloc, placed)

	nodeConf := node.DefaultConfig
	nodeConf.DataDir = ""
	if cfg.DataDir != "" {
		dir, err := os.MkdirTemp(cfg.DataDir, "x402d-devchain-")
		if err != nil {
			return nil, fmt.Errorf("devchain: data directory: %w", err)
		}
		nodeConf.DataDir, nodeConf.Name = dir, "devchain"
	}
	// removeData removes the chain's own data directory, if any.
	removeData := func() {
		if nodeConf.DataDir != "" {
			_ = os.RemoveAll(nodeConf.DataDir)
		}
	}
	nodeConf.IPCPath = ""
	nodeConf.HTTPHost = ""
	nodeConf.WSHost = ""
	nodeConf.AuthPort = 0
	nodeConf.P2P = p2p.Config{NoDiscovery: true, MaxPeers: 0, ListenAddr: ""}
	nodeConf.Logger = nil
	stack, err := node.New(&nodeConf)
	if err != nil {
		removeData()
		return nil, fmt.Errorf("devchain: node: %w", err)
	}
	ethConf := ethconfig.Defaults
	ethConf.NetworkId = cfg.ChainID
	ethConf.Genesis = &core.Genesis{
		Config:   &chainConfig,
		GasLimit: gasLimit,
		Alloc:    alloc,
		// Clique's genesis names the signers between 32 bytes of vanity and
		// 65 of (empty) seal.
		ExtraData:  append(append(make([]byte, 32), sealer.Bytes()...), make([]byte, crypto.SignatureLength)...),
		Difficulty: big.NewInt(1),
		Timestamp:  uint64(time.Now().Unix()) - 1,
		BaseFee:    big.NewInt(params.InitialBaseFee),
	}
	ethConf.SyncMode = ethconfig.FullSync
	ethConf.TxPool.NoLocals = true
	// One relayer settles every payment: let one account have thousands of
	// transactions pending, so settlement under load is batched into blocks
	// instead of refused by the pool's per-account limits.
	ethConf.TxPool.AccountSlots = 8192
	ethConf.TxPool.AccountQueue = 8192
	ethConf.TxPool.GlobalSlots = 65536
	ethConf.TxPool.GlobalQueue = 65536
	ethConf.LogNoHistory = true
	if cfg.History > 0 && cfg.DataDir != "" {
		// Transactions of blocks cut to their headers leave the index,
		// in the same step as their bodies.
		ethConf.TransactionHistory = cfg.History
	}
	// The state's trie nodes are kept by hash, with no snapshot: what the
	// state takes in memory is then the write buffer of its trie nodes,
	// bounded in bytes (dirtyCacheMB). The path scheme (go-ethereum's
	// default) keeps the changes of each of the newest 128 blocks in a
	// layer of its own in memory, as the snapshot does for the flat state:
	// memory bounded by a count of blocks, each as large as the payments it
	// carries (tens of MB under steady paid load). The hash scheme deletes
	// no trie node from disk: the chain's directory grows with every block
	// (it is removed when the chain stops).
	ethConf.StateScheme = rawdb.HashScheme
	ethConf.SnapshotCache = 0
	ethConf.TrieDirtyCache = dirtyCacheMB
	if cfg.DataDir != "" {
		ethConf.DatabaseCache = diskCacheMB
		ethConf.TrieCleanCache = diskCacheMB
	}
	// Any positive tip is mined: wallets asking eth_maxPriorityFeePerGas on
	// an idle chain get tiny suggestions.
	ethConf.Miner.GasPrice = big.NewInt(1)
	ethConf.Miner.GasCeil = gasLimit
	backend, err := eth.New(stack, &ethConf)
	if err != nil {
		stack.Close()
		removeData()
		return nil, fmt.Errorf("devchain: eth: %w", err)
	}
	filterSystem := filters.NewFilterSystem(backend.APIBackend, filters.Config{})
	if err := stack.Start(); err != nil {
		stack.Close()
		removeData()
		return nil, fmt.Errorf("devchain: start node: %w", err)
	}
	// eth.New wraps clique in the beacon engine, which hands blocks with a
	// difficulty (pre-merge blocks) to it.
	poa, ok := backend.Engine().(*beacon.Beacon).InnerEngine().(*clique.Clique)
	if !ok {
		stack.Close()
		removeData()
		return nil, fmt.Errorf("devchain: engine %T is not clique", backend.Engine())
	}
	poa.Authorize(sealer)

	// The RPC server offers only the namespaces a wallet or a tool needs:
	// the node's own handler also carries admin, debug and miner.
	server := rpc.NewServer()
	apis := append(backend.APIs(), rpc.API{Namespace: "eth", Service: filters.NewFilterAPI(filterSystem)},
		rpc.API{Namespace: "web3", Service: web3API{}})
	for _, api := range apis {
		switch api.Namespace {
		case "eth", "net", "web3", "txpool":
			if err := server.RegisterName(api.Namespace, api.Service); err != nil {
				stack.Close()
				removeData()
				return nil, fmt.Errorf("devchain: register %s API: %w", api.Namespace, err)
			}
		}
	}

	c := &Chain{
		cfg:      cfg,
		chainID:  chainConfig.ChainID,
		accounts: accounts,
		stack:    stack,
		backend:  backend,
		sealKey:  sealKey,
		sealer:   sealer,
		server:   server,
		client:   ethclient.NewClient(rpc.DialInProc(server)),
		nonces:   map[common.Address]uint64{},
		dataDir:  nodeConf.DataDir,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	c.final(backend.BlockChain().CurrentBlock())
	go c.automine()
	if cfg.History > 0 && cfg.DataDir != "" {
		c.pruned = make(chan struct{})
		go c.prune()
	}
	cfg.Logger.InfoContext(ctx, "devchain started", "chain_id", cfg.ChainID, "usdc", USDC.Hex(),
		"accounts", len(accounts), "relayer", c.Account(RelayerAccount).Address.Hex(), "pay_to", c.Account(PayToAccount).Address.Hex())
	return c, nil
}

// Client returns a JSON-RPC client of the chain, in process.
func (c *Chain) Client() *ethclient.Client { return c.client }

// ChainID returns the chain id.
func (c *Chain) ChainID() *big.Int { return new(big.Int).Set(c.chainID) }

// Network returns the chain's CAIP-2 network name, e.g. eip155:8453.
func (c *Chain) Network() string { return "eip155:" + c.chainID.String() }

// Accounts returns the funded development accounts.
func (c *Chain) Accounts() []Account { return append([]Account(nil), c.accounts...) }

// Account returns development account i; it panics when i is out of range.
func (c *Chain) Account(i int) Account { return c.accounts[i] }

// Handler returns the chain's JSON-RPC over HTTP, with CORS open to any
// origin so that wallets in web pages can use it.
func (c *Chain) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Access-Control-Allow-Methods", "POST, GET, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Content-Type")
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		c.server.ServeHTTP(w, r)
	})
}

// Serve answers JSON-RPC over HTTP on ln until ctx is done, then shuts the
// HTTP server down. It returns nil once ctx is done.
func (c *Chain) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	c.cfg.Logger.InfoContext(ctx, "devchain serving JSON-RPC", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("devchain: serve: %w", err)
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			return fmt.Errorf("devchain: shut down: %w", err)
		}
		return nil
	}
}

// buildTimeout bounds the wait for a block's construction.
const buildTimeout = 10 * time.Second

// errClosed is the error of a block not built because the chain is closing.
var errClosed = errors.New("devchain: closed")

// seal builds a block of the pool's executable transactions on the head,
// signs it as the chain's signer and inserts it. It returns the number of
// transactions the block holds (no block is made when there are none).
func (c *Chain) seal(ctx context.Context) (int, error) {
	chain := c.backend.BlockChain()
	parent := chain.CurrentBlock()
	// The builder refuses a timestamp not above the parent's before clique
	// sets the block's own: the later of the parent's and now.
	payload, err := c.backend.Miner().BuildPayload(ctx, &miner.BuildPayloadArgs{
		Parent: parent.Hash(), Timestamp: parent.Time + 1, Version: engine.PayloadV1,
		// Importing a clique block pays its fees to the block's signer.
		FeeRecipient: c.sealer,
	}, false)
	if err != nil {
		return 0, fmt.Errorf("devchain: build block %d: %w", parent.Number.Uint64()+1, err)
	}
	// ResolveFull waits for the builder's first full block, for ever if
	// every attempt fails (each is logged): wait for it here, but not past
	// Close or buildTimeout.
	built := make(chan bool, 1)
	go func() { built <- payload.ResolveFull() != nil }()
	select {
	case ok := <-built:
		if !ok {
			return 0, fmt.Errorf("devchain: build block %d: no block", parent.Number.Uint64()+1)
		}
	case <-c.stop:
		payload.Resolve()
		return 0, errClosed
	case <-time.After(buildTimeout):
		payload.Resolve()
		return 0, fmt.Errorf("devchain: build block %d: not built in %s", parent.Number.Uint64()+1, buildTimeout)
	}
	block, _, _, _ := payload.FullBlockAndReceipts()
	if len(block.Transactions()) == 0 {
		return 0, nil
	}
	header := block.Header()
	sig, err := crypto.Sign(clique.SealHash(header).Bytes(), c.sealKey)
	if err != nil {
		return 0, fmt.Errorf("devchain: sign block %d: %w", header.Number.Uint64(), err)
	}
	copy(header.Extra[len(header.Extra)-crypto.SignatureLength:], sig)
	sealed := block.WithSeal(header)
	if _, err := chain.InsertChain(types.Blocks{sealed}); err != nil {
		return 0, fmt.Errorf("devchain: insert block %d: %w", header.Number.Uint64(), err)
	}
	c.final(sealed.Header())
	return len(block.Transactions()), nil
}

// final tags head, the chain's newest block, safe and finalized: the chain
// has one signer and never reorganises, so that a block is final once
// mined, and clients that wait for a node's safe or finalized block (the
// relayer's default finality on Base) find every block tagged as soon as
// it is inserted (a receipt of it may be read a moment before).
// The finalized block is also where go-ethereum moves blocks out of its
// key-value store into its append-only one (the freezer).
func (c *Chain) final(head *types.Header) {
	chain := c.backend.BlockChain()
	chain.SetSafe(head)
	chain.SetFinalized(head)
}

// Close stops mining and the node. The chain cannot be used afterwards.
func (c *Chain) Close() error {
	var err error
	c.close.Do(func() {
		close(c.stop)
		<-c.done
		if c.pruned != nil {
			<-c.pruned
		}
		c.client.Close()
		c.server.Stop()
		err = c.stack.Close()
		if c.dataDir != "" {
			if rerr := os.RemoveAll(c.dataDir); rerr != nil && err == nil {
				err = fmt.Errorf("devchain: remove data directory: %w", rerr)
			}
		}
	})
	return err
}

// pruneInterval is how often a chain keeping Config.History blocks cuts
// the older ones to their headers.
const pruneInterval = 5 * time.Second

// prune cuts, every pruneInterval until Close, the blocks older than the
// newest cfg.History to their headers: it drops their bodies and receipts
// from the freezer's tail. Only frozen blocks can be cut, and only those
// whose transactions the index has already dropped (the indexer reads a
// block's body to drop them).
func (c *Chain) prune() {
	defer close(c.pruned)
	ticker := time.NewTicker(pruneInterval)
	defer ticker.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-ticker.C:
		}
		if err := c.pruneOnce(); err != nil {
			c.cfg.Logger.Error("devchain: pruning failed", "err", err)
		}
	}
}

// pruneOnce cuts the blocks older than the newest cfg.History that can be
// cut to their headers.
func (c *Chain) pruneOnce() error {
	db := c.backend.ChainDb()
	head := c.backend.BlockChain().CurrentBlock().Number.Uint64()
	if head < c.cfg.History {
		return nil
	}
	target := head + 1 - c.cfg.History // the oldest block kept whole
	frozen, err := db.Ancients()
	if err != nil {
		return fmt.Errorf("frozen blocks: %w", err)
	}
	target = min(target, frozen)
	indexed := rawdb.ReadTxIndexTail(db)
	if indexed == nil {
		return nil
	}
	target = min(target, *indexed)
	tail, err := db.Tail(rawdb.ChainFreezerBlockDataGroup)
	if err != nil {
		return fmt.Errorf("oldest whole block: %w", err)
	}
	if target <= tail {
		return nil
	}
	if _, err := db.TruncateTail(rawdb.ChainFreezerBlockDataGroup, target); err != nil {
		return fmt.Errorf("cut blocks before %d to their headers: %w", target, err)
	}
	return nil
}

// OldestBlock returns the number of the oldest block the chain keeps whole
// (with its transactions and receipts): 0 unless Config.History cut older
// ones to their headers.
func (c *Chain) OldestBlock() (uint64, error) {
	if c.pruned == nil {
		return 0, nil
	}
	tail, err := c.backend.ChainDb().Tail(rawdb.ChainFreezerBlockDataGroup)
	if err != nil {
		return 0, fmt.Errorf("devchain: oldest whole block: %w", err)
	}
	return tail, nil
}

// automine mines whenever the transaction pool has pending transactions.
func (c *Chain) automine() {
	defer close(c.done)
	events := make(chan core.NewTxsEvent, 256)
	sub := c.backend.TxPool().SubscribeTransactions(events, false)
	defer sub.Unsubscribe()
	// The pool sends its events while it reorganises, and TxPool.Sync
	// (in pending) waits for that reorganisation: events are drained on
	// their own goroutine into a one-slot kick, so that a burst of events
	// never blocks the pool while this loop waits for it. The drain ends
	// with the chain or the subscription, and closes kick.
	kick := make(chan struct{}, 1)
	// A transaction sent before the subscription began sent no event: the
	// loop looks at the pool once before waiting for any.
	kick <- struct{}{}
	go func() {
		defer close(kick)
		for {
			select {
			case <-c.stop:
				return
			case <-sub.Err():
				return
			case <-events:
				select {
				case kick <- struct{}{}:
				default:
				}
			}
		}
	}()
	ctx := context.Background()
	// retry wakes the loop again when the builder took none of the pending
	// transactions: a transaction the pool counts an instant before the
	// builder sees it is otherwise left until the next arrival, and a
	// caller waiting for its receipt sends none (it hung a test for
	// minutes). Nil while nothing waits.
	var retry <-chan time.Time
	for {
		select {
		case _, ok := <-kick:
			if !ok {
				return
			}
		case <-retry:
		}
		retry = nil
		for c.pending() > 0 {
			n, err := c.seal(ctx)
			if errors.Is(err, errClosed) {
				return
			}
			if err != nil {
				c.cfg.Logger.ErrorContext(ctx, "devchain: mining failed", "err", err)
				select {
				case <-c.stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			if n == 0 && err == nil {
				// Pending transactions the builder did not take (not yet
				// visible to it, or their fee cap under the base fee):
				// look again shortly, or at the next arrival.
				retry = time.After(retryMine)
				break
			}
		}
	}
}

// retryMine is how soon the miner looks again at pending transactions the
// builder did not take.
const retryMine = 50 * time.Millisecond

// pending returns the number of executable transactions in the pool, once
// the pool has caught up with the head block (right after a commit it still
// counts the transactions just mined).
func (c *Chain) pending() int {
	if err := c.backend.TxPool().Sync(); err != nil {
		return 0
	}
	pending, _ := c.backend.TxPool().Stats()
	return pending
}

// web3API is the web3 namespace.
type web3API struct{}

// ClientVersion returns the chain's client name.
func (web3API) ClientVersion() string { return "x402d-devchain" }

// Sha3 returns the Keccak-256 hash of input.
func (web3API) Sha3(input hexutil.Bytes) hexutil.Bytes { return crypto.Keccak256(input) }

// ListenAndServe runs a devchain serving JSON-RPC on addr (DEVCHAIN_RPC_ADDR,
// e.g. 127.0.0.1:8545) until ctx is done: the `x402d devchain` command.
func ListenAndServe(ctx context.Context, cfg *Config, addr string) error {
	if cfg == nil {
		cfg = &Config{}
	}
	cfg = cfg.withDefaults()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("devchain: listen on %s: %w", addr, err)
	}
	c, err := New(ctx, cfg)
	if err != nil {
		ln.Close()
		return err
	}
	defer c.Close()
	for i, a := range c.accounts {
		cfg.Logger.InfoContext(ctx, "development account", "index", i, "address", a.Address.Hex())
	}
	return c.Serve(ctx, ln)
}
