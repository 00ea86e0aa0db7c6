package main

import (
	"context"
	"encoding/json"
	"math/big"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/api"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/payclient"
)

// catastrophicRegex is a paid regex call whose pattern backtracks
// catastrophically on its text: the ecmascript engine runs it until its
// time budget and the call fails, not charged.
const catastrophicRegex = `{"pattern":"^(a+)+\\1$","text":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"}`

// TestUnpaidWorkLimited has one funded wallet send 200 catastrophic regex
// calls, one after another, on the devchain: the first few run and fail
// (502 operation_failed, not charged); past the payer's burst
// (UNPAID_WORK_BURST) the others are answered 429 unpaid_work_limited with
// Retry-After before any work (no job queued) and nothing is charged. A
// fresh wallet from the same client address is limited as well (the
// address's count); a wallet from another address pays and gets its
// result.
func TestUnpaidWorkLimited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, chain, db := startDevchainServiceDB(ctx, t)
	const account = 4
	payer, payTo := devAddress(t, account), devAddress(t, devchain.PayToAccount)
	payerBefore, payToBefore := usdcBalance(ctx, t, chain, payer), usdcBalance(ctx, t, chain, payTo)

	call := func(t *testing.T, p *payclient.Client, body string) *payclient.Result {
		t.Helper()
		res, err := p.Do(ctx, &payclient.Request{Method: http.MethodPost, URL: base + "/api/x402/regex", Body: []byte(body)})
		require.NoError(t, err)
		return res
	}
	requireLimited := func(t *testing.T, res *payclient.Result) {
		t.Helper()
		require.Equal(t, http.StatusTooManyRequests, res.Status, string(res.Body))
		var e struct{ Error, Message string }
		require.NoError(t, json.Unmarshal(res.Body, &e))
		require.Equal(t, "unpaid_work_limited", e.Error)
		require.NotEmpty(t, e.Message)
		wait, err := strconv.Atoi(res.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After %q", res.Header.Get("Retry-After"))
		require.Positive(t, wait)
		require.Nil(t, res.Settlement)
	}

	wallet := devPayer(t, account)
	var ran, limited int
	for i := range 200 {
		res := call(t, wallet, catastrophicRegex)
		switch res.Status {
		case http.StatusBadGateway:
			require.Zero(t, limited, "call %d ran after one was limited", i)
			var e struct{ Error, Message string }
			require.NoError(t, json.Unmarshal(res.Body, &e))
			require.Equal(t, "operation_failed", e.Error, string(res.Body))
			require.Contains(t, e.Message, "time limit exceeded")
			ran++
			// The burst, and a call or two admitted before the api read
			// the last run's end.
			require.LessOrEqual(t, ran, api.DefaultUnpaidBurst+2, "call %d ran past the payer's limit", i)
		default:
			requireLimited(t, res)
			limited++
		}
	}
	t.Logf("%d calls ran, %d limited", ran, limited)
	require.GreaterOrEqual(t, ran, api.DefaultUnpaidBurst)
	require.Equal(t, 200, ran+limited)
	var jobs int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'regex'").Scan(&jobs))
	require.Equal(t, ran, jobs, "work queued for limited calls")

	// Another wallet from the same address: the address is limited.
	requireLimited(t, call(t, devPayer(t, account+1), catastrophicRegex))
	// A wallet from another address pays for its result.
	key, err := devchain.DeriveKey(devchain.Mnemonic, account+2)
	require.NoError(t, err)
	other, err := payclient.New(&payclient.Config{Key: key, Network: "eip155:8453", HTTPClient: clientFrom("127.0.0.6")})
	require.NoError(t, err)
	res := call(t, other, `{"pattern":"\\d+","text":"a1b22","flags":"g"}`)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.True(t, res.Settlement.Success)

	require.Equal(t, payerBefore, usdcBalance(ctx, t, chain, payer), "the payer was charged")
	require.Equal(t, 0, new(big.Int).Sub(usdcBalance(ctx, t, chain, payTo), payToBefore).Cmp(big.NewInt(10_000)),
		"the receiver got other than the one paid call")
}

// TestPaidDiffWithinBudget pays on the devchain for diffs of about 900 kB
// of JSON whose edit search has no short answer (150,000 lines a side:
// none in common; few distinct lines, each in both): each is answered 200 with a
// correct diff within a few seconds, and charged once.
func TestPaidDiffWithinBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, chain := startDevchainService(ctx, t)
	const account = 7
	payer := devAddress(t, account)
	before := usdcBalance(ctx, t, chain, payer)
	wallet := devPayer(t, account)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		line func(side, i int) string
	}{
		// One character a line, three bytes of JSON: the body's limit.
		{"no line in common", func(side, i int) string { return string(rune('a' + 13*side + i%13)) }},
		{"few distinct lines", func(int, int) string { return strconv.Itoa(rng.IntN(8)) }},
	} {
		var a, b strings.Builder
		for i := range 150_000 {
			a.WriteString(tc.line(0, i) + "\n")
			b.WriteString(tc.line(1, i) + "\n")
		}
		body, err := json.Marshal(map[string]string{"a": a.String(), "b": b.String()})
		require.NoError(t, err)
		require.Greater(t, len(body), 900_000, tc.name)
		start := time.Now()
		res, err := wallet.Do(ctx, &payclient.Request{Method: http.MethodPost, URL: base + "/api/x402/diff", Body: body})
		require.NoError(t, err)
		took := time.Since(start)
		require.Equal(t, http.StatusOK, res.Status, "%s: %.300s", tc.name, res.Body)
		require.True(t, res.Settlement.Success, tc.name)
		var out struct {
			Stats struct{ Added, Removed, Unchanged int }
		}
		require.NoError(t, json.Unmarshal(res.Body, &out))
		require.Equal(t, 150_000, out.Stats.Removed+out.Stats.Unchanged, tc.name)
		require.Equal(t, 150_000, out.Stats.Added+out.Stats.Unchanged, tc.name)
		t.Logf("%s: %d bytes answered in %v, %+v", tc.name, len(body), took, out.Stats)
		require.Less(t, took, 20*time.Second, "%s: the diff's answer took %v", tc.name, took)
	}
	paid := new(big.Int).Sub(before, usdcBalance(ctx, t, chain, payer))
	require.Zero(t, paid.Cmp(big.NewInt(2*10_000)), "paid %s for two diffs", paid)
}
