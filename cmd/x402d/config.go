package main

import (
	"cmp"
	"encoding"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/big"
	"net"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/robfig/cron/v3"

	"github.com/x402d/x402d/api"
	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/mcp"
	"github.com/x402d/x402d/model"
	"github.com/x402d/x402d/ops"
	"github.com/x402d/x402d/schema"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/channel"
	"github.com/x402d/x402d/x402/svm"
)

//go:generate go test -count=1 -run ^TestConfigurationDocs$ . -args -update

// Config is the service's configuration, read from the environment by
// loadConfig: each field's env tag names its variable, DefaultConfig holds
// its default, and its comment is what docs/configuration.md says of it (a
// first word naming the field is dropped there). A section tag starts a
// section of that page. Every field has a working default.
type Config struct {
	// DatabaseURL is the PostgreSQL database, created if missing when the
	// role may. The service's sessions run with Postgres's JIT off unless
	// the URL sets jit; pgxpool's pool_* settings may be added, but for the
	// pool's size, which is DB_MAX_CONNS (a serving process retires its
	// connections after pool_max_conn_lifetime, an hour, at times spread
	// over another unless pool_max_conn_lifetime_jitter says otherwise).
	DatabaseURL string `env:"DATABASE_URL" section:"Service"`
	// DBMaxConns is how many database connections each process opens at
	// start and keeps (Postgres allows 100 by default: mind N processes).
	DBMaxConns int `env:"DB_MAX_CONNS"`
	// ListenAddr is the api's listen address.
	ListenAddr string `env:"LISTEN_ADDR"`
	// PublicURL is the base URL of quotes, discovery and OpenAPI. Unset:
	// http:// and LISTEN_ADDR.
	PublicURL string `env:"PUBLIC_URL"`
	// ShutdownTimeout is how long a stopping process waits for its
	// requests and jobs to end.
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT"`
	// LedgerForm is the form the ledger is written in: 2, or 1 as the
	// releases before migrations 016 and 017 write and read it. In form 1
	// the workers write the calls rows with the result's call_id and op
	// and the settlement's response as a JSON object, which those
	// releases' apis answer from, and their events as JSON; the apis write
	// call.paid in data, not bin, which those releases' workers settle
	// from. Set 1 while processes of such a release are replaced, then
	// unset (docs/operating.md, Upgrades). Its earlier name,
	// LEDGER_PREVIOUS_FORM, is still read: true is 1, false 2.
	LedgerForm LedgerForm `env:"LEDGER_FORM"`
	// LogLevel is the least level logged: debug, info, warn or error.
	LogLevel LogLevel `env:"LOG_LEVEL"`
	// LogFormat is the logs' format: text (lines a person reads), json (one
	// object a line, for collectors) or auto (text when standard error is a
	// terminal, JSON otherwise).
	LogFormat LogFormat `env:"LOG_FORMAT"`
	// MetricsAddr is where any x402d process serves /metrics and /healthz
	// on a listener of its own, for Prometheus on a private network.
	// Unset: a worker serves them nowhere, and an api serves /metrics on
	// LISTEN_ADDR to the operator only (Authorization: Bearer OPS_TOKEN),
	// not at all without OPS_TOKEN.
	MetricsAddr string `env:"METRICS_ADDR"`
	// PprofAddr is where any x402d process serves Go's profiles
	// (/debug/pprof/; heap?gc=1 collects garbage first) on a listener of
	// its own: a loopback address (127.0.0.1:6060, [::1]:6060 or
	// localhost:6060), any other is refused at start. Unset: nowhere.
	PprofAddr string `env:"PPROF_ADDR"`
	// OpsToken is the operator's token for the /ops dashboard and the
	// api's /metrics: at least 32 bytes (openssl rand -hex 32). Unset: the
	// dashboard is not mounted.
	OpsToken string `env:"OPS_TOKEN"`

	// Settlement is the settlement mode: devchain (an embedded development
	// chain), rpc (real chains through RPC_URL_<CHAIN>, gas paid by
	// RELAYER_KEY) or facilitator (a remote facilitator at FACILITATOR_URL).
	Settlement SettlementMode `env:"SETTLEMENT" section:"Payments and settlement"`
	// SettlementBatch is whether EVM settlements share transactions
	// through Multicall3 (0xcA11…CA11, checked at start): on, off (one
	// each), or auto (on for the devchain, off for rpc).
	SettlementBatch BatchMode `env:"SETTLEMENT_BATCH"`
	// PayToEVM is the receiving address on every EVM network. Unset:
	// devchain account #9 (devchain mode only).
	PayToEVM string `env:"PAY_TO_EVM"`
	// RelayerKey is the hex private key that pays the settlements' gas; any
	// number of worker processes may share it. Required in rpc mode; unset
	// in devchain mode: devchain account #8.
	RelayerKey string `env:"RELAYER_KEY"`
	// ReceiverAuthorizerKey is the hex private key of the seller's receiver
	// authorizer in x402's batch-settlement scheme (payment channels): it
	// signs the claims of vouchers and the cooperative refunds, and the
	// quotes name its address (extra.receiverAuthorizer). It must not be
	// RELAYER_KEY. Unset: devchain account #10 in devchain mode; in rpc
	// mode the batch-settlement option is not offered.
	ReceiverAuthorizerKey string `env:"RECEIVER_AUTHORIZER_KEY"`
	// ChannelWithdrawDelay is the withdrawal delay of the payment channels
	// the quotes offer (extra.withdrawDelay), in whole seconds, from 15m
	// to 720h (the scheme's bounds): how long a payer who starts a timed
	// withdrawal waits, and so how long the seller has to claim the
	// channel's vouchers once it sees the withdrawal begin. A day leaves
	// the claims a whole day when the workers are down for hours, and
	// keeps a payer's unspent deposit from being held longer than that.
	ChannelWithdrawDelay time.Duration `env:"CHANNEL_WITHDRAW_DELAY"`
	// RPCURLs is RPC_URL_<CHAIN> of each EVM network that has one (e.g.
	// RPC_URL_EIP155_8453 for eip155:8453), per network in rpc mode,
	// read-only in facilitator mode (finding a settlement whose answer was
	// lost): one JSON-RPC URL, or several separated by commas (providers,
	// or keys of one), used together: reads go to one not behind the
	// others, receipts are looked for on all, sends go to all, and one
	// that lags, answers 429 or fails is passed over (docs/operating.md).
	// Logs and metrics name each by scheme://host[:port] only.
	RPCURLs map[string][]string `env:"RPC_URL_<CHAIN>"`
	// Finality is FINALITY_<CHAIN> of each EVM network that has one: when
	// a settlement there counts as final: safe or finalized (the node's
	// block of that tag has reached it), depth:N (N blocks on top of it)
	// or receipt. Unset: the network's default, from the network table
	// (listed in docs/operating.md; receipt on the devchain). Until then a
	// settlement is followed, and a reorganisation that undoes it is met.
	Finality map[string]evm.FinalityPolicy `env:"FINALITY_<CHAIN>"`
	// FacilitatorURL is the remote facilitator of facilitator mode
	// (required there), an http or https URL.
	FacilitatorURL string `env:"FACILITATOR_URL"`
	// SettlementMaxFee is the most the relayer offers per gas, in gwei
	// (decimals allowed): above it settlements wait. Unset: no cap.
	SettlementMaxFee *big.Int `env:"SETTLEMENT_MAX_FEE_GWEI" decimals:"9"`
	// SettlementBatchGasShare is the largest share of a block's gas limit
	// one batch transaction asks for (above 0, at most 1).
	SettlementBatchGasShare float64 `env:"SETTLEMENT_BATCH_GAS_SHARE"`
	// RelayerLowBalance is the relayer's native balance on a chain, in
	// ether, under which the workers warn.
	RelayerLowBalance *big.Int `env:"RELAYER_LOW_BALANCE_ETH" decimals:"18"`
	// SolanaLowBalance is the Solana fee payer's balance, in SOL, under
	// which the workers warn.
	SolanaLowBalance *big.Int `env:"SOLANA_FEE_PAYER_LOW_BALANCE_SOL" decimals:"9"`
	// Factories6492 are the wallet factories (comma-separated) whose
	// undeployed wallets may pay with ERC-6492 signatures. Unset: any
	// factory whose deployment and transfer simulate (the relayer pays the
	// deployment's gas).
	Factories6492 []common.Address `env:"EIP6492_FACTORIES"`
	// PayerCodeGasCap is the most gas a settlement that runs the payer's
	// code may use (a contract wallet's or an EIP-7702 account's signature
	// check, an ERC-6492 wallet's deployment), and the gas verification
	// simulates a transfer with: a payment that needs more is refused.
	// A batch-settlement voucher or deposit checked by its payer's code
	// (EIP-1271) is checked with this much gas (a wallet needing more is
	// refused), and the claim of such a channel goes alone under the same
	// cap: one that needs more is not sent (channel.claim_refused). At
	// least 100,000 (a plain USDC transfer needs about 60,000). Defaults
	// to 500,000: a deployed contract wallet's settlement uses about
	// 84,000, one that deploys the wallet about 302,000.
	PayerCodeGasCap int64 `env:"PAYER_CODE_GAS_CAP"`
	// PayerCodeRefuseFor is how long a wallet, and the ERC-6492 factory
	// that deploys it, whose code made a settlement fail after its payment
	// was verified (its transaction reverted, or its simulation at the
	// transaction's fees failed), or made the claim of a channel's
	// vouchers it had accepted fail, are refused, at verification, before
	// any work. Defaults to 24h.
	PayerCodeRefuseFor time.Duration `env:"PAYER_CODE_REFUSE_FOR"`
	// SettleGrace is how long a call's job has to settle its payment
	// before its settlement job, recorded with the result, takes it up (at
	// once when the job's attempt failed). Keep it above the slowest
	// healthy settlement: past it a transfer may be sent twice (the second
	// reverts, and costs gas). Solana settlements at
	// SOLANA_COMMITMENT=finalized have finalization's 32 slots (12.8 s) on
	// top of it.
	SettleGrace time.Duration `env:"SETTLE_GRACE"`
	// ChannelClaimInterval is how long the oldest unclaimed voucher charge
	// of a network's batch-settlement channels waits before every channel
	// of that network with charges unclaimed is claimed (claimWithSignature,
	// many channels a transaction), and the claimed funds settled to the
	// receiver. A channel whose payer starts a timed withdrawal is claimed
	// at once whatever this says. Defaults to 1h: a claim costs 25,000 to
	// 35,000 gas a channel, so a channel making 35 calls an hour or more
	// pays at most 1,000 gas of claims a call, and the earned funds stay
	// in escrow an hour at most.
	ChannelClaimInterval time.Duration `env:"CHANNEL_CLAIM_INTERVAL"`
	// ChannelClaimMinAmount is the unclaimed total of a network's channels,
	// in the token's atomic units, at which they are claimed before
	// CHANNEL_CLAIM_INTERVAL. Defaults to 10000000 (10 USDC): a thousand
	// calls at 0.01 USDC, so busy channels are claimed sooner, each claim
	// still carrying enough charges that its gas is a small share of them.
	ChannelClaimMinAmount *big.Int `env:"CHANNEL_CLAIM_MIN_AMOUNT"`
	// VerifyRPCConcurrency is how many RPC calls may be in flight on an
	// EVM chain (settlement's included) for one of verification's to
	// start; settlement's never wait, verification's wait up to 2 s, then
	// the payment is answered 503 verification_unavailable.
	VerifyRPCConcurrency int `env:"VERIFY_RPC_CONCURRENCY"`
	// RefusedRate is how many payments a second one client address may
	// have checked on chain that end refused (a token bucket of
	// REFUSED_PAYMENTS_BURST); past it the address's payments that cannot
	// be refused without the chain are answered 429 rate_limited with
	// Retry-After, nothing charged. Payments that verify count nothing.
	RefusedRate float64 `env:"REFUSED_PAYMENTS_PER_SECOND"`
	// RefusedBurst is how many such refusals one client address may have
	// at once (at least 1).
	RefusedBurst int `env:"REFUSED_PAYMENTS_BURST"`
	// FreeRate is how many requests a second one client address may make
	// of the free surfaces: /mcp (each message of a request but paid tool
	// calls), /api/xindex/* and the index's pages (a token bucket of
	// FREE_REQUESTS_BURST); past it they are answered 429 rate_limited
	// with Retry-After. Paid calls are not counted.
	FreeRate float64 `env:"FREE_REQUESTS_PER_SECOND"`
	// FreeBurst is how many such requests one client address may make at
	// once (at least 1).
	FreeBurst int `env:"FREE_REQUESTS_BURST"`
	// MCPMaxBatch is the most messages one JSON-RPC batch to /mcp may
	// hold; a larger batch is refused whole (400, JSON-RPC error -32600,
	// batch_too_large), none of it run.
	MCPMaxBatch int `env:"MCP_MAX_BATCH"`
	// UnpaidRate is how many paid calls a second one payer, and one client
	// address, may have end unpaid: their run failed (502
	// operation_failed) or could not end before the payment's validBefore
	// (payment_expired), or, for the payer, their result's settlement was
	// refused; work done and never charged (a token bucket of
	// UNPAID_WORK_BURST, shared by every api through Postgres). Past it
	// their further paid calls are answered 429 unpaid_work_limited with
	// Retry-After before any work, nothing charged.
	UnpaidRate float64 `env:"UNPAID_WORK_PER_SECOND"`
	// UnpaidBurst is how many such calls one payer or client address may
	// have at once (at least 1).
	UnpaidBurst int `env:"UNPAID_WORK_BURST"`
	// TrustedProxies are the reverse proxies (comma-separated addresses or
	// CIDRs) whose X-Forwarded-For names the client's address, and whose
	// X-Forwarded-Proto says a request came over HTTPS (the operator
	// session cookie's Secure flag). Unset: the connection's peer is the
	// client, and the headers are ignored.
	TrustedProxies Peers `env:"TRUSTED_PROXIES"`
	// PayToSolana is the Solana wallet that receives payments. Solana USDC
	// is offered only when PAY_TO_SOLANA, SOLANA_FEE_PAYER_KEY and
	// RPC_URL_SOLANA are all set.
	PayToSolana string `env:"PAY_TO_SOLANA"`
	// SolanaFeePayer is the Solana fee payer's private key (base58, or
	// solana-keygen's JSON byte array), which co-signs and sends payments.
	SolanaFeePayer string `env:"SOLANA_FEE_PAYER_KEY"`
	// RPCURLSolana is the Solana JSON-RPC URL (mainnet). The index's chain
	// reader reads Solana's USDC transfers through it too
	// (INDEX_CHAIN_CRON).
	RPCURLSolana string `env:"RPC_URL_SOLANA"`
	// SolanaCommitment is how far a Solana settlement's transaction must
	// have come before the call is answered: confirmed (voted on by a
	// supermajority, about a block after it lands) or finalized (rooted,
	// about 32 blocks, 13 s, later; it cannot be rolled back). At
	// finalized a Solana call's settlement grace is SETTLE_GRACE plus
	// those 32 slots, so that its settlement job does not start while the
	// first attempt still waits.
	SolanaCommitment svm.Commitment `env:"SOLANA_COMMITMENT"`
	// SolanaSmartWalletPrograms are the smart wallet programs whose
	// payments are accepted on Solana, as the official facilitator's smart
	// wallet verification: a transaction calling only them (and Compute
	// Budget, Memo), whose transfer, made in the program's inner
	// instructions, is exactly the price to PAY_TO_SOLANA's USDC account
	// in simulation, checked again once settled. Comma-separated program
	// addresses; "official" stands for the official facilitator's list
	// (Squads Multisig v4 and Smart Account, Swig, SPL Governance,
	// Metaplex Core, Lighthouse). Unset: only the exact scheme's own
	// layout is accepted.
	SolanaSmartWalletPrograms []string `env:"SOLANA_SMART_WALLET_PROGRAMS"`
	// DevchainRPCAddr is where the devchain serves JSON-RPC (x402d serve's
	// embedded one, or x402d devchain's), and where x402d api and x402d
	// worker reach it in devchain mode.
	DevchainRPCAddr string `env:"DEVCHAIN_RPC_ADDR"`
	// DevchainDataDir is where the devchain keeps its blocks and state on
	// disk, in a directory of its own (x402d-devchain-*) removed when it
	// stops, behind read caches and a 1 MiB write buffer of its state: its
	// memory stays bounded however long it runs (each start is a new chain;
	// the directory grows with every block). Unset: the system's temporary
	// directory ($TMPDIR, else /tmp).
	DevchainDataDir string `env:"DEVCHAIN_DATA_DIR"`
	// DevchainHistoryBlocks is how many of its newest blocks the devchain
	// keeps whole: older ones keep only their headers (their transactions,
	// receipts and logs are no longer served, and eth_getBlockByNumber
	// answers null for them), as on a pruned node, so that its directory
	// grows by headers and state only. A block is cut within about a minute
	// of leaving that window. 0 keeps every block.
	DevchainHistoryBlocks int `env:"DEVCHAIN_HISTORY_BLOCKS"`

	// CallWait is how long a paid request is held for its result before
	// it is answered 202 with a poll URL.
	CallWait time.Duration `env:"CALL_WAIT" section:"Calls and jobs"`
	// JobTimeout is the longest run of one job. A tool call over MCP waits
	// for its result up to this plus a minute.
	JobTimeout time.Duration `env:"JOB_TIMEOUT"`
	// RescueAfter is how long a job may run before it is taken for dead
	// (its worker was killed) and retried. Unset: JOB_TIMEOUT plus 30 s.
	// A job of a worker process gone from the database is taken up sooner
	// (JOB_RECLAIM_AFTER).
	RescueAfter time.Duration `env:"JOB_RESCUE_AFTER"`
	// SettlementWindow is how long a call's settlement is given after its
	// run: a payment whose authorization (validBefore) expires less than
	// JOB_TIMEOUT plus this after its verification is refused (402
	// invalid_exact_evm_payload_authorization_valid_before) before any
	// work, and the quotes' maxTimeoutSeconds, the window the official
	// clients sign, is at least that plus a minute (300 s, the official
	// packages' default, otherwise). Keep it above SETTLE_GRACE. Defaults
	// to 1 minute.
	SettlementWindow time.Duration `env:"SETTLEMENT_WINDOW"`
	// ReclaimAfter is how long a worker process must have been gone from
	// the database (killed, or on a primary that died) before its running
	// jobs are taken up by another, whatever JOB_TIMEOUT: long enough for
	// a live process to reconnect after a failover. A job a live process
	// no longer works whose completion was lost (the database away) is
	// taken up this long after it ended. At least 1s; default 15s.
	ReclaimAfter time.Duration `env:"JOB_RECLAIM_AFTER"`
	// FetchPollInterval is how often a worker looks for jobs when no
	// notification of new ones arrived (River's fetch poll interval).
	FetchPollInterval time.Duration `env:"RIVER_POLL_INTERVAL"`
	// WorkersPure is how many jobs of the pure queue (regex, diff,
	// csv-json) each worker process runs at once; an operation's job holds
	// its place through its settlement.
	WorkersPure int `env:"WORKERS_PURE"`
	// WorkersModel is how many jobs of the model queue (brief, data-clean,
	// code-review) each worker process runs at once.
	WorkersModel int `env:"WORKERS_MODEL"`
	// WorkersBrowser is how many jobs of the browser queue (url-meta) each
	// worker process runs at once.
	WorkersBrowser int `env:"WORKERS_BROWSER"`
	// WorkersSettlement is how many settlement jobs (settlements taken up
	// after a crash or a failed attempt) each worker process runs at once.
	WorkersSettlement int `env:"WORKERS_SETTLEMENT"`
	// WorkersIndex is how many index jobs (crawl, liveness) each worker
	// process runs at once.
	WorkersIndex int `env:"WORKERS_INDEX"`
	// MaxBodyBytes is the largest request body accepted.
	MaxBodyBytes int64 `env:"MAX_BODY_BYTES"`
	// MaxPatternChars bounds regex's pattern.
	MaxPatternChars int `env:"MAX_PATTERN_CHARS"`
	// MaxCodeChars bounds code-review's code.
	MaxCodeChars int `env:"MAX_CODE_CHARS"`
	// MaxRows bounds csv-json's and data-clean's tables.
	MaxRows int `env:"MAX_ROWS"`
	// FetchAllowCIDRs are the private networks (comma-separated CIDRs) the
	// guarded fetcher may reach anyway (tests on loopback). Unset: every
	// non-public address is refused.
	FetchAllowCIDRs CIDRs `env:"FETCH_ALLOW_CIDRS"`
	// GeminiAPIKey is the Gemini API key. Unset: the model operations
	// (brief, data-clean, code-review) are listed but not sold.
	GeminiAPIKey string `env:"GEMINI_API_KEY"`
	// GeminiModel is the Gemini model the model operations call.
	GeminiModel string `env:"GEMINI_MODEL"`
	// GeminiBaseURL points the Gemini SDK at another server (the tests' one
	// speaking Gemini's REST format). Unset: Google's.
	GeminiBaseURL string `env:"GEMINI_BASE_URL"`

	// IndexSources are the listings (comma-separated URLs) the index
	// crawls. Unset: the public listings (the Bazaar) and this service's
	// own discovery list.
	IndexSources []string `env:"INDEX_SOURCES" section:"Index and retention"`
	// IndexCron is when the index reads a few pages of every source (cron;
	// run as written, "@every 10s" included; an "@every" finer than whole
	// seconds is refused).
	IndexCron string `env:"INDEX_CRON"`
	// LivenessCron is when the index probes each host's sample resource
	// (cron, as INDEX_CRON).
	LivenessCron string `env:"LIVENESS_CRON"`
	// IndexOrigins are sellers' origins (comma-separated, https://host[:port])
	// the index reads besides those of the listed resources: their OpenAPI
	// x-payment-info, then /.well-known/x402, then the DNS _x402 TXT record.
	IndexOrigins []string `env:"INDEX_ORIGINS"`
	// IndexPageGap is the polite pause between two pages of a listing, and
	// between two requests to a seller's origin (a listing's Retry-After is
	// honoured on top).
	IndexPageGap time.Duration `env:"INDEX_PAGE_GAP"`
	// IndexChainCron is when the index reads each network with
	// RPC_URL_<CHAIN> (and Solana with RPC_URL_SOLANA) for the USDC
	// transfers into the payTo addresses its listings name, up to the
	// network's finality (FINALITY_<CHAIN>; Solana at finalized), and
	// counts each seller's on-chain figures (cron; also when the leader
	// starts). Reading begins at the first run: nothing earlier is counted.
	IndexChainCron string `env:"INDEX_CHAIN_CRON"`
	// IndexChainMaxRange is the most blocks one eth_getLogs call of the
	// index's chain reader asks for (providers cap the range).
	IndexChainMaxRange int `env:"INDEX_CHAIN_MAX_RANGE"`
	// IndexSolanaRate is the most calls a second the index's chain reader
	// makes to RPC_URL_SOLANA (a JSON-RPC batch counts its calls): within
	// the provider's rate limit. 0: no limit.
	IndexSolanaRate int `env:"INDEX_SOLANA_CALLS_PER_SECOND"`
	// ResultTTL is how long a call's result is kept (a Go duration or
	// days, like 30d); the call's ledger fields stay, and polling it or
	// resending its payment then answers 410 result_expired.
	ResultTTL time.Duration `env:"RESULT_TTL"`
	// RetentionCron is when results older than RESULT_TTL are let go
	// (cron; also when the leader starts).
	RetentionCron string `env:"RETENTION_CRON"`
	// JobRetention is how long River keeps a completed job (the /ops/jobs
	// history) before removing it.
	JobRetention time.Duration `env:"JOB_RETENTION"`
	// EventsPartition is the span of each partition of the event log: day,
	// week or month. Partitions are created two periods ahead (at every
	// start and by the retention job), and x402d archive moves whole old
	// ones to files.
	EventsPartition schema.Period `env:"EVENTS_PARTITION"`
	// IndexProbeRetention is how long the index's liveness probes
	// (host.probed events) stay in the event log: the retention job
	// rewrites each partition whose whole range is older without them
	// (so a probe stays until its partition has ended that long ago). The
	// index's history is kept apart and reads none older than 31 days,
	// the default. 0 keeps them as long as their partition.
	IndexProbeRetention time.Duration `env:"INDEX_PROBE_RETENTION"`
}

