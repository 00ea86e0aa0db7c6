package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
)

// mcpPayments is what compat/mcp_pay.mjs reports.
type mcpPayments struct {
	Address string
	Tools   []struct {
		Name         string
		Meta         map[string]any
		OutputSchema bool
	}
	Descriptions map[string]string
	Steps        []mcpStep
}

// mcpStep is one tool call of compat/mcp_pay.mjs: in spec mode, the unpaid
// call (Quote) and the paid one.
type mcpStep struct {
	Op, Amount, QuoteError, Text string
	Quote                        *mcpStep
	QuoteValid, IsError, Aborted bool
	Structured                   map[string]any
	PaymentResponse              *x402.SettleResponse
	X402Error                    map[string]any
}

// payOverMCP has compat/mcp_pay.mjs call tools of the service at base with
// development account account, in mode spec or agents.
func payOverMCP(ctx context.Context, t *testing.T, base string, account int, mode string, steps []map[string]any) mcpPayments {
	t.Helper()
	raw, err := json.Marshal(steps)
	require.NoError(t, err)
	compat := compatDir(t, "@modelcontextprotocol/sdk", "agents", "@x402/evm")
	cmd := exec.CommandContext(ctx, "node", filepath.Join(compat, "mcp_pay.mjs"), base, strconv.Itoa(account), mode, string(raw))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node mcp_pay.mjs %s: %s", mode, stderr.String())
	var out mcpPayments
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	return out
}

// mcpSteps turns HTTP calls (sellableCalls) into tool calls.
func mcpSteps(t *testing.T, calls []map[string]string) []map[string]any {
	t.Helper()
	steps := make([]map[string]any, len(calls))
	for i, c := range calls {
		steps[i] = map[string]any{"op": c["op"], "args": json.RawMessage(c["body"])}
	}
	return steps
}

// TestMCPOfficialClientsPayEveryOperation has the official MCP TypeScript
// SDK (paying as x402's MCP transport spec says, with @x402/evm) and
// Cloudflare's agents client (withX402Client) each pay every operation as
// a tool on the devchain: every result comes with its settlement, and the
// payers' balances move by exactly the prices.
func TestMCPOfficialClientsPayEveryOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	compatDir(t, "@modelcontextprotocol/sdk", "agents", "@x402/evm")
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><head><title>Page</title></head><body>x</body></html>")
	}))
	defer page.Close()
	base, chain := startDevchainService(ctx, t)
	steps := mcpSteps(t, sellableCalls(page.URL+"/"))
	// brief 0.25 + data-clean 0.5 + code-review 0.75 + url-meta 0.03 +
	// csv-json 0.02 + regex 0.01 + diff 0.01 = 1.57 USDC.
	price := big.NewInt(1_570_000)

	for _, tc := range []struct {
		mode    string
		account int
	}{{"spec", 5}, {"agents", 6}} {
		t.Run(tc.mode, func(t *testing.T) {
			payer := devAddress(t, uint32(tc.account))
			before := usdcBalance(ctx, t, chain, payer)
			out := payOverMCP(ctx, t, base, tc.account, tc.mode, steps)
			require.Equal(t, payer.Hex(), out.Address)
			names := map[string]bool{}
			for _, tool := range out.Tools {
				names[tool.Name] = true
				if !strings.HasPrefix(tool.Name, "index_") {
					require.NotNil(t, tool.Meta["x402/price"], tool.Name)
					require.True(t, tool.OutputSchema, tool.Name)
				}
			}
			for _, s := range steps {
				require.True(t, names[s["op"].(string)], "%s is listed", s["op"])
			}
			require.True(t, names["index_search"] && names["index_summary"])
			if tc.mode == "agents" {
				require.Contains(t, out.Descriptions["regex"], "you will be charged $0.01", "agents reads the price from _meta")
			}
			require.Len(t, out.Steps, len(steps))
			for _, s := range out.Steps {
				require.False(t, s.IsError, "%s: %s", s.Op, s.Text)
				require.Equal(t, s.Op, s.Structured["op"], s.Op)
				require.NotNil(t, s.PaymentResponse, s.Op)
				require.True(t, s.PaymentResponse.Success, s.Op)
				require.Equal(t, payer.Hex(), s.PaymentResponse.Payer, s.Op)
				require.Equal(t, "eip155:8453", s.PaymentResponse.Network, s.Op)
				if tc.mode == "spec" {
					require.True(t, s.Quote.IsError, s.Op)
					require.True(t, s.QuoteValid, "%s: @x402/core refuses the PaymentRequired: %s", s.Op, s.QuoteError)
					require.NotNil(t, s.Quote.X402Error, s.Op)
				}
			}
			require.Equal(t, price, new(big.Int).Sub(before, usdcBalance(ctx, t, chain, payer)))
		})
	}
}

