package api

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// obj is a JSON object of the OpenAPI document.
type obj = map[string]any

// ref returns a reference to the component schema name.
func ref(name string) obj { return obj{"$ref": "#/components/schemas/" + name} }

// jsonContent returns the content map of an application/json schema.
func jsonContent(schema any) obj { return obj{"application/json": obj{"schema": schema}} }

// openAPIDocument returns the OpenAPI 3.1.0 document of the api (API version
// 2.0.0): every paid operation with its request schema, its result layout
// (the schema of its output example, plus call_id and op) and its 402 quote
// (with the operation's own quote as example when it is sold), the poll,
// discovery, index and health endpoints.
func openAPIDocument(ops []jobs.Operation, quotes map[string]*x402.Quote, publicURL string) ([]byte, error) {
	errResp := func(desc string) obj {
		return obj{"description": desc, "content": jsonContent(ref("Error"))}
	}
	str := obj{"type": "string"}
	quoteHeaders := obj{
		"PAYMENT-REQUIRED": obj{"description": "base64 (standard alphabet) of the JSON x402 v2 PaymentRequired: the same object as the body's PaymentRequired fields", "schema": str},
		"WWW-Authenticate": obj{"description": `an X402 challenge naming the primary option: X402 realm="x402d", resource="<url>", version="2", scheme="exact", network="eip155:8453", amount="<atomic units>", asset="<token>", pay_to="<address>", price="<amount> USD", header="PAYMENT-REQUIRED", and error="<reason>" when a payment was refused`, "schema": str},
	}
	paths := obj{}
	for _, op := range ops {
		input, err := x402.EmbeddableSchema(op.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("openapi: %s: %w", op.Name, err)
		}
		result, err := op.ResultSchema()
		if err != nil {
			return nil, fmt.Errorf("openapi: %w", err)
		}
		example, err := resultExample(op)
		if err != nil {
			return nil, err
		}
		quote := obj{"schema": ref("Quote")}
		if q := quotes[op.Name]; q != nil {
			quote["example"] = json.RawMessage(q.Body)
		}
		paths["/api/x402/"+op.Name] = obj{"post": obj{
			"operationId": op.Name,
			"summary":     op.Description,
			"description": fmt.Sprintf("Price %s USD (USDC), paid per call with x402 v2, scheme exact. Without a PAYMENT-SIGNATURE header the answer is 402 with the quote and the body is not read. With one, the body is validated (400, nothing charged), the payment verified (402 with the reason), the operation run and the payment settled only if it succeeded.", op.Price),
			"security":    []any{},
			// Discovery from the seller's origin (x402scan's order: this
			// first, then /.well-known/x402, then DNS _x402).
			"x-payment-info": obj{"protocols": []any{obj{"x402": obj{}}}, "pricingMode": "fixed",
				"price": obj{"mode": "fixed", "currency": "USD", "amount": op.Price}},
			"parameters": []any{obj{
				"name": "PAYMENT-SIGNATURE", "in": "header", "required": false,
				"description": "base64 (standard alphabet) of the JSON x402 v2 PaymentPayload answering one of the quote's accepts", "schema": str,
			}},
			"requestBody": obj{"required": true, "content": obj{"application/json": obj{"schema": input, "example": op.InputExample}}},
			"responses": obj{
				"200": obj{
					"description": "the result; the payment is settled",
					"headers":     obj{"PAYMENT-RESPONSE": obj{"description": "base64 of the x402 SettleResponse", "schema": str}},
					"content":     obj{"application/json": obj{"schema": result, "example": example}},
				},
				"202": obj{"description": "paid and still running after CALL_WAIT: long-poll the URL", "content": jsonContent(ref("Running"))},
				"400": errResp("the body does not meet the operation's rules, or the payment's payment-identifier id is malformed (invalid_payment_identifier); nothing is charged"),
				"409": errResp("payment_identifier_conflict: the payer used this payment identifier for another request; nothing is charged"),
				"402": obj{"description": "payment required, or the payment was refused (error names the reason, spelled as the official x402 packages spell theirs)",
					"headers": quoteHeaders, "content": obj{"application/json": quote}},
				"410": errResp("result_expired: the payment was used by this very request, whose result was let go after the time results are kept"),
				"413": errResp("the body is over the size limit"),
				"502": errResp("the operation failed; the payment is not settled"),
				"503": errResp("not sold now (receiving or model configuration incomplete); no quote is issued"),
			},
		}}
	}
	paths["/api/x402/calls/{id}"] = obj{"get": obj{
		"operationId": "poll",
		"summary":     "Long-poll a paid call; answers like the paid request once it is done.",
		"parameters": []any{
			obj{"name": "id", "in": "path", "required": true, "schema": str},
			obj{"name": "token", "in": "query", "required": true, "description": "the capability given in the 202's poll URL", "schema": str},
			obj{"name": "wait", "in": "query", "description": "seconds to wait for the result", "schema": obj{"type": "integer", "minimum": 0, "maximum": 60}},
		},
		"responses": obj{
			"200": obj{"description": "the result, as the paid request would have answered", "content": jsonContent(obj{"type": "object", "required": []string{"call_id", "op"}})},
			"202": obj{"description": "still running", "content": jsonContent(ref("Running"))},
			"400": errResp("wait is not a whole number of seconds"),
			"402": obj{"description": "the payment could not be settled; the result is withheld", "content": jsonContent(ref("Quote"))},
			"404": errResp("no such call, or a wrong token"),
			"410": errResp("result_expired: the result was let go after the time results are kept (RESULT_TTL); the payment was settled"),
			"502": errResp("the operation failed; the payment is not settled"),
		},
	}}
	get := func(id, summary, schema string, params ...obj) obj {
		g := obj{"operationId": id, "summary": summary,
			"responses": obj{"200": obj{"description": "OK", "content": jsonContent(ref(schema))}}}
		if len(params) > 0 {
			ps := make([]any, len(params))
			for i, p := range params {
				ps[i] = p
			}
			g["parameters"] = ps
			g["responses"].(obj)["400"] = errResp("a query parameter is out of range")
		}
		return obj{"get": g}
	}
	query := func(name, desc string, schema obj) obj {
		return obj{"name": name, "in": "query", "description": desc, "schema": schema}
	}
	paths["/.well-known/x402"] = get("wellKnownFanOut", "The URLs of the operations sold now: {version: 1, resources: [URL]} (x402's discovery extension).", "WellKnownFanOut")
	paths["/.well-known/x402.json"] = get("wellKnown", "Service manifest: x402 version, networks, every operation with its price and whether it is sold now.", "WellKnown")
	paths["/api/x402/discovery/resources"] = get("discoveryResources", "The operations sold now, in the x402 Bazaar list format.", "DiscoveryList",
		query("type", "resource type; only http resources exist", obj{"type": "string"}),
		query("limit", "page size", obj{"type": "integer", "minimum": 1, "maximum": 100, "default": 20}),
		query("offset", "items to skip", obj{"type": "integer", "minimum": 0, "default": 0}))
	paths["/api/xindex/summary"] = get("indexSummary", "Summary of the index of x402 sellers (xindex-1.0).", "IndexSummary")
	paths["/api/xindex/hosts"] = get("indexHosts", "Indexed seller hosts.", "IndexHosts",
		query("q", "text filter on host names and descriptions (at most 200 characters)", obj{"type": "string", "maxLength": 200}),
		query("limit", "number of hosts", obj{"type": "integer", "minimum": 1, "maximum": index.MaxHostsLimit, "default": index.DefaultHostsLimit}),
		query("sort", "order", obj{"type": "string", "enum": index.SortKeys, "default": "services"}),
		query("quote_matches_listing", "only the hosts whose last quote matched their listing (true), did not (false), or was not compared (null)", obj{"type": "string", "enum": []string{"true", "false", "null"}}),
		query("min_payers", "only the hosts with at least this many distinct payers on chain over 30 days (hosts not measured are left out)", obj{"type": "integer", "minimum": 0}),
		query("min_volume_usdc", "only the hosts that received at least this much USDC on chain over 30 days (hosts not measured are left out)", obj{"type": "string", "pattern": `^[0-9]{1,12}(\.[0-9]{1,6})?$`}),
		query("max_top_payer_share", "only the hosts whose top payer paid at most this share of their 30 days' volume on chain (hosts not measured or without volume are left out)", obj{"type": "number", "minimum": 0, "maximum": 1}))
	paths["/api/xindex/resources"] = get("indexResources", fmt.Sprintf("Indexed resources with their accepts, description, tags and call contract (input and output schema), their host's liveness, the receivers their origin proved it controls, and on-chain evidence (null until measured); ranked by text relevance and evidence: a text's relevance ranks at most the first %d of its matches, and the answer says partial when more matched.", store.ResourceRankCap), "IndexResources",
		query("q", "text in web-search syntax, matched against tags, description and URL (at most 200 characters)", obj{"type": "string", "maxLength": 200}),
		query("network", "a network of one of its options: CAIP-2 (eip155:8453) or a known name (base)", str),
		query("asset", "the asset of one of its options", str),
		query("scheme", "the scheme of one of its options (exact)", str),
		query("pay_to", "the receiver of one of its options (an EVM address in any case)", str),
		query("max_usd", "priced at most this many USDC", obj{"type": "number", "minimum": 0}),
		query("tags", "carries every one of these tags (comma-separated or repeated; any case)", str),
		query("live", "its host's liveness: true, false, or null (not measured)", obj{"type": "string", "enum": []string{"true", "false", "null"}}),
		query("min_payers", "only the resources whose host has at least this many distinct payers on chain over 30 days, as the hosts list's min_payers (hosts not measured are left out)", obj{"type": "integer", "minimum": 0}),
		query("sort", "order; relevance by default with q, updated without; payers_30d, volume_30d and transactions_30d are the hosts list's sorts by its host's on-chain figures, the highest first, those not measured last", obj{"type": "string", "enum": index.ResourceSortKeys}),
		query("limit", "number of resources", obj{"type": "integer", "minimum": 1, "maximum": index.MaxResourcesLimit, "default": index.DefaultResourcesLimit}),
		query("cursor", "the next of an earlier page", str))
	paths["/api/xindex/bazaar/discovery/resources"] = get("indexBazaarList", "The whole index in the official Bazaar discovery API's list (base URL /api/xindex/bazaar for withBazaar(new HTTPFacilitatorClient({url}))), by resource URL.", "BazaarList",
		query("type", "http (the index holds http resources; mcp lists none)", obj{"type": "string", "enum": []string{"http", "mcp"}}),
		query("limit", "page size", obj{"type": "integer", "minimum": 1, "maximum": index.MaxBazaarLimit, "default": index.DefaultBazaarLimit}),
		query("offset", "items to skip", obj{"type": "integer", "minimum": 0, "default": 0}),
		query("payTo", "the receiver of one of its options", str), query("scheme", "the scheme of one of its options", str),
		query("network", "a network of one of its options (CAIP-2)", str), query("extensions", "an extension key its listing carries (bazaar)", str))
	paths["/api/xindex/bazaar/discovery/search"] = get("indexBazaarSearch", "The whole index in the official Bazaar discovery API's search: the most relevant first (relevance and evidence), a page after a cursor.", "BazaarSearch",
		query("query", "text in web-search syntax (required)", obj{"type": "string", "maxLength": 200}),
		query("type", "http (mcp finds none)", obj{"type": "string", "enum": []string{"http", "mcp"}}),
		query("limit", "page size", obj{"type": "integer", "minimum": 1, "maximum": index.MaxBazaarLimit, "default": index.DefaultBazaarLimit}),
		query("cursor", "the cursor of an earlier page", str),
		query("payTo", "the receiver of one of its options", str), query("scheme", "the scheme of one of its options", str),
		query("network", "a network of one of its options (CAIP-2)", str), query("extensions", "an extension key its listing carries (bazaar)", str))
	hostParam := obj{"name": "host", "in": "path", "required": true, "description": "the host name, as in the hosts list", "schema": str}
	paths["/api/xindex/hosts/{host}"] = obj{"get": obj{"operationId": "indexHost", "summary": "One host: its entry with its history, its services, its probes by hour over 30 days, its timeline of changes.",
		"parameters": []any{hostParam},
		"responses": obj{"200": obj{"description": "OK", "content": jsonContent(ref("IndexHostDetail"))},
			"404": errResp("the index has never listed the host")}}}
	paths["/x402-index/hosts/{host}"] = obj{"get": obj{"operationId": "indexHostPage", "summary": "One host as a web page, its probes drawn as SVG.",
		"parameters": []any{hostParam},
		"responses": obj{"200": obj{"description": "HTML", "content": obj{"text/html": obj{"schema": str}}},
			"404": errResp("the index has never listed the host")}}}
	paths["/x402-index/changes"] = obj{"get": obj{"operationId": "indexChangesPage", "summary": "The latest changes of the market as a web page, newest first.",
		"parameters": []any{query("limit", "number of changes", obj{"type": "integer", "minimum": 1, "maximum": index.MaxChangesLimit, "default": index.DefaultChangesLimit})},
		"responses": obj{"200": obj{"description": "HTML", "content": obj{"text/html": obj{"schema": str}}},
			"400": errResp("a query parameter is out of range")}}}
	paths["/api/xindex/changes"] = get("indexChanges", "Changes of the market, oldest first, a page after a cursor: services added and retired, prices and networks changed, hosts gone live or dead.", "IndexChanges",
		query("since", "a cursor (the next of an earlier page) or an RFC 3339 time; empty: from the first change", obj{"type": "string"}),
		query("host", "only the changes of this host", obj{"type": "string", "maxLength": 253}),
		query("limit", "number of changes", obj{"type": "integer", "minimum": 1, "maximum": index.MaxChangesLimit, "default": index.DefaultChangesLimit}))
	paths["/api/xindex/changes.atom"] = obj{"get": obj{"operationId": "indexChangesAtom", "summary": "The latest changes of the market as an Atom feed, newest first.",
		"parameters": []any{query("limit", "number of entries", obj{"type": "integer", "minimum": 1, "maximum": index.MaxChangesLimit, "default": index.DefaultChangesLimit})},
		"responses": obj{"200": obj{"description": "Atom 1.0", "content": obj{"application/atom+xml": obj{"schema": str}}},
			"400": errResp("a query parameter is out of range")}}}
	paths["/x402-index"] = obj{"get": obj{"operationId": "indexPage", "summary": "The index as a web page.",
		"responses": obj{"200": obj{"description": "HTML", "content": obj{"text/html": obj{"schema": str}}}}}}
	paths["/mcp"] = obj{"post": obj{
		"operationId": "mcp",
		"summary":     "Model Context Protocol endpoint (Streamable HTTP, stateless): every operation sold now as a paid tool, the index as the free tools index_search and index_summary.",
		"description": `JSON-RPC 2.0 messages of MCP. A paid tool is paid as x402's MCP transport specifies: called without payment it answers a tool error whose structuredContent (and _meta["x402/error"]) is the PaymentRequired; called again with the PaymentPayload in params._meta["x402/payment"] (an object, or its base64 JSON string) it answers the result, with the settlement in _meta["x402/payment-response"]. Bad arguments are refused before payment; a failed operation is never settled; the same payment with the same arguments returns the stored result.`,
		"security":    []any{},
		"requestBody": obj{"required": true, "content": jsonContent(obj{"type": "object", "required": []string{"jsonrpc", "method"}})},
		"responses": obj{
			"200": obj{"description": "the JSON-RPC response, as JSON or as a server-sent event stream (with progress notifications while a paid tool runs)",
				"content": obj{"application/json": obj{"schema": obj{"type": "object"}}, "text/event-stream": obj{"schema": str}}},
			"202": obj{"description": "a notification or response was accepted"},
			"400": obj{"description": "not a valid MCP request, or a JSON-RPC batch of more than MCP_MAX_BATCH messages (one JSON-RPC error -32600 for the whole batch, data.error batch_too_large; none of it run)"},
			"405": obj{"description": "only POST is served (stateless)"},
		},
	}}
	// The free surfaces are limited per client address.
	for path, p := range paths {
		if path == "/mcp" || strings.HasPrefix(path, "/api/xindex/") || strings.HasPrefix(path, "/x402-index") {
			for _, op := range p.(obj) {
				op.(obj)["responses"].(obj)["429"] = obj{
					"description": "rate_limited: the client address is past FREE_REQUESTS_PER_SECOND (an MCP request counts its messages but paid tool calls); nothing was run",
					"headers":     obj{"Retry-After": obj{"description": "seconds to wait", "schema": obj{"type": "integer"}}},
					"content":     jsonContent(ref("Error")),
				}
			}
		}
	}
	paths["/healthz"] = get("healthz", "The process is up.", "Health")
	paths["/readyz"] = obj{"get": obj{"operationId": "readyz", "summary": "The database is reachable.", "responses": obj{
		"200": obj{"description": "ready", "content": jsonContent(ref("Health"))},
		"503": errResp("the database does not answer"),
	}}}
	paths["/openapi.json"] = obj{"get": obj{"operationId": "openapi", "summary": "This document.",
		"responses": obj{"200": obj{"description": "OpenAPI 3.1.0", "content": jsonContent(obj{"type": "object"})}}}}

	doc := obj{
		"openapi": "3.1.0",
		"info": obj{
			"title":       "x402d",
			"version":     "2.0.0",
			"description": serviceDescription + " Paid operations need no account and no API key: access is by payment (x402 v2, PAYMENT-SIGNATURE header).",
		},
		"servers":    []any{obj{"url": publicURL}},
		"security":   []any{},
		"paths":      paths,
		"components": obj{"schemas": componentSchemas()},
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	return raw, nil
}

// resultExample returns op's output example with call_id and op, as a call
// answers it.
func resultExample(op jobs.Operation) (any, error) {
	raw, err := json.Marshal(op.OutputExample)
	if err != nil {
		return nil, fmt.Errorf("openapi: %s output example: %w", op.Name, err)
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil || m == nil {
		m = map[string]any{}
	}
	m["call_id"] = "4f0c2a9e8b7d6c5e4f3a2b1c0d9e8f7a"
	m["op"] = op.Name
	return m, nil
}

// componentSchemas are the shared schemas of the document: errors, the x402
// objects, the discovery documents and the index records of spec 2.2/2.3.
func componentSchemas() obj {
	str := obj{"type": "string"}
	integer := obj{"type": "integer"}
	share := obj{"type": []string{"number", "null"}, "minimum": 0, "maximum": 1}
	nullTime := obj{"type": []string{"string", "null"}, "format": "date-time"}
	nullable := func(t string) obj { return obj{"type": []string{t, "null"}} }
	object := func(required []string, props obj) obj {
		o := obj{"type": "object", "properties": props}
		if len(required) > 0 {
			o["required"] = required
		}
		return o
	}
	array := func(items any) obj { return obj{"type": "array", "items": items} }
	price := object([]string{"mode", "currency", "amount"}, obj{
		"mode": obj{"type": "string", "const": "fixed"}, "currency": obj{"type": "string", "const": "USD"},
		"amount": obj{"type": "string", "pattern": `^[0-9]+\.[0-9]{6}$`},
	})
	host := object([]string{"host", "services", "priced_services", "price_min_usdc", "price_max_usdc", "networks", "sample_resource",
		"sample", "discoverable", "live", "status", "latency_ms", "checked_at", "updated_at",
		"uptime_24h", "uptime_7d", "uptime_30d", "probes_24h", "probes_7d", "probes_30d", "latency_p50_ms", "latency_p95_ms",
		"first_seen", "last_change", "quote_matches_listing", "quality", "evidence"}, obj{
		"host": str, "services": integer, "priced_services": integer,
		"price_min_usdc": nullable("number"), "price_max_usdc": nullable("number"),
		"networks": array(str), "sample_resource": str, "sample": str, "discoverable": obj{"type": "boolean"},
		"live": nullable("boolean"), "status": nullable("integer"), "latency_ms": nullable("integer"),
		"checked_at": obj{"type": []string{"string", "null"}, "format": "date-time"},
		"updated_at": obj{"type": "string", "format": "date-time"},
		"uptime_24h": share, "uptime_7d": share, "uptime_30d": share,
		"probes_24h": integer, "probes_7d": integer, "probes_30d": integer,
		"latency_p50_ms": nullable("integer"), "latency_p95_ms": nullable("integer"),
		"first_seen": nullTime, "last_change": nullTime,
		"quote_matches_listing": obj{"type": []string{"boolean", "null"}, "description": "whether the sample resource's 402 asked what its listing says (network, asset, amount, payTo); null: not compared (no valid quote, a listing without options, a resource no listing lists any more, or a 402 that moved, waiting for its listing to be read again: at once where its origin alone lists it, else within the next pass of the listings that list it)"},
		"quality": obj{"type": []string{"object", "null"}, "required": []string{"services", "calls_30d", "unique_payers_30d_max", "last_called_at"},
			"description": "the use its listings (Bazaar's quality figures) report of its live services, over those that report any; null: none does",
			"properties": obj{
				"services":              obj{"type": "integer", "minimum": 1, "description": "how many of its services report their use"},
				"calls_30d":             obj{"type": []string{"integer", "null"}, "description": "their paid calls over 30 days, summed"},
				"unique_payers_30d_max": obj{"type": []string{"integer", "null"}, "description": "the most distinct payers over 30 days of any one of them (payers are not summed)"},
				"last_called_at":        nullTime,
			}},
		"evidence": ref("IndexEvidence"),
	})
	usdcAmount := obj{"type": "string", "pattern": `^[0-9]+\.[0-9]{6}$`, "description": "USDC, 6 decimals"}
	window := object([]string{"transactions", "volume_usdc", "payers", "complete"}, obj{
		"transactions": integer, "volume_usdc": usdcAmount, "payers": obj{"type": "integer", "description": "distinct payers"},
		"complete": obj{"type": "boolean", "description": "whether every payTo address of the seller was read over the whole window (fully_measured_since at or before its start); false: the figures count only from when each address began to be read, less than the window spans"},
	})
	evidence := obj{"type": []string{"object", "null"},
		"description": "what the chain says of the seller: the USDC transfers into its payTo addresses (Transfer logs; on Solana, SPL Token transfers into their USDC token accounts) read on the networks this service has RPC endpoints for, up to their finality (Solana: finalized); null: none of its addresses is read (not measured), never 0",
		"required":    []string{"networks", "measured_since", "fully_measured_since", "last_24h", "last_7d", "last_30d", "settlements_30d", "senders_30d", "wash_30d", "last_transfer_at"},
		"properties": obj{
			"networks":             array(str),
			"measured_since":       obj{"type": "string", "format": "date-time", "description": "when the first of its addresses began to be read: nothing earlier is counted"},
			"fully_measured_since": obj{"type": "string", "format": "date-time", "description": "when the last of its addresses began to be read (measured_since with one address): a window that began earlier is not complete"},
			"last_24h":             window, "last_7d": window, "last_30d": window,
			"settlements_30d": obj{"type": "integer", "description": "the 30 days' settlements as x402's exact scheme makes them: EIP-3009 (AuthorizationUsed in the same transaction), on Solana a fee payer other than the payer; the others are plain transfers"},
			"senders_30d": array(object([]string{"address", "class", "transactions", "volume_usdc"}, obj{
				"address": str, "class": obj{"type": "string", "enum": []string{index.SenderFacilitator, index.SenderSeller, index.SenderPayer, index.SenderOther},
					"description": "the transaction's sender (on Solana its fee payer): a known facilitator, one of the seller's own payTo addresses, the payer (a plain transfer), or other"},
				"name": obj{"type": "string", "description": "the facilitator's name"}, "transactions": integer, "volume_usdc": usdcAmount,
			})),
			"wash_30d": object([]string{"top_payer", "top_payer_share", "funded_payers", "self_payments"}, obj{
				"top_payer": nullable("string"), "top_payer_share": share,
				"funded_payers": obj{"type": []string{"integer", "null"}, "description": "payers that received USDC from one of the seller's payTo addresses before their first payment; null while one of the 30 days' payers is not looked at for such a transfer yet (unknown, never counted as 0)"},
				"self_payments": obj{"type": "integer", "description": "transfers from one of the seller's own payTo addresses (payer equal to payee)"},
			}),
			"last_transfer_at": nullTime,
		}}
	serviceQuality := obj{"type": []string{"object", "null"}, "required": []string{"calls_30d", "unique_payers_30d", "last_called_at"},
		"description": "the use its listing reports (Bazaar's quality: l30DaysTotalCalls, l30DaysUniquePayers, lastCalledAt); null: no listing of it reports any",
		"properties":  obj{"calls_30d": nullable("integer"), "unique_payers_30d": nullable("integer"), "last_called_at": nullTime}}
	listedAccept := object([]string{"network", "asset", "amount", "pay_to"}, obj{"scheme": str, "network": str, "asset": str, "amount": str, "pay_to": str,
		"max_timeout_seconds": integer,
		"extra":               obj{"type": "object", "description": "the option's extra as listed (EVM: the token's EIP-712 domain {name, version}; Solana: {feePayer}); absent when the listing gives none"}})
	listedAccept["additionalProperties"] = false
	change := object([]string{"at", "host", "kind", "resource", "from", "to"}, obj{
		"at": obj{"type": "string", "format": "date-time"}, "host": str,
		"kind":     obj{"type": "string", "enum": []string{store.ChangeServiceAdded, store.ChangeServiceRetired, store.ChangePriceChanged, store.ChangeNetworksChanged, store.ChangeHostLive, store.ChangeHostDead}},
		"resource": nullable("string"),
		"from":     obj{"description": "before: a price as decimal text in USDC or null (unpriced), networks as a list, liveness as a boolean or null (not measured)"},
		"to":       obj{"description": "after, as from"},
	})
	return obj{
		"Error": object([]string{"error", "message"}, obj{
			"error": obj{"type": "string", "description": "a stable code"}, "message": str, "field": str, "call_id": str,
		}),
		"Running": object([]string{"call_id", "status", "poll"}, obj{
			"call_id": str, "status": obj{"type": "string", "const": "running"}, "poll": obj{"type": "string", "description": "relative URL to long-poll, with the call's token"},
		}),
		"Health": object([]string{"ok"}, obj{"ok": obj{"type": "boolean"}}),
		"Price":  price,
		"PaymentRequirements": object([]string{"scheme", "network", "amount", "asset", "payTo", "maxTimeoutSeconds"}, obj{
			"scheme": obj{"type": "string", "enum": []string{"exact", x402.SchemeBatchSettlement}}, "network": obj{"type": "string", "description": "CAIP-2"},
			"amount": obj{"type": "string", "pattern": "^[0-9]+$", "description": "atomic units of asset (USDC: 6 decimals)"},
			"asset":  str, "payTo": str, "maxTimeoutSeconds": obj{"type": "integer", "minimum": 1},
			"extra": obj{"type": "object", "description": "EVM: the token's EIP-712 domain {name, version}, and for batch-settlement {receiverAuthorizer, withdrawDelay, minDeposit}; Solana: {feePayer}"},
		}),
		"PaymentRequired": object([]string{"x402Version", "resource", "accepts"}, obj{
			"x402Version": obj{"type": "integer", "const": 2}, "error": str,
			"resource":   object([]string{"url"}, obj{"url": str, "description": str, "mimeType": str}),
			"accepts":    obj{"type": "array", "minItems": 1, "items": ref("PaymentRequirements")},
			"extensions": obj{"type": "object", "description": "bazaar: {info, schema} describing the call"},
		}),
		"Quote": obj{"allOf": []any{ref("PaymentRequired"), object([]string{"error", "price", "protocols", "scheme", "method",
			"network", "networks", "asset", "pay_to", "mime_type", "sellable", "blocked_reason"}, obj{
			"error": obj{"type": "string", "description": `"payment required", or the reason a payment was refused`}, "message": str,
			"price": ref("Price"), "protocols": array(obj{"type": "string", "const": "x402"}),
			"scheme": obj{"type": "string", "const": "exact"}, "method": obj{"type": "string", "const": "POST"},
			"network": obj{"type": "string", "description": "the primary network"}, "networks": array(str),
			"asset": obj{"type": "string", "description": "USDC on the primary network"}, "pay_to": str,
			"mime_type": obj{"type": "string", "const": "application/json"}, "sellable": obj{"type": "boolean"},
			"blocked_reason": nullable("string"),
		})}},
		"WellKnown": object([]string{"x402Version", "facilitator", "networks", "resources"}, obj{
			"x402Version": obj{"type": "integer", "const": 2}, "name": str, "description": str,
			"facilitator": obj{"type": "null", "description": "none: the service verifies and settles its payments itself"},
			"networks":    array(str),
			"resources": array(object([]string{"name", "resource", "method", "price", "mime_type", "sellable", "blocked_reason", "accepts"}, obj{
				"name": str, "resource": str, "method": obj{"type": "string", "const": "POST"}, "description": str, "price": ref("Price"),
				"mime_type": str, "sellable": obj{"type": "boolean"}, "blocked_reason": nullable("string"),
				"accepts": array(ref("PaymentRequirements")), "input_schema": obj{"type": "object"},
			})),
			"discovery": str, "openapi": str, "index": str,
			"mcp": object([]string{"endpoint", "transport", "tools"}, obj{
				"endpoint": str, "transport": obj{"type": "string", "const": "streamable-http"}, "payment": str, "tools": array(str),
			}),
		}),
		"WellKnownFanOut": object([]string{"version", "resources"}, obj{
			"version": obj{"type": "integer", "const": 1}, "resources": array(str),
		}),
		"DiscoveryList": object([]string{"x402Version", "items", "pagination"}, obj{
			"x402Version": obj{"type": "integer", "const": 2},
			"items": array(object([]string{"resource", "type", "x402Version", "accepts", "lastUpdated"}, obj{
				"resource": str, "type": obj{"type": "string", "const": "http"}, "x402Version": obj{"type": "integer", "const": 2},
				"accepts": array(ref("PaymentRequirements")), "lastUpdated": obj{"type": "string", "format": "date-time"},
				"metadata": obj{"type": "object"},
			})),
			"pagination": object([]string{"limit", "offset", "total"}, obj{"limit": integer, "offset": integer, "total": integer}),
		}),
		"IndexHost":     host,
		"IndexEvidence": evidence,
		"IndexChange":   change,
		"IndexResources": object([]string{"ok", "resources", "next", "partial", "honesty"}, obj{
			"ok": obj{"type": "boolean"},
			"resources": array(object([]string{"resource", "host", "method", "description", "tags", "accepts", "price_usdc", "networks",
				"input_schema", "output_schema", "extensions", "x402_version", "updated_at", "verified_pay_to", "host_liveness", "evidence", "score"}, obj{
				"resource": str, "host": str, "method": str, "description": str, "tags": array(str),
				"accepts":    array(listedAccept),
				"price_usdc": nullable("number"), "networks": array(str),
				"input_schema": nullable("object"), "output_schema": nullable("object"), "extensions": nullable("object"),
				"x402_version": integer, "mime_type": str, "updated_at": obj{"type": "string", "format": "date-time"},
				"verified_pay_to": array(str),
				"host_liveness": object([]string{"live", "uptime_30d", "latency_p50_ms", "checked_at", "quote_matches_listing"}, obj{
					"live": nullable("boolean"), "uptime_30d": share, "latency_p50_ms": nullable("integer"), "checked_at": nullTime,
					"quote_matches_listing": nullable("boolean"),
				}),
				"evidence": object([]string{"transactions_30d", "volume_usdc_30d", "payers_30d", "complete_30d"}, obj{
					"transactions_30d": nullable("integer"), "volume_usdc_30d": nullable("number"), "payers_30d": nullable("integer"),
					"complete_30d": obj{"type": []string{"boolean", "null"}, "description": "whether the 30 days were read whole for every payTo address of its host (as the host's last_30d.complete); null: not measured"},
				}),
				"score": obj{"type": "number"},
			})),
			"next":    obj{"type": []string{"string", "null"}, "description": "the cursor of the next page; null at the last"},
			"partial": obj{"type": "boolean"}, "honesty": str,
		}),
		"BazaarResource": object([]string{"resource", "type", "x402Version", "accepts", "lastUpdated"}, obj{
			"resource": str, "type": obj{"type": "string", "const": "http"}, "x402Version": integer,
			"accepts": array(object([]string{"scheme", "network", "amount", "asset", "payTo", "maxTimeoutSeconds", "extra"}, obj{"scheme": str, "network": str, "amount": str, "asset": str, "payTo": str, "maxTimeoutSeconds": integer,
				"extra": obj{"type": "object", "description": "as listed; {} when the listing gives none"}})),
			"lastUpdated": obj{"type": "string", "format": "date-time"}, "description": str, "mimeType": str, "tags": array(str),
			"extensions": obj{"type": "object"},
		}),
		"BazaarList": object([]string{"x402Version", "items", "pagination"}, obj{
			"x402Version": obj{"type": "integer", "const": 2}, "items": array(ref("BazaarResource")),
			"pagination": object([]string{"limit", "offset", "total"}, obj{"limit": integer, "offset": integer, "total": integer}),
		}),
		"BazaarSearch": object([]string{"x402Version", "resources", "partialResults", "pagination"}, obj{
			"x402Version": obj{"type": "integer", "const": 2}, "resources": array(ref("BazaarResource")), "partialResults": obj{"type": "boolean"},
			"pagination": object([]string{"limit", "cursor"}, obj{"limit": integer, "cursor": obj{"type": []string{"string", "null"}}}),
		}),
		"IndexHostDetail": object([]string{"ok", "host", "quote_differences", "services", "services_limit", "probes", "timeline", "timeline_limit", "pay_tos"}, obj{
			"pay_tos": array(object([]string{"network", "pay_to", "evidence"}, obj{"network": str, "pay_to": str, "evidence": ref("IndexEvidence")})),
			"ok":      obj{"type": "boolean"}, "host": ref("IndexHost"),
			"quote_differences": array(object([]string{"resource", "network", "asset", "field", "listing", "quote"}, obj{
				"resource": str, "network": str, "asset": str,
				"field":   obj{"type": "string", "enum": []string{"network", "amount", "pay_to"}, "description": "network: the quote has no option on the listed network and asset"},
				"listing": str, "quote": str,
			})),
			"services": array(object([]string{"resource", "method", "description", "price_usdc", "networks", "discoverable", "sources", "accepts", "updated_at", "quality"}, obj{
				"resource": str, "method": str, "description": str, "price_usdc": nullable("number"), "networks": array(str),
				"discoverable": obj{"type": "boolean"}, "sources": array(str),
				"accepts":    array(listedAccept),
				"updated_at": obj{"type": "string", "format": "date-time"},
				"quality":    serviceQuality,
			})),
			"probes": array(object([]string{"hour", "probes", "live", "latency_p50_ms"}, obj{
				"hour": obj{"type": "string", "format": "date-time"}, "probes": integer, "live": integer, "latency_p50_ms": nullable("integer"),
			})),
			"services_limit": integer,
			"timeline":       array(ref("IndexChange")), "timeline_limit": integer,
		}),
		"IndexChanges": object([]string{"ok", "changes", "next"}, obj{
			"ok": obj{"type": "boolean"}, "changes": array(ref("IndexChange")),
			"next": obj{"type": "string", "description": "the cursor to pass as since for the changes after this page"},
		}),
		"IndexSummary": object([]string{"ok", "version", "what", "read", "services_indexed", "hosts_known", "liveness", "price_bands",
			"crawl", "top_by_size", "cheapest_entries", "honesty"}, obj{
			"ok": obj{"type": "boolean"}, "version": obj{"type": "string", "const": "xindex-1.0"}, "what": str,
			"read":             object([]string{"summary", "hosts", "page"}, obj{"summary": str, "hosts": str, "page": str}),
			"services_indexed": integer, "hosts_known": integer,
			"liveness":    object([]string{"measured", "live", "dead", "unmeasured"}, obj{"measured": integer, "live": integer, "dead": integer, "unmeasured": integer}),
			"price_bands": obj{"type": "object", "additionalProperties": integer},
			"crawl": object([]string{"cursor", "total", "pages_done", "last_at", "last_full_at", "full_scans"}, obj{
				"cursor": integer, "total": integer, "pages_done": integer,
				"last_at":      obj{"type": []string{"string", "null"}, "format": "date-time"},
				"last_full_at": obj{"type": []string{"string", "null"}, "format": "date-time"}, "full_scans": integer,
			}),
			"top_by_size": array(ref("IndexHost")), "cheapest_entries": array(ref("IndexHost")), "honesty": str,
		}),
		"IndexHosts": object([]string{"ok", "hosts", "summary"}, obj{
			"ok": obj{"type": "boolean"}, "hosts": array(ref("IndexHost")),
			"summary": object([]string{"services_indexed", "hosts_known"}, obj{
				"services_indexed": integer, "hosts_known": integer, "last_at": obj{"type": []string{"string", "null"}, "format": "date-time"},
			}),
		}),
	}
}