// DefaultConfig returns the configuration of an empty environment. The
// defaults that a package also applies to a zero value are that package's.
func DefaultConfig() *Config {
	conc := worker.DefaultConcurrency()
	return &Config{
		DatabaseURL:             "postgres://postgres@127.0.0.1:5432/x402?sslmode=disable",
		DBMaxConns:              20,
		ListenAddr:              "127.0.0.1:8080",
		ShutdownTimeout:         30 * time.Second,
		LogLevel:                "info",
		LogFormat:               LogFormatAuto,
		LedgerForm:              LedgerForm2,
		Settlement:              SettlementDevchain,
		SettlementBatch:         BatchAuto,
		RPCURLs:                 map[string][]string{},
		Finality:                map[string]evm.FinalityPolicy{},
		SettlementBatchGasShare: evm.DefaultBlockGasShare,
		PayerCodeGasCap:         evm.DefaultPayerCodeGasCap,
		PayerCodeRefuseFor:      evm.DefaultPayerCodeRefuseFor,
		RelayerLowBalance:       big.NewInt(1e16), // 0.01 ether
		SolanaLowBalance:        big.NewInt(5e7),  // 0.05 SOL
		SolanaCommitment:        svm.CommitmentConfirmed,
		SettleGrace:             worker.DefaultSettleGrace,
		ChannelClaimInterval:    worker.DefaultClaimInterval,
		ChannelClaimMinAmount:   worker.DefaultClaimMinAmount(),
		VerifyRPCConcurrency:    evm.DefaultVerifyConcurrency,
		RefusedRate:             api.DefaultRefusedRate,
		RefusedBurst:            api.DefaultRefusedBurst,
		FreeRate:                api.DefaultFreeRate,
		FreeBurst:               api.DefaultFreeBurst,
		MCPMaxBatch:             mcp.DefaultMaxBatch,
		UnpaidRate:              api.DefaultUnpaidRate,
		UnpaidBurst:             api.DefaultUnpaidBurst,
		DevchainRPCAddr:         "127.0.0.1:8545",
		CallWait:                api.DefaultCallWait,
		JobTimeout:              worker.DefaultJobTimeout,
		SettlementWindow:        time.Minute,
		ReclaimAfter:            worker.DefaultReclaimAfter,
		ChannelWithdrawDelay:    24 * time.Hour,
		FetchPollInterval:       worker.DefaultFetchPollInterval,
		WorkersPure:             conc[jobs.QueuePure],
		WorkersModel:            conc[jobs.QueueModel],
		WorkersBrowser:          conc[jobs.QueueBrowser],
		WorkersSettlement:       conc[jobs.QueueSettlement],
		WorkersIndex:            conc[jobs.QueueIndex],
		MaxBodyBytes:            jobs.DefaultMaxBodyBytes,
		MaxPatternChars:         jobs.DefaultMaxPatternChars,
		MaxCodeChars:            jobs.DefaultMaxCodeChars,
		MaxRows:                 jobs.DefaultMaxRows,
		GeminiModel:             model.DefaultModel,
		IndexCron:               "*/15 * * * *",
		LivenessCron:            "*/30 * * * *",
		IndexPageGap:            index.DefaultPageGap,
		IndexChainCron:          "* * * * *",
		IndexChainMaxRange:      index.DefaultChainMaxRange,
		IndexSolanaRate:         index.DefaultSolanaCallsPerSecond,
		ResultTTL:               30 * 24 * time.Hour,
		RetentionCron:           "17 * * * *",
		JobRetention:            24 * time.Hour,
		EventsPartition:         schema.PeriodMonth,
		IndexProbeRetention:     store.ProbeHoursKept,
	}
}

