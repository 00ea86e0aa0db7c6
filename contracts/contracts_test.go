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
	channels, err := contracts.Load(contracts.BatchSettlement)
	require.NoError(t, err)
	for _, method := range []string{"multicall", "deposit", "claim", "claimWithSignature", "settle", "initiateWithdraw",
		"finalizeWithdraw", "refund", "refundWithSignature", "getChannelId", "getVoucherDigest", "getRefundDigest",
		"getClaimBatchDigest", "channels", "pendingWithdrawals", "receivers", "refundNonce", "CHANNEL_CONFIG_TYPEHASH"} {
		require.Contains(t, channels.ABI.Methods, method)
	}
	for _, event := range []string{"ChannelCreated", "ChannelClosed", "Deposited", "Claimed", "Settled", "Refunded",
		"WithdrawInitiated", "WithdrawFinalized"} {
		require.Contains(t, channels.ABI.Events, event)
	}
	collector, err := contracts.Load(contracts.ERC3009DepositCollector)
	require.NoError(t, err)
	require.Contains(t, collector.ABI.Methods, "collect")
	require.Contains(t, collector.ABI.Methods, "x402BatchSettlement")
	_, err = contracts.Load("Missing")
	require.Error(t, err)
}

// TestCircleUSDC loads Circle's contracts: the token's creation code links
// SignatureChecker in the places the compiler recorded, and nothing else.
func TestCircleUSDC(t *testing.T) {
	t.Parallel()
	token, err := contracts.Load(contracts.FiatTokenV2_2)
	require.NoError(t, err)
	for _, method := range []string{"initialize", "initializeV2", "initializeV2_1", "initializeV2_2",
		"transferWithAuthorization", "transferWithAuthorization0", "receiveWithAuthorization",
		"authorizationState", "configureMinter", "mint", "DOMAIN_SEPARATOR", "version"} {
		require.Contains(t, token.ABI.Methods, method)
	}
	require.Len(t, token.Links["SignatureChecker"], 2)
	lib := common.HexToAddress("0x00000000000000000000000000000000005167C4")
	linked, err := token.Link("SignatureChecker", lib)
	require.NoError(t, err)
	require.Len(t, linked, len(token.Bytecode))
	require.Equal(t, 2, bytes.Count(linked, lib.Bytes()))
	require.Zero(t, bytes.Count(token.Bytecode, lib.Bytes()), "Link must not change the artifact")
	_, err = token.Link("Missing", lib)
	require.Error(t, err)

	for _, name := range []string{contracts.FiatTokenProxy, contracts.SignatureChecker, contracts.Multicall3} {
		a, err := contracts.Load(name)
		require.NoError(t, err)
		require.Empty(t, a.Links, name)
		require.NotEmpty(t, a.DeployedBytecode, name)
	}
	proxy, err := contracts.Load(contracts.FiatTokenProxy)
	require.NoError(t, err)
	require.Contains(t, proxy.ABI.Methods, "changeAdmin")
	require.Contains(t, proxy.ABI.Methods, "implementation")
	multicall, err := contracts.Load(contracts.Multicall3)
	require.NoError(t, err)
	require.Contains(t, multicall.ABI.Methods, "aggregate3")
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
	require.Len(t, built, 11)
	for _, f := range built {
		want, err := os.ReadFile(f)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join("build", filepath.Base(f)))
		require.NoError(t, err, "artifact missing; run: go tool task contracts")
		require.Equal(t, string(want), string(got), "%s is stale; run: go tool task contracts", filepath.Base(f))
	}
}
