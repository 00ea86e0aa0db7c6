package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/logtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/diff"
	"github.com/x402d/x402d/store"
)

// unreachableServer returns the api for cfg on a database that does not
// answer (a port nobody listens on), as during a Postgres restart; cfg's
// Payments defaults to the payment double, its Logger to none.
func unreachableServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	url := "postgres://postgres@" + addr + "/x?sslmode=disable&connect_timeout=2"
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	connConfig, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	if cfg.Payments == nil {
		cfg.Payments = &paytest.Payments{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Pool, cfg.River = pool, rc
	cfg.Listener = store.NewListener(connConfig, slog.New(slog.DiscardHandler))
	s, err := New(&cfg)
	require.NoError(t, err)
	return s
}

// TestDatabaseUnavailable runs the api against a database that does not
// answer (as during a Postgres restart): a paid call, and a resent payment
// that the payment step refuses as used, get unavailable with a retry
// delay, over HTTP (503, Retry-After) and over MCP alike, logged as a
// warning: never a 500 or internal_error, nor a 402 refusal that would make
// a client give up on a result it may have paid for.
func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logs := &logtest.Buffer{}
	s := unreachableServer(t, Config{Ops: []jobs.Operation{diff.Op}, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	client := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	session, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: srv.URL + "/mcp", DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = session.Close() })

	payments := []struct{ name, header string }{
		{"NewPayment", "test:0xpayer:n1"},
		{"ResentPaymentRefused", "bad:0xpayer:n1"},
	}
	for _, tt := range payments {
		t.Run("HTTP"+tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/api/x402/diff", strings.NewReader(`{"a":"x\n","b":"y\n"}`))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Payment-Signature", tt.header)
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
			require.Equal(t, "1", resp.Header.Get("Retry-After"))
			var e Error
			require.NoError(t, json.Unmarshal(body, &e))
			require.Equal(t, "unavailable", e.Code)
		})
		t.Run("MCP"+tt.name, func(t *testing.T) {
			res, err := session.CallTool(ctx, &sdk.CallToolParams{
				Name: "diff", Arguments: map[string]any{"a": "x\n", "b": "y\n"},
				Meta: sdk.Meta{"x402/payment": tt.header},
			})
			require.NoError(t, err)
			require.True(t, res.IsError)
			require.Len(t, res.Content, 1)
			var failure struct {
				Error      string `json:"error"`
				Message    string `json:"message"`
				RetryAfter int    `json:"retry_after"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*sdk.TextContent).Text), &failure))
			require.Equal(t, "unavailable", failure.Error)
			require.Equal(t, errUnavailable().Message, failure.Message)
			require.Equal(t, 1, failure.RetryAfter)
		})
	}
	require.Contains(t, logs.String(), `"level":"WARN","msg":"request failed: database unavailable"`)
	require.NotContains(t, logs.String(), `"level":"ERROR"`, "a database restart is no error of the service")
}
