package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/x402d/x402d/mcp"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// An outcome is the answer to a request about a paid call, whatever carried
// it (an HTTP request or an MCP tool call). The pipeline's ends become
// outcomes in one place (unpaid, outcomeOf, errorFor): status, error code,
// headers, the re-quote after a refusal; the HTTP handlers (write) and the
// MCP tools (toolOutcome) only render them. Exactly one of result,
// required, running and err is set.
type outcome struct {
	// status is the HTTP status.
	status int
	// result is the result of a call paid and settled (200).
	result json.RawMessage
	// settlement is the PAYMENT-RESPONSE: the settlement of a paid call,
	// or the failed one of a call whose payment could not be settled.
	settlement *x402.SettleResponse
	// required is the quote answering a call without payment, with a
	// refused one, or whose payment could not be settled (402); its error
	// names the reason.
	required *x402.Quote
	// running is a paid call still running (202, with its poll URL).
	running *admitted
	// err is any other end, with its code and headers (Retry-After).
	err *Error
}

// failed returns the outcome of err: an *Error, or what errorFor maps it
// to.
func (s *Server) failed(ctx context.Context, err error) outcome {
	e := errorFor(ctx, s.logger, err)
	return outcome{status: e.Status, err: e}
}

// unpaid is the outcome of a call of entry without payment: its quote, or
// not_sellable when the operation is not sold now. A quote is counted.
func (s *Server) unpaid(ctx context.Context, entry *opEntry) outcome {
	if !entry.sold() {
		return s.failed(ctx, errNotSellable)
	}
	entry.quoted()
	return outcome{status: http.StatusPaymentRequired, required: entry.current().quote}
}

// outcomeOf returns the outcome of a paid call of op (a): err when the
// pipeline (admit, wait) failed, otherwise call in its final state, or the
// call still running when call is nil.
func (s *Server) outcomeOf(ctx context.Context, op string, a *admitted, call *store.Call, err error) outcome {
	if err != nil {
		var refusal *x402.Refusal
		if errors.As(err, &refusal) {
			return s.requote(ctx, op, refusal, nil)
		}
		return s.failed(ctx, err)
	}
	if call == nil {
		return outcome{status: http.StatusAccepted, running: a}
	}
	switch call.State {
	case store.CallPaid, store.CallLost:
		if call.Result == nil {
			return outcome{status: http.StatusGone, settlement: call.Settlement, err: resultExpired(call)}
		}
		return outcome{status: http.StatusOK, result: call.Result, settlement: call.Settlement}
	case store.CallFailed:
		return s.failed(ctx, callFailed(call))
	case store.CallUnpaid:
		reason, detail := unsettled(call)
		if entry := s.ops[call.Op]; !entry.sold() {
			return outcome{status: http.StatusPaymentRequired, settlement: call.Settlement,
				err: &Error{Status: http.StatusPaymentRequired, Code: reason, Message: detail, CallID: call.ID}}
		}
		return s.requote(ctx, call.Op, &x402.Refusal{Reason: reason, Message: detail}, call.Settlement)
	}
	return s.failed(ctx, fmt.Errorf("answer call %s: state %s is not final", call.ID, call.State))
}

// requote is the outcome of a payment of op refused (or, with settlement,
// not settled): a fresh quote whose error names the reason.
func (s *Server) requote(ctx context.Context, op string, refusal *x402.Refusal, settlement *x402.SettleResponse) outcome {
	var q *x402.Quote
	var err error
	if oq, ok := s.cfg.Payments.(x402.OptionQuoter); ok && refusal.Option != nil {
		// The corrective 402: the option carries the channel's state.
		q, err = oq.QuoteWithOption(op, refusal.Reason, refusal.Message, refusal.Option)
	} else {
		q, err = s.cfg.Payments.QuoteWithError(op, refusal.Reason, refusal.Message)
	}
	if err != nil {
		return s.failed(ctx, fmt.Errorf("quote %s after a refusal: %w", op, err))
	}
	return outcome{status: http.StatusPaymentRequired, required: q, settlement: settlement}
}

