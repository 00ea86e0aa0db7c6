package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ChainCursor is where the index's chain reader is on a network: the last
// block read and its hash (a reorganisation that replaced it is seen when
// the hash changes), and where and when reading began.
type ChainCursor struct {
	Network      string
	Block        uint64
	BlockHash    string
	StartedBlock uint64
	StartedAt    time.Time
}

// ChainCursorGet returns the cursor of network, or ErrNotFound.
func ChainCursorGet(ctx context.Context, db DBTX, network string) (*ChainCursor, error) {
	c := ChainCursor{Network: network}
	err := db.QueryRow(ctx, `SELECT block, block_hash, started_block, started_at FROM index_chain_cursors WHERE network = $1`, network).
		Scan(&c.Block, &c.BlockHash, &c.StartedBlock, &c.StartedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("chain cursor of %s: %w", network, err)
	}
	return &c, nil
}

// ChainCursorSet records c (its start only when it is new), read at now.
func ChainCursorSet(ctx context.Context, db DBTX, c *ChainCursor, now time.Time) error {
	_, err := db.Exec(ctx, `INSERT INTO index_chain_cursors (network, block, block_hash, read_at, started_block, started_at)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (network) DO UPDATE SET block = excluded.block, block_hash = excluded.block_hash, read_at = excluded.read_at`,
		c.Network, c.Block, c.BlockHash, now, c.StartedBlock, c.StartedAt)
	if err != nil {
		return fmt.Errorf("set chain cursor of %s: %w", c.Network, err)
	}
	return nil
}

// hostPayTos is the query of the payTo addresses the index's live
// resources name on networks $1, by host: (host, network, pay_to), an EVM
// address in lower-case hex, a Solana address in base58 as listed (it is
// case-sensitive).
const hostPayTos = `SELECT DISTINCT r.host, a->>'network' AS network,
		CASE WHEN a->>'network' LIKE 'eip155:%' THEN lower(a->>'pay_to') ELSE a->>'pay_to' END AS pay_to
	FROM index_resources r
	CROSS JOIN LATERAL jsonb_array_elements(CASE jsonb_typeof(r.accepts) WHEN 'array' THEN r.accepts ELSE '[]'::jsonb END) a
	WHERE NOT r.retired AND a->>'network' = ANY($1::text[]) AND (
		(a->>'network' LIKE 'eip155:%' AND a->>'pay_to' ~* '^0x[0-9a-f]{40}$') OR
		(a->>'network' LIKE 'solana:%' AND a->>'pay_to' ~ '^[1-9A-HJ-NP-Za-km-z]{32,44}$'))`

