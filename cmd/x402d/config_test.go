package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
)

// TestLoadConfigSettlement checks the settlement settings: their defaults,
// and values that are refused with the variable named.
func TestLoadConfigSettlement(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		env       map[string]string
		wantErr   string
		wantBatch string
		wantGrace time.Duration
	}{
		{name: "Defaults", env: map[string]string{}, wantBatch: "auto", wantGrace: 15 * time.Second},
		{name: "Grace", env: map[string]string{"SETTLE_GRACE": "1m"}, wantBatch: "auto", wantGrace: time.Minute},
		{name: "GraceUnknown", env: map[string]string{"SETTLE_GRACE": "soon"}, wantErr: `SETTLE_GRACE: "soon" is not a duration`},
		{name: "BatchOn", env: map[string]string{"SETTLEMENT": "rpc", "RPC_URL_EIP155_8453": "http://127.0.0.1:8545", "SETTLEMENT_BATCH": "on"}, wantBatch: "on", wantGrace: 15 * time.Second},
		{name: "BatchOff", env: map[string]string{"SETTLEMENT_BATCH": "off"}, wantBatch: "off", wantGrace: 15 * time.Second},
		{name: "BatchUnknown", env: map[string]string{"SETTLEMENT_BATCH": "yes"}, wantErr: `SETTLEMENT_BATCH: "yes" is not auto, on or off`},
		{name: "SettlementUnknown", env: map[string]string{"SETTLEMENT": "chain"}, wantErr: `SETTLEMENT: "chain" is not devchain, rpc or facilitator`},
		{name: "RPCWithoutURL", env: map[string]string{"SETTLEMENT": "rpc"}, wantErr: "SETTLEMENT=rpc needs at least one RPC_URL_<CHAIN>"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadConfig(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantBatch, cfg.SettlementBatch)
			require.Equal(t, tt.wantGrace, cfg.SettleGrace)
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
			env := map[string]string{"SETTLEMENT": "rpc", "RPC_URL_EIP155_8453": tt.value}
			cfg, err := loadConfig(func(k string) string { return env[k] })
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.NotContains(t, err.Error(), "SECRET")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, cfg.RPCURLs["eip155:8453"])
		})
	}
}

// TestLoadConfigRetention checks RESULT_TTL (a Go duration or days) and
// JOB_RETENTION, their defaults and what is refused.
func TestLoadConfigRetention(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		env     map[string]string
		wantTTL time.Duration
		wantJob time.Duration
		wantErr string
	}{
		{name: "Defaults", env: map[string]string{}, wantTTL: 30 * 24 * time.Hour, wantJob: 24 * time.Hour},
		{name: "Days", env: map[string]string{"RESULT_TTL": "7d", "JOB_RETENTION": "2d"}, wantTTL: 7 * 24 * time.Hour, wantJob: 48 * time.Hour},
		{name: "Hours", env: map[string]string{"RESULT_TTL": "36h"}, wantTTL: 36 * time.Hour, wantJob: 24 * time.Hour},
		{name: "NotADuration", env: map[string]string{"RESULT_TTL": "a month"}, wantErr: `RESULT_TTL: "a month" is not a duration like 25s or 30d`},
		{name: "NotDays", env: map[string]string{"RESULT_TTL": "1.5d"}, wantErr: `RESULT_TTL: "1.5d" is not a duration`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadConfig(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantTTL, cfg.ResultTTL)
			require.Equal(t, tt.wantJob, cfg.JobRetention)
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
		format   string
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

	_, err = loadConfig(func(k string) string { return map[string]string{"LOG_FORMAT": "xml"}[k] })
	require.ErrorContains(t, err, `LOG_FORMAT: "xml" is not auto, text or json`)
}

func TestLoadConfigRefusedPayments(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		env         map[string]string
		wantRate    float64
		wantBurst   int
		wantProxies []string
		wantConc    int
		wantErr     string
	}{
		{name: "Defaults", env: map[string]string{}, wantRate: 1, wantBurst: 10, wantConc: 64},
		{name: "Set", env: map[string]string{"REFUSED_PAYMENTS_PER_SECOND": "0.5", "REFUSED_PAYMENTS_BURST": "3",
			"TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.7,2001:db8::/32", "VERIFY_RPC_CONCURRENCY": "4"},
			wantRate: 0.5, wantBurst: 3, wantProxies: []string{"10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32"}, wantConc: 4},
		{name: "RateNotPositive", env: map[string]string{"REFUSED_PAYMENTS_PER_SECOND": "0"}, wantErr: `REFUSED_PAYMENTS_PER_SECOND: "0" is not a positive number`},
		{name: "BurstZero", env: map[string]string{"REFUSED_PAYMENTS_BURST": "0"}, wantErr: "REFUSED_PAYMENTS_BURST: must be at least 1"},
		{name: "ConcurrencyZero", env: map[string]string{"VERIFY_RPC_CONCURRENCY": "0"}, wantErr: "VERIFY_RPC_CONCURRENCY: must be at least 1"},
		{name: "ProxyNotAnAddress", env: map[string]string{"TRUSTED_PROXIES": "proxy.local"}, wantErr: `TRUSTED_PROXIES: "proxy.local" is not an address or a CIDR`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadConfig(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantRate, cfg.RefusedRate)
			require.Equal(t, tt.wantBurst, cfg.RefusedBurst)
			require.Equal(t, tt.wantConc, cfg.VerifyRPCConcurrency)
			var proxies []string
			for _, p := range cfg.TrustedProxies {
				proxies = append(proxies, p.String())
			}
			require.Equal(t, tt.wantProxies, proxies)
		})
	}
}

func TestLoadConfigIndex(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(func(k string) string {
		return map[string]string{"INDEX_ORIGINS": "https://Shop.Example/api, http://b.example:8080,", "INDEX_PAGE_GAP": "250ms"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, []string{"https://shop.example", "http://b.example:8080"}, cfg.IndexOrigins)
	require.Equal(t, 250*time.Millisecond, cfg.IndexPageGap)
	_, err = loadConfig(func(k string) string { return map[string]string{"INDEX_ORIGINS": "ftp://x.example"}[k] })
	require.ErrorContains(t, err, "INDEX_ORIGINS")
}