// SettlementMode is SETTLEMENT: how payments are verified and settled.
type SettlementMode string

// The settlement modes.
const (
	// SettlementDevchain settles on the embedded development chain.
	SettlementDevchain SettlementMode = "devchain"
	// SettlementRPC settles on real chains through their RPC endpoints.
	SettlementRPC SettlementMode = "rpc"
	// SettlementFacilitator has a remote facilitator verify and settle.
	SettlementFacilitator SettlementMode = "facilitator"
)

// UnmarshalText reads a settlement mode.
func (m *SettlementMode) UnmarshalText(b []byte) error {
	return readOneOf(m, b, SettlementDevchain, SettlementRPC, SettlementFacilitator)
}

// LedgerForm is LEDGER_FORM: the form the ledger is written in (store,
// Ledger forms).
type LedgerForm string

// The ledger forms.
const (
	// LedgerForm1 is the ledger as the releases before migrations 016 and
	// 017 wrote it, which they read.
	LedgerForm1 LedgerForm = "1"
	// LedgerForm2 is the ledger since migrations 016 and 017.
	LedgerForm2 LedgerForm = "2"
)

// UnmarshalText reads a ledger form.
func (f *LedgerForm) UnmarshalText(b []byte) error {
	return readOneOf(f, b, LedgerForm1, LedgerForm2)
}

