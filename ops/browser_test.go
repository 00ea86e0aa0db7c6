package ops_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/browsertest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/store"
)

// artifactsDir is where the browser tests save their screenshots:
// $ARTIFACTS_DIR/screenshots, or artifacts/screenshots at the repository's
// root (ignored by git).
func artifactsDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("ARTIFACTS_DIR")
	if dir == "" {
		dir = filepath.Join("..", "artifacts")
	}
	dir = filepath.Join(dir, "screenshots")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

func screenshot(t testing.TB, p *rod.Page, name string) {
	t.Helper()
	// What a person sees: no value a template failed to format.
	require.NotContains(t, p.MustElement("body").MustText(), "%!", "%s: a template failed to format a value", name)
	img, err := p.Screenshot(true, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
	require.NoError(t, err)
	path := filepath.Join(artifactsDir(t), name)
	require.NoError(t, os.WriteFile(path, img, 0o644))
	t.Logf("screenshot: %s", path)
}

// TestBrowserOperator drives the dashboard in headless Chromium the way an
// operator does: refused without the token, logs in, watches a paid call
// appear, opens its timeline, and retries a failed job in River UI.
func TestBrowserOperator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(ctx, t, testToken)

	// The ends of the service's jobs, told by its River client.
	ended, stop := s.River.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	t.Cleanup(stop)
	// A job that fails its only attempt, for River UI to retry.
	ins, err := s.River.Insert(ctx, flakyArgs{Note: "retry me from the dashboard"}, &river.InsertOpts{MaxAttempts: 1, Queue: jobs.QueuePure})
	require.NoError(t, err)
	flakyID := ins.Job.ID
	waitJobState(t, ended, flakyID, rivertype.JobStateDiscarded)

	// Some history for the overview: paid calls, a refused payment, a
	// settlement refused.
	for i := range 3 {
		s.paidCallID(t, fmt.Sprintf("test:0x5eed%02d:seed-%d", i, i))
	}
	resp, body := s.pay(t, "bad:0xmallory:seed-bad", `{"a":"x","b":"y"}`)
	require.Equal(t, http.StatusPaymentRequired, resp.StatusCode, string(body))
	resp, body = s.pay(t, "test:0xbroke01:seed-broke", `{"a":"x","b":"y"}`)
	require.Equal(t, http.StatusPaymentRequired, resp.StatusCode, string(body))

	b := browsertest.New(t)
	page, err := b.Page(proto.TargetCreateTarget{})
	require.NoError(t, err)
	page = page.Timeout(40 * time.Second)
	require.NoError(t, page.SetViewport(&proto.EmulationSetDeviceMetricsOverride{Width: 1280, Height: 900, DeviceScaleFactor: 1}))

	// Without the token: the login form, no data.
	require.NoError(t, page.Navigate(s.URL+"/ops/calls"))
	require.NoError(t, page.WaitLoad())
	info, err := page.Info()
	require.NoError(t, err)
	require.Contains(t, info.URL, "/ops/login?next=%2Fops%2Fcalls")
	html, err := page.HTML()
	require.NoError(t, err)
	require.NotContains(t, html, "0x5eed00")
	require.NoError(t, page.Navigate(s.URL+"/ops/jobs/jobs/"+fmt.Sprint(flakyID)))
	require.NoError(t, page.WaitLoad())
	info, err = page.Info()
	require.NoError(t, err)
	require.Contains(t, info.URL, "/ops/login")

	// A wrong token is refused.
	require.NoError(t, page.Navigate(s.URL+"/ops/calls"))
	require.NoError(t, page.WaitLoad())
	page.MustElement("#token").MustInput("not-the-token")
	wait := page.MustWaitNavigation()
	page.MustElement(`form button[type=submit]`).MustClick()
	wait()
	require.Contains(t, page.MustElement(".problem").MustText(), "Wrong token")

	// Log in: back to the page asked for. (The navigation awaited may be
	// the end of the previous one's load on a busy machine: the page is
	// awaited at its place.)
	page.MustElement("#token").MustInput(testToken)
	wait = page.MustWaitNavigation()
	page.MustElement(`form button[type=submit]`).MustClick()
	wait()
	page.MustWait(`() => location.pathname === "/ops/calls"`)
	info, err = page.Info()
	require.NoError(t, err)
	require.Equal(t, s.URL+"/ops/calls", info.URL)
	require.Equal(t, "Paid calls", page.MustElement("h1").MustText())

	// Pay a call: it appears in the open list without a reload.
	page.MustEval(`() => { window.notReloaded = true }`)
	nonce := fmt.Sprintf("live-%d", time.Now().UnixNano())
	callID := s.paidCallID(t, "test:0xa11ce0000000000000000000000000000000001:"+nonce)
	// The row shows up, and its state moves to paid, refresh after refresh.
	page.MustElementR(fmt.Sprintf(`tr[data-call=%q] .state`, callID), `^paid$`)
	require.Equal(t, true, page.MustEval(`() => window.notReloaded === true`).Bool(), "the list refreshed in place")
	screenshot(t, page, "ops-calls.png")

	// Its timeline, down to the settlement's transaction hash. The list
	// swaps its content at every refresh, so the link is found and clicked
	// in one step of the page's script, where no refresh can come between.
	wait = page.MustWaitNavigation()
	page.MustEval(`sel => document.querySelector(sel).click()`, fmt.Sprintf(`tr[data-call=%q] a`, callID))
	wait()
	require.Equal(t, paytest.TxHash(nonce), page.MustElement("#transaction").MustText())
	require.Equal(t, "0xa11ce0000000000000000000000000000000001", page.MustElement("#payer").MustText())
	require.Equal(t, "eip155:8453", page.MustElement("#network").MustText())
	var types []string
	for _, li := range page.MustElements("ol.timeline li") {
		types = append(types, *li.MustAttribute("data-event"))
	}
	require.Equal(t, []string{
		store.EventCallPaid, store.EventJobSucceeded, store.EventSettlementConfirmed,
	}, types)
	require.Contains(t, page.MustElement("li[data-event='settlement.confirmed']").MustText(), paytest.TxHash(nonce))
	screenshot(t, page, "ops-call-timeline.png")

	// The overview and the index page.
	require.NoError(t, page.Navigate(s.URL+"/ops"))
	require.NoError(t, page.WaitLoad())
	require.Equal(t, "Overview", page.MustElement("h1").MustText())
	require.Equal(t, "5", page.MustElement("#calls-window").MustText())
	require.Equal(t, "0.040000", page.MustElement("#revenue-total").MustText())
	screenshot(t, page, "ops-overview.png")
	require.NoError(t, page.Navigate(s.URL+"/ops/index"))
	require.NoError(t, page.WaitLoad())
	require.Equal(t, "Index", page.MustElement("h1").MustText())
	screenshot(t, page, "ops-index.png")

	// River UI: the failed job, retried from its page.
	require.NoError(t, page.Navigate(fmt.Sprintf("%s/ops/jobs/jobs/%d", s.URL, flakyID)))
	require.NoError(t, page.WaitLoad())
	page.MustElementR("h1, h2, h3, dd, span, div", "flaky")
	page.MustElementR("button", `^\s*Retry\s*$`).MustClick()
	waitJobState(t, ended, flakyID, rivertype.JobStateCompleted)
	job, err := s.River.JobGet(ctx, flakyID)
	require.NoError(t, err)
	require.Equal(t, 2, job.Attempt)
	require.NoError(t, page.Navigate(s.URL+"/ops/jobs/jobs?state=completed"))
	require.NoError(t, page.WaitLoad())
	page.MustElementR("a, span, div", "flaky")
	screenshot(t, page, "ops-jobs.png")
}

// waitJobState waits until ended, the subscription to the ends of the
// service's jobs, tells that job id ended in state want.
func waitJobState(t testing.TB, ended <-chan *river.Event, id int64, want rivertype.JobState) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e := <-ended:
			if e.Job.ID == id && e.Job.State == want {
				return
			}
		case <-timeout:
			t.Fatalf("job %d did not end %s within 20 s", id, want)
		}
	}
}
