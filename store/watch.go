package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/x402d/x402d/x402"
)

// Watched is a paid call's settlement to follow until final: the call and
// the transaction and block its settlement.resent names (or its
// settlement.confirmed, as written before settlement.mined, whose
// projection now writes the rows of the settlements it records).
type Watched struct {
	CallID      string
	Network     string
	Transaction string
	Block       x402.SettledBlock
}

// WatchAdd adds each of w's calls to its transaction's row of
// settlement_watch, in one statement: the rows of the settlements just
// recorded in tx.
func WatchAdd(ctx context.Context, tx pgx.Tx, w []Watched) error {
	if len(w) == 0 {
		return nil
	}
	ids, networks, hashes, blocks, blockHashes := make([]string, len(w)), make([]string, len(w)), make([]string, len(w)), make([]int64, len(w)), make([]string, len(w))
	for i, x := range w {
		ids[i], networks[i], hashes[i], blocks[i], blockHashes[i] = x.CallID, x.Network, x.Transaction, int64(x.Block.Number), x.Block.Hash
	}
	_, err := tx.Exec(ctx, `INSERT INTO settlement_watch AS s (network, tx_hash, block, block_hash, calls, amount)
		SELECT w.network, w.tx_hash, max(w.block), max(w.block_hash), array_agg(w.id ORDER BY w.id), sum(c.amount::numeric)
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[]) AS w(id, network, tx_hash, block, block_hash)
		JOIN calls c ON c.id = w.id
		GROUP BY w.network, w.tx_hash
		ON CONFLICT (network, tx_hash) DO UPDATE SET calls = s.calls || EXCLUDED.calls, amount = s.amount + EXCLUDED.amount`,
		ids, networks, hashes, blocks, blockHashes)
	if err != nil {
		return fmt.Errorf("watch %d settlements: %w", len(w), interpretError(err))
	}
	return nil
}

// WatchedTx is a row of settlement_watch: a settlement transaction awaiting
// finality, with the calls it settled.
type WatchedTx struct {
	x402.FollowedTx
	Network string
	Calls   []string
	// Amount is the sum of the calls' prices, in atomic units.
	Amount string
	// GoneSince is when it was first found in no block; zero while it is
	// in one.
	GoneSince time.Time
}