// ledgerFormAlias is LEDGER_FORM's earlier name, a boolean: true is form 1.
const ledgerFormAlias = "LEDGER_PREVIOUS_FORM"

// readLedgerFormAlias sets c.LedgerForm from LEDGER_PREVIOUS_FORM, when it
// is set: true is form 1, false form 2. Set beside LEDGER_FORM, the two
// must agree.
func (c *Config) readLedgerFormAlias(getenv func(string) string) error {
	s := strings.TrimSpace(getenv(ledgerFormAlias))
	if s == "" {
		return nil
	}
	form1, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%s: %q is not true or false", ledgerFormAlias, s)
	}
	form := LedgerForm2
	if form1 {
		form = LedgerForm1
	}
	if strings.TrimSpace(getenv("LEDGER_FORM")) != "" && c.LedgerForm != form {
		return fmt.Errorf("%s=%s (form %s) contradicts LEDGER_FORM=%s: set LEDGER_FORM only", ledgerFormAlias, s, form, c.LedgerForm)
	}
	c.LedgerForm = form
	return nil
}

// BatchMode is SETTLEMENT_BATCH: whether EVM settlements share
// transactions through Multicall3.
type BatchMode string

// The batch modes.
const (
	// BatchAuto batches on the devchain, not in rpc mode.
	BatchAuto BatchMode = "auto"
	// BatchOn batches on every chain.
	BatchOn BatchMode = "on"
	// BatchOff sends one transaction per settlement.
	BatchOff BatchMode = "off"
)

