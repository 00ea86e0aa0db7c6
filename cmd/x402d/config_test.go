package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
)

// testRelayerKey is a valid relayer key (anvil's first development key).
const testRelayerKey = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"

// testAuthorizerKey is a valid receiver authorizer key, not testRelayerKey.
const testAuthorizerKey = "59c6995e998f97a0a700dda8c73e4f1b9e58b6a3fcbd2a4b8f5e0e2f1b3c3d4e"

// loadEnv runs loadConfig on env. With wantErr it requires an error that
// contains wantErr and quotes nothing marked SECRET, and returns nil;
// otherwise it requires no error and returns the configuration.
func loadEnv(t *testing.T, env map[string]string, wantErr string) *Config {
	t.Helper()
	cfg, err := loadConfig(func(k string) string { return env[k] })
	if wantErr != "" {
		require.ErrorContains(t, err, wantErr)
		require.NotContains(t, err.Error(), "SECRET")
		return nil
	}
	require.NoError(t, err)
	return cfg
}

// TestLoadConfigValues checks settings read from the environment: the
// configuration each case gives is the defaults (as an empty environment
// resolves them) changed as its want says, else its error names the
// variable. Covered: settlement (SETTLEMENT, SETTLEMENT_BATCH,
// SETTLE_GRACE), retention (RESULT_TTL, a Go duration or days, and
// JOB_RETENTION), refused payments (REFUSED_PAYMENTS_*, TRUSTED_PROXIES,
// VERIFY_RPC_CONCURRENCY), the index (INDEX_ORIGINS, INDEX_PAGE_GAP) and
// the ledger's form (LEDGER_FORM, and its earlier name
// LEDGER_PREVIOUS_FORM).
func TestLoadConfigValues(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		env     map[string]string
		want    func(*Config)
		wantErr string
	}{
		{name: "Defaults", env: map[string]string{}, want: func(c *Config) {
			c.SettlementBatch, c.SettleGrace = "auto", 15*time.Second
			c.ResultTTL, c.JobRetention = 30*24*time.Hour, 24*time.Hour
			c.RefusedRate, c.RefusedBurst, c.VerifyRPCConcurrency, c.TrustedProxies = 1, 10, 64, nil
			c.IndexPageGap, c.IndexProbeRetention = index.DefaultPageGap, store.ProbeHoursKept
		}},

		{name: "Grace", env: map[string]string{"SETTLE_GRACE": "1m"}, want: func(c *Config) { c.SettleGrace = time.Minute }},
		{name: "GraceUnknown", env: map[string]string{"SETTLE_GRACE": "soon"}, wantErr: `SETTLE_GRACE: "soon" is not a duration`},
		{name: "BatchOn", env: map[string]string{"SETTLEMENT": "rpc", "RPC_URL_EIP155_8453": "http://127.0.0.1:8545", "RELAYER_KEY": testRelayerKey, "SETTLEMENT_BATCH": "on"}, want: func(c *Config) {
			c.Settlement, c.RelayerKey, c.SettlementBatch = "rpc", testRelayerKey, "on"
			c.RPCURLs = map[string][]string{"eip155:8453": {"http://127.0.0.1:8545"}}
		}},
		{name: "BatchOff", env: map[string]string{"SETTLEMENT_BATCH": "off"}, want: func(c *Config) { c.SettlementBatch = "off" }},
		{name: "BatchUnknown", env: map[string]string{"SETTLEMENT_BATCH": "yes"}, wantErr: `SETTLEMENT_BATCH: "yes" is not auto, on or off`},
		{name: "SettlementUnknown", env: map[string]string{"SETTLEMENT": "chain"}, wantErr: `SETTLEMENT: "chain" is not devchain, rpc or facilitator`},
		{name: "RPCWithoutURL", env: map[string]string{"SETTLEMENT": "rpc"}, wantErr: "SETTLEMENT=rpc needs at least one RPC_URL_<CHAIN>"},

		{name: "ResultTTLDays", env: map[string]string{"RESULT_TTL": "7d", "JOB_RETENTION": "2d"}, want: func(c *Config) { c.ResultTTL, c.JobRetention = 7*24*time.Hour, 48*time.Hour }},
		{name: "ResultTTLHours", env: map[string]string{"RESULT_TTL": "36h"}, want: func(c *Config) { c.ResultTTL = 36 * time.Hour }},
		{name: "ResultTTLNotADuration", env: map[string]string{"RESULT_TTL": "a month"}, wantErr: `RESULT_TTL: "a month" is not a duration like 25s or 30d`},
		{name: "ResultTTLNotDays", env: map[string]string{"RESULT_TTL": "1.5d"}, wantErr: `RESULT_TTL: "1.5d" is not a duration`},

		{name: "RefusedSet", env: map[string]string{"REFUSED_PAYMENTS_PER_SECOND": "0.5", "REFUSED_PAYMENTS_BURST": "3",
			"TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.7,2001:db8::/32", "VERIFY_RPC_CONCURRENCY": "4"}, want: func(c *Config) {
			c.RefusedRate, c.RefusedBurst, c.VerifyRPCConcurrency = 0.5, 3, 4
			c.TrustedProxies = Peers{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("2001:db8::/32")}
		}},
		{name: "RefusedRateNotPositive", env: map[string]string{"REFUSED_PAYMENTS_PER_SECOND": "0"}, wantErr: `REFUSED_PAYMENTS_PER_SECOND: "0" is not a positive number`},
		{name: "RefusedBurstZero", env: map[string]string{"REFUSED_PAYMENTS_BURST": "0"}, wantErr: "REFUSED_PAYMENTS_BURST: must be at least 1"},
		{name: "VerifyConcurrencyZero", env: map[string]string{"VERIFY_RPC_CONCURRENCY": "0"}, wantErr: "VERIFY_RPC_CONCURRENCY: must be at least 1"},
		{name: "ProxyNotAnAddress", env: map[string]string{"TRUSTED_PROXIES": "proxy.local"}, wantErr: `TRUSTED_PROXIES: "proxy.local" is not an address or a CIDR`},

		{name: "FreeSet", env: map[string]string{"FREE_REQUESTS_PER_SECOND": "2.5", "FREE_REQUESTS_BURST": "20", "MCP_MAX_BATCH": "10"}, want: func(c *Config) {
			c.FreeRate, c.FreeBurst, c.MCPMaxBatch = 2.5, 20, 10
		}},
		{name: "FreeRateNotPositive", env: map[string]string{"FREE_REQUESTS_PER_SECOND": "-1"}, wantErr: `FREE_REQUESTS_PER_SECOND: "-1" is not a positive number`},
		{name: "FreeBurstZero", env: map[string]string{"FREE_REQUESTS_BURST": "0"}, wantErr: "FREE_REQUESTS_BURST: must be at least 1"},
		{name: "MCPMaxBatchZero", env: map[string]string{"MCP_MAX_BATCH": "0"}, wantErr: "MCP_MAX_BATCH: must be at least 1"},
		{name: "ChannelClaimSet", env: map[string]string{"CHANNEL_CLAIM_INTERVAL": "10m", "CHANNEL_CLAIM_MIN_AMOUNT": "2500000"}, want: func(c *Config) {
			c.ChannelClaimInterval, c.ChannelClaimMinAmount = 10*time.Minute, big.NewInt(2_500_000)
		}},
		{name: "ChannelClaimIntervalZero", env: map[string]string{"CHANNEL_CLAIM_INTERVAL": "0s"}, wantErr: "CHANNEL_CLAIM_INTERVAL: must be positive"},
		{name: "ChannelClaimMinAmountZero", env: map[string]string{"CHANNEL_CLAIM_MIN_AMOUNT": "0"}, wantErr: `CHANNEL_CLAIM_MIN_AMOUNT: "0" is not a positive decimal number`},

		{name: "OpsTokenLong", env: map[string]string{"OPS_TOKEN": strings.Repeat("k", 32)}, want: func(c *Config) { c.OpsToken = strings.Repeat("k", 32) }},
		{name: "OpsTokenShort", env: map[string]string{"OPS_TOKEN": strings.Repeat("k", 31)}, wantErr: "OPS_TOKEN: has 31 bytes, fewer than 32"},
		{name: "PprofLoopback4", env: map[string]string{"PPROF_ADDR": "127.0.0.1:6060"}, want: func(c *Config) { c.PprofAddr = "127.0.0.1:6060" }},
		{name: "PprofLoopback6", env: map[string]string{"PPROF_ADDR": "[::1]:6060"}, want: func(c *Config) { c.PprofAddr = "[::1]:6060" }},
		{name: "PprofLocalhost", env: map[string]string{"PPROF_ADDR": "localhost:6060"}, want: func(c *Config) { c.PprofAddr = "localhost:6060" }},
		{name: "PprofEverywhere", env: map[string]string{"PPROF_ADDR": ":6060"}, wantErr: `PPROF_ADDR: ":6060" is not a loopback address`},
		{name: "PprofAnyAddress", env: map[string]string{"PPROF_ADDR": "0.0.0.0:6060"}, wantErr: `PPROF_ADDR: "0.0.0.0:6060" is not a loopback address`},
		{name: "PprofPublic", env: map[string]string{"PPROF_ADDR": "192.0.2.1:6060"}, wantErr: `PPROF_ADDR: "192.0.2.1:6060" is not a loopback address`},
		{name: "PprofNoPort", env: map[string]string{"PPROF_ADDR": "127.0.0.1"}, wantErr: `PPROF_ADDR: "127.0.0.1" is not host:port`},
		{name: "ReceiverAuthorizer", env: map[string]string{"RECEIVER_AUTHORIZER_KEY": testAuthorizerKey}, want: func(c *Config) { c.ReceiverAuthorizerKey = testAuthorizerKey }},
		{name: "ReceiverAuthorizerIsRelayer", env: map[string]string{"RELAYER_KEY": testRelayerKey, "RECEIVER_AUTHORIZER_KEY": "0x" + testRelayerKey},
			wantErr: "RECEIVER_AUTHORIZER_KEY: is RELAYER_KEY"},
		{name: "ReceiverAuthorizerNotAKey", env: map[string]string{"RECEIVER_AUTHORIZER_KEY": "nope"}, wantErr: "RECEIVER_AUTHORIZER_KEY: not a hex private key"},
		{name: "WithdrawDelay", env: map[string]string{"CHANNEL_WITHDRAW_DELAY": "15m"}, want: func(c *Config) { c.ChannelWithdrawDelay = 15 * time.Minute }},
		{name: "WithdrawDelayLongest", env: map[string]string{"CHANNEL_WITHDRAW_DELAY": "720h"}, want: func(c *Config) { c.ChannelWithdrawDelay = 720 * time.Hour }},
		{name: "WithdrawDelayShort", env: map[string]string{"CHANNEL_WITHDRAW_DELAY": "14m59s"}, wantErr: "CHANNEL_WITHDRAW_DELAY: 14m59s is not a whole number of seconds from 15m0s to 720h0m0s"},
		{name: "WithdrawDelayLong", env: map[string]string{"CHANNEL_WITHDRAW_DELAY": "721h"}, wantErr: "CHANNEL_WITHDRAW_DELAY: 721h0m0s is not"},
		{name: "WithdrawDelayFraction", env: map[string]string{"CHANNEL_WITHDRAW_DELAY": "1h0.5s"}, wantErr: "CHANNEL_WITHDRAW_DELAY: 1h0m0.5s is not"},

		{name: "IndexOrigins", env: map[string]string{"INDEX_ORIGINS": "https://Shop.Example/api, http://b.example:8080,", "INDEX_PAGE_GAP": "250ms"}, want: func(c *Config) {
			c.IndexOrigins, c.IndexPageGap = []string{"https://Shop.Example/api", "http://b.example:8080"}, 250*time.Millisecond
		}},
		{name: "IndexOriginScheme", env: map[string]string{"INDEX_ORIGINS": "ftp://x.example"}, wantErr: "INDEX_ORIGINS"},

		{name: "LedgerForm1", env: map[string]string{"LEDGER_FORM": "1"}, want: func(c *Config) { c.LedgerForm = LedgerForm1 }},
		{name: "LedgerForm2", env: map[string]string{"LEDGER_FORM": "2"}, want: func(c *Config) {}},
		{name: "LedgerFormUnknown", env: map[string]string{"LEDGER_FORM": "previous"}, wantErr: `LEDGER_FORM: "previous" is not 1 or 2`},
		{name: "LedgerFormEarlierName", env: map[string]string{"LEDGER_PREVIOUS_FORM": "true"}, want: func(c *Config) { c.LedgerForm = LedgerForm1 }},
		{name: "LedgerFormEarlierNameFalse", env: map[string]string{"LEDGER_PREVIOUS_FORM": "false"}, want: func(c *Config) {}},
		{name: "LedgerFormBothAgree", env: map[string]string{"LEDGER_FORM": "1", "LEDGER_PREVIOUS_FORM": "1"}, want: func(c *Config) { c.LedgerForm = LedgerForm1 }},
		{name: "LedgerFormBothDisagree", env: map[string]string{"LEDGER_FORM": "2", "LEDGER_PREVIOUS_FORM": "true"},
			wantErr: "LEDGER_PREVIOUS_FORM=true (form 1) contradicts LEDGER_FORM=2"},
		{name: "LedgerFormEarlierNameNotBool", env: map[string]string{"LEDGER_PREVIOUS_FORM": "yes"}, wantErr: `LEDGER_PREVIOUS_FORM: "yes" is not true or false`},

		{name: "ProbeRetentionDays", env: map[string]string{"INDEX_PROBE_RETENTION": "60d"}, want: func(c *Config) { c.IndexProbeRetention = 60 * 24 * time.Hour }},
		{name: "ProbeRetentionHours", env: map[string]string{"INDEX_PROBE_RETENTION": "36h"}, want: func(c *Config) { c.IndexProbeRetention = 36 * time.Hour }},
		{name: "ProbeRetentionKeep", env: map[string]string{"INDEX_PROBE_RETENTION": "0"}, want: func(c *Config) { c.IndexProbeRetention = 0 }},
		{name: "ProbeRetentionNegative", env: map[string]string{"INDEX_PROBE_RETENTION": "-1h"}, wantErr: `INDEX_PROBE_RETENTION: "-1h" is not a duration`},
		{name: "ProbeRetentionNotADuration", env: map[string]string{"INDEX_PROBE_RETENTION": "a month"}, wantErr: `INDEX_PROBE_RETENTION: "a month" is not a duration`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := loadEnv(t, tt.env, tt.wantErr)
			if cfg == nil {
				return
			}
			want := resolvedDefaults()
			tt.want(want)
			require.Equal(t, want, cfg)
		})
	}
}

