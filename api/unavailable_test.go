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
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/diff"
	"github.com/x402d/x402d/store"
)

// TestDatabaseUnavailable runs the api against a database that does not
// answer (as during a Postgres restart): a paid request, and a resent payment
// that the payment step refuses as used, both get 503 unavailable with
// Retry-After, never a 500 nor a 402 refusal that would make a client give
// up on a result it may have paid for.
func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	url := "postgres://postgres@" + addr + "/x?sslmode=disable&connect_timeout=2"
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	connConfig, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	s, err := New(Config{
		Ops:      []jobs.Operation{diff.Op},
		Payments: &paytest.Payments{},
		Pool:     pool,
		River:    rc,
		Listener: store.NewListener(connConfig, slog.New(slog.DiscardHandler)),
		Logger:   slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	srv := httptest.NewServer(s.Echo())
	t.Cleanup(srv.Close)

	for _, tt := range []struct{ name, header string }{
		{"NewPayment", "test:0xpayer:n1"},
		{"ResentPaymentRefused", "bad:0xpayer:n1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
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
	}
}
