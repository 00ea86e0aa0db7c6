package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"

	"github.com/x402d/x402d/x402"
)

// ChannelSettleStream returns the stream of the settlements of what
// receiver claimed in token on network: channel/<network>/settle/<receiver>/<token>,
// lower case.
func ChannelSettleStream(network string, receiver, token common.Address) string {
	return "channel/" + network + "/settle/" + strings.ToLower(receiver.Hex()) + "/" + strings.ToLower(token.Hex())
}

// ChannelClaimed is the data of channel.claimed: the channel's claimed
// total on chain after Transaction ("" when the chain showed it claimed
// already, by a transaction whose record was lost). Undone, when set, is
// the claim transaction a reorganisation undid: TotalClaimed is then what
// the chain shows without it, which may be lower than the row's.
type ChannelClaimed struct {
	Transaction  string `json:"transaction"`
	TotalClaimed string `json:"total_claimed"`
	Undone       string `json:"undone,omitempty"`
}

// ChannelSettled is the data of channel.settled: Amount of Token claimed
// by Receiver went to it in Transaction, mined in Block (BlockHash) with
// GasUsed. Its projection is the settle's channel_claims row, followed
// until final.
type ChannelSettled struct {
	Transaction string         `json:"transaction"`
	Receiver    common.Address `json:"receiver"`
	Token       common.Address `json:"token"`
	Amount      string         `json:"amount"`
	Block       uint64         `json:"block"`
	BlockHash   string         `json:"block_hash"`
	GasUsed     uint64         `json:"gas_used"`
}

// ChannelWithdrawInitiated is the data of channel.withdraw_initiated: the
// payer's WithdrawInitiated log in Block, transaction Transaction; At is
// when the withdrawal started (unix s), FinalizeAfter when the payer may
// take the funds.
type ChannelWithdrawInitiated struct {
	Block         uint64 `json:"block"`
	Transaction   string `json:"transaction"`
	At            uint64 `json:"at"`
	FinalizeAfter uint64 `json:"finalize_after"`
	Amount        string `json:"amount"`
}

// ChannelWithdrawFinalized is the data of channel.withdraw_finalized: the
// payer's WithdrawFinalized log in Block, transaction Transaction, which
// gave it Amount back; Balance is the channel's balance on chain as the
// watcher read it after the log.
type ChannelWithdrawFinalized struct {
	Block       uint64 `json:"block"`
	Transaction string `json:"transaction"`
	Amount      string `json:"amount"`
	Balance     string `json:"balance"`
}

// ChannelClaimRefused is the data of channel.claim_refused: the claim of
// the channel's charge Charged failed its simulation for Reason.
type ChannelClaimRefused struct {
	Charged string `json:"charged"`
	Reason  string `json:"reason"`
}

// projectChannelClaimed sets the row's claimed total: raised to the
// chain's, or (Undone) set back to it. The charges left unclaimed date
// from the oldest of them: the first charge of the channel's stream
// (channel.charged, or the charge a channel.adopted took up) whose
// cumulative total exceeds the claimed one. A claim that moved nothing
// keeps the date; the events are searched from it (all of them for a
// claim undone, which may leave older charges unclaimed again), and when
// retention removed them the date is kept.
func projectChannelClaimed(p projection, v ChannelClaimed) (bool, error) {
	network, id, err := channelKey(p.id)
	if err != nil {
		return false, err
	}
	p.b.Queue(`UPDATE channels SET
			total_claimed = CASE WHEN $4 THEN $3::numeric ELSE greatest(total_claimed, $3::numeric) END,
			unclaimed_since = CASE WHEN charged > CASE WHEN $4 THEN $3::numeric ELSE greatest(total_claimed, $3::numeric) END THEN
				CASE WHEN NOT $4 AND $3::numeric <= total_claimed THEN coalesce(unclaimed_since, $5::timestamptz)
				ELSE coalesce((SELECT min(e.created_at) FROM events e
					WHERE e.stream = $6 AND e.type = ANY($7) AND (e.data->>'charged')::numeric > $3::numeric
						AND e.created_at >= coalesce(CASE WHEN NOT $4 THEN unclaimed_since END, '-infinity')), unclaimed_since, $5::timestamptz) END END,
			claim_refused_charged = NULL, claim_refused_reason = NULL, updated_at = $5
		WHERE network = $1 AND channel_id = $2`,
		network, id, v.TotalClaimed, v.Undone != "", p.now, "channel/"+p.id, []string{EventChannelCharged, EventChannelAdopted})
	return true, nil
}

