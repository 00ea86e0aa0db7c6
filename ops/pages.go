package ops

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// windows are the periods the overview's figures can cover.
var windows = []struct {
	Key string
	D   time.Duration
}{
	{"1h", time.Hour}, {"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}, {"30d", 30 * 24 * time.Hour},
}

// callStates are the states of a call, in the order a call goes through them.
var callStates = []string{store.CallQueued, store.CallRunning, store.CallSettling, store.CallPaid, store.CallFailed, store.CallUnpaid, store.CallLost}

// perMinuteSpan is how many minutes the calls-per-minute chart covers.
const perMinuteSpan = 60

// overview is GET /ops.
func (d *dashboard) overview(c echo.Context) error {
	ctx := c.Request().Context()
	now := d.cfg.Clock.Now()
	win := windows[1]
	for _, w := range windows {
		if c.QueryParam("window") == w.Key {
			win = w
		}
	}
	since := now.Add(-win.D)
	stats, err := store.CallStatsSince(ctx, d.cfg.Pool, since, now, perMinuteSpan)
	if err != nil {
		return err
	}
	queues, err := store.QueueDepthList(ctx, d.cfg.Pool)
	if err != nil {
		return err
	}
	failures, err := store.SettlementFailureList(ctx, d.cfg.Pool, since, 10)
	if err != nil {
		return err
	}
	index, sources, err := d.indexFigures(ctx)
	if err != nil {
		return err
	}

	var relayer []relayerRow
	if d.cfg.Relayer != nil {
		chains, err := d.cfg.Relayer(ctx)
		if err != nil {
			d.cfg.Logger.WarnContext(ctx, "ops: read relayer state", "error", err)
		}
		for _, c := range chains {
			relayer = append(relayer, relayerRow{RelayerChain: c,
				Low: d.cfg.RelayerLowWei != nil && c.BalanceWei != nil && c.BalanceWei.Cmp(d.cfg.RelayerLowWei) < 0})
		}
	}
	finality, err := store.FinalityList(ctx, d.cfg.Pool)
	if err != nil {
		return err
	}
	channels, err := store.ChannelTotalsList(ctx, d.cfg.Pool)
	if err != nil {
		return err
	}
	var total, finished int64
	for state, n := range stats.States {
		total += n
		if store.IsFinal(state) {
			finished += n
		}
	}
	lastMinute := stats.PerMinute[len(stats.PerMinute)-1]
	var hour int64
	for _, n := range stats.PerMinute {
		hour += n
	}
	var retrying int64
	for _, q := range queues {
		if q.Queue == "settlement" {
			retrying = q.Retryable
		}
	}
	return d.render(c, http.StatusOK, "overview", map[string]any{
		"Title":      "Overview",
		"Now":        now,
		"Window":     win.Key,
		"Windows":    windows,
		"Total":      total,
		"States":     stats.States,
		"StateOrder": callStates,
		"InFlight":   stats.States[store.CallQueued] + stats.States[store.CallRunning] + stats.States[store.CallSettling],
		"Success":    rate(stats.States[store.CallPaid], finished),
		"OpFailure":  rate(stats.States[store.CallFailed], finished),
		"SetFailure": rate(stats.States[store.CallUnpaid], finished),
		"LastMinute": lastMinute,
		"HourAvg":    fmt.Sprintf("%.1f", float64(hour)/perMinuteSpan),
		"Chart":      newChart(stats.PerMinute, now),
		"ByOp":       stats.RevenueByOp,
		"ByNetwork":  stats.RevenueByNetwork,
		"RevenueSum": sumRevenue(stats.RevenueByOp),
		"Queues":     queues,
		"Failures":   failures,
		"Unpaid":     stats.States[store.CallUnpaid],
		"Retrying":   retrying,
		"Index":      index,
		"Sources":    sources,
		"Relayer":    relayer,
		"Finality":   finality,
		"Channels":   channels,
	})
}

// relayerRow is a chain of the relayer on the overview, and whether its
// balance is under the warning threshold.
type relayerRow struct {
	RelayerChain
	Low bool
}

// rate formats part/whole as a percentage, or "–" when whole is zero.
func rate(part, whole int64) string {
	if whole == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}

func sumRevenue(rs []store.Revenue) string {
	total := "0"
	for _, r := range rs {
		total = addAtomic(total, r.Amount)
	}
	return total
}

// chart is the calls-per-minute bar chart, drawn as inline SVG.
type chart struct {
	Width, Height int
	Bars          []bar
	Max           int64
}

type bar struct {
	X, Y, W, H int
	N          int64
	Minute     string
}

func newChart(perMinute []int64, now time.Time) chart {
	const w, h, bw = 600, 80, 10
	ch := chart{Width: w, Height: h}
	for _, n := range perMinute {
		ch.Max = max(ch.Max, n)
	}
	start := now.UTC().Truncate(time.Minute).Add(-time.Duration(len(perMinute)-1) * time.Minute)
	for i, n := range perMinute {
		bh := 0
		if ch.Max > 0 {
			bh = int(float64(n) / float64(ch.Max) * (h - 2))
		}
		if n > 0 && bh < 2 {
			bh = 2
		}
		ch.Bars = append(ch.Bars, bar{X: i * bw, Y: h - bh, W: bw - 2, H: bh, N: n,
			Minute: start.Add(time.Duration(i) * time.Minute).Format("15:04")})
	}
	return ch
}

// calls is GET /ops/calls?op=&state=&before=: paid calls, newest first.
func (d *dashboard) calls(c echo.Context) error {
	ctx := c.Request().Context()
	p := &store.CallListParams{Op: c.QueryParam("op"), Limit: 50}
	if s := c.QueryParam("state"); s != "" {
		for _, known := range callStates {
			if s == known {
				p.State = s
			}
		}
	}
	if b := c.QueryParam("before"); b != "" {
		pos, err := parsePosition(b)
		if err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, "before is not a position of this list")
		}
		p.Before = pos
	}
	list, err := store.CallList(ctx, d.cfg.Pool, p)
	if err != nil {
		return err
	}
	ops, err := store.CallOpList(ctx, d.cfg.Pool)
	if err != nil {
		return err
	}
	var next string
	if len(list) == p.Limit {
		last := list[len(list)-1]
		q := url.Values{}
		if p.Op != "" {
			q.Set("op", p.Op)
		}
		if p.State != "" {
			q.Set("state", p.State)
		}
		q.Set("before", formatPosition(last))
		next = "/ops/calls?" + q.Encode()
	}
	return d.render(c, http.StatusOK, "calls", map[string]any{
		"Title":    "Calls",
		"Now":      d.cfg.Clock.Now(),
		"Calls":    list,
		"Ops":      ops,
		"States":   callStates,
		"Op":       p.Op,
		"State":    p.State,
		"Next":     next,
		"Filtered": p.Op != "" || p.State != "" || p.Before != nil,
	})
}

