package main

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/schema"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
)

// Config is the service's configuration, read from the environment (see
// contract.md). Every field has a working default.
type Config struct {
	DatabaseURL string
	ListenAddr  string
	PublicURL   string
	Settlement  string
	// SettlementBatch is SETTLEMENT_BATCH: whether EVM settlements share
	// transactions through Multicall3 (on, off, or auto: on for the
	// devchain, off for rpc).
	SettlementBatch string
	PayToEVM        string
	PayToSolana     string
	SolanaFeePayer  string
	RPCURLSolana    string
	// RPCURLs is RPC_URL_<CHAIN> of each EVM network that has one (e.g.
	// RPC_URL_EIP155_8453 for eip155:8453): one JSON-RPC URL, or several
	// separated by commas (providers, or keys of one), which settle and
	// verify together (evm.Endpoints): reads go to one not behind the
	// others, sends to all, and one limited, lagging or down is passed
	// over. Logs and metrics name each by scheme://host[:port] only.
	RPCURLs map[string][]string
	// Finality is FINALITY_<CHAIN> per EVM network: when a settlement
	// there counts as final ("safe", "finalized", "depth:N", "receipt").
	// A network absent takes its default (evm.DefaultFinality; the
	// devchain's settlements are final at their receipt).
	Finality        map[string]evm.FinalityPolicy
	RelayerKey      string
	FacilitatorURL  string
	DevchainRPCAddr string
	// DevchainDataDir is DEVCHAIN_DATA_DIR: where the devchain keeps its
	// blocks and state, in a directory of its own removed when it stops.
	DevchainDataDir string
	GeminiAPIKey    string
	GeminiModel     string
	GeminiBaseURL   string
	OpsToken        string
	IndexSources    []string
	IndexCron       string
	LivenessCron    string
	// IndexOrigins is INDEX_ORIGINS: sellers' origins the index reads
	// besides those of the listed resources.
	IndexOrigins []string
	// IndexPageGap is INDEX_PAGE_GAP: the polite pause between two pages of
	// a source, or two requests to an origin (0: the index's default).
	IndexPageGap time.Duration
	// ResultTTL is RESULT_TTL: how long a call's result is kept.
	ResultTTL time.Duration
	// RetentionCron is RETENTION_CRON: when results older than ResultTTL
	// are let go.
	RetentionCron string
	// JobRetention is JOB_RETENTION: how long River keeps completed jobs.
	JobRetention time.Duration
	// EventsPartition is EVENTS_PARTITION: the period each partition of
	// the event log spans.
	EventsPartition schema.Period
	CallWait        time.Duration
	FetchAllowCIDRs []netip.Prefix
	Concurrency     map[string]int
	JobTimeout      time.Duration
	MaxBodyBytes    int64
	MaxCodeChars    int
	MaxPatternChars int
	MaxRows         int
	ShutdownTimeout time.Duration
	LogLevel        string
	// LogFormat is LOG_FORMAT: text, json, or auto (text on a terminal).
	LogFormat   string
	DBMaxConns  int
	MetricsAddr string
	// PprofAddr is PPROF_ADDR: where the process serves Go's profiles
	// (empty: nowhere).
	PprofAddr         string
	FetchPollInterval time.Duration
	RescueAfter       time.Duration
	SettleGrace       time.Duration
	// SettlementMaxFee is SETTLEMENT_MAX_FEE_GWEI in wei: the highest fee
	// per gas the relayer offers (nil: no cap).
	SettlementMaxFee *big.Int
	// SettlementBatchGasShare is SETTLEMENT_BATCH_GAS_SHARE: the largest
	// share of a block's gas limit one batch asks for.
	SettlementBatchGasShare float64
	// RelayerLowBalance is RELAYER_LOW_BALANCE_ETH in wei: under it the
	// workers warn.
	RelayerLowBalance *big.Int
	// Factories6492 is EIP6492_FACTORIES: the only wallet factories whose
	// undeployed wallets may pay (nil: any whose deployment simulates).
	Factories6492 []common.Address
	// RefusedRate is REFUSED_PAYMENTS_PER_SECOND: how many payments a
	// second one client address may have checked on chain that end
	// refused (past it and REFUSED_PAYMENTS_BURST: 429).
	RefusedRate float64
	// RefusedBurst is REFUSED_PAYMENTS_BURST: how many such refusals one
	// client address may have at once.
	RefusedBurst int
	// TrustedProxies is TRUSTED_PROXIES: the reverse proxies whose
	// X-Forwarded-For names the client's address (none: the connection's
	// peer is the client).
	TrustedProxies []netip.Prefix
	// VerifyRPCConcurrency is VERIFY_RPC_CONCURRENCY: how many RPC calls
	// may be in flight on a chain, settlement's included, for one of
	// verification's to start.
	VerifyRPCConcurrency int
}

