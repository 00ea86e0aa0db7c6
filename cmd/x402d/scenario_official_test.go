//go:build scenario

package main

import (
	"bufio"
	"context"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
	"github.com/x402d/x402d/model/modeltest"
)

// TestPaidBesideOfficialSeller measures paid diff calls, 64 in flight for
// 10 s, on x402d serve and on a seller built only from the official
// packages (compat/official_seller.mjs: @x402/express with the official
// facilitator code in-process), both settling on the same chain in the same
// run (the serve process's devchain, whose JSON-RPC the official seller
// uses), alternated twice. Every x402d call must be answered 200, and x402d
// must answer more paid calls a second. `go tool task load:official` runs
// it; the figures are in docs/performance.md.
func TestPaidBesideOfficialSeller(t *testing.T) {
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	rpc := freeAddr(t)
	fake := modeltest.NewServer(t)
	env := map[string]string{
		"DATABASE_URL": db.URL, "DB_MAX_CONNS": "20", "LISTEN_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn",
		"DEVCHAIN_RPC_ADDR": rpc, "GEMINI_API_KEY": modeltest.APIKey, "GEMINI_BASE_URL": fake.URL,
	}
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})

	official := startOfficialSeller(t, "http://"+rpc)

	request := []loadgen.Request{{Op: "diff", Body: `{"a":"one\ntwo\n","b":"one\n2\n"}`}}
	run := func(base string, account uint32) *loadgen.Report {
		payer := devPayer(t, account)
		rep, err := loadgen.Run(ctx, loadgen.Config{BaseURL: base, Requests: request, Payer: payer, Concurrency: 64, Duration: 10 * time.Second})
		require.NoError(t, err)
		return rep
	}
	for round := range 2 {
		ours := run(base, 5)
		t.Logf("round %d, x402d serve: %s", round+1, ours)
		require.Equal(t, ours.Calls, ours.Statuses[http.StatusOK], ours.String())
		theirs := run(official, 6)
		t.Logf("round %d, official seller: %s", round+1, theirs)
		require.Greater(t, ours.Throughput, theirs.Throughput)
	}
}

// startOfficialSeller runs compat/official_seller.mjs settling on the chain
// at rpcURL with development account 7, and returns its base URL.
func startOfficialSeller(t *testing.T, rpcURL string) string {
	t.Helper()
	return startCompatServer(t, "official_seller.mjs", "RPC_URL="+rpcURL, "FACILITATOR_ACCOUNT=7")
}

// startCompatServer runs the Node server compat/<script> on a free port
// with env added, waits for it to say it is listening, and returns its base
// URL.
func startCompatServer(t *testing.T, script string, env ...string) string {
	t.Helper()
	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	cmd := runCompatServer(t, script, port, env...)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return "http://127.0.0.1:" + port
}

// runCompatServer starts compat/<script> on port with env added and returns
// once it says it is listening; the caller stops it.
func runCompatServer(t *testing.T, script, port string, env ...string) *exec.Cmd {
	t.Helper()
	compat := compatDir(t, "@x402/express", "@x402/evm", "@x402/core", "viem")
	cmd := exec.Command("node", filepath.Join(compat, script), port)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "listening")
	return cmd
}

// TestKilledBesideOfficialSeller pays diff calls, 16 in flight for 6 s,
// clients resending the same payment when an answer is lost, to x402d (an
// api and two workers, a worker SIGKILLed every 1.5 s) and to the official
// packages' seller (its one process SIGKILLed every 1.5 s and started again),
// both settling on the same devchain process in the same run, and counts
// for each the calls answered 200 and the calls charged (the payer's
// balance). x402d must answer every call it charged. `go tool task
// load:official` runs it.
func TestKilledBesideOfficialSeller(t *testing.T) {
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	env, chain := startDevchainProcess(ctx, t, db)
	rpc := env["DEVCHAIN_RPC_ADDR"]
	price := big.NewInt(10_000) // diff: $0.01
	request := []loadgen.Request{{Op: "diff", Body: `{"a":"one\ntwo\n","b":"one\n2\n"}`}}
	pay := func(base string, account uint32) (rep *loadgen.Report, charged int64) {
		payer := devPayer(t, account)
		before := usdcBalance(ctx, t, chain, payer.Address())
		rep, err := loadgen.Run(ctx, loadgen.Config{BaseURL: base, Requests: request, Payer: payer,
			Concurrency: 16, Duration: 6 * time.Second, Retry: true, RetryFor: 150 * time.Second})
		require.NoError(t, err)
		spent := new(big.Int).Sub(before, usdcBalance(ctx, t, chain, payer.Address()))
		return rep, new(big.Int).Div(spent, price).Int64()
	}

	api := startChild(t, "api", env)
	stopKilling := killWorkers(t, env, 1500*time.Millisecond)
	ours, oursCharged := pay(api.addr, 5)
	killed := stopKilling(2)
	t.Logf("x402d, %d workers killed: %d calls, %d answered 200, %d charged; %s", killed, ours.Calls, ours.Statuses[http.StatusOK], oursCharged, ours)
	require.Equal(t, ours.Calls, ours.Statuses[http.StatusOK], ours.String())
	require.Equal(t, int64(ours.Calls), oursCharged, "x402d charged exactly the calls it answered")

	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	official := []string{"RPC_URL=http://" + rpc, "FACILITATOR_ACCOUNT=7"}
	var mu sync.Mutex
	seller := runCompatServer(t, "official_seller.mjs", port, official...)
	t.Cleanup(func() { mu.Lock(); defer mu.Unlock(); _ = seller.Process.Kill(); _ = seller.Wait() })
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(1500 * time.Millisecond):
			}
			mu.Lock()
			_ = seller.Process.Kill()
			_ = seller.Wait()
			seller = runCompatServer(t, "official_seller.mjs", port, official...)
			mu.Unlock()
			n++
		}
	}()
	theirs, theirsCharged := pay("http://127.0.0.1:"+port, 6)
	close(stop)
	restarts := <-done
	t.Logf("official seller, killed %d times: %d calls, %d answered 200, %d charged, %d charged and not answered; %s",
		restarts, theirs.Calls, theirs.Statuses[http.StatusOK], theirsCharged, theirsCharged-int64(theirs.Statuses[http.StatusOK]), theirs)
	require.Positive(t, theirs.Statuses[http.StatusOK], "the official seller was paid")
}
