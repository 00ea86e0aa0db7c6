package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// projector turns an event into the projection statement it implies. It
// returns the statement and whether it must touch exactly one row (a state
// move that is refused when the row is not in an allowed state). data is
// the event's JSON, {} for an event kept in its binary form: a projector
// of such an event reads e.Data.
// rows gathers the row statements of consecutive events (projection.row).
type projector func(b *pgx.Batch, rows *projectedRows, e *NewEvent, data []byte, now time.Time) (mustTouch bool, err error)

// projectorFor returns the projection that events of a stream kind update.
func projectorFor(kind string) (projector, bool) {
	switch kind {
	case "call", "chain", "channel":
		return projectRegistered, true
	case "host":
		return projectHost, true
	case "crawl":
		return projectCrawl, true
	}
	return nil, false
}

// receiptOf is the packed settlement response a settled call's row keeps
// (x402.SettleResponse.MarshalLedgerBinary), from the statement's
// arguments $2 (packed for the response's own network, $4, which the row's
// network column then states) and $5 (packed stating it, for a row of
// another network).
const receiptOf = "CASE WHEN network = $4 THEN $2::bytea ELSE $5::bytea END"

// projection is what an event's projection statements are made from: the
// batch they are queued in, the event's stream without its kind (the
// call's id, the network), its type, its JSON data ({} for an event kept
// in its binary form, whose projection reads its payload) and the time of
// its Append, and the rows gathered for a statement of several events
// (row).
type projection struct {
	b    *pgx.Batch
	rows *projectedRows
	id   string
	typ  string
	data []byte
	now  time.Time
}

// row has the event's row written by sql, a statement that writes one row
// for each element of its arrays $1 to $n, of the columns cols (each a
// string or a []byte), its $n+1 the time of the Append: with the rows of
// the events next to it that are written by the same statement, by one
// statement, which must touch each of its rows (projectedRows). Without
// rows it queues sql for this row alone.
func (p projection) row(sql string, cols ...any) (bool, error) {
	if p.rows == nil {
		r := &projectedRows{b: p.b, checks: new([]appendCheck), now: p.now}
		if err := r.add(sql, cols); err != nil {
			return false, err
		}
		r.flush()
		return true, nil
	}
	return true, p.rows.add(sql, cols)
}

// projectedRows gathers the rows that the projections of consecutive
// events write with one statement (projection.row), and queues that
// statement once for all of them, with arrays of their columns: when an
// event of another type comes, or one of a stream already gathered, or at
// the end of the Append. A paid call's projections each write its own
// row: statement by statement they cost Postgres about as much again as
// the rows themselves (issue 43).
type projectedRows struct {
	b      *pgx.Batch
	checks *[]appendCheck
	now    time.Time
	// cur is the event being projected (next).
	cur *NewEvent
	// sql, cols and first are the statement gathered, its columns (a
	// []string or a [][]byte each) and its first event; streams holds the
	// events' streams.
	sql     string
	cols    []any
	first   *NewEvent
	streams map[string]bool
	// paid is, while a job.succeeded is projected, the settlement of its
	// call that the same Append records (paidAtOnce), or nil.
	paid *SettlementDone
}

// next tells r that e is projected next: the rows gathered are queued
// first unless e may join them.
func (r *projectedRows) next(e *NewEvent) {
	if r.sql != "" && (r.first == nil || e.Type != r.first.Type || r.streams[e.Stream]) {
		r.flush()
	}
	r.cur = e
}

// add gathers a row of sql, the current event's.
func (r *projectedRows) add(sql string, cols []any) error {
	if r.sql != "" && sql != r.sql {
		r.flush()
	}
	if r.sql == "" {
		r.sql, r.first, r.cols = sql, r.cur, make([]any, len(cols))
		if r.streams == nil {
			r.streams = map[string]bool{}
		}
	}
	for i, v := range cols {
		switch v := v.(type) {
		case string:
			c, _ := r.cols[i].([]string)
			r.cols[i] = append(c, v)
		case []byte:
			c, _ := r.cols[i].([][]byte)
			r.cols[i] = append(c, v)
		default:
			return fmt.Errorf("project a row: column %d is a %T", i+1, v)
		}
	}
	if r.cur != nil {
		r.streams[r.cur.Stream] = true
	}
	return nil
}

// flush queues the statement gathered, if any.
func (r *projectedRows) flush() {
	if r.sql == "" {
		return
	}
	n := 0
	switch c := r.cols[0].(type) {
	case []string:
		n = len(c)
	case [][]byte:
		n = len(c)
	}
	r.b.Queue(r.sql, append(r.cols, r.now)...)
	ev := r.first
	if ev == nil {
		ev = &NewEvent{}
	}
	*r.checks = append(*r.checks, appendCheck{mustTouch: true, rows: n, event: ev})
	r.sql, r.cols, r.first = "", nil, nil
	clear(r.streams)
}

