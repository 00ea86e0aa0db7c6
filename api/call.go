package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/riverqueue/river"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
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
	err = s.admitter.Commit(ctx, adm)
	for reads := 0; err == nil && adm.reserved.Outcome != store.ReserveHeld; reads++ {
		// The payment sent again while its call is in flight is that
		// call's, not one more to reserve.
		prior, perr := store.CallGetByPaymentKey(ctx, s.cfg.Pool, payment.Key())
		if perr == nil {
			sub.Close()
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
		// retry; any other request is refused.
		prior, gerr := store.CallGetByPaymentKey(ctx, s.cfg.Pool, payment.Key())
		if gerr != nil {
			return nil, fmt.Errorf("replayed payment: %w", gerr)
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
		s.cfg.Metrics.PaymentRefused(entry.op.Name, "payment_already_used")
		return nil, &x402.Refusal{Reason: "payment_already_used", Message: "this payment was used for another request"}
	}
	return &admitted{id: prior.ID, token: prior.Token, sub: s.cfg.Listener.Subscribe(store.CallStream(prior.ID)), final: true}, nil
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
			call, err := store.CallGetAnswer(ctx, s.cfg.Pool, a.id)
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
