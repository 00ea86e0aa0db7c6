package evm_test

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
)

// TestVerifier_Authenticate checks the payments that only prove their payer
// (a new payment under a payment identifier used before): its signature,
// recipient and amount count; its window and its payer's funds do not.
func TestVerifier_Authenticate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newVerifier(t)
	testCases := []struct {
		name       string
		pay        func(p *payment)
		payload    func(pp *x402.PaymentPayload)
		wantReason string
	}{
		{name: "ok, a payer with no funds", pay: func(p *payment) { p.key = newKey(t); p.auth.From = crypto.PubkeyToAddress(p.key.PublicKey) }},
		{name: "ok, expired", pay: func(p *payment) { p.auth.ValidBefore = big.NewInt(time.Now().Unix() - 60) }},
		{name: "nok, signed by another key", pay: func(p *payment) { p.key = newKey(t) }, wantReason: evm.ReasonSignature},
		{name: "nok, another recipient", pay: func(p *payment) { p.auth.To = crypto.PubkeyToAddress(newKey(t).PublicKey) }, wantReason: evm.ReasonRecipientMismatch},
		{name: "nok, another amount", pay: func(p *payment) { p.auth.Value = big.NewInt(1) }, wantReason: evm.ReasonValueMismatch},
		{name: "nok, another network", payload: func(pp *x402.PaymentPayload) { pp.Accepted.Network = "eip155:84532" }, wantReason: evm.ReasonNetworkMismatch},
		{name: "nok, not a payload", payload: func(pp *x402.PaymentPayload) { pp.Payload = []byte(`{"x":1}`) }, wantReason: evm.ReasonPayload},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPayment(t, chain.Account(3).Key, requirement())
			if tc.pay != nil {
				tc.pay(p)
			}
			pp := p.payload(t, requirement())
			if tc.payload != nil {
				tc.payload(pp)
			}
			payer, err := v.Authenticate(ctx, requirement(), pp)
			if tc.wantReason != "" {
				requireRefusal(t, err, tc.wantReason)
				return
			}
			require.NoError(t, err)
			require.Equal(t, p.auth.From.Hex(), payer)
		})
	}
}