// projectCallPaid creates the calls row of call.paid. The payment, the
// payer and the request's hash stay in the event (callPaid reads them);
// the replay key is kept as its digest.
func projectCallPaid(p projection, v PaidCall) (bool, error) {
	return p.row(`INSERT INTO calls (id, op, state, token, request_hash, payment_key, network, payer, amount, created_at, updated_at)
		SELECT id, op, state, token, '', key, network, '', amount, $8, $8
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[]) AS u(id, op, state, token, key, network, amount)`,
		p.id, v.Op, CallQueued, v.Token, PaymentDigest(v.Payment.Key()), v.Payment.Network, v.Payment.Amount)
}

// projectPaymentVerified creates the calls row of payment.verified. The
// payment itself stays in the event (callPaid reads it).
func projectPaymentVerified(p projection, v PaymentVerified) (bool, error) {
	p.b.Queue(`INSERT INTO calls (id, op, state, token, request_hash, payment_key, network, payer, amount, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)`,
		p.id, v.Op, CallQueued, v.Token, v.RequestHash, v.Payment.Key(), v.Payment.Network, v.Payment.Payer, v.Payment.Amount, p.now)
	return true, nil
}

// projectPaymentIdentified binds the payer's payment identifier to the
// call; the primary key refuses a second call under it.
func projectPaymentIdentified(p projection, v PaymentIdentified) (bool, error) {
	p.b.Queue("INSERT INTO payment_ids (key, call_id, created_at) VALUES ($1, $2, $3)", PaymentIDKey(v.Payer, v.ID), p.id, p.now)
	return true, nil
}

func projectJobQueued(p projection, _ JobQueued) (bool, error) {
	p.b.Queue("UPDATE calls SET updated_at = $2 WHERE id = $1 AND state = 'queued'", p.id, p.now)
	return true, nil
}

func projectJobStarted(p projection, _ JobStarted) (bool, error) {
	p.b.Queue("UPDATE calls SET state = 'running', updated_at = $2 WHERE id = $1 AND state IN ('queued', 'running')", p.id, p.now)
	return true, nil
}

// projectJobSucceeded keeps the result in the row with its bytes (a json
// column): key order and spacing are the operation's, and nothing is
// re-parsed to serve it. The call's id and op, which its columns state,
// are left out (callResult puts them back).
func projectJobSucceeded(p projection, v JobSucceeded) (bool, error) {
	result, err := rowResult(v.Result, p.id, v.Op, v.Form1)
	if err != nil {
		return false, err
	}
	if p.rows != nil && p.rows.paid != nil {
		// Settled in the same Append: paid at once, with the receipt
		// projectSettlementDone would write.
		r := &p.rows.paid.Response
		return p.row(`UPDATE calls c SET state = 'paid', result = u.result::json,
				receipt = CASE WHEN c.network = u.network THEN u.own ELSE u.stated END, updated_at = $6
			FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::bytea[]) AS u(id, result, own, network, stated)
			WHERE c.id = u.id AND c.state IN ('queued', 'running')`,
			p.id, string(result), r.MarshalLedgerBinary(r.Network), r.Network, r.MarshalLedgerBinary(""))
	}
	return p.row(`UPDATE calls c SET state = 'settling', result = u.result::json, updated_at = $3
		FROM unnest($1::text[], $2::text[]) AS u(id, result) WHERE c.id = u.id AND c.state IN ('queued', 'running')`, p.id, string(result))
}

func projectJobFailed(p projection, _ JobFailed) (bool, error) {
	releaseChannelOf(p)
	p.b.Queue("UPDATE calls SET state = 'failed', failure = $2, updated_at = $3 WHERE id = $1 AND state IN ('queued', 'running')", p.id, p.data, p.now)
	return true, nil
}

func projectSettlementSubmitted(p projection, _ SettlementSubmitted) (bool, error) {
	p.b.Queue("UPDATE calls SET updated_at = $2 WHERE id = $1 AND state = 'settling'", p.id, p.now)
	return true, nil
}

