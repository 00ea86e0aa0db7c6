package main

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
)

// statusRecorder is a RoundTripper that counts every status answered,
// retried ones included (loadgen's report keeps each call's last).
type statusRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen map[int]int
}

func (r *statusRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.seen[resp.StatusCode]++
		r.mu.Unlock()
	}
	return resp, err
}

// TestLoadDatabaseCut cuts the database away from two api and two worker
// processes under paid load, as a failover to a standby does (every
// connection closed, new ones failing until the new primary takes them),
// then lets it back: every request made while it is away is answered 503
// unavailable (or 202 for a call running), never 500, and every call ends
// paid once.
func TestLoadDatabaseCut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	proxy := dbtest.NewProxy(t, db)
	env := map[string]string{"DATABASE_URL": proxy.URL(db), "LISTEN_ADDR": "127.0.0.1:0", "CALL_WAIT": "2s", "RIVER_POLL_INTERVAL": "200ms",
		"JOB_TIMEOUT": "15s", "JOB_RESCUE_AFTER": "20s"}
	apis := []*child{startChild(t, "api", env), startChild(t, "api", env)}
	startChild(t, "worker", env)
	startChild(t, "worker", env)

	cut := make(chan struct{})
	go func() {
		defer close(cut)
		time.Sleep(1500 * time.Millisecond)
		proxy.Cut()
		time.Sleep(3 * time.Second)
		proxy.Restore()
	}()
	recorder := &statusRecorder{next: http.DefaultTransport.(*http.Transport).Clone(), seen: map[int]int{}}
	client := &http.Client{Transport: recorder, Timeout: 70 * time.Second}
	payer := &fakePayer{payer: "0xcut"}
	reps := make([]*loadgen.Report, len(apis))
	var g errgroup.Group
	for i, api := range apis {
		g.Go(func() error {
			rep, err := loadgen.Run(ctx, loadgen.Config{
				BaseURL: api.addr, Requests: loadRequests, Payer: payer, Client: client,
				Concurrency: 8, Duration: 7 * time.Second, Retry: true, RetryFor: 90 * time.Second,
			})
			reps[i] = rep
			return err
		})
	}
	require.NoError(t, g.Wait())
	<-cut
	all := &loadgen.Report{Statuses: map[int]int{}}
	for i, rep := range reps {
		t.Logf("api %d: %s", i, rep)
		all.Calls += rep.Calls
		all.Outcomes = append(all.Outcomes, rep.Outcomes...)
		for code, n := range rep.Statuses {
			all.Statuses[code] += n
		}
	}
	recorder.mu.Lock()
	seen := recorder.seen
	recorder.mu.Unlock()
	t.Logf("statuses seen, retries included: %v", seen)
	require.Positive(t, seen[http.StatusServiceUnavailable], "the cut was seen")
	for code, n := range seen {
		require.NotContains(t, []int{http.StatusInternalServerError, http.StatusBadGateway}, code, "%d answers %d while the database was away", n, code)
	}
	require.Equal(t, all.Calls, all.Statuses[http.StatusOK], all.String())
	checkLedger(ctx, t, db, all)
}
