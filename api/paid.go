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
	headerCacheControl     = "Cache-Control"
	callIDKey              = "call_id"
)

// noStore is the Cache-Control of every 402 and of the discovery documents
// that carry quotes: a quote names the receiving address and the networks
// of the service's configuration now, which a cache must not hand out after
// it changed (the official x402 servers send it on their 402s too).
var noStore = []string{"no-store"}

// opEntry is an operation with its quote precomputed as ready header values,
// so the unpaid path copies nothing.
type opEntry struct {
	op       jobs.Operation
	payments x402.Verifier
	// parts is the quote as last read from payments: read again when the
	// catalogue has replaced it (the Solana option's blockhash renewed).
	parts atomic.Pointer[opQuote]
	// contentType is the quote body's Content-Type header value.
	contentType []string
	// quoted counts a quote answered (x402d_quotes_served_total).
	quoted func()
	// unsellable is set when the operation is not sold now (503, no quote).
	unsellable bool
}

// opQuote is one quote of an operation with its ready header values.
type opQuote struct {
	quote    *x402.Quote
	required []string
	wwwAuth  []string
}

func newOpEntry(op jobs.Operation, payments x402.Verifier) (*opEntry, error) {
	q, err := payments.Quote(op.Name)
	if errors.Is(err, x402.ErrNotSellable) {
		return &opEntry{op: op, unsellable: true}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("api: quote %s: %w", op.Name, err)
	}
	var required json.RawMessage
	if err := x402.DecodeHeader(q.PaymentRequired, &required); err != nil {
		return nil, fmt.Errorf("api: own quote of %s: %w", op.Name, err)
	}
	e := &opEntry{op: op, payments: payments, contentType: []string{echo.MIMEApplicationJSON}}
	e.parts.Store(newOpQuote(q))
	return e, nil
}

func newOpQuote(q *x402.Quote) *opQuote {
	return &opQuote{quote: q, required: []string{q.PaymentRequired}, wwwAuth: []string{q.WWWAuthenticate}}
}

// current returns the operation's quote as the catalogue has it now: the
// one kept unless the catalogue replaced it (a lookup, no allocation).
func (e *opEntry) current() *opQuote {
	parts := e.parts.Load()
	q, err := e.payments.Quote(e.op.Name)
	if err != nil || q == parts.quote {
		return parts
	}
	fresh := newOpQuote(q)
	e.parts.Store(fresh)
	return fresh
}

// sold reports whether e is an operation sold now: the one check before a
// quote or a paid call (errNotSellable otherwise).
func (e *opEntry) sold() bool { return e != nil && !e.unsellable }

var errNotSellable = &Error{Status: http.StatusServiceUnavailable, Code: "not_sellable", Message: "this operation is not sold now: the service's receiving or model configuration is incomplete"}

// paid is POST /api/x402/:op.
func (s *Server) paid(c echo.Context) error {
	entry, ok := s.ops[c.Param("op")]
	if !ok {
		return &Error{Status: http.StatusNotFound, Code: "unknown_operation", Message: "no such operation"}
	}
	req := c.Request()
	header := req.Header.Get(headerPaymentSignature)
	if header == "" || !entry.sold() {
		// The quote, or not_sellable: the body is not read.
		return s.write(c, s.unpaid(req.Context(), entry))
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		var tooLarge *echo.HTTPError
		if errors.As(err, &tooLarge) {
			return err
		}
		return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "could not read the request body"}
	}
	ctx := withClient(req.Context(), c.RealIP())
	a, err := s.admit(ctx, entry, body, header)
	if err != nil {
		return s.write(c, s.outcomeOf(ctx, entry.op.Name, nil, nil, err))
	}
	defer a.close()
	c.Set(callIDKey, a.id)
	return s.await(c, entry.op.Name, a, s.cfg.CallWait)
}

