package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/x402d/x402d/mcp"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// toolCalls runs the paid calls of the MCP tools through the same pipeline
// as the HTTP API's (admit, wait): the MCP endpoint only renders them.
type toolCalls struct{ s *Server }

// Call implements mcp.Caller. A call without a payment gets the quote once
// its arguments are valid, so that an agent learns of a bad argument before
// it signs anything; with a payment, the arguments are checked again before
// the payment is verified.
func (t toolCalls) Call(ctx context.Context, op string, args []byte, payment string, progress func()) mcp.Outcome {
	s := t.s
	entry := s.ops[op]
	if entry == nil || entry.unsellable {
		return s.toolFailure(ctx, errNotSellable)
	}
	if payment == "" {
		if _, err := entry.op.Decode("", args, &s.cfg.Limits); err != nil {
			return s.toolFailure(ctx, invalidInput(entry, err))
		}
		entry.quoted()
		return mcp.Outcome{PaymentRequired: entry.current().paymentRequired}
	}
	a, err := s.admit(ctx, entry, args, payment)
	if err != nil {
		var refusal *x402.Refusal
		if errors.As(err, &refusal) {
			return s.toolRefusal(ctx, entry, refusal, nil)
		}
		return s.toolFailure(ctx, err)
	}
	defer a.close()
	call, err := s.wait(ctx, a, s.cfg.ToolWait, s.cfg.ProgressEvery, progress)
	if err != nil {
		return s.toolFailure(ctx, err)
	}
	if call == nil {
		return mcp.Outcome{Failure: &mcp.Failure{Code: "call_running", CallID: a.id,
			Message: "the call is paid and still running; call the tool again with the same payment and arguments to get its result"}}
	}
	switch call.State {
	case store.CallPaid, store.CallLost:
		if call.Result == nil {
			return s.toolFailure(ctx, resultExpired(call))
		}
		return mcp.Outcome{Result: call.Result, Settlement: call.Settlement}
	case store.CallFailed:
		return s.toolFailure(ctx, callFailed(call))
	case store.CallUnpaid:
		reason, detail := unsettled(call)
		return s.toolRefusal(ctx, entry, &x402.Refusal{Reason: reason, Message: detail}, call.Settlement)
	}
	return s.toolFailure(ctx, fmt.Errorf("answer call %s: state %s is not final", call.ID, call.State))
}

// toolRefusal is the outcome of a payment refused (or, with settlement, not
// settled): the PaymentRequired whose error names the reason.
func (s *Server) toolRefusal(ctx context.Context, entry *opEntry, refusal *x402.Refusal, settlement *x402.SettleResponse) mcp.Outcome {
	q, err := s.cfg.Payments.QuoteWithError(entry.op.Name, refusal.Reason, refusal.Message)
	if err != nil {
		return s.toolFailure(ctx, err)
	}
	var required json.RawMessage
	if err := x402.DecodeHeader(q.PaymentRequired, &required); err != nil {
		return s.toolFailure(ctx, fmt.Errorf("own quote of %s: %w", entry.op.Name, err))
	}
	return mcp.Outcome{PaymentRequired: required, Settlement: settlement}
}

// toolFailure is the outcome of any other error: an *Error keeps its code,
// anything else is logged and answered as internal_error.
func (s *Server) toolFailure(ctx context.Context, err error) mcp.Outcome {
	var e *Error
	if errors.As(err, &e) {
		return mcp.Outcome{Failure: &mcp.Failure{Code: e.Code, Message: e.Message, Field: e.Field, CallID: e.CallID}}
	}
	if ctx.Err() != nil {
		return mcp.Outcome{Failure: &mcp.Failure{Code: "canceled", Message: "the request ended; a paid call goes on: call again with the same payment and arguments"}}
	}
	s.logger.ErrorContext(ctx, "mcp tool call", "error", err)
	return mcp.Outcome{Failure: &mcp.Failure{Code: codeForStatus(http.StatusInternalServerError),
		Message: "the call could not be answered now; nothing is charged for it unless it succeeds: call again with the same payment and arguments"}}
}
