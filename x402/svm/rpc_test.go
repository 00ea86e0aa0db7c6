package svm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402/svm"
)

func TestRPCSimulator(t *testing.T) {
	t.Parallel()
	const tx = "AQAAAA=="
	testCases := []struct {
		name   string
		status int
		answer string
		// wantSim is the expected SimulationError.Err; wantErr an error
		// that is not one.
		wantSim  string
		wantLogs []string
		wantErr  bool
	}{
		{
			name:   "ok, transaction succeeds",
			answer: `{"jsonrpc":"2.0","result":{"context":{"apiVersion":"2.2.0","slot":318000000},"value":{"accounts":null,"err":null,"logs":["Program ComputeBudget111111111111111111111111111111 invoke [1]","Program ComputeBudget111111111111111111111111111111 success"],"returnData":null,"unitsConsumed":6200}},"id":1}`,
		},
		{
			name:     "nok, instruction error",
			answer:   `{"jsonrpc":"2.0","result":{"context":{"slot":318000000},"value":{"err":{"InstructionError":[2,{"Custom":1}]},"logs":["Program log: Error: insufficient funds"]}},"id":1}`,
			wantSim:  `{"InstructionError":[2,{"Custom":1}]}`,
			wantLogs: []string{"Program log: Error: insufficient funds"},
		},
		{
			name:     "nok, expired blockhash",
			answer:   `{"jsonrpc":"2.0","result":{"context":{"slot":318000000},"value":{"err":"BlockhashNotFound","logs":[]}},"id":1}`,
			wantSim:  `"BlockhashNotFound"`,
			wantLogs: []string{},
		},
		{
			name:    "nok, transaction does not deserialize",
			answer:  `{"jsonrpc":"2.0","error":{"code":-32602,"message":"invalid transaction: Transaction failed to sanitize accounts offsets correctly"},"id":1}`,
			wantSim: "invalid transaction: Transaction failed to sanitize accounts offsets correctly",
		},
		{
			name:    "nok, node unhealthy",
			answer:  `{"jsonrpc":"2.0","error":{"code":-32005,"message":"Node is behind by 42 slots"},"id":1}`,
			wantErr: true,
		},
		{
			name:    "nok, HTTP 429",
			status:  http.StatusTooManyRequests,
			answer:  `{"jsonrpc":"2.0","error":{"code":429,"message":"Too many requests"},"id":1}`,
			wantErr: true,
		},
		{
			name:    "nok, not JSON",
			answer:  `<html>bad gateway</html>`,
			wantErr: true,
		},
		{
			name:    "nok, neither result nor error",
			answer:  `{"jsonrpc":"2.0","id":1}`,
			wantErr: true,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got map[string]any
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(body, &got)
				assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
				if tc.status != 0 {
					w.WriteHeader(tc.status)
				}
				_, _ = io.WriteString(w, tc.answer)
			}))
			t.Cleanup(srv.Close)

			err := svm.NewRPCSimulator(srv.URL, nil).Simulate(context.Background(), tx)

			require.Equal(t, "simulateTransaction", got["method"])
			require.Equal(t, "2.0", got["jsonrpc"])
			params := got["params"].([]any)
			require.Equal(t, tx, params[0])
			require.Equal(t, map[string]any{"encoding": "base64", "commitment": "confirmed", "sigVerify": false, "replaceRecentBlockhash": false}, params[1])
			var sim *svm.SimulationError
			switch {
			case tc.wantSim != "":
				require.ErrorAs(t, err, &sim)
				require.JSONEq(t, jsonString(tc.wantSim), jsonString(sim.Err))
				require.Equal(t, tc.wantLogs, sim.Logs)
			case tc.wantErr:
				require.Error(t, err)
				require.False(t, errors.As(err, &sim), "%v is not a simulation failure", err)
			default:
				require.NoError(t, err)
			}
		})
	}
}

func TestRPCSimulator_Unreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())

	err = svm.NewRPCSimulator(url, nil).Simulate(context.Background(), "AQAAAA==")
	require.Error(t, err)
	var sim *svm.SimulationError
	require.False(t, errors.As(err, &sim))
}

// jsonString returns s if it is JSON, else s as a JSON string.
func jsonString(s string) string {
	if json.Valid([]byte(s)) {
		return s
	}
	b, _ := json.Marshal(s)
	return string(b)
}