// refund is GET /api/x402/:op: the quote without payment, as POST answers
// it, and with a batch-settlement refund payload the cooperative refund it
// asks (x402.Refunder), no operation run: the refund is verified and
// queued (its job, which a worker process runs), and the request waits
// for its outcome (woken by its events' NOTIFY) up to ToolWait: 200 with
// the refund's PAYMENT-RESPONSE, or the 402 of its refusal; past the wait
// 503 refund_pending (the same refund payload sent again waits for the
// same refund). The official client probes and refunds a channel so
// (refundChannel).
func (s *Server) refund(c echo.Context) error {
	entry, ok := s.ops[c.Param("op")]
	if !ok {
		return &Error{Status: http.StatusNotFound, Code: "unknown_operation", Message: "no such operation"}
	}
	req := c.Request()
	header := req.Header.Get(headerPaymentSignature)
	refunder, can := s.cfg.Payments.(x402.Refunder)
	if header == "" || !entry.sold() || !can {
		return s.write(c, s.unpaid(req.Context(), entry))
	}
	ctx := req.Context()
	pending, err := refunder.Refund(ctx, entry.op.Name, header)
	var resp *x402.SettleResponse
	if err == nil {
		resp, err = s.awaitRefund(ctx, pending)
	}
	if err != nil {
		var refusal *x402.Refusal
		if errors.As(err, &refusal) {
			s.cfg.Metrics.PaymentRefused(entry.op.Name, refusal.Reason)
			return s.write(c, s.requote(ctx, entry.op.Name, refusal, nil))
		}
		return s.write(c, s.failed(ctx, s.refusal(ctx, entry, err)))
	}
	return s.write(c, outcome{status: http.StatusOK, settlement: resp,
		result: json.RawMessage(`{"refunded":` + strconv.Quote(resp.Amount) + `,"transaction":` + strconv.Quote(resp.Transaction) + `}`)})
}

// errRefundPending is the answer of a refund whose outcome did not come
// within the wait.
var errRefundPending = &Error{Status: http.StatusServiceUnavailable, Code: "refund_pending",
	Message: "the refund is being made; send the same refund again to wait for its outcome"}

// awaitRefund waits up to ToolWait for the outcome of refund p: its
// response, or its *Refusal; errRefundPending past the wait.
func (s *Server) awaitRefund(ctx context.Context, p *x402.PendingRefund) (*x402.SettleResponse, error) {
	sub := s.cfg.Listener.Subscribe(p.Stream)
	defer sub.Close()
	timer := s.cfg.Clock.NewTimer(s.cfg.ToolWait)
	defer timer.Stop()
	for {
		// Read after subscribing: an outcome appended before is read
		// here, one appended after wakes the loop.
		resp, err := p.Outcome(ctx)
		if err != nil || resp != nil {
			return resp, err
		}
		select {
		case <-sub.C:
		case <-timer.C():
			return nil, errRefundPending
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
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
	if !x402.SameJSON(prior.Payment.Payload, p.Payload) {
		return nil, nil
	}
	return prior, nil
}

// await waits up to wait for call a of op to end and answers it, or
// answers 202 with the poll URL.
func (s *Server) await(c echo.Context, op string, a *admitted, wait time.Duration) error {
	ctx := c.Request().Context()
	call, err := s.wait(ctx, a, wait, 0, nil)
	return s.write(c, s.outcomeOf(ctx, op, a, call, err))
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
		return s.write(c, s.outcomeOf(ctx, call.Op, nil, call, nil))
	}
	return s.await(c, call.Op, &admitted{id: id, token: call.Token, sub: sub}, wait)
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

// newID returns a call id: 16 bytes in hex, the first six the time in
// unix milliseconds (big-endian), the others random. Ids that grow with
// time land at the end of the indexes on them (calls_pkey, and the event
// log's events_stream on "call/<id>"), which then fill their pages rather
// than splitting them at random places, half empty (docs/performance.md,
// The ledger); a call's poll token, not its id, is its capability.
func newID() string {
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (8 * (5 - i)))
	}
	_, _ = rand.Read(b[6:])
	return hex.EncodeToString(b[:])
}

// newToken returns a random poll capability.
func newToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