// TestLoadConfigRPCURLs checks RPC_URL_<CHAIN>: one URL or several
// separated by commas, and what is refused, never with the URL (it may
// carry an API key) in the message.
func TestLoadConfigRPCURLs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		value   string
		want    []string
		wantErr string
	}{
		{name: "One", value: "https://base.example/v2/SECRET", want: []string{"https://base.example/v2/SECRET"}},
		{name: "Several", value: " https://a.example/SECRET , http://127.0.0.1:8545,wss://b.example/ws?key=SECRET ",
			want: []string{"https://a.example/SECRET", "http://127.0.0.1:8545", "wss://b.example/ws?key=SECRET"}},
		{name: "EmptyParts", value: "https://a.example/SECRET,,", want: []string{"https://a.example/SECRET"}},
		{name: "Scheme", value: "https://a.example/SECRET,ftp://b.example/SECRET", wantErr: `RPC_URL_EIP155_8453: URL 2: RPC URL scheme "ftp" is not http, https, ws or wss`},
		{name: "NoHost", value: "https:///SECRET", wantErr: "RPC_URL_EIP155_8453: URL 1: an RPC URL (https) has no host"},
		{name: "Twice", value: "https://a.example/SECRET,https://a.example/SECRET", wantErr: "RPC_URL_EIP155_8453: URL 2 is listed twice"},
		{name: "OnlyCommas", value: ",", wantErr: "RPC_URL_EIP155_8453: no URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := loadEnv(t, map[string]string{"SETTLEMENT": "rpc", "RPC_URL_EIP155_8453": tt.value, "RELAYER_KEY": testRelayerKey}, tt.wantErr)
			if cfg == nil {
				return
			}
			require.Equal(t, tt.want, cfg.RPCURLs["eip155:8453"])
		})
	}
}

