package ethrpc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
)

func TestPriorityGate(t *testing.T) {
	t.Parallel()
	const wait = 200 * time.Millisecond
	testCases := []struct {
		name string
		// settling is how many settlement calls are in flight.
		settling int
		// leave ends one of them once the call waits.
		leave bool
		// expire moves the clock past the wait.
		expire  bool
		cancel  bool
		wantErr error
	}{
		{name: "ok, room", settling: 1},
		{name: "ok, waits for a settlement call to end", settling: 2, leave: true},
		{name: "nok, shed when busy past the wait", settling: 2, expire: true, wantErr: ErrBusy},
		{name: "nok, the caller gives up", settling: 2, cancel: true, wantErr: context.Canceled},
		{name: "nok, settlement past the limit", settling: 5, leave: true, expire: true, wantErr: ErrBusy},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			g := &priorityGate{limit: 2, clock: fake}
			for range tc.settling {
				g.enter() // settlement never waits
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- g.wait(ctx, wait) }()
			if tc.settling >= g.limit {
				// The call waits on the clock.
				require.NoError(t, fake.Wait(t.Context(), 1))
			}
			if tc.leave {
				g.leave()
			}
			if tc.cancel {
				cancel()
			}
			if tc.expire {
				fake.Advance(wait)
			}
			err := <-done
			left := 0
			if tc.leave {
				left = 1
			}
			if tc.wantErr != nil {
				require.True(t, errors.Is(err, tc.wantErr), "%v", err)
				g.mu.Lock()
				defer g.mu.Unlock()
				require.Empty(t, g.waiters)
				require.Equal(t, tc.settling-left, g.inflight, "a shed call holds no place")
				return
			}
			require.NoError(t, err)
			g.leave()
			g.mu.Lock()
			defer g.mu.Unlock()
			require.Equal(t, tc.settling-left, g.inflight)
		})
	}
}
