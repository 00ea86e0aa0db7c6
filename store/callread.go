package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
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

// IsFinal reports whether a call in state will not change any more.
func IsFinal(state string) bool {
	return state == CallPaid || state == CallFailed || state == CallUnpaid || state == CallLost
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

// scanCall reads a call selected with callColumns, answerColumns or
// settleColumns, then into more the columns that follow them, if any.
func scanCall(row pgx.Row, more ...any) (*Call, error) {
	var c Call
	var paid, result, failure, settlement, receipt []byte
	dest := []any{&c.ID, &c.Op, &c.State, &c.Token, &c.RequestHash, &c.PaymentKey, &c.Network, &c.Payer, &c.Amount,
		&paid, &result, &failure, &settlement, &receipt, &c.ResultExpiredAt, &c.CreatedAt, &c.UpdatedAt}
	if err := row.Scan(append(dest, more...)...); err != nil {
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
	return callsByID(ctx, db, settleColumns, "to settle", ids)
}

// CallListToSettleHeld is CallListToSettle with, for each call that holds
// a channel busy (a batch-settlement payment's call, admitted and not yet
// charged), the channel's record read in the same statement, as
// ChannelGet reads it, in the call's Payment.Record (a *Channel; nil for a
// call that holds none): the transaction that records a group's results
// and charges their vouchers reads their channels with their payments,
// not once a call (chanpay's Settle takes the record from there).
func CallListToSettleHeld(ctx context.Context, db DBTX, ids []string) ([]*Call, error) {
	rows, err := db.Query(ctx, `SELECT c.*, h.* FROM (SELECT `+settleColumns+` FROM calls WHERE id = ANY($1)) c
		LEFT JOIN LATERAL (SELECT channel_id, `+channelColumns+` FROM channels WHERE busy_call = c.id) h ON true`, ids)
	if err != nil {
		return nil, fmt.Errorf("list %d calls to settle with their channels: %w", len(ids), err)
	}
	defer rows.Close()
	calls := make([]*Call, 0, len(ids))
	for rows.Next() {
		var id []byte
		var f channelFields
		c, err := scanCall(rows, append([]any{&id}, f.dest()...)...)
		if err == nil && id != nil {
			c.Payment.Record, err = f.channel(common.BytesToHash(id))
		}
		if err != nil {
			return nil, fmt.Errorf("list %d calls to settle with their channels: %w", len(ids), err)
		}
		calls = append(calls, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %d calls to settle with their channels: %w", len(ids), interpretError(err))
	}
	return calls, nil
}

// CallListAnswers returns the calls of ids as CallGetAnswer reads one, in
// one statement: the answers of calls that end together. A call that does
// not exist is left out.
func CallListAnswers(ctx context.Context, db DBTX, ids []string) ([]*Call, error) {
	return callsByID(ctx, db, answerColumns, "to answer", ids)
}

// callsByID reads columns (callColumns, answerColumns or settleColumns) of
// the calls of ids; what names them in an error.
func callsByID(ctx context.Context, db DBTX, columns, what string, ids []string) ([]*Call, error) {
	rows, err := db.Query(ctx, "SELECT "+columns+" FROM calls WHERE id = ANY($1)", ids)
	if err != nil {
		return nil, fmt.Errorf("list %d calls %s: %w", len(ids), what, err)
	}
	defer rows.Close()
	calls := make([]*Call, 0, len(ids))
	for rows.Next() {
		c, err := scanCall(rows)
		if err != nil {
			return nil, fmt.Errorf("list %d calls %s: %w", len(ids), what, err)
		}
		calls = append(calls, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %d calls %s: %w", len(ids), what, interpretError(err))
	}
	return calls, nil
}

// CallListExhausted returns, at most limit, the calls still settling whose
// settlement jobs (River jobs of kind) all ended without settling them:
// discarded after their last attempt, or cancelled, and none left to run.
// They are read as CallGetToSettle reads a call. River keeps a discarded
// job for a week: the search starts from those (river_job's index by
// state), each call's other jobs found by their call_id (river_job's index
// by it, migration 029).
func CallListExhausted(ctx context.Context, db DBTX, kind string, limit int) ([]*Call, error) {
	return queryList(ctx, db, "list calls whose settlement jobs are exhausted", "SELECT "+settleColumns+` FROM calls
		WHERE state = 'settling' AND id IN (
			SELECT j.args->>'call_id' FROM river_job j
			WHERE j.state IN ('discarded', 'cancelled') AND j.kind = $1 AND NOT EXISTS (
				SELECT 1 FROM river_job o WHERE o.args->>'call_id' = j.args->>'call_id' AND o.kind = $1
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

// CallGetByPaymentID returns the call admitted with payer's payment
// identifier id (PaymentIDKey), or ErrNotFound.
func CallGetByPaymentID(ctx context.Context, db DBTX, payer, id string) (*Call, error) {
	c, err := scanCall(db.QueryRow(ctx, "SELECT "+callColumns+" FROM calls WHERE id = (SELECT call_id FROM payment_ids WHERE key = $1)",
		PaymentIDKey(payer, id)))
	if err != nil {
		return nil, fmt.Errorf("get call by payment identifier of %s: %w", payer, err)
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
