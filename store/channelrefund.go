package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"
)

// ChannelRefundRequested is the data of channel.refund_requested: refund
// CallID (the request's id) of Amount, signed with refund nonce Nonce,
// checked against the channel's charge Charged. Its projection holds the
// channel busy with CallID, and refuses (ErrConflict) a channel another
// call holds or whose charge is not Charged.
type ChannelRefundRequested struct {
	CallID  string `json:"call_id"`
	Amount  string `json:"amount"`
	Nonce   string `json:"nonce"`
	Charged string `json:"charged"`
}

// ChannelRefundSent is the data of channel.refund_sent: refund CallID's
// Transaction, handed to the relayer at At, sent from From with its
// account nonce AccountNonce (no other transaction of From can be mined
// with it: once the chain's nonce of From is past it, this transaction,
// and the keeper's replacements of it, can never be mined). From is
// empty in the records written before it was kept.
type ChannelRefundSent struct {
	CallID       string    `json:"call_id"`
	Transaction  string    `json:"transaction"`
	At           time.Time `json:"at"`
	From         string    `json:"from,omitempty"`
	AccountNonce uint64    `json:"account_nonce,omitempty"`
}

// ChannelRefundFailed is the data of channel.refund_failed: refund CallID
// ended without a refund, for Reason (an x402 batch-settlement error
// code); Transaction is its last transaction, when one was sent.
type ChannelRefundFailed struct {
	CallID      string `json:"call_id"`
	Reason      string `json:"reason"`
	Message     string `json:"message"`
	Transaction string `json:"transaction,omitempty"`
}

// ChannelRefundSeen is the data of channel.refund_seen: a Refunded log
// in Block, transaction Transaction sent by Sender, which paid Amount
// back, and which no refund of the log records; Balance and RefundNonce
// are the channel's on chain as the watcher read them after the log.
type ChannelRefundSeen struct {
	Block       uint64 `json:"block"`
	Transaction string `json:"transaction"`
	Sender      string `json:"sender"`
	Amount      string `json:"amount"`
	Balance     string `json:"balance"`
	RefundNonce string `json:"refund_nonce"`
}

// ChannelRefundUndone is the data of channel.refund_undone: refund
// CallID's transaction Undone, recorded mined, was undone by a
// reorganisation and not mined again; the claim round sent the refund
// again, signed with refund nonce Nonce, in Transaction, which paid
// Amount back (Transaction "" and Amount "0" when it was not made again:
// the chain's refund nonce had moved past Nonce, or the refund would
// revert, or reverted). Balance and RefundNonce are the channel's on
// chain after it, which the row takes: the chain's state wins.
type ChannelRefundUndone struct {
	CallID      string `json:"call_id"`
	Undone      string `json:"undone"`
	Transaction string `json:"transaction"`
	Amount      string `json:"amount"`
	Nonce       string `json:"nonce"`
	Balance     string `json:"balance"`
	RefundNonce string `json:"refund_nonce"`
}

// projectChannelRefundUndone sets the row's balance and refund nonce to
// the chain's; it leaves busy_call alone.
func projectChannelRefundUndone(p projection, v ChannelRefundUndone) (bool, error) {
	network, id, err := channelKey(p.id)
	if err != nil {
		return false, err
	}
	p.b.Queue(`UPDATE channels SET balance = $3::numeric, refund_nonce = $4::numeric, updated_at = $5 WHERE network = $1 AND channel_id = $2`,
		network, id, v.Balance, v.RefundNonce, p.now)
	return false, nil
}

func showChannelRefundUndone(v ChannelRefundUndone) []EventField {
	return append(balanceMoved(v.Transaction, v.Amount, v.Balance),
		EventField{Name: "refund", Value: v.CallID, Kind: FieldMono}, EventField{Name: "undone", Value: v.Undone, Kind: FieldMono})
}

// ChannelRefundMade is a refund transaction the log records mined: the
// refund's id, what it paid back, the refund nonce it was signed with.
type ChannelRefundMade struct {
	CallID string `json:"call_id"`
	Amount string `json:"amount"`
	Nonce  string `json:"nonce"`
}

