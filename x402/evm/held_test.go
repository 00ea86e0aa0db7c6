package evm_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
)

// TestRelayer_HoldsNothingOnceSettled settles rounds of concurrent payments,
// each sent alone and in batches, with the nonces kept in memory and in
// Postgres, on the devchain, whose receipts come before any wait is long:
// once they end the relayer holds no transaction, receipt wait or payment of
// theirs, and its nonce store only the transactions since it last forgot the
// final ones (final at their receipts here, as on the devchain). A relayer
// that kept any of them per settlement would grow by it for every paid call
// of a process that runs for months.
func TestRelayer_HoldsNothingOnceSettled(t *testing.T) {
	t.Parallel()
	for _, mode := range relayerModes {
		for _, nonces := range []string{"Memory", "Postgres"} {
			t.Run(mode.name+nonces, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				v := newVerifier(t)
				// Receipts come in milliseconds: no wait lasts KeepEvery.
				const keepEvery = 200 * time.Millisecond
				// The devchain does not reorganise: its settlements are final
				// at their receipts, and nothing is kept for a reorganisation.
				// The relayer's clock is the real one, moved ahead by the
				// test when KeepEvery is to have passed.
				ahead := &aheadClock{}
				opts := append([]func(*evm.RelayerConfig){func(cfg *evm.RelayerConfig) {
					cfg.Clock = ahead
					cfg.KeepEvery = keepEvery
					cfg.Finality = map[string]evm.FinalityPolicy{"eip155:8453": {}}
				}}, mode.opts...)
				var db *dbtest.DB
				if nonces == "Postgres" {
					db = dbtest.Schema(ctx, t)
					opts = append(opts, func(cfg *evm.RelayerConfig) { cfg.Nonces = store.RelayerNonces{DB: db.Pool} })
				}
				r := newRelayerOn(t, chain.Client(), opts...)
				// kept returns the nonces the relayer's store keeps.
				kept := func() int {
					_, _, _, n := evm.Held(r)
					if db != nil {
						require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM relayer_txs").Scan(&n))
					}
					return n
				}
				const perRound = 24
				for round := range 3 {
					payments := verifiedPayments(t, v, fundedKeys(t, perRound, 10_000))
					results, errs := settleAll(payments, func(_ int, p *x402.Payment) (*x402.SettleResponse, error) { return r.Settle(ctx, p) })
					for i := range payments {
						require.NoError(t, errs[i])
						require.True(t, results[i].Success, results[i].ErrorReason)
					}
					own, waiters, sent, _ := evm.Held(r)
					t.Logf("round %d: own %d, waiters %d, sent %d, nonces kept %d", round, own, waiters, sent, kept())
					require.Zero(t, own, "transactions of settlements that ended")
					require.Zero(t, waiters, "receipt waits of settlements that ended")
					require.Zero(t, sent, "payments of settlements that ended")
				}
				// One more settlement, sent once every earlier one is
				// mined and KeepEvery has passed: its receipt's keeping
				// pass forgets them all.
				p := verifiedPayments(t, v, fundedKeys(t, 1, 10_000))[0]
				ahead.skip(keepEvery)
				resp, err := r.Settle(ctx, p)
				require.NoError(t, err)
				require.True(t, resp.Success, resp.ErrorReason)
				require.LessOrEqual(t, kept(), 1, "nonces of settlements that ended")
			})
		}
	}
}

// aheadClock is the real clock moved ahead by what a test skips: it reads
// the time and makes timers as the real one does, from a time later by
// every skip, so that a test makes a span pass without waiting it out
// while the chain's real time goes on.
type aheadClock struct{ by atomic.Int64 }

func (c *aheadClock) Now() time.Time { return time.Now().Add(time.Duration(c.by.Load())) }

func (c *aheadClock) NewTimer(d time.Duration) clock.Timer { return clock.Real().NewTimer(d) }

func (c *aheadClock) NewTicker(d time.Duration) clock.Ticker { return clock.Real().NewTicker(d) }

// skip moves the clock d ahead.
func (c *aheadClock) skip(d time.Duration) { c.by.Add(int64(d)) }