func projectChannelWithdrawInitiated(p projection, v ChannelWithdrawInitiated) (bool, error) {
	network, id, err := channelKey(p.id)
	if err != nil {
		return false, err
	}
	p.b.Queue(`UPDATE channels SET withdraw_requested_at = $3, updated_at = $4 WHERE network = $1 AND channel_id = $2`,
		network, id, int64(v.At), p.now)
	return true, nil
}

// projectChannelWithdrawFinalized clears the row's withdrawal and sets
// its balance to the chain's.
func projectChannelWithdrawFinalized(p projection, v ChannelWithdrawFinalized) (bool, error) {
	network, id, err := channelKey(p.id)
	if err != nil {
		return false, err
	}
	p.b.Queue(`UPDATE channels SET withdraw_requested_at = 0, balance = $3::numeric, updated_at = $4 WHERE network = $1 AND channel_id = $2`,
		network, id, v.Balance, p.now)
	return true, nil
}

func projectChannelClaimRefused(p projection, v ChannelClaimRefused) (bool, error) {
	network, id, err := channelKey(p.id)
	if err != nil {
		return false, err
	}
	p.b.Queue(`UPDATE channels SET claim_refused_charged = $3::numeric, claim_refused_reason = $4, updated_at = $5
		WHERE network = $1 AND channel_id = $2`, network, id, v.Charged, v.Reason, p.now)
	return true, nil
}

// projectChannelSettled writes the settle's channel_claims row; the
// network is the stream's (channel/<network>/settle/...).
func projectChannelSettled(p projection, v ChannelSettled) (bool, error) {
	network, _, ok := strings.Cut(p.id, "/settle/")
	if !ok {
		network = p.id[:max(0, strings.LastIndexByte(p.id, '/'))]
	}
	p.b.Queue(`INSERT INTO channel_claims (network, transaction, kind, receiver, token, amount, gas_used, block_number, block_hash, created_at, updated_at)
		VALUES ($1, $2, 'settle', $3, $4, $5::numeric, $6, $7, $8, $9, $9)
		ON CONFLICT (network, transaction) DO UPDATE SET block_number = EXCLUDED.block_number, block_hash = EXCLUDED.block_hash,
			state = 'pending', gone_since = NULL, updated_at = EXCLUDED.updated_at`,
		network, v.Transaction, v.Receiver.Bytes(), v.Token.Bytes(), v.Amount, int64(v.GasUsed), int64(v.Block), v.BlockHash, p.now)
	return false, nil
}

func showChannelClaimed(v ChannelClaimed) []EventField {
	fs := []EventField{
		{Name: "transaction", Value: v.Transaction, Kind: FieldMono},
		{Name: "claimed", Value: v.TotalClaimed, Kind: FieldAmount},
	}
	if v.Undone != "" {
		fs = append(fs, EventField{Name: "undone", Value: v.Undone, Kind: FieldMono})
	}
	return fs
}

func showChannelSettled(v ChannelSettled) []EventField {
	return []EventField{
		{Name: "transaction", Value: v.Transaction, Kind: FieldMono},
		{Name: "receiver", Value: v.Receiver.Hex(), Kind: FieldMono},
		{Name: "amount", Value: v.Amount, Kind: FieldAmount},
	}
}

