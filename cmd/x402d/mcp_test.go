package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/jobs/diff"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// mcpSession connects the official Go MCP client to the service at base.
func mcpSession(ctx context.Context, t *testing.T, base string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "x402d-test", Version: "1"}, opts)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = session.Close() })
	return session
}

// callTool calls tool name with args and, when payment is set, the payment
// in _meta["x402/payment"].
func callTool(ctx context.Context, t *testing.T, s *mcp.ClientSession, name string, args any, payment any) *mcp.CallToolResult {
	t.Helper()
	params := &mcp.CallToolParams{Name: name, Arguments: args}
	if payment != nil {
		params.Meta = mcp.Meta{"x402/payment": payment}
	}
	res, err := s.CallTool(ctx, params)
	require.NoError(t, err)
	return res
}

// toolText is the text of a tool result's first content.
func toolText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	require.NotEmpty(t, res.Content)
	text, ok := res.Content[0].(*mcp.TextContent)
	require.True(t, ok, "content[0] is %T", res.Content[0])
	return text.Text
}

// asMap re-decodes v (a decoded JSON value) as an object.
func asMap(t *testing.T, v any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}

// requirePaymentRequired checks a tool error carrying x402's
// PaymentRequired in every place the MCP transport spec and Cloudflare's
// client read it, with reason as its error, and returns it.
func requirePaymentRequired(t *testing.T, res *mcp.CallToolResult, reason string) map[string]any {
	t.Helper()
	require.True(t, res.IsError, toolText(t, res))
	pr := asMap(t, res.StructuredContent)
	require.EqualValues(t, 2, pr["x402Version"])
	require.NotEmpty(t, pr["accepts"])
	require.Equal(t, reason, pr["error"])
	require.Equal(t, pr, asMap(t, res.Meta["x402/error"]))
	var wrapped struct {
		Error struct {
			Code    int            `json:"code"`
			Message string         `json:"message"`
			Data    map[string]any `json:"data"`
		} `json:"x402/error"`
	}
	require.NoError(t, json.Unmarshal([]byte(toolText(t, res)), &wrapped))
	require.Equal(t, 402, wrapped.Error.Code)
	require.NotEmpty(t, wrapped.Error.Message)
	require.Equal(t, pr, wrapped.Error.Data)
	return pr
}

// requireToolFailure checks a tool error that is not about payment and
// returns its JSON error.
func requireToolFailure(t *testing.T, res *mcp.CallToolResult, code string) map[string]any {
	t.Helper()
	require.True(t, res.IsError)
	require.Nil(t, res.StructuredContent)
	var body map[string]any
	require.NoError(t, json.Unmarshal([]byte(toolText(t, res)), &body))
	require.Equal(t, code, body["error"], body)
	return body
}

