package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// emptyData is the JSON data of an event kept in its binary form: data
// stays NOT NULL, and a release that does not read bin sees an empty
// object (blank fields) rather than a NULL it cannot decode.
const emptyData = "{}"

// NotifyChannel is the Postgres channel Append notifies on. The payload is
// the stream, a tab, and the event type.
const NotifyChannel = "x402d_events"

// Event is one entry of the event log.
type Event struct {
	// ID orders events; it only grows.
	ID int64 `json:"id"`
	// Stream names what the event is about: "call/<id>", "host/<name>",
	// "crawl/<source>", "chain/<network>".
	Stream string `json:"stream"`
	// Type is what happened, e.g. "payment.verified".
	Type string `json:"type"`
	// Data is the event's payload as JSON: {} when it is kept in its
	// binary form (Bin). Decode reads either.
	Data json.RawMessage `json:"data"`
	// Bin is the payload's binary form (BinaryData), when it was written
	// in one (migration 017), and nil otherwise.
	Bin []byte `json:"bin,omitempty"`
	// CreatedAt is when the event was appended (its transaction's time).
	CreatedAt time.Time `json:"created_at"`
}

// BinaryData is event data with a binary form, which Append keeps in the
// event's bin column (data is then {}): bytes in place of a base64 string
// inside jsonb. ok is false for a value that has none; it is then
// marshalled to JSON. The type's BinaryDataUnmarshaler reads the form back
// (Event.Decode).
type BinaryData interface {
	MarshalEventBinary() (b []byte, ok bool)
}

// BinaryDataUnmarshaler decodes what BinaryData.MarshalEventBinary wrote.
type BinaryDataUnmarshaler interface {
	UnmarshalEventBinary(b []byte) error
}

// Decode decodes the event's payload into v: its binary form when it has
// one (v must then be a BinaryDataUnmarshaler), its JSON otherwise.
func (e *Event) Decode(v any) error {
	if e.Bin == nil {
		return json.Unmarshal(e.Data, v)
	}
	u, ok := v.(BinaryDataUnmarshaler)
	if !ok {
		return fmt.Errorf("event %d %s: binary data, and %T does not decode it", e.ID, e.Type, v)
	}
	return u.UnmarshalEventBinary(e.Bin)
}

// NewEvent is an event to append. Data is marshalled to JSON, or kept in
// its binary form when it has one (BinaryData).
type NewEvent struct {
	Stream string
	Type   string
	Data   any
}

// Notifies reports whether appending an event of type typ to stream sends a
// NOTIFY: only the events that end a call or a channel's refund, the ones
// a waiting request is woken for. Postgres serialises the commits of every transaction that sent a
// NOTIFY on one lock, held through the commit's WAL flush, so notifying the
// other events (five per paid call, and every crawl page) would cap paid
// calls at that lock (docs/performance.md, Tuning choices); the other
// events are read when needed, never awaited.
func Notifies(stream, typ string) bool {
	kind, _, _ := strings.Cut(stream, "/")
	return kind == "call" && IsFinalEvent(typ) || kind == "channel" && isRefundOutcome(typ)
}

