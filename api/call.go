package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm/channel"
)

// A paid call goes through one pipeline whatever carried it (an HTTP request
// or an MCP tool call): admit validates the input, verifies the payment and
// records and queues the call in one transaction, or finds the call the same
// payment made before; wait waits for the call's end. Each transport only
// renders the outcome.

// admitted is a paid call recorded (or found again), subscribed to so that
// its end is not missed. close must be called once done.
type admitted struct {
	id, token string
	sub       *store.Subscription
	// final is set when the call may already have ended (it was found
	// again): it is read before waiting.
	final bool
}

func (a *admitted) close() { a.sub.Close() }

// admit runs a call of entry's operation with body, paid by header (a
// PAYMENT-SIGNATURE value). Errors are an *Error (the input refused, the
// payment not verifiable now, the operation not sold), an *x402.Refusal (the
// payment refused, counted under its reason), or another error (the
// database). Nothing is charged on any error.
func (s *Server) admit(ctx context.Context, entry *opEntry, body []byte, header string) (*admitted, error) {
	if !entry.sold() {
		return nil, errNotSellable
	}
	callID := newID()
	args, err := entry.op.Decode(callID, body, &s.cfg.Limits)
	if err != nil {
		return nil, invalidInput(entry, err)
	}

	requestHash := hashRequest(entry.op.Name, body)
	// A payment identifier is checked before the payment: one that breaks
	// the extension's rules is a 400, and one its payer used before gets
	// that call (identified), whatever the payment is worth now.
	paymentID, err := s.cfg.Payments.PaymentID(header)
	if err != nil {
		return nil, s.invalidPaymentID(entry, err)
	}
	if paymentID != "" {
		if a, handled, err := s.identified(ctx, entry, header, paymentID, requestHash); handled {
			return a, err
		}
	}
	// The chain is read for a payment only while its client address may
	// have payments refused after such a read (refusedLimiter). A payment
	// accepted before and sent again is no refusal.
	guard, done := s.refused.guard(ctx, clientOf(ctx))
	vctx := x402.WithValidFor(x402.WithChainGuard(ctx, guard), s.validFor(entry))
	payment, err := s.cfg.Payments.Verify(vctx, entry.op.Name, header)
	if err != nil {
		prior, lerr := s.acceptedBefore(ctx, entry, header, err)
		if lerr != nil {
			// Whether this payment was accepted before is unknown: not a
			// refusal (the client would give up on a paid result).
			done(lerr)
			return nil, lerr
		}
		if prior != nil {
			done(nil)
			return s.resume(entry, prior, requestHash)
		}
		done(err)
		return nil, s.refusal(ctx, entry, err)
	}
	done(nil)
	// A payer or address whose calls ended unpaid too often gets no more
	// work until its tokens come back (unpaidLimiter).
	client := clientOf(ctx)
	held, by, limited := s.unpaidWork.admit(store.UnpaidPayerKey(payment.Network, payment.Payer), store.UnpaidClientKey(client))
	if limited != nil {
		s.cfg.Metrics.UnpaidWorkLimited(entry.op.Name, by)
		s.cfg.Metrics.PaymentRefused(entry.op.Name, limited.Code)
		return nil, limited
	}
	// The tokens a call holds are given back when it ends, followed from
	// before it is recorded.
	var follow *store.Subscription
	if len(held) > 0 {
		follow = s.cfg.Listener.Subscribe(store.CallStream(callID))
		defer func() {
			if follow != nil {
				follow.Close()
				s.unpaidWork.release(held)
			}
		}()
	}

	token := newToken()
	sub := s.cfg.Listener.Subscribe(store.CallStream(callID))
	adm := &admission{
		callID: callID,
		verified: store.PaymentVerified{
			Op: entry.op.Name, Token: token, RequestHash: requestHash, Payment: *payment,
		},
		job:     river.InsertManyParams{Args: args.PaidOn(payment.Network, payment.ValidBefore).PaidBy(payment.Payer, client), InsertOpts: &river.InsertOpts{Queue: entry.op.Queue, MaxAttempts: maxAttempts(entry.op)}},
		reserve: s.reservation(callID, payment),
	}
	if paymentID != "" {
		adm.identified = &store.PaymentIdentified{Payer: payment.Payer, ID: paymentID}
	}
	adm.hold, adm.network = payment.Hold, payment.Network
	err = s.admitter.Commit(ctx, adm)
	if err == nil && adm.unheld {
		// Another call took the channel, or charged it, since the payment
		// was verified: verified again, it is answered channel_busy, the
		// corrective 402, or the call that holds it (this very payment
		// sent twice at once).
		sub.Close()
		return s.channelTaken(ctx, entry, header, requestHash)
	}
	for reads := 0; err == nil && adm.reserved.Outcome != store.ReserveHeld; reads++ {
		// The payment sent again while its call is in flight is that
		// call's, not one more to reserve; so is a payment under a
		// payment identifier another payment of its payer holds.
		prior, byID, perr := s.admittedBefore(ctx, payment, paymentID)
		if perr == nil {
			sub.Close()
			if byID {
				return s.resumeIdentified(ctx, entry, header, payment, prior, requestHash, true)
			}
			return s.resume(entry, prior, requestHash)
		}
		if !errors.Is(perr, store.ErrNotFound) {
			err = fmt.Errorf("reserve: %w", perr)
			break
		}
		r := adm.reserve
		if adm.reserved.Outcome == store.ReserveShort && !r.Cached {
			sub.Close()
			// A refusal after a check on chain, as the client
			// address's other refused payments are counted.
			s.refused.refuse(clientOf(ctx))
			return nil, s.refusal(ctx, entry, &x402.Refusal{Reason: x402.ReasonInsufficientFunds, Message: fmt.Sprintf(
				"%s holds %s of %s on %s, and its payments in flight here (verified, not yet settled) already take %s: "+
					"this payment of %s is not covered; wait for them to end, or fund the wallet",
				r.Payer, balanceText(r.Balance, r.Amount), r.Asset, r.Network, adm.reserved.InFlight, r.Amount)})
		}
		if reads == maxBalanceReads {
			// Each balance read was stale by the time it was weighed:
			// the database or the chain is that slow now.
			sub.Close()
			return nil, s.refusal(ctx, entry, fmt.Errorf("reserve %s: %d balance reads older than %s when weighed", payment.Key(), reads, store.ReserveFresh))
		}
		// Other payments of the payer are in flight, the verification
		// is not fresh, or the balance known was read moments ago and
		// is short: the payment is weighed against the balance the
		// chain shows now.
		if err = s.readBalance(ctx, r, payment); err != nil {
			sub.Close()
			return nil, s.refusal(ctx, entry, err)
		}
		err = s.admitter.Commit(ctx, adm)
	}
	if errors.Is(err, store.ErrConflict) {
		sub.Close()
		// A payment already used (the unique index on its key refused the
		// call): the same request gets the first call's answer, a safe
		// retry; any other request is refused. Or a payment identifier
		// its payer's other payment took meanwhile (payment_ids refused
		// it): that call's, the payment verified.
		prior, byID, gerr := s.admittedBefore(ctx, payment, paymentID)
		if gerr != nil {
			return nil, fmt.Errorf("replayed payment: %w", gerr)
		}
		if byID {
			return s.resumeIdentified(ctx, entry, header, payment, prior, requestHash, true)
		}
		return s.resume(entry, prior, requestHash)
	}
	if err != nil {
		sub.Close()
		return nil, fmt.Errorf("queue call: %w", err)
	}
	s.cfg.Metrics.PaymentVerified(entry.op.Name, payment.Network)
	if follow != nil {
		s.unpaidWork.followLater(callID, held, follow)
		follow = nil
	}
	return &admitted{id: callID, token: token, sub: sub}, nil
}

