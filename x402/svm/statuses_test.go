package svm

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStatuses checks that the signatures asked while a getSignatureStatuses
// call is on its way go together in the next call, each waiter answered
// its own status, and that an error answer is every waiter's error.
func TestStatuses(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		name string
		// fail answers the second call with an error.
		fail bool
	}{
		{name: "ok, one call for the queued signatures"},
		{name: "an error answer is every waiter's", fail: true},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const queued = 20
			release := make(chan struct{})
			var (
				mu    sync.Mutex
				calls [][]string
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var req struct {
					Method string
					Params []json.RawMessage
				}
				var sigs []string
				if json.NewDecoder(r.Body).Decode(&req) != nil || req.Method != "getSignatureStatuses" || len(req.Params) == 0 ||
					json.Unmarshal(req.Params[0], &sigs) != nil {
					http.Error(w, "not a getSignatureStatuses call", http.StatusBadRequest)
					return
				}
				mu.Lock()
				calls = append(calls, sigs)
				n := len(calls)
				mu.Unlock()
				if n == 1 {
					<-release // the others queue meanwhile
				}
				if n > 1 && tc.fail {
					_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":0,"error":{"code":-32005,"message":"node is behind"}}`))
					return
				}
				// A status each: "sig-N" is N blocks old, "sig-0" unknown.
				values := make([]any, len(sigs))
				for i, s := range sigs {
					if s != "sig-0" {
						values[i] = map[string]any{"err": nil, "confirmationStatus": s}
					}
				}
				_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": 0, "result": map[string]any{"value": values}})
			}))
			t.Cleanup(srv.Close)
			s := &statuses{rpc: newRPCClient(srv.URL, nil)}
			ctx := context.Background()

			defer func() {
				select {
				case <-release:
				default:
					close(release) // a failed test does not leave the server waiting
				}
			}()
			first := make(chan error, 1)
			go func() {
				st, err := s.get(ctx, "sig-first")
				if err == nil && st.ConfirmationStatus != "sig-first" {
					err = errUnexpected(st.ConfirmationStatus)
				}
				first <- err
			}()
			require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(calls) == 1 }, 10*time.Second, 5*time.Millisecond)
			var wg sync.WaitGroup
			errs := make([]error, queued)
			for i := range queued {
				sig := "sig-" + strconv.Itoa(i)
				wg.Go(func() {
					st, err := s.get(ctx, sig)
					switch {
					case err != nil:
						errs[i] = err
					case sig == "sig-0" && st != nil, sig != "sig-0" && (st == nil || st.ConfirmationStatus != sig):
						errs[i] = errUnexpected(sig)
					}
				})
			}
			require.Eventually(t, func() bool { n, _ := s.queue.state(); return n == queued }, 10*time.Second, 5*time.Millisecond)
			close(release)
			wg.Wait()
			require.NoError(t, <-first)

			mu.Lock()
			defer mu.Unlock()
			require.Len(t, calls, 2, "the queued signatures went in one call")
			require.Len(t, calls[1], queued)
			for i, err := range errs {
				if tc.fail {
					require.ErrorContains(t, err, "node is behind", "waiter %d", i)
				} else {
					require.NoError(t, err, "waiter %d", i)
				}
			}
			// A sender ends once it finds the queue empty, after its last answers.
			require.Eventually(t, func() bool { _, senders := s.queue.state(); return senders == 0 }, 10*time.Second, time.Millisecond)
		})
	}
}

type errUnexpected string

func (e errUnexpected) Error() string { return "unexpected status of " + string(e) }
