package svm

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRPCClient_Coalesces checks that calls made while maxRequests requests
// are on their way go together in the next request as one batch, each
// answered its own result, and that a call the batch's answer leaves out
// or answers with an error fails alone.
func TestRPCClient_Coalesces(t *testing.T) {
	t.Parallel()
	const queued = 30
	release := make(chan struct{})
	var (
		mu       sync.Mutex
		requests []int // calls in each request
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body json.RawMessage
		if json.NewDecoder(r.Body).Decode(&body) != nil {
			http.Error(w, "not JSON", http.StatusBadRequest)
			return
		}
		type call struct {
			ID     int
			Method string
			Params []int
		}
		var calls []call
		single := body[0] == '{'
		if single {
			var c call
			_ = json.Unmarshal(body, &c)
			calls = []call{c}
		} else {
			_ = json.Unmarshal(body, &calls)
		}
		mu.Lock()
		requests = append(requests, len(calls))
		n := len(requests)
		mu.Unlock()
		if n <= maxRequests {
			<-release // the others queue meanwhile
		}
		// "echo" answers its parameter; "fail" an error; "lose" nothing.
		var answers []any
		for _, c := range calls {
			switch c.Method {
			case "echo":
				answers = append(answers, map[string]any{"jsonrpc": "2.0", "id": c.ID, "result": c.Params[0]})
			case "fail":
				answers = append(answers, map[string]any{"jsonrpc": "2.0", "id": c.ID, "error": map[string]any{"code": -32002, "message": "refused"}})
			}
		}
		if single {
			_ = json.NewEncoder(w).Encode(answers[0])
			return
		}
		_ = json.NewEncoder(w).Encode(answers)
	}))
	t.Cleanup(srv.Close)
	c := newRPCClient(srv.URL, nil)
	ctx := context.Background()

	var wg sync.WaitGroup
	defer func() {
		select {
		case <-release:
		default:
			close(release) // a failed test does not leave the server waiting
		}
	}()
	for i := range maxRequests {
		wg.Go(func() {
			var out int
			if err := c.call(ctx, "echo", []any{1000 + i}, &out); err != nil || out != 1000+i {
				t.Errorf("first call %d: %d, %v", i, out, err)
			}
		})
		// Each in a request of its own, held by the server.
		require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(requests) == i+1 }, 10*time.Second, time.Millisecond)
	}
	errs := make([]error, queued)
	outs := make([]int, queued)
	for i := range queued {
		method := "echo"
		switch i {
		case 7:
			method = "fail"
		case 11:
			method = "lose"
		}
		wg.Go(func() { errs[i] = c.call(ctx, method, []any{i}, &outs[i]) })
	}
	require.Eventually(t, func() bool { n, _ := c.queue.state(); return n == queued }, 10*time.Second, 5*time.Millisecond)
	close(release)
	wg.Wait()

	mu.Lock()
	require.Equal(t, []int{1, 1, 1, 1, queued}, requests, "the queued calls went in one request")
	mu.Unlock()
	for i := range queued {
		switch i {
		case 7:
			var rerr *rpcCallError
			require.True(t, errors.As(errs[i], &rerr), "call %d: %v", i, errs[i])
			require.Equal(t, -32002, rerr.Code)
		case 11:
			require.ErrorContains(t, errs[i], "lose: no answer")
		default:
			require.NoError(t, errs[i], "call %d", i)
			require.Equal(t, i, outs[i], "call "+strconv.Itoa(i))
		}
	}
	// A sender ends once it finds the queue empty, after its last answers.
	require.Eventually(t, func() bool { _, senders := c.queue.state(); return senders == 0 }, 10*time.Second, time.Millisecond)
}