// projectSettlementDone ends the call of settlement.confirmed or
// settlement.failed. The row keeps the response whole (the event leaves
// out its payer): it is what the call is answered with. A settled call's
// is packed (receipt); a refused one's is the settlement column's JSON
// object, whose reason /ops lists.
func projectSettlementDone(p projection, v SettlementDone) (bool, error) {
	if p.typ == EventSettlementConfirmed && !v.Form1 {
		return p.row(`UPDATE calls c SET state = 'paid', receipt = CASE WHEN c.network = u.network THEN u.own ELSE u.stated END, updated_at = $5
			FROM unnest($1::text[], $2::bytea[], $3::text[], $4::bytea[]) AS u(id, own, network, stated) WHERE c.id = u.id AND c.state = 'settling'`,
			p.id, v.Response.MarshalLedgerBinary(v.Response.Network), v.Response.Network, v.Response.MarshalLedgerBinary(""))
	}
	response, err := json.Marshal(v.Response)
	if err != nil {
		return false, fmt.Errorf("marshal settlement: %w", err)
	}
	state := CallPaid
	if p.typ == EventSettlementFailed {
		state = CallUnpaid
		releaseChannelOf(p)
	}
	p.b.Queue("UPDATE calls SET state = $2, settlement = $3::jsonb, updated_at = $4 WHERE id = $1 AND state = 'settling'", p.id, state, response, p.now)
	return true, nil
}

func projectSettlementResent(p projection, v SettlementResent) (bool, error) {
	if !v.Form1 {
		p.b.Queue("UPDATE calls SET receipt = "+receiptOf+", settlement = NULL, updated_at = $3 WHERE id = $1 AND state = 'paid'",
			p.id, v.Response.MarshalLedgerBinary(v.Response.Network), p.now, v.Response.Network, v.Response.MarshalLedgerBinary(""))
		return true, nil
	}
	p.b.Queue("UPDATE calls SET settlement = $2::jsonb->'response', updated_at = $3 WHERE id = $1 AND state = 'paid'", p.id, p.data, p.now)
	return true, nil
}

// projectSettlementLost adds the loss to its network's and ends the call:
// a paid call whose settlement a reorganisation undid, or a call still
// settling whose settlement jobs were exhausted and whose authorization
// the chain shows used by no transfer found (worker's reconciliation). Its
// result is released either way.
func projectSettlementLost(p projection, v SettlementLost) (bool, error) {
	releaseChannelOf(p)
	p.b.Queue(`INSERT INTO settlement_losses AS l (network, calls, amount) VALUES ($1, 1, $2::numeric)
		ON CONFLICT (network) DO UPDATE SET calls = l.calls + 1, amount = l.amount + EXCLUDED.amount`, v.Network, v.Amount)
	p.b.Queue("UPDATE calls SET state = 'lost', updated_at = $2 WHERE id = $1 AND state IN ('paid', 'settling')", p.id, p.now)
	return true, nil
}

// projectSettlementMined creates its transaction's row of
// settlement_watch, or adds its calls to the row another settlement.mined
// of the transaction created (the row keeps that one's block: a
// reorganisation moves it, WatchMove).
func projectSettlementMined(p projection, v SettlementMined) (bool, error) {
	p.b.Queue(`INSERT INTO settlement_watch AS s (network, tx_hash, block, block_hash, calls, amount)
		SELECT $1, $2, $3, $4, coalesce(array_agg(c.id ORDER BY c.id), '{}'), coalesce(sum(c.amount::numeric), 0)
		FROM calls c WHERE c.id = ANY($5::text[])
		ON CONFLICT (network, tx_hash) DO UPDATE SET calls = s.calls || EXCLUDED.calls, amount = s.amount + EXCLUDED.amount`,
		p.id, v.Transaction, int64(v.Block.Number), v.Block.Hash, v.Calls)
	return false, nil
}

// projectSettlementFinal changes nothing: WatchFinal deletes the rows of
// settlement_watch it names as it records it.
func projectSettlementFinal(projection, SettlementFinal) (bool, error) { return false, nil }

// supersededCall reports whether the projection of a call event of type typ
// adds nothing when the event before it on the call, in the same Append, is
// prev and the one after it is next ("" for none): job.queued and
// settlement.submitted only set updated_at, which the event before them
// (payment.verified's insert, job.succeeded's update) just set; job.started
// and settlement.submitted are followed by an outcome that accepts the call
// in the same states and moves it further. Leaving these out saves a statement
// in each of a paid call's three transactions.
func supersededCall(typ, prev, next string) bool {
	switch typ {
	case EventJobQueued:
		return prev == EventPaymentVerified
	case EventJobStarted:
		return next == EventJobSucceeded || next == EventJobFailed
	case EventSettlementSubmitted:
		return prev == EventJobSucceeded || next == EventSettlementConfirmed || next == EventSettlementFailed
	}
	return false
}
