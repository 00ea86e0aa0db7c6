package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/x402d/x402d/x402"
)

// Call states, the projection of a call's events.
const (
	// CallQueued: the payment is verified and the job inserted.
	CallQueued = "queued"
	// CallRunning: a worker runs the operation.
	CallRunning = "running"
	// CallSettling: the result is ready and held until the payment settles.
	CallSettling = "settling"
	// CallPaid: settled; the result is released. Final.
	CallPaid = "paid"
	// CallFailed: the operation failed; the payment is never settled. Final.
	CallFailed = "failed"
	// CallUnpaid: settlement failed; the result is withheld. Final.
	CallUnpaid = "unpaid"
	// CallLost: paid, then a reorganisation undid its settlement, which
	// could not be made again (the authorization expired, or its nonce was
	// used without a transfer): the result stays released, the amount is
	// recorded lost. Final.
	CallLost = "lost"
)

// Call event types, in the order a call goes through them. A paid call's
// stream reads, in the common case: call.paid, job.succeeded (with its
// run's start and its settlement's first submission, which commit with
// it), settlement.confirmed; a run still going after a moment records its
// job.started before. Streams written before call.paid have
// payment.verified and job.queued in its place, a job.started of every run
// and a settlement.submitted after job.succeeded; every reader understands
// both.
const (
	// EventCallPaid creates a call: its verified payment and its queued
	// job, which commit in one transaction.
	EventCallPaid = "call.paid"
	// EventPaymentVerified and EventJobQueued are the two events a call's
	// stream began with before call.paid; they are read, no longer written.
	EventPaymentVerified = "payment.verified"
	EventJobQueued       = "job.queued"
	EventJobStarted      = "job.started"
	// EventJobSucceeded records the result, and the settlement's first
	// submission (JobSucceeded.SettleJobID) it commits with.
	EventJobSucceeded = "job.succeeded"
	EventJobFailed    = "job.failed"
	// EventSettlementSubmitted is a settlement attempted again (its job
	// retried or rescued), recorded before its transfer. Streams written
	// before call.paid also record the first attempt with it.
	EventSettlementSubmitted = "settlement.submitted"
	EventSettlementConfirmed = "settlement.confirmed"
	EventSettlementFailed    = "settlement.failed"
	// EventSettlementResent: a reorganisation undid the settlement of a
	// paid call, and it was made again in another transaction.
	EventSettlementResent = "settlement.resent"
	// EventSettlementLost: a reorganisation undid the settlement of a
	// paid call, and it could not be made again; or a call's settlement
	// jobs were exhausted and the chain shows its authorization used by no
	// transfer found (Previous is empty then).
	EventSettlementLost = "settlement.lost"
	// EventSettlementFinal is appended to a network's stream (ChainStream)
	// once a set of settlement transactions is final: one event for every
	// transaction, and so every call, it names.
	EventSettlementFinal = "settlement.final"
)

// ChainStream returns the event stream of a network's settlement
// transactions (their finality).
func ChainStream(network string) string { return "chain/" + network }

// CallStream returns the event stream of call id.
func CallStream(id string) string { return "call/" + id }

// CallOfStream returns the id of the call whose stream is stream
// (CallStream's inverse).
func CallOfStream(stream string) string { return strings.TrimPrefix(stream, "call/") }

// IsFinal reports whether a call in state will not change any more.
func IsFinal(state string) bool {
	return state == CallPaid || state == CallFailed || state == CallUnpaid || state == CallLost
}

// IsFinalEvent reports whether a call event of type typ moves the call to a
// final state.
func IsFinalEvent(typ string) bool {
	return typ == EventSettlementConfirmed || typ == EventSettlementFailed || typ == EventJobFailed || typ == EventSettlementLost
}

// PaymentVerified is what the api verified of a paid call: the data of a
// payment.verified event (which created the call in streams written before
// call.paid), and the part of call.paid's.
type PaymentVerified struct {
	Op          string       `json:"op"`
	Token       string       `json:"token"`
	RequestHash []byte       `json:"request_hash"`
	Payment     x402.Payment `json:"payment"`
}