func showChannelWithdrawInitiated(v ChannelWithdrawInitiated) []EventField {
	return []EventField{
		{Name: "transaction", Value: v.Transaction, Kind: FieldMono},
		{Name: "amount", Value: v.Amount, Kind: FieldAmount},
		{Name: "finalize_after", Value: time.Unix(int64(v.FinalizeAfter), 0).UTC().Format(time.RFC3339)},
	}
}

func showChannelWithdrawFinalized(v ChannelWithdrawFinalized) []EventField {
	return balanceMoved(v.Transaction, v.Amount, v.Balance)
}

func showChannelClaimRefused(v ChannelClaimRefused) []EventField {
	return []EventField{
		{Name: "charged", Value: v.Charged, Kind: FieldAmount},
		{Name: "reason", Value: v.Reason},
	}
}

// ChannelToClaim is a channel with charges unclaimed.
type ChannelToClaim struct {
	Channel
	// WithdrawRequestedAt is when its payer started a timed withdrawal
	// (unix s), 0 if none.
	WithdrawRequestedAt uint64
}

// ChannelListToClaim returns up to limit channels of network with charges
// unclaimed and a voucher, those with a timed withdrawal started first,
// then the oldest unclaimed; only the urgent ones (a withdrawal started,
// or named in also) when urgentOnly. Channels whose claim was refused at
// their present charge, and those named in except (claimed already by
// the round asking), are left out.
func ChannelListToClaim(ctx context.Context, db DBTX, network string, limit int, urgentOnly bool, also, except []common.Hash) ([]ChannelToClaim, error) {
	raw := func(hs []common.Hash) [][]byte {
		out := make([][]byte, len(hs))
		for i, h := range hs {
			out[i] = h.Bytes()
		}
		return out
	}
	rows, err := db.Query(ctx, `SELECT channel_id, `+channelColumns+` FROM channels
		WHERE network = $1 AND unclaimed_since IS NOT NULL AND signed IS NOT NULL AND charged > total_claimed
			AND claim_refused_charged IS DISTINCT FROM charged
			AND (NOT $3 OR withdraw_requested_at > 0 OR channel_id = ANY($4)) AND NOT channel_id = ANY($5)
		ORDER BY withdraw_requested_at > 0 OR channel_id = ANY($4) DESC, unclaimed_since, channel_id
		LIMIT $2`, network, limit, urgentOnly, raw(also), raw(except))
	if err != nil {
		return nil, fmt.Errorf("list channels to claim on %s: %w", network, err)
	}
	defer rows.Close()
	var out []ChannelToClaim
	for rows.Next() {
		var raw []byte
		c, err := scanChannel(rowWithID{rows, &raw}, common.Hash{})
		if err != nil {
			return nil, fmt.Errorf("list channels to claim on %s: %w", network, err)
		}
		c.State.ChannelID = common.BytesToHash(raw)
		out = append(out, ChannelToClaim{Channel: *c, WithdrawRequestedAt: c.State.OnChain.WithdrawRequestedAt})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list channels to claim on %s: %w", network, err)
	}
	return out, nil
}

// rowWithID reads a row whose first column is a channel id (into id) and
// the others channelColumns.
type rowWithID struct {
	row pgx.Row
	id  *[]byte
}

func (r rowWithID) Scan(dest ...any) error { return r.row.Scan(append([]any{r.id}, dest...)...) }

// ChannelsUnclaimed is what a network's channels charged and did not claim
// yet: the claim policy's inputs.
type ChannelsUnclaimed struct {
	// Channels is how many channels have charges unclaimed.
	Channels int
	// Amount is their unclaimed total, in atomic units.
	Amount *big.Int
	// Oldest is the unclaimed_since of the oldest; zero when none.
	Oldest time.Time
	// Urgent is how many of them have a timed withdrawal started.
	Urgent int
}

