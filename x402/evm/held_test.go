package evm_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
)

// TestRelayer_HoldsNothingOnceSettled settles rounds of concurrent payments,
// each sent alone and in batches, on the devchain, whose receipts come before
// the keeper's first pass: once they end the relayer holds no transaction,
// receipt wait or payment of theirs, and its in-memory nonces only the last
// transaction's. A relayer that kept any of them per settlement would grow
// by it for every paid call of a process that runs for months.
func TestRelayer_HoldsNothingOnceSettled(t *testing.T) {
	t.Parallel()
	for _, mode := range relayerModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			v := newVerifier(t)
			r := newRelayerOn(t, chain.Client(), mode.opts...)
			for round := range 3 {
				payments := verifiedPayments(t, v, fundedKeys(t, 24, 10_000))
				results, errs := settleAll(payments, func(_ int, p *x402.Payment) (*x402.SettleResponse, error) { return r.Settle(ctx, p) })
				for i := range payments {
					require.NoError(t, errs[i])
					require.True(t, results[i].Success, results[i].ErrorReason)
				}
				own, waiters, sent, nonces := evm.Held(r)
				t.Logf("round %d: own %d, waiters %d, sent %d, nonces %d", round, own, waiters, sent, nonces)
				require.Zero(t, own, "transactions of settlements that ended")
				require.Zero(t, waiters, "receipt waits of settlements that ended")
				require.Zero(t, sent, "payments of settlements that ended")
				// The nonces below the last allocation's floor are gone:
				// those of the round's last sends at most.
				require.LessOrEqual(t, nonces, len(payments), "nonces of earlier rounds")
			}
			// One more settlement allocates above every nonce mined: its
			// own is the only one left.
			p := verifiedPayments(t, v, fundedKeys(t, 1, 10_000))[0]
			resp, err := r.Settle(ctx, p)
			require.NoError(t, err)
			require.True(t, resp.Success, resp.ErrorReason)
			_, _, _, nonces := evm.Held(r)
			require.Equal(t, 1, nonces, "nonces of settlements that ended")
		})
	}
}