// UnmarshalText reads a batch mode.
func (m *BatchMode) UnmarshalText(b []byte) error {
	return readOneOf(m, b, BatchAuto, BatchOn, BatchOff)
}

// LogFormat is LOG_FORMAT: how log lines are written.
type LogFormat string

// The log formats.
const (
	// LogFormatAuto is text on a terminal, JSON otherwise.
	LogFormatAuto LogFormat = "auto"
	// LogFormatText is lines a person reads.
	LogFormatText LogFormat = "text"
	// LogFormatJSON is one JSON object a line.
	LogFormatJSON LogFormat = "json"
)

// UnmarshalText reads a log format.
func (f *LogFormat) UnmarshalText(b []byte) error {
	return readOneOf(f, b, LogFormatAuto, LogFormatText, LogFormatJSON)
}

// readOneOf sets *dst to b when b is one of values, and otherwise says
// which values it may be ("a, b or c").
func readOneOf[T ~string](dst *T, b []byte, values ...T) error {
	if v := T(b); slices.Contains(values, v) {
		*dst = v
		return nil
	}
	names := make([]string, len(values))
	for i, v := range values {
		names[i] = string(v)
	}
	last := len(names) - 1
	return fmt.Errorf("%q is not %s or %s", b, strings.Join(names[:last], ", "), names[last])
}

