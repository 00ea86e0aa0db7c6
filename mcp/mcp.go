// Package mcp serves the catalogue to AI agents as Model Context Protocol
// tools, over MCP's Streamable HTTP transport (the official Go SDK,
// stateless: any api process answers any request).
//
// Every operation sold now is a paid tool named as the operation, paid as
// x402's MCP transport specifies (specs/transports-v2/mcp.md in
// coinbase/x402): a call without a payment, or with a refused one, is a tool
// error carrying the PaymentRequired; the payment travels in the request's
// _meta["x402/payment"] (an object, or the base64 JSON string Cloudflare's
// agents client sends); the settlement comes back in the result's
// _meta["x402/payment-response"]. The index of x402 sellers is two free
// tools, index_search and index_summary.
//
// The package only speaks MCP: a paid call goes through the api's one
// pipeline (Caller), which records it in the event log, queues it on River,
// and releases its result once settled, as for an HTTP request.
package mcp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/x402"
)

// Path is where the api mounts the MCP endpoint.
const Path = "/mcp"

// Meta keys of x402's MCP transport.
const (
	metaPayment         = "x402/payment"
	metaPaymentResponse = "x402/payment-response"
	metaError           = "x402/error"
)

// Caller runs paid calls through the service's one pipeline.
type Caller interface {
	// Call runs a call of op with args (the tool's JSON arguments), paid by
	// payment (a PAYMENT-SIGNATURE value, "" when the call carries none),
	// and waits for its end. While it runs, progress is called every few
	// seconds.
	Call(ctx context.Context, op string, args []byte, payment string, progress func()) Outcome
}

// Outcome is how a paid call ended, for the tool result. Exactly one of
// Result, PaymentRequired and Failure is set.
type Outcome struct {
	// Result is the call's result (JSON), set once it is paid and settled.
	Result json.RawMessage
	// PaymentRequired is the x402 PaymentRequired (JSON) answering a call
	// without a payment, with a refused one, or whose payment could not be
	// settled; its "error" names the reason.
	PaymentRequired json.RawMessage
	// Settlement is the settlement of a paid call, or the failed one of a
	// call whose payment could not be settled.
	Settlement *x402.SettleResponse
	// Failure is any other end: bad arguments (nothing charged), the
	// operation failed (the payment is not settled), still running.
	Failure *Failure
}

