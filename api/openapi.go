package api

import (
	"encoding/json"
	"fmt"

	"github.com/x402d/x402d/jobs"
)

// openAPIDocument returns the OpenAPI 3.1.0 document of the api: every paid
// operation with its request schema and result layout (the schema of its
// output example, plus call_id and op), the poll, discovery, index, operator
// and health endpoints.
func openAPIDocument(ops []jobs.Operation, publicURL string) ([]byte, error) {
	errorBody := map[string]any{"$ref": "#/components/schemas/Error"}
	errResp := func(desc string) map[string]any {
		return map[string]any{"description": desc, "content": map[string]any{"application/json": map[string]any{"schema": errorBody}}}
	}
	quoteHeaders := map[string]any{
		"PAYMENT-REQUIRED": map[string]any{"description": "base64 of the x402 v2 PaymentRequired", "schema": map[string]any{"type": "string"}},
		"WWW-Authenticate": map[string]any{"description": "an X402 challenge", "schema": map[string]any{"type": "string"}},
	}
	paths := map[string]any{}
	for _, op := range ops {
		input := json.RawMessage(`{"type":"object"}`)
		if len(op.InputSchema) > 0 {
			input = op.InputSchema
		}
		result := schemaOf(op.OutputExample)
		if props, ok := result["properties"].(map[string]any); ok {
			props["call_id"] = map[string]any{"type": "string"}
			props["op"] = map[string]any{"type": "string", "const": op.Name}
		}
		paths["/api/x402/"+op.Name] = map[string]any{"post": map[string]any{
			"operationId": op.Name,
			"summary":     op.Description,
			"description": fmt.Sprintf("Price %s USD, paid with x402 (exact scheme). Without a PAYMENT-SIGNATURE header the answer is 402 with the quote.", op.Price),
			"parameters": []any{map[string]any{
				"name": "PAYMENT-SIGNATURE", "in": "header", "required": false,
				"description": "base64 of the x402 v2 PaymentPayload", "schema": map[string]any{"type": "string"},
			}},
			"requestBody": map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": input, "example": op.InputExample}}},
			"responses": map[string]any{
				"200": map[string]any{
					"description": "the result; PAYMENT-RESPONSE carries the settlement",
					"headers":     map[string]any{"PAYMENT-RESPONSE": map[string]any{"description": "base64 of the x402 SettleResponse", "schema": map[string]any{"type": "string"}}},
					"content":     map[string]any{"application/json": map[string]any{"schema": result, "example": op.OutputExample}},
				},
				"202": map[string]any{"description": "paid and still running: poll the URL", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Running"}}}},
				"400": errResp("the body does not meet the operation's rules; nothing is charged"),
				"402": map[string]any{"description": "payment required, or the payment was refused (error names the reason)", "headers": quoteHeaders,
					"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}},
				"413": errResp("body over the limit"),
				"502": errResp("the operation failed; the payment is not settled"),
				"503": errResp("not sold now (receiving or model configuration incomplete); no quote"),
			},
		}}
	}
	paths["/api/x402/calls/{id}"] = map[string]any{"get": map[string]any{
		"operationId": "poll",
		"summary":     "Long-poll a paid call; answers like the paid request once done.",
		"parameters": []any{
			map[string]any{"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "string"}},
			map[string]any{"name": "token", "in": "query", "required": true, "schema": map[string]any{"type": "string"}},
			map[string]any{"name": "wait", "in": "query", "schema": map[string]any{"type": "integer", "minimum": 0, "maximum": 60}},
		},
		"responses": map[string]any{
			"200": map[string]any{"description": "the result", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}},
			"202": map[string]any{"description": "still running", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Running"}}}},
			"404": errResp("no such call, or a wrong token"),
			"502": errResp("the operation failed; not charged"),
		},
	}}
	simple := func(id, summary string, query ...map[string]any) map[string]any {
		get := map[string]any{"operationId": id, "summary": summary,
			"responses": map[string]any{"200": map[string]any{"description": "OK", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}}}}
		if len(query) > 0 {
			params := make([]any, len(query))
			for i, q := range query {
				params[i] = q
			}
			get["parameters"] = params
			get["responses"].(map[string]any)["400"] = errResp("a query parameter is out of range")
		}
		return map[string]any{"get": get}
	}
	qp := func(name string, schema map[string]any) map[string]any {
		return map[string]any{"name": name, "in": "query", "schema": schema}
	}
	paths["/.well-known/x402.json"] = simple("wellKnown", "Service manifest: x402 version, networks, resources.")
	paths["/api/x402/discovery/resources"] = simple("discoveryResources", "Paid resources in the Bazaar list format.",
		qp("type", map[string]any{"type": "string", "enum": []string{"http"}}),
		qp("limit", map[string]any{"type": "integer", "minimum": 1, "maximum": 100, "default": 20}),
		qp("offset", map[string]any{"type": "integer", "minimum": 0, "default": 0}))
	paths["/api/xindex/summary"] = simple("indexSummary", "Summary of the market index (xindex-1.0).")
	paths["/api/xindex/hosts"] = simple("indexHosts", "Indexed seller hosts.",
		qp("q", map[string]any{"type": "string"}),
		qp("limit", map[string]any{"type": "integer", "minimum": 1, "maximum": 500, "default": 50}),
		qp("sort", map[string]any{"type": "string", "enum": []string{"services", "price", "latency", "host", "checked"}, "default": "services"}))
	paths["/x402-index"] = map[string]any{"get": map[string]any{"operationId": "indexPage", "summary": "The index as a web page.",
		"responses": map[string]any{"200": map[string]any{"description": "HTML", "content": map[string]any{"text/html": map[string]any{"schema": map[string]any{"type": "string"}}}}}}}
	paths["/healthz"] = simple("healthz", "The process is up.")
	paths["/readyz"] = simple("readyz", "The database is reachable.")
	paths["/openapi.json"] = simple("openapi", "This document.")

	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":       "x402d",
			"version":     "2.0.0",
			"description": "Utility operations sold per call over x402 v2 (no accounts, no API keys), and a free index of x402 sellers.",
		},
		"servers": []any{map[string]any{"url": publicURL}},
		"paths":   paths,
		"components": map[string]any{"schemas": map[string]any{
			"Error": map[string]any{"type": "object", "required": []string{"error", "message"}, "properties": map[string]any{
				"error": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"}, "field": map[string]any{"type": "string"},
			}},
			"Running": map[string]any{"type": "object", "required": []string{"call_id", "status", "poll"}, "properties": map[string]any{
				"call_id": map[string]any{"type": "string"}, "status": map[string]any{"type": "string", "const": "running"}, "poll": map[string]any{"type": "string"},
			}},
		}},
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	return raw, nil
}

// schemaOf returns a JSON Schema describing the shape of example, an output
// example: types from its values, arrays from their first element.
func schemaOf(example any) map[string]any {
	raw, err := json.Marshal(example)
	if err != nil {
		return map[string]any{}
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return map[string]any{}
	}
	return shape(v)
}

func shape(v any) map[string]any {
	switch x := v.(type) {
	case map[string]any:
		props := make(map[string]any, len(x))
		for k, e := range x {
			props[k] = shape(e)
		}
		return map[string]any{"type": "object", "properties": props}
	case []any:
		if len(x) == 0 {
			return map[string]any{"type": "array"}
		}
		items := shape(x[0])
		for _, e := range x[1:] {
			items = merge(items, shape(e))
		}
		return map[string]any{"type": "array", "items": items}
	case string:
		return map[string]any{"type": "string"}
	case float64:
		return map[string]any{"type": "number"}
	case bool:
		return map[string]any{"type": "boolean"}
	default: // null: any value
		return map[string]any{}
	}
}

// merge returns a schema that both a and b's values meet: objects merge
// their properties, arrays their items, and different types give "any".
func merge(a, b map[string]any) map[string]any {
	ta, tb := a["type"], b["type"]
	if ta == nil || tb == nil || ta != tb {
		return map[string]any{}
	}
	switch ta {
	case "object":
		pa, _ := a["properties"].(map[string]any)
		pb, _ := b["properties"].(map[string]any)
		props := make(map[string]any, len(pa)+len(pb))
		for k, v := range pa {
			props[k] = v
		}
		for k, v := range pb {
			if prev, ok := props[k]; ok {
				props[k] = merge(prev.(map[string]any), v.(map[string]any))
			} else {
				props[k] = v
			}
		}
		return map[string]any{"type": "object", "properties": props}
	case "array":
		ia, okA := a["items"].(map[string]any)
		ib, okB := b["items"].(map[string]any)
		switch {
		case okA && okB:
			return map[string]any{"type": "array", "items": merge(ia, ib)}
		case okA:
			return a
		default:
			return b
		}
	}
	return a
}
