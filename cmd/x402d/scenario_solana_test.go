//go:build scenario

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/svmtest"
	"github.com/x402d/x402d/x402"
)

// TestLoadSolanaBesideOfficialSeller measures paid diff calls on Solana,
// settled on one LiteSVM node (400 ms blocks), on x402d serve and on a
// seller built only from the official packages (compat/official_seller.mjs
// with NETWORK=solana: @x402/express with the official SVM facilitator code
// in-process), in the same run: paid calls a second with LOAD_C in flight
// (default 1000) for LOAD_T (default 20s), then p50 and p99 at a steady
// LOAD_RATE a second (default 150), each with the node's JSON-RPC calls per
// paid call by method. Payments are built as the official client builds
// them, on each seller's current quote. `go tool task load:solana` runs it;
// the figures are in docs/performance.md.
func TestLoadSolanaBesideOfficialSeller(t *testing.T) {
	ctx := context.Background()
	inFlight, rate, dur := envInt(t, "LOAD_C", 1000), envInt(t, "LOAD_RATE", 150), 20*time.Second
	if v := os.Getenv("LOAD_T"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		dur = d
	}
	// The service's own database pool (DefaultConfig), not the tests'
	// testMaxConns: a call holds a connection while it is recorded, and
	// five bound a service answering hundreds a second. PPROF_ADDR, when
	// set, serves the test process's profiles.
	s := startSolanaService(ctx, t, map[string]string{"LOG_LEVEL": "warn", "DB_MAX_CONNS": strconv.Itoa(DefaultConfig().DBMaxConns),
		"PPROF_ADDR": os.Getenv("PPROF_ADDR")})
	feePayer, payTo := svmtest.PayerKey(2000), svmtest.PayerKey(2001).PublicKey()
	s.node.FundSOL(ctx, feePayer.PublicKey(), 100_000_000_000)
	s.node.Fund(ctx, payTo, 0, 0, solana.PublicKey{})
	official := startCompatServer(t, "official_seller.mjs", "NETWORK=solana", "RPC_URL="+s.node.URL, "FEE_PAYER_KEY="+feePayer.String(), "PAY_TO="+payTo.String())

	sellers := []struct{ name, base string }{{"x402d", s.base}, {"official", official}}
	for _, sl := range sellers {
		s.node.Stats(ctx, true)
		r := solanaLoad(ctx, t, s.node, sl.base, inFlight, 0, dur)
		t.Logf("%s: %d in flight for %s: %d paid in %s (%.1f/s), %d not paid %v; p50 %s, p99 %s; quote's blockhash had %d blocks left at least",
			sl.name, inFlight, dur, r.paid, r.elapsed.Round(time.Millisecond), float64(r.paid)/r.elapsed.Seconds(), r.failed, r.why, r.quantile(0.5), r.quantile(0.99), r.minLeft)
		logNodeStats(t, sl.name, s.node.Stats(ctx, false), r.paid+r.failed)
	}
	for _, sl := range sellers {
		s.node.Stats(ctx, true)
		r := solanaLoad(ctx, t, s.node, sl.base, 0, rate, dur)
		t.Logf("%s: steady %d/s for %s: %d paid, %d not paid %v; p50 %s, p99 %s; quote's blockhash had %d blocks left at least",
			sl.name, rate, dur, r.paid, r.failed, r.why, r.quantile(0.5), r.quantile(0.99), r.minLeft)
		logNodeStats(t, sl.name, s.node.Stats(ctx, false), r.paid+r.failed)
	}
}

// logNodeStats logs what the node did for a seller's calls: its use, and
// the JSON-RPC calls per call by method with the node's time in each.
func logNodeStats(t *testing.T, seller string, st svmtest.Stats, calls int) {
	t.Helper()
	per := func(n float64) float64 { return n / float64(max(calls, 1)) }
	t.Logf("%s: node busy %.0f%% of %.1f s, %d HTTP requests (%.2f a call), JSON %.0f ms (%.2f ms a call)",
		seller, 100*st.EventLoopUtilization, st.Seconds, st.Requests, per(float64(st.Requests)), st.JSONMs, per(st.JSONMs))
	names := slices.Sorted(maps.Keys(st.Methods))
	for _, m := range names {
		ms := st.Methods[m]
		t.Logf("%s:   %-34s %7d calls (%5.2f a call) %8.0f ms (%.3f ms each)", seller, m, ms.Calls, per(float64(ms.Calls)), ms.Ms, ms.Ms/float64(max(ms.Calls, 1)))
	}
}