// ChannelRefundOf returns the refund of the channel id on network that
// the log records mined in transaction tx (channel.refunded, or
// channel.refund_undone when it was the refund's transaction sent again).
func ChannelRefundOf(ctx context.Context, db DBTX, network string, id common.Hash, tx string) (*ChannelRefundMade, error) {
	var data []byte
	err := db.QueryRow(ctx, `SELECT data FROM events WHERE stream = $1 AND type = ANY($2) AND lower(data->>'transaction') = lower($3)
		ORDER BY id DESC LIMIT 1`, ChannelStream(network, id), []string{EventChannelRefunded, EventChannelRefundUndone}, tx).Scan(&data)
	if err != nil {
		return nil, fmt.Errorf("refund %s of channel %s on %s: %w", tx, id.Hex(), network, interpretError(err))
	}
	var out ChannelRefundMade
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("refund %s of channel %s on %s: %w", tx, id.Hex(), network, err)
	}
	return &out, nil
}

// projectChannelRefundSeen sets the row's balance and refund nonce to the
// chain's, when its refund nonce is behind (a row that caught up since
// the watcher read it is left as it is); it leaves busy_call alone (a
// refund seen late frees no channel another call holds).
func projectChannelRefundSeen(p projection, v ChannelRefundSeen) (bool, error) {
	network, id, err := channelKey(p.id)
	if err != nil {
		return false, err
	}
	p.b.Queue(`UPDATE channels SET balance = $3::numeric, refund_nonce = $4::numeric, updated_at = $5
		WHERE network = $1 AND channel_id = $2 AND refund_nonce < $4::numeric`,
		network, id, v.Balance, v.RefundNonce, p.now)
	return false, nil
}

// ChannelRefundTransactions returns the transactions of the refunds the
// log records mined on the channel id on network (channel.refunded,
// channel.refund_seen and channel.refund_undone), in lower-case hex.
func ChannelRefundTransactions(ctx context.Context, db DBTX, network string, id common.Hash) (map[string]bool, error) {
	rows, err := db.Query(ctx, `SELECT lower(data->>'transaction') FROM events WHERE stream = $1 AND type = ANY($2) AND data->>'transaction' <> ''`,
		ChannelStream(network, id), []string{EventChannelRefunded, EventChannelRefundSeen, EventChannelRefundUndone})
	if err != nil {
		return nil, fmt.Errorf("refunds of channel %s on %s: %w", id.Hex(), network, err)
	}
	txs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("refunds of channel %s on %s: %w", id.Hex(), network, err)
	}
	out := make(map[string]bool, len(txs))
	for _, t := range txs {
		out[t] = true
	}
	return out, nil
}

// projectChannelRefundRequested holds the channel busy with the refund.
func projectChannelRefundRequested(p projection, v ChannelRefundRequested) (bool, error) {
	network, id, err := channelKey(p.id)
	if err != nil {
		return false, err
	}
	p.b.Queue(`UPDATE channels SET busy_call = $3, updated_at = $5 WHERE network = $1 AND channel_id = $2 AND busy_call IS NULL AND charged = $4::numeric`,
		network, id, v.CallID, v.Charged, p.now)
	return true, nil
}

// projectChannelRefundFailed frees the channel of the refund.
func projectChannelRefundFailed(p projection, v ChannelRefundFailed) (bool, error) {
	network, id, err := channelKey(p.id)
	if err != nil {
		return false, err
	}
	p.b.Queue(`UPDATE channels SET busy_call = NULL, updated_at = $4 WHERE network = $1 AND channel_id = $2 AND busy_call = $3`,
		network, id, v.CallID, p.now)
	return false, nil
}

// projectChannelRefundSent projects nothing: the log alone keeps the
// transactions of a refund (ChannelRefundGet).
func projectChannelRefundSent(projection, ChannelRefundSent) (bool, error) { return false, nil }

func showChannelRefundRequested(v ChannelRefundRequested) []EventField {
	return []EventField{
		{Name: "refund", Value: v.CallID, Kind: FieldMono},
		{Name: "amount", Value: v.Amount, Kind: FieldAmount},
		{Name: "nonce", Value: v.Nonce},
	}
}