// LogLevel is LOG_LEVEL: the least level logged, as slog names it.
type LogLevel string

// UnmarshalText reads a log level as slog does: debug, info, warn or
// error, in any case, optionally with an offset (warn+2).
func (l *LogLevel) UnmarshalText(b []byte) error {
	var level slog.Level
	if err := level.UnmarshalText(b); err != nil {
		return fmt.Errorf("%q is not debug, info, warn or error", b)
	}
	*l = LogLevel(b)
	return nil
}

// Level returns the slog level (info when l is empty).
func (l LogLevel) Level() slog.Level {
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(l))
	return level
}

// CIDRs are networks read from a comma-separated list of CIDRs.
type CIDRs []netip.Prefix

// UnmarshalText reads a comma-separated list of CIDRs.
func (c *CIDRs) UnmarshalText(b []byte) error {
	p, err := parsePrefixes(string(b), false)
	*c = p
	return err
}

// Peers are networks read from a comma-separated list of addresses or
// CIDRs (an address is a network of its own).
type Peers []netip.Prefix

// UnmarshalText reads a comma-separated list of addresses or CIDRs.
func (p *Peers) UnmarshalText(b []byte) error {
	list, err := parsePrefixes(string(b), true)
	*p = list
	return err
}

// loadConfig reads the configuration through getenv: DefaultConfig, each
// variable set in the environment parsed into its field, then validate.
// It reports every problem at once.
func loadConfig(getenv func(string) string) (*Config, error) {
	c := DefaultConfig()
	var errs []error
	v := reflect.ValueOf(c).Elem()
	for _, f := range reflect.VisibleFields(v.Type()) {
		name := f.Tag.Get("env")
		if name == "" {
			continue
		}
		if prefix, ok := strings.CutSuffix(name, "<CHAIN>"); ok {
			for _, n := range x402.Networks() {
				if !strings.HasPrefix(n.ID, "eip155:") {
					continue
				}
				key := chainKey(prefix, n.ID)
				if s := strings.TrimSpace(getenv(key)); s != "" {
					if err := setChainValue(v.FieldByIndex(f.Index), n.ID, s); err != nil {
						errs = append(errs, fmt.Errorf("%s: %w", key, err))
					}
				}
			}
			continue
		}
		s := strings.TrimSpace(getenv(name))
		if s == "" {
			continue
		}
		if err := setValue(v.FieldByIndex(f.Index), f.Tag, s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if err := c.readLedgerFormAlias(getenv); err != nil {
		errs = append(errs, err)
	}
	c.PublicURL = strings.TrimRight(cmp.Or(c.PublicURL, "http://"+c.ListenAddr), "/")
	c.DevchainDataDir = cmp.Or(c.DevchainDataDir, os.TempDir())
	if err := c.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	return c, nil
}

// setValue parses s into the field fv, whose struct tag is tag.
func setValue(fv reflect.Value, tag reflect.StructTag, s string) error {
	switch p := fv.Addr().Interface().(type) {
	case encoding.TextUnmarshaler:
		return p.UnmarshalText([]byte(s))
	case *string:
		*p = s
	case *bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		*p = b
	case *int:
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a whole number", s)
		}
		*p = n
	case *int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a whole number", s)
		}
		*p = n
	case *float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("%q is not a number", s)
		}
		*p = f
	case *time.Duration:
		d, err := parseDuration(s)
		if err != nil || d < 0 {
			return fmt.Errorf("%q is not a duration like 25s or 30d", s)
		}
		*p = d
	case **big.Int:
		exp, _ := strconv.Atoi(tag.Get("decimals"))
		n, err := parseDecimal(s, exp)
		if err != nil {
			return fmt.Errorf("%q is not a positive decimal number", s)
		}
		*p = n
	case *[]string:
		*p = splitList(s)
	case *[]common.Address:
		*p = nil
		for _, part := range splitList(s) {
			if !common.IsHexAddress(part) {
				return fmt.Errorf("%q is not an address", part)
			}
			*p = append(*p, common.HexToAddress(part))
		}
	case *schema.Period:
		period, err := schema.ParsePeriod(s)
		if err != nil {
			return err
		}
		*p = period
	default:
		return fmt.Errorf("no parser for %s", fv.Type())
	}
	return nil
}

