package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

const (
	headerPaymentSignature = "Payment-Signature"
	headerPaymentRequired  = "Payment-Required"
	headerPaymentResponse  = "Payment-Response"
	headerWWWAuthenticate  = "Www-Authenticate"
	callIDKey              = "call_id"
)

// opEntry is an operation with its quote precomputed as ready header values,
// so the unpaid path copies nothing.
type opEntry struct {
	op       jobs.Operation
	payments x402.Verifier
	// quoteParts is the quote as last read from payments: read again when
	// the catalogue has replaced it (the Solana option's blockhash renewed).
	quoteParts atomic.Pointer[opQuote]
	// contentType is the quote body's Content-Type header value.
	contentType []string
	// quoted counts a quote answered (x402d_quotes_served_total).
	quoted func()
	// unsellable is set when the operation is not sold now (503, no quote).
	unsellable bool
}

// opQuote is one quote of an operation as ready header values.
type opQuote struct {
	quote    *x402.Quote
	required []string
	wwwAuth  []string
	// paymentRequired is the quote's PaymentRequired (JSON), as an MCP
	// tool call without payment answers it.
	paymentRequired json.RawMessage
}

func newOpEntry(op jobs.Operation, payments x402.Verifier) (*opEntry, error) {
	q, err := payments.Quote(op.Name)
	if errors.Is(err, x402.ErrNotSellable) {
		return &opEntry{op: op, unsellable: true}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("api: quote %s: %w", op.Name, err)
	}
	parts, err := newOpQuote(op.Name, q)
	if err != nil {
		return nil, err
	}
	e := &opEntry{op: op, payments: payments, contentType: []string{echo.MIMEApplicationJSON}}
	e.quoteParts.Store(parts)
	return e, nil
}

func newOpQuote(op string, q *x402.Quote) (*opQuote, error) {
	var required json.RawMessage
	if err := x402.DecodeHeader(q.PaymentRequired, &required); err != nil {
		return nil, fmt.Errorf("api: own quote of %s: %w", op, err)
	}
	return &opQuote{quote: q, required: []string{q.PaymentRequired}, wwwAuth: []string{q.WWWAuthenticate}, paymentRequired: required}, nil
}

// current returns the operation's quote as the catalogue has it now: the
// one kept unless the catalogue replaced it (a lookup, no allocation).
func (e *opEntry) current() *opQuote {
	parts := e.quoteParts.Load()
	q, err := e.payments.Quote(e.op.Name)
	if err != nil || q == parts.quote {
		return parts
	}
	if fresh, err := newOpQuote(e.op.Name, q); err == nil {
		e.quoteParts.Store(fresh)
		return fresh
	}
	return parts
}

var errNotSellable = &Error{Status: http.StatusServiceUnavailable, Code: "not_sellable", Message: "this operation is not sold now: the service's receiving or model configuration is incomplete"}

// paid is POST /api/x402/:op.
func (s *Server) paid(c echo.Context) error {
	entry, ok := s.ops[c.Param("op")]
	if !ok {
		return &Error{Status: http.StatusNotFound, Code: "unknown_operation", Message: "no such operation"}
	}
	if entry.unsellable {
		return errNotSellable
	}
	req := c.Request()
	header := req.Header.Get(headerPaymentSignature)
	if header == "" {
		// The quote path: the body is not read, nothing is allocated.
		h := c.Response().Header()
		q := entry.current()
		h[headerPaymentRequired] = q.required
		h[headerWWWAuthenticate] = q.wwwAuth
		s.cfg.Metrics.QuoteServed(entry.op.Name)
		return c.JSONBlob(http.StatusPaymentRequired, q.quote.Body)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		var tooLarge *echo.HTTPError
		if errors.As(err, &tooLarge) {
			return err
		}
		return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "could not read the request body"}
	}
	a, err := s.admit(withClient(req.Context(), c.RealIP()), entry, body, header)
	if err != nil {
		return s.refuse(c, entry, err)
	}
	defer a.close()
	c.Set(callIDKey, a.id)
	return s.await(c, a, s.cfg.CallWait)
}

// maxAttempts is how often a call's job may run: runs killed with their
// worker count, and operations that call outside services retry on failure.
func maxAttempts(op jobs.Operation) int {
	if op.UsesModel {
		return 6
	}
	return 3
}

// acceptedBefore returns the call that accepted the payment in header, when
// Verify refused it (with cause) because it was used since, typically
// settled: a client retrying after a lost answer gets the stored answer, not
// nonce_already_used. The payment must be the very one accepted, signature
// and all, not merely name the same payer and nonce. It returns nil when no
// call accepted it, and an error when that cannot be known now.
func (s *Server) acceptedBefore(ctx context.Context, entry *opEntry, header string, cause error) (*store.Call, error) {
	var refusal *x402.Refusal
	if !errors.As(cause, &refusal) || refusal.NeverValid {
		return nil, nil
	}
	p, err := s.cfg.Payments.Identify(entry.op.Name, header)
	if err != nil {
		return nil, nil
	}
	prior, err := store.CallGetByPaymentKey(ctx, s.cfg.Pool, p.Key())
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up a resent payment: %w", err)
	}
	if !sameJSON(prior.Payment.Payload, p.Payload) {
		return nil, nil
	}
	return prior, nil
}