// TestOpenWarmsThePool checks that a serving process's pool opens
// DB_MAX_CONNS connections at start, before any traffic asks for them.
func TestOpenWarmsThePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	a := newApp(&Config{DatabaseURL: db.URL, DBMaxConns: 3, LogLevel: "warn"}, io.Discard, nil)
	pool, err := a.open(ctx, true)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// Open and warm (store.OpenWarm) when open returns.
	require.EqualValues(t, 3, pool.Stat().IdleConns(), "connections open: %d", pool.Stat().TotalConns())
	require.EqualValues(t, 3, pool.Stat().MaxConns())
}

// TestLogFormat writes text lines a person reads with LOG_FORMAT=text, JSON
// lines with json, and with auto JSON to anything but a terminal (a pipe, a
// file) and text to a terminal; anything else is refused.
func TestLogFormat(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		format   LogFormat
		wantJSON bool
	}{{"json", true}, {"text", false}, {"auto", true}} {
		var buf bytes.Buffer
		newLogger(tt.format, &buf, slog.LevelInfo).Info("call done", "call_id", "c1")
		line := buf.String()
		require.Equal(t, tt.wantJSON, json.Valid([]byte(line)), "%s: %q", tt.format, line)
		require.Contains(t, line, "c1")
		if !tt.wantJSON {
			require.Contains(t, line, `msg="call done" call_id=c1`)
		}
	}
	f, err := os.CreateTemp(t.TempDir(), "log")
	require.NoError(t, err)
	defer f.Close()
	require.False(t, isTerminal(f), "a file is not a terminal")
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer null.Close()
	// A character device, as a terminal is: auto writes text there.
	require.True(t, isTerminal(null))
	var buf bytes.Buffer
	require.False(t, isTerminal(&buf))

	loadEnv(t, map[string]string{"LOG_FORMAT": "xml"}, `LOG_FORMAT: "xml" is not auto, text or json`)
}

