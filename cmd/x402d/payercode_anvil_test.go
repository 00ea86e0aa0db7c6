package main

import (
	"context"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/payclient"
)

// TestAnvil_GasBurningWallet pays `x402d serve`, settling on anvil with
// Circle's USDC, from a hostile contract wallet holding one regex price:
// its isValidSignature (EIP-1271) burns gas and accepts only at a gas price
// of zero, so its payment passes verification (an eth_call) and would
// revert on chain. Its first paid call is answered unpaid, its result
// withheld, without a transaction (the settlement's simulation at the
// transaction's fees refuses it); its later calls are refused at
// verification, before any work, for PAYER_CODE_REFUSE_FOR; the wallet
// keeps its funds; and an honest payer's settlements that follow keep a
// plain transfer's gas limit.
func TestAnvil_GasBurningWallet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: time.Second})
	db := dbtest.Schema(ctx, t)
	env := anvilEnv(t, node, db)
	env["LOG_LEVEL"] = "warn"
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})

	const price = 10_000
	burner, err := contracts.Load(contracts.DevBurnerWallet)
	require.NoError(t, err)
	code, err := burner.Deployment(big.NewInt(400), true)
	require.NoError(t, err)
	wallet := fundedWallet(ctx, t, node.Client, 7, code, price)

	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	hostile, err := payclient.New(&payclient.Config{Key: key, Wallet: wallet})
	require.NoError(t, err)
	relayer := devAddress(t, devchain.RelayerAccount)
	sent := func() uint64 {
		n, err := node.Client.NonceAt(ctx, relayer, nil)
		require.NoError(t, err)
		return n
	}
	before := sent()
	regex := func(payer *payclient.Client) *payclient.Result {
		t.Helper()
		res, err := payer.Do(ctx, &payclient.Request{URL: base + "/api/x402/regex", Body: []byte(`{"pattern":"\\d+","text":"a1b22"}`)})
		require.NoError(t, err)
		return res
	}
	refusedReason := func(res *payclient.Result) string {
		t.Helper()
		require.Equal(t, http.StatusPaymentRequired, res.Status, string(res.Body))
		return res.Refusal
	}

	// The first call: run, unpaid, its result withheld, nothing sent.
	first := regex(hostile)
	t.Logf("first call: %d %s", first.Status, first.Body)
	require.NotEqual(t, http.StatusOK, first.Status)
	require.Equal(t, before, sent(), "no transaction sent for the wallet")

	// The next ones: refused at verification once the refusal is read
	// (at most a second later), and from then on.
	require.Eventually(t, func() bool {
		res := regex(hostile)
		return res.Status == http.StatusPaymentRequired && res.Refusal == evm.ReasonPayerCodeRefused
	}, 20*time.Second, 100*time.Millisecond)
	for range 3 {
		require.Equal(t, evm.ReasonPayerCodeRefused, refusedReason(regex(hostile)))
	}
	require.Equal(t, before, sent(), "no transaction sent for the wallet")
	require.Equal(t, int64(price), usdcBalance(ctx, t, node.Client, wallet).Int64(), "the wallet paid nothing")
	require.Zero(t, scrapeSum(ctx, t, base, "x402d_settlement_reverted_gas_total"))

	// An honest payer's settlements keep a plain transfer's gas limit.
	honest := devPayer(t, 3)
	for range 2 {
		res := regex(honest)
		require.Equal(t, http.StatusOK, res.Status, string(res.Body))
		require.NotNil(t, res.Settlement)
		tx, _, err := node.Client.TransactionByHash(ctx, common.HexToHash(res.Settlement.Transaction))
		require.NoError(t, err)
		require.Less(t, tx.Gas(), uint64(200_000), "a plain transfer's gas limit")
	}
	requireNodeClean(t, node)
}