// formatPosition and parsePosition write and read a call's place in the
// list as "<unix microseconds>-<id>".
func formatPosition(c *store.Call) string {
	return strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "-" + c.ID
}

func parsePosition(s string) (*store.CallPosition, error) {
	us, id, ok := strings.Cut(s, "-")
	if !ok {
		return nil, errors.New("no separator")
	}
	n, err := strconv.ParseInt(us, 10, 64)
	if err != nil {
		return nil, err
	}
	return &store.CallPosition{CreatedAt: time.UnixMicro(n), ID: id}, nil
}

// step is one event of a call's timeline, as shown: Label and Kind are
// its registered type's (store.EventType), Class its type's name as a CSS
// class.
type step struct {
	Type   string
	Label  string
	Kind   store.EventKind
	At     time.Time
	Offset string
	Fields []field
	Class  string
}

// newStep shows event e of a call whose payer is payer and whose first
// event was at first.
func newStep(e store.Event, first time.Time, payer string) step {
	s := step{Type: e.Type, At: e.CreatedAt, Offset: "+" + formatDuration(e.CreatedAt.Sub(first)),
		Fields: eventFields(e, payer), Class: strings.ReplaceAll(e.Type, ".", "-")}
	if t, ok := store.EventTypeGet(e.Type); ok {
		s.Label, s.Kind = t.Label, t.Kind
	}
	return s
}

// field is one fact of a step, as shown.
type field struct {
	Name, Value, Link string
	Mono              bool
}

// call is GET /ops/calls/:id: a call and its whole event timeline.
func (d *dashboard) call(c echo.Context) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	call, err := store.CallGetByID(ctx, d.cfg.Pool, id)
	if errors.Is(err, store.ErrNotFound) {
		return d.render(c, http.StatusNotFound, "notfound", map[string]any{"Title": "No such call", "ID": id})
	}
	if err != nil {
		return err
	}
	events, err := store.EventListByStream(ctx, d.cfg.Pool, store.CallStream(id))
	if err != nil {
		return err
	}
	steps := make([]step, 0, len(events))
	for _, e := range events {
		s := newStep(e, events[0].CreatedAt, call.Payer)
		block, ok, err := d.watchedBlock(ctx, e)
		if err != nil {
			return err
		}
		if ok {
			s.Fields = append(s.Fields, field{Name: "block", Value: strconv.FormatUint(block.Number, 10) + " (awaiting finality)"})
		}
		steps = append(steps, s)
	}
	var result string
	if len(call.Result) > 0 {
		var buf bytes.Buffer
		if json.Indent(&buf, call.Result, "", "  ") == nil {
			result = buf.String()
		} else {
			result = string(call.Result)
		}
		const maxShown = 64 << 10
		if len(result) > maxShown {
			result = result[:maxShown] + "\n… (cut)"
		}
	}
	var took string
	if len(events) > 1 {
		took = formatDuration(events[len(events)-1].CreatedAt.Sub(events[0].CreatedAt))
	}
	return d.render(c, http.StatusOK, "call", map[string]any{
		"Title":  "Call " + call.ID,
		"Now":    d.cfg.Clock.Now(),
		"Call":   call,
		"Steps":  steps,
		"Result": result,
		"Took":   took,
	})
}

