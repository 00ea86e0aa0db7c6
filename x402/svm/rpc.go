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

// rpcClient makes JSON-RPC calls to a Solana node. Single calls made while
// maxRequests of its requests are on their way wait, and go together in
// the next request as one JSON-RPC batch (up to maxBatch calls): a busy
// service makes a request a round trip, not one a call, and a lone call
// leaves at once. It is safe for concurrent use.
type rpcClient struct {
	url    string
	client *http.Client
	queue  sendQueue[queuedCall]
}

// queuedCall is a call waiting for a request.
type queuedCall struct {
	call rpcCall
	done chan<- error
}

// newRPCClient returns a client of the endpoint at url; a nil client is an
// http.Client with a 15-second timeout keeping up to rpcIdleConns
// connections to the node open between calls.
func newRPCClient(url string, client *http.Client) *rpcClient {
	if client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = rpcIdleConns
		client = &http.Client{Timeout: 15 * time.Second, Transport: t}
	}
	return &rpcClient{url: url, client: client}
}

// rpcIdleConns is how many connections to the node a client keeps open
// between calls, more than it has requests on their way (maxRequests), so
// that a busy service does not open (and the node accept) a connection a
// request.
const rpcIdleConns = 16

// maxRequests is how many requests of single calls a client has on their
// way at once; calls made meanwhile wait for the next.
const maxRequests = 4

// maxBatch is the most calls a client sends in one JSON-RPC batch.
const maxBatch = 64

// maxRPCResponse bounds a JSON-RPC answer read.
const maxRPCResponse = 16 << 20

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

// rpcCallError is an error answer of the node.
type rpcCallError struct {
	Code    int
	Message string
}

func (e *rpcCallError) Error() string { return fmt.Sprintf("RPC error %d: %s", e.Code, e.Message) }

// rpcCall is one call of a batch: its result is decoded into Out (nil:
// ignored).
type rpcCall struct {
	Method string
	Params []any
	Out    any
}