// Failure is a tool error that is not about payment, in the body layout of
// the HTTP API's errors.
type Failure struct {
	Code    string `json:"error"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	CallID  string `json:"call_id,omitempty"`
	// RetryAfter, when set, is how many seconds to wait before calling
	// again (the HTTP API's Retry-After).
	RetryAfter int `json:"retry_after,omitempty"`
}

// Config configures the MCP endpoint. Fields without a default are required.
type Config struct {
	// Ops are the operations sold now, in catalogue order: each is a tool.
	Ops []jobs.Operation
	// Payments quotes the operations (the price and accepts in each tool's
	// _meta).
	Payments x402.Verifier
	// Calls runs the paid calls.
	Calls Caller
	// Index answers the free index tools.
	Index *index.Reader
	// Wait bounds how long a tool call waits for its result: the job's
	// timeout and its settlement. The HTTP write deadline of a tool call is
	// extended to it.
	Wait time.Duration
	// Logger receives the SDK's errors.
	Logger *slog.Logger
	// Version is the server version announced at initialization.
	Version string
	// MaxBatch is the most messages one JSON-RPC batch may hold (batches
	// are part of the protocol before 2025-06-18); a larger batch is
	// refused whole, before any of it runs: HTTP 400 with a JSON-RPC error
	// -32600 whose data's "error" is "batch_too_large". Defaults to
	// DefaultMaxBatch.
	MaxBatch int
	// IndexQueries is how many calls of the free index tools may query the
	// database at once in the process; the others wait their turn (or the
	// end of their request). Defaults to DefaultIndexQueries.
	IndexQueries int
	// Admit, when set, is asked before a request is served, with the
	// number of its messages that are not paid tool calls (a GET, a
	// DELETE or a body that holds no message counts one): false when it
	// answered the request itself (a client past its rate). It is not
	// asked for a request of paid tool calls only, which are limited as
	// payments are, by the pipeline.
	Admit func(w http.ResponseWriter, r *http.Request, free int) bool
	// Metrics, when set, counts the batches refused.
	Metrics *metrics.Metrics
}

// Defaults of Config.
const (
	// DefaultMaxBatch is Config.MaxBatch's default.
	DefaultMaxBatch = 50
	// DefaultIndexQueries is Config.IndexQueries's default.
	DefaultIndexQueries = 4
)

// Handler is the MCP endpoint: an http.Handler for Path.
type Handler struct {
	http     http.Handler
	wait     time.Duration
	maxBatch int
	admit    func(w http.ResponseWriter, r *http.Request, free int) bool
	metrics  *metrics.Metrics
	// paid are the names of the paid tools.
	paid map[string]bool
}

// New returns the MCP endpoint for config, with every tool defined.
func New(config *Config) (*Handler, error) {
	cfg := *config
	if cfg.Calls == nil || cfg.Payments == nil || cfg.Index == nil || cfg.Logger == nil {
		return nil, errors.New("mcp: Calls, Payments, Index and Logger are required")
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "x402d", Title: "x402d: pay-per-call utilities and the x402 index", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       cfg.Logger,
	})
	paid := make(map[string]bool, len(cfg.Ops))
	for _, op := range cfg.Ops {
		tool, err := paidTool(op, cfg.Payments)
		if err != nil {
			return nil, err
		}
		server.AddTool(tool, callHandler(op.Name, cfg.Calls))
		paid[op.Name] = true
	}
	if err := addIndexTools(server, cfg.Index, make(chan struct{}, cmp.Or(cfg.IndexQueries, DefaultIndexQueries))); err != nil {
		return nil, err
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		Stateless: true,
		Logger:    cfg.Logger,
		// The SDK refuses a request that reached a loopback address with
		// another Host, against DNS rebinding onto a local server with
		// local powers. This endpoint is public and holds no credentials:
		// it offers what the HTTP API offers, to whoever pays. Behind a
		// reverse proxy on the same machine every request is such a
		// request.
		DisableLocalhostProtection: true,
	})
	return &Handler{http: h, wait: cfg.Wait, maxBatch: cmp.Or(cfg.MaxBatch, DefaultMaxBatch), admit: cfg.Admit, metrics: cfg.Metrics, paid: paid}, nil
}

// instructions tell an agent how the tools are paid.
const instructions = "Paid tools cost a fixed USDC amount per call, paid with x402 v2 (scheme exact): " +
	"call without payment to get the PaymentRequired (the tool error's structuredContent and _meta[\"x402/error\"]), " +
	"sign one of its accepts and call again with the PaymentPayload in _meta[\"x402/payment\"]. " +
	"Arguments are checked before any payment; a failed operation is never settled; " +
	"the same payment sent again with the same arguments returns the same result, as does a new payment carrying the same " +
	"payment-identifier extension id (extensions[\"payment-identifier\"].info.id, declared in every PaymentRequired). " +
	"index_search and index_summary are free."

// ServeHTTP answers an MCP request. A tool call may wait for its result up
// to the configured Wait, longer than the api's usual write deadline.
//
// A POST's body is read first: a batch larger than MaxBatch is refused
// whole, and Admit is asked with the number of its messages that are not
// paid tool calls.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	free := 1
	if r.Method == http.MethodPost && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				http.Error(w, fmt.Sprintf("request body exceeds %d bytes", tooLarge.Limit), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "failed to read body", http.StatusBadRequest)
			return
		}
		msgs, batch := split(body, h.maxBatch)
		if batch && len(msgs) > h.maxBatch {
			h.metrics.FreeRefused("mcp", "batch_too_large")
			batchTooLarge(w, h.maxBatch)
			return
		}
		if free = h.unpaid(msgs); len(msgs) == 0 {
			free = 1 // an empty or unreadable batch, which the SDK refuses
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	if h.admit != nil && free > 0 && !h.admit(w, r, free) {
		return
	}
	if h.wait > 0 {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.wait + 15*time.Second))
	}
	h.http.ServeHTTP(w, r)
}

// callHandler answers a tool call of op: it reads the payment from _meta,
// runs the call through calls, and renders its outcome.
func callHandler(op string, calls Caller) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := []byte(req.Params.Arguments)
		if len(args) == 0 || string(args) == "null" {
			args = []byte("{}")
		}
		payment, err := paymentOf(req.Params.Meta)
		if err != nil {
			return failed(&Failure{Code: "invalid_payment", Message: err.Error()}), nil
		}
		var progress func()
		if token := req.Params.GetProgressToken(); token != nil {
			start := time.Now()
			progress = func() {
				elapsed := time.Since(start).Seconds()
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: token, Progress: elapsed,
					Message: fmt.Sprintf("%s: paid, running for %.0f s", op, elapsed),
				})
			}
		}
		return render(calls.Call(ctx, op, args, payment, progress)), nil
	}
}

// paymentOf returns the payment of a tool call's _meta as a
// PAYMENT-SIGNATURE value: the base64 JSON string as sent, or an object
// (the transport spec's form) encoded so. No payment is "".
func paymentOf(meta mcp.Meta) (string, error) {
	v, ok := meta[metaPayment]
	if !ok || v == nil {
		return "", nil
	}
	switch p := v.(type) {
	case string:
		return p, nil
	case map[string]any:
		raw, err := json.Marshal(p)
		if err != nil {
			return "", fmt.Errorf("_meta[%q]: %w", metaPayment, err)
		}
		return base64.StdEncoding.EncodeToString(raw), nil
	}
	return "", fmt.Errorf("_meta[%q] must be a PaymentPayload object or its base64 JSON string", metaPayment)
}

// render turns an outcome into the tool result x402's MCP transport
// specifies.
func render(out Outcome) *mcp.CallToolResult {
	switch {
	case out.Result != nil:
		res := &mcp.CallToolResult{
			StructuredContent: out.Result,
			Content:           []mcp.Content{&mcp.TextContent{Text: string(out.Result)}},
		}
		if out.Settlement != nil {
			res.Meta = mcp.Meta{metaPaymentResponse: out.Settlement}
		}
		return res
	case out.PaymentRequired != nil:
		return paymentRequired(out.PaymentRequired, out.Settlement)
	case out.Failure != nil:
		return failed(out.Failure)
	}
	return failed(&Failure{Code: "internal_error", Message: "the call ended without an answer"})
}

// paymentRequired is the tool error of a payment required, refused or not
// settled: the PaymentRequired as structuredContent, in _meta["x402/error"]
// (Cloudflare's agents client reads it there) and wrapped in content[0]'s
// text; a failed settlement is added as "x402/payment-response".
func paymentRequired(required json.RawMessage, settlement *x402.SettleResponse) *mcp.CallToolResult {
	var pr map[string]any
	if err := json.Unmarshal(required, &pr); err != nil {
		return failed(&Failure{Code: "internal_error", Message: "the payment requirements could not be read"})
	}
	message := "Payment required"
	if reason, _ := pr["error"].(string); reason != "" {
		message = "Payment required: " + reason
	}
	meta := mcp.Meta{metaError: pr}
	if settlement != nil {
		pr[metaPaymentResponse] = settlement
		meta[metaPaymentResponse] = settlement
		message = "Payment settlement failed: " + settlement.ErrorReason
	}
	text, err := json.Marshal(map[string]any{metaError: map[string]any{"code": http.StatusPaymentRequired, "message": message, "data": pr}})
	if err != nil {
		return failed(&Failure{Code: "internal_error", Message: "the payment requirements could not be encoded"})
	}
	return &mcp.CallToolResult{
		IsError:           true,
		StructuredContent: pr,
		Content:           []mcp.Content{&mcp.TextContent{Text: string(text)}},
		Meta:              meta,
	}
}

// failed is a tool error that is not about payment: its text is the JSON
// error of the HTTP API. It has no structuredContent, which the tool's
// output schema would not admit.
func failed(f *Failure) *mcp.CallToolResult {
	text, _ := json.Marshal(f)
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}}
}