// TestLoadConfigValidate checks the values refused before anything starts,
// each with its variable named and never a key or an RPC URL quoted.
func TestLoadConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{name: "LogLevel", env: map[string]string{"LOG_LEVEL": "verbose"}, wantErr: `LOG_LEVEL: "verbose" is not debug, info, warn or error`},
		{name: "RelayerKey", env: map[string]string{"RELAYER_KEY": "0xSECRET"}, wantErr: "RELAYER_KEY: not a hex private key"},
		{name: "RPCWithoutRelayerKey", env: map[string]string{"SETTLEMENT": "rpc", "RPC_URL_EIP155_8453": "http://127.0.0.1:8545"}, wantErr: "SETTLEMENT=rpc needs RELAYER_KEY"},
		{name: "SolanaKey", env: map[string]string{"SOLANA_FEE_PAYER_KEY": "SECRET"}, wantErr: "SOLANA_FEE_PAYER_KEY: not a Solana private key"},
		{name: "SolanaURL", env: map[string]string{"RPC_URL_SOLANA": "solana.example/SECRET"}, wantErr: "RPC_URL_SOLANA: not an http or https URL with a host"},
		{name: "FacilitatorWithoutURL", env: map[string]string{"SETTLEMENT": "facilitator"}, wantErr: "SETTLEMENT=facilitator needs FACILITATOR_URL"},
		{name: "FacilitatorURL", env: map[string]string{"SETTLEMENT": "facilitator", "FACILITATOR_URL": "ftp://f.example"}, wantErr: `FACILITATOR_URL: "ftp://f.example" is not an http or https URL with a host`},
		{name: "PublicURL", env: map[string]string{"PUBLIC_URL": "example.com"}, wantErr: `PUBLIC_URL: "example.com" is not an http or https URL`},
		{name: "PayTo", env: map[string]string{"PAY_TO_EVM": "0x12"}, wantErr: `PAY_TO_EVM: "0x12" is not an address`},
		{name: "IndexSource", env: map[string]string{"INDEX_SOURCES": "https://a.example/list, b.example"}, wantErr: `INDEX_SOURCES: "b.example" is not an http or https URL`},
		{name: "Cron", env: map[string]string{"INDEX_CRON": "every minute"}, wantErr: `INDEX_CRON: "every minute" is not a cron schedule`},
		{name: "CronFinerThanSeconds", env: map[string]string{"LIVENESS_CRON": "@every 500ms"}, wantErr: `LIVENESS_CRON "@every 500ms": runs 500ms apart`},
		{name: "CronEveryTenSeconds", env: map[string]string{"INDEX_CRON": "@every 10s", "LIVENESS_CRON": "@every 10s"}},
		{name: "PollInterval", env: map[string]string{"RIVER_POLL_INTERVAL": "fast"}, wantErr: `RIVER_POLL_INTERVAL: "fast" is not a duration`},
		{name: "ReclaimAfter", env: map[string]string{"JOB_RECLAIM_AFTER": "500ms"}, wantErr: `JOB_RECLAIM_AFTER: 500ms is shorter than a second`},
		{name: "Workers", env: map[string]string{"WORKERS_PURE": "-1"}, wantErr: `WORKERS_PURE: "-1" is not a whole number`},
		{name: "GasShare", env: map[string]string{"SETTLEMENT_BATCH_GAS_SHARE": "1.5"}, wantErr: `SETTLEMENT_BATCH_GAS_SHARE: "1.5" is not a share between 0 and 1`},
		{name: "MaxFee", env: map[string]string{"SETTLEMENT_MAX_FEE_GWEI": "-2"}, wantErr: `SETTLEMENT_MAX_FEE_GWEI: "-2" is not a positive decimal number`},
		{name: "Finality", env: map[string]string{"FINALITY_EIP155_8453": "soon"}, wantErr: "FINALITY_EIP155_8453: "},
		{name: "Partition", env: map[string]string{"EVENTS_PARTITION": "year"}, wantErr: `EVENTS_PARTITION: "year" is not day, week or month`},
		{name: "SolanaCommitment", env: map[string]string{"SOLANA_COMMITMENT": "processed"}, wantErr: `SOLANA_COMMITMENT: "processed" is not confirmed or finalized`},
		{name: "SolanaRate", env: map[string]string{"INDEX_SOLANA_CALLS_PER_SECOND": "-1"}, wantErr: `INDEX_SOLANA_CALLS_PER_SECOND: "-1" is not a whole number`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			loadEnv(t, tt.env, tt.wantErr)
		})
	}
}

