package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SvmCursor is where the index's chain reader is in the transactions of a
// Solana payTo's token account (index_svm_cursors): read through Until
// (the newest signature read; "" before any), and a walk down from the
// newest signatures under way (Top, the newest it found, and Before, the
// oldest it read; both "" when none is). Known is false for a payTo not
// read yet (no cursor).
type SvmCursor struct {
	Network, PayTo, Account string
	Until, Top, Before      string
	Known                   bool
}

// SvmPayTosDue returns up to limit payTo addresses the index's live
// resources name on the Solana network, each with its cursor: those never
// read first, then the least recently read.
func SvmPayTosDue(ctx context.Context, db DBTX, network string, limit int) ([]SvmCursor, error) {
	rows, err := db.Query(ctx, `SELECT $2::text, p.pay_to, coalesce(c.account, ''), coalesce(c.until_signature, ''),
			coalesce(c.top_signature, ''), coalesce(c.before_signature, ''), c.pay_to IS NOT NULL
		FROM (SELECT DISTINCT pay_to FROM (`+hostPayTos+`) m) p
		LEFT JOIN index_svm_cursors c ON c.network = $2 AND c.pay_to = p.pay_to
		ORDER BY c.read_at NULLS FIRST, p.pay_to LIMIT $3`, []string{network}, network, limit)
	if err != nil {
		return nil, fmt.Errorf("payTo addresses due on %s: %w", network, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[SvmCursor])
	if err != nil {
		return nil, fmt.Errorf("payTo addresses due on %s: %w", network, err)
	}
	return out, nil
}

// SvmCursorSet records c, read at now.
func SvmCursorSet(ctx context.Context, db DBTX, c *SvmCursor, now time.Time) error {
	_, err := db.Exec(ctx, `INSERT INTO index_svm_cursors (network, pay_to, account, until_signature, top_signature, before_signature, read_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (network, pay_to) DO UPDATE SET account = excluded.account, until_signature = excluded.until_signature,
			top_signature = excluded.top_signature, before_signature = excluded.before_signature, read_at = excluded.read_at`,
		c.Network, c.PayTo, c.Account, c.Until, c.Top, c.Before, now)
	if err != nil {
		return fmt.Errorf("set cursor of %s on %s: %w", c.PayTo, c.Network, err)
	}
	return nil
}

// SvmFunding is USDC a Solana payTo's token account sent to another owner
// (Recipient), at Slot: the Position-th instruction of transaction
// Signature.
type SvmFunding struct {
	Network, Signature string
	Position           int
	PayTo, Recipient   string
	Slot               uint64
}

// SvmFundingsAdd records fs (one already recorded is kept).
func SvmFundingsAdd(ctx context.Context, db DBTX, fs []SvmFunding) error {
	if len(fs) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, f := range fs {
		b.Queue(`INSERT INTO index_svm_fundings (network, signature, position, pay_to, recipient, slot) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT DO NOTHING`, f.Network, f.Signature, f.Position, f.PayTo, f.Recipient, f.Slot)
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record fundings: %w", err)
	}
	return nil
}

// SvmPayersChecked records the payers of payTo on the Solana network not
// looked at yet as looked at for a funding: funded at the latest slot at
// or before their first payment in which payTo sent them USDC, if any.
// It is called once every transaction up to the newest read is read (a
// walk down the signatures reads the newest first).
func SvmPayersChecked(ctx context.Context, db DBTX, network, payTo string) error {
	_, err := db.Exec(ctx, `UPDATE index_chain_payers p SET checked = true, funded_block = (
			SELECT max(f.slot) FROM index_svm_fundings f
			WHERE f.network = p.network AND f.pay_to = p.pay_to AND f.recipient = p.payer AND f.slot <= p.first_block)
		WHERE p.network = $1 AND p.pay_to = $2 AND NOT p.checked`, network, payTo)
	if err != nil {
		return fmt.Errorf("record payers of %s on %s checked: %w", payTo, network, err)
	}
	return nil
}