// ChannelUnclaimed returns what network's channels charged and did not
// claim, leaving out those whose claim was refused at their present charge.
func ChannelUnclaimed(ctx context.Context, db DBTX, network string) (*ChannelsUnclaimed, error) {
	var u ChannelsUnclaimed
	var amount string
	var oldest *time.Time
	err := db.QueryRow(ctx, `SELECT count(*), coalesce(sum(charged - total_claimed), 0)::text, min(unclaimed_since),
			count(*) FILTER (WHERE withdraw_requested_at > 0)
		FROM channels WHERE network = $1 AND unclaimed_since IS NOT NULL AND signed IS NOT NULL AND charged > total_claimed
			AND claim_refused_charged IS DISTINCT FROM charged`, network).Scan(&u.Channels, &amount, &oldest, &u.Urgent)
	if err != nil {
		return nil, fmt.Errorf("unclaimed charges on %s: %w", network, err)
	}
	u.Amount, _ = new(big.Int).SetString(amount, 10)
	if oldest != nil {
		u.Oldest = *oldest
	}
	return &u, nil
}

// ChannelNetworkList returns the networks that have channels.
func ChannelNetworkList(ctx context.Context, db DBTX) ([]string, error) {
	rows, err := db.Query(ctx, "SELECT DISTINCT network FROM channels ORDER BY network")
	if err != nil {
		return nil, fmt.Errorf("list channel networks: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list channel networks: %w", err)
	}
	return out, nil
}

// ChannelReceiver is a receiver and a token of a network's channels: what
// one settle sends.
type ChannelReceiver struct {
	Receiver, Token common.Address
}

// ChannelReceiverList returns the receivers and tokens of network's
// channels that have claimed something.
func ChannelReceiverList(ctx context.Context, db DBTX, network string) ([]ChannelReceiver, error) {
	rows, err := db.Query(ctx, `SELECT DISTINCT receiver, token FROM channels WHERE network = $1 AND total_claimed > 0 ORDER BY receiver, token`, network)
	if err != nil {
		return nil, fmt.Errorf("list channel receivers on %s: %w", network, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ChannelReceiver, error) {
		var r, t []byte
		err := row.Scan(&r, &t)
		return ChannelReceiver{Receiver: common.BytesToAddress(r), Token: common.BytesToAddress(t)}, err
	})
	if err != nil {
		return nil, fmt.Errorf("list channel receivers on %s: %w", network, err)
	}
	return out, nil
}

// ChannelHeld returns which of ids are channels of network the seller
// holds.
func ChannelHeld(ctx context.Context, db DBTX, network string, ids []common.Hash) (map[common.Hash]bool, error) {
	raw := make([][]byte, len(ids))
	for i, h := range ids {
		raw[i] = h.Bytes()
	}
	rows, err := db.Query(ctx, "SELECT channel_id FROM channels WHERE network = $1 AND channel_id = ANY($2)", network, raw)
	if err != nil {
		return nil, fmt.Errorf("channels held on %s: %w", network, err)
	}
	ours, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, fmt.Errorf("channels held on %s: %w", network, err)
	}
	out := make(map[common.Hash]bool, len(ours))
	for _, b := range ours {
		out[common.BytesToHash(b)] = true
	}
	return out, nil
}

// Kinds of channel_claims rows.
const (
	ClaimKindClaim  = "claim"
	ClaimKindSettle = "settle"
	// ClaimKindRefund is a cooperative refund's transaction (migration
	// 030), recorded with its channel.refunded.
	ClaimKindRefund = "refund"
)

// ChannelClaimTx is a channel_claims row: a claim, settle or refund
// transaction of the seller's, mined, followed until final.
type ChannelClaimTx struct {
	x402.FollowedTx
	Network string
	// Kind is ClaimKindClaim, ClaimKindSettle or ClaimKindRefund.
	Kind string
	// Channels are the channels a claim carried, or the one a refund
	// paid back from.
	Channels []common.Hash
	// Receiver and Token are a settle's.
	Receiver, Token common.Address
	// Amount is what it claimed, settled or paid back, in all.
	Amount  *big.Int
	GasUsed uint64
	// GoneSince is when it was first found in no block; zero while it is
	// in one.
	GoneSince time.Time
}