// setChainValue parses s, the value of one network's variable, into the
// map fv under network.
func setChainValue(fv reflect.Value, network, s string) error {
	var val any
	switch fv.Interface().(type) {
	case map[string][]string:
		urls, err := parseRPCURLs(s)
		if err != nil {
			// The message names no URL: it may carry an API key.
			return err
		}
		val = urls
	case map[string]evm.FinalityPolicy:
		p, err := evm.ParseFinality(s)
		if err != nil {
			return err
		}
		val = p
	default:
		return fmt.Errorf("no parser for %s", fv.Type())
	}
	fv.SetMapIndex(reflect.ValueOf(network), reflect.ValueOf(val))
	return nil
}

// loopbackAddr returns nil when addr (host:port) is a loopback address or
// localhost, else why not.
func loopbackAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Unmap().IsLoopback() {
		return fmt.Errorf("%q is not a loopback address", addr)
	}
	return nil
}

// validate checks what each value cannot show alone: ranges, keys, URLs,
// schedules, and the settings each settlement mode needs. It reports every
// problem it finds. Its messages never quote a key or an RPC URL.
func (c *Config) validate() error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, err := index.ParseOrigins(strings.Join(c.IndexOrigins, ",")); err != nil {
		fail("%w", err)
	}
	if c.RefusedRate <= 0 {
		fail("REFUSED_PAYMENTS_PER_SECOND: %q is not a positive number", strconv.FormatFloat(c.RefusedRate, 'g', -1, 64))
	}
	if c.RefusedBurst < 1 {
		fail("REFUSED_PAYMENTS_BURST: must be at least 1")
	}
	if c.UnpaidRate <= 0 {
		fail("UNPAID_WORK_PER_SECOND: %q is not a positive number", strconv.FormatFloat(c.UnpaidRate, 'g', -1, 64))
	}
	if c.UnpaidBurst < 1 {
		fail("UNPAID_WORK_BURST: must be at least 1")
	}
	if c.FreeRate <= 0 {
		fail("FREE_REQUESTS_PER_SECOND: %q is not a positive number", strconv.FormatFloat(c.FreeRate, 'g', -1, 64))
	}
	if c.FreeBurst < 1 {
		fail("FREE_REQUESTS_BURST: must be at least 1")
	}
	if c.MCPMaxBatch < 1 {
		fail("MCP_MAX_BATCH: must be at least 1")
	}
	if c.OpsToken != "" && len(c.OpsToken) < ops.MinTokenBytes {
		fail("OPS_TOKEN: has %d bytes, fewer than %d: use a long random string (openssl rand -hex 32)", len(c.OpsToken), ops.MinTokenBytes)
	}
	if c.PprofAddr != "" {
		if err := loopbackAddr(c.PprofAddr); err != nil {
			fail("PPROF_ADDR: %v: the profiles show the process's memory, so they are served on loopback only (e.g. 127.0.0.1:6060)", err)
		}
	}
	if c.VerifyRPCConcurrency < 1 {
		fail("VERIFY_RPC_CONCURRENCY: must be at least 1")
	}
	if c.PayerCodeGasCap < 100_000 {
		fail("PAYER_CODE_GAS_CAP: must be at least 100000")
	}
	if c.PayerCodeRefuseFor <= 0 {
		fail("PAYER_CODE_REFUSE_FOR: must be positive")
	}
	if c.ChannelClaimInterval <= 0 {
		fail("CHANNEL_CLAIM_INTERVAL: must be positive")
	}
	if c.ReclaimAfter < time.Second {
		fail("JOB_RECLAIM_AFTER: %s is shorter than a second", c.ReclaimAfter)
	}
	if c.SettlementBatchGasShare <= 0 || c.SettlementBatchGasShare > 1 {
		fail("SETTLEMENT_BATCH_GAS_SHARE: %q is not a share between 0 and 1", strconv.FormatFloat(c.SettlementBatchGasShare, 'g', -1, 64))
	}
	if mode, ok := modeOf(c.Settlement); ok {
		mode.check(c, fail)
	}
	if c.RelayerKey != "" {
		if _, err := evm.ParseKey(c.RelayerKey); err != nil {
			fail("RELAYER_KEY: not a hex private key")
		}
	}
	if c.ReceiverAuthorizerKey != "" {
		authorizer, err := evm.ParseKey(c.ReceiverAuthorizerKey)
		if err != nil {
			fail("RECEIVER_AUTHORIZER_KEY: not a hex private key")
		} else if relayer, err := evm.ParseKey(c.RelayerKey); err == nil && relayer.D.Cmp(authorizer.D) == 0 {
			fail("RECEIVER_AUTHORIZER_KEY: is RELAYER_KEY; use a key of its own (it signs claims and refunds, the relayer pays gas)")
		}
	}
	if d := c.ChannelWithdrawDelay; d%time.Second != 0 || d < channel.MinWithdrawDelay*time.Second || d > channel.MaxWithdrawDelay*time.Second {
		fail("CHANNEL_WITHDRAW_DELAY: %s is not a whole number of seconds from %s to %s", d, channel.MinWithdrawDelay*time.Second, channel.MaxWithdrawDelay*time.Second)
	}
	if _, err := svm.ParseSmartWalletPrograms(c.SolanaSmartWalletPrograms); err != nil {
		fail("SOLANA_SMART_WALLET_PROGRAMS: %w", err)
	}
	if c.SolanaFeePayer != "" {
		if _, err := svm.ParsePrivateKey(c.SolanaFeePayer); err != nil {
			fail("SOLANA_FEE_PAYER_KEY: not a Solana private key (base58, or a JSON byte array)")
		}
	}
	if c.PayToEVM != "" && !common.IsHexAddress(c.PayToEVM) {
		fail("PAY_TO_EVM: %q is not an address", c.PayToEVM)
	}
	for _, u := range []struct {
		name, value string
		secret      bool
	}{
		{"PUBLIC_URL", c.PublicURL, false},
		{"FACILITATOR_URL", c.FacilitatorURL, false},
		{"GEMINI_BASE_URL", c.GeminiBaseURL, false},
		{"RPC_URL_SOLANA", c.RPCURLSolana, true},
	} {
		if u.value == "" {
			continue
		}
		if err := checkHTTPURL(u.value); err != nil {
			if u.secret {
				fail("%s: not an http or https URL with a host", u.name)
			} else {
				fail("%s: %w", u.name, err)
			}
		}
	}
	for _, src := range c.IndexSources {
		if err := checkHTTPURL(src); err != nil {
			fail("INDEX_SOURCES: %w", err)
		}
	}
	for _, s := range []struct{ name, spec string }{
		{"INDEX_CRON", c.IndexCron}, {"LIVENESS_CRON", c.LivenessCron}, {"RETENTION_CRON", c.RetentionCron},
		{"INDEX_CHAIN_CRON", c.IndexChainCron},
	} {
		if _, err := cron.ParseStandard(s.spec); err != nil {
			fail("%s: %q is not a cron schedule like */15 * * * *", s.name, s.spec)
		} else if s.name != "RETENTION_CRON" {
			if err := index.CheckSchedule(s.name, s.spec); err != nil {
				fail("%w", err)
			}
		}
	}
	if c.IndexChainMaxRange < 1 {
		fail("INDEX_CHAIN_MAX_RANGE: %d is not a number of blocks (1 or more)", c.IndexChainMaxRange)
	}
	return errors.Join(errs...)
}