// ChainPayTos returns the payTo addresses (EVM: lower-case hex; Solana:
// base58) that the index's live resources name on network.
func ChainPayTos(ctx context.Context, db DBTX, network string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT DISTINCT pay_to FROM (`+hostPayTos+`) m ORDER BY pay_to`, []string{network})
	if err != nil {
		return nil, fmt.Errorf("payTo addresses on %s: %w", network, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("payTo addresses on %s: %w", network, err)
	}
	return out, nil
}

// ChainWatch records that payTos are read on network from the block after
// since (those already read keep their start).
func ChainWatch(ctx context.Context, db DBTX, network string, payTos []string, since uint64, now time.Time) error {
	_, err := db.Exec(ctx, `INSERT INTO index_chain_watch (network, pay_to, since_block, since_at)
		SELECT $1, p, $3, $4 FROM unnest($2::text[]) p ON CONFLICT DO NOTHING`, network, payTos, since, now)
	if err != nil {
		return fmt.Errorf("watch payTo addresses on %s: %w", network, err)
	}
	return nil
}

// Transfer is one USDC transfer into a watched payTo: on an EVM network a
// Transfer log, its addresses in lower-case hex; on Solana a Transfer or
// TransferChecked instruction into the payTo's token account, its
// addresses in base58 (Block is the slot, BlockHash empty, LogIndex the
// instruction's place in its transaction, Sender the fee payer, EIP3009
// whether the fee payer is not the payer). Amount is in atomic units
// (decimal text).
type Transfer struct {
	Network   string
	TxHash    string
	LogIndex  uint
	Block     uint64
	BlockHash string
	At        time.Time
	Payer     string
	PayTo     string
	Amount    string
	// Sender is the transaction's from: whoever sent it (a facilitator, a
	// relayer, the seller, the payer).
	Sender string
	// EIP3009 is whether the same transaction used the payer's EIP-3009
	// authorization (AuthorizationUsed by the payer).
	EIP3009 bool
}

// TransfersAdd records ts (a transfer already recorded is kept) and each
// payer's first payment of its payTo.
func TransfersAdd(ctx context.Context, db DBTX, ts []Transfer) error {
	if len(ts) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, t := range ts {
		b.Queue(`INSERT INTO index_transfers (network, tx_hash, log_index, block, block_hash, at, payer, pay_to, amount, sender, eip3009)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::numeric, $10, $11) ON CONFLICT DO NOTHING`,
			t.Network, t.TxHash, t.LogIndex, t.Block, t.BlockHash, t.At, t.Payer, t.PayTo, t.Amount, t.Sender, t.EIP3009)
		b.Queue(`INSERT INTO index_chain_payers (network, pay_to, payer, first_block) VALUES ($1, $2, $3, $4)
			ON CONFLICT (network, pay_to, payer) DO UPDATE SET first_block = least(index_chain_payers.first_block, excluded.first_block)`,
			t.Network, t.PayTo, t.Payer, t.Block)
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record transfers: %w", err)
	}
	return nil
}

// ChainRewind forgets what was read of network after block (a
// reorganisation replaced it): the transfers and first payments there, and
// the fundings found there, to be looked for again. It returns the payTo
// addresses whose transfers it removed.
func ChainRewind(ctx context.Context, db DBTX, network string, block uint64) ([]string, error) {
	rows, err := db.Query(ctx, `WITH gone AS (DELETE FROM index_transfers WHERE network = $1 AND block > $2 RETURNING pay_to)
		SELECT DISTINCT pay_to FROM gone`, network, block)
	if err != nil {
		return nil, fmt.Errorf("rewind %s to %d: %w", network, block, err)
	}
	payTos, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("rewind %s to %d: %w", network, block, err)
	}
	if _, err := db.Exec(ctx, `DELETE FROM index_chain_payers WHERE network = $1 AND first_block > $2`, network, block); err != nil {
		return nil, fmt.Errorf("rewind payers of %s to %d: %w", network, block, err)
	}
	if _, err := db.Exec(ctx, `UPDATE index_chain_payers SET checked = false, funded_block = NULL WHERE network = $1 AND funded_block > $2`, network, block); err != nil {
		return nil, fmt.Errorf("rewind fundings of %s to %d: %w", network, block, err)
	}
	return payTos, nil
}

// ChainPayer is a payer of a payTo: its first payment's block, and the
// block of the payTo's last transfer to it before (0: none).
type ChainPayer struct {
	PayTo       string
	Payer       string
	FirstBlock  uint64
	FundedBlock uint64
}

// ChainPayersUnchecked returns up to limit payers of network not yet
// looked at for a funding by their payTo, the oldest first.
func ChainPayersUnchecked(ctx context.Context, db DBTX, network string, limit int) ([]ChainPayer, error) {
	rows, err := db.Query(ctx, `SELECT pay_to, payer, first_block, 0::bigint FROM index_chain_payers
		WHERE network = $1 AND NOT checked ORDER BY first_block, pay_to, payer LIMIT $2`, network, limit)
	if err != nil {
		return nil, fmt.Errorf("unchecked payers of %s: %w", network, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ChainPayer])
	if err != nil {
		return nil, fmt.Errorf("unchecked payers of %s: %w", network, err)
	}
	return out, nil
}

// ChainPayersChecked records ps looked at: funded by their payTo when
// FundedBlock is not 0.
func ChainPayersChecked(ctx context.Context, db DBTX, network string, ps []ChainPayer) error {
	b := &pgx.Batch{}
	for _, p := range ps {
		var funded *uint64
		if p.FundedBlock > 0 {
			funded = &p.FundedBlock
		}
		b.Queue(`UPDATE index_chain_payers SET checked = true, funded_block = $4 WHERE network = $1 AND pay_to = $2 AND payer = $3`,
			network, p.PayTo, p.Payer, funded)
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record payers of %s checked: %w", network, err)
	}
	return nil
}

// EvidencePayTo is a payTo address of a key (a host, or the address
// itself) whose figures EvidenceCompute counts.
type EvidencePayTo struct {
	Key, Network, PayTo string
}

// EvidenceRaw is what EvidenceCompute counts of one key over its watched
// payTo addresses: transfers, volumes (atomic units, decimal text) and
// distinct payers over the last 24 hours, 7 and 30 days, EIP-3009
// settlements over 30 days; the 30 days' top payer and its share of the
// volume (nil without volume), how many of the 30 days' payers a payTo of
// the key had sent USDC before their first payment (nil while one of them
// is not looked at yet: unknown), and how many of the 30 days' transfers
// came from one of the key's own payTo addresses; and the senders of the
// 30 days' transfers. MeasuredSince is when the first of its addresses
// began to be read, FullySince when the last did, CountedAt when the
// figures were counted (the end of their windows).
type EvidenceRaw struct {
	Key             string
	MeasuredSince   time.Time
	FullySince      time.Time
	CountedAt       time.Time
	Networks        []string
	Transactions24h int64
	Transactions7d  int64
	Transactions30d int64
	Settlements30d  int64
	Volume24h       string
	Volume7d        string
	Volume30d       string
	Payers24h       int64
	Payers7d        int64
	Payers30d       int64
	TopPayer        *string
	TopPayerShare   *float64
	FundedPayers    *int64
	SelfPayments    int64
	LastTransferAt  *time.Time
	Senders         []EvidenceSenderRaw
}

// The spans of the evidence's windows: the intervals evidenceFigures and
// EvidenceCompute count over.
const (
	EvidenceSpan24h = 24 * time.Hour
	EvidenceSpan7d  = 7 * 24 * time.Hour
	EvidenceSpan30d = 30 * 24 * time.Hour
)

// Complete reports whether the window of span that ended when e was
// counted was read whole: every address of its key read since the window
// began (EvidenceWindow.Complete).
func (e *EvidenceRaw) Complete(span time.Duration) bool {
	return !e.FullySince.After(e.CountedAt.Add(-span))
}

// EvidenceSenderRaw is one sender of a key's transfers over 30 days: its
// address, whether it is one of the key's own payTo addresses (Own) or the
// payer of every transfer it sent (Payer), and its transfers and volume.
type EvidenceSenderRaw struct {
	Address      string
	Own          bool
	Payer        bool
	Transactions int64
	Volume       string
}

// evidenceFigures is the query of the figures of each key ($1 keys, $2
// networks, $3 addresses) as of $4. w are the watched payTo addresses of
// each key; g the key's transfers within 30 days (those read after its
// address's since_block: a reorganisation may read earlier ones again),
// read once, from index_transfers_evidence alone (migration 033), and
// counted by payTo, payer and sender: every figure is summed from g. pv
// sums them by payer (the distinct payers of each window: those whose last
// payment is in it; the top payer: the most volume, the lowest address on
// a tie), the senders by sender (Own: one of the key's addresses; Payer:
// the payer of every transfer it sent). fp are the payers funded by one of
// the key's addresses, few, read first off index_chain_payers_funded
// (materialized, so that they are not looked for payer by payer);
// unchecked the keys with a payer of the window not looked at for a
// funding yet, read off index_chain_payers_unchecked (fundedPayers). meta
// gives each key's first and last address's start (MeasuredSince,
// FullySince).
const evidenceFigures = `WITH w AS (
		SELECT DISTINCT x.key, x.network, x.pay_to, cw.since_at, cw.since_block
		FROM unnest($1::text[], $2::text[], $3::text[]) AS x(key, network, pay_to)
		JOIN index_chain_watch cw ON cw.network = x.network AND cw.pay_to = x.pay_to
	),
	g AS (
		SELECT w.key, tr.payer, tr.sender,
			count(*) FILTER (WHERE tr.at > $4::timestamptz - interval '24 hours') n24,
			count(*) FILTER (WHERE tr.at > $4::timestamptz - interval '7 days') n7,
			count(*) n30,
			count(*) FILTER (WHERE tr.eip3009) st30,
			sum(tr.amount) FILTER (WHERE tr.at > $4::timestamptz - interval '24 hours') v24,
			sum(tr.amount) FILTER (WHERE tr.at > $4::timestamptz - interval '7 days') v7,
			sum(tr.amount) v30,
			max(tr.at) last_at
		FROM w JOIN index_transfers tr ON tr.network = w.network AND tr.pay_to = w.pay_to AND tr.block > w.since_block
		WHERE tr.at > $4::timestamptz - interval '30 days'
		GROUP BY w.key, tr.payer, tr.sender
	),
	agg AS (
		SELECT key, sum(n24) tx24, sum(n7) tx7, sum(n30) tx30, sum(st30) st30,
			coalesce(sum(v24), 0) v24, coalesce(sum(v7), 0) v7, sum(v30) v30, max(last_at) last_at
		FROM g GROUP BY key
	),
	pv AS (SELECT key, payer, sum(n30) n, sum(v30) v, max(last_at) last_at FROM g GROUP BY key, payer),
	payers AS (
		SELECT key,
			count(*) FILTER (WHERE last_at > $4::timestamptz - interval '24 hours') p24,
			count(*) FILTER (WHERE last_at > $4::timestamptz - interval '7 days') p7,
			count(*) p30,
			sum(n) FILTER (WHERE EXISTS (SELECT 1 FROM w WHERE w.key = pv.key AND w.pay_to = pv.payer)) self30
		FROM pv GROUP BY key
	),
	top AS (
		SELECT pv.key, min(pv.payer) payer, max(pv.v) v
		FROM pv JOIN (SELECT key, max(v) v FROM pv GROUP BY key) m ON m.key = pv.key AND m.v = pv.v
		GROUP BY pv.key
	),
	fp AS MATERIALIZED (
		SELECT DISTINCT w.key, p.payer FROM w
		JOIN index_chain_payers p ON p.network = w.network AND p.pay_to = w.pay_to AND p.funded_block IS NOT NULL
	),
	funded AS (SELECT fp.key, count(*) n FROM fp JOIN pv ON pv.key = fp.key AND pv.payer = fp.payer GROUP BY fp.key),
	unchecked AS (
		SELECT DISTINCT w.key FROM w
		JOIN index_chain_payers p ON p.network = w.network AND p.pay_to = w.pay_to AND NOT p.checked
		JOIN pv ON pv.key = w.key AND pv.payer = p.payer
	),
	senders AS (
		SELECT key, jsonb_agg(jsonb_build_object('Address', sender,
				'Own', EXISTS (SELECT 1 FROM w WHERE w.key = s.key AND w.pay_to = s.sender),
				'Payer', payer, 'Transactions', n, 'Volume', v::text) ORDER BY n DESC, sender) list
		FROM (SELECT key, sender, bool_and(sender = payer) payer, sum(n30) n, sum(v30) v FROM g GROUP BY key, sender) s
		GROUP BY key
	),
	meta AS (SELECT key, min(since_at) since, max(since_at) fully, array_agg(DISTINCT network ORDER BY network) networks FROM w GROUP BY key)
	SELECT m.key, m.since, m.fully, m.networks,
		coalesce(a.tx24, 0)::bigint, coalesce(a.tx7, 0)::bigint, coalesce(a.tx30, 0)::bigint, coalesce(a.st30, 0)::bigint,
		coalesce(a.v24, 0)::text, coalesce(a.v7, 0)::text, coalesce(a.v30, 0)::text,
		coalesce(py.p24, 0), coalesce(py.p7, 0), coalesce(py.p30, 0),
		top.payer, CASE WHEN a.v30 > 0 THEN (top.v / a.v30)::float8 END,
		` + fundedPayers + `, coalesce(py.self30, 0)::bigint, a.last_at, coalesce(s.list, '[]')
	FROM meta m LEFT JOIN agg a USING (key) LEFT JOIN payers py USING (key) LEFT JOIN top USING (key)
		LEFT JOIN funded f USING (key) LEFT JOIN unchecked u USING (key) LEFT JOIN senders s USING (key)`

// fundedPayers is the wash signal's payers funded by the seller (f, the
// funded of evidenceFigures): unknown (null) while one of the window's
// payers has not been looked at for a funding yet (u, its unchecked, read
// off index_chain_payers_unchecked; an EVM run looks at a batch of them,
// on Solana a payTo's payers once its walk is done), never counted as not
// funded; 0 when the window has no payer.
const fundedPayers = `CASE WHEN u.key IS NOT NULL THEN NULL ELSE coalesce(f.n, 0) END`

// EvidenceCompute counts the figures of each key of payTos as of now,
// over those of its addresses the chain reader watches; a key with none is
// left out (not measured).
func EvidenceCompute(ctx context.Context, db DBTX, payTos []EvidencePayTo, now time.Time) (map[string]*EvidenceRaw, error) {
	keys, networks, addrs := make([]string, len(payTos)), make([]string, len(payTos)), make([]string, len(payTos))
	for i, p := range payTos {
		keys[i], networks[i], addrs[i] = p.Key, p.Network, p.PayTo
	}
	rows, err := db.Query(ctx, evidenceFigures, keys, networks, addrs, now)
	if err != nil {
		return nil, fmt.Errorf("evidence figures: %w", err)
	}
	defer rows.Close()
	out := map[string]*EvidenceRaw{}
	for rows.Next() {
		e := EvidenceRaw{CountedAt: now}
		if err := rows.Scan(&e.Key, &e.MeasuredSince, &e.FullySince, &e.Networks, &e.Transactions24h, &e.Transactions7d, &e.Transactions30d, &e.Settlements30d,
			&e.Volume24h, &e.Volume7d, &e.Volume30d, &e.Payers24h, &e.Payers7d, &e.Payers30d,
			&e.TopPayer, &e.TopPayerShare, &e.FundedPayers, &e.SelfPayments, &e.LastTransferAt, &e.Senders); err != nil {
			return nil, fmt.Errorf("evidence figures: %w", err)
		}
		out[e.Key] = &e
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("evidence figures: %w", err)
	}
	return out, nil
}

// HostPayTos returns the watched payTo addresses of hosts, each with its
// host as key.
func HostPayTos(ctx context.Context, db DBTX, hosts, networks []string) ([]EvidencePayTo, error) {
	rows, err := db.Query(ctx, `SELECT m.host, m.network, m.pay_to FROM (`+hostPayTos+`) m
		JOIN index_chain_watch w ON w.network = m.network AND w.pay_to = m.pay_to
		WHERE m.host = ANY($2) ORDER BY 1, 2, 3`, networks, hosts)
	if err != nil {
		return nil, fmt.Errorf("payTo addresses of hosts: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[EvidencePayTo])
	if err != nil {
		return nil, fmt.Errorf("payTo addresses of hosts: %w", err)
	}
	return out, nil
}

// EvidenceHostsDue returns up to limit hosts whose figures are to be
// counted again: those naming one of payTos (whose transfers changed), and
// those with a watched payTo whose figures were never counted or were
// counted before stale; and the hosts whose figures are kept although
// they name no watched payTo any more. The payTo addresses of every host
// are read once (m): most of the cost, as it reads the options of every
// live resource.
func EvidenceHostsDue(ctx context.Context, db DBTX, networks, payTos []string, stale time.Time, limit int) (due, gone []string, err error) {
	err = db.QueryRow(ctx, `WITH m AS MATERIALIZED (
			SELECT DISTINCT m.host, m.pay_to FROM (`+hostPayTos+`) m
			JOIN index_chain_watch w ON w.network = m.network AND w.pay_to = m.pay_to
		)
		SELECT ARRAY(SELECT DISTINCT m.host FROM m LEFT JOIN index_host_evidence e ON e.host = m.host
				WHERE m.pay_to = ANY($2) OR e.host IS NULL OR e.refreshed_at < $3 LIMIT $4),
			ARRAY(SELECT e.host FROM index_host_evidence e WHERE NOT EXISTS (SELECT 1 FROM m WHERE m.host = e.host))`,
		networks, payTos, stale, limit).Scan(&due, &gone)
	if err != nil {
		return nil, nil, fmt.Errorf("hosts due: %w", err)
	}
	return due, gone, nil
}

// HostEvidenceRow is the kept figures of a host (index_host_evidence):
// EvidenceRaw with its senders as JSON.
type HostEvidenceRow struct {
	EvidenceRaw
	SendersJSON []byte
}

// HostEvidenceSave keeps the figures of hosts counted at now, and forgets
// those of gone.
func HostEvidenceSave(ctx context.Context, db DBTX, rows []HostEvidenceRow, gone []string, now time.Time) error {
	b := &pgx.Batch{}
	for _, r := range rows {
		b.Queue(`INSERT INTO index_host_evidence (host, measured_since, fully_measured_since, networks, transactions_24h, transactions_7d, transactions_30d, settlements_30d,
				volume_24h, volume_7d, volume_30d, payers_24h, payers_7d, payers_30d, top_payer, top_payer_share_30d,
				funded_payers_30d, self_payments_30d, senders_30d, last_transfer_at, refreshed_at)
			VALUES ($1, $2, $21, $3, $4, $5, $6, $7, $8::numeric, $9::numeric, $10::numeric, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)
			ON CONFLICT (host) DO UPDATE SET measured_since = excluded.measured_since, fully_measured_since = excluded.fully_measured_since,
				networks = excluded.networks,
				transactions_24h = excluded.transactions_24h, transactions_7d = excluded.transactions_7d, transactions_30d = excluded.transactions_30d,
				settlements_30d = excluded.settlements_30d, volume_24h = excluded.volume_24h, volume_7d = excluded.volume_7d, volume_30d = excluded.volume_30d,
				payers_24h = excluded.payers_24h, payers_7d = excluded.payers_7d, payers_30d = excluded.payers_30d, top_payer = excluded.top_payer,
				top_payer_share_30d = excluded.top_payer_share_30d, funded_payers_30d = excluded.funded_payers_30d,
				self_payments_30d = excluded.self_payments_30d, senders_30d = excluded.senders_30d,
				last_transfer_at = excluded.last_transfer_at, refreshed_at = excluded.refreshed_at`,
			r.Key, r.MeasuredSince, r.Networks, r.Transactions24h, r.Transactions7d, r.Transactions30d, r.Settlements30d,
			r.Volume24h, r.Volume7d, r.Volume30d, r.Payers24h, r.Payers7d, r.Payers30d, r.TopPayer, r.TopPayerShare,
			r.FundedPayers, r.SelfPayments, r.SendersJSON, r.LastTransferAt, now, r.FullySince)
	}
	if len(gone) > 0 {
		b.Queue(`DELETE FROM index_host_evidence WHERE host = ANY($1)`, gone)
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("keep host figures: %w", err)
	}
	return nil
}

// HostEvidenceGet returns the kept figures of hosts, by host; a host
// without is not measured.
func HostEvidenceGet(ctx context.Context, db DBTX, hosts []string) (map[string]*HostEvidenceRow, error) {
	rows, err := db.Query(ctx, `SELECT host, measured_since, fully_measured_since, refreshed_at, networks, transactions_24h, transactions_7d, transactions_30d, settlements_30d,
			volume_24h::text, volume_7d::text, volume_30d::text, payers_24h, payers_7d, payers_30d, top_payer, top_payer_share_30d,
			funded_payers_30d, self_payments_30d, senders_30d, last_transfer_at
		FROM index_host_evidence WHERE host = ANY($1)`, hosts)
	if err != nil {
		return nil, fmt.Errorf("host figures: %w", err)
	}
	defer rows.Close()
	out := map[string]*HostEvidenceRow{}
	for rows.Next() {
		var r HostEvidenceRow
		if err := rows.Scan(&r.Key, &r.MeasuredSince, &r.FullySince, &r.CountedAt, &r.Networks, &r.Transactions24h, &r.Transactions7d, &r.Transactions30d, &r.Settlements30d,
			&r.Volume24h, &r.Volume7d, &r.Volume30d, &r.Payers24h, &r.Payers7d, &r.Payers30d, &r.TopPayer, &r.TopPayerShare,
			&r.FundedPayers, &r.SelfPayments, &r.SendersJSON, &r.LastTransferAt); err != nil {
			return nil, fmt.Errorf("host figures: %w", err)
		}
		out[r.Key] = &r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("host figures: %w", err)
	}
	return out, nil
}

// chainReaderLock is the first key of the session advisory lock a run of
// the index's chain reader holds ("x4ch" in ASCII); the second is the hash
// of the schema, so that services sharing a database in schemas of their
// own (the tests) do not wait for one another.
const chainReaderLock int32 = 0x78346368

// ChainReaderLock takes the chain reader's lock on a connection of pool
// and returns the function that lets it go, or ok false when another run
// holds it.
func ChainReaderLock(ctx context.Context, pool *pgxpool.Pool) (unlock func(), ok bool, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("chain reader lock: %w", err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext(current_schema()))`, chainReaderLock).Scan(&ok); err != nil || !ok {
		conn.Release()
		if err != nil {
			return nil, false, fmt.Errorf("chain reader lock: %w", err)
		}
		return nil, false, nil
	}
	return func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1, hashtext(current_schema()))`, chainReaderLock); err != nil {
			// A connection that cannot unlock is closed: its lock goes with it.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		conn.Release()
	}, true, nil
}

// Evidence is what the chain says of a seller (a host over its payTo
// addresses, or one payTo address): the USDC transfers into its addresses
// that the chain reader read on Networks since MeasuredSince. Volumes are
// USDC as decimal text (6 decimals). A host or address with no address on
// a network read has no Evidence (null: not measured); a figure of 0 was
// measured, and a figure not known yet is null.
type Evidence struct {
	// Networks are the networks its addresses were read on.
	Networks []string `json:"networks"`
	// MeasuredSince is when the reader began reading its first address:
	// nothing earlier is counted.
	MeasuredSince time.Time `json:"measured_since"`
	// FullyMeasuredSince is when the reader began reading the last of its
	// addresses (MeasuredSince when it has one): a window that began
	// before it counts only part of its span (EvidenceWindow.Complete).
	FullyMeasuredSince time.Time `json:"fully_measured_since"`
	// Last24h, Last7d and Last30d count the transfers of each window.
	Last24h EvidenceWindow `json:"last_24h"`
	Last7d  EvidenceWindow `json:"last_7d"`
	Last30d EvidenceWindow `json:"last_30d"`
	// Settlements30d is how many of the 30 days' transfers were
	// settlements as x402's exact scheme makes them, the others being plain
	// transfers: on an EVM network EIP-3009 settlements (the transaction
	// used the payer's authorization), on Solana transfers whose fee payer
	// is not the payer (the payer signed, another sent).
	Settlements30d int64 `json:"settlements_30d"`
	// Senders are who sent the 30 days' transfers, the most frequent
	// first (at most 10).
	Senders []EvidenceSender `json:"senders_30d"`
	// Wash is what suggests the 30 days' payments are the seller's own.
	Wash Wash `json:"wash_30d"`
	// LastTransferAt is the latest transfer of the 30 days; null: none.
	LastTransferAt *time.Time `json:"last_transfer_at"`
}

// EvidenceWindow is the count of one window: transfers, their volume and
// their distinct payers, and whether the window was read whole.
type EvidenceWindow struct {
	Transactions int64  `json:"transactions"`
	VolumeUSDC   string `json:"volume_usdc"`
	Payers       int64  `json:"payers"`
	// Complete is whether every address of the seller was read over the
	// whole window (FullyMeasuredSince at or before its start); false: the
	// figures count only from when each address began to be read, less
	// than the window spans.
	Complete bool `json:"complete"`
}

// EvidenceSender is one sender of a seller's transfers: its class, the
// facilitator's name when known, and its transfers and their volume.
type EvidenceSender struct {
	Address      string `json:"address"`
	Class        string `json:"class"`
	Name         string `json:"name,omitempty"`
	Transactions int64  `json:"transactions"`
	VolumeUSDC   string `json:"volume_usdc"`
}

// Wash is the wash signal of a seller over 30 days: the share of its volume
// from its top payer (null without volume), how many of its payers had
// received USDC from one of its payTo addresses before their first payment
// (funded by the seller; null while one of them is not looked at yet), and
// how many transfers came from one of its own payTo addresses (payer equal
// to payee).
type Wash struct {
	TopPayer      *string  `json:"top_payer"`
	TopPayerShare *float64 `json:"top_payer_share"`
	FundedPayers  *int64   `json:"funded_payers"`
	SelfPayments  int64    `json:"self_payments"`
}
