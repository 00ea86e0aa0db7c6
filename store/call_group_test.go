package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCallGroups(t *testing.T) {
	t.Parallel()
	ev := func(stream, typ string) NewEvent { return NewEvent{Stream: stream, Type: typ} }
	testCases := []struct {
		name   string
		events []NewEvent
		want   [][]int
	}{
		{
			name: "admissions: the inserts together, job.queued superseded",
			events: []NewEvent{
				ev("call/a", EventPaymentVerified), ev("call/a", EventJobQueued),
				ev("call/b", EventPaymentVerified), ev("call/b", EventJobQueued),
				ev("call/c", EventPaymentVerified), ev("call/c", EventJobQueued),
			},
			want: [][]int{{0, 2, 4}},
		},
		{
			name: "results: the updates together, the others superseded",
			events: []NewEvent{
				ev("call/a", EventJobStarted), ev("call/a", EventJobSucceeded), ev("call/a", EventSettlementSubmitted),
				ev("call/b", EventJobStarted), ev("call/b", EventJobSucceeded), ev("call/b", EventSettlementSubmitted),
			},
			want: [][]int{{1, 4}},
		},
		{
			name: "outcomes: a group per kind, in the order they come",
			events: []NewEvent{
				ev("call/a", EventSettlementFailed), ev("call/b", EventSettlementConfirmed),
				ev("call/c", EventSettlementFailed), ev("call/d", EventSettlementConfirmed), ev("host/x", "host.probed"),
			},
			want: [][]int{{0, 2}, {1, 3}},
		},
		{
			name:   "one call alone: its own statement",
			events: []NewEvent{ev("call/a", EventSettlementConfirmed), ev("call/b", EventSettlementFailed)},
		},
		{
			name: "a call with two projections: every statement of its own, in order",
			events: []NewEvent{
				ev("call/a", EventJobSucceeded), ev("call/b", EventJobSucceeded), ev("call/a", EventSettlementConfirmed),
			},
		},
		{
			name:   "moves without a group form (job.failed)",
			events: []NewEvent{ev("call/a", EventJobFailed), ev("call/b", EventJobFailed)},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			grouped, groups := callGroups(tc.events)
			require.Equal(t, tc.want, groups)
			n := 0
			for _, g := range tc.want {
				for _, i := range g {
					require.True(t, grouped[i], "event %d", i)
					n++
				}
			}
			require.Len(t, grouped, n)
		})
	}
}
