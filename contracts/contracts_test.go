package contracts_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	usdc, err := contracts.Load(contracts.DevUSDC)
	require.NoError(t, err)
	for _, method := range []string{"transferWithAuthorization", "transferWithAuthorization0", "receiveWithAuthorization",
		"authorizationState", "cancelAuthorization", "mint", "name", "version", "decimals", "DOMAIN_SEPARATOR"} {
		require.Contains(t, usdc.ABI.Methods, method)
	}
	require.Contains(t, usdc.ABI.Events, "AuthorizationUsed")
	wallet, err := contracts.Load(contracts.DevWallet)
	require.NoError(t, err)
	data, err := wallet.Deployment(common.HexToAddress("0x1"))
	require.NoError(t, err)
	require.Len(t, data, len(wallet.Bytecode)+32)
	multicall, err := contracts.Load(contracts.DevMulticall)
	require.NoError(t, err)
	require.Contains(t, multicall.ABI.Methods, "aggregate3")
	require.NotEmpty(t, multicall.DeployedBytecode)
	factory, err := contracts.Load(contracts.DevWalletFactory)
	require.NoError(t, err)
	require.Contains(t, factory.ABI.Methods, "deploy")
	require.Contains(t, factory.ABI.Methods, "addressOf")
	_, err = contracts.Load("Missing")
	require.Error(t, err)
}

// TestArtifactsAreCurrent compiles the sources again and compares with the
// committed artifacts: a source edited without `go tool task contracts`
// fails here.
func TestArtifactsAreCurrent(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("node")
	require.NoError(t, err, "node (v20+) is needed to check the contract artifacts; run: go tool task npm (or install Node.js)")
	_, err = os.Stat("../compat/node_modules/solc")
	require.NoError(t, err, "solc is missing from compat/node_modules; run: go tool task npm")
	out := t.TempDir()
	cmd := exec.Command("node", "build.mjs")
	cmd.Env = append(os.Environ(), "CONTRACTS_OUT="+out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), "node build.mjs failed (run: go tool task npm): %s", stderr.String())
	built, err := filepath.Glob(filepath.Join(out, "*.json"))
	require.NoError(t, err)
	require.Len(t, built, 4)
	for _, f := range built {
		want, err := os.ReadFile(f)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join("build", filepath.Base(f)))
		require.NoError(t, err, "artifact missing; run: go tool task contracts")
		require.Equal(t, string(want), string(got), "%s is stale; run: go tool task contracts", filepath.Base(f))
	}
}