// loadConfig reads the configuration through getenv.
func loadConfig(getenv func(string) string) (*Config, error) {
	env := func(key, def string) string {
		if v := strings.TrimSpace(getenv(key)); v != "" {
			return v
		}
		return def
	}
	var errs []string
	duration := func(key string, def time.Duration) time.Duration {
		v := getenv(key)
		if v == "" {
			return def
		}
		d, err := parseDuration(v)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Sprintf("%s: %q is not a duration like 25s or 30d", key, v))
			return def
		}
		return d
	}
	integer := func(key string, def int) int {
		v := getenv(key)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Sprintf("%s: %q is not a whole number", key, v))
			return def
		}
		return n
	}

	c := &Config{
		DatabaseURL:       env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/x402?sslmode=disable"),
		ListenAddr:        env("LISTEN_ADDR", "127.0.0.1:8080"),
		Settlement:        env("SETTLEMENT", "devchain"),
		SettlementBatch:   env("SETTLEMENT_BATCH", "auto"),
		PayToEVM:          env("PAY_TO_EVM", ""),
		PayToSolana:       env("PAY_TO_SOLANA", ""),
		SolanaFeePayer:    env("SOLANA_FEE_PAYER_KEY", ""),
		RPCURLSolana:      env("RPC_URL_SOLANA", ""),
		RPCURLs:           map[string][]string{},
		Finality:          map[string]evm.FinalityPolicy{},
		RelayerKey:        env("RELAYER_KEY", ""),
		FacilitatorURL:    env("FACILITATOR_URL", ""),
		DevchainRPCAddr:   env("DEVCHAIN_RPC_ADDR", "127.0.0.1:8545"),
		DevchainDataDir:   env("DEVCHAIN_DATA_DIR", os.TempDir()),
		GeminiAPIKey:      env("GEMINI_API_KEY", ""),
		GeminiModel:       env("GEMINI_MODEL", "gemini-2.5-flash"),
		GeminiBaseURL:     env("GEMINI_BASE_URL", ""),
		OpsToken:          env("OPS_TOKEN", ""),
		IndexCron:         env("INDEX_CRON", "*/15 * * * *"),
		LivenessCron:      env("LIVENESS_CRON", "*/30 * * * *"),
		ResultTTL:         duration("RESULT_TTL", 30*24*time.Hour),
		RetentionCron:     env("RETENTION_CRON", "17 * * * *"),
		JobRetention:      duration("JOB_RETENTION", 24*time.Hour),
		CallWait:          duration("CALL_WAIT", 25*time.Second),
		IndexPageGap:      duration("INDEX_PAGE_GAP", 0),
		JobTimeout:        duration("JOB_TIMEOUT", 2*time.Minute),
		ShutdownTimeout:   duration("SHUTDOWN_TIMEOUT", 30*time.Second),
		FetchPollInterval: duration("RIVER_POLL_INTERVAL", 0),
		RescueAfter:       duration("JOB_RESCUE_AFTER", 0),
		SettleGrace:       duration("SETTLE_GRACE", 15*time.Second),
		MaxBodyBytes:      int64(integer("MAX_BODY_BYTES", 1<<20)),
		MaxCodeChars:      integer("MAX_CODE_CHARS", 200_000),
		MaxPatternChars:   integer("MAX_PATTERN_CHARS", 4096),
		MaxRows:           integer("MAX_ROWS", 50_000),
		LogLevel:          env("LOG_LEVEL", "info"),
		LogFormat:         env("LOG_FORMAT", "auto"),
		DBMaxConns:        integer("DB_MAX_CONNS", 20),
		MetricsAddr:       env("METRICS_ADDR", ""),
		PprofAddr:         env("PPROF_ADDR", ""),
		Concurrency: map[string]int{
			"pure":       integer("WORKERS_PURE", 0),
			"model":      integer("WORKERS_MODEL", 0),
			"browser":    integer("WORKERS_BROWSER", 0),
			"settlement": integer("WORKERS_SETTLEMENT", 0),
			"index":      integer("WORKERS_INDEX", 0),
		},
	}
	c.RefusedBurst = integer("REFUSED_PAYMENTS_BURST", 10)
	c.VerifyRPCConcurrency = integer("VERIFY_RPC_CONCURRENCY", 64)
	c.PublicURL = strings.TrimRight(env("PUBLIC_URL", "http://"+c.ListenAddr), "/")
	if period, err := schema.ParsePeriod(env("EVENTS_PARTITION", "month")); err != nil {
		errs = append(errs, "EVENTS_PARTITION: "+err.Error())
	} else {
		c.EventsPartition = period
	}
	if s := getenv("INDEX_SOURCES"); s != "" {
		for _, src := range strings.Split(s, ",") {
			if src = strings.TrimSpace(src); src != "" {
				c.IndexSources = append(c.IndexSources, src)
			}
		}
	}
	if origins, err := index.ParseOrigins(getenv("INDEX_ORIGINS")); err != nil {
		errs = append(errs, err.Error())
	} else {
		c.IndexOrigins = origins
	}
	c.RefusedRate = 1
	if v := strings.TrimSpace(getenv("REFUSED_PAYMENTS_PER_SECOND")); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || math.IsInf(f, 0) {
			errs = append(errs, fmt.Sprintf("REFUSED_PAYMENTS_PER_SECOND: %q is not a positive number", v))
		} else {
			c.RefusedRate = f
		}
	}
	if c.RefusedBurst < 1 {
		errs = append(errs, "REFUSED_PAYMENTS_BURST: must be at least 1")
	}
	if c.VerifyRPCConcurrency < 1 {
		errs = append(errs, "VERIFY_RPC_CONCURRENCY: must be at least 1")
	}
	// prefixes reads a comma-separated list of networks (CIDRs; with
	// addresses, a bare address is its own network).
	prefixes := func(key, example string, addresses bool) []netip.Prefix {
		var out []netip.Prefix
		for _, part := range strings.Split(getenv(key), ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			p, err := netip.ParsePrefix(part)
			if err != nil && addresses {
				if addr, aerr := netip.ParseAddr(part); aerr == nil {
					p, err = netip.PrefixFrom(addr, addr.BitLen()), nil
				}
			}
			if err != nil {
				what := "a CIDR"
				if addresses {
					what = "an address or a CIDR"
				}
				errs = append(errs, fmt.Sprintf("%s: %q is not %s like %s", key, part, what, example))
				continue
			}
			out = append(out, p)
		}
		return out
	}
	c.TrustedProxies = prefixes("TRUSTED_PROXIES", "10.0.0.0/8", true)
	c.FetchAllowCIDRs = prefixes("FETCH_ALLOW_CIDRS", "127.0.0.0/8", false)
	for _, n := range x402.Networks() {
		if !strings.HasPrefix(n.ID, "eip155:") {
			continue
		}
		if v := strings.TrimSpace(getenv(chainKey("RPC_URL_", n.ID))); v != "" {
			urls, err := parseRPCURLs(v)
			if err != nil {
				// The message names no URL: it may carry an API key.
				errs = append(errs, fmt.Sprintf("%s: %v", chainKey("RPC_URL_", n.ID), err))
			} else {
				c.RPCURLs[n.ID] = urls
			}
		}
		if v := strings.TrimSpace(getenv(chainKey("FINALITY_", n.ID))); v != "" {
			p, err := evm.ParseFinality(v)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", chainKey("FINALITY_", n.ID), err))
				continue
			}
			c.Finality[n.ID] = p
		}
	}
	if c.Settlement == "rpc" && len(c.RPCURLs) == 0 {
		errs = append(errs, "SETTLEMENT=rpc needs at least one RPC_URL_<CHAIN>, e.g. RPC_URL_EIP155_8453")
	}
	switch c.Settlement {
	case "devchain", "rpc", "facilitator":
	default:
		errs = append(errs, fmt.Sprintf("SETTLEMENT: %q is not devchain, rpc or facilitator", c.Settlement))
	}
	switch c.LogFormat {
	case "auto", "text", "json":
	default:
		errs = append(errs, fmt.Sprintf("LOG_FORMAT: %q is not auto, text or json", c.LogFormat))
	}
	switch c.SettlementBatch {
	case "auto", "on", "off":
	default:
		errs = append(errs, fmt.Sprintf("SETTLEMENT_BATCH: %q is not auto, on or off", c.SettlementBatch))
	}
	decimalWei := func(key, def string, exp int) *big.Int {
		v := strings.TrimSpace(getenv(key))
		if v == "" {
			v = def
		}
		if v == "" {
			return nil
		}
		wei, err := parseDecimal(v, exp)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %q is not a positive decimal number", key, v))
			return nil
		}
		return wei
	}
	c.SettlementMaxFee = decimalWei("SETTLEMENT_MAX_FEE_GWEI", "", 9)
	c.RelayerLowBalance = decimalWei("RELAYER_LOW_BALANCE_ETH", "0.01", 18)
	if v := strings.TrimSpace(getenv("EIP6492_FACTORIES")); v != "" {
		for _, part := range strings.Split(v, ",") {
			part = strings.TrimSpace(part)
			if !common.IsHexAddress(part) {
				errs = append(errs, fmt.Sprintf("EIP6492_FACTORIES: %q is not an address", part))
				continue
			}
			c.Factories6492 = append(c.Factories6492, common.HexToAddress(part))
		}
	}
	c.SettlementBatchGasShare = 0.1
	if v := strings.TrimSpace(getenv("SETTLEMENT_BATCH_GAS_SHARE")); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1 {
			errs = append(errs, fmt.Sprintf("SETTLEMENT_BATCH_GAS_SHARE: %q is not a share between 0 and 1", v))
		} else {
			c.SettlementBatchGasShare = f
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("configuration: %s", strings.Join(errs, "; "))
	}
	return c, nil
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