// channelTaken answers a batch-settlement payment whose channel its
// admission could not hold: verified again, its refusal (channel_busy, the
// corrective 402) or the call the same payment was admitted for.
func (s *Server) channelTaken(ctx context.Context, entry *opEntry, header string, requestHash []byte) (*admitted, error) {
	_, err := s.cfg.Payments.Verify(ctx, entry.op.Name, header)
	if err == nil {
		// Freed meanwhile: the client may send it again.
		err = &x402.Refusal{Reason: channel.ReasonChannelBusy, Message: "another call of this channel was running: send this payment again"}
	}
	prior, lerr := s.acceptedBefore(ctx, entry, header, err)
	if lerr != nil {
		return nil, lerr
	}
	if prior != nil {
		return s.resume(entry, prior, requestHash)
	}
	return nil, s.refusal(ctx, entry, err)
}

// validFor is how long a payment for entry's operation must stay valid
// after its verification: the operation's time budget and the settlement
// window (Config.PaymentValidFor).
func (s *Server) validFor(*opEntry) time.Duration { return s.cfg.PaymentValidFor }

// invalidInput is the error of an input Decode refused with err: 400
// invalid_request naming the field.
func invalidInput(entry *opEntry, err error) error {
	var invalid *jobs.InvalidError
	if errors.As(err, &invalid) {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: invalid.Message, Field: invalid.Field}
	}
	return fmt.Errorf("decode %s: %w", entry.op.Name, err)
}