func envInt(t *testing.T, key string, def int) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, key)
	return n
}

// loadResult is what a load run saw.
type loadResult struct {
	paid, failed int
	latencies    []time.Duration
	// why counts the calls not paid by what they were answered.
	why map[string]int
	// minLeft is the fewest blocks the quote's blockhash had left when
	// the quote was read.
	minLeft int64
	// elapsed is from the first call to the last answer.
	elapsed time.Duration
}

func (r *loadResult) quantile(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	l := slices.Clone(r.latencies)
	slices.Sort(l)
	return l[min(len(l)-1, int(q*float64(len(l))))]
}

// solanaLoad pays diff calls of the seller at base for dur, with inFlight
// calls at a time, or (inFlight 0) rate new calls a second, each paid by
// one of ten development payers with a transaction built as the official
// client builds it on the seller's current quote (fetched every second,
// the node's newest blockhash put in its extra when the quote has none).
func solanaLoad(ctx context.Context, t *testing.T, node *svmtest.Node, base string, inFlight, rate int, dur time.Duration) *loadResult {
	var (
		mu  sync.Mutex
		res = loadResult{why: map[string]int{}, minLeft: x402.SolanaBlockhashBlocks}
	)
	var current atomic.Pointer[x402.Requirements]
	refresh := func() {
		req := *solanaRequirement(t, base, "diff")
		var extra map[string]any
		require.NoError(t, json.Unmarshal(req.Extra, &extra))
		if extra["recentBlockhash"] == nil {
			extra["recentBlockhash"] = node.LatestBlockhash(ctx, "confirmed").Hash.String()
		} else if last, ok := extra["lastValidBlockHeight"].(float64); ok {
			left := int64(last) - int64(node.BlockHeight(ctx, "confirmed"))
			mu.Lock()
			res.minLeft = min(res.minLeft, left)
			mu.Unlock()
		}
		raw, err := json.Marshal(extra)
		require.NoError(t, err)
		req.Extra = raw
		current.Store(&req)
	}
	refresh()
	stop := make(chan struct{})
	var refresher sync.WaitGroup
	refresher.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				refresh()
			}
		}
	})
	defer func() { close(stop); refresher.Wait() }()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2048}, Timeout: 2 * time.Minute}
	var seq atomic.Int64
	call := func() {
		n := seq.Add(1)
		req := current.Load()
		tx := node.PaymentTransaction(ctx, req, svmtest.PayerKey(int(n%10)), "load-"+strconv.FormatInt(n, 10)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		header := svmtest.PaymentHeader(t, req, tx)
		body := `{"a":"` + strconv.FormatInt(n, 10) + `\n","b":"y\n"}`
		start := time.Now()
		hr, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/x402/diff", bytes.NewReader([]byte(body)))
		require.NoError(t, err)
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Set("PAYMENT-SIGNATURE", header)
		resp, err := client.Do(hr)
		ok, why := false, "error"
		if err == nil {
			var settled x402.SettleResponse
			ok = resp.StatusCode == http.StatusOK && x402.DecodeHeader(resp.Header.Get("PAYMENT-RESPONSE"), &settled) == nil && settled.Success
			var answer struct{ Error string }
			_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&answer)
			resp.Body.Close()
			why = strconv.Itoa(resp.StatusCode) + " " + answer.Error
		}
		mu.Lock()
		defer mu.Unlock()
		if ok {
			res.paid++
			res.latencies = append(res.latencies, time.Since(start))
		} else {
			res.failed++
			res.why[why]++
		}
	}
	begin := time.Now()
	deadline := begin.Add(dur)
	var wg sync.WaitGroup
	if inFlight > 0 {
		for range inFlight {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					call()
				}
			})
		}
	} else {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		for time.Now().Before(deadline) {
			<-tick.C
			wg.Go(call)
		}
		tick.Stop()
	}
	wg.Wait()
	res.elapsed = time.Since(begin)
	return &res
}
