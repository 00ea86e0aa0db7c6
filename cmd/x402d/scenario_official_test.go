//go:build scenario

package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
	"github.com/x402d/x402d/model/modeltest"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/payclient"
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
		key, err := devchain.DeriveKey(devchain.Mnemonic, account)
		require.NoError(t, err)
		payer, err := payclient.New(&payclient.Config{Key: key, Network: "eip155:8453"})
		require.NoError(t, err)
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
	compat := compatDir(t, "@x402/express", "@x402/evm", "@x402/core", "viem")
	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	cmd := exec.Command("node", filepath.Join(compat, script), port)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "listening")
	return "http://127.0.0.1:" + port
}
