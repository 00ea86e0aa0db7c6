// Package store owns the service's Postgres state: the append-only event log,
// the projections that events update (calls, and the index tables), and the
// one listening connection per process that tells waiters when a stream has a
// new event.
//
// Every state change goes through [Append], in the caller's transaction:
// it inserts the events, applies them to their projection rows and sends
// NOTIFY, so a projection never disagrees with its events and a waiter is
// woken only once the change is committed. Writes that many callers make at
// once (the api's admissions, the workers' results and settlement events)
// share transactions through [GroupCommitter].
//
// A paid call is, in the common case, three events (call.paid,
// job.succeeded, settlement.confirmed) and one calls row. The events keep
// their data compact, each fact once: call.paid packs the payment with the
// call's other fields into one binary value, kept as bytes in the event's
// bin column ([PaidCall.MarshalEventBinary], [BinaryData]),
// job.succeeded its fields into one string ([JobSucceeded.MarshalJSON]),
// settlement.confirmed leaves out what the payment states
// ([SettlementDone.MarshalJSON]); each reads the forms written before too.
// The calls row keeps what answering a call needs (its state, result and
// settlement response) and the replay key's digest its unique index guards.
// The event log is found by stream (events_stream) and has no key of its
// own; a call's id begins with its time, so that the indexes on it grow at
// their end.
//
// The service's SQL statements live in this package (the schema package
// keeps the migrations and the partitions' DDL), each behind a function
// named, as most are, after its entity and then its action
// ([CallGetByID], [EventListByStream], [RetentionMarkAdvance],
// [WatchFollowLock]). The files, by concern:
//
//   - event.go: the log itself ([Event], [NewEvent], [Append], NOTIFY).
//   - eventtypes.go: the registry of the call and chain streams' event
//     types ([EventType], [EventTypeGet], [EventTypeList]): for each, the
//     Go type of its payload (read with the generic [Payload]), its
//     projection, and what the ops timeline shows of it (Label, Kind,
//     Fields). Append and the ops timeline both go through it: a type is
//     added there, and nowhere else.
//   - callevents.go: the call events' names, streams and payloads with
//     their JSON forms; paid.go, succeeded.go, settled.go and mined.go
//     hold the compact and binary forms of call.paid, job.succeeded,
//     settlement.confirmed and settlement.mined.
//   - projection.go: the statements each event applies to its projection
//     (calls, settlement_losses, settlement_watch) as Append records it.
//   - callread.go: the read model: a call's states, and [Call] as its row
//     and its call.paid event give it back ([CallGetByID] and the others);
//     result.go the result object it keeps; ops.go the lists and figures
//     of the operator's dashboard.
//   - commit.go: the group commits ([GroupCommitter]); reserve.go: the
//     payers' reservations; unpaid.go: the unpaid work counted per payer
//     and client; warm.go: the pool opened with its connections warm.
//   - watch.go: the settlement transactions followed until final;
//     relayer.go: the relayer's nonces and refused payers.
//   - index.go: the index's events and projections (host and crawl
//     streams), outside the registry; indexread.go the index's reads
//     (hosts, changes, probe targets), resources.go its resources search,
//     evidence.go its chain reader's transfers and figures.
//     A payment identifier (x402's payment-identifier extension) is bound
//     to its call by payment.identified (callevents.go, payment_ids).
//   - retention.go and partition.go: the retention job's sweeps and marks,
//     and the event log's partitions as wholes (counted, copied, swapped).
//   - listener.go: the one listening connection per process.
//   - presence.go: River's running jobs whose worker process is gone from
//     the database, or lost their completion, taken up again
//     ([PresenceGoneList], [PresenceGoneReclaim], for the worker's
//     Reclaimer).
//
// # Ledger forms
//
// The ledger is written in form 2, which migrations 016 (a settled call's
// row keeps its response packed in receipt, its result without call_id and
// op) and 017 (call.paid's and job.succeeded's values as bytes in bin, a
// settled EVM call's settlement.confirmed as one string, the payment packed
// in its form 2) brought, or, while processes of a release before them
// still run, in form 1, which is all those read: the result whole, the
// response as the settlement column's JSON object, the events' data as
// JSON. An event's Form1 field writes it and its projection in form 1
// (api.Config.LedgerForm1, worker.Config.LedgerForm1); every reader reads
// both (docs/operating.md, Upgrades).
package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// ErrNotFound is returned when a looked-up row does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when an event does not fit the current state of its
// projection (a move from a state that does not allow it, or a second payment
// with a key already used).
var ErrConflict = errors.New("conflict with current state")

