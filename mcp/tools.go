package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/x402"
)

// FreeTools returns the names of the free tools, listed after the paid
// ones.
func FreeTools() []string {
	return []string{toolIndexSearch, toolIndexSummary, toolIndexHost, toolIndexChanges}
}

// The free tools' names.
const (
	toolIndexSearch  = "index_search"
	toolIndexSummary = "index_summary"
	toolIndexHost    = "index_host"
	toolIndexChanges = "index_changes"
)

// paymentRequiredSchema admits the PaymentRequired a paid tool answers as
// its structuredContent when a payment is required, refused or not settled.
func paymentRequiredSchema() map[string]any {
	return map[string]any{
		"type":     "object",
		"required": []any{"x402Version", "accepts"},
		"properties": map[string]any{
			"x402Version":       map[string]any{"type": "integer"},
			"error":             map[string]any{"type": "string"},
			"accepts":           map[string]any{"type": "array"},
			metaPaymentResponse: map[string]any{"type": "object"},
			"resource":          map[string]any{"type": "object"},
			"extensions":        map[string]any{"type": "object"},
		},
	}
}

// paidTool is the tool of op: its input schema (the one the OpenAPI
// document and the bazaar extension use), its output schema (the result,
// or the PaymentRequired of a tool error), annotations, and the price and
// accepted payments in _meta.
func paidTool(op jobs.Operation, payments x402.Verifier) (*mcp.Tool, error) {
	input, err := x402.EmbeddableSchema(op.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("mcp: %s input schema: %w", op.Name, err)
	}
	result, err := op.ResultSchema()
	if err != nil {
		return nil, fmt.Errorf("mcp: %w", err)
	}
	q, err := payments.Quote(op.Name)
	if err != nil {
		return nil, fmt.Errorf("mcp: quote %s: %w", op.Name, err)
	}
	var required x402.PaymentRequired
	if err := x402.DecodeHeader(q.PaymentRequired, &required); err != nil {
		return nil, fmt.Errorf("mcp: own quote of %s: %w", op.Name, err)
	}
	networks := make([]string, 0, len(required.Accepts))
	for _, a := range required.Accepts {
		networks = append(networks, a.Network)
	}
	price, err := strconv.ParseFloat(op.Price, 64)
	if err != nil {
		return nil, fmt.Errorf("mcp: price of %s: %w", op.Name, err)
	}
	deterministic := !op.UsesModel && !op.ReadsWeb
	return &mcp.Tool{
		Name:        op.Name,
		Title:       op.Name,
		Description: fmt.Sprintf("%s Price %s USD in USDC per call, paid with x402 v2 (see the server's instructions); nothing is charged for bad arguments or a failed run.", op.Description, op.Price),
		InputSchema: input,
		OutputSchema: map[string]any{
			"type":  "object",
			"anyOf": []any{result, paymentRequiredSchema()},
		},
		Annotations: &mcp.ToolAnnotations{
			Title:           op.Name,
			ReadOnlyHint:    true,
			DestructiveHint: new(false),
			IdempotentHint:  deterministic,
			OpenWorldHint:   new(op.ReadsWeb),
		},
		Meta: mcp.Meta{
			"x402/price":    map[string]any{"mode": "fixed", "currency": "USD", "amount": op.Price},
			"x402/accepts":  required.Accepts,
			"x402/networks": networks,
			// Cloudflare's agents client shows these in the tool's description.
			"agents-x402/paymentRequired": true,
			"agents-x402/priceUSD":        price,
		},
	}, nil
}

