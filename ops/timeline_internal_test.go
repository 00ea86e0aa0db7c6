package ops

import (
	"bytes"
	"encoding/json"
	"html"
	"html/template"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// TestTimelineEveryEventType: the call page's timeline shows every event
// type the store registers for a call's stream by its registered fields,
// label and kind (never the raw data it falls back to), each field laid
// out as its kind says; an event of a type the registry does not know
// shows its data as it is.
func TestTimelineEveryEventType(t *testing.T) {
	t.Parallel()
	const payer = "0xa11ce00000000000000000000000000000000001"
	tx := "0x" + strings.Repeat("0f", 32)
	payment := x402.Payment{Network: "eip155:8453", Payer: payer, Nonce: "0x6e6f6e6365", Amount: "10000",
		Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", Payload: json.RawMessage(`{}`)}
	verified := store.PaymentVerified{Op: "diff", Token: "secret-poll-token", RequestHash: []byte{1}, Payment: payment}
	cases := map[string]struct {
		data any
		// want is what the step shows, beside the type's label.
		want []string
	}{
		store.EventCallPaid: {store.PaidCall{PaymentVerified: verified, JobID: 41},
			[]string{"<dt>op</dt><dd>diff</dd>", `<dd class="mono">` + payer, "0.010000 USDC", "0x6e6f6e6365", `href="/ops/jobs/jobs/41"`}},
		store.EventPaymentVerified: {verified, []string{"<dt>op</dt><dd>diff</dd>", "0.010000 USDC", "0x6e6f6e6365"}},
		store.EventPaymentIdentified: {store.PaymentIdentified{Payer: payer, ID: "pay_01HZX9K2M3N4P5Q6"},
			[]string{`<dt>payment id</dt><dd class="mono">pay_01HZX9K2M3N4P5Q6</dd>`}},
		store.EventJobQueued:  {store.JobQueued{JobID: 42, Queue: "pure"}, []string{`href="/ops/jobs/jobs/42"`, "<dd>pure</dd>"}},
		store.EventJobStarted: {store.JobStarted{JobID: 43, Attempt: 2}, []string{`href="/ops/jobs/jobs/43"`, "<dt>attempt</dt><dd>2</dd>"}},
		store.EventJobSucceeded: {store.JobSucceeded{JobID: 44, Result: json.RawMessage(`{"call_id":"c","op":"diff"}`), Attempt: 1, SettleJobID: 45},
			[]string{`href="/ops/jobs/jobs/44"`, "27 bytes", `<dt>settlement job</dt><dd><a href="/ops/jobs/jobs/45">45</a>`}},
		store.EventJobFailed: {store.JobFailed{JobID: 46, Error: "bad_input", Message: "no such pattern"},
			[]string{`href="/ops/jobs/jobs/46"`, "<dd>bad_input</dd>", "<dd>no such pattern</dd>"}},
		store.EventSettlementSubmitted: {store.SettlementSubmitted{JobID: 47, Network: "eip155:8453", Attempt: 3},
			[]string{`href="/ops/jobs/jobs/47"`, "<dt>attempt</dt><dd>3</dd>"}},
		store.EventSettlementConfirmed: {store.SettlementDone{Response: x402.SettleResponse{Success: true, Payer: payer, Transaction: tx, Network: "eip155:8453"}},
			[]string{tx, `<dt>payer</dt><dd class="mono">` + payer + "</dd>"}},
		store.EventSettlementFailed: {store.SettlementDone{Response: x402.SettleResponse{ErrorReason: "insufficient_funds", Network: "eip155:8453"}},
			[]string{"<dd>insufficient_funds</dd>", `<dt>payer</dt><dd class="mono">` + payer + "</dd>"}},
		store.EventSettlementResent: {store.SettlementResent{Previous: "0xundone", Response: x402.SettleResponse{Success: true, Transaction: tx, Network: "eip155:8453"},
			Block: &x402.SettledBlock{Number: 4711}}, []string{"0xundone", tx, "<dt>block</dt><dd>4711</dd>"}},
		store.EventSettlementLost: {store.SettlementLost{Network: "eip155:8453", Amount: "10000", Reason: "authorization expired"},
			[]string{"settlement jobs exhausted", "<dt>amount lost</dt><dd>0.010000 USDC</dd>", "authorization expired"}},
	}
	pages, err := parsePages()
	require.NoError(t, err)
	first := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	shown := 0
	for _, typ := range store.EventTypeList() {
		if typ.Stream != "call" {
			continue
		}
		shown++
		t.Run(typ.Name, func(t *testing.T) {
			tc, ok := cases[typ.Name]
			require.True(t, ok, "no event of %s here", typ.Name)
			data, err := json.Marshal(tc.data)
			require.NoError(t, err)
			e := store.Event{ID: 1, Stream: "call/c", Type: typ.Name, Data: data, CreatedAt: first.Add(time.Second)}
			page := renderSteps(t, pages, newStep(e, first, payer))
			require.Contains(t, page, `data-event="`+typ.Name+`"`)
			require.Contains(t, page, `title="`+html.EscapeString(typ.Label)+`"`)
			require.Contains(t, page, "&#43;1.00 s")
			if typ.Kind != store.EventKindProgress {
				require.Contains(t, page, "ev-"+string(typ.Kind)+`"`)
			}
			require.NotContains(t, page, "<dt>data</dt>", "the raw data is not shown")
			require.NotContains(t, page, "secret-poll-token")
			for _, want := range tc.want {
				require.Contains(t, page, want)
			}
		})
	}
	require.Equal(t, len(cases), shown, "an event here for every registered type of a call's stream, and no other")

	unknown := store.Event{Type: "call.unknown", Data: json.RawMessage(`{"x":1}`), CreatedAt: first}
	page := renderSteps(t, pages, newStep(unknown, first, payer))
	require.Contains(t, page, "<dt>data</dt>")
	require.Contains(t, page, html.EscapeString(`{"x":1}`))
}

// renderSteps renders the call page with steps, and returns its timeline.
func renderSteps(t *testing.T, pages map[string]*template.Template, steps ...step) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, pages["call"].ExecuteTemplate(&buf, "layout", map[string]any{
		"Title": "Call c", "Page": "call", "Call": &store.Call{ID: "c", Op: "diff", State: store.CallPaid, Amount: "10000"}, "Steps": steps,
	}))
	page := buf.String()
	i := strings.Index(page, `<ol class="timeline">`)
	require.GreaterOrEqual(t, i, 0)
	return page[i:]
}