// WatchList returns the watched transactions of network, oldest block
// first, at most limit. It locks nothing: the follower of network holds
// its own lock while it follows them (worker.Follower).
func WatchList(ctx context.Context, db DBTX, network string, limit int) ([]WatchedTx, error) {
	rows, err := db.Query(ctx, `SELECT tx_hash, block, block_hash, calls, amount::text, gone_since FROM settlement_watch
		WHERE network = $1 ORDER BY block, tx_hash LIMIT $2`, network, limit)
	if err != nil {
		return nil, fmt.Errorf("list watched settlements on %s: %w", network, interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (WatchedTx, error) {
		w := WatchedTx{Network: network}
		var block int64
		var gone *time.Time
		err := row.Scan(&w.Transaction, &block, &w.Block.Hash, &w.Calls, &w.Amount, &gone)
		w.Block.Number = uint64(block)
		if gone != nil {
			w.GoneSince = *gone
		}
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("list watched settlements on %s: %w", network, interpretError(err))
	}
	return out, nil
}

// WatchBlockGet returns the block of transaction hash of network while it
// awaits finality (its row of settlement_watch), or ErrNotFound.
func WatchBlockGet(ctx context.Context, db DBTX, network, hash string) (x402.SettledBlock, error) {
	var b x402.SettledBlock
	var number int64
	err := db.QueryRow(ctx, `SELECT block, block_hash FROM settlement_watch WHERE network = $1 AND tx_hash = $2`, network, hash).Scan(&number, &b.Hash)
	if err != nil {
		return x402.SettledBlock{}, fmt.Errorf("block of watched settlement %s: %w", hash, interpretError(err))
	}
	b.Number = uint64(number)
	return b, nil
}

// WatchNetworkList returns the networks with settlements awaiting
// finality.
func WatchNetworkList(ctx context.Context, db DBTX) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT DISTINCT network FROM settlement_watch ORDER BY network`)
	if err != nil {
		return nil, fmt.Errorf("list watched networks: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list watched networks: %w", interpretError(err))
	}
	return out, nil
}

// WatchFinal records that the transactions final of network are final: one
// settlement.final event for all of them, and their rows deleted, in tx.
// block is the newest final block.
func WatchFinal(ctx context.Context, tx pgx.Tx, network string, block uint64, final []WatchedTx) error {
	if len(final) == 0 {
		return nil
	}
	data := SettlementFinal{Block: block, Transactions: make([]string, len(final))}
	for i, w := range final {
		data.Transactions[i] = w.Transaction
	}
	var calls int
	var amount string
	// The rows are locked in the order Append writes them
	// (projectionOrder): the bytes of their hashes.
	err := tx.QueryRow(ctx, `WITH l AS (SELECT tx_hash FROM settlement_watch WHERE network = $1 AND tx_hash = ANY($2) ORDER BY tx_hash COLLATE "C" FOR UPDATE),
		d AS (DELETE FROM settlement_watch s USING l WHERE s.network = $1 AND s.tx_hash = l.tx_hash RETURNING s.calls, s.amount)
		SELECT coalesce(sum(cardinality(calls)), 0)::int, coalesce(sum(amount), 0)::text FROM d`, network, data.Transactions).Scan(&calls, &amount)
	if err != nil {
		return fmt.Errorf("final settlements on %s: %w", network, interpretError(err))
	}
	data.Calls, data.Amount = calls, amount
	return Append(ctx, tx, NewEvent{Stream: ChainStream(network), Type: EventSettlementFinal, Data: data})
}

// WatchMove records that transaction hash of network is now mined in block
// (a reorganisation moved it), and no longer gone.
func WatchMove(ctx context.Context, tx pgx.Tx, network, hash string, block x402.SettledBlock) error {
	_, err := tx.Exec(ctx, `UPDATE settlement_watch SET block = $3, block_hash = $4, gone_since = NULL WHERE network = $1 AND tx_hash = $2`,
		network, hash, int64(block.Number), block.Hash)
	if err != nil {
		return fmt.Errorf("move watched settlement %s: %w", hash, interpretError(err))
	}
	return nil
}

// WatchGone records that transaction hash of network is in no block since
// at, unless it was found gone before.
func WatchGone(ctx context.Context, tx pgx.Tx, network, hash string, at time.Time) error {
	_, err := tx.Exec(ctx, `UPDATE settlement_watch SET gone_since = coalesce(gone_since, $3) WHERE network = $1 AND tx_hash = $2`, network, hash, at)
	if err != nil {
		return fmt.Errorf("mark watched settlement %s gone: %w", hash, interpretError(err))
	}
	return nil
}

// WatchDrop takes call callID out of the row of transaction hash of
// network (its settlement was made again elsewhere, or lost), deleting the
// row when no call is left.
func WatchDrop(ctx context.Context, tx pgx.Tx, network, hash, callID string) error {
	b := &pgx.Batch{}
	b.Queue(`UPDATE settlement_watch s SET calls = array_remove(s.calls, $3),
			amount = s.amount - (SELECT amount::numeric FROM calls WHERE id = $3)
		WHERE s.network = $1 AND s.tx_hash = $2 AND $3 = ANY(s.calls)`, network, hash, callID)
	b.Queue(`DELETE FROM settlement_watch WHERE network = $1 AND tx_hash = $2 AND cardinality(calls) = 0`, network, hash)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("drop call %s from watched settlement %s: %w", callID, hash, interpretError(err))
	}
	return nil
}

// Finality is the revenue of one network by the finality of its
// settlements: paid calls whose settlement awaits finality (Pending), and
// calls whose settlement a reorganisation undid for good (Lost). The paid
// calls neither pending nor lost are final.
type Finality struct {
	Network       string
	PendingCalls  int64
	PendingAmount string
	LostCalls     int64
	LostAmount    string
}

// FinalityList returns, per network with any, the paid calls pending
// finality and the calls lost, with their amounts in atomic units.
func FinalityList(ctx context.Context, db DBTX) ([]Finality, error) {
	rows, err := db.Query(ctx, `SELECT network, sum(pending_calls)::bigint, sum(pending)::text, sum(lost_calls)::bigint, sum(lost)::text FROM (
			SELECT network, cardinality(calls) AS pending_calls, amount AS pending, 0 AS lost_calls, 0 AS lost FROM settlement_watch
			UNION ALL
			SELECT network, 0, 0, calls, amount FROM settlement_losses
		) f GROUP BY network ORDER BY network`)
	if err != nil {
		return nil, fmt.Errorf("list finality: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Finality, error) {
		var f Finality
		err := row.Scan(&f.Network, &f.PendingCalls, &f.PendingAmount, &f.LostCalls, &f.LostAmount)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("list finality: %w", interpretError(err))
	}
	return out, nil
}

// watchFollowLock is the key of the advisory lock of the follower of
// network's settlement transactions (WatchFollowLock).
func watchFollowLock(network string) int64 {
	h := fnv.New64a()
	h.Write([]byte("x402d finality " + network))
	return int64(h.Sum64())
}

// WatchFollowLock takes, when no other session holds it, the lock of
// following network's settlement transactions on conn, which must be one
// session (a connection, not a pool), and reports whether it did: the
// session holding it follows them, the others skip the network that
// round. The lock is held until WatchFollowUnlock or the session's end.
func WatchFollowLock(ctx context.Context, conn DBTX, network string) (bool, error) {
	var mine bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", watchFollowLock(network)).Scan(&mine); err != nil {
		return false, fmt.Errorf("lock the follower of %s: %w", network, err)
	}
	return mine, nil
}

// WatchFollowUnlock lets go of the lock WatchFollowLock took on conn.
func WatchFollowUnlock(ctx context.Context, conn DBTX, network string) error {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", watchFollowLock(network)); err != nil {
		return fmt.Errorf("unlock the follower of %s: %w", network, err)
	}
	return nil
}
