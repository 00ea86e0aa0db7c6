package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/logtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/worker"
)

// This file holds the test double of the payment step and a slow operation.
// They exist only in test builds: the test binary re-executes itself as an
// x402d process (X402D_TEST_CHILD=1) so that tests can run and kill real
// processes that use them.

func TestMain(m *testing.M) {
	if os.Getenv("X402D_TEST_CHILD") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		setGCTarget(os.Getenv)
		err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, testOptions(os.Getenv))
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "x402d (test child):", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testOptions returns the payment double and the slow operation, configured
// by TEST_SETTLE_FAIL (settlement refuses every payment). With
// TEST_REAL_PAYMENTS=1 the child keeps the configured settlement mode (the
// devchain, for the tests that kill processes settling on it).
func testOptions(getenv func(string) string) *options {
	if getenv("TEST_REAL_PAYMENTS") == "1" {
		return &options{}
	}
	return &options{
		payments: func(ctx context.Context, cfg *Config, specs []jobs.Spec, logger *slog.Logger) (*paymentStack, error) {
			pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
			if err != nil {
				return nil, err
			}
			if err := paytest.CreateLedger(ctx, pool); err != nil {
				pool.Close()
				return nil, err
			}
			fp := &paytest.Payments{Pool: pool, FailSettle: getenv("TEST_SETTLE_FAIL") == "1", Unsold: map[string]bool{}}
			for _, s := range specs {
				fp.Unsold[s.Name] = s.UsesModel && cfg.GeminiAPIKey == ""
			}
			stack := &paymentStack{verifier: fp, settler: fp}
			stack.parts.closes(pool.Close)
			return stack, nil
		},
		ops: []opDef{{sleepOp, worker.Bind(sleepOp, sleepWork, false)}},
	}
}

// sleepInput is a test-only operation that takes Ms milliseconds, so tests
// can kill a worker while it runs.
type sleepInput struct {
	Ms int `json:"ms"`
}

func (sleepInput) Kind() string { return "sleep" }

func (in sleepInput) Validate(*jobs.Limits) error {
	if in.Ms < 0 || in.Ms > 60_000 {
		return jobs.Invalid("ms", "must be between 0 and 60000")
	}
	return nil
}

var sleepOp = jobs.Define[sleepInput](jobs.Spec{Name: "sleep", Price: "0.010000", Queue: jobs.QueuePure})