func showChannelRefundSent(v ChannelRefundSent) []EventField {
	out := []EventField{
		{Name: "refund", Value: v.CallID, Kind: FieldMono},
		{Name: "transaction", Value: v.Transaction, Kind: FieldMono},
	}
	if v.From != "" {
		out = append(out, EventField{Name: "from", Value: v.From, Kind: FieldMono},
			EventField{Name: "account nonce", Value: strconv.FormatUint(v.AccountNonce, 10)})
	}
	return out
}

func showChannelRefundFailed(v ChannelRefundFailed) []EventField {
	return []EventField{
		{Name: "refund", Value: v.CallID, Kind: FieldMono},
		{Name: "reason", Value: v.Reason},
		{Name: "transaction", Value: v.Transaction, Kind: FieldMono},
	}
}

func showChannelRefundSeen(v ChannelRefundSeen) []EventField {
	return append(balanceMoved(v.Transaction, v.Amount, v.Balance),
		EventField{Name: "sender", Value: v.Sender, Kind: FieldMono}, EventField{Name: "nonce", Value: v.RefundNonce})
}

// isRefundOutcome reports whether typ ends a refund (its request waits
// for it).
func isRefundOutcome(typ string) bool {
	return typ == EventChannelRefunded || typ == EventChannelRefundFailed
}

// ChannelRefundRecord is what the log holds of one refund of a channel.
type ChannelRefundRecord struct {
	// Requested is its request, nil when none is logged.
	Requested *ChannelRefundRequested
	// Sent are its transactions, in the order sent.
	Sent []ChannelRefundSent
	// Refunded or Failed is its outcome, both nil while it has none.
	Refunded *ChannelRefunded
	Failed   *ChannelRefundFailed
}

// Done reports whether the refund has its outcome.
func (r *ChannelRefundRecord) Done() bool { return r.Refunded != nil || r.Failed != nil }

// ChannelRefundGet returns what the log holds of refund callID of the
// channel id on network (an empty record when nothing).
func ChannelRefundGet(ctx context.Context, db DBTX, network string, id common.Hash, callID string) (*ChannelRefundRecord, error) {
	rows, err := db.Query(ctx, `SELECT type, data FROM events WHERE stream = $1 AND type = ANY($2) AND data->>'call_id' = $3 ORDER BY id`,
		ChannelStream(network, id), []string{EventChannelRefundRequested, EventChannelRefundSent, EventChannelRefunded, EventChannelRefundFailed}, callID)
	if err != nil {
		return nil, fmt.Errorf("get refund %s: %w", callID, err)
	}
	defer rows.Close()
	out := &ChannelRefundRecord{}
	for rows.Next() {
		var typ string
		var data []byte
		if err := rows.Scan(&typ, &data); err != nil {
			return nil, fmt.Errorf("get refund %s: %w", callID, err)
		}
		var target any
		switch typ {
		case EventChannelRefundRequested:
			out.Requested = &ChannelRefundRequested{}
			target = out.Requested
		case EventChannelRefundSent:
			out.Sent = append(out.Sent, ChannelRefundSent{})
			target = &out.Sent[len(out.Sent)-1]
		case EventChannelRefunded:
			out.Refunded = &ChannelRefunded{}
			target = out.Refunded
		case EventChannelRefundFailed:
			out.Failed = &ChannelRefundFailed{}
			target = out.Failed
		}
		if err := json.Unmarshal(data, target); err != nil {
			return nil, fmt.Errorf("get refund %s: %s: %w", callID, typ, err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get refund %s: %w", callID, err)
	}
	return out, nil
}

// ChannelRefundRequest appends refund req of the channel id on network in
// tx, which holds the channel busy with it: ErrConflict when it cannot be
// held (another call holds it, or its charge is not req.Charged).
func ChannelRefundRequest(ctx context.Context, tx pgx.Tx, network string, id common.Hash, req ChannelRefundRequested) error {
	if err := Append(ctx, tx, NewEvent{Stream: ChannelStream(network, id), Type: EventChannelRefundRequested, Data: req}); err != nil {
		return fmt.Errorf("request refund %s of channel %s on %s: %w", req.CallID, id.Hex(), network, err)
	}
	return nil
}
