package main

import (
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/payclient"
)

// fundUSDC has development account from send amount of Circle's USDC to to.
func fundUSDC(t *testing.T, node *anviltest.Node, from uint32, to common.Address, amount *big.Int) {
	t.Helper()
	key, err := devchain.DeriveKey(devchain.Mnemonic, from)
	require.NoError(t, err)
	data := append(common.FromHex("0xa9059cbb"), common.LeftPadBytes(to.Bytes(), 32)...)
	data = append(data, common.LeftPadBytes(amount.Bytes(), 32)...)
	r := node.Transact(key, devchain.USDC, data)
	require.Equal(t, uint64(1), r.Status)
}

// TestAnvil_OneBalanceManyCalls has a fresh wallet holding exactly one
// regex price send 2,000 concurrent paid regex calls to `x402d serve`
// settling on anvil with Circle's USDC, each with its own valid payment:
// verification reserves each payment against the payer's balance, so one
// call is admitted, run and paid, and every other is answered 402 for want
// of funds before any work is queued (one River job of the operation's
// kind in all).
func TestAnvil_OneBalanceManyCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, nil)
	db := dbtest.Schema(ctx, t)
	env := oneBalanceEnv(t, node, db)
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})
	oneBalanceFlood(ctx, t, node, db, 2000, base)
}

// TestAnvil_OneBalanceTwoAPIs is TestAnvil_OneBalanceManyCalls against two
// `x402d api` processes sharing one Postgres (and a worker), 500 calls to
// each at once: the reservation holds across processes.
func TestAnvil_OneBalanceTwoAPIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, nil)
	db := dbtest.Schema(ctx, t)
	env := oneBalanceEnv(t, node, db)
	env["TEST_REAL_PAYMENTS"] = "1"
	delete(env, "LOG_LEVEL") // the children are found ready by their info lines
	first, second := startChild(t, "api", env), startChild(t, "api", env)
	startChild(t, "worker", env)
	oneBalanceFlood(ctx, t, node, db, 500, first.addr, second.addr)
}

// oneBalanceEnv is the environment of TestAnvil_OneBalanceManyCalls.
func oneBalanceEnv(t *testing.T, node *anviltest.Node, db *dbtest.DB) map[string]string {
	env := anvilEnv(t, node, db)
	env["DB_MAX_CONNS"], env["LOG_LEVEL"] = testMaxConns, "warn"
	// Refusals after a chain read are not limited here: every call is
	// answered on its own merits.
	env["REFUSED_PAYMENTS_BURST"], env["REFUSED_PAYMENTS_PER_SECOND"] = "100000", "100000"
	return env
}

// oneBalanceFlood funds a fresh wallet with one regex price and sends, to
// each of bases at once, calls paid calls of regex from it, each with its own
// payment: exactly one is answered 200 and paid, every other 402 for want
// of funds (by the reservation, or by the simulation once the paid call
// settled), and one regex job was queued in all.
func oneBalanceFlood(ctx context.Context, t *testing.T, node *anviltest.Node, db *dbtest.DB, calls int, bases ...string) {
	t.Helper()
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	payer, err := payclient.New(&payclient.Config{Key: key, Network: "eip155:8453"})
	require.NoError(t, err)
	price := big.NewInt(10_000)
	fundUSDC(t, node, 7, payer.Address(), price)
	payTo := devAddress(t, devchain.PayToAccount)
	payToBefore := usdcBalance(ctx, t, node.Client, payTo)

	reports := make([]*loadgen.Report, len(bases))
	errs := make([]error, len(bases))
	var wg sync.WaitGroup
	for i, base := range bases {
		wg.Go(func() {
			client := &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: calls}}
			reports[i], errs[i] = loadgen.Run(ctx, loadgen.Config{
				BaseURL: base, Requests: []loadgen.Request{{Op: "regex", Body: `{"pattern":"\\d+","text":"a1b22","flags":"g"}`}},
				Payer: payer, Concurrency: calls, MaxCalls: calls, Duration: 5 * time.Minute, Presign: true,
				Retry: true, RetryFor: 90 * time.Second, Client: client,
			})
		})
	}
	wg.Wait()
	var ok, required int
	var reserved, simulated float64
	for i, rep := range reports {
		require.NoError(t, errs[i])
		t.Logf("%s: %s", bases[i], rep)
		require.Equal(t, calls, rep.Calls, rep.String())
		ok += rep.Statuses[http.StatusOK]
		required += rep.Statuses[http.StatusPaymentRequired]
		// Refused for want of funds: by the reservation while the paid
		// call was in flight, by the simulation once it was settled.
		reserved += scrapeSum(ctx, t, bases[i], "x402d_payments_refused_total", `reason="`+x402.ReasonInsufficientFunds+`"`)
		simulated += scrapeSum(ctx, t, bases[i], "x402d_payments_refused_total", `reason="`+evm.ReasonInsufficientBalance+`"`)
	}
	total := calls * len(bases)
	require.Equal(t, 1, ok)
	require.Equal(t, total-1, required)
	t.Logf("refused by the reservation: %.0f, by the simulation: %.0f", reserved, simulated)
	require.Equal(t, float64(total-1), reserved+simulated)
	require.Positive(t, reserved)

	// One job of the operation's kind: nothing else was worked on.
	var jobs int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'regex'").Scan(&jobs))
	require.Equal(t, 1, jobs)

	require.Zero(t, usdcBalance(ctx, t, node.Client, payer.Address()).Sign())
	require.Equal(t, price, new(big.Int).Sub(usdcBalance(ctx, t, node.Client, payTo), payToBefore))
}