// TestLoadConfigEveryProblem checks that loadConfig names every variable
// in error at once, not only the first.
func TestLoadConfigEveryProblem(t *testing.T) {
	t.Parallel()
	env := map[string]string{"LOG_LEVEL": "loud", "LOG_FORMAT": "xml", "JOB_TIMEOUT": "long", "SETTLEMENT": "rpc",
		"REFUSED_PAYMENTS_BURST": "0", "INDEX_CRON": "often"}
	_, err := loadConfig(func(k string) string { return env[k] })
	require.Error(t, err)
	for _, want := range []string{"LOG_LEVEL:", "LOG_FORMAT:", "JOB_TIMEOUT:", "SETTLEMENT=rpc needs at least one RPC_URL_<CHAIN>",
		"SETTLEMENT=rpc needs RELAYER_KEY", "REFUSED_PAYMENTS_BURST:", "INDEX_CRON:"} {
		require.ErrorContains(t, err, want)
	}
}

// TestLoadConfigDefaults checks that an empty environment gives
// DefaultConfig, with PUBLIC_URL and DEVCHAIN_DATA_DIR resolved, and that
// the defaults the packages apply to a zero value are the same.
func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, resolvedDefaults(), cfg)

	w := worker.Config{}.WithDefaults()
	require.Equal(t, w.JobTimeout, cfg.JobTimeout)
	require.Equal(t, w.FetchPollInterval, cfg.FetchPollInterval)
	require.Equal(t, w.SettleGrace, cfg.SettleGrace)
	for q, n := range cfg.concurrency() {
		require.Equal(t, w.Concurrency[q], n, "queue %s", q)
	}
	l := jobs.Limits{}.WithDefaults()
	require.Equal(t, jobs.Limits{MaxBodyBytes: cfg.MaxBodyBytes, MaxCodeChars: cfg.MaxCodeChars, MaxPatternChars: cfg.MaxPatternChars, MaxRows: cfg.MaxRows}, l)
	require.Equal(t, BatchAuto, cfg.SettlementBatch)
	require.True(t, cfg.batch(), "auto batches on the devchain")
}

