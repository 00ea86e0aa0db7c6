package ops_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/api"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/diff"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/ops"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402"
)

// This file runs the real service in-process for the dashboard's tests: the
// api with the dashboard and metrics mounted, a River client working the
// jobs, Postgres in a schema of its own. Only the payment's chain is a
// double (payments "test:<payer>:<nonce>"), as there is no chain here.

// testToken is the operator token of the tests.
const testToken = "ops-test-token-7c1f0e9a4b2d"

// fakePayments accepts "test:<payer>:<nonce>" and refuses "bad:<payer>:<nonce>"
// with invalid_exact_evm_signature. Settling a payer starting with "0xbroke"
// is refused with insufficient balance; others get a transaction hash derived
// from the nonce.
type fakePayments struct{}

func (fakePayments) Quote(op string) (*x402.Quote, error) {
	doc := fmt.Sprintf(`{"x402Version":2,"error":"payment required","resource":{"url":"http://test/api/x402/%s"},"accepts":[{"scheme":"exact","network":"eip155:8453","amount":"10000","asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","payTo":"0x0000000000000000000000000000000000000009","maxTimeoutSeconds":300,"extra":{"name":"USD Coin","version":"2"}}]}`, op)
	return &x402.Quote{PaymentRequired: base64.StdEncoding.EncodeToString([]byte(doc)), WWWAuthenticate: `X402 realm="test"`, Body: []byte(doc)}, nil
}

func (f fakePayments) QuoteWithError(op, reason, message string) (*x402.Quote, error) {
	q, _ := f.Quote(op)
	doc := strings.Replace(string(q.Body), `"error":"payment required"`, fmt.Sprintf(`"error":%q,"message":%q`, reason, message), 1)
	return &x402.Quote{PaymentRequired: base64.StdEncoding.EncodeToString([]byte(doc)), WWWAuthenticate: q.WWWAuthenticate, Body: []byte(doc)}, nil
}

func (f fakePayments) Verify(_ context.Context, op, header string) (*x402.Payment, error) {
	p, err := f.Identify(op, header)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(header, "test:") {
		return nil, &x402.Refusal{Reason: "invalid_exact_evm_signature", Message: "test double refuses " + header}
	}
	return p, nil
}

func (fakePayments) Identify(_, header string) (*x402.Payment, error) {
	parts := strings.Split(header, ":")
	if len(parts) != 3 {
		return nil, &x402.Refusal{Reason: "invalid_payload", Message: "cannot read " + header}
	}
	payload, _ := json.Marshal(map[string]string{"header": header})
	return &x402.Payment{Network: "eip155:8453", Payer: parts[1], Nonce: parts[2], Amount: "10000",
		Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", Payload: payload}, nil
}

func (fakePayments) Settle(_ context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	if strings.HasPrefix(p.Payer, "0xbroke") {
		return &x402.SettleResponse{Success: false, ErrorReason: "invalid_exact_evm_insufficient_balance", Network: p.Network, Payer: p.Payer}, nil
	}
	return &x402.SettleResponse{Success: true, Transaction: txHash(p.Nonce), Network: p.Network, Payer: p.Payer}, nil
}

// txHash is the transaction hash the double reports for a payment's nonce.
func txHash(nonce string) string {
	h := sha256.Sum256([]byte(nonce))
	return "0x" + hex.EncodeToString(h[:])
}

// flakyArgs is a job that fails on its first attempt and succeeds on any
// later one: inserted with one attempt, it ends discarded until an operator
// retries it.
type flakyArgs struct {
	Note string `json:"note"`
}

func (flakyArgs) Kind() string { return "flaky" }

type flakyWorker struct {
	river.WorkerDefaults[flakyArgs]
}

func (flakyWorker) Work(_ context.Context, job *river.Job[flakyArgs]) error {
	if job.Attempt == 1 {
		return errors.New("upstream unavailable on the first attempt")
	}
	return nil
}

// service is the running service of one test.
type service struct {
	URL     string
	DB      *dbtest.DB
	River   *worker.Client
	Metrics *metrics.Metrics
	Logs    *lockedBuffer
	HTTP    *http.Client
}

// startService runs api + workers with the dashboard behind token (empty:
// disabled).
func startService(ctx context.Context, t testing.TB, token string) *service {
	t.Helper()
	db := dbtest.Schema(ctx, t)
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m := metrics.New(metrics.Config{Pool: db.Pool})
	client, err := worker.NewClient(&worker.Deps{
		Pool:     db.Pool,
		Settler:  fakePayments{},
		Logger:   logger,
		Ops:      []worker.Op{worker.Bind(diff.Op, diff.Work, false)},
		Register: []func(*river.Workers) error{func(w *river.Workers) error { return river.AddWorkerSafely(w, flakyWorker{}) }},
		Metrics:  m,
	}, worker.Config{Work: true, FetchPollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = worker.Stop(client, 5*time.Second) })

	listener := store.NewListener(db.Pool.Config().ConnConfig, logger)
	require.NoError(t, listener.Start(ctx))
	t.Cleanup(listener.Stop)

	srv, err := api.New(api.Config{
		Ops:       []jobs.Operation{diff.Op},
		Payments:  fakePayments{},
		Pool:      db.Pool,
		River:     client,
		Listener:  listener,
		CallWait:  10 * time.Second,
		Logger:    logger,
		Metrics:   m,
		Dashboard: &ops.Config{Token: token, Refresh: 300 * time.Millisecond},
	})
	require.NoError(t, err)
	hs := httptest.NewServer(srv.Echo())
	t.Cleanup(hs.Close)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service logs:\n%s", logs.String())
		}
	})
	return &service{
		URL: hs.URL, DB: db, River: client, Metrics: m, Logs: logs,
		HTTP: &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
}

// pay makes a call of diff with payment header payment ("" for none).
func (s *service) pay(t testing.TB, payment, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/api/x402/diff", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if payment != "" {
		req.Header.Set("PAYMENT-SIGNATURE", payment)
	}
	return s.do(t, req)
}

// get fetches path with extra headers.
func (s *service) get(t testing.TB, path string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return s.do(t, req)
}

func (s *service) do(t testing.TB, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := s.HTTP.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// paidCallID pays a diff call and returns its call id.
func (s *service) paidCallID(t testing.TB, payment string) string {
	t.Helper()
	resp, body := s.pay(t, payment, `{"a":"one\ntwo\n","b":"one\nthree\n"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var res struct {
		CallID string `json:"call_id"`
	}
	require.NoError(t, json.Unmarshal(body, &res))
	require.NotEmpty(t, res.CallID)
	return res.CallID
}

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