// PaidCall is the data of a call.paid event: the verified payment (its
// payment in the ledger's compact form, x402.Payment.MarshalJSON) and the
// job queued for it (its queue is its operation's). It is written packed
// when its payment packs (MarshalJSON).
type PaidCall struct {
	PaymentVerified
	JobID int64 `json:"job_id"`
	// Form1 writes the event in ledger form 1, as releases before
	// migration 017 did, which their workers settle from: its packed form
	// in base64 inside data ({"p": ...}), the payment packed in its form
	// 1, bin NULL (api.Config.LedgerForm1).
	Form1 bool `json:"-"`
}

// PaymentDigest returns what the calls row of a call admitted with call.paid
// keeps of its payment's replay key (x402.Payment.Key): the base64 of the
// first 16 bytes of its SHA-256, 24 characters against about 120. Migration
// 012's trigger computes the same of a key written whole.
func PaymentDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return base64.StdEncoding.EncodeToString(sum[:16])
}

// JobQueued is the data of a job.queued event.
type JobQueued struct {
	JobID int64  `json:"job_id"`
	Queue string `json:"queue"`
}

// JobStarted is the data of a job.started event.
type JobStarted struct {
	JobID   int64 `json:"job_id"`
	Attempt int   `json:"attempt"`
}

// JobSucceeded is the data of a job.succeeded event.
type JobSucceeded struct {
	JobID int64 `json:"job_id"`
	// Result is the operation's result. It is kept once, in the call's
	// row (calls.result), which the event's projection writes: the event
	// records its size and digest (Bytes, SHA256), so that a result can
	// be let go after its time (RESULT_TTL) while the log stays whole.
	Result json.RawMessage `json:"-"`
	// Op is the call's operation, whose name the result object states
	// after the call's id: the row keeps the result without the two
	// (ResultObject), unless Form1.
	Op string `json:"-"`
	// Form1 writes the row and the event in ledger form 1, as
	// releases before migrations 016 and 017 did: the result whole, the
	// event as JSON (worker.Config.LedgerForm1).
	Form1 bool `json:"-"`
	// Bytes is the result's size.
	Bytes int `json:"bytes"`
	// SHA256 is the hex SHA-256 of the result's bytes.
	SHA256 string `json:"sha256"`
	// Attempt is the run's attempt when its start is recorded with its
	// success, in the same transaction (a run ending within moments, as
	// most do): the event then also stands for that attempt's
	// job.started. Zero when a job.started of its own precedes it (a run
	// that went on for longer, or a stream written before call.paid).
	Attempt int `json:"attempt,omitempty"`
	// SettleJobID is the settlement job inserted with the result: the
	// settlement's first attempt, made by the run (or by that job), on the
	// call's network. Zero in streams written before call.paid, which
	// record it in a settlement.submitted of its own.
	SettleJobID int64 `json:"settle_job_id,omitempty"`
	// Transaction is the id of the transaction that settlement sends, when
	// its settler names it before sending (x402.TransactionNamer: on
	// Solana the fee payer's signature): recorded before the transaction
	// exists anywhere else, for an attempt after a crash to look it up.
	Transaction string `json:"tx,omitempty"`
}

// resultDigest returns the size of Result and its SHA-256 in hex, which
// the event records in its place.
func (j JobSucceeded) resultDigest() (int, string) {
	sum := sha256.Sum256(j.Result)
	return len(j.Result), hex.EncodeToString(sum[:])
}