// resume returns the call prior, which accepted the payment now resent, when
// the request is the same one (a safe retry), and refuses it otherwise.
func (s *Server) resume(entry *opEntry, prior *store.Call, requestHash []byte) (*admitted, error) {
	if prior.Op != entry.op.Name || subtle.ConstantTimeCompare(prior.RequestHash, requestHash) != 1 {
		return nil, s.alreadyUsed(entry)
	}
	return &admitted{id: prior.ID, token: prior.Token, sub: s.cfg.Listener.Subscribe(store.CallStream(prior.ID)), final: true}, nil
}

// admittedBefore returns the call admitted with payment (its replay key),
// or else, when paymentID is set, the call admitted under its payer's
// paymentID (byID), or store.ErrNotFound.
func (s *Server) admittedBefore(ctx context.Context, payment *x402.Payment, paymentID string) (prior *store.Call, byID bool, err error) {
	prior, err = store.CallGetByPaymentKey(ctx, s.cfg.Pool, payment.Key())
	if err == nil || !errors.Is(err, store.ErrNotFound) || paymentID == "" {
		return prior, false, err
	}
	prior, err = store.CallGetByPaymentID(ctx, s.cfg.Pool, payment.Payer, paymentID)
	return prior, err == nil, err
}

// Payment identifiers (x402's payment-identifier extension) are a client's
// idempotency keys, scoped by payer: the first paid call of a payer that
// carries an id binds it (payment_ids, in the call's own transaction),
// and a payment of the same payer with the same id gets that call again,
// never a new one, whether it is the same payment sent again or a new one
// the client signed after losing the answer. The same request (operation,
// body, network) gets the call's answer as a safe retry does: its stored
// result and PAYMENT-RESPONSE, or the call still running; another request
// is refused 409 payment_identifier_conflict. A new payment under a used
// id only proves its payer (Verifier.Authenticate: its signature, and that
// it paid no other call): it is not verified as a charge, reserved,
// recorded or settled, and the client is charged once.

// identified answers a payment carrying payment identifier id when its
// payer's id is bound to a call (resumeIdentified). handled is false when
// it is not, or when the payment cannot be read (Verify refuses it): the
// payment is then verified and admitted as any other, binding the id.
func (s *Server) identified(ctx context.Context, entry *opEntry, header, id string, requestHash []byte) (a *admitted, handled bool, err error) {
	p, err := s.cfg.Payments.Identify(entry.op.Name, header)
	if err != nil {
		return nil, false, nil
	}
	prior, err := store.CallGetByPaymentID(ctx, s.cfg.Pool, p.Payer, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("look up a payment identifier: %w", err)
	}
	a, err = s.resumeIdentified(ctx, entry, header, p, prior, requestHash, false)
	return a, true, err
}

// resumeIdentified returns call prior, bound to the payment identifier
// that payment p (sent in header) carries, for the same request, and
// refuses another request 409. A payment other than prior's own is first
// authenticated (unless verified already): its payer signed it, and it
// paid no other call.
func (s *Server) resumeIdentified(ctx context.Context, entry *opEntry, header string, p *x402.Payment, prior *store.Call, requestHash []byte, verified bool) (*admitted, error) {
	if !verified && !x402.SameJSON(prior.Payment.Payload, p.Payload) {
		if _, err := s.cfg.Payments.Authenticate(ctx, entry.op.Name, header); err != nil {
			return nil, s.refusal(ctx, entry, err)
		}
		other, err := store.CallGetByPaymentKey(ctx, s.cfg.Pool, p.Key())
		switch {
		case err == nil && other.ID != prior.ID:
			return nil, s.alreadyUsed(entry)
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return nil, fmt.Errorf("look up a payment sent under a payment identifier: %w", err)
		}
	}
	if prior.Op != entry.op.Name || subtle.ConstantTimeCompare(prior.RequestHash, requestHash) != 1 || prior.Network != p.Network {
		s.cfg.Metrics.PaymentRefused(entry.op.Name, errPaymentIDConflict)
		return nil, &Error{Status: http.StatusConflict, Code: errPaymentIDConflict,
			Message: "this payment identifier was used for another request (another operation, body or network); nothing was charged: use a new identifier for a new request"}
	}
	return &admitted{id: prior.ID, token: prior.Token, sub: s.cfg.Listener.Subscribe(store.CallStream(prior.ID)), final: true}, nil
}