// TestMCPOfficialClientRefusals has the official MCP TypeScript SDK send
// what a seller must refuse, on the devchain: a payment for another amount,
// one to another receiver, a payment sent again with other arguments, bad
// arguments; and a call abandoned mid-run then sent again with the same
// payment (the page it reads answers only once the call is sent again).
// Only the two good payments move money, once each.
func TestMCPOfficialClientRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	compatDir(t, "@modelcontextprotocol/sdk", "agents", "@x402/evm")
	resent := make(chan struct{})
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-resent:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><head><title>Slow page</title></head><body>x</body></html>")
	}))
	defer page.Close()
	service, chain := startDevchainService(ctx, t)
	// The client talks to the service through a proxy that closes resent
	// once the paid url-meta call arrives the second time.
	target, err := url.Parse(service)
	require.NoError(t, err)
	forward := httputil.NewSingleHostReverseProxy(target)
	forward.FlushInterval = -1
	var urlMetaPaid atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"name":"url-meta"`)) && bytes.Contains(body, []byte(`"x402/payment"`)) && urlMetaPaid.Add(1) == 2 {
			close(resent)
		}
		forward.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	base := proxy.URL
	const account = 7
	payer := devAddress(t, account)
	before := usdcBalance(ctx, t, chain, payer)

	regex := json.RawMessage(`{"pattern":"\\d+","text":"a1b22","flags":"g"}`)
	diff := json.RawMessage(`{"a":"x\n","b":"y\n"}`)
	out := payOverMCP(ctx, t, base, account, "spec", []map[string]any{
		{"op": "regex", "args": regex},
		{"op": "regex", "args": json.RawMessage(`{"pattern":"a","text":"a"}`), "reuse": 0},
		{"op": "diff", "args": diff, "tamper": "amount"},
		{"op": "diff", "args": diff, "tamper": "payTo"},
		{"op": "regex", "args": json.RawMessage(`{"pattern":"(","text":"a"}`)},
		{"op": "url-meta", "args": map[string]string{"url": page.URL + "/"}, "abortAfterMs": 700},
		{"op": "regex", "args": regex, "reuse": 0},
	})
	require.Len(t, out.Steps, 7)
	paid, replayed, wrongAmount, wrongPayTo, badArgs, resumed, retried := out.Steps[0], out.Steps[1], out.Steps[2], out.Steps[3], out.Steps[4], out.Steps[5], out.Steps[6]

	require.False(t, paid.IsError, paid.Text)
	require.True(t, paid.PaymentResponse.Success)

	require.True(t, replayed.IsError)
	require.Equal(t, "payment_already_used", replayed.Structured["error"])

	for _, s := range []mcpStep{wrongAmount, wrongPayTo} {
		require.True(t, s.IsError, s.Text)
		require.Equal(t, x402.ReasonNoMatch, s.Structured["error"], s.Text)
		require.NotEmpty(t, s.Structured["accepts"], "a fresh PaymentRequired to pay again")
	}

	require.True(t, badArgs.Quote.IsError)
	require.Nil(t, badArgs.Quote.Structured)
	require.Contains(t, badArgs.Quote.Text, `"error":"invalid_request"`)
	require.Contains(t, badArgs.Quote.Text, `"field":"pattern"`)

	require.True(t, resumed.Aborted, "the first try was abandoned mid-run")
	require.False(t, resumed.IsError, resumed.Text)
	require.Equal(t, "Slow page", resumed.Structured["title"])
	require.True(t, resumed.PaymentResponse.Success)

	require.False(t, retried.IsError, retried.Text)
	require.Equal(t, paid.Structured, retried.Structured, "the same payment and arguments get the stored result")

	// regex 0.01 + url-meta 0.03, each once.
	require.Equal(t, big.NewInt(40_000), new(big.Int).Sub(before, usdcBalance(ctx, t, chain, payer)))
}