// ErrTimeout is a write the database did not answer within its own time
// bound (GroupCommitConfig.Timeout), while its caller still waited: the
// database is taken for unavailable (IsUnavailable).
var ErrTimeout = errors.New("the database did not answer in time")

// DBTX is what the store's functions need from a connection: a pool, a
// connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// interpretError maps driver errors to the store's sentinels.
func interpretError(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		return errors.Join(ErrConflict, err)
	}
	return err
}

// IsUnavailable reports whether err says that the database could not be
// reached or went away (a connection refused or cut, the server shutting
// down or starting up, a dead pool), rather than that the statement was
// wrong: trying again later may succeed. A failover to a standby shows all
// of these, and also a connection that could not be made to any host of
// the connection string (whatever each host answered), a server full of the
// other processes reconnecting at once (too_many_connections), a session
// on a server that is, or became, a standby (read_only_sql_transaction),
// and a write that got no answer within its own time bound (ErrTimeout).
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) || errors.Is(err, ErrTimeout) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return unavailableCode(pgErr.Code)
	}
	var netErr net.Error
	return errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, puddle.ErrClosedPool) || pgconn.SafeToRetry(err)
}

// unavailableCode reports whether a server's SQLSTATE code says that it
// cannot serve now: class 08 (connection exception); 57P01-57P03 (admin
// shutdown, crash shutdown, cannot connect now: starting up); 53300
// (too_many_connections); 25006 (read_only_sql_transaction: a standby).
func unavailableCode(code string) bool {
	switch code {
	case "57P01", "57P02", "57P03", "53300", "25006":
		return true
	}
	return strings.HasPrefix(code, "08")
}

// IsLockWait reports whether err ended a statement that waited for a lock:
// a lock's timeout (lock_not_available, TxLockTimeoutSet) or a deadlock
// (deadlock_detected). The transaction changed nothing and may be tried
// again.
func IsLockWait(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01")
}

// YieldingLockWait is how long a lock of InYieldingTx waits: far less
// than Postgres's deadlock_timeout (1 s by default), after which a waiting
// transaction looks for a deadlock and, finding one, ends itself.
const YieldingLockWait = 100 * time.Millisecond

// InYieldingTx runs fn in a transaction that gives way to the others: each
// lock it takes waits at most YieldingLockWait, and then the transaction is
// rolled back and fn run again in a new one, until ctx ends. It is for the
// rare transactions that write many rows the paid calls' transactions
// write too, in an order of their own (a claim's channels): one that waits
// for a call's row while the call waits for one of its rows ends itself
// before the call's deadlock check runs, so that no paid call is ever
// ended by a deadlock. fn must have no effect outside tx.
func InYieldingTx(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, fn func(tx pgx.Tx) error) error {
	for {
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if err := TxLockTimeoutSet(ctx, tx, YieldingLockWait); err != nil {
				return err
			}
			return fn(tx)
		})
		if err == nil || !IsLockWait(err) || ctx.Err() != nil {
			return err
		}
	}
}

// relaxedBegin starts a transaction whose commit does not wait for its WAL
// flush, in the same round trip as BEGIN.
const relaxedBegin = "BEGIN; SET LOCAL synchronous_commit = off"

// InRelaxedTx runs fn in a transaction that commits without waiting for its
// WAL to reach the disk. It is for the records of a paid call made before its
// run ends (the call and its job, the run's start): a database crash may lose
// them, and nothing is lost with them, because nothing was charged yet (the
// caller resends the same payment header; a job whose start was lost is
// rescued and run again), and because WAL is flushed in order, the next
// durable commit (River's fetch of the job, the run's result) also makes
// durable every record written before it. A run's result commits durably:
// River completes the job in a transaction of its own, which a crash must not
// keep without the result. Records that answer a caller with a promise (a
// failure and its "not charged", a settlement) commit durably too.
func InRelaxedTx(ctx context.Context, db interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}, fn func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, db, pgx.TxOptions{BeginQuery: relaxedBegin}, fn)
}