// resolvedDefaults returns DefaultConfig as loadConfig resolves it for an
// empty environment (PUBLIC_URL and DEVCHAIN_DATA_DIR filled in).
func resolvedDefaults() *Config {
	c := DefaultConfig()
	c.PublicURL, c.DevchainDataDir = "http://127.0.0.1:8080", os.TempDir()
	return c
}

// TestPaymentWindow: a payment must stay valid JOB_TIMEOUT plus
// SETTLEMENT_WINDOW after its verification, and the quotes offer a window
// (maxTimeoutSeconds, which the official clients sign validBefore with) a
// minute longer than that, and never shorter than x402's default.
func TestPaymentWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env            map[string]string
		validFor       time.Duration
		maxTimeoutSecs int
	}{
		{nil, 3 * time.Minute, 300},
		{map[string]string{"SETTLEMENT_WINDOW": "2m"}, 4 * time.Minute, 300},
		{map[string]string{"JOB_TIMEOUT": "10m"}, 11 * time.Minute, 720},
		{map[string]string{"JOB_TIMEOUT": "10m", "SETTLEMENT_WINDOW": "90s"}, 11*time.Minute + 30*time.Second, 750},
	} {
		cfg := loadEnv(t, tc.env, "")
		require.Equal(t, tc.validFor, cfg.paymentValidFor(), "%v", tc.env)
		require.Equal(t, tc.maxTimeoutSecs, cfg.maxTimeoutSeconds(), "%v", tc.env)
	}
}