// Append appends events in the caller's transaction tx: it inserts them (in
// one statement), applies each to its projection and sends NOTIFY for those
// that Notifies names, in one round trip. A projection that the events next
// to it on the same stream leave as it would (superseded) is not written.
// The projections that write a row other transactions' events write too
// are applied first, in one order (projectionOrder), so that two Appends
// cannot deadlock on them.
// It returns ErrConflict when an event does not fit its projection's state;
// the caller should then roll back.
func Append(ctx context.Context, tx pgx.Tx, events ...NewEvent) error {
	if len(events) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	checks := make([]appendCheck, 0, len(events)+2)
	now := time.Now().UTC()
	streams := make([]string, len(events))
	types := make([]string, len(events))
	datas := make([][]byte, len(events))
	// bins[i] is nil (NULL) for an event kept as JSON.
	bins := make([][]byte, len(events))
	for i := range events {
		e := &events[i]
		streams[i], types[i] = e.Stream, e.Type
		var err error
		if datas[i], bins[i], err = encodeData(e.Data); err != nil {
			return fmt.Errorf("append %s %s: %w", e.Stream, e.Type, err)
		}
	}
	if len(events) == 1 {
		b.Queue("INSERT INTO events (stream, type, data, bin, created_at) VALUES ($1, $2, $3, $4, $5)", streams[0], types[0], datas[0], bins[0], now)
	} else {
		b.Queue(`INSERT INTO events (stream, type, data, bin, created_at)
			SELECT s, t, d, x, $5 FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::bytea[]) WITH ORDINALITY AS u(s, t, d, x, n) ORDER BY n`,
			streams, types, datas, bins, now)
	}
	checks = append(checks, appendCheck{event: &events[0]})
	rows := &projectedRows{b: b, checks: &checks, now: now}
	paid := paidAtOnce(events)
	var notify []string
	var notified *NewEvent
	for _, i := range projectionOrder(events) {
		e := &events[i]
		kind, _, _ := strings.Cut(e.Stream, "/")
		_, paidBefore := paid.confirmed[i]
		if project, ok := projectorFor(kind); ok && !superseded(events, i) && !paidBefore {
			rows.next(e)
			rows.paid = paid.succeeded[i]
			before := b.Len()
			mustTouch, err := project(b, rows, e, datas[i], now)
			rows.paid = nil
			if err != nil {
				return fmt.Errorf("append %s %s: %w", e.Stream, e.Type, err)
			}
			// A projector may queue several statements; mustTouch is about
			// its last one.
			for j := before; j < b.Len(); j++ {
				checks = append(checks, appendCheck{mustTouch: mustTouch && j == b.Len()-1, rows: 1, event: e})
			}
		}
		if Notifies(e.Stream, e.Type) {
			notify = append(notify, e.Stream+"\t"+e.Type)
			notified = cmp.Or(notified, e)
		}
	}
	rows.flush()
	// The notifications are sent at commit, wherever they are queued:
	// one statement sends them all.
	switch len(notify) {
	case 0:
	case 1:
		b.Queue("SELECT pg_notify($1, $2)", NotifyChannel, notify[0])
		checks = append(checks, appendCheck{event: notified})
	default:
		b.Queue("SELECT pg_notify($1, n) FROM unnest($2::text[]) AS u(n)", NotifyChannel, notify)
		checks = append(checks, appendCheck{event: notified})
	}
	results := tx.SendBatch(ctx, b)
	for _, c := range checks {
		tag, err := results.Exec()
		if err != nil {
			_ = results.Close()
			return fmt.Errorf("append %s %s: %w", c.event.Stream, c.event.Type, interpretError(err))
		}
		if c.mustTouch && tag.RowsAffected() != int64(c.rows) {
			_ = results.Close()
			return fmt.Errorf("append %s %s: %w", c.event.Stream, c.event.Type, ErrConflict)
		}
	}
	if err := results.Close(); err != nil {
		return fmt.Errorf("append: %w", interpretError(err))
	}
	return nil
}

// appendCheck is what Append expects of one statement it queued: when
// mustTouch, that it touches rows rows. event names the statement's event
// (the first of a row statement's) in an error.
type appendCheck struct {
	mustTouch bool
	rows      int
	event     *NewEvent
}

// projectionOrder returns the order in which Append applies the
// projections of events: first those that write a row shared with other
// transactions' events (sharedRow), sorted by that row's key, then the
// others in their order. Two workers recording calls of the same
// settlement transactions each write those transactions' rows of
// settlement_watch (settlement.mined) before their calls' rows; in the
// order each met them, one could hold a row the other waits for while
// waiting for one the other holds (SQLSTATE 40P01). The events themselves
// keep their order in the log, and the events of one stream their order
// among its projections. WatchFinal deletes rows in the same order.
func projectionOrder(events []NewEvent) []int {
	order := make([]int, len(events))
	shared := 0
	for i := range events {
		order[i] = i
		if _, ok := sharedRow(&events[i]); ok {
			shared++
		}
	}
	if shared < 2 && (shared == 0 || isShared(&events[0])) {
		return order
	}
	slices.SortStableFunc(order, func(i, j int) int {
		ki, iok := sharedRow(&events[i])
		kj, jok := sharedRow(&events[j])
		switch {
		case iok && jok:
			return strings.Compare(ki, kj)
		case iok:
			return -1
		case jok:
			return 1
		}
		return 0
	})
	return order
}

// isShared reports whether e's projection writes a row shared with other
// transactions' events (sharedRow).
func isShared(e *NewEvent) bool {
	_, ok := sharedRow(e)
	return ok
}

// sharedRow returns the key of the row e's projection writes that events
// appended by other transactions write too, in the byte order of which
// they are locked: a settlement transaction's row of settlement_watch,
// written by the settlement.mined of every group of its calls, keyed by
// the network's stream and the transaction's hash. ok is false for an
// event whose projection writes only its own call's rows.
func sharedRow(e *NewEvent) (key string, ok bool) {
	if e.Type != EventSettlementMined {
		return "", false
	}
	m, ok := e.Data.(SettlementMined)
	if !ok {
		return "", false
	}
	return e.Stream + "\x00" + m.Transaction, true
}