// TestAnvil_ReservedPaymentResent: a wallet holding one price pays a slow
// call on anvil; sent again while its call runs, the same payment is that
// call's (202, the same call), not a second payment found short of funds,
// while another payment of the wallet is answered 402 insufficient_funds
// naming the balance and the payment in flight, and counted against the
// client address as refused payments are (429 past its burst). The first
// call is then paid once.
func TestAnvil_ReservedPaymentResent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, nil)
	db := dbtest.Schema(ctx, t)
	env := anvilEnv(t, node, db)
	env["DB_MAX_CONNS"], env["LOG_LEVEL"], env["CALL_WAIT"] = testMaxConns, "warn", "100ms"
	env["REFUSED_PAYMENTS_BURST"], env["REFUSED_PAYMENTS_PER_SECOND"] = "2", "0.01"
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] },
		&options{ops: []opDef{{sleepOp, worker.Bind(sleepOp, sleepWork, false)}}})

	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	payer, err := payclient.New(&payclient.Config{Key: key, Network: "eip155:8453"})
	require.NoError(t, err)
	price := big.NewInt(10_000)
	fundUSDC(t, node, 7, payer.Address(), price)

	const body = `{"ms":10000}`
	required := quoteOf(t, base, "sleep", body)
	header, err := payer.Pay(ctx, required)
	require.NoError(t, err)
	status, answer, _ := postPaid(t, base, "sleep", body, header)
	require.Equal(t, http.StatusAccepted, status, answer)
	var first map[string]string
	require.NoError(t, json.Unmarshal([]byte(answer), &first))

	status, answer, _ = postPaid(t, base, "sleep", body, header)
	require.Equal(t, http.StatusAccepted, status, answer)
	var again map[string]string
	require.NoError(t, json.Unmarshal([]byte(answer), &again))
	require.Equal(t, first["call_id"], again["call_id"])

	other, err := payer.Pay(ctx, required)
	require.NoError(t, err)
	status, answer, _ = postPaid(t, base, "sleep", body, other)
	require.Equal(t, http.StatusPaymentRequired, status, answer)
	var refused struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	require.NoError(t, json.Unmarshal([]byte(answer), &refused))
	require.Equal(t, x402.ReasonInsufficientFunds, refused.Error)
	require.Contains(t, refused.Message, payer.Address().Hex()+" holds 10000 of")
	require.Contains(t, refused.Message, "already take 10000")

	// Refused after a check on chain, such payments count against the
	// client address as other refusals do: past its burst (2), 429.
	status, answer = payOnce(t, payer, base, required, body)
	require.Equal(t, http.StatusPaymentRequired, status, answer)
	status, answer = payOnce(t, payer, base, required, body)
	require.Equal(t, http.StatusTooManyRequests, status, answer)
	require.Contains(t, answer, `"rate_limited"`)

	resp, err := http.Get(base + first["poll"] + "&wait=60")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Zero(t, usdcBalance(ctx, t, node.Client, payer.Address()).Sign())
	var jobs int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'sleep'").Scan(&jobs))
	require.Equal(t, 1, jobs)
}

