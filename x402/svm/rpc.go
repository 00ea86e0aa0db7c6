package svm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// RPCSimulator simulates transactions with the simulateTransaction method
// of a Solana JSON-RPC endpoint. It implements Simulator.
type RPCSimulator struct {
	url    string
	client *http.Client
}

var _ Simulator = (*RPCSimulator)(nil)

// NewRPCSimulator returns a simulator asking the JSON-RPC endpoint at url
// (RPC_URL_SOLANA) through client; a nil client is an http.Client with a
// 15-second timeout.
func NewRPCSimulator(url string, client *http.Client) *RPCSimulator {
	if client == nil {
		client = &http.Client{Timeout: 15 * time.Second}
	}
	return &RPCSimulator{url: url, client: client}
}

// maxRPCResponse bounds a JSON-RPC answer read.
const maxRPCResponse = 4 << 20

// JSON-RPC error codes that mean the transaction itself is bad, not the
// node: invalid params (a transaction that does not deserialize or
// sanitize), simulation failed, signature verification failure, signature
// length mismatch, unsupported transaction version.
var txErrorCodes = map[int]bool{-32602: true, -32002: true, -32003: true, -32013: true, -32015: true}

type rpcRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      int    `json:"id"`
	Method  string `json:"method"`
	Params  []any  `json:"params"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type simulateResponse struct {
	Result *struct {
		Value struct {
			Err  json.RawMessage `json:"err"`
			Logs []string        `json:"logs"`
		} `json:"value"`
	} `json:"result"`
	Error *rpcError `json:"error"`
}

// Simulate simulates the base64 transaction at the "confirmed" commitment,
// without signature verification (the fee payer signs at settlement) and
// with the transaction's own blockhash, so that an expired blockhash fails.
func (s *RPCSimulator) Simulate(ctx context.Context, txBase64 string) error {
	body, err := json.Marshal(rpcRequest{
		JSONRPC: "2.0",
		ID:      1,
		Method:  "simulateTransaction",
		Params: []any{txBase64, map[string]any{
			"encoding":               "base64",
			"commitment":             "confirmed",
			"sigVerify":              false,
			"replaceRecentBlockhash": false,
		}},
	})
	if err != nil {
		return fmt.Errorf("simulateTransaction: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("simulateTransaction: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("simulateTransaction: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxRPCResponse))
	if err != nil {
		return fmt.Errorf("simulateTransaction: read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("simulateTransaction: HTTP %d: %s", resp.StatusCode, truncate(raw, 200))
	}
	var out simulateResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("simulateTransaction: answer is not JSON-RPC: %w", err)
	}
	if out.Error != nil {
		if txErrorCodes[out.Error.Code] {
			return &SimulationError{Err: out.Error.Message}
		}
		return fmt.Errorf("simulateTransaction: RPC error %d: %s", out.Error.Code, out.Error.Message)
	}
	if out.Result == nil {
		return errors.New("simulateTransaction: answer has neither result nor error")
	}
	if e := out.Result.Value.Err; len(e) > 0 && !bytes.Equal(e, []byte("null")) {
		return &SimulationError{Err: string(e), Logs: out.Result.Value.Logs}
	}
	return nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
