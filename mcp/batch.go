package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
)

// split returns the messages of a POST's body, and whether it is a JSON-RPC
// batch. It reads at most limit+1 messages of a batch: a batch longer than
// limit is known as such without reading the rest. A body that is not JSON
// is one message, which the SDK refuses.
func split(body []byte, limit int) (msgs []json.RawMessage, batch bool) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '[' {
		return []json.RawMessage{body}, false
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if _, err := dec.Token(); err != nil {
		return []json.RawMessage{body}, true
	}
	for dec.More() && len(msgs) <= limit {
		var m json.RawMessage
		if err := dec.Decode(&m); err != nil {
			break
		}
		msgs = append(msgs, m)
	}
	return msgs, true
}

// unpaid returns how many of msgs are not calls of a paid tool carrying a
// payment.
func (h *Handler) unpaid(msgs []json.RawMessage) int {
	n := 0
	for _, raw := range msgs {
		var m struct {
			Method string `json:"method"`
			Params struct {
				Name string                     `json:"name"`
				Meta map[string]json.RawMessage `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal(raw, &m) == nil && m.Method == "tools/call" && h.paid[m.Params.Name] {
			if p, ok := m.Params.Meta[metaPayment]; ok && string(p) != "null" {
				continue
			}
		}
		n++
	}
	return n
}

// batchTooLarge answers a batch of more than limit messages: one JSON-RPC
// error for the whole batch (JSON-RPC 2.0 answers a batch it cannot take
// with a single response), none of it run.
func batchTooLarge(w http.ResponseWriter, limit int) {
	message := fmt.Sprintf("a JSON-RPC batch holds at most %d messages (MCP_MAX_BATCH): send fewer at once; none was run", limit)
	body, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      nil,
		"error": map[string]any{
			"code":    -32600,
			"message": message,
			"data":    map[string]any{"error": "batch_too_large", "message": message, "max_batch": limit},
		},
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(body)
}