// payOnce pays a call of sleep with a new payment of payer and returns its
// status and body.
func payOnce(t *testing.T, payer *payclient.Client, base, required, body string) (int, string) {
	t.Helper()
	header, err := payer.Pay(context.Background(), required)
	require.NoError(t, err)
	status, answer, _ := postPaid(t, base, "sleep", body, header)
	return status, answer
}

// TestAnvil_ValidBeforeLeavesRunAndSettlement pays regex calls on anvil
// with authorizations that expire at different times: one that expires
// before the operation's time budget (JOB_TIMEOUT) and the settlement
// window (SETTLEMENT_WINDOW) have passed is refused with a 402 naming
// validBefore and saying what it must leave, before any work; one that
// leaves both is run and paid.
func TestAnvil_ValidBeforeLeavesRunAndSettlement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, nil)
	db := dbtest.Schema(ctx, t)
	env := anvilEnv(t, node, db)
	env["DB_MAX_CONNS"], env["LOG_LEVEL"] = testMaxConns, "warn"
	env["JOB_TIMEOUT"], env["SETTLEMENT_WINDOW"] = "40s", "20s"
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})

	const op, body = "regex", `{"pattern":"\\d+","text":"a1b22","flags":"g"}`
	key, err := devchain.DeriveKey(devchain.Mnemonic, 6)
	require.NoError(t, err)
	required := quoteOf(t, base, op, body)
	var q x402.PaymentRequired
	require.NoError(t, x402.DecodeHeader(required, &q))
	for _, a := range q.Accepts {
		require.GreaterOrEqual(t, a.MaxTimeoutSeconds, 60+30, "the quote's window leaves the run, the settlement and a margin")
	}

	// A payment signed as the quote's window allows, then ones whose
	// window, counted from now, is shorter than the 60 s needed.
	for _, tc := range []struct {
		name   string
		leaves time.Duration
		status int
	}{
		{"official window", time.Duration(q.Accepts[0].MaxTimeoutSeconds) * time.Second, http.StatusOK},
		{"past the budget", 45 * time.Second, http.StatusPaymentRequired},
		{"a block", 10 * time.Second, http.StatusPaymentRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// payclient signs validBefore as its clock's now plus the
			// quote's maxTimeoutSeconds: a clock set back makes it
			// expire tc.leaves from now.
			shift := time.Duration(q.Accepts[0].MaxTimeoutSeconds)*time.Second - tc.leaves
			c, err := payclient.New(&payclient.Config{Key: key, Network: "eip155:8453", Now: func() time.Time { return time.Now().Add(-shift) }})
			require.NoError(t, err)
			header, err := c.Pay(ctx, required)
			require.NoError(t, err)
			status, answer, _ := postPaid(t, base, op, body, header)
			require.Equal(t, tc.status, status, answer)
			if tc.status != http.StatusPaymentRequired {
				return
			}
			var refused struct {
				Error   string `json:"error"`
				Message string `json:"message"`
			}
			require.NoError(t, json.Unmarshal([]byte(answer), &refused))
			require.Equal(t, evm.ReasonValidBefore, refused.Error)
			require.Contains(t, refused.Message, "at least 60 s")
		})
	}
	var jobs int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = $1", op).Scan(&jobs))
	require.Equal(t, 1, jobs, "only the payment that leaves the run and its settlement is worked on")
}

// quoteOf returns op's PAYMENT-REQUIRED header value at base.
func quoteOf(t *testing.T, base, op, body string) string {
	t.Helper()
	resp, _ := post(t, http.DefaultClient, base+"/api/x402/"+op, "", body)
	require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Payment-Required"))
	return resp.Header.Get("Payment-Required")
}