// encodeData returns the columns of an event's payload v: its binary form
// in bin (data then emptyData) when it has one (BinaryData), else its JSON
// in data (bin nil).
func encodeData(v any) (data, bin []byte, err error) {
	if b, ok := v.(BinaryData); ok {
		if bin, ok := b.MarshalEventBinary(); ok {
			return []byte(emptyData), bin, nil
		}
	}
	if m, ok := v.(validJSON); ok {
		data, err = m.MarshalJSON()
	} else {
		data, err = json.Marshal(v)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("marshal: %w", err)
	}
	return data, nil, nil
}

// validJSON is event data whose MarshalJSON returns what json.Marshal
// made of a value of its own (valid JSON, compact, HTML escaped), which
// encodeData takes as it is: json.Marshal of the data would scan those
// bytes again, to validate and compact them, and copy them (a voucher's
// settlement.confirmed carries its channel's state). TestEncodeData checks
// that the bytes are json.Marshal's.
type validJSON interface {
	json.Marshaler
	// validJSON marks the type.
	validJSON()
}

// paidPairs are the calls whose result and settlement one Append records
// together (a voucher's charge is settled with the result, in the
// results transaction): their job.succeeded and their settlement.confirmed
// (packed) are projected as one update of the calls row, the call moved
// from running to paid at once, not through settling (projectJobSucceeded
// with projectedRows.paid). succeeded maps the index of such a
// job.succeeded to its settlement; confirmed holds the index of such a
// settlement.confirmed, whose projection is then left out.
type paidPairs struct {
	succeeded map[int]*SettlementDone
	confirmed map[int]bool
}

// paidAtOnce returns the pairs of events (paidPairs): a job.succeeded and
// a later settlement.confirmed in ledger form 2 of the same call, with no
// other event of the call between them.
func paidAtOnce(events []NewEvent) paidPairs {
	var p paidPairs
	var last map[string]int
	for j := range events {
		e := &events[j]
		if !strings.HasPrefix(e.Stream, "call/") {
			continue
		}
		if e.Type == EventSettlementConfirmed {
			i, ok := last[e.Stream]
			done, isDone := e.Data.(SettlementDone)
			if ok && i >= 0 && isDone && !done.Form1 && events[i].Type == EventJobSucceeded {
				if p.succeeded == nil {
					p.succeeded, p.confirmed = map[int]*SettlementDone{}, map[int]bool{}
				}
				p.succeeded[i], p.confirmed[j] = &done, true
			}
		}
		if last == nil {
			last = map[string]int{}
		}
		if e.Type == EventJobSucceeded {
			if _, ok := e.Data.(JobSucceeded); ok {
				last[e.Stream] = j
				continue
			}
		}
		last[e.Stream] = -1
	}
	return p
}

// superseded reports whether the projection of events[i] can be left out:
// the events just before or after it on the same stream, in the same
// Append, leave the projection as it would. Only call events have such
// pairs (supersededCall).
func superseded(events []NewEvent, i int) bool {
	e := &events[i]
	if kind, _, _ := strings.Cut(e.Stream, "/"); kind != "call" {
		return false
	}
	var prev, next string
	if i > 0 && events[i-1].Stream == e.Stream {
		prev = events[i-1].Type
	}
	if i+1 < len(events) && events[i+1].Stream == e.Stream {
		next = events[i+1].Type
	}
	return supersededCall(e.Type, prev, next)
}

// EventColumns are the event log's columns, in the order ScanEvent reads
// them: what a reader of whole events (an archive, a partition's rewrite)
// selects or copies.
const EventColumns = "id, stream, type, data, bin, created_at"

// ScanEvent reads an event from row, whose columns are EventColumns.
func ScanEvent(row pgx.Row) (Event, error) {
	var e Event
	err := row.Scan(&e.ID, &e.Stream, &e.Type, &e.Data, &e.Bin, &e.CreatedAt)
	return e, err
}

// EventListByStream returns the events of stream in order, each with its
// JSON data and its binary form when it has one (Event.Decode reads both).
func EventListByStream(ctx context.Context, db DBTX, stream string) ([]Event, error) {
	rows, err := db.Query(ctx, "SELECT "+EventColumns+" FROM events WHERE stream = $1 ORDER BY id", stream)
	if err != nil {
		return nil, fmt.Errorf("list events of %s: %w", stream, err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return ScanEvent(row) })
	if err != nil {
		return nil, fmt.Errorf("list events of %s: %w", stream, err)
	}
	return events, nil
}