// call makes one JSON-RPC call, in a request of its own or with the calls
// made meanwhile, and decodes its result into out. An error answer is a
// *rpcCallError.
func (c *rpcClient) call(ctx context.Context, method string, params []any, out any) error {
	done := make(chan error, 1)
	if c.queue.push(queuedCall{call: rpcCall{Method: method, Params: params, Out: out}, done: done}, maxRequests) {
		go c.send()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// The call may still be made: its answer is dropped.
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// send sends the queued calls, up to maxBatch a request, until none is
// queued. No caller's context: a request answers every call in it, and
// the client's timeout bounds it. A caller that gave up is answered all
// the same (its channel is buffered), and its Out written: a caller reads
// Out only once answered.
func (c *rpcClient) send() {
	for queued := c.queue.take(maxBatch); queued != nil; queued = c.queue.take(maxBatch) {
		calls := make([]rpcCall, len(queued))
		for i, q := range queued {
			calls[i] = q.call
		}
		for i, err := range c.do(context.Background(), calls) {
			queued[i].done <- err
		}
	}
}

// batch makes calls in one request of their own (one call is sent alone,
// not as a batch) and decodes each result. The first error is returned.
func (c *rpcClient) batch(ctx context.Context, calls ...rpcCall) error {
	for _, err := range c.do(ctx, calls) {
		if err != nil {
			return err
		}
	}
	return nil
}

// do makes calls in one request (one call is sent alone, not as a batch)
// and decodes each result: it returns each call's error, an error answer
// as a *rpcCallError wrapped with its method.
func (c *rpcClient) do(ctx context.Context, calls []rpcCall) []error {
	errs := make([]error, len(calls))
	all := func(err error) []error {
		for i := range errs {
			errs[i] = fmt.Errorf("%s: %w", calls[i].Method, err)
		}
		return errs
	}
	reqs := make([]rpcRequest, len(calls))
	for i, cl := range calls {
		reqs[i] = rpcRequest{JSONRPC: "2.0", ID: i, Method: cl.Method, Params: cl.Params}
	}
	var body []byte
	var err error
	if len(calls) == 1 {
		body, err = json.Marshal(reqs[0])
	} else {
		body, err = json.Marshal(reqs)
	}
	if err != nil {
		return all(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return all(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return all(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxRPCResponse))
	if err != nil {
		return all(fmt.Errorf("read answer: %w", err))
	}
	if resp.StatusCode != http.StatusOK {
		return all(fmt.Errorf("HTTP %d: %s", resp.StatusCode, truncate(raw, 200)))
	}
	type answer struct {
		ID     int             `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *rpcError       `json:"error"`
	}
	var answers []answer
	if len(calls) == 1 {
		var a answer
		if err := json.Unmarshal(raw, &a); err != nil {
			return all(fmt.Errorf("answer is not JSON-RPC: %w", err))
		}
		answers = []answer{a}
	} else if err := json.Unmarshal(raw, &answers); err != nil {
		return all(fmt.Errorf("answer is not a JSON-RPC batch: %w", err))
	}
	seen := make([]bool, len(calls))
	for _, a := range answers {
		i := a.ID
		if len(calls) == 1 {
			i = 0 // a single call's answer is its own, whatever its id
		}
		if i < 0 || i >= len(calls) || seen[i] {
			return all(fmt.Errorf("answer to an unknown id %d", a.ID))
		}
		seen[i] = true
		cl := calls[i]
		switch {
		case a.Error != nil:
			errs[i] = fmt.Errorf("%s: %w", cl.Method, &rpcCallError{Code: a.Error.Code, Message: a.Error.Message})
		case len(a.Result) == 0:
			errs[i] = fmt.Errorf("%s: answer has neither result nor error", cl.Method)
		case cl.Out != nil:
			if err := json.Unmarshal(a.Result, cl.Out); err != nil {
				errs[i] = fmt.Errorf("%s: result: %w", cl.Method, err)
			}
		}
	}
	for i, ok := range seen {
		if !ok {
			errs[i] = fmt.Errorf("%s: no answer", calls[i].Method)
		}
	}
	return errs
}

// RPCSimulator simulates transactions with the simulateTransaction method
// of a Solana JSON-RPC endpoint. It implements Simulator.
type RPCSimulator struct {
	rpc *rpcClient
}

var _ Simulator = (*RPCSimulator)(nil)

// NewRPCSimulator returns a simulator asking the JSON-RPC endpoint at url
// (RPC_URL_SOLANA) through client; a nil client is an http.Client with a
// 15-second timeout.
func NewRPCSimulator(url string, client *http.Client) *RPCSimulator {
	return &RPCSimulator{rpc: newRPCClient(url, client)}
}

// Simulate simulates the base64 transaction at the "confirmed" commitment,
// without signature verification (the fee payer signs at settlement) and
// with the transaction's own blockhash, so that an expired blockhash fails.
func (s *RPCSimulator) Simulate(ctx context.Context, txBase64 string) error {
	_, err := s.simulate(ctx, txBase64, false)
	return err
}

// SimulateInner simulates the base64 transaction as Simulate does, and
// returns the inner instructions its instructions made. It implements
// innerSimulator.
func (s *RPCSimulator) SimulateInner(ctx context.Context, txBase64 string) ([]InnerInstructions, error) {
	return s.simulate(ctx, txBase64, true)
}

func (s *RPCSimulator) simulate(ctx context.Context, txBase64 string, inner bool) ([]InnerInstructions, error) {
	var out struct {
		Value struct {
			Err               json.RawMessage     `json:"err"`
			Logs              []string            `json:"logs"`
			InnerInstructions []InnerInstructions `json:"innerInstructions"`
		} `json:"value"`
	}
	cfg := map[string]any{
		"encoding":               "base64",
		"commitment":             "confirmed",
		"sigVerify":              false,
		"replaceRecentBlockhash": false,
	}
	if inner {
		cfg["innerInstructions"] = true
	}
	err := s.rpc.call(ctx, "simulateTransaction", []any{txBase64, cfg}, &out)
	if rerr, ok := errors.AsType[*rpcCallError](err); ok && txErrorCodes[rerr.Code] {
		return nil, &SimulationError{Err: rerr.Message}
	}
	if err != nil {
		return nil, err
	}
	if e := out.Value.Err; len(e) > 0 && !bytes.Equal(e, []byte("null")) {
		return nil, &SimulationError{Err: string(e), Logs: out.Value.Logs}
	}
	return out.Value.InnerInstructions, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