// watchedBlock returns the block of the transaction that
// settlement.confirmed event e names, when the event leaves it out (its
// transaction's settlement.mined keeps it) and the transaction awaits
// finality (settlement_watch); once final the timeline shows its
// transaction. The events written before keep their block, which
// eventFields shows.
func (d *dashboard) watchedBlock(ctx context.Context, e store.Event) (x402.SettledBlock, bool, error) {
	if e.Type != store.EventSettlementConfirmed {
		return x402.SettledBlock{}, false, nil
	}
	v, err := store.Payload[store.SettlementDone](e)
	if err != nil || v.Block != nil || v.Response.Transaction == "" {
		return x402.SettledBlock{}, false, nil
	}
	block, err := store.WatchBlockGet(ctx, d.cfg.Pool, v.Response.Network, v.Response.Transaction)
	if errors.Is(err, store.ErrNotFound) {
		return x402.SettledBlock{}, false, nil
	}
	return block, err == nil, err
}

// eventFields picks what an operator needs from an event's data: what its
// registered type shows of it (store.EventType.Fields), else its data as
// it is. payer is the call's, which a settlement's event leaves out.
func eventFields(e store.Event, payer string) []field {
	if t, ok := store.EventTypeGet(e.Type); ok {
		if fs, err := t.Fields(e); err == nil {
			shown := make([]field, len(fs))
			for i, f := range fs {
				shown[i] = showField(f, payer)
			}
			return shown
		}
	}
	if e.Bin != nil {
		return []field{{Name: "data", Value: fmt.Sprintf("%d bytes, binary", len(e.Bin)), Mono: true}}
	}
	return []field{{Name: "data", Value: string(e.Data), Mono: true}}
}

// showField lays out f as its kind says: a job linked to its page, an
// amount in USDC, the call's payer in place of one the event leaves out.
func showField(f store.EventField, payer string) field {
	shown := field{Name: f.Name, Value: f.Value}
	switch f.Kind {
	case store.FieldMono:
		shown.Mono = true
	case store.FieldJob:
		shown.Link = fmt.Sprintf("%s/jobs/%s", JobsPrefix, f.Value)
	case store.FieldAmount:
		shown.Value = usdc(f.Value) + " USDC"
	case store.FieldPayer:
		shown.Value, shown.Mono = cmp.Or(f.Value, payer), true
	}
	return shown
}

// index is GET /ops/index: the crawl's sources and the hosts' liveness.
func (d *dashboard) index(c echo.Context) error {
	ctx := c.Request().Context()
	figures, sources, err := d.indexFigures(ctx)
	if err != nil {
		return err
	}
	return d.render(c, http.StatusOK, "index", map[string]any{
		"Title":   "Index",
		"Now":     d.cfg.Clock.Now(),
		"Index":   figures,
		"Sources": sources,
	})
}

// indexFigures returns the index's figures and its crawl's sources as a
// table, both nil when the index has none (it does not run).
func (d *dashboard) indexFigures(ctx context.Context) (*store.IndexFigures, *table, error) {
	figures, err := store.IndexFiguresGet(ctx, d.cfg.Pool)
	if err != nil || figures == nil {
		return nil, nil, err
	}
	rows, err := store.IndexSourceList(ctx, d.cfg.Pool)
	if err != nil {
		return nil, nil, err
	}
	sources, err := newTable(rows)
	if err != nil {
		return nil, nil, err
	}
	return figures, sources, nil
}

// table is rows of JSON objects laid out as columns, in the order the
// columns first appear.
type table struct {
	Columns []string
	Rows    [][]string
}

func newTable(objects []json.RawMessage) (*table, error) {
	t := &table{}
	seen := map[string]int{}
	var rows []map[string]string
	for _, obj := range objects {
		dec := json.NewDecoder(bytes.NewReader(obj))
		dec.UseNumber()
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return nil, fmt.Errorf("ops: table row is not an object: %s", obj)
		}
		row := map[string]string{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, fmt.Errorf("ops: table row: %w", err)
			}
			key, _ := tok.(string)
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, fmt.Errorf("ops: table row: %w", err)
			}
			if _, ok := seen[key]; !ok {
				seen[key] = len(t.Columns)
				t.Columns = append(t.Columns, key)
			}
			row[key] = cellText(raw)
		}
		rows = append(rows, row)
	}
	for _, r := range rows {
		cells := make([]string, len(t.Columns))
		for i, col := range t.Columns {
			cells[i] = r[col]
		}
		t.Rows = append(t.Rows, cells)
	}
	return t, nil
}

// cellText shows a JSON value: strings bare, null as a dash, the rest as
// JSON.
func cellText(raw json.RawMessage) string {
	if string(raw) == "null" {
		return "—"
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