// paymentValidFor is how long a payment's authorization must stay valid
// after its verification: the operations' time budget (JOB_TIMEOUT) and the
// settlement window.
func (c *Config) paymentValidFor() time.Duration { return c.JobTimeout + c.SettlementWindow }

// quoteMargin is what the quotes' payment window leaves beyond
// paymentValidFor: the time between a client's signing and verification,
// and clocks that differ.
const quoteMargin = time.Minute

// maxTimeoutSeconds is the payment window the quotes offer
// (maxTimeoutSeconds), which the official clients sign validBefore with:
// x402's default, or paymentValidFor and quoteMargin when that is longer.
func (c *Config) maxTimeoutSeconds() int {
	need := c.paymentValidFor() + quoteMargin
	return max(x402.DefaultMaxTimeoutSeconds, int((need+time.Second-1)/time.Second))
}

// concurrency returns WORKERS_<QUEUE> by queue.
func (c *Config) concurrency() map[string]int {
	return map[string]int{
		jobs.QueuePure:       c.WorkersPure,
		jobs.QueueModel:      c.WorkersModel,
		jobs.QueueBrowser:    c.WorkersBrowser,
		jobs.QueueSettlement: c.WorkersSettlement,
		jobs.QueueIndex:      c.WorkersIndex,
	}
}

// batch reports whether EVM settlements share transactions through
// Multicall3 (SETTLEMENT_BATCH; auto as the mode does by default: on the
// devchain only).
func (c *Config) batch() bool {
	switch c.SettlementBatch {
	case BatchOn:
		return true
	case BatchOff:
		return false
	}
	mode, _ := modeOf(c.Settlement)
	return mode.batchByDefault
}

// checkHTTPURL checks that s is an http or https URL with a host.
func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http or https URL with a host", s)
	}
	return nil
}

// splitList splits a comma-separated list, dropping empty parts.
func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// parsePrefixes reads a comma-separated list of CIDRs; with addresses, a
// bare address is its own network.
func parsePrefixes(s string, addresses bool) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range splitList(s) {
		p, err := netip.ParsePrefix(part)
		if err != nil && addresses {
			if addr, aerr := netip.ParseAddr(part); aerr == nil {
				p, err = netip.PrefixFrom(addr, addr.BitLen()), nil
			}
		}
		if err != nil {
			if addresses {
				return nil, fmt.Errorf("%q is not an address or a CIDR like 10.0.0.0/8", part)
			}
			return nil, fmt.Errorf("%q is not a CIDR like 127.0.0.0/8", part)
		}
		out = append(out, p)
	}
	return out, nil
}

// parseRPCURLs parses RPC_URL_<CHAIN>: one URL or several separated by
// commas, each http, https, ws or wss with a host, none twice. Its errors
// never quote a URL.
func parseRPCURLs(v string) ([]string, error) {
	var urls []string
	seen := map[string]bool{}
	for i, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if _, err := evm.RedactURL(part); err != nil {
			return nil, fmt.Errorf("URL %d: %w", i+1, err)
		}
		if seen[part] {
			return nil, fmt.Errorf("URL %d is listed twice", i+1)
		}
		seen[part] = true
		urls = append(urls, part)
	}
	if len(urls) == 0 {
		return nil, errors.New("no URL")
	}
	return urls, nil
}

// chainKey returns the variable prefix<CHAIN> of a CAIP-2 network, e.g.
// RPC_URL_ and eip155:8453 → RPC_URL_EIP155_8453.
func chainKey(prefix, network string) string {
	return prefix + strings.ToUpper(strings.NewReplacer(":", "_", "-", "_").Replace(network))
}

// parseDecimal reads a positive decimal number (like 1.5) as an integer of
// 10^-exp units (1.5 with exp 9 is 1,500,000,000).
func parseDecimal(s string, exp int) (*big.Int, error) {
	r, ok := new(big.Rat).SetString(s)
	if !ok || r.Sign() <= 0 || strings.ContainsAny(s, "eE/") {
		return nil, fmt.Errorf("%q is not a positive decimal", s)
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(exp)), nil)))
	return new(big.Int).Quo(r.Num(), r.Denom()), nil
}

// parseDuration reads a Go duration ("25s", "720h") or a number of days
// ("30d").
func parseDuration(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, err
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}