// countCalls is the number of paid calls recorded.
func countCalls(ctx context.Context, t *testing.T, db *dbtest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM calls`).Scan(&n))
	return n
}

// TestMCP drives /mcp with the official Go MCP SDK's client against a
// service paying with the payment double: the tools listed, paid calls,
// their refusals, retries with the same payment, progress and a dropped
// connection.
func TestMCP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	base := startInProcess(ctx, t, "serve", testEnv(db, map[string]string{"OPS_TOKEN": "mcp-ops-token-0123456789abcdef0123"}))
	session := mcpSession(ctx, t, base, nil)

	t.Run("ToolsListed", func(t *testing.T) {
		tools := map[string]*mcp.Tool{}
		for tool, err := range session.Tools(ctx, nil) {
			require.NoError(t, err)
			tools[tool.Name] = tool
		}
		for _, name := range []string{"regex", "diff", "csv-json", "url-meta", "index_search", "index_summary", "index_host", "index_changes"} {
			require.Contains(t, tools, name)
		}
		// No Gemini key: the model operations are not sold, so not offered.
		for _, name := range []string{"brief", "code-review", "data-clean"} {
			require.NotContains(t, tools, name)
		}
		search, err := json.Marshal(tools["index_search"].InputSchema)
		require.NoError(t, err)
		var schema struct {
			Properties struct{ Sort struct{ Enum []string } }
		}
		require.NoError(t, json.Unmarshal(search, &schema))
		require.Equal(t, index.SortKeys, schema.Properties.Sort.Enum, "the sorts the API takes")
		d := tools["diff"]
		input, err := x402.EmbeddableSchema(diff.Op.InputSchema)
		require.NoError(t, err)
		got, err := json.Marshal(d.InputSchema)
		require.NoError(t, err)
		require.JSONEq(t, string(input), string(got), "the input schema is the OpenAPI document's")
		require.Equal(t, map[string]any{"mode": "fixed", "currency": "USD", "amount": "0.010000"}, d.Meta["x402/price"])
		require.Equal(t, []any{"eip155:8453"}, d.Meta["x402/networks"])
		require.Equal(t, true, d.Meta["agents-x402/paymentRequired"])
		require.NotEmpty(t, d.Meta["x402/accepts"])
		require.True(t, d.Annotations.ReadOnlyHint)
		require.True(t, d.Annotations.IdempotentHint)
		require.False(t, *d.Annotations.OpenWorldHint)
		require.True(t, *tools["url-meta"].Annotations.OpenWorldHint)
		require.False(t, tools["url-meta"].Annotations.IdempotentHint)
		out := asMap(t, d.OutputSchema)
		require.Equal(t, "object", out["type"])
		require.Len(t, out["anyOf"], 2, "the result, or the PaymentRequired of a tool error")
	})

	t.Run("UnpaidGetsPaymentRequired", func(t *testing.T) {
		res := callTool(ctx, t, session, "diff", map[string]any{"a": "x\n", "b": "y\n"}, nil)
		pr := requirePaymentRequired(t, res, "payment required")
		accepts := pr["accepts"].([]any)
		require.Equal(t, "10000", asMap(t, accepts[0])["amount"])
	})

	t.Run("BadArgumentsRefusedBeforePayment", func(t *testing.T) {
		before := countCalls(ctx, t, db)
		body := requireToolFailure(t, callTool(ctx, t, session, "regex", map[string]any{"pattern": "(", "text": "a"}, nil), "invalid_request")
		require.Equal(t, "pattern", body["field"])
		body = requireToolFailure(t, callTool(ctx, t, session, "diff", map[string]any{"a": "x", "c": "y"}, "test:0xmcpbad:n1"), "invalid_request")
		require.Equal(t, "c", body["field"])
		require.Equal(t, before, countCalls(ctx, t, db), "nothing recorded, nothing charged")
	})

	t.Run("PaidCallSettlesAndReplays", func(t *testing.T) {
		args := map[string]any{"a": "one\ntwo\n", "b": "one\n2\n"}
		res := callTool(ctx, t, session, "diff", args, "test:0xmcp:n1")
		require.False(t, res.IsError, toolText(t, res))
		result := asMap(t, res.StructuredContent)
		require.Equal(t, "diff", result["op"])
		require.JSONEq(t, toolText(t, res), mustJSON(t, result))
		settled := asMap(t, res.Meta["x402/payment-response"])
		require.Equal(t, true, settled["success"])
		require.Equal(t, "0xmcp", settled["payer"])
		require.NotEmpty(t, settled["transaction"])

		again := callTool(ctx, t, session, "diff", args, "test:0xmcp:n1")
		require.False(t, again.IsError, toolText(t, again))
		require.Equal(t, result, asMap(t, again.StructuredContent), "the same payment and arguments get the stored result")

		other := callTool(ctx, t, session, "diff", map[string]any{"a": "1\n", "b": "2\n"}, "test:0xmcp:n1")
		requirePaymentRequired(t, other, "payment_already_used")
		viaHTTP := callTool(ctx, t, session, "regex", map[string]any{"pattern": "a", "text": "a"}, "test:0xmcp:n1")
		requirePaymentRequired(t, viaHTTP, "payment_already_used")

		// The operator sees the call like any other.
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/ops/calls/"+result["call_id"].(string), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer mcp-ops-token-0123456789abcdef0123")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		page, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(page))
		require.Contains(t, string(page), `data-event="settlement.confirmed"`)
	})

	t.Run("PaymentIdentifier", func(t *testing.T) {
		// A new payment with the payment identifier of a call gets its
		// result, not a second call; with other arguments, a conflict.
		args := map[string]any{"a": "id\n", "b": "mcp\n"}
		res := callTool(ctx, t, session, "diff", args, "test:0xmcpid:n1:pay_mcp_0123456789ab")
		require.False(t, res.IsError, toolText(t, res))
		before := countCalls(ctx, t, db)
		again := callTool(ctx, t, session, "diff", args, "test:0xmcpid:n2:pay_mcp_0123456789ab")
		require.False(t, again.IsError, toolText(t, again))
		require.Equal(t, asMap(t, res.StructuredContent), asMap(t, again.StructuredContent))
		require.Equal(t, asMap(t, res.Meta["x402/payment-response"]), asMap(t, again.Meta["x402/payment-response"]))
		requireToolFailure(t, callTool(ctx, t, session, "diff", map[string]any{"a": "1\n", "b": "2\n"}, "test:0xmcpid:n3:pay_mcp_0123456789ab"),
			"payment_identifier_conflict")
		body := requireToolFailure(t, callTool(ctx, t, session, "diff", args, "test:0xmcpid:n4:short"), "invalid_payment_identifier")
		require.Equal(t, `extensions["payment-identifier"].info.id`, body["field"])
		require.Equal(t, before, countCalls(ctx, t, db), "no call more")
		// Only the payer's own payment gets its call: not one whose
		// signature is not the payer's, nor one that paid another call.
		requirePaymentRequired(t, callTool(ctx, t, session, "diff", args, "bad:0xmcpid:n5:pay_mcp_0123456789ab"), "invalid_exact_evm_signature")
		res = callTool(ctx, t, session, "diff", map[string]any{"a": "other\n", "b": "call\n"}, "test:0xmcpid:n6:pay_mcp_other_call_01")
		require.False(t, res.IsError, toolText(t, res))
		requirePaymentRequired(t, callTool(ctx, t, session, "diff", args, "test:0xmcpid:n6:pay_mcp_0123456789ab"), "payment_already_used")
		require.Equal(t, before+1, countCalls(ctx, t, db))
	})

	t.Run("RefusedPayment", func(t *testing.T) {
		res := callTool(ctx, t, session, "diff", map[string]any{"a": "x\n", "b": "y\n"}, "bad:0xmcp:n2")
		requirePaymentRequired(t, res, "invalid_exact_evm_signature")
		// The transport spec's object form reaches verification too: the
		// double cannot read it, so it is refused as unreadable.
		res = callTool(ctx, t, session, "diff", map[string]any{"a": "x\n", "b": "y\n"}, map[string]any{"x402Version": 2})
		requirePaymentRequired(t, res, "invalid_payload")
		res = callTool(ctx, t, session, "diff", map[string]any{"a": "x\n", "b": "y\n"}, 42)
		requireToolFailure(t, res, "invalid_payment")
	})

	t.Run("SettlementFailureWithholdsResult", func(t *testing.T) {
		res := callTool(ctx, t, session, "diff", map[string]any{"a": "x\n", "b": "y\n"}, "test:0xbrokemcp:n1")
		pr := requirePaymentRequired(t, res, "invalid_exact_evm_insufficient_balance")
		settlement := asMap(t, pr["x402/payment-response"])
		require.Equal(t, false, settlement["success"])
		require.Equal(t, settlement, asMap(t, res.Meta["x402/payment-response"]))
	})

	t.Run("FreeIndexTools", func(t *testing.T) {
		res := callTool(ctx, t, session, "index_summary", map[string]any{}, nil)
		require.False(t, res.IsError, toolText(t, res))
		require.Equal(t, "xindex-1.0", asMap(t, res.StructuredContent)["version"])
		res = callTool(ctx, t, session, "index_search", map[string]any{"q": "weather", "sort": "price", "limit": 5}, nil)
		require.False(t, res.IsError, toolText(t, res))
		require.Equal(t, true, asMap(t, res.StructuredContent)["ok"])
		body := requireToolFailure(t, callTool(ctx, t, session, "index_search", map[string]any{"sort": "cheapest"}, nil), "invalid_request")
		require.Equal(t, "sort", body["field"])
		res = callTool(ctx, t, session, "index_search", map[string]any{"sort": "uptime", "quote_matches_listing": "false"}, nil)
		require.False(t, res.IsError, toolText(t, res))
		res = callTool(ctx, t, session, "index_search", map[string]any{"sort": "calls"}, nil)
		require.False(t, res.IsError, toolText(t, res))
		// The on-chain figures' sorts and filters.
		res = callTool(ctx, t, session, "index_search", map[string]any{"sort": "volume_30d", "min_payers": 2, "min_volume_usdc": "0.5", "max_top_payer_share": 0.5}, nil)
		require.False(t, res.IsError, toolText(t, res))
		require.Empty(t, asMap(t, res.StructuredContent)["hosts"], "no chain is read: no host is measured")
		body = requireToolFailure(t, callTool(ctx, t, session, "index_search", map[string]any{"max_top_payer_share": 2}, nil), "invalid_request")
		require.Equal(t, "max_top_payer_share", body["field"])

		// A host's history and the feed of changes, read by an agent.
		res = callTool(ctx, t, session, "index_changes", map[string]any{"limit": 3}, nil)
		require.False(t, res.IsError, toolText(t, res))
		changes := asMap(t, res.StructuredContent)
		require.Equal(t, true, changes["ok"])
		require.Contains(t, changes, "next")
		body = requireToolFailure(t, callTool(ctx, t, session, "index_changes", map[string]any{"since": "last week"}, nil), "invalid_request")
		require.Equal(t, "since", body["field"])
		_, err := db.Pool.Exec(ctx, `INSERT INTO index_hosts (host, services, quality_services, calls_30d) VALUES ('agent.example', 2, 1, 7);
			INSERT INTO index_resources (resource, host, updated_at, quality_calls_30d) VALUES ('https://agent.example/a', 'agent.example', now(), 7);
			INSERT INTO index_resources (resource, host, updated_at) VALUES ('https://agent.example/b', 'agent.example', now())`)
		require.NoError(t, err)
		res = callTool(ctx, t, session, "index_host", map[string]any{"host": "Agent.Example"}, nil)
		require.False(t, res.IsError, toolText(t, res))
		detail := asMap(t, res.StructuredContent)
		host := asMap(t, detail["host"])
		require.Equal(t, "agent.example", host["host"])
		require.Contains(t, host, "uptime_30d")
		require.Contains(t, host, "evidence")
		require.Nil(t, host["evidence"], "no payTo read: not measured")
		require.Equal(t, []any{}, detail["pay_tos"])
		require.Nil(t, host["uptime_30d"], "never probed")
		// Bazaar's quality figures, where a listing reports them; null
		// where none does.
		require.Equal(t, map[string]any{"services": 1.0, "calls_30d": 7.0, "unique_payers_30d_max": nil, "last_called_at": nil}, host["quality"])
		services := detail["services"].([]any)
		require.Len(t, services, 2)
		require.Equal(t, map[string]any{"calls_30d": 7.0, "unique_payers_30d": nil, "last_called_at": nil}, asMap(t, services[0])["quality"])
		require.Contains(t, asMap(t, services[1]), "quality")
		require.Nil(t, asMap(t, services[1])["quality"])
		body = requireToolFailure(t, callTool(ctx, t, session, "index_host", map[string]any{"host": "nowhere.example"}, nil), "not_found")
		require.Equal(t, "host", body["field"])
	})

	t.Run("ProgressWhileWaiting", func(t *testing.T) {
		var notes atomic.Int32
		s := mcpSession(ctx, t, base, &mcp.ClientOptions{ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			notes.Add(1)
		}})
		params := &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 6500}, Meta: mcp.Meta{"x402/payment": "test:0xmcp:n4"}}
		params.SetProgressToken("p1")
		res, err := s.CallTool(ctx, params)
		require.NoError(t, err)
		require.False(t, res.IsError, toolText(t, res))
		require.GreaterOrEqual(t, notes.Load(), int32(1), "a progress notification every 5 s")
	})

	t.Run("DisconnectThenSamePayment", func(t *testing.T) {
		s := mcpSession(ctx, t, base, nil)
		args := map[string]any{"ms": 2000}
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := s.CallTool(cctx, &mcp.CallToolParams{Name: "sleep", Arguments: args, Meta: mcp.Meta{"x402/payment": "test:0xmcp:n5"}})
		cancel()
		require.Error(t, err, "the client gave up mid-call")
		res := callTool(ctx, t, mcpSession(ctx, t, base, nil), "sleep", args, "test:0xmcp:n5")
		require.False(t, res.IsError, toolText(t, res))
		require.EqualValues(t, 2000, asMap(t, res.StructuredContent)["slept_ms"])
		var calls int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM calls WHERE payment_key = $1`,
			store.PaymentDigest((&x402.Payment{Network: "eip155:8453", Payer: "0xmcp", Nonce: "n5"}).Key())).Scan(&calls))
		require.Equal(t, 1, calls, "one call, paid once")
	})
}