// MarshalJSON encodes the event's data: the size and digest of Result,
// without it, in one string under "s": "<bytes> <job id> <attempt>
// <settle job id> <digest in unpadded base64url>", about 110 bytes a call
// less than the same fields under their keys (which the events written
// before have), beside the transaction it names (tx) when there is one. A
// digest that is not 32 bytes of hex is written as fields.
func (j JobSucceeded) MarshalJSON() ([]byte, error) {
	type data JobSucceeded
	if j.Result != nil {
		j.Bytes, j.SHA256 = j.resultDigest()
	}
	sum, err := hex.DecodeString(j.SHA256)
	if err != nil || len(sum) != sha256.Size || hex.EncodeToString(sum) != j.SHA256 {
		return json.Marshal(data(j))
	}
	return json.Marshal(struct {
		S  string `json:"s"`
		Tx string `json:"tx,omitempty"`
	}{fmt.Sprintf("%d %d %d %d %s", j.Bytes, j.JobID, j.Attempt, j.SettleJobID, base64.RawURLEncoding.EncodeToString(sum)), j.Transaction})
}

// UnmarshalJSON decodes what MarshalJSON wrote, in either form.
func (j *JobSucceeded) UnmarshalJSON(b []byte) error {
	type data JobSucceeded
	var v struct {
		S string `json:"s"`
		data
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.S == "" {
		*j = JobSucceeded(v.data)
		return nil
	}
	*j = JobSucceeded{Transaction: v.Transaction}
	var digest string
	if _, err := fmt.Sscanf(v.S, "%d %d %d %d %s", &j.Bytes, &j.JobID, &j.Attempt, &j.SettleJobID, &digest); err != nil {
		return fmt.Errorf("decode job.succeeded %q: %w", v.S, err)
	}
	sum, err := base64.RawURLEncoding.DecodeString(digest)
	if err != nil {
		return fmt.Errorf("decode job.succeeded %q: %w", v.S, err)
	}
	j.SHA256 = hex.EncodeToString(sum)
	return nil
}

// JobFailed is the data of a job.failed event.
type JobFailed struct {
	JobID   int64  `json:"job_id"`
	Error   string `json:"error"`
	Message string `json:"message"`
}

// SettlementSubmitted is the data of a settlement.submitted event.
type SettlementSubmitted struct {
	JobID   int64  `json:"job_id"`
	Network string `json:"network"`
	Attempt int    `json:"attempt"`
	// Transaction is the id of the transaction the attempt sends, when
	// named before sending (JobSucceeded.Transaction).
	Transaction string `json:"tx,omitempty"`
}

// SettlementDone is the data of settlement.confirmed and settlement.failed.
type SettlementDone struct {
	// Response is the settlement's response. The event keeps it without
	// what the call's payment states or its type implies
	// (MarshalJSON): its payer, and its success when it succeeded. The
	// calls row keeps it whole, as the payer is answered.
	Response x402.SettleResponse `json:"response"`
	// Cost is the gas the settlement spent, when it sent a transaction.
	Cost *x402.SettleCost `json:"cost,omitempty"`
	// Block is the block its transaction was mined in, when it is followed
	// until final (settlement_watch), in the events written before
	// settlement.mined, which now records it once for the transaction's
	// calls (EventSettlementMined): nil then.
	Block *x402.SettledBlock `json:"block,omitempty"`
	// Form1 writes the row and the event in ledger form 1, as
	// releases before migrations 016 and 017 did: a settlement's response
	// as the JSON object of the settlement column, not packed in receipt,
	// and the event as fields, not one string
	// (worker.Config.LedgerForm1).
	Form1 bool `json:"-"`
}

// ledgerResponse is a settlement's response as settlement.confirmed and
// settlement.failed keep it (SettlementDone.MarshalJSON): success only when
// false, no payer (read from the events written before, which kept both).
type ledgerResponse struct {
	Success     *bool  `json:"success,omitempty"`
	ErrorReason string `json:"errorReason,omitempty"`
	Payer       string `json:"payer,omitempty"`
	Transaction string `json:"transaction,omitempty"`
	// Tx is a transaction hash of 32 bytes, 0x-prefixed lower-case hex,
	// as its bytes (Transaction is then empty): 44 characters of base64
	// against 66.
	Tx      []byte `json:"tx,omitempty"`
	Network string `json:"network"`
}

type settlementDoneJSON struct {
	Response ledgerResponse     `json:"response"`
	Cost     *ledgerCost        `json:"cost,omitempty"`
	Block    *x402.SettledBlock `json:"block,omitempty"`
}

// ledgerCost is a settlement's cost as settlement.confirmed keeps it: one
// string, "<gas used> <gas price in wei> <batch>", about 60 bytes less
// than the object the events written before kept (which it reads too).
// CallStatsSince sums either.
type ledgerCost x402.SettleCost

// MarshalJSON encodes the cost as its string.
func (c *ledgerCost) MarshalJSON() ([]byte, error) {
	return json.Marshal(fmt.Sprintf("%d %s %d", c.GasUsed, c.GasPriceWei, c.Batch))
}

// UnmarshalJSON decodes the string, or the object written before.
func (c *ledgerCost) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return json.Unmarshal(b, (*x402.SettleCost)(c))
	}
	if _, err := fmt.Sscanf(s, "%d %s %d", &c.GasUsed, &c.GasPriceWei, &c.Batch); err != nil {
		return fmt.Errorf("settlement cost %q: %w", s, err)
	}
	return nil
}