// alreadyUsed is the refusal of a payment that paid another request (402
// payment_already_used), counted.
func (s *Server) alreadyUsed(entry *opEntry) error {
	s.cfg.Metrics.PaymentRefused(entry.op.Name, "payment_already_used")
	return &x402.Refusal{Reason: "payment_already_used", Message: "this payment was used for another request"}
}

// errPaymentIDConflict is the code of a payment identifier sent again with
// another request (409).
const errPaymentIDConflict = "payment_identifier_conflict"

// invalidPaymentID is the error of a payment identifier that breaks the
// extension's rules (err, an *x402.InvalidPaymentIDError): 400, before the
// payment is verified.
func (s *Server) invalidPaymentID(entry *opEntry, err error) error {
	var invalid *x402.InvalidPaymentIDError
	if !errors.As(err, &invalid) {
		return fmt.Errorf("read the payment identifier: %w", err)
	}
	s.cfg.Metrics.PaymentRefused(entry.op.Name, x402.ReasonInvalidPaymentID)
	return &Error{Status: http.StatusBadRequest, Code: x402.ReasonInvalidPaymentID, Message: invalid.Message + "; nothing was charged",
		Field: `extensions["payment-identifier"].info.id`}
}

// refusal returns the error of a payment Verify refused with err, counted
// under the code it answers: the *x402.Refusal itself, or an *Error when it
// is not a refusal (the operation not sold, verification unavailable).
func (s *Server) refusal(ctx context.Context, entry *opEntry, err error) error {
	var refusal *x402.Refusal
	var apiErr *Error
	switch {
	case errors.As(err, &refusal):
		s.cfg.Metrics.PaymentRefused(entry.op.Name, refusal.Reason)
		return refusal
	case errors.As(err, &apiErr):
	case errors.Is(err, x402.ErrNotSellable):
		apiErr = errNotSellable
	default:
		s.logger.WarnContext(ctx, "payment verification unavailable", "error", err)
		apiErr = &Error{Status: http.StatusServiceUnavailable, Code: "verification_unavailable", Message: "the payment could not be verified now; nothing was charged, try again"}
	}
	s.cfg.Metrics.PaymentRefused(entry.op.Name, apiErr.Code)
	return apiErr
}

// wait waits up to wait for call a to end and returns it in its final state,
// or nil when it still runs then. tick, when set, is called every every while
// the call runs (progress for the client).
func (s *Server) wait(ctx context.Context, a *admitted, wait, every time.Duration, tick func()) (*store.Call, error) {
	timer := s.cfg.Clock.NewTimer(wait)
	defer timer.Stop()
	var ticks <-chan time.Time
	if tick != nil && every > 0 {
		t := s.cfg.Clock.NewTicker(every)
		defer t.Stop()
		ticks = t.C()
	}
	for read := a.final; ; read = true {
		if read {
			call, err := s.answer(ctx, a.id)
			if err != nil {
				return nil, err
			}
			if store.IsFinal(call.State) {
				return call, nil
			}
		}
	wait:
		for {
			select {
			case typ := <-a.sub.C:
				if typ == "" || store.IsFinalEvent(typ) {
					break wait
				}
			case <-ticks:
				tick()
			case <-timer.C():
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
}

// answerRead is a call whose answer is read (Server.answer): the call as
// store.CallGetAnswer reads it, nil when it does not exist.
type answerRead struct {
	id   string
	call *store.Call
}

// newAnswers returns what reads the calls that requests wait for: calls
// that end together, whose notifications arrive together, are read with
// one statement (store.CallListAnswers), not one each.
func newAnswers(pool *pgxpool.Pool, clk clock.Clock) *store.GroupCommitter[*answerRead] {
	return store.NewGroupReader(&store.GroupCommitConfig{Clock: clk}, func(ctx context.Context, reads []*answerRead) error {
		ids := make([]string, len(reads))
		for i, r := range reads {
			ids[i] = r.id
		}
		calls, err := store.CallListAnswers(ctx, pool, ids)
		if err != nil {
			return err
		}
		byID := make(map[string]*store.Call, len(calls))
		for _, c := range calls {
			byID[c.ID] = c
		}
		for _, r := range reads {
			r.call = byID[r.id]
		}
		return nil
	})
}

// answer returns call id as store.CallGetAnswer reads it, read with the
// other calls being read then (newAnswers).
func (s *Server) answer(ctx context.Context, id string) (*store.Call, error) {
	r := &answerRead{id: id}
	if err := s.answers.Commit(ctx, r); err != nil {
		return nil, fmt.Errorf("get call %s: %w", id, err)
	}
	if r.call == nil {
		return nil, fmt.Errorf("get call %s: %w", id, store.ErrNotFound)
	}
	return r.call, nil
}