// sameJSON reports whether a and b hold equal JSON values (the stored copy
// went through jsonb, which does not keep the bytes).
func sameJSON(a, b json.RawMessage) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// refuse answers an error of admit: a refused payment gets 402 with a
// fresh quote whose error names the reason; any other error is rendered by
// the error handler.
func (s *Server) refuse(c echo.Context, entry *opEntry, err error) error {
	var refusal *x402.Refusal
	if !errors.As(err, &refusal) {
		return err
	}
	q, qerr := s.cfg.Payments.QuoteWithError(entry.op.Name, refusal.Reason, refusal.Message)
	if qerr != nil {
		return qerr
	}
	h := c.Response().Header()
	h.Set(headerPaymentRequired, q.PaymentRequired)
	h[headerWWWAuthenticate] = []string{q.WWWAuthenticate}
	return c.JSONBlob(http.StatusPaymentRequired, q.Body)
}

// refusalReason is the reason a payment refused by Verify with err is
// counted under: the error code its answer carries.
func refusalReason(err error) string {
	var refusal *x402.Refusal
	var apiErr *Error
	switch {
	case errors.As(err, &refusal):
		return refusal.Reason
	case errors.As(err, &apiErr):
		return apiErr.Code
	case errors.Is(err, x402.ErrNotSellable):
		return "not_sellable"
	}
	return "verification_unavailable"
}

// await waits up to wait for call a to end and answers it, or answers 202
// with the poll URL.
func (s *Server) await(c echo.Context, a *admitted, wait time.Duration) error {
	call, err := s.wait(c.Request().Context(), a, wait, 0, nil)
	if err != nil {
		return err
	}
	if call == nil {
		return c.JSON(http.StatusAccepted, map[string]string{
			"call_id": a.id,
			"status":  "running",
			"poll":    "/api/x402/calls/" + a.id + "?token=" + a.token,
		})
	}
	return s.answer(c, call)
}

// answer writes the response of a call in a final state.
func (s *Server) answer(c echo.Context, call *store.Call) error {
	switch call.State {
	case store.CallPaid, store.CallLost:
		if call.Settlement != nil {
			if h, err := encodeHeader(call.Settlement); err == nil {
				c.Response().Header().Set(headerPaymentResponse, h)
			}
		}
		if call.Result == nil {
			return resultExpired(call)
		}
		return c.JSONBlob(http.StatusOK, call.Result)
	case store.CallFailed:
		return callFailed(call)
	case store.CallUnpaid:
		entry := s.ops[call.Op]
		reason, detail := unsettled(call)
		if call.Settlement != nil {
			if h, err := encodeHeader(call.Settlement); err == nil {
				c.Response().Header().Set(headerPaymentResponse, h)
			}
		}
		if entry == nil || entry.unsellable {
			return &Error{Status: http.StatusPaymentRequired, Code: reason, Message: detail, CallID: call.ID}
		}
		return s.refuse(c, entry, &x402.Refusal{Reason: reason, Message: detail})
	}
	return fmt.Errorf("answer call %s: state %s is not final", call.ID, call.State)
}

// resultExpired is the error of a paid call whose result was let go after
// RESULT_TTL: 410, the call's ledger fields stay.
func resultExpired(call *store.Call) *Error {
	msg := "the result is no longer kept; the payment was settled"
	if call.ResultExpiredAt != nil {
		msg = "the result was let go on " + call.ResultExpiredAt.UTC().Format(time.DateOnly) + ", after the time results are kept; the payment was settled"
	}
	return &Error{Status: http.StatusGone, Code: "result_expired", Message: msg, CallID: call.ID}
}

// callFailed is the error of a call whose operation failed: it is never
// settled.
func callFailed(call *store.Call) *Error {
	msg := "the operation failed; your payment was not settled"
	code := "operation_failed"
	if call.Failure != nil {
		if call.Failure.Message != "" {
			msg = call.Failure.Message + "; your payment was not settled"
		}
		if call.Failure.Error == jobs.ErrorPaymentExpired {
			code = jobs.ErrorPaymentExpired
		}
	}
	return &Error{Status: http.StatusBadGateway, Code: code, Message: msg, CallID: call.ID}
}

// unsettled returns the reason and the message of a call whose payment could
// not be settled: its result is withheld.
func unsettled(call *store.Call) (reason, detail string) {
	reason, detail = "settlement_failed", "the payment could not be settled; the result is withheld"
	if call.Settlement != nil && call.Settlement.ErrorReason != "" {
		reason = call.Settlement.ErrorReason
	}
	return reason, detail
}

// poll is GET /api/x402/calls/:id?token=…&wait=…: the capability URL of a
// call. Without the right token the call does not exist.
func (s *Server) poll(c echo.Context) error {
	id := c.Param("id")
	notFound := &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such call"}
	token := c.QueryParam("token")
	if token == "" {
		return notFound
	}
	wait := s.cfg.CallWait
	if w := c.QueryParam("wait"); w != "" {
		secs, err := strconv.Atoi(w)
		if err != nil || secs < 0 {
			return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "wait must be a whole number of seconds", Field: "wait"}
		}
		wait = time.Duration(secs) * time.Second
	}
	wait = min(wait, s.cfg.MaxPollWait)
	ctx := c.Request().Context()
	sub := s.cfg.Listener.Subscribe(store.CallStream(id))
	defer sub.Close()
	call, err := store.CallGetAnswer(ctx, s.cfg.Pool, id)
	if errors.Is(err, store.ErrNotFound) {
		return notFound
	}
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(call.Token), []byte(token)) != 1 {
		return notFound
	}
	c.Set(callIDKey, id)
	if store.IsFinal(call.State) {
		return s.answer(c, call)
	}
	return s.await(c, &admitted{id: id, token: call.Token, sub: sub}, wait)
}

func encodeHeader(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

func hashRequest(op string, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(op))
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil)
}

// newID returns a random call id.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newToken returns a random poll capability.
func newToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
