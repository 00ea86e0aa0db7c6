package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
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
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/payclient"
)

// form1Release is the commit of the last release that writes ledger form 1
// (its newest migration is 015), whose processes this one must work
// beside: during an upgrade its apis and workers run on the same database
// as this release's until every one is replaced (docs/operating.md,
// Upgrades; TestUpgradeFromForm1Release). When a release changes what an
// older release's processes read, the upgrade from that older release is
// tested as this one is.
const form1Release = "75e52b07f4658db3ce8c2d6c65eea1e367224299"

// buildForm1Release builds the x402d binary of form1Release from this
// repository's git history and returns its path. The test fails, saying
// why, when git or the commit is missing: the upgrade is not tested then.
func buildForm1Release(ctx context.Context, t *testing.T) string {
	t.Helper()
	start := time.Now()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("the upgrade test builds the form 1 release (%s) from git, which is not installed: %v", form1Release, err)
	}
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").CombinedOutput()
	if err != nil {
		t.Fatalf("the upgrade test builds the form 1 release (%s) from this repository's git history, and the source is not in a git work tree: %v: %s",
			form1Release, err, out)
	}
	top := strings.TrimSpace(string(out))
	has := func() error {
		return exec.CommandContext(ctx, "git", "-C", top, "cat-file", "-e", form1Release+"^{commit}").Run()
	}
	if has() != nil {
		// A shallow clone: the commit is fetched from where it was
		// cloned from.
		out, err := exec.CommandContext(ctx, "git", "-C", top, "fetch", "--quiet", "origin", form1Release).CombinedOutput()
		if err != nil || has() != nil {
			t.Fatalf("the form 1 release's commit %s is not in the clone at %s, nor fetched from its origin (git fetch origin %s): %v: %s",
				form1Release, top, form1Release, err, out)
		}
	}

	src := t.TempDir()
	archive := exec.CommandContext(ctx, "git", "-C", top, "archive", form1Release)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", src)
	var archiveErr, untarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	pipe, err := archive.StdoutPipe()
	require.NoError(t, err)
	untar.Stdin = pipe
	require.NoError(t, untar.Start(), "tar")
	require.NoError(t, archive.Run(), "git archive %s: %s", form1Release, archiveErr.String())
	require.NoError(t, untar.Wait(), "tar: %s", untarErr.String())

	// Without -trimpath the dependencies' compiled packages are those the
	// test binary was built with (the build cache's); only the module's
	// own packages are compiled again. No symbol table or DWARF: a shorter
	// link.
	exe := filepath.Join(src, "x402d-prev")
	build := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-ldflags=-s -w", "-o", exe, "./cmd/x402d")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the form 1 release %s: %v: %s", form1Release, err, out)
	}
	t.Logf("built the form 1 release %.7s in %s", form1Release, time.Since(start).Round(time.Millisecond))
	return exe
}

// startForm1Release starts `x402d <command>` of the form 1 release's binary
// exe (startProcess).
func startForm1Release(t *testing.T, exe, command string, env map[string]string) *child {
	t.Helper()
	c := startProcess(t, exe, command, os.Environ(), env)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("form 1 release's x402d %s logs:\n%s", command, c.output())
		}
	})
	return c
}

// migrateWith runs `exe migrate` on env's database to its end; base is the
// environment it starts from (startProcess).
func migrateWith(ctx context.Context, t *testing.T, exe string, base []string, env map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "migrate")
	cmd.Env = append(base, "LOG_LEVEL=info", "DATABASE_URL="+env["DATABASE_URL"])
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s migrate: %s", exe, out)
}

