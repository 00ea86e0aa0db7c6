package payclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm/evmtest"
)

// TestOfficialClientPaysSeller pays a seller built on Verifier and Relayer
// with the official TypeScript client (@x402/fetch + @x402/evm): its
// EIP-712 signature, payload and header encoding are accepted and settled.
func TestOfficialClientPaysSeller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	compat, err := filepath.Abs("../../compat")
	require.NoError(t, err)
	_, err = exec.LookPath("node")
	require.NoError(t, err, "node (v20+) is needed for the compatibility test; run: go tool task npm (or install Node.js)")
	_, err = os.Stat(filepath.Join(compat, "node_modules", "@x402", "fetch"))
	require.NoError(t, err, "the official x402 packages are missing; run: go tool task npm")

	stack := evmtest.New(t)
	chain, verifier, relayer := stack.Chain, stack.Verifier, stack.Relayer
	payTo := chain.Account(devchain.PayToAccount).Address
	srv := httptest.NewServer(&seller{verifier: verifier, relayer: relayer, accepts: []x402.Requirements{{
		Scheme: "exact", Network: "eip155:8453", Amount: "20000", Asset: devchain.USDC.Hex(),
		PayTo: payTo.Hex(), MaxTimeoutSeconds: 300, Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`),
	}}})
	t.Cleanup(srv.Close)

	const account = 6
	payer := chain.Account(account).Address
	before, err := chain.BalanceOf(ctx, payer)
	require.NoError(t, err)

	cmd := exec.CommandContext(ctx, "node", "testdata/official_client.mjs", srv.URL+"/api/x402/echo", strconv.Itoa(account))
	cmd.Env = append(os.Environ(), "COMPAT_DIR="+compat)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node official_client.mjs failed (run: go tool task npm): %s", stderr.String())

	var out struct {
		Address    string               `json:"address"`
		Status     int                  `json:"status"`
		Body       string               `json:"body"`
		Settlement *x402.SettleResponse `json:"settlement"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	require.Equal(t, payer.Hex(), out.Address)
	require.Equal(t, 200, out.Status, out.Body)
	require.JSONEq(t, `{"echo":{"text":"official"}}`, out.Body)
	require.NotNil(t, out.Settlement)
	require.True(t, out.Settlement.Success)
	require.Equal(t, payer.Hex(), out.Settlement.Payer)
	after, err := chain.BalanceOf(ctx, payer)
	require.NoError(t, err)
	require.Equal(t, big.NewInt(20000), new(big.Int).Sub(before, after))
}
