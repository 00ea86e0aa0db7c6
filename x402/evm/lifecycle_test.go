package evm_test

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/leaktest"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// blackHole is a node that takes every transaction and mines none of them.
type blackHole struct{ evm.Backend }

func (blackHole) SendTransaction(context.Context, *types.Transaction) error { return nil }

// passWatch is a node that tells of the keepers' passes between
// settlements: their reads of the relayer's nonce for finality.
type passWatch struct {
	evm.Backend
	passes chan struct{}
}

func (w passWatch) NonceAt(ctx context.Context, account common.Address, block *big.Int) (uint64, error) {
	if ethrpc.PurposeOf(ctx) == ethrpc.PurposeFinality {
		select {
		case w.passes <- struct{}{}:
		default:
		}
	}
	return w.Backend.NonceAt(ctx, account, block)
}

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
			newStopped := func(node evm.Backend, c clock.Clock) *evm.Relayer {
				cfg := &evm.RelayerConfig{Key: chain.Account(devchain.RelayerAccount).Key, Chains: map[string]evm.Backend{"eip155:8453": node},
					KeepEvery: 20 * time.Millisecond, KeepIdle: 20 * time.Millisecond, Clock: c}
				for _, opt := range mode.opts {
					opt(cfg)
				}
				r, err := evm.NewRelayer(cfg)
				require.NoError(t, err)
				return r
			}
			watch := passWatch{Backend: chain.Client(), passes: make(chan struct{}, 1)}
			r := newStopped(watch, nil)
			payments := verifiedPayments(t, v, fundedKeys(t, 3, 10_000))

			_, err := r.Settle(ctx, payments[0])
			require.ErrorContains(t, err, "not running", "settled before Start")

			require.NoError(t, r.Start(ctx))
			require.NoError(t, r.Start(ctx))
			resp, err := r.Settle(ctx, payments[0])
			require.NoError(t, err)
			require.True(t, resp.Success, resp.ErrorReason)
			// Stopped once the keepers run their passes between
			// settlements.
			<-watch.passes
			<-watch.passes
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
			// receipt until Stop: on a clock that does not move, once it
			// waits (the keeper's idle timer and its receipt's pause are
			// pending), nothing but Stop ends it.
			fake := clock.NewFake(time.Now())
			lost := newStopped(blackHole{chain.Client()}, fake)
			require.NoError(t, lost.Start(ctx))
			done := make(chan error, 1)
			go func() {
				_, err := lost.Settle(ctx, payments[2])
				done <- err
			}()
			require.NoError(t, fake.Wait(t.Context(), 2))
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