func sleepWork(ctx context.Context, in sleepInput) (map[string]int, error) {
	select {
	case <-time.After(time.Duration(in.Ms) * time.Millisecond):
		return map[string]int{"slept_ms": in.Ms}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// testMaxConns bounds each test process's database pool: the tests run many
// processes at once on one Postgres, whose max_connections is 100.
const testMaxConns = "5"

// testOpsToken is the operator token of the services testEnv configures:
// /metrics answers a request bearing it (getMetrics).
const testOpsToken = "x402d-test-operator-token-5f0c2a9e7b41"

// testEnv returns a getenv for a service on db, listening on a free port,
// with testOpsToken as its operator token.
func testEnv(db *dbtest.DB, extra map[string]string) func(string) string {
	env := map[string]string{
		"DATABASE_URL": db.URL,
		"LISTEN_ADDR":  "127.0.0.1:0",
		"LOG_LEVEL":    "warn",
		"DB_MAX_CONNS": testMaxConns,
		"OPS_TOKEN":    testOpsToken,
	}
	for k, v := range extra {
		env[k] = v
	}
	return func(k string) string { return env[k] }
}

// lossyProxy is a loopback proxy in front of a service that loses the
// answer to the first paid request (one with PAYMENT-SIGNATURE) after the
// service gave it: the connection drops before the client reads it.
type lossyProxy struct {
	*httptest.Server
	lost atomic.Bool
	// lostStatus is the status of the answer lost, 0 until then.
	lostStatus atomic.Int32
}

// newLossyProxy starts a lossyProxy in front of base, closed when t ends.
func newLossyProxy(t testing.TB, base string) *lossyProxy {
	t.Helper()
	target, err := url.Parse(base)
	require.NoError(t, err)
	forward := httputil.NewSingleHostReverseProxy(target)
	p := &lossyProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("PAYMENT-SIGNATURE") != "" && p.lost.CompareAndSwap(false, true) {
			rec := httptest.NewRecorder()
			forward.ServeHTTP(rec, r)
			p.lostStatus.Store(int32(rec.Code))
			panic(http.ErrAbortHandler) // the connection drops before the answer
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// getMetrics returns the /metrics of the api at base, as the operator
// (testOpsToken).
func getMetrics(ctx context.Context, t testing.TB, base string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testOpsToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	return body
}

// startInProcess runs `x402d <cmd>` in this process with the test double and
// returns the api's base URL (empty for a worker).
func startInProcess(ctx context.Context, t testing.TB, cmd string, getenv func(string) string) string {
	t.Helper()
	return startInProcessWith(ctx, t, cmd, getenv, testOptions(getenv))
}

// startInProcessWith is startInProcess with opts: &options{} runs the real
// payment step of the configured settlement mode.
func startInProcessWith(ctx context.Context, t testing.TB, cmd string, getenv func(string) string, opts *options) string {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	addr := make(chan string, 1)
	opts.listening = func(a string) { addr <- a }
	done := make(chan error, 1)
	logs := &logtest.Buffer{}
	go func() { done <- run(ctx, []string{cmd}, getenv, io.Discard, logs, opts) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("x402d %s logs:\n%s", cmd, logs.String())
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("x402d %s: %v", cmd, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("x402d %s did not stop within 30s", cmd)
		}
	})
	if cmd == "worker" {
		return ""
	}
	select {
	case a := <-addr:
		return "http://" + a
	case err := <-done:
		t.Fatalf("x402d %s exited: %v", cmd, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("x402d %s did not listen within 30s", cmd)
	}
	return ""
}

// child is an x402d process started from the test binary.
type child struct {
	cmd   *exec.Cmd
	addr  string
	logs  *bytes.Buffer
	mu    *sync.Mutex
	waits []logWait // guarded by mu
	done  chan struct{}
}

// logWait is a channel closed once the process logs a line containing text.
type logWait struct {
	text string
	ch   chan struct{}
}

// logged returns a channel closed once the process has logged a line
// containing text: a test waits on what the process says it did rather
// than on a guess of how long it takes.
func (c *child) logged(text string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := logWait{text: text, ch: make(chan struct{})}
	if strings.Contains(c.logs.String(), text) {
		close(w.ch)
		return w.ch
	}
	c.waits = append(c.waits, w)
	return w.ch
}

// startTwoAPIsTwoWorkers starts two `x402d api` and two `x402d worker`
// processes on db, and returns the apis.
func startTwoAPIsTwoWorkers(t testing.TB, db *dbtest.DB) []*child {
	t.Helper()
	env := map[string]string{"DATABASE_URL": db.URL, "LISTEN_ADDR": "127.0.0.1:0"}
	apis := []*child{startChild(t, "api", env), startChild(t, "api", env)}
	startChild(t, "worker", env)
	startChild(t, "worker", env)
	return apis
}

// startChild starts `x402d <cmd>` as a separate process with the test double.
func startChild(t testing.TB, command string, env map[string]string) *child {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	return startProcess(t, exe, command, append(os.Environ(), "X402D_TEST_CHILD=1"), env)
}

// startProcess starts `exe <cmd>`, an x402d binary (this test binary as
// startChild runs it, or another release's), with the environment base and
// env, and waits until it is ready: it logs (as JSON) that its api listens,
// that its workers started, or that its devchain serves. It is stopped at
// cleanup.
func startProcess(t testing.TB, exe, command string, base []string, env map[string]string) *child {
	t.Helper()
	cmd := exec.Command(exe, command)
	cmd.Env = append(base, "LOG_LEVEL=info", "DB_MAX_CONNS="+testMaxConns)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, logs: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	addr := make(chan string, 1)
	ready := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		// started is set once the process said it is ready: its later
		// lines (one a request at info) are not decoded.
		started := false
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.logs.WriteString(line + "\n")
			waits := c.waits[:0]
			for _, w := range c.waits {
				if strings.Contains(line, w.text) {
					close(w.ch)
				} else {
					waits = append(waits, w)
				}
			}
			c.waits = waits
			c.mu.Unlock()
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if !started && json.Unmarshal([]byte(line), &rec) == nil {
				switch rec.Msg {
				case "api listening":
					addr <- rec.Addr
					started = true
				case "workers started", "devchain serving JSON-RPC":
					if command == "serve" {
						// Its api listens after its workers start.
						continue
					}
					select {
					case ready <- struct{}{}:
					default:
					}
					started = true
				}
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() { c.stop(t) })
	deadline := time.After(60 * time.Second)
	select {
	case a := <-addr:
		c.addr = "http://" + a
	case <-ready:
	case <-c.done:
		t.Fatalf("x402d %s exited early:\n%s", command, c.output())
	case <-deadline:
		t.Fatalf("x402d %s did not start within 60s:\n%s", command, c.output())
	}
	return c
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logs.String()
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

func (c *child) stop(t testing.TB) {
	if t.Failed() {
		c.logProblems(t)
	}
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		t.Errorf("process did not stop on SIGTERM; killing it")
		c.kill()
	}
}

// logProblems logs the process's lines at WARN and ERROR, the first 50
// (its request lines, one a call, would bury them).
func (c *child) logProblems(t testing.TB) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lines []string
	for line := range strings.Lines(c.logs.String()) {
		if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
			lines = append(lines, line)
		}
	}
	t.Logf("%s: %d lines at WARN or ERROR, the first 50:\n%s", c.cmd.Path, len(lines), strings.Join(lines[:min(len(lines), 50)], ""))
}

// post sends a paid (or unpaid, with payment "") request.
func post(t testing.TB, client *http.Client, url, payment string, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if payment != "" {
		req.Header.Set("PAYMENT-SIGNATURE", payment)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}
