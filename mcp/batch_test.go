package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"index_summary"}}`
	for _, tc := range []struct {
		name      string
		body      string
		limit     int
		wantLen   int
		wantBatch bool
	}{
		{"ok, one message", call, 3, 1, false},
		{"ok, a batch", "[" + call + "," + call + "]", 3, 2, true},
		{"ok, a batch at the limit", " \n[" + strings.Repeat(call+",", 2) + call + "]", 3, 3, true},
		{"nok, past the limit: limit+1 read, no more", "[" + strings.Repeat(call+",", 9) + call + "]", 3, 4, true},
		{"nok, not JSON: one message the SDK refuses", "[not json", 3, 0, true},
		{"nok, empty batch", "[]", 3, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msgs, batch := split([]byte(tc.body), tc.limit)
			require.Equal(t, tc.wantBatch, batch)
			require.Len(t, msgs, tc.wantLen)
		})
	}
}

func TestUnpaid(t *testing.T) {
	t.Parallel()
	h := &Handler{paid: map[string]bool{"diff": true}}
	msg := func(method, name, meta string) json.RawMessage {
		params := `{"name":"` + name + `"`
		if meta != "" {
			params += `,"_meta":` + meta
		}
		return json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":` + params + `}}`)
	}
	for _, tc := range []struct {
		name string
		msgs []json.RawMessage
		want int
	}{
		{"ok, a paid call with its payment is not counted", []json.RawMessage{msg("tools/call", "diff", `{"x402/payment":"abc"}`)}, 0},
		{"ok, with a payment object", []json.RawMessage{msg("tools/call", "diff", `{"x402/payment":{"x402Version":2}}`)}, 0},
		{"nok, a paid tool without a payment (a quote)", []json.RawMessage{msg("tools/call", "diff", "")}, 1},
		{"nok, a null payment", []json.RawMessage{msg("tools/call", "diff", `{"x402/payment":null}`)}, 1},
		{"nok, a free tool with a payment", []json.RawMessage{msg("tools/call", "index_search", `{"x402/payment":"abc"}`)}, 1},
		{"nok, another method", []json.RawMessage{msg("tools/list", "diff", `{"x402/payment":"abc"}`)}, 1},
		{"nok, not JSON", []json.RawMessage{json.RawMessage(`nope`)}, 1},
		{"ok, a batch counts each", []json.RawMessage{msg("tools/call", "diff", `{"x402/payment":"abc"}`), msg("tools/call", "index_summary", ""), msg("initialize", "", "")}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, h.unpaid(tc.msgs))
		})
	}
}

// TestQueued: index tool calls run at most the slots at once; a call whose
// request ends while it waits ends with it.
func TestQueued(t *testing.T) {
	t.Parallel()
	const slots, calls = 3, 40
	var running, most atomic.Int64
	release := make(chan struct{})
	h := queued(make(chan struct{}, slots), func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		running.Add(-1)
		return &mcp.CallToolResult{}, nil
	})
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			_, err := h(context.Background(), &mcp.CallToolRequest{})
			require.NoError(t, err)
		})
	}
	// Once the slots are taken, a call whose request ends gives up.
	require.Eventually(t, func() bool { return running.Load() == slots }, 10*time.Second, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := h(ctx, &mcp.CallToolRequest{})
	require.ErrorIs(t, err, context.Canceled)
	close(release)
	wg.Wait()
	require.Equal(t, int64(slots), most.Load())
}