// MarshalJSON encodes the event's data as one string when it is a
// settlement that succeeded with an EVM transaction and a cost
// (settledString: "s", about 55 bytes less, with its block beside), and
// otherwise without the response's payer, which
// the call's payment states (a settler answers the payment's payer), and
// its success when true, with a transaction hash of 32 bytes as its bytes
// and its cost as one string (ledgerCost); UnmarshalJSON reads a missing success as true
// (the events written before kept both). Readers wanting the payer take
// the call's (Call.Payer).
func (d SettlementDone) MarshalJSON() ([]byte, error) {
	if s, ok := settledString(&d); ok {
		return json.Marshal(settledOneString{S: s, Block: d.Block})
	}
	r := ledgerResponse{ErrorReason: d.Response.ErrorReason, Transaction: d.Response.Transaction, Network: d.Response.Network}
	if !d.Response.Success {
		r.Success = new(bool)
	}
	if tx, ok := x402.HashBytes(r.Transaction); ok {
		r.Transaction, r.Tx = "", tx
	}
	return json.Marshal(settlementDoneJSON{Response: r, Cost: (*ledgerCost)(d.Cost), Block: d.Block})
}

// UnmarshalJSON decodes what MarshalJSON wrote, either form, and the whole
// response of the events written before it.
func (d *SettlementDone) UnmarshalJSON(b []byte) error {
	var v struct {
		settlementDoneJSON
		S string `json:"s"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.S != "" {
		return parseSettled(v.S, v.Block, d)
	}
	if v.Response.Tx != nil {
		v.Response.Transaction = "0x" + hex.EncodeToString(v.Response.Tx)
	}
	*d = SettlementDone{Response: x402.SettleResponse{Success: v.Response.Success == nil || *v.Response.Success,
		ErrorReason: v.Response.ErrorReason, Payer: v.Response.Payer, Transaction: v.Response.Transaction, Network: v.Response.Network},
		Cost: (*x402.SettleCost)(v.Cost), Block: v.Block}
	return nil
}

// SettlementResent is the data of settlement.resent.
type SettlementResent struct {
	// Previous is the transaction the reorganisation undid.
	Previous string `json:"previous"`
	// Response is the new settlement.
	Response x402.SettleResponse `json:"response"`
	Cost     *x402.SettleCost    `json:"cost,omitempty"`
	Block    *x402.SettledBlock  `json:"block,omitempty"`
	// Form1 writes the row in ledger form 1 (SettlementDone.Form1).
	Form1 bool `json:"-"`
}

// SettlementLost is the data of settlement.lost.
type SettlementLost struct {
	// Previous is the transaction the reorganisation undid; empty for a
	// call reconciled after its settlement jobs were exhausted.
	Previous string `json:"previous"`
	Network  string `json:"network"`
	// Amount is the price lost, in the asset's atomic units.
	Amount string `json:"amount"`
	// Reason is why the settlement could not be made again.
	Reason string `json:"reason"`
}

// SettlementFinal is the data of settlement.final.
type SettlementFinal struct {
	// Block is the newest block the network's policy held final when
	// the transactions were found in their blocks.
	Block uint64 `json:"block"`
	// Transactions are the settlement transactions now final.
	Transactions []string `json:"transactions"`
	// Calls is the number of paid calls they settled, and Amount their
	// prices' sum.
	Calls  int    `json:"calls"`
	Amount string `json:"amount"`
}

// receiptOf is the packed settlement response a settled call's row keeps
// (x402.SettleResponse.MarshalLedgerBinary), from the statement's
// arguments $2 (packed for the response's own network, $4, which the row's
// network column then states) and $5 (packed stating it, for a row of
// another network).
const receiptOf = "CASE WHEN network = $4 THEN $2::bytea ELSE $5::bytea END"

// projectCall updates the calls row of a call event.
func projectCall(b *pgx.Batch, e *NewEvent, data []byte, now time.Time) (bool, error) {
	id := CallOfStream(e.Stream)
	switch e.Type {
	case EventCallPaid:
		v, ok := e.Data.(PaidCall)
		if !ok {
			return false, fmt.Errorf("data is %T, want PaidCall", e.Data)
		}
		// The payment, the payer and the request's hash stay in the
		// event (callPaid reads them); the replay key is kept as its
		// digest.
		b.Queue(`INSERT INTO calls (id, op, state, token, request_hash, payment_key, network, payer, amount, created_at, updated_at)
			VALUES ($1, $2, $3, $4, '', $5, $6, '', $7, $8, $8)`,
			id, v.Op, CallQueued, v.Token, PaymentDigest(v.Payment.Key()), v.Payment.Network, v.Payment.Amount, now)
		return true, nil
	case EventPaymentVerified:
		v, ok := e.Data.(PaymentVerified)
		if !ok {
			return false, fmt.Errorf("data is %T, want PaymentVerified", e.Data)
		}
		// The payment itself stays in the event (callPayment reads it).
		b.Queue(`INSERT INTO calls (id, op, state, token, request_hash, payment_key, network, payer, amount, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)`,
			id, v.Op, CallQueued, v.Token, v.RequestHash, v.Payment.Key(), v.Payment.Network, v.Payment.Payer, v.Payment.Amount, now)
		return true, nil
	case EventJobQueued:
		b.Queue("UPDATE calls SET updated_at = $2 WHERE id = $1 AND state = 'queued'", id, now)
		return true, nil
	case EventJobStarted:
		b.Queue("UPDATE calls SET state = 'running', updated_at = $2 WHERE id = $1 AND state IN ('queued', 'running')", id, now)
		return true, nil
	case EventJobSucceeded:
		v, ok := e.Data.(JobSucceeded)
		if !ok {
			return false, fmt.Errorf("data is %T, want JobSucceeded", e.Data)
		}
		// The result keeps its bytes (a json column): key order and
		// spacing are the operation's, and nothing is re-parsed to serve
		// it. The call's id and op, which its columns state, are left
		// out (callResult puts them back).
		result, err := rowResult(v.Result, id, v.Op, v.Form1)
		if err != nil {
			return false, err
		}
		b.Queue("UPDATE calls SET state = 'settling', result = $2::json, updated_at = $3 WHERE id = $1 AND state IN ('queued', 'running')", id, string(result), now)
		return true, nil
	case EventJobFailed:
		b.Queue("UPDATE calls SET state = 'failed', failure = $2, updated_at = $3 WHERE id = $1 AND state IN ('queued', 'running')", id, data, now)
		return true, nil
	case EventSettlementSubmitted:
		b.Queue("UPDATE calls SET updated_at = $2 WHERE id = $1 AND state = 'settling'", id, now)
		return true, nil
	case EventSettlementConfirmed, EventSettlementFailed:
		v, ok := e.Data.(SettlementDone)
		if !ok {
			return false, fmt.Errorf("data is %T, want SettlementDone", e.Data)
		}
		// The row keeps the response whole (the event leaves out its
		// payer): it is what the call is answered with. A settled
		// call's is packed (receipt); a refused one's is the settlement
		// column's JSON object, whose reason /ops lists.
		if e.Type == EventSettlementConfirmed && !v.Form1 {
			b.Queue("UPDATE calls SET state = 'paid', receipt = "+receiptOf+", updated_at = $3 WHERE id = $1 AND state = 'settling'",
				id, v.Response.MarshalLedgerBinary(v.Response.Network), now, v.Response.Network, v.Response.MarshalLedgerBinary(""))
			return true, nil
		}
		response, err := json.Marshal(v.Response)
		if err != nil {
			return false, fmt.Errorf("marshal settlement: %w", err)
		}
		state := CallPaid
		if e.Type == EventSettlementFailed {
			state = CallUnpaid
		}
		b.Queue("UPDATE calls SET state = $2, settlement = $3::jsonb, updated_at = $4 WHERE id = $1 AND state = 'settling'", id, state, response, now)
		return true, nil
	case EventSettlementResent:
		v, ok := e.Data.(SettlementResent)
		if !ok {
			return false, fmt.Errorf("data is %T, want SettlementResent", e.Data)
		}
		if !v.Form1 {
			b.Queue("UPDATE calls SET receipt = "+receiptOf+", settlement = NULL, updated_at = $3 WHERE id = $1 AND state = 'paid'",
				id, v.Response.MarshalLedgerBinary(v.Response.Network), now, v.Response.Network, v.Response.MarshalLedgerBinary(""))
			return true, nil
		}
		b.Queue("UPDATE calls SET settlement = $2::jsonb->'response', updated_at = $3 WHERE id = $1 AND state = 'paid'", id, data, now)
		return true, nil
	case EventSettlementLost:
		v, ok := e.Data.(SettlementLost)
		if !ok {
			return false, fmt.Errorf("data is %T, want SettlementLost", e.Data)
		}
		b.Queue(`INSERT INTO settlement_losses AS l (network, calls, amount) VALUES ($1, 1, $2::numeric)
			ON CONFLICT (network) DO UPDATE SET calls = l.calls + 1, amount = l.amount + EXCLUDED.amount`, v.Network, v.Amount)
		// A paid call whose settlement a reorganisation undid, or a call
		// still settling whose settlement jobs were exhausted and whose
		// authorization the chain shows used by no transfer found
		// (worker's reconciliation): its result is released either way.
		b.Queue("UPDATE calls SET state = 'lost', updated_at = $2 WHERE id = $1 AND state IN ('paid', 'settling')", id, now)
		return true, nil
	}
	return false, fmt.Errorf("unknown call event type %q", e.Type)
}

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

// Call is a row of the calls projection.
type Call struct {
	ID    string
	Op    string
	State string
	Token string
	// RequestHash is the hash of the paid request; read from the call's
	// call.paid event when the row leaves it empty (with the payment:
	// CallGetByID, CallGetByPaymentKey, CallGetForUpdate, CallList).
	RequestHash []byte
	// PaymentKey is the payment's replay key (x402.Payment.Key), or its
	// digest (PaymentDigest) in the rows written since call.paid.
	PaymentKey string
	Network    string
	// Payer is the paying address; read from the payment when the row
	// leaves it empty, as RequestHash.
	Payer   string
	Amount  string
	Payment x402.Payment
	// Result is the operation's result object, kept from job.succeeded on
	// (the row keeps its fields without the call's id and op, which
	// callResult puts back, or, as written before migration 016, whole).
	Result json.RawMessage
	// Failure is the job.failed event's data when the operation failed.
	Failure *JobFailed
	// Settlement is the settlement's response once settled or refused
	// (the row keeps a settled call's packed in receipt, a refused one's,
	// and any written before migration 016, as a JSON object).
	Settlement *x402.SettleResponse
	// ResultExpiredAt is when the result was let go (RESULT_TTL); Result
	// is nil from then on.
	ResultExpiredAt *time.Time
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// callColumnsBefore and callColumnsAfter surround the payment and the
// result in the columns scanCall reads.
const (
	callColumnsBefore = "id, op, state, token, request_hash, payment_key, network, payer, amount, "
	callColumnsAfter  = ", failure, settlement, receipt, result_expired_at, created_at, updated_at"
)

// callPaid reads the data of the event that created a call, call.paid or
// payment.verified, the one place its payment is kept: found by the
// stream's index, at the call's own creation time (the event and the row
// are written at the same instant). Rows written before migration 005
// carry their own copy of the payment, which stands for it. It is bytes
// (decodePaidCall): call.paid's binary form (bin, migration 017) as it is,
// or the JSON text of data.
const callPaid = `CASE WHEN calls.payment IS NOT NULL THEN convert_to(jsonb_build_object('payment', calls.payment)::text, 'UTF8') ELSE (SELECT coalesce(e.bin, convert_to(e.data::text, 'UTF8')) FROM events e
	WHERE e.stream = 'call/' || calls.id AND e.type IN ('call.paid', 'payment.verified') AND e.created_at = calls.created_at) END`

const callColumns = callColumnsBefore + callPaid + ", result" + callColumnsAfter

// answerColumns are callColumns without the payment, which answering a call
// does not need: Postgres does not render it and nothing decodes it.
const answerColumns = callColumnsBefore + "NULL::bytea, result" + callColumnsAfter

// settleColumns are callColumns without the result, which settling a call
// does not need: it may run to megabytes, and the call's job has just
// written it.
const settleColumns = callColumnsBefore + callPaid + ", NULL::json" + callColumnsAfter

func scanCall(row pgx.Row) (*Call, error) {
	var c Call
	var paid, result, failure, settlement, receipt []byte
	if err := row.Scan(&c.ID, &c.Op, &c.State, &c.Token, &c.RequestHash, &c.PaymentKey, &c.Network, &c.Payer, &c.Amount,
		&paid, &result, &failure, &settlement, &receipt, &c.ResultExpiredAt, &c.CreatedAt, &c.UpdatedAt); err != nil {
		return nil, interpretError(err)
	}
	if paid != nil {
		// call.paid's binary form or data, or payment.verified's, or
		// {"payment": ...} of a row that kept its own.
		var v PaidCall
		if err := decodePaidCall(paid, &v); err != nil {
			return nil, fmt.Errorf("call %s: payment: %w", c.ID, err)
		}
		c.Payment = v.Payment
		if len(c.RequestHash) == 0 {
			c.RequestHash = v.RequestHash
		}
		if c.Payer == "" {
			c.Payer = v.Payment.Payer
		}
	}
	if result != nil {
		r, err := callResult(result, c.ID, c.Op)
		if err != nil {
			return nil, err
		}
		c.Result = r
	}
	if failure != nil {
		c.Failure = &JobFailed{}
		if err := json.Unmarshal(failure, c.Failure); err != nil {
			return nil, fmt.Errorf("call %s: failure: %w", c.ID, err)
		}
	}
	if receipt != nil {
		c.Settlement = &x402.SettleResponse{}
		if err := c.Settlement.UnmarshalLedgerBinary(receipt, c.Network); err != nil {
			return nil, fmt.Errorf("call %s: %w", c.ID, err)
		}
	} else if settlement != nil {
		c.Settlement = &x402.SettleResponse{}
		if err := json.Unmarshal(settlement, c.Settlement); err != nil {
			return nil, fmt.Errorf("call %s: settlement: %w", c.ID, err)
		}
	}
	return &c, nil
}

// CallGetByID returns call id.
func CallGetByID(ctx context.Context, db DBTX, id string) (*Call, error) {
	return callByID(ctx, db, callColumns, id)
}

// CallGetAnswer returns call id without its payment (Payment is zero): what
// answering the call needs, read once per paid call.
func CallGetAnswer(ctx context.Context, db DBTX, id string) (*Call, error) {
	return callByID(ctx, db, answerColumns, id)
}

// CallGetToSettle returns call id without its result (Result is nil): what
// settling its payment needs, read by a settlement job (a call's own run
// reads it with others, CallListToSettle).
func CallGetToSettle(ctx context.Context, db DBTX, id string) (*Call, error) {
	return callByID(ctx, db, settleColumns, id)
}

// CallListToSettle returns the calls of ids without their results, as
// CallGetToSettle does, in one statement: a group of runs reads the
// payments it is to settle in the transaction that records their results,
// not once a call. A call that does not exist is left out.
func CallListToSettle(ctx context.Context, db DBTX, ids []string) ([]*Call, error) {
	rows, err := db.Query(ctx, "SELECT "+settleColumns+" FROM calls WHERE id = ANY($1)", ids)
	if err != nil {
		return nil, fmt.Errorf("list %d calls to settle: %w", len(ids), err)
	}
	defer rows.Close()
	calls := make([]*Call, 0, len(ids))
	for rows.Next() {
		c, err := scanCall(rows)
		if err != nil {
			return nil, fmt.Errorf("list %d calls to settle: %w", len(ids), err)
		}
		calls = append(calls, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %d calls to settle: %w", len(ids), interpretError(err))
	}
	return calls, nil
}

// CallListExhausted returns, at most limit, the calls still settling whose
// settlement jobs (River jobs of kind) all ended without settling them:
// discarded after their last attempt, or cancelled, and none left to run.
// They are read as CallGetToSettle reads a call. River keeps a discarded
// job for a week: the search starts from those (river_job's index by
// state), each call's other jobs found by its args (their GIN index).
func CallListExhausted(ctx context.Context, db DBTX, kind string, limit int) ([]*Call, error) {
	return queryList(ctx, db, "list calls whose settlement jobs are exhausted", "SELECT "+settleColumns+` FROM calls
		WHERE state = 'settling' AND id IN (
			SELECT j.args->>'call_id' FROM river_job j
			WHERE j.state IN ('discarded', 'cancelled') AND j.kind = $1 AND NOT EXISTS (
				SELECT 1 FROM river_job o WHERE o.args @> jsonb_build_object('call_id', j.args->>'call_id') AND o.kind = $1
					AND o.state NOT IN ('discarded', 'cancelled', 'completed')))
		ORDER BY created_at LIMIT $2`,
		func(row pgx.CollectableRow) (*Call, error) { return scanCall(row) }, kind, limit)
}

// callByID reads columns (callColumns, answerColumns or settleColumns) of
// call id.
func callByID(ctx context.Context, db DBTX, columns, id string) (*Call, error) {
	c, err := scanCall(db.QueryRow(ctx, "SELECT "+columns+" FROM calls WHERE id = $1", id))
	if err != nil {
		return nil, fmt.Errorf("get call %s: %w", id, err)
	}
	return c, nil
}

// CallGetByPaymentKey returns the call paid for by the payment with key,
// found by the key's digest or, for a call admitted before migration 012
// whose row keeps its key whole, by the key itself.
func CallGetByPaymentKey(ctx context.Context, db DBTX, key string) (*Call, error) {
	c, err := scanCall(db.QueryRow(ctx, "SELECT "+callColumns+" FROM calls WHERE payment_key = $1", PaymentDigest(key)))
	if errors.Is(err, ErrNotFound) {
		c, err = scanCall(db.QueryRow(ctx, "SELECT "+callColumns+" FROM calls WHERE payment_key = $1", key))
	}
	if err != nil {
		return nil, fmt.Errorf("get call by payment %s: %w", key, err)
	}
	return c, nil
}

// CallGetForUpdate returns call id locked for the rest of transaction tx.
func CallGetForUpdate(ctx context.Context, tx pgx.Tx, id string) (*Call, error) {
	c, err := scanCall(tx.QueryRow(ctx, "SELECT "+callColumns+" FROM calls WHERE id = $1 FOR UPDATE", id))
	if err != nil {
		return nil, fmt.Errorf("get call %s for update: %w", id, err)
	}
	return c, nil
}
