package main

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
)

// statusRecorder is a RoundTripper that counts every status answered,
// retried ones included (loadgen's report keeps each call's last), and
// tells a test when a count is reached (reached).
type statusRecorder struct {
	next  http.RoundTripper
	mu    sync.Mutex
	seen  map[int]int
	waits []statusWait
}

// statusWait is a channel closed once n answers of code were seen.
type statusWait struct {
	code, n int
	ch      chan struct{}
}

func newStatusRecorder() *statusRecorder {
	return &statusRecorder{next: http.DefaultTransport.(*http.Transport).Clone(), seen: map[int]int{}}
}

// loadClient returns a client for loadgen of concurrency requests at a
// time, like its own, whose answers rec records.
func loadClient(concurrency int) (*http.Client, *statusRecorder) {
	rec := newStatusRecorder()
	tr := rec.next.(*http.Transport)
	tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = concurrency, concurrency
	return &http.Client{Transport: rec, Timeout: 70 * time.Second}, rec
}

func (r *statusRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.seen[resp.StatusCode]++
		r.release()
		r.mu.Unlock()
	}
	return resp, err
}

// reached returns a channel closed once n answers of code have been seen.
func (r *statusRecorder) reached(code, n int) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := statusWait{code: code, n: n, ch: make(chan struct{})}
	r.waits = append(r.waits, w)
	r.release()
	return w.ch
}