// ChannelClaimRecord records tx, mined, in dbtx: a claim's or a refund's
// channel_claims row, with events (the channel.claimed of its channels,
// the refund's channel.refunded or channel.refund_undone) appended in the
// same transaction; a settle as its channel.settled event, whose
// projection is its row.
func ChannelClaimRecord(ctx context.Context, dbtx pgx.Tx, tx *ChannelClaimTx, events ...NewEvent) error {
	if tx.Kind == ClaimKindSettle {
		events = append(events, NewEvent{Stream: ChannelSettleStream(tx.Network, tx.Receiver, tx.Token), Type: EventChannelSettled,
			Data: ChannelSettled{Transaction: tx.Transaction, Receiver: tx.Receiver, Token: tx.Token, Amount: tx.Amount.String(),
				Block: tx.Block.Number, BlockHash: tx.Block.Hash, GasUsed: tx.GasUsed}})
	} else {
		ids := make([][]byte, len(tx.Channels))
		for i, h := range tx.Channels {
			ids[i] = h.Bytes()
		}
		_, err := dbtx.Exec(ctx, `INSERT INTO channel_claims (network, transaction, kind, channels, amount, gas_used, block_number, block_hash)
			VALUES ($1, $2, $3, $4, $5::numeric, $6, $7, $8)
			ON CONFLICT (network, transaction) DO UPDATE SET block_number = EXCLUDED.block_number, block_hash = EXCLUDED.block_hash,
				state = 'pending', gone_since = NULL, updated_at = now()`,
			tx.Network, tx.Transaction, tx.Kind, ids, tx.Amount.String(), int64(tx.GasUsed), int64(tx.Block.Number), tx.Block.Hash)
		if err != nil {
			return fmt.Errorf("record %s %s on %s: %w", tx.Kind, tx.Transaction, tx.Network, interpretError(err))
		}
	}
	if err := Append(ctx, dbtx, events...); err != nil {
		return fmt.Errorf("record %s %s on %s: %w", tx.Kind, tx.Transaction, tx.Network, err)
	}
	return nil
}

