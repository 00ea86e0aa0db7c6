package evm_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/logtest"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// TestAnvil_Endpoints settles paid calls on anvil through two endpoints,
// proxies on loopback in front of the one node, one of which misbehaves
// as RPC providers do while settlements go on: lagging blocks behind (its
// head, receipts, blocks and latest state those of a node behind), answering
// 429 with Retry-After in bursts, or dying mid-run (its listener closed).
// Every payment is verified and settled once through the endpoints, the
// node is left holding nothing (no nonce gap), and the relayer's nonce
// store holds no nonce the chain has not mined.
func TestAnvil_Endpoints(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		fault func(p *anviltest.Proxy)
		mode  []func(*evm.RelayerConfig)
		// check tells that the fault happened and was seen.
		check func(t *testing.T, p *anviltest.Proxy, st ethrpc.Status, obs *limitObserver)
	}{
		{
			name:  "Lagging",
			fault: func(p *anviltest.Proxy) { p.Lag.Store(3) },
			check: func(t *testing.T, p *anviltest.Proxy, st ethrpc.Status, _ *limitObserver) {
				require.GreaterOrEqual(t, st.Lag, uint64(2), "the endpoint is seen behind")
				require.Positive(t, p.Served.Load())
				// Blocks are read from an endpoint whose head has them:
				// the scans never asked this one for a block it lacks.
				require.Zero(t, p.HiddenBlocks.Load(), "a block was asked of the endpoint behind")
			},
		},
		{
			name:  "LimitedInBursts",
			fault: func(p *anviltest.Proxy) { p.Burst.Store(true) },
			mode:  []func(*evm.RelayerConfig){batched},
			check: func(t *testing.T, p *anviltest.Proxy, _ ethrpc.Status, obs *limitObserver) {
				require.Positive(t, p.Limited.Load(), "429s were answered")
				require.Positive(t, obs.limited.Load(), "429s were seen")
			},
		},
		{
			name: "Dying",
			fault: func(p *anviltest.Proxy) {
				time.AfterFunc(3*time.Second, p.Die)
			},
			check: func(t *testing.T, p *anviltest.Proxy, st ethrpc.Status, _ *limitObserver) {
				require.True(t, p.Dead.Load(), "the endpoint died")
				require.Positive(t, p.Served.Load(), "the endpoint served before it died")
				require.False(t, st.In, "the dead endpoint is out")
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupAnvil(t, &anviltest.Config{BlockTime: time.Second})
			faulty, healthy := anviltest.NewProxy(t, b.node.URL), anviltest.NewProxy(t, b.node.URL)
			obs := map[string]*limitObserver{}
			var obsMu sync.Mutex
			var logs logtest.Buffer
			e, err := ethrpc.New(ctx, &ethrpc.Config{
				Network:      "eip155:8453",
				URLs:         []string{faulty.URL + "/v2/SECRETKEY", healthy.URL + "/v2/SECRETKEY"},
				CallTimeout:  time.Second,
				ProbeEvery:   200 * time.Millisecond,
				LimitBackoff: 200 * time.Millisecond,
				Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
				Observe: func(_, endpoint string) ethrpc.Observer {
					obsMu.Lock()
					defer obsMu.Unlock()
					o := &limitObserver{}
					obs[endpoint] = o
					return o
				},
			})
			require.NoError(t, err)
			tt.fault(faulty)
			require.NoError(t, e.Start(ctx))
			t.Cleanup(e.Stop)

			v, err := evm.NewVerifier(&evm.VerifierConfig{Chains: map[string]evm.Reader{"eip155:8453": e}})
			require.NoError(t, err)
			r := b.relayer(t, e, tt.mode...)
			const n = 30
			payments := make([]*x402.Payment, n)
			for i := range payments {
				p, err := v.Verify(ctx, requirement(), newPayment(t, devAccountKey(t, i%8), requirement()).payload(t, requirement()))
				require.NoError(t, err)
				payments[i] = p
			}
			settleSpread(t, payments, 200*time.Millisecond, r)
			b.requireClean(t, n)

			relayerAddr := chain.Account(devchain.RelayerAccount).Address
			mined, err := b.node.Client.NonceAt(ctx, relayerAddr, nil)
			require.NoError(t, err)
			left, err := b.nonces.OutstandingNonces(ctx, "eip155:8453", relayerAddr, 0, mined)
			require.NoError(t, err)
			require.Empty(t, left, "nonces allocated and never mined")

			name := e.Status()[0].Name
			tt.check(t, faulty, e.Status()[0], obs[name])
			require.NotContains(t, logs.String(), "SECRETKEY", "logs name the host, never the URL")
		})
	}
}

// settleSpread starts the settlement of each payment interval after the
// previous one, so that settlements go on throughout a run, retries each
// until it succeeds (as River retries a job), and requires every one to
// succeed.
func settleSpread(t *testing.T, payments []*x402.Payment, interval time.Duration, r *evm.Relayer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	results, errs := settleSpaced(payments, interval, func(_ int, p *x402.Payment) (*x402.SettleResponse, error) {
		return settleRetried(ctx, r, p)
	})
	for i := range payments {
		require.NoError(t, errs[i], "settlement %d", i)
		require.True(t, results[i].Success, "settlement %d: %s", i, results[i].ErrorReason)
	}
}

// limitObserver counts the 429s of an endpoint.
type limitObserver struct{ limited atomic.Int64 }

func (o *limitObserver) ObserveCall(_ time.Duration, kind string) {
	if kind == ethrpc.RateLimited {
		o.limited.Add(1)
	}
}

func (o *limitObserver) SetLag(uint64) {}
func (o *limitObserver) SetIn(bool)    {}
