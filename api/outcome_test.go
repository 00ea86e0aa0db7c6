package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/diff"
	"github.com/x402d/x402d/jobs/regex"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// TestOutcome is the table of how a paid call's ends are answered: each
// error of the pipeline and each final state of a call, mapped once
// (outcomeOf), then rendered over HTTP and over MCP with the same status,
// code and settlement.
func TestOutcome(t *testing.T) {
	t.Parallel()
	s := unreachableServer(t, Config{
		Ops:      []jobs.Operation{diff.Op, regex.Op},
		Payments: &paytest.Payments{Unsold: map[string]bool{"regex": true}},
	})
	settled := &x402.SettleResponse{Success: true, Payer: "0xpayer", Transaction: "0xtx", Network: "eip155:8453"}
	refused := &x402.SettleResponse{ErrorReason: "invalid_exact_evm_insufficient_balance", Payer: "0xpayer", Network: "eip155:8453"}
	expired := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	running := &admitted{id: "c1", token: "tok"}
	call := func(state string, mod func(*store.Call)) *store.Call {
		c := &store.Call{ID: "c1", Op: "diff", State: state}
		if mod != nil {
			mod(c)
		}
		return c
	}
	tests := []struct {
		name     string
		canceled bool
		op       string
		call     *store.Call
		err      error
		// status is the HTTP status; code the error code, or the
		// PaymentRequired's error of a 402 with a quote ("" for a result
		// or a call running).
		status     int
		code       string
		settlement bool
		retryAfter int
	}{
		{name: "payment refused", err: &x402.Refusal{Reason: "invalid_exact_evm_signature", Message: "bad"},
			status: http.StatusPaymentRequired, code: "invalid_exact_evm_signature"},
		{name: "input refused", err: &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "is required", Field: "a"},
			status: http.StatusBadRequest, code: "invalid_request"},
		{name: "not sold", err: errNotSellable, status: http.StatusServiceUnavailable, code: "not_sellable"},
		{name: "database unavailable", err: fmt.Errorf("queue call: %w", &pgconn.PgError{Code: "57P01"}),
			status: http.StatusServiceUnavailable, code: "unavailable", retryAfter: 1},
		{name: "database failing over", err: fmt.Errorf("queue call: %w", &pgconn.PgError{Code: "25006"}),
			status: http.StatusServiceUnavailable, code: "unavailable", retryAfter: 1},
		{name: "request ended", canceled: true, err: context.Canceled, status: statusClientClosed, code: "canceled"},
		{name: "anything else", err: errors.New("boom"), status: http.StatusInternalServerError, code: "internal_error"},
		{name: "still running", status: http.StatusAccepted},
		{name: "paid", call: call(store.CallPaid, func(c *store.Call) { c.Result, c.Settlement = json.RawMessage(`{"op":"diff"}`), settled }),
			status: http.StatusOK, settlement: true},
		{name: "lost after its answer", call: call(store.CallLost, func(c *store.Call) { c.Result, c.Settlement = json.RawMessage(`{"op":"diff"}`), settled }),
			status: http.StatusOK, settlement: true},
		{name: "result let go", call: call(store.CallPaid, func(c *store.Call) { c.Settlement, c.ResultExpiredAt = settled, &expired }),
			status: http.StatusGone, code: "result_expired", settlement: true},
		{name: "operation failed", call: call(store.CallFailed, func(c *store.Call) {
			c.Failure = &store.JobFailed{Error: jobs.ErrorOperationFailed, Message: "upstream down"}
		}), status: http.StatusBadGateway, code: "operation_failed"},
		{name: "payment expired", call: call(store.CallFailed, func(c *store.Call) {
			c.Failure = &store.JobFailed{Error: jobs.ErrorPaymentExpired, Message: "too late"}
		}), status: http.StatusBadGateway, code: "payment_expired"},
		{name: "not settled", call: call(store.CallUnpaid, func(c *store.Call) { c.Settlement = refused }),
			status: http.StatusPaymentRequired, code: "invalid_exact_evm_insufficient_balance", settlement: true},
		{name: "not settled, no reason", call: call(store.CallUnpaid, nil),
			status: http.StatusPaymentRequired, code: "settlement_failed"},
		{name: "not settled, operation no longer sold", op: "regex", call: call(store.CallUnpaid, func(c *store.Call) { c.Op, c.Settlement = "regex", refused }),
			status: http.StatusPaymentRequired, code: "invalid_exact_evm_insufficient_balance", settlement: true},
		{name: "not final", call: call(store.CallRunning, nil), status: http.StatusInternalServerError, code: "internal_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.canceled {
				cancel()
			}
			op := tt.op
			if op == "" {
				op = "diff"
			}
			out := s.outcomeOf(ctx, op, running, tt.call, tt.err)
			require.Equal(t, tt.status, out.status)

			// Over HTTP.
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/api/x402/"+op, nil)
			rec := httptest.NewRecorder()
			c := s.Echo().NewContext(req, rec)
			if err := s.write(c, out); err != nil {
				s.Echo().HTTPErrorHandler(err, c)
			}
			require.Equal(t, tt.status, rec.Code, rec.Body.String())
			var body struct {
				Error, Poll string
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
			require.Equal(t, tt.code, body.Error)
			require.Equal(t, tt.settlement, rec.Header().Get("Payment-Response") != "")
			if tt.status == http.StatusPaymentRequired {
				require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
			}
			if tt.retryAfter > 0 {
				require.Equal(t, fmt.Sprint(tt.retryAfter), rec.Header().Get("Retry-After"))
			}
			if tt.status == http.StatusAccepted {
				require.Equal(t, "/api/x402/calls/c1?token=tok", body.Poll)
			}

			// Over MCP.
			tool := s.toolOutcome(ctx, out)
			switch {
			case tt.status == http.StatusOK:
				require.JSONEq(t, `{"op":"diff"}`, string(tool.Result))
				require.Nil(t, tool.Failure)
			case tt.status == http.StatusAccepted:
				require.Equal(t, "call_running", tool.Failure.Code)
				require.Equal(t, "c1", tool.Failure.CallID)
			case out.required != nil:
				var pr struct {
					Error   string `json:"error"`
					Accepts []any  `json:"accepts"`
				}
				require.NoError(t, json.Unmarshal(tool.PaymentRequired, &pr))
				require.Equal(t, tt.code, pr.Error)
				require.NotEmpty(t, pr.Accepts)
			default:
				require.Nil(t, tool.PaymentRequired)
				require.Equal(t, tt.code, tool.Failure.Code)
				require.Equal(t, tt.retryAfter, tool.Failure.RetryAfter)
			}
			require.Equal(t, tt.settlement, tool.Settlement != nil)
		})
	}
}

// TestUnpaid: a call without payment gets its operation's quote, never
// stored by a cache, or not_sellable when the operation is not sold.
func TestUnpaid(t *testing.T) {
	t.Parallel()
	s := unreachableServer(t, Config{
		Ops:      []jobs.Operation{diff.Op, regex.Op},
		Payments: &paytest.Payments{Unsold: map[string]bool{"regex": true}},
	})
	ctx := context.Background()
	out := s.unpaid(ctx, s.ops["diff"])
	require.Equal(t, http.StatusPaymentRequired, out.status)
	require.Equal(t, s.ops["diff"].current().quote, out.required)
	for _, entry := range []*opEntry{s.ops["regex"], nil} {
		out := s.unpaid(ctx, entry)
		require.Equal(t, http.StatusServiceUnavailable, out.status)
		require.Equal(t, "not_sellable", out.err.Code)
	}
}