// TestMCPIndexEvidence has an agent read, through the free index tools, a
// seller whose receiver the chain reader has measured: index_search,
// index_host and index_summary answer its figures over 24 hours, 7 and 30
// days, its senders and its wash signal, as measured; its filters on them
// keep it and leave out the seller not measured (null, not zero). The
// transfers are recorded as the chain reader records them (index's anvil
// test reads them from a chain); its run counts the figures.
func TestMCPIndexEvidence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	const network = "eip155:8453"
	payTo := "0x00000000000000000000000000000000000000c1"
	items := []map[string]any{}
	for host, receiver := range map[string]string{"chain.example": payTo, "quiet.example": "0x00000000000000000000000000000000000000d2"} {
		items = append(items, map[string]any{"resource": "https://" + host + "/api", "type": "http", "x402Version": 2,
			"accepts": []any{map[string]any{"scheme": "exact", "network": network, "amount": "1000", "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "payTo": receiver}}})
	}
	listing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"x402Version": 2, "items": items, "pagination": map[string]int{"limit": 100, "offset": 0, "total": len(items)}})
	}))
	defer listing.Close()
	// The service's crawl at start is left out: this test's pass is the
	// one read.
	_, err := db.Pool.Exec(ctx, `INSERT INTO index_sources (url, last_at) VALUES ($1, now())`, listing.URL)
	require.NoError(t, err)
	base := startInProcess(ctx, t, "serve", testEnv(db, map[string]string{"INDEX_SOURCES": listing.URL}))
	require.NoError(t, index.NewCrawler(&index.CrawlerConfig{Pool: db.Pool, Sources: []string{listing.URL}, Gap: -1}).FullPass(ctx, nil))

	// chain.example's receiver is read from block 100: three transfers
	// from two payers, two of them settlements sent by Coinbase's
	// facilitator; quiet.example's is not read.
	now := time.Now()
	require.NoError(t, store.ChainWatch(ctx, db.Pool, network, []string{payTo}, 100, now.Add(-time.Hour)))
	const coinbase, relayer = "0x8f5cb67b49555e614892b7233cfddebfb746e531", "0x00000000000000000000000000000000000000fa"
	payer1, payer2 := "0x0000000000000000000000000000000000000001", "0x0000000000000000000000000000000000000002"
	transfer := func(i int, payer, amount, sender string, ago time.Duration) store.Transfer {
		return store.Transfer{Network: network, TxHash: fmt.Sprintf("0x%064x", i), Block: uint64(100 + i), BlockHash: fmt.Sprintf("0x%064x", 1000+i),
			At: now.Add(-ago), Payer: payer, PayTo: payTo, Amount: amount, Sender: sender, EIP3009: sender == coinbase}
	}
	require.NoError(t, store.TransfersAdd(ctx, db.Pool, []store.Transfer{
		transfer(1, payer1, "10000", coinbase, time.Minute),
		transfer(2, payer2, "20000", coinbase, 2*24*time.Hour),
		transfer(3, payer1, "30000", relayer, 10*24*time.Hour),
	}))
	_, err = index.NewChainReader(&index.ChainReaderConfig{Pool: db.Pool}).Run(ctx)
	require.NoError(t, err)

	session := mcpSession(ctx, t, base, nil)
	tool := func(name string, args map[string]any, v any) {
		t.Helper()
		res := callTool(ctx, t, session, name, args, nil)
		require.False(t, res.IsError, toolText(t, res))
		require.NoError(t, json.Unmarshal([]byte(mustJSON(t, res.StructuredContent)), v))
	}
	measured := func(t *testing.T, e *index.Evidence) {
		t.Helper()
		require.NotNil(t, e, "measured")
		require.Equal(t, []string{network}, e.Networks)
		require.Equal(t, index.EvidenceWindow{Transactions: 1, VolumeUSDC: "0.010000", Payers: 1}, e.Last24h)
		require.Equal(t, index.EvidenceWindow{Transactions: 2, VolumeUSDC: "0.030000", Payers: 2}, e.Last7d)
		require.Equal(t, index.EvidenceWindow{Transactions: 3, VolumeUSDC: "0.060000", Payers: 2}, e.Last30d)
		require.Equal(t, int64(2), e.Settlements30d, "the two EIP-3009 settlements")
		require.Equal(t, []index.EvidenceSender{
			{Address: coinbase, Class: index.SenderFacilitator, Name: "Coinbase", Transactions: 2, VolumeUSDC: "0.030000"},
			{Address: relayer, Class: index.SenderOther, Transactions: 1, VolumeUSDC: "0.030000"},
		}, e.Senders)
		require.Equal(t, &payer1, e.Wash.TopPayer)
		require.InDelta(t, 4.0/6, *e.Wash.TopPayerShare, 1e-9)
		require.NotNil(t, e.LastTransferAt)
		require.WithinDuration(t, now.Add(-time.Minute), *e.LastTransferAt, time.Second)
	}

	t.Run("IndexSearch", func(t *testing.T) {
		var found struct{ Hosts []index.Host }
		tool("index_search", map[string]any{"sort": "volume_30d"}, &found)
		require.Len(t, found.Hosts, 2)
		require.Equal(t, "chain.example", found.Hosts[0].Host, "the measured volume first")
		measured(t, found.Hosts[0].Evidence)
		require.Equal(t, "quiet.example", found.Hosts[1].Host)
		require.Nil(t, found.Hosts[1].Evidence, "not read: null")
		// The filters on the figures keep the measured seller.
		tool("index_search", map[string]any{"min_payers": 2, "min_volume_usdc": "0.06", "max_top_payer_share": 0.7}, &found)
		require.Len(t, found.Hosts, 1)
		require.Equal(t, "chain.example", found.Hosts[0].Host)
		measured(t, found.Hosts[0].Evidence)
		for _, args := range []map[string]any{{"min_payers": 3}, {"min_volume_usdc": "0.07"}, {"max_top_payer_share": 0.6}} {
			tool("index_search", args, &found)
			require.Empty(t, found.Hosts, "%v", args)
		}
	})

	t.Run("IndexHost", func(t *testing.T) {
		var detail index.HostDetail
		tool("index_host", map[string]any{"host": "chain.example"}, &detail)
		measured(t, detail.Host.Evidence)
		require.Len(t, detail.PayTos, 1)
		require.Equal(t, network, detail.PayTos[0].Network)
		require.Equal(t, payTo, detail.PayTos[0].PayTo)
		measured(t, detail.PayTos[0].Evidence)
	})

	t.Run("IndexSummary", func(t *testing.T) {
		var summary index.Summary
		tool("index_summary", map[string]any{}, &summary)
		for _, list := range [][]index.Host{summary.TopBySize, summary.Cheapest} {
			i := slices.IndexFunc(list, func(h index.Host) bool { return h.Host == "chain.example" })
			require.GreaterOrEqual(t, i, 0)
			measured(t, list[i].Evidence)
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return string(raw)
}
