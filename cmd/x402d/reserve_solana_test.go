package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/svmtest"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/svm"
)

// TestSolanaOneBalanceManyCalls: a fresh Solana wallet whose USDC account
// holds one regex price sends 200 paid regex calls at once, each with its
// own valid signed transaction. The payments are reserved against the
// balance of the token account they move funds from: one call runs and is
// paid, every other is answered 402 for want of funds (by the reservation
// while the paid call is in flight, by the simulation once it settled), and
// one regex job was queued in all.
func TestSolanaOneBalanceManyCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startSolanaService(ctx, t, map[string]string{
		// Refusals after a chain read are not limited here: every call
		// is answered on its own merits.
		"REFUSED_PAYMENTS_BURST": "100000", "REFUSED_PAYMENTS_PER_SECOND": "100000",
	})
	req := solanaRequirement(t, s.base, "regex")
	price, err := strconv.ParseUint(req.Amount, 10, 64)
	require.NoError(t, err)
	payer := svmtest.PayerKey(3000)
	payerATA := s.node.Fund(ctx, payer.PublicKey(), 0, price, solana.PublicKey{})
	payToATA := svmtest.ATA(t, s.payTo, svmtest.USDC)
	payToBefore := s.node.TokenBalance(ctx, payToATA)

	const calls = 200
	headers := make([]string, calls)
	for i := range headers {
		headers[i] = svmtest.PaymentHeader(t, req, s.node.PaymentTransaction(ctx, req, payer, fmt.Sprintf("call %d", i)))
	}
	const body = `{"pattern":"\\d+","text":"a1b22","flags":"g"}`
	type answer struct {
		status int
		body   string
		err    error
	}
	answers := make([]answer, calls)
	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: calls}}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, header := range headers {
		wg.Go(func() {
			<-start
			r, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/api/x402/regex", bytes.NewReader([]byte(body)))
			if err != nil {
				answers[i].err = err
				return
			}
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("PAYMENT-SIGNATURE", header)
			resp, err := client.Do(r)
			if err != nil {
				answers[i].err = err
				return
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			answers[i] = answer{status: resp.StatusCode, body: string(raw), err: err}
		})
	}
	close(start)
	wg.Wait()

	statuses := map[int]int{}
	reasons := map[string]int{}
	for _, a := range answers {
		require.NoError(t, a.err)
		status, got := awaitAnswer(t, s.base, a.status, a.body, time.Minute)
		statuses[status]++
		if status == http.StatusPaymentRequired {
			var refusal struct{ Error string }
			require.NoError(t, json.Unmarshal([]byte(got), &refusal), got)
			reasons[refusal.Error]++
		}
	}
	t.Logf("statuses %v, refusals %v", statuses, reasons)
	require.Equal(t, map[int]int{http.StatusOK: 1, http.StatusPaymentRequired: calls - 1}, statuses)
	// Refused for want of funds: by the reservation while the paid call
	// was in flight, by the simulation once it was settled.
	require.Equal(t, calls-1, reasons[x402.ReasonInsufficientFunds]+reasons[svm.ReasonSimulationFailed], reasons)
	require.Positive(t, reasons[x402.ReasonInsufficientFunds])

	// One job of the operation's kind: nothing else was worked on.
	var jobs int
	require.NoError(t, s.db.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'regex'").Scan(&jobs))
	require.Equal(t, 1, jobs)
	// Paid once.
	require.Zero(t, s.node.TokenBalance(ctx, payerATA))
	require.Equal(t, price, s.node.TokenBalance(ctx, payToATA)-payToBefore)
}