// ChannelClaimPendingList returns up to limit claim, settle and refund
// transactions of network not final yet, oldest block first.
func ChannelClaimPendingList(ctx context.Context, db DBTX, network string, limit int) ([]ChannelClaimTx, error) {
	rows, err := db.Query(ctx, `SELECT transaction, kind, channels, receiver, token, amount::text, gas_used, block_number, block_hash, gone_since
		FROM channel_claims WHERE network = $1 AND state = 'pending' ORDER BY block_number, transaction LIMIT $2`, network, limit)
	if err != nil {
		return nil, fmt.Errorf("list pending claims on %s: %w", network, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ChannelClaimTx, error) {
		t := ChannelClaimTx{Network: network}
		var ids [][]byte
		var receiver, token []byte
		var amount string
		var gas, block int64
		var gone *time.Time
		if err := row.Scan(&t.Transaction, &t.Kind, &ids, &receiver, &token, &amount, &gas, &block, &t.Block.Hash, &gone); err != nil {
			return t, err
		}
		for _, id := range ids {
			t.Channels = append(t.Channels, common.BytesToHash(id))
		}
		t.Receiver, t.Token = common.BytesToAddress(receiver), common.BytesToAddress(token)
		t.Amount, _ = new(big.Int).SetString(amount, 10)
		t.GasUsed, t.Block.Number = uint64(gas), uint64(block)
		if gone != nil {
			t.GoneSince = *gone
		}
		return t, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list pending claims on %s: %w", network, err)
	}
	return out, nil
}

// ChannelClaimFinal marks network's transactions txs final.
func ChannelClaimFinal(ctx context.Context, db DBTX, network string, txs []string) error {
	if _, err := db.Exec(ctx, `UPDATE channel_claims SET state = 'final', gone_since = NULL, updated_at = now()
		WHERE network = $1 AND transaction = ANY($2) AND state = 'pending'`, network, txs); err != nil {
		return fmt.Errorf("claims final on %s: %w", network, err)
	}
	return nil
}

// ChannelClaimMove records that network's transaction tx was mined again
// in block after a reorganisation.
func ChannelClaimMove(ctx context.Context, db DBTX, network, tx string, block x402.SettledBlock) error {
	if _, err := db.Exec(ctx, `UPDATE channel_claims SET block_number = $3, block_hash = $4, gone_since = NULL, updated_at = now()
		WHERE network = $1 AND transaction = $2`, network, tx, int64(block.Number), block.Hash); err != nil {
		return fmt.Errorf("claim %s moved on %s: %w", tx, network, err)
	}
	return nil
}

// ChannelClaimGone records that network's transaction tx is in no block
// since at (kept when already recorded); with undone, it is gone for good:
// what it did is made again, and it counts no more.
func ChannelClaimGone(ctx context.Context, db DBTX, network, tx string, at time.Time, undone bool) error {
	state := "pending"
	if undone {
		state = "gone"
	}
	if _, err := db.Exec(ctx, `UPDATE channel_claims SET gone_since = coalesce(gone_since, $3), state = $4, updated_at = now()
		WHERE network = $1 AND transaction = $2`, network, tx, at, state); err != nil {
		return fmt.Errorf("claim %s gone on %s: %w", tx, network, err)
	}
	return nil
}

// ChannelClaimCursor returns the next block the WithdrawInitiated watcher
// of network reads, false when it never read.
func ChannelClaimCursor(ctx context.Context, db DBTX, network string) (uint64, bool, error) {
	var next int64
	err := db.QueryRow(ctx, "SELECT next_block FROM channel_claim_cursors WHERE network = $1", network).Scan(&next)
	if err == pgx.ErrNoRows {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("withdrawal cursor of %s: %w", network, err)
	}
	return uint64(next), true, nil
}

// ChannelClaimCursorSet sets the next block the watcher of network reads.
func ChannelClaimCursorSet(ctx context.Context, db DBTX, network string, next uint64) error {
	if _, err := db.Exec(ctx, `INSERT INTO channel_claim_cursors (network, next_block) VALUES ($1, $2)
		ON CONFLICT (network) DO UPDATE SET next_block = EXCLUDED.next_block, updated_at = now()`, network, int64(next)); err != nil {
		return fmt.Errorf("set withdrawal cursor of %s: %w", network, err)
	}
	return nil
}

// channelClaimLock is the key of the session advisory lock of the claims
// of network (within the schema).
func channelClaimLock(network string) int32 {
	h := fnv.New32a()
	h.Write([]byte("x402d channel claims " + network))
	return int32(h.Sum32())
}

// ChannelClaimLock takes, when no other session holds it, the lock of the
// claims of network on conn (one session), and reports whether it did: one
// process at a time claims a network's channels.
func ChannelClaimLock(ctx context.Context, conn DBTX, network string) (bool, error) {
	var mine bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, hashtext(current_schema()))", channelClaimLock(network)).Scan(&mine); err != nil {
		return false, fmt.Errorf("lock the claims of %s: %w", network, err)
	}
	return mine, nil
}

// ChannelClaimUnlock lets go of the lock ChannelClaimLock took on conn.
func ChannelClaimUnlock(ctx context.Context, conn DBTX, network string) error {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1, hashtext(current_schema()))", channelClaimLock(network)); err != nil {
		return fmt.Errorf("unlock the claims of %s: %w", network, err)
	}
	return nil
}

