package mcp

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/diff"
)

// noCalls is a Caller for tests that make no paid call.
type noCalls struct{}

func (noCalls) Call(context.Context, string, []byte, string, func()) Outcome {
	return Outcome{Failure: &Failure{Code: "internal_error", Message: "no calls here"}}
}

// serve mounts h on echo, as the api does, behind a server whose write
// deadline is writeTimeout, and returns its URL.
func serve(t *testing.T, h http.Handler, writeTimeout time.Duration) string {
	t.Helper()
	e := echo.New()
	e.Any(Path, echo.WrapHandler(h))
	srv := httptest.NewUnstartedServer(e)
	srv.Config.WriteTimeout = writeTimeout
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestWriteDeadlineExtended: a tool call that answers after the api's
// write deadline still gets its answer, through echo's response writer.
// The server's deadline is a nanosecond after it read the request: long
// past when the tool answers, with no wait.
func TestWriteDeadlineExtended(t *testing.T) {
	t.Parallel()
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "done")
	})
	tests := []struct {
		name     string
		wait     time.Duration
		answered bool
	}{
		{"extended to the tool wait", 3 * time.Second, true},
		{"not extended", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := serve(t, &Handler{http: slow, wait: tt.wait}, time.Nanosecond)
			resp, err := http.Post(url+Path, "application/json", strings.NewReader("{}"))
			var body []byte
			if err == nil {
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if tt.answered {
				require.NoError(t, err)
				require.Equal(t, "done", string(body))
			} else {
				require.True(t, err != nil || string(body) != "done", "the write deadline cut the answer")
			}
		})
	}
}

// TestBehindAProxy: a request that reached the loopback address with the
// public Host, as from a reverse proxy on the same machine, is served.
func TestBehindAProxy(t *testing.T) {
	t.Parallel()
	h, err := New(&Config{
		Ops: []jobs.Operation{diff.Op}, Payments: &paytest.Payments{}, Calls: noCalls{},
		Index: index.NewReader(nil, nil), Logger: slog.New(slog.DiscardHandler), Version: "test",
	})
	require.NoError(t, err)
	url := serve(t, h, time.Minute)
	req, err := http.NewRequest(http.MethodPost, url+Path, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`))
	require.NoError(t, err)
	req.Host = "x402d.example"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"name":"diff"`)
	require.Contains(t, string(body), `"name":"index_search"`)
}