// withEnv returns env with the pairs kv added.
func withEnv(env map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(env)+len(kv)/2)
	for k, v := range env {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// upgradeCall is a call paid during the upgrade and its first answer, which
// every later answer to it must repeat.
type upgradeCall struct {
	// id is the call's id; form is the ledger form its calls row and
	// events are written in: "1" (the result whole, the settlement as
	// JSON, the events as JSON) or "2" (migrations 016 and 017).
	id, form string
	req      *payclient.Request
	// signature is the PAYMENT-SIGNATURE paid with.
	signature string
	// answer is the first 200's body, settlement its PAYMENT-RESPONSE.
	answer     string
	settlement x402.SettleResponse
}

// answerOf returns a paid call's final answer: res, or where its poll URL
// leads when res is a 202 (the call still running), waiting up to two
// minutes.
func answerOf(ctx context.Context, t *testing.T, base string, res *payclient.Result) (int, http.Header, []byte) {
	t.Helper()
	status, header, body := res.Status, res.Header, res.Body
	deadline := time.Now().Add(2 * time.Minute)
	for status == http.StatusAccepted && time.Now().Before(deadline) {
		var running struct{ Poll string }
		require.NoError(t, json.Unmarshal(body, &running), string(body))
		status, header, body = getAnswer(ctx, t, base+running.Poll+"&wait=30")
	}
	return status, header, body
}

// getAnswer GETs url and returns its answer.
func getAnswer(ctx context.Context, t *testing.T, url string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, body
}

// settlementOf decodes a PAYMENT-RESPONSE header.
func settlementOf(t *testing.T, header http.Header) x402.SettleResponse {
	t.Helper()
	v := header.Get(x402.HeaderPaymentResponse)
	require.NotEmpty(t, v, "no %s header", x402.HeaderPaymentResponse)
	var s x402.SettleResponse
	require.NoError(t, x402.DecodeHeader(v, &s))
	return s
}

// payUpgradeCall pays a diff call through the api at base with payer, and
// checks its answer: 200, the result object naming the call and its op, a
// PAYMENT-RESPONSE naming a successful settlement by payer.
func payUpgradeCall(ctx context.Context, t *testing.T, payer *payclient.Client, base, form string, n int) upgradeCall {
	t.Helper()
	req := &payclient.Request{URL: base + "/api/x402/diff", Body: []byte(fmt.Sprintf(`{"a":"call\n%d\n","b":"call\n%d\n"}`, n, n+1))}
	res, err := payer.Do(ctx, req)
	require.NoError(t, err)
	status, header, body := answerOf(ctx, t, base, res)
	require.Equal(t, http.StatusOK, status, "call %d: %s", n, body)
	var result struct {
		CallID string `json:"call_id"`
		Op     string `json:"op"`
	}
	require.NoError(t, json.Unmarshal(body, &result), string(body))
	require.NotEmpty(t, result.CallID, string(body))
	require.Equal(t, "diff", result.Op, string(body))
	require.True(t, bytes.HasPrefix(body, []byte(`{"call_id":`)), "the result object begins with its call_id: %s", body)
	s := settlementOf(t, header)
	require.True(t, s.Success, "%+v", s)
	require.NotEmpty(t, s.Transaction, "%+v", s)
	require.Equal(t, "eip155:8453", s.Network)
	require.Equal(t, payer.Address().Hex(), s.Payer)
	return upgradeCall{id: result.CallID, form: form, req: req, signature: res.PaymentSignature, answer: string(body), settlement: s}
}

// requireSameAnswer checks that the api at base answers c as it first did:
// polled with its token, and sent again with its payment.
func requireSameAnswer(ctx context.Context, t *testing.T, db *dbtest.DB, payer *payclient.Client, base string, c upgradeCall) {
	t.Helper()
	var token string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT token FROM calls WHERE id = $1", c.id).Scan(&token))
	status, header, body := getAnswer(ctx, t, base+"/api/x402/calls/"+c.id+"?token="+token)
	require.Equal(t, http.StatusOK, status, "poll of call %s (form %s): %s", c.id, c.form, body)
	require.Equal(t, c.answer, string(body), "poll of call %s (form %s)", c.id, c.form)
	require.Equal(t, c.settlement, settlementOf(t, header), "poll of call %s (form %s)", c.id, c.form)

	again, err := payer.Resend(ctx, &payclient.Request{URL: base + "/api/x402/diff", Body: c.req.Body}, c.signature)
	require.NoError(t, err)
	status, header, body = answerOf(ctx, t, base, again)
	require.Equal(t, http.StatusOK, status, "payment of call %s (form %s) sent again: %s", c.id, c.form, body)
	require.Equal(t, c.answer, string(body), "payment of call %s (form %s) sent again", c.id, c.form)
	require.Equal(t, c.settlement, settlementOf(t, header), "payment of call %s (form %s) sent again", c.id, c.form)
}

// requireRowForm checks the ledger form c is written in: form 1 (the
// result whole, the settlement's response as JSON, no receipt) or form 2
// (the result without its call_id and op, the response packed in
// receipt), in its calls row and in its events.
func requireRowForm(ctx context.Context, t *testing.T, db *dbtest.DB, c upgradeCall) {
	t.Helper()
	var state, result string
	var hasSettlement, hasReceipt bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT state, result::text, settlement IS NOT NULL, receipt IS NOT NULL FROM calls WHERE id = $1", c.id).
		Scan(&state, &result, &hasSettlement, &hasReceipt))
	require.Equal(t, store.CallPaid, state, c.id)
	// Its events (migration 017): call.paid's and job.succeeded's values
	// in bin, not in data, and settlement.confirmed as one string, in
	// form 2 only.
	var paidInBin, succeededInBin, settledOneString bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT
		(SELECT bin IS NOT NULL FROM events WHERE stream = $1 AND type = 'call.paid'),
		(SELECT bin IS NOT NULL FROM events WHERE stream = $1 AND type = 'job.succeeded'),
		(SELECT data ? 's' FROM events WHERE stream = $1 AND type = 'settlement.confirmed')`, store.CallStream(c.id)).
		Scan(&paidInBin, &succeededInBin, &settledOneString))
	isNew := c.form == "2"
	require.Equal(t, []bool{isNew, isNew, isNew}, []bool{paidInBin, succeededInBin, settledOneString},
		"call %s: call.paid in bin, job.succeeded in bin, settlement.confirmed one string", c.id)
	whole := strings.HasPrefix(result, `{"call_id"`)
	switch c.form {
	case "1":
		require.True(t, whole, "call %s: form 1 keeps the result whole: %s", c.id, result)
		require.True(t, hasSettlement, "call %s: form 1 keeps the settlement as JSON", c.id)
		require.False(t, hasReceipt, "call %s: form 1 has no receipt", c.id)
	case "2":
		require.False(t, whole, "call %s: form 2 keeps the result without its call_id and op: %s", c.id, result)
		require.False(t, hasSettlement, "call %s: form 2 keeps no settlement JSON", c.id)
		require.True(t, hasReceipt, "call %s: form 2 keeps the response in receipt", c.id)
	default:
		t.Fatalf("call %s: unknown form %q", c.id, c.form)
	}
}

// TestUpgradeFromForm1Release walks the upgrade of docs/operating.md
// with the real binary of the last release writing ledger form 1
// (form1Release) and this release's, as separate processes on one database
// settling on a devchain: the old release's api and worker on a database
// it migrated; this release's `x402d migrate`; a new worker (LEDGER_FORM=1)
// in place of the old one, the old api answering the calls it settles; a
// new api in place of the old one, answering every call paid so far; the
// workers and apis restarted without LEDGER_FORM, writing form 2. Every call keeps its first answer through every api after it, and
// each payment is settled once.
func TestUpgradeFromForm1Release(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Now()
	prev := buildForm1Release(ctx, t)
	newExe, err := os.Executable()
	require.NoError(t, err)
	newBase := func() []string { return append(os.Environ(), "X402D_TEST_CHILD=1") }

	db := dbtest.Unmigrated(ctx, t)
	migrateWith(ctx, t, prev, os.Environ(), map[string]string{"DATABASE_URL": db.URL})
	env, chain := startDevchainProcess(ctx, t, db)
	// A generous wait: most calls are answered at once; a loaded machine's
	// are followed through their poll URL.
	env = withEnv(env, "CALL_WAIT", "20s", "JOB_TIMEOUT", "30s", "JOB_RESCUE_AFTER", "60s")
	payer := devPayer(t, 6)
	payTo := devAddress(t, devchain.PayToAccount)
	payerBefore, payToBefore := usdcBalance(ctx, t, chain, payer.Address()), usdcBalance(ctx, t, chain, payTo)
	var calls []upgradeCall
	pay := func(base, form string, n int) {
		t.Helper()
		for range n {
			calls = append(calls, payUpgradeCall(ctx, t, payer, base, form, len(calls)))
		}
	}

	// (a) The form 1 release on a database it migrated.
	oldAPI := startForm1Release(t, prev, "api", env)
	oldWorker := startForm1Release(t, prev, "worker", env)
	pay(oldAPI.addr, "1", 2)
	t.Logf("(a) form 1 release: %d calls paid (%s)", len(calls), time.Since(start).Round(time.Millisecond))

	// (b) This release's migrations; the form 1 release goes on.
	migrateWith(ctx, t, newExe, newBase(), env)
	var hasReceipt bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'calls' AND column_name = 'receipt')`).Scan(&hasReceipt))
	require.True(t, hasReceipt, "migration 016 applied")
	pay(oldAPI.addr, "1", 1)

	// (c) A new worker writing form 1 replaces the old one; the old api
	// answers the calls it settles.
	form1 := withEnv(env, "LEDGER_FORM", "1")
	newWorker := startChild(t, "worker", form1)
	oldWorker.stop(t)
	first := len(calls)
	pay(oldAPI.addr, "1", 3)
	for _, c := range calls[first:] {
		requireRowForm(ctx, t, db, c)
	}
	requireSameAnswer(ctx, t, db, payer, oldAPI.addr, calls[len(calls)-1])
	t.Logf("(c) new worker, old api: %d calls paid (%s)", len(calls), time.Since(start).Round(time.Millisecond))

	// (d) A new api replaces the old one: every call answers as it did.
	newAPI := startChild(t, "api", form1)
	oldAPI.stop(t)
	for _, c := range calls {
		requireSameAnswer(ctx, t, db, payer, newAPI.addr, c)
	}
	pay(newAPI.addr, "1", 1)
	t.Logf("(d) new api: %d calls answered again (%s)", len(calls), time.Since(start).Round(time.Millisecond))

	// (e) No process of the form 1 release is left: the worker and the
	// api restart without LEDGER_FORM, and the worker writes form 2.
	startChild(t, "worker", env)
	newWorker.stop(t)
	api := startChild(t, "api", env)
	newAPI.stop(t)
	pay(api.addr, "2", 3)
	for _, c := range calls {
		requireRowForm(ctx, t, db, c)
		requireSameAnswer(ctx, t, db, payer, api.addr, c)
	}
	t.Logf("(e) form 2: %d calls in all answered again (%s)", len(calls), time.Since(start).Round(time.Millisecond))

	// Each payment settled once: one settlement.confirmed a call, the
	// payer's and the receiver's balances moved by the calls' prices.
	rep := &loadgen.Report{Calls: len(calls)}
	for _, c := range calls {
		rep.Outcomes = append(rep.Outcomes, loadgen.Outcome{Op: "diff", Status: http.StatusOK, CallID: c.id, Settled: c.settlement.Success, Tx: c.settlement.Transaction})
	}
	price := big.NewInt(10_000) // diff: $0.01
	checkChainPayments(ctx, t, chain, rep, payer.Address(), payTo, price)
	requirePaidOnce(ctx, t, db, rep, price, new(big.Int).Sub(payerBefore, usdcBalance(ctx, t, chain, payer.Address())))
	require.Equal(t, new(big.Int).Mul(price, big.NewInt(int64(len(calls)))), new(big.Int).Sub(usdcBalance(ctx, t, chain, payTo), payToBefore),
		"the receiver got the calls' prices once")
	var confirmed int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE type = $1 AND stream = ANY($2)",
		store.EventSettlementConfirmed, streamsOf(calls)).Scan(&confirmed))
	require.Equal(t, len(calls), confirmed, "one settlement.confirmed a call")
	t.Logf("upgrade walked in %s", time.Since(start).Round(time.Millisecond))
}

// streamsOf returns the event streams of calls.
func streamsOf(calls []upgradeCall) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = store.CallStream(c.id)
	}
	return out
}