// ChannelReceiverSet records the claimed and settled totals on chain of
// receiver's token on network, as read or made by a claim round.
func ChannelReceiverSet(ctx context.Context, db DBTX, network string, r ChannelReceiver, claimed, settled *big.Int) error {
	if _, err := db.Exec(ctx, `INSERT INTO channel_receivers (network, receiver, token, claimed, settled) VALUES ($1, $2, $3, $4::numeric, $5::numeric)
		ON CONFLICT (network, receiver, token) DO UPDATE SET claimed = EXCLUDED.claimed, settled = EXCLUDED.settled, updated_at = now()`,
		network, r.Receiver.Bytes(), r.Token.Bytes(), claimed.String(), settled.String()); err != nil {
		return fmt.Errorf("set receiver %s totals on %s: %w", r.Receiver.Hex(), network, err)
	}
	return nil
}

// ChannelTotals is the state of a network's channels for an operator.
type ChannelTotals struct {
	Network string
	// Channels is how many channels the seller holds.
	Channels int
	// Unclaimed is what they charged and did not claim; OldestUnclaimed
	// the unclaimed_since of the oldest (zero when none).
	Unclaimed       *big.Int
	OldestUnclaimed time.Time
	// Claimed is the channels' claimed totals on chain, as last known
	// (a claim a reorganisation undid is taken back).
	Claimed *big.Int
	// Settled is what the receivers' settles paid them, as the claim
	// rounds last read it from the chain.
	Settled *big.Int
	// Refunded is what cooperative refunds returned to the payers: their
	// channel.refunded and channel.refund_undone events, less those whose
	// transaction a reorganisation undid (a channel_claims row gone).
	Refunded *big.Int
}

// ChannelTotalsList returns each network's channel totals.
func ChannelTotalsList(ctx context.Context, db DBTX) ([]ChannelTotals, error) {
	rows, err := db.Query(ctx, `WITH ch AS (
			SELECT network, count(*) AS n, coalesce(sum(charged - total_claimed) FILTER (WHERE charged > total_claimed), 0) AS unclaimed,
				min(unclaimed_since) AS oldest, sum(total_claimed) AS claimed
			FROM channels GROUP BY network),
		st AS (SELECT network, sum(settled) AS settled FROM channel_receivers GROUP BY network),
		rf AS (
			SELECT split_part(e.stream, '/', 2) AS network, sum((e.data->>'amount')::numeric) AS refunded
			FROM (SELECT stream, data FROM events WHERE type = 'channel.refunded'
				UNION ALL SELECT stream, data FROM events WHERE type = 'channel.refund_undone') e
			WHERE NOT EXISTS (SELECT 1 FROM channel_claims c WHERE c.network = split_part(e.stream, '/', 2)
				AND c.transaction = e.data->>'transaction' AND c.state = 'gone')
			GROUP BY 1)
		SELECT ch.network, ch.n, ch.unclaimed::text, ch.oldest, ch.claimed::text, coalesce(st.settled, 0)::text, coalesce(rf.refunded, 0)::text
		FROM ch LEFT JOIN st USING (network) LEFT JOIN rf USING (network) ORDER BY ch.network`)
	if err != nil {
		return nil, fmt.Errorf("channel totals: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ChannelTotals, error) {
		var t ChannelTotals
		var unclaimed, claimed, settled, refunded string
		var oldest *time.Time
		if err := row.Scan(&t.Network, &t.Channels, &unclaimed, &oldest, &claimed, &settled, &refunded); err != nil {
			return t, err
		}
		if oldest != nil {
			t.OldestUnclaimed = *oldest
		}
		t.Unclaimed, _ = new(big.Int).SetString(unclaimed, 10)
		t.Claimed, _ = new(big.Int).SetString(claimed, 10)
		t.Settled, _ = new(big.Int).SetString(settled, 10)
		t.Refunded, _ = new(big.Int).SetString(refunded, 10)
		return t, nil
	})
	if err != nil {
		return nil, fmt.Errorf("channel totals: %w", err)
	}
	return out, nil
}