// release closes the waits reached; r.mu is held.
func (r *statusRecorder) release() {
	kept := r.waits[:0]
	for _, w := range r.waits {
		if r.seen[w.code] >= w.n {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	r.waits = kept
}

// awaitAnswers waits until n answers of code were seen by r, failing t
// after a minute (the load never got under way).
func awaitAnswers(t *testing.T, r *statusRecorder, code, n int) {
	select {
	case <-r.reached(code, n):
	case <-time.After(time.Minute):
		t.Errorf("%d answers %d never seen", n, code)
	}
}

// TestLoadDatabaseCut cuts the database away from two api and two worker
// processes under paid load, as a failover to a standby does (every
// connection closed, new ones failing until the new primary takes them),
// for longer than River's completer retries a job's completion, then lets
// it back: every request made while it is away is answered 503 unavailable
// (or 202 for a call running), never 500; JOB_TIMEOUT is ten minutes, and
// yet every call ends paid once within a minute of the database's return
// (the jobs whose completion was lost are taken up again,
// JOB_RECLAIM_AFTER).
func TestLoadDatabaseCut(t *testing.T) {
	// What River's completer logs once it has given up retrying the
	// completion of a batch of jobs.
	const completerGaveUp = "Too many errors; giving up"

	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	proxy := dbtest.NewProxy(t, db)
	env := map[string]string{"DATABASE_URL": proxy.URL(db), "LISTEN_ADDR": "127.0.0.1:0", "CALL_WAIT": "2s", "RIVER_POLL_INTERVAL": "200ms",
		"JOB_TIMEOUT": "10m"}
	apis := []*child{startChild(t, "api", env), startChild(t, "api", env)}
	workers := []*child{startChild(t, "worker", env), startChild(t, "worker", env)}

	var restored atomic.Int64
	cut := make(chan struct{})
	recorder := newStatusRecorder()
	go func() {
		defer close(cut)
		// Cut once the load is under way; the outage lasts until a
		// worker's River completer has given up retrying a completion
		// (it logs so), so that the completion is lost.
		awaitAnswers(t, recorder, http.StatusOK, 16)
		proxy.Cut()
		away := time.Now()
		defer func() { t.Logf("database away for %s", time.Since(away).Round(time.Millisecond)) }()
		select {
		case <-workers[0].logged(completerGaveUp):
		case <-workers[1].logged(completerGaveUp):
		case <-time.After(time.Minute):
			t.Errorf("no worker's completer gave up within a minute of the cut")
		}
		proxy.Restore()
		restored.Store(time.Now().UnixNano())
	}()
	client := &http.Client{Transport: recorder, Timeout: 70 * time.Second}
	payer := &fakePayer{payer: "0xcut"}
	reps := make([]*loadgen.Report, len(apis))
	start := time.Now()
	var g errgroup.Group
	for i, api := range apis {
		g.Go(func() error {
			rep, err := loadgen.Run(ctx, loadgen.Config{
				BaseURL: api.addr, Requests: []loadgen.Request{{Op: "sleep", Body: `{"ms":300}`}, loadRequests[0]}, Payer: payer, Client: client,
				Concurrency: 8, Duration: 4 * time.Second, Retry: true, RetryFor: 3 * time.Minute,
			})
			reps[i] = rep
			return err
		})
	}
	require.NoError(t, g.Wait())
	<-cut
	all := &loadgen.Report{Statuses: map[int]int{}}
	var last time.Time
	for i, rep := range reps {
		t.Logf("api %d: %s", i, rep)
		all.Calls += rep.Calls
		all.Outcomes = append(all.Outcomes, rep.Outcomes...)
		for code, n := range rep.Statuses {
			all.Statuses[code] += n
		}
		for _, o := range rep.Outcomes {
			last = maxTime(last, start.Add(o.Offset+o.Latency))
		}
	}
	recorder.mu.Lock()
	seen := recorder.seen
	recorder.mu.Unlock()
	back := time.Unix(0, restored.Load())
	t.Logf("statuses seen, retries included: %v; last call answered %s after the database came back", seen, last.Sub(back).Round(time.Millisecond))
	require.Positive(t, seen[http.StatusServiceUnavailable], "the cut was seen")
	for code, n := range seen {
		require.NotContains(t, []int{http.StatusInternalServerError, http.StatusBadGateway}, code, "%d answers %d while the database was away", n, code)
	}
	require.Equal(t, all.Calls, all.Statuses[http.StatusOK], all.String())
	require.Less(t, last.Sub(back), time.Minute, "a call answered long after the database came back")
	checkLedger(ctx, t, db, all)
}

// TestLoadServeKilled SIGKILLs a `serve` process twice while paid calls are
// in flight (100 calls, 32 at a time, each running 1.5 s) and starts it
// again on the same address; clients resend a lost answer with the same
// header. JOB_TIMEOUT is ten minutes, so River's rescue (JOB_TIMEOUT plus
// 30 s) cannot be what takes the killed runs up: the restarted process does,
// as their process is gone from the database (JOB_RECLAIM_AFTER). Every
// call is answered within 120 s of the last restart and paid once.
func TestLoadServeKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	env := map[string]string{"DATABASE_URL": db.URL, "LISTEN_ADDR": addr, "CALL_WAIT": "2s", "RIVER_POLL_INTERVAL": "200ms",
		"JOB_TIMEOUT": "10m"}
	serve := startChild(t, "serve", env)

	var lastRestart atomic.Int64
	lastRestart.Store(time.Now().UnixNano())
	killed := make(chan struct{})
	recorder := newStatusRecorder()
	go func() {
		defer close(killed)
		// Each kill comes once more calls were answered, the next wave
		// of 32 in flight.
		for _, answered := range []int{10, 50} {
			awaitAnswers(t, recorder, http.StatusOK, answered)
			serve.kill()
			serve = startChild(t, "serve", env)
			lastRestart.Store(time.Now().UnixNano())
		}
	}()
	start := time.Now()
	rep, err := loadgen.Run(ctx, loadgen.Config{
		BaseURL: "http://" + addr, Requests: []loadgen.Request{{Op: "sleep", Body: `{"ms":1500}`}}, Payer: &fakePayer{payer: "0xserve"}, Client: &http.Client{Transport: recorder, Timeout: 70 * time.Second},
		Concurrency: 32, MaxCalls: 100, Duration: 5 * time.Minute, Retry: true, RetryFor: 4 * time.Minute,
	})
	<-killed
	require.NoError(t, err)
	t.Log(rep)
	restarted := time.Unix(0, lastRestart.Load())
	var last time.Time
	for _, o := range rep.Outcomes {
		last = maxTime(last, start.Add(o.Offset+o.Latency))
	}
	t.Logf("last call answered %s after the last restart", last.Sub(restarted).Round(time.Millisecond))
	require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
	require.Less(t, last.Sub(restarted), 120*time.Second, "a call answered long after the last restart")
	checkLedger(ctx, t, db, rep)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
