package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/payclient"
)

// emptyWallets pays every call from a new key that holds nothing: valid
// EIP-3009 signatures from empty wallets, free to make.
type emptyWallets struct{ network string }

func (e emptyWallets) Pay(ctx context.Context, paymentRequired string) (string, error) {
	key, err := crypto.GenerateKey()
	if err != nil {
		return "", err
	}
	return payWith(ctx, key, e.network, paymentRequired)
}

func payWith(ctx context.Context, key *ecdsa.PrivateKey, network, paymentRequired string) (string, error) {
	c, err := payclient.New(&payclient.Config{Key: key, Network: network})
	if err != nil {
		return "", err
	}
	return c.Pay(ctx, paymentRequired)
}

// scrapeSum returns the sum of the samples of metric at base's /metrics
// whose labels contain every one of labels (`purpose="verify"`).
func scrapeSum(ctx context.Context, t *testing.T, base, metric string, labels ...string) float64 {
	t.Helper()
	body := getMetrics(ctx, t, base)
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, line)
		sum += v
	}
	require.NoError(t, sc.Err())
	return sum
}

// TestAnvil_EmptyWalletFlood floods `x402d serve`, settling on anvil, with
// payments signed by fresh empty wallets from one client address beside
// honest paid load from another: every honest call is answered 200 and
// settled once, the flood is refused (402, then 429), and the RPC calls
// the flood causes are at most one per 100 refused payments (counted by
// x402d_rpc_calls_total).
func TestAnvil_EmptyWalletFlood(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, nil)
	db := dbtest.Schema(ctx, t)
	env := anvilEnv(t, node, db)
	env["DB_MAX_CONNS"], env["LOG_LEVEL"] = testMaxConns, "warn"
	// A burst and a rate under the defaults (10, 1/s), so that a flood
	// this short on a busy machine still shows the bound.
	env["REFUSED_PAYMENTS_BURST"], env["REFUSED_PAYMENTS_PER_SECOND"] = "5", "0.5"
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})

	const op, body = "diff", `{"a":"one\ntwo\n","b":"one\n2\n"}`
	payer := devPayer(t, 6)
	payTo := devAddress(t, devchain.PayToAccount)
	payerBefore := usdcBalance(ctx, t, node.Client, payer.Address())
	verifyBefore := scrapeSum(ctx, t, base, "x402d_rpc_calls_total", `purpose="verify"`)

	const dur = 6 * time.Second
	var wg sync.WaitGroup
	var honest, flood *loadgen.Report
	var honestErr, floodErr error
	wg.Go(func() {
		honest, honestErr = loadgen.Run(ctx, loadgen.Config{
			BaseURL: base, Requests: []loadgen.Request{{Op: op, Body: body}}, Payer: payer,
			Concurrency: 200, Rate: 50, Duration: dur, Retry: true, RetryFor: 60 * time.Second,
		})
	})
	wg.Go(func() {
		flood, floodErr = loadgen.Run(ctx, loadgen.Config{
			BaseURL: base, Requests: []loadgen.Request{{Op: op, Body: body}}, Payer: emptyWallets{network: "eip155:8453"},
			Concurrency: 256, Rate: 400, Duration: dur, Presign: true, Client: clientFrom("127.0.0.2"),
		})
	})
	wg.Wait()
	require.NoError(t, honestErr)
	require.NoError(t, floodErr)
	t.Logf("honest: %s", honest)
	t.Logf("flood: %s", flood)

	require.Equal(t, honest.Calls, honest.Statuses[http.StatusOK], honest.String())
	price := int64(10_000)
	checkChainPayments(ctx, t, node.Client, honest, payer.Address(), payTo, big.NewInt(price))
	requirePaidOnce(ctx, t, db, honest, big.NewInt(price), new(big.Int).Sub(payerBefore, usdcBalance(ctx, t, node.Client, payer.Address())))

	refused := flood.Statuses[http.StatusPaymentRequired] + flood.Statuses[http.StatusTooManyRequests]
	require.Equal(t, flood.Calls, refused, flood.String())
	require.Positive(t, flood.Statuses[http.StatusTooManyRequests], flood.String())
	require.Greater(t, flood.Calls, 1000)

	// Each honest payment's verification is one simulation, and an honest
	// payment sent again (a lost answer) at most a simulation and a read
	// of its authorization's state. The asset's code is read by the first
	// verifications, apart. What is left is the flood's.
	rpc := func(labels ...string) float64 {
		return scrapeSum(ctx, t, base, "x402d_rpc_calls_total", append(labels, `purpose="verify"`)...)
	}
	verified := scrapeSum(ctx, t, base, "x402d_payments_verified_total")
	assetCode := rpc(`method="eth_getCode"`)
	require.LessOrEqual(t, assetCode, 10.0, "the asset's code is read once per verification under way at the start")
	var resent int
	for _, o := range honest.Outcomes {
		resent += o.Tries - 1
	}
	verify := rpc() - verifyBefore
	floodRPC := verify - assetCode - verified - 2*float64(resent)
	t.Logf("%d refused payments (%.0f after a chain read, %.0f rate limited); %.0f verification RPC calls: %.0f for %.0f verified payments and %d resent, %.0f reads of the asset's code, %.0f caused by the flood",
		refused, scrapeSum(ctx, t, base, "x402d_payments_refused_total", "insufficient_balance"), scrapeSum(ctx, t, base, "x402d_payments_refused_total", "rate_limited"),
		verify, verified, verified, resent, assetCode, floodRPC)
	require.LessOrEqual(t, floodRPC, float64(refused)/100, "RPC calls caused by the flood")
	require.Positive(t, scrapeSum(ctx, t, base, "x402d_rpc_calls_total", `purpose="settle"`))
}
