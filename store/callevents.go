package store

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/x402d/x402d/x402"
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
	// EventJobStarted records a run's start, when the run goes on for
	// longer than a moment (a quick one's is in its job.succeeded).
	EventJobStarted = "job.started"
	// EventJobSucceeded records the result, and the settlement's first
	// submission (JobSucceeded.SettleJobID) it commits with.
	EventJobSucceeded = "job.succeeded"
	// EventJobFailed: the operation failed; the payment is not settled.
	EventJobFailed = "job.failed"
	// EventSettlementSubmitted is a settlement attempted again (its job
	// retried or rescued), recorded before its transfer. Streams written
	// before call.paid also record the first attempt with it.
	EventSettlementSubmitted = "settlement.submitted"
	// EventSettlementConfirmed: the payment settled; the result is
	// released.
	EventSettlementConfirmed = "settlement.confirmed"
	// EventSettlementFailed: the settlement was refused; the result is
	// withheld.
	EventSettlementFailed = "settlement.failed"
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
	// EventPaymentIdentified binds a call to the payment identifier its
	// payment carried (x402's payment-identifier extension), in the
	// transaction of its call.paid: its projection (payment_ids) refuses
	// a second call under the same payer and id with ErrConflict.
	EventPaymentIdentified = "payment.identified"
)

// ChainStream returns the event stream of a network's settlement
// transactions (their finality).
func ChainStream(network string) string { return "chain/" + network }

// CallStream returns the event stream of call id.
func CallStream(id string) string { return "call/" + id }

// CallOfStream returns the id of the call whose stream is stream
// (CallStream's inverse).
func CallOfStream(stream string) string { return strings.TrimPrefix(stream, "call/") }

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

// PaymentIdentified is the data of a payment.identified event: the
// payment identifier of a call's payment and the payer it is scoped by.
type PaymentIdentified struct {
	// Payer is the payment's payer (x402.Payment.Payer).
	Payer string `json:"payer"`
	// ID is the client's payment identifier.
	ID string `json:"id"`
}

// PaymentIDKey returns the key payment_ids keeps the payment identifier id
// of payer under: the base64 of the first 16 bytes of the SHA-256 of
// payer, a NUL and id (as PaymentDigest). An id is scoped by its payer:
// another payer's same id is another key.
func PaymentIDKey(payer, id string) string {
	h := sha256.New()
	h.Write([]byte(payer))
	h.Write([]byte{0})
	h.Write([]byte(id))
	return base64.StdEncoding.EncodeToString(h.Sum(nil)[:16])
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

// validJSON marks JobSucceeded's MarshalJSON as json.Marshal's (encodeData).
func (JobSucceeded) validJSON() {}

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
	// Amount and Extra are a batch-settlement payment's
	// (x402.SettleResponse.Amount, Extra).
	Amount string          `json:"amount,omitempty"`
	Extra  json.RawMessage `json:"extra,omitempty"`
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

// validJSON marks SettlementDone's MarshalJSON as json.Marshal's (encodeData).
func (SettlementDone) validJSON() {}

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
	r := ledgerResponse{ErrorReason: d.Response.ErrorReason, Transaction: d.Response.Transaction, Network: d.Response.Network,
		Amount: d.Response.Amount, Extra: d.Response.Extra}
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
		ErrorReason: v.Response.ErrorReason, Payer: v.Response.Payer, Transaction: v.Response.Transaction, Network: v.Response.Network,
		Amount: v.Response.Amount, Extra: v.Response.Extra},
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