// errUnavailable answers a request while the database cannot be reached.
func errUnavailable() *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: 1,
		Message: "the service cannot reach its database now; try again (a paid request with the same payment header gets its result, never a second charge)"}
}

// statusClientClosed is the status logged for a request whose client left
// before its answer (nginx's 499): nobody reads it.
const statusClientClosed = 499

// errorFor returns the *Error answering err, on every route and on the MCP
// tools alike: an *Error as it is; echo's own errors (routing, body limit)
// with a stable code; the request ended by its client (canceled); the
// database unavailable, as during a Postgres restart (503 unavailable,
// Retry-After, logged as a warning: nothing was charged, and a paid request
// sent again with the same payment gets its call's answer); anything else
// 500 internal_error, logged, revealing nothing of it.
func errorFor(ctx context.Context, logger *slog.Logger, err error, attrs ...any) *Error {
	var apiErr *Error
	var httpErr *echo.HTTPError
	switch {
	case errors.As(err, &apiErr):
		return apiErr
	case errors.As(err, &httpErr):
		msg := http.StatusText(httpErr.Code)
		if m, ok := httpErr.Message.(string); ok && httpErr.Code < 500 {
			msg = m
		}
		if httpErr.Code == http.StatusRequestEntityTooLarge {
			msg = "request body is larger than the limit"
		}
		if httpErr.Code >= 500 {
			logger.ErrorContext(ctx, "request failed", append(attrs, "error", err)...)
		}
		return &Error{Status: httpErr.Code, Code: codeForStatus(httpErr.Code), Message: msg}
	case ctx.Err() != nil:
		return &Error{Status: statusClientClosed, Code: "canceled",
			Message: "the request ended before its answer; a paid call goes on: send it again with the same payment to get its answer"}
	case store.IsUnavailable(err):
		logger.WarnContext(ctx, "request failed: database unavailable", append(attrs, "error", err)...)
		return errUnavailable()
	}
	logger.ErrorContext(ctx, "request failed", append(attrs, "error", err)...)
	return &Error{Status: http.StatusInternalServerError, Code: "internal_error",
		Message: "internal error; nothing is charged for a paid call unless it succeeds: send it again with the same payment"}
}

// write renders out as the HTTP answer. An error is returned to the
// router, whose error handler writes it.
func (s *Server) write(c echo.Context, out outcome) error {
	h := c.Response().Header()
	if out.settlement != nil {
		if v, err := encodeHeader(out.settlement); err == nil {
			h.Set(headerPaymentResponse, v)
		}
	}
	switch {
	case out.result != nil:
		return c.JSONBlob(out.status, out.result)
	case out.required != nil:
		h[headerPaymentRequired] = []string{out.required.PaymentRequired}
		h[headerWWWAuthenticate] = []string{out.required.WWWAuthenticate}
		h[headerCacheControl] = noStore
		return c.JSONBlob(out.status, out.required.Body)
	case out.running != nil:
		a := out.running
		return c.JSON(out.status, map[string]string{
			"call_id": a.id,
			"status":  "running",
			"poll":    "/api/x402/calls/" + a.id + "?token=" + a.token,
		})
	}
	return out.err
}

// toolOutcome renders out as the outcome of an MCP tool call.
func (s *Server) toolOutcome(ctx context.Context, out outcome) mcp.Outcome {
	switch {
	case out.result != nil:
		return mcp.Outcome{Result: out.result, Settlement: out.settlement}
	case out.required != nil:
		var required json.RawMessage
		if err := x402.DecodeHeader(out.required.PaymentRequired, &required); err != nil {
			return s.toolOutcome(ctx, s.failed(ctx, fmt.Errorf("own quote: %w", err)))
		}
		return mcp.Outcome{PaymentRequired: required, Settlement: out.settlement}
	case out.running != nil:
		return mcp.Outcome{Failure: &mcp.Failure{Code: "call_running", CallID: out.running.id,
			Message: "the call is paid and still running; call the tool again with the same payment and arguments to get its result"}}
	}
	e := out.err
	return mcp.Outcome{Settlement: out.settlement, Failure: &mcp.Failure{Code: e.Code, Message: e.Message, Field: e.Field, CallID: e.CallID, RetryAfter: e.RetryAfter}}
}
