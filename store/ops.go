package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// CallListParams selects calls for CallList.
type CallListParams struct {
	// Op keeps the calls of one operation when set.
	Op string
	// State keeps the calls in one state when set.
	State string
	// Before keeps the calls older than this position (keyset pagination:
	// the CreatedAt and ID of the last call of the previous page).
	Before *CallPosition
	// Limit caps the number of calls. Defaults to 50.
	Limit int
}

// CallPosition is a call's place in the newest-first order of CallList.
type CallPosition struct {
	CreatedAt time.Time
	ID        string
}

// CallList returns calls newest first, filtered by p.
func CallList(ctx context.Context, db DBTX, p *CallListParams) ([]*Call, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	var beforeAt *time.Time
	var beforeID string
	if p.Before != nil {
		beforeAt, beforeID = &p.Before.CreatedAt, p.Before.ID
	}
	rows, err := db.Query(ctx, "SELECT "+callColumns+` FROM calls
		WHERE ($1 = '' OR op = $1) AND ($2 = '' OR state = $2)
		  AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4))
		ORDER BY created_at DESC, id DESC LIMIT $5`, p.Op, p.State, beforeAt, beforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("list calls: %w", err)
	}
	defer rows.Close()
	var calls []*Call
	for rows.Next() {
		c, err := scanCall(rows)
		if err != nil {
			return nil, fmt.Errorf("list calls: %w", err)
		}
		calls = append(calls, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list calls: %w", err)
	}
	return calls, nil
}

// CallOpList returns the operations that have calls, sorted. It skips
// through the op index, so it reads one index entry per operation,
// not one per call.
func CallOpList(ctx context.Context, db DBTX) ([]string, error) {
	return queryList(ctx, db, "list call operations", `WITH RECURSIVE ops(op) AS (
			(SELECT op FROM calls ORDER BY op LIMIT 1)
			UNION ALL
			SELECT (SELECT c.op FROM calls c WHERE c.op > ops.op ORDER BY c.op LIMIT 1) FROM ops WHERE ops.op IS NOT NULL
		) SELECT op FROM ops WHERE op IS NOT NULL`, pgx.RowTo[string])
}

// CallStats are the figures of the calls created in a time window.
type CallStats struct {
	// States counts the calls by state.
	States map[string]int64
	// Revenue sums the amounts of paid calls by operation and by network,
	// in the asset's atomic units, as decimal strings.
	RevenueByOp      []Revenue
	RevenueByNetwork []Revenue
	// PerMinute counts calls per minute, oldest first, one entry per minute
	// of the last PerMinuteSpan minutes (zeros included).
	PerMinute []int64
}

// Revenue is the income of one operation or network.
type Revenue struct {
	// Key is the operation or network.
	Key string
	// Calls is the number of paid calls.
	Calls int64
	// Amount is their total in atomic units (USDC: 6 decimals).
	Amount string
	// GasWei is, for a network, the gas its settlements spent in the
	// window, in wei of its native token ("0" when none is recorded);
	// empty for an operation.
	GasWei string
}

// CallStatsSince returns the figures of the calls created since since, and
// calls per minute over the last minutes minutes before now.
func CallStatsSince(ctx context.Context, db DBTX, since time.Time, now time.Time, minutes int) (*CallStats, error) {
	s := &CallStats{States: map[string]int64{}}
	b := &pgx.Batch{}
	b.Queue("SELECT state, count(*) FROM calls WHERE created_at >= $1 GROUP BY state", since)
	b.Queue(`SELECT op, count(*), sum(amount::numeric)::text FROM calls
		WHERE created_at >= $1 AND state = 'paid' GROUP BY op ORDER BY sum(amount::numeric) DESC, op`, since)
	b.Queue(`SELECT c.network, count(*), sum(c.amount::numeric)::text, coalesce(max(g.wei), '0') FROM calls c
		LEFT JOIN (
			SELECT CASE WHEN data ? 's' THEN split_part(data->>'s', ' ', 1) ELSE data->'response'->>'network' END AS network,
				sum(CASE WHEN data ? 's'
					THEN split_part(data->>'s', ' ', 3)::numeric * split_part(data->>'s', ' ', 4)::numeric
					WHEN jsonb_typeof(data->'cost') = 'string'
					THEN split_part(data->>'cost', ' ', 1)::numeric * split_part(data->>'cost', ' ', 2)::numeric
					ELSE (data->'cost'->>'gas_used')::numeric * (data->'cost'->>'gas_price_wei')::numeric END)::text AS wei
			FROM events WHERE type = 'settlement.confirmed' AND created_at >= $1 AND (data ? 's' OR data ? 'cost') GROUP BY 1
		) g ON g.network = c.network
		WHERE c.created_at >= $1 AND c.state = 'paid' GROUP BY c.network ORDER BY sum(c.amount::numeric) DESC, c.network`, since)
	start := now.Truncate(time.Minute).Add(-time.Duration(minutes-1) * time.Minute)
	b.Queue(`SELECT floor(extract(epoch FROM created_at - $1::timestamptz) / 60)::int, count(*) FROM calls
		WHERE created_at >= $1 AND created_at < $2 GROUP BY 1`, start, start.Add(time.Duration(minutes)*time.Minute))
	res := db.SendBatch(ctx, b)
	defer res.Close()

	rows, err := res.Query()
	if err != nil {
		return nil, fmt.Errorf("call stats: %w", err)
	}
	var state string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error { s.States[state] = n; return nil }); err != nil {
		return nil, fmt.Errorf("call stats: states: %w", err)
	}
	for i, dst := range []*[]Revenue{&s.RevenueByOp, &s.RevenueByNetwork} {
		rows, err := res.Query()
		if err != nil {
			return nil, fmt.Errorf("call stats: %w", err)
		}
		*dst, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Revenue, error) {
			var r Revenue
			if i == 0 {
				return r, row.Scan(&r.Key, &r.Calls, &r.Amount)
			}
			return r, row.Scan(&r.Key, &r.Calls, &r.Amount, &r.GasWei)
		})
		if err != nil {
			return nil, fmt.Errorf("call stats: revenue: %w", err)
		}
	}
	s.PerMinute = make([]int64, minutes)
	rows, err = res.Query()
	if err != nil {
		return nil, fmt.Errorf("call stats: %w", err)
	}
	var minute int
	if _, err := pgx.ForEachRow(rows, []any{&minute, &n}, func() error {
		if minute >= 0 && minute < minutes {
			s.PerMinute[minute] = n
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("call stats: per minute: %w", err)
	}
	return s, nil
}

// SettlementFailure is a call whose payment settlement refused.
type SettlementFailure struct {
	CallID    string
	Op        string
	Network   string
	Payer     string
	Reason    string
	CreatedAt time.Time
}

// SettlementFailureList returns the newest calls created since since whose
// settlement failed, at most limit.
func SettlementFailureList(ctx context.Context, db DBTX, since time.Time, limit int) ([]SettlementFailure, error) {
	// The payer of a call admitted with call.paid is in its payment.
	return queryList(ctx, db, "list settlement failures", `SELECT id, op, network, payer, CASE WHEN payer = '' THEN `+callPaid+` END,
			coalesce(settlement->>'errorReason', ''), created_at FROM calls
		WHERE created_at >= $1 AND state = 'unpaid' ORDER BY created_at DESC, id DESC LIMIT $2`,
		scanSettlementFailure, since, limit)
}

// scanSettlementFailure reads a row of SettlementFailureList.
func scanSettlementFailure(row pgx.CollectableRow) (SettlementFailure, error) {
	var f SettlementFailure
	var paid []byte
	if err := row.Scan(&f.CallID, &f.Op, &f.Network, &f.Payer, &paid, &f.Reason, &f.CreatedAt); err != nil {
		return f, err
	}
	if paid != nil {
		var v PaidCall
		if err := decodePaidCall(paid, &v); err != nil {
			return f, fmt.Errorf("call %s: payment: %w", f.CallID, err)
		}
		f.Payer = v.Payment.Payer
	}
	return f, nil
}

// QueueDepth is the backlog of one River queue.
type QueueDepth struct {
	Queue     string
	Available int64
	Scheduled int64
	Retryable int64
	Running   int64
	// OldestAvailable is when the oldest job waiting to run became
	// available, or nil when none waits.
	OldestAvailable *time.Time
}

// QueueDepthList returns the backlog of every queue that has unfinished
// jobs, by queue name. It reads River's job table through the index River
// fetches with.
func QueueDepthList(ctx context.Context, db DBTX) ([]QueueDepth, error) {
	return queryList(ctx, db, "list queue depths", `SELECT queue,
			count(*) FILTER (WHERE state = 'available'),
			count(*) FILTER (WHERE state = 'scheduled'),
			count(*) FILTER (WHERE state = 'retryable'),
			count(*) FILTER (WHERE state = 'running'),
			min(scheduled_at) FILTER (WHERE state = 'available')
		FROM river_job WHERE state IN ('available', 'scheduled', 'retryable', 'running')
		GROUP BY queue ORDER BY queue`,
		func(row pgx.CollectableRow) (QueueDepth, error) {
			var d QueueDepth
			err := row.Scan(&d.Queue, &d.Available, &d.Scheduled, &d.Retryable, &d.Running, &d.OldestAvailable)
			return d, err
		})
}

// IndexFigures are the index's crawl and liveness figures.
type IndexFigures struct {
	Sources    int64
	FullScans  int64
	Resources  int64
	Hosts      int64
	Live       int64
	Dead       int64
	Unmeasured int64
}

// IndexFiguresGet returns the index's figures, or nil when the index tables
// do not exist (the index is not installed in this database).
func IndexFiguresGet(ctx context.Context, db DBTX) (*IndexFigures, error) {
	ok, err := indexInstalled(ctx, db)
	if err != nil || !ok {
		return nil, err
	}
	var f IndexFigures
	err = db.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM index_sources),
			(SELECT coalesce(sum((to_jsonb(s)->>'full_scans')::bigint), 0) FROM index_sources s),
			(SELECT count(*) FROM index_resources),
			count(*),
			count(*) FILTER (WHERE to_jsonb(h)->>'live' = 'true'),
			count(*) FILTER (WHERE to_jsonb(h)->>'live' = 'false'),
			count(*) FILTER (WHERE to_jsonb(h)->'live' IS NULL OR to_jsonb(h)->'live' = 'null')
		FROM index_hosts h`).Scan(&f.Sources, &f.FullScans, &f.Resources, &f.Hosts, &f.Live, &f.Dead, &f.Unmeasured)
	if err != nil {
		return nil, fmt.Errorf("index figures: %w", err)
	}
	return &f, nil
}

// IndexSourceList returns the rows of index_sources as JSON objects whose
// keys keep the table's column order, or nil when the index is not
// installed. The index package owns the table's layout; this read shows
// whatever columns it has.
func IndexSourceList(ctx context.Context, db DBTX) ([]json.RawMessage, error) {
	ok, err := indexInstalled(ctx, db)
	if err != nil || !ok {
		return nil, err
	}
	return queryList(ctx, db, "list index sources", "SELECT row_to_json(s)::text FROM index_sources s ORDER BY 1",
		func(row pgx.CollectableRow) (json.RawMessage, error) {
			var s string
			err := row.Scan(&s)
			return json.RawMessage(s), err
		})
}

// queryList runs query with args and collects its rows with scan; its
// errors start with what.
func queryList[T any](ctx context.Context, db DBTX, what, query string, scan pgx.RowToFunc[T], args ...any) ([]T, error) {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	list, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return list, nil
}

func indexInstalled(ctx context.Context, db DBTX) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT to_regclass('index_sources') IS NOT NULL
		AND to_regclass('index_hosts') IS NOT NULL AND to_regclass('index_resources') IS NOT NULL`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look for the index tables: %w", err)
	}
	return ok, nil
}
