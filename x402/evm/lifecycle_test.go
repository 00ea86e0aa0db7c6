package evm_test

import (
	"context"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/leaktest"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

// blackHole is a node that takes every transaction and mines none of them.
type blackHole struct{ evm.Backend }

func (blackHole) SendTransaction(context.Context, *types.Transaction) error { return nil }

// TestRelayer_StartStop settles only between Start and Stop, each done once
// however often it is called, and Stop ends the settlements in flight
// (alone and in a batch, awaiting a receipt that will not come) and waits
// for every goroutine the relayer started: none is left (not parallel, so
// that other tests' goroutines are not counted).
func TestRelayer_StartStop(t *testing.T) {
	for _, mode := range relayerModes {
		t.Run(mode.name, func(t *testing.T) {
			leaktest.Check(t)
			ctx := context.Background()
			v := newVerifier(t)
			newStopped := func(node evm.Backend) *evm.Relayer {
				cfg := &evm.RelayerConfig{Key: chain.Account(devchain.RelayerAccount).Key, Chains: map[string]evm.Backend{"eip155:8453": node},
					KeepEvery: 20 * time.Millisecond, KeepIdle: 20 * time.Millisecond}
				for _, opt := range mode.opts {
					opt(cfg)
				}
				r, err := evm.NewRelayer(cfg)
				require.NoError(t, err)
				return r
			}
			r := newStopped(chain.Client())
			payments := verifiedPayments(t, v, fundedKeys(t, 3, 10_000))

			_, err := r.Settle(ctx, payments[0])
			require.ErrorContains(t, err, "not running", "settled before Start")

			require.NoError(t, r.Start(ctx))
			require.NoError(t, r.Start(ctx))
			resp, err := r.Settle(ctx, payments[0])
			require.NoError(t, err)
			require.True(t, resp.Success, resp.ErrorReason)
			// The keepers run their passes meanwhile.
			time.Sleep(100 * time.Millisecond)
			r.Stop()
			r.Stop()
			_, err = r.Settle(ctx, payments[1])
			require.ErrorContains(t, err, "not running", "settled after Stop")

			// Started again, it settles again.
			require.NoError(t, r.Start(ctx))
			resp, err = r.Settle(ctx, payments[1])
			require.NoError(t, err)
			require.True(t, resp.Success, resp.ErrorReason)
			r.Stop()

			// A settlement whose transaction is never mined waits for its
			// receipt until Stop.
			lost := newStopped(blackHole{chain.Client()})
			require.NoError(t, lost.Start(ctx))
			done := make(chan error, 1)
			go func() {
				_, err := lost.Settle(ctx, payments[2])
				done <- err
			}()
			time.Sleep(300 * time.Millisecond)
			select {
			case err := <-done:
				t.Fatalf("a settlement never mined ended before Stop: %v", err)
			default:
			}
			stopped := make(chan struct{})
			go func() {
				lost.Stop()
				close(stopped)
			}()
			select {
			case <-stopped:
			case <-time.After(10 * time.Second):
				t.Fatal("Stop did not end the settlement in flight")
			}
			require.Error(t, <-done)
		})
	}
}
