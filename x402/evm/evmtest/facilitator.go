package evmtest

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/x402d/x402d/x402"
)

// Facilitator is a remote x402 facilitator served on loopback: /verify,
// /settle and /supported under /facilitator/, speaking the wire format of
// the official facilitators, verifying and settling with the Stack's
// verifier and relayer.
type Facilitator struct {
	// URL is the facilitator's base URL (ending in /facilitator).
	URL string
	// Token, when set, is the Authorization header every request must
	// carry.
	Token string
	// Fail, when not zero, is the status every endpoint answers with.
	Fail atomic.Int32
	// LoseSettleAnswers is how many of the next settlements /settle
	// carries out and then answers 504, as a gateway that timed out would:
	// the client never learns that they settled.
	LoseSettleAnswers atomic.Int32
}

// Facilitator starts a facilitator of s that tb's cleanup stops; requests
// must carry the Authorization header token unless it is empty.
func (s *Stack) Facilitator(tb testing.TB, token string) *Facilitator {
	tb.Helper()
	f := &Facilitator{Token: token}
	decode := func(w http.ResponseWriter, r *http.Request) (*x402.PaymentPayload, *x402.Requirements, bool) {
		if status := f.Fail.Load(); status != 0 {
			http.Error(w, "upstream unavailable", int(status))
			return nil, nil, false
		}
		if (token != "" && r.Header.Get("Authorization") != token) || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return nil, nil, false
		}
		var body struct {
			X402Version         int                  `json:"x402Version"`
			PaymentPayload      *x402.PaymentPayload `json:"paymentPayload"`
			PaymentRequirements *x402.Requirements   `json:"paymentRequirements"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.X402Version != 2 || body.PaymentPayload == nil || body.PaymentRequirements == nil {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return nil, nil, false
		}
		return body.PaymentPayload, body.PaymentRequirements, true
	}
	reply := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /facilitator/verify", func(w http.ResponseWriter, r *http.Request) {
		payload, req, ok := decode(w, r)
		if !ok {
			return
		}
		p, err := s.Verifier.Verify(r.Context(), req, payload)
		var refusal *x402.Refusal
		switch {
		case errors.As(err, &refusal):
			reply(w, http.StatusOK, x402.VerifyResponse{InvalidReason: refusal.Reason, InvalidMessage: refusal.Message})
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			reply(w, http.StatusOK, x402.VerifyResponse{IsValid: true, Payer: p.Payer})
		}
	})
	mux.HandleFunc("POST /facilitator/settle", func(w http.ResponseWriter, r *http.Request) {
		payload, req, ok := decode(w, r)
		if !ok {
			return
		}
		p, err := s.Verifier.Verify(r.Context(), req, payload)
		var refusal *x402.Refusal
		if errors.As(err, &refusal) {
			// The TS facilitator answers 400 with a SettleResponse.
			reply(w, http.StatusBadRequest, x402.SettleResponse{ErrorReason: refusal.Reason, Network: req.Network})
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp, err := s.Relayer.Settle(r.Context(), p)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if n := f.LoseSettleAnswers.Load(); n > 0 && f.LoseSettleAnswers.CompareAndSwap(n, n-1) {
			http.Error(w, "gateway timeout", http.StatusGatewayTimeout)
			return
		}
		reply(w, http.StatusOK, resp)
	})
	mux.HandleFunc("GET /facilitator/supported", func(w http.ResponseWriter, r *http.Request) {
		if status := f.Fail.Load(); status != 0 {
			http.Error(w, "upstream unavailable", int(status))
			return
		}
		_, _ = w.Write([]byte(`{"kinds":[{"x402Version":2,"scheme":"exact","network":"eip155:8453"},
			{"x402Version":1,"scheme":"exact","network":"base"},
			{"x402Version":2,"scheme":"exact","network":"solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp","extra":{"feePayer":"2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"}}],
			"extensions":["bazaar"],"signers":{"eip155:*":["` + s.Relayer.Address().Hex() + `"]},"unknown":true}`))
	})
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	f.URL = srv.URL + "/facilitator"
	return f
}