// addIndexTools adds the free tools over the index of x402 sellers. Their
// calls query the database one per slot of queries at most: the others
// wait for a slot.
func addIndexTools(server *mcp.Server, reader *index.Reader, queries chan struct{}) error {
	free := &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: new(false), IdempotentHint: true, OpenWorldHint: new(false)}
	add := func(tool *mcp.Tool, h mcp.ToolHandler) { server.AddTool(tool, queued(queries, h)) }
	add(&mcp.Tool{
		Name:        toolIndexSearch,
		Title:       "Search the index of x402 sellers",
		Description: "Free. Hosts selling over x402, from every x402 discovery listing and the sellers' own origins, with their services, prices, networks, measured liveness, uptime and latency over 24 hours, 7 and 30 days, whether their 402 asks what their listing says, the paid calls, payers and last call over 30 days that Bazaar's listings report (null where none does), and what the chain says: the USDC transfers into their payTo addresses over 24 hours, 7 and 30 days (transactions, volume, distinct payers), who sent them (a known facilitator, the seller itself, the payer, other) and a wash signal (the top payer's share, payers funded by the seller (null until every payer is looked at), payments to itself), null where not read, each window saying whether it was read complete; filtered and sorted.",
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"q":     map[string]any{"type": "string", "maxLength": 200, "description": "text filter on host names, resource URLs and descriptions"},
				"sort":  map[string]any{"type": "string", "enum": index.SortKeys, "default": "services"},
				"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": index.MaxHostsLimit, "default": index.DefaultHostsLimit},
				"quote_matches_listing": map[string]any{"type": "string", "enum": []any{"true", "false", "null"},
					"description": "only the hosts whose last quote matched their listing (true), did not (false), or was not compared (null)"},
				"min_payers": map[string]any{"type": "integer", "minimum": 0,
					"description": "only the hosts with at least this many distinct payers on chain over 30 days (hosts not measured are left out)"},
				"min_volume_usdc": map[string]any{"type": "string", "pattern": `^[0-9]{1,12}(\.[0-9]{1,6})?$`,
					"description": "only the hosts that received at least this much USDC on chain over 30 days (hosts not measured are left out)"},
				"max_top_payer_share": map[string]any{"type": "number", "minimum": 0, "maximum": 1,
					"description": "only the hosts whose top payer paid at most this share of their 30 days' volume on chain: leaves out the sellers one payer keeps busy"},
			},
			"additionalProperties": false,
		},
		Annotations: free,
	}, indexQuery(reader.Search))
	add(&mcp.Tool{
		Name:        toolIndexSummary,
		Title:       "Summary of the index of x402 sellers",
		Description: "Free. The index's summary: how many sellers and services, how many are live, price bands, networks, and when it was last crawled.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false},
		Annotations: free,
	}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s, err := reader.Summary(ctx)
		if err != nil {
			return nil, err
		}
		return structured(s)
	})
	add(&mcp.Tool{
		Name:        toolIndexHost,
		Title:       "One seller of the index of x402 sellers",
		Description: "Free. One host: its entry with its uptime and latency history, its services (price, networks, description, sources, listed payment options, and the use over 30 days their listings report, null where none does), its probes by hour over 30 days, how its 402 differed from its listing, its timeline of changes, and its on-chain figures per payTo address.",
		InputSchema: map[string]any{
			"type":                 "object",
			"properties":           map[string]any{"host": map[string]any{"type": "string", "maxLength": 253, "description": "the host name, as index_search answers it"}},
			"required":             []any{"host"},
			"additionalProperties": false,
		},
		Annotations: free,
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var q struct {
			Host string `json:"host"`
		}
		if bad, err := indexArgs(req, &q); bad != nil || err != nil {
			return bad, err
		}
		d, err := reader.HostDetail(ctx, strings.ToLower(q.Host))
		if errors.Is(err, index.ErrUnknownHost) {
			return failed(&Failure{Code: "not_found", Message: "the index has never listed " + q.Host, Field: "host"}), nil
		}
		if err != nil {
			return nil, err
		}
		return structured(d)
	})
	add(&mcp.Tool{
		Name:        toolIndexChanges,
		Title:       "Changes of the x402 market",
		Description: "Free. The index's feed of changes, oldest first, a page after a cursor: services added and retired, prices and networks changed, hosts gone live or dead. Pass the answer's next as since to follow it.",
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"since": map[string]any{"type": "string", "description": "a cursor (the next of an earlier page) or an RFC 3339 time; empty: from the first change"},
				"host":  map[string]any{"type": "string", "maxLength": 253, "description": "only the changes of this host"},
				"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": index.MaxChangesLimit, "default": index.DefaultChangesLimit},
			},
			"additionalProperties": false,
		},
		Annotations: free,
	}, indexQuery(reader.Changes))
	return nil
}

// queued returns h run while it holds a slot of queries: a call waits for
// a free slot, or ends with its request.
func queued(queries chan struct{}, h mcp.ToolHandler) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case queries <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("mcp: wait for an index query slot: %w", ctx.Err())
		}
		defer func() { <-queries }()
		return h(ctx, req)
	}
}

// checker is a query whose defaults and bounds Check sets.
type checker interface{ Check() error }

// indexQuery is the handler of an index tool that reads its arguments as
// a query of type Q and answers read's result as structured content.
func indexQuery[Q, A any](read func(context.Context, Q) (A, error)) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var q Q
		if bad, err := indexArgs(req, &q); bad != nil || err != nil {
			return bad, err
		}
		answer, err := read(ctx, q)
		if err != nil {
			return nil, err
		}
		return structured(answer)
	}
}

// indexArgs decodes the arguments of an index tool into v, strictly, and
// checks them when v has a Check. A refused argument is answered as a tool
// error naming its field (bad).
func indexArgs(req *mcp.CallToolRequest, v any) (bad *mcp.CallToolResult, err error) {
	if args := req.Params.Arguments; len(args) > 0 {
		if err := jobs.DecodeStrict(args, v); err != nil {
			var invalid *jobs.InvalidError
			if errors.As(err, &invalid) {
				return failed(&Failure{Code: "invalid_request", Message: invalid.Message, Field: invalid.Field}), nil
			}
			return nil, err
		}
	}
	if c, ok := v.(checker); ok {
		if err := c.Check(); err != nil {
			var qe *index.QueryError
			if errors.As(err, &qe) {
				return failed(&Failure{Code: "invalid_request", Message: qe.Message, Field: qe.Field}), nil
			}
			return nil, err
		}
	}
	return nil, nil
}

// structured is the tool result of v: as structuredContent and as JSON text.
func structured(v any) (*mcp.CallToolResult, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("mcp: encode result: %w", err)
	}
	return &mcp.CallToolResult{StructuredContent: json.RawMessage(raw), Content: []mcp.Content{&mcp.TextContent{Text: string(raw)}}}, nil
}
