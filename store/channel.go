package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/jackc/pgx/v5"

	"github.com/x402d/x402d/x402/evm/channel"
)

// Channel event types (x402's batch-settlement scheme), appended to the
// channel's stream (ChannelStream; channel.settled to the receiver's,
// ChannelSettleStream): the payments' (deposits, charges, refunds) and
// the seller's claims' (worker/claim.go: claims of vouchers, settlements
// of what was claimed to the receiver, a payer's timed withdrawal, a claim
// refused by its simulation). Each one's projection is the change of the
// channel's channels row (migration 026) or the channel_claims row
// (migration 027) it records: the event log is the record, the rows its
// projection.
const (
	// EventChannelOpened: the channel's first deposit was mined; the row
	// is created with the balance the chain shows after it.
	EventChannelOpened = "channel.opened"
	// EventChannelAdopted: a channel the seller had no row of (its state
	// lost, or a row put by hand: ChannelPut) is taken up from the state
	// the chain shows, charged what was claimed on chain (never what the
	// client's voucher says).
	EventChannelAdopted = "channel.adopted"
	// EventChannelDeposited: a top-up was mined; the row's balance is the
	// chain's after it.
	EventChannelDeposited = "channel.deposited"
	// EventChannelCharged: a call paid by a voucher (or a deposit's
	// voucher) was charged its price, with the call's settlement in the
	// same transaction; the voucher becomes the channel's last.
	EventChannelCharged = "channel.charged"
	// EventChannelRefundRequested: a refund payload was verified; the
	// channel was held busy by the refund and its job inserted, in the
	// same transaction (channelrefund.go; worker/refund.go makes it).
	EventChannelRefundRequested = "channel.refund_requested"
	// EventChannelRefundSent: the refund job handed a refundWithSignature
	// transaction to the relayer (one per send: a refund whose
	// transaction never came is sent again).
	EventChannelRefundSent = "channel.refund_sent"
	// EventChannelRefunded: a cooperative refund was mined (the refund
	// job's outcome); the channel is freed of it and the request that
	// waits for it woken (Notifies).
	EventChannelRefunded = "channel.refunded"
	// EventChannelRefundFailed: the refund was refused (its run reverts,
	// its transaction reverted) or no transaction of it was mined within
	// the refund job's bound; the channel is freed of it and the request
	// woken.
	EventChannelRefundFailed = "channel.refund_failed"
	// EventChannelRefundSeen: the claim round's watcher read a Refunded
	// log of the channel that no refund of the seller's log records (a
	// refund recorded failed whose signature was mined later, by anyone):
	// the row's balance and refund nonce are the chain's after it; the
	// channel's holder, if any, keeps it (channelrefund.go).
	EventChannelRefundSeen = "channel.refund_seen"
	// EventChannelRefundUndone: a refund recorded mined (channel.refunded)
	// was undone by a reorganisation and not mined again within the claim
	// round's GoneAfter: the round sent it again (its new transaction, or
	// none when it would revert); the row's balance and refund nonce are
	// the chain's after it (channelrefund.go).
	EventChannelRefundUndone = "channel.refund_undone"
	// EventChannelClaimed: a claimWithSignature carrying the channel was
	// mined (or the chain showed its claim made already): the row's
	// total_claimed is the chain's.
	EventChannelClaimed = "channel.claimed"
	// EventChannelSettled: settle(receiver, token) was mined; appended to
	// the receiver's stream (ChannelSettleStream).
	EventChannelSettled = "channel.settled"
	// EventChannelWithdrawInitiated: the payer started a timed withdrawal
	// (WithdrawInitiated); the channel is claimed at once.
	EventChannelWithdrawInitiated = "channel.withdraw_initiated"
	// EventChannelWithdrawFinalized: the payer finished its timed
	// withdrawal (WithdrawFinalized): the channel has no withdrawal
	// pending, and its balance is the chain's after it.
	EventChannelWithdrawFinalized = "channel.withdraw_finalized"
	// EventChannelClaimRefused: the channel's claim failed its simulation
	// and was left out; it is tried again once its charge moves.
	EventChannelClaimRefused = "channel.claim_refused"
)

// ChannelStream returns the event stream of the channel id on network:
// channel/<network>/<0x id lower case>.
func ChannelStream(network string, id common.Hash) string {
	return "channel/" + network + "/" + strings.ToLower(id.Hex())
}

// Channel is a channels row: a channel's record as the seller keeps it.
type Channel struct {
	// Network is the channel's CAIP-2 network.
	Network string
	// State is the channel's configuration, id, charges, last voucher and
	// state on chain as last known.
	State channel.State
	// UnclaimedSince is when the charges first exceeded what was claimed
	// on chain (nil when all is claimed).
	UnclaimedSince *time.Time
	// BusyCall is the call running on the channel, "" when none.
	BusyCall string
	// CreatedAt and UpdatedAt are the row's times.
	CreatedAt, UpdatedAt time.Time
}

// ChannelOpened is the data of channel.opened and channel.deposited: the
// deposit's transaction, its amount and the channel's balance on chain
// after it. Config is channel.opened's only (the row's configuration).
type ChannelOpened struct {
	Config      *channel.Config `json:"config,omitempty"`
	CallID      string          `json:"call_id"`
	Transaction string          `json:"transaction"`
	Amount      string          `json:"amount"`
	Balance     string          `json:"balance"`
	// TotalClaimed is what was claimed on chain when the deposit was
	// mined (channel.opened: the row's total_claimed; 0 for a new channel).
	TotalClaimed string `json:"total_claimed,omitempty"`
}

// ChannelAdopted is the data of channel.adopted: the whole record taken
// up. BusyCall, when set, is the call admitted with the adoption (the
// row is created busy with it).
type ChannelAdopted struct {
	Config              channel.Config `json:"config"`
	Charged             string         `json:"charged"`
	Signed              string         `json:"signed,omitempty"`
	Signature           hexutil.Bytes  `json:"signature,omitempty"`
	Balance             string         `json:"balance"`
	TotalClaimed        string         `json:"total_claimed"`
	WithdrawRequestedAt uint64         `json:"withdraw_requested_at,omitempty"`
	RefundNonce         string         `json:"refund_nonce"`
	BusyCall            string         `json:"busy_call,omitempty"`
	// Replace, when set, replaces the row the channel has, unless a call
	// holds it (ChannelPut); otherwise a row the channel has is kept and
	// the event refused (ChannelAdopt).
	Replace bool `json:"replace,omitempty"`
}

// ChannelCharged is the data of channel.charged: call CallID charged
// Amount, the channel's cumulative charge then Charged, under the voucher
// (Signed, Signature). Its projection refuses (ErrConflict) a row whose
// charge is not Charged-Amount, whose voucher would not cover it, or that
// another call holds busy.
type ChannelCharged struct {
	CallID    string        `json:"call_id"`
	Amount    string        `json:"amount"`
	Charged   string        `json:"charged"`
	Signed    string        `json:"signed"`
	Signature hexutil.Bytes `json:"signature"`
}

// ChannelRefunded is the data of channel.refunded: a cooperative refund
// of Amount in Transaction, with refund nonce Nonce (the row's next is
// Nonce+1), asked by CallID (the refund's id, its channel's busy_call),
// leaving Balance on chain (when "", the row's balance less Amount).
// TotalClaimed, WithdrawRequestedAt and Charged, when set, are the
// channel's state after it as its refund's answer names it
// (channel.RefundResponse).
type ChannelRefunded struct {
	CallID              string `json:"call_id"`
	Transaction         string `json:"transaction"`
	Amount              string `json:"amount"`
	Nonce               string `json:"nonce"`
	Balance             string `json:"balance"`
	TotalClaimed        string `json:"total_claimed,omitempty"`
	WithdrawRequestedAt uint64 `json:"withdraw_requested_at,omitempty"`
	Charged             string `json:"charged,omitempty"`
}

// channelKey returns the network and the channel id of a channel
// stream's id part ("<network>/<0x id>").
func channelKey(id string) (string, []byte, error) {
	i := strings.LastIndexByte(id, '/')
	if i < 0 {
		return "", nil, fmt.Errorf("channel stream %q names no channel", id)
	}
	raw, err := hexutil.Decode(id[i+1:])
	if err != nil || len(raw) != 32 {
		return "", nil, fmt.Errorf("channel stream %q: id is not 32 bytes of hex", id)
	}
	return id[:i], raw, nil
}

func projectChannelOpened(p projection, v ChannelOpened) (bool, error) {
	network, id, err := channelKey(p.id)
	if err != nil {
		return false, err
	}
	if p.typ == EventChannelDeposited {
		p.b.Queue("UPDATE channels SET balance = $3::numeric, updated_at = $4 WHERE network = $1 AND channel_id = $2", network, id, v.Balance, p.now)
		return true, nil
	}
	if v.Config == nil {
		return false, errors.New("channel.opened names no configuration")
	}
	config, err := json.Marshal(v.Config)
	if err != nil {
		return false, fmt.Errorf("marshal channel configuration: %w", err)
	}
	p.b.Queue(`INSERT INTO channels (network, channel_id, config, payer, receiver, token, charged, balance, total_claimed, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7::numeric, $8::numeric, $7::numeric, $9, $9)`,
		network, id, config, v.Config.Payer.Bytes(), v.Config.Receiver.Bytes(), v.Config.Token.Bytes(),
		cmpOr(v.TotalClaimed, "0"), v.Balance, p.now)
	return true, nil
}

func projectChannelAdopted(p projection, v ChannelAdopted) (bool, error) {
	network, id, err := channelKey(p.id)
	if err != nil {
		return false, err
	}
	config, err := json.Marshal(&v.Config)
	if err != nil {
		return false, fmt.Errorf("marshal channel configuration: %w", err)
	}
	var signed *string
	if v.Signed != "" {
		signed = &v.Signed
	}
	var busy *string
	if v.BusyCall != "" {
		busy = &v.BusyCall
	}
	onConflict := "NOTHING"
	if v.Replace {
		onConflict = `UPDATE SET charged = EXCLUDED.charged, signed = EXCLUDED.signed, signature = EXCLUDED.signature,
			balance = EXCLUDED.balance, total_claimed = EXCLUDED.total_claimed, withdraw_requested_at = EXCLUDED.withdraw_requested_at,
			refund_nonce = EXCLUDED.refund_nonce, unclaimed_since = EXCLUDED.unclaimed_since, busy_call = EXCLUDED.busy_call,
			updated_at = EXCLUDED.updated_at
		WHERE channels.busy_call IS NULL`
	}
	p.b.Queue(`INSERT INTO channels (network, channel_id, config, payer, receiver, token, charged, signed, signature, balance, total_claimed,
			withdraw_requested_at, refund_nonce, unclaimed_since, busy_call, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7::numeric, $8::numeric, $9, $10::numeric, $11::numeric, $12, $13::numeric,
			CASE WHEN $7::numeric > $11::numeric THEN $15::timestamptz END, $14, $15, $15)
		ON CONFLICT (network, channel_id) DO `+onConflict,
		network, id, config, v.Config.Payer.Bytes(), v.Config.Receiver.Bytes(), v.Config.Token.Bytes(),
		v.Charged, signed, []byte(v.Signature), v.Balance, v.TotalClaimed, int64(v.WithdrawRequestedAt), cmpOr(v.RefundNonce, "0"), busy, p.now)
	return true, nil
}

// projectChannelCharged charges the call's amount under its voucher and
// frees the channel of the call. The charges of consecutive events (the
// vouchers a results transaction settles) are made by one statement
// (projection.row), each on its own channel's row.
func projectChannelCharged(p projection, v ChannelCharged) (bool, error) {
	network, id, err := channelKey(p.id)
	if err != nil {
		return false, err
	}
	return p.row(`UPDATE channels c SET charged = u.charged::numeric, signed = u.signed::numeric, signature = u.signature, busy_call = NULL,
			unclaimed_since = CASE WHEN u.charged::numeric > c.total_claimed THEN coalesce(c.unclaimed_since, $8) END, updated_at = $8
		FROM unnest($1::text[], $2::bytea[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[])
			AS u(network, channel_id, charged, amount, signed, signature, call)
		WHERE c.network = u.network AND c.channel_id = u.channel_id AND c.charged = u.charged::numeric - u.amount::numeric
			AND u.charged::numeric <= u.signed::numeric AND (c.busy_call IS NULL OR c.busy_call = u.call)`,
		network, id, v.Charged, v.Amount, v.Signed, []byte(v.Signature), v.CallID)
}

// projectChannelRefunded sets the balance left, moves the refund nonce
// past the refund's and frees the channel of the refund.
func projectChannelRefunded(p projection, v ChannelRefunded) (bool, error) {
	network, id, err := channelKey(p.id)
	if err != nil {
		return false, err
	}
	// An event without the balance left takes the refund off the row's.
	var balance *string
	if v.Balance != "" {
		balance = &v.Balance
	}
	p.b.Queue(`UPDATE channels SET balance = coalesce($3::numeric, balance - $6::numeric), refund_nonce = $4::numeric + 1, busy_call = NULL, updated_at = $5
		WHERE network = $1 AND channel_id = $2 AND refund_nonce <= $4::numeric`,
		network, id, balance, v.Nonce, p.now, v.Amount)
	return true, nil
}

func showChannelOpened(v ChannelOpened) []EventField {
	return balanceMoved(v.Transaction, v.Amount, v.Balance)
}

// balanceMoved are the fields of an event whose transaction moved amount
// in or out of a channel, leaving balance.
func balanceMoved(transaction, amount, balance string) []EventField {
	return []EventField{
		{Name: "transaction", Value: transaction, Kind: FieldMono},
		{Name: "amount", Value: amount, Kind: FieldAmount},
		{Name: "balance", Value: balance, Kind: FieldAmount},
	}
}

func showChannelAdopted(v ChannelAdopted) []EventField {
	return []EventField{
		{Name: "payer", Value: v.Config.Payer.Hex(), Kind: FieldMono},
		{Name: "charged", Value: v.Charged, Kind: FieldAmount},
		{Name: "balance", Value: v.Balance, Kind: FieldAmount},
		{Name: "claimed", Value: v.TotalClaimed, Kind: FieldAmount},
	}
}

func showChannelCharged(v ChannelCharged) []EventField {
	return []EventField{
		{Name: "call", Value: v.CallID, Kind: FieldMono},
		{Name: "amount", Value: v.Amount, Kind: FieldAmount},
		{Name: "charged", Value: v.Charged, Kind: FieldAmount},
		{Name: "voucher", Value: v.Signed, Kind: FieldAmount},
	}
}

func showChannelRefunded(v ChannelRefunded) []EventField {
	return []EventField{
		{Name: "transaction", Value: v.Transaction, Kind: FieldMono},
		{Name: "amount", Value: v.Amount, Kind: FieldAmount},
		{Name: "nonce", Value: v.Nonce},
	}
}

// cmpOr returns s, or def when s is empty.
func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// channelColumns are the columns scanChannel reads, in its order.
const channelColumns = `network, config, charged::text, signed::text, signature, balance::text, total_claimed::text,
	withdraw_requested_at, refund_nonce::text, unclaimed_since, coalesce(busy_call, ''), created_at, updated_at`

// channelFields are the destinations of channelColumns, each NULL-able: a
// channel joined to another row may be none (CallListToSettleHeld).
type channelFields struct {
	network, charged, signed, balance, claimed, nonce, busy *string
	config, signature                                       []byte
	withdraw                                                *int64
	unclaimedSince, createdAt, updatedAt                    *time.Time
}

// dest returns the destinations of channelColumns, in their order.
func (f *channelFields) dest() []any {
	return []any{&f.network, &f.config, &f.charged, &f.signed, &f.signature, &f.balance, &f.claimed, &f.withdraw, &f.nonce,
		&f.unclaimedSince, &f.busy, &f.createdAt, &f.updatedAt}
}

// channel returns the channel id (its config's hash on the network's
// chain) that f read.
func (f *channelFields) channel(id common.Hash) (*Channel, error) {
	if f.network == nil || f.charged == nil || f.balance == nil || f.claimed == nil || f.nonce == nil || f.withdraw == nil ||
		f.createdAt == nil || f.updatedAt == nil {
		return nil, fmt.Errorf("channel %s: a NOT NULL column read NULL", id.Hex())
	}
	c := Channel{Network: *f.network, UnclaimedSince: f.unclaimedSince, CreatedAt: *f.createdAt, UpdatedAt: *f.updatedAt}
	if f.busy != nil {
		c.BusyCall = *f.busy
	}
	c.State.Signature = f.signature
	if err := json.Unmarshal(f.config, &c.State.Config); err != nil {
		return nil, fmt.Errorf("channel %s: config: %w", id.Hex(), err)
	}
	c.State.ChannelID = id
	num := func(s string) (*big.Int, error) {
		v, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return nil, fmt.Errorf("channel %s: %q is not a number", id.Hex(), s)
		}
		return v, nil
	}
	var err error
	if c.State.Charged, err = num(*f.charged); err != nil {
		return nil, err
	}
	if f.signed != nil {
		if c.State.Signed, err = num(*f.signed); err != nil {
			return nil, err
		}
	}
	if c.State.OnChain.Balance, err = num(*f.balance); err != nil {
		return nil, err
	}
	if c.State.OnChain.TotalClaimed, err = num(*f.claimed); err != nil {
		return nil, err
	}
	if c.State.OnChain.RefundNonce, err = num(*f.nonce); err != nil {
		return nil, err
	}
	c.State.OnChain.WithdrawRequestedAt = uint64(*f.withdraw)
	return &c, nil
}

// scanChannel reads a channels row selected with channelColumns; id
// names the channel (its config's hash on the network's chain).
func scanChannel(row pgx.Row, id common.Hash) (*Channel, error) {
	var f channelFields
	if err := row.Scan(f.dest()...); err != nil {
		return nil, interpretError(err)
	}
	return f.channel(id)
}

// ChannelGet returns the channel id on network, or ErrNotFound.
func ChannelGet(ctx context.Context, db DBTX, network string, id common.Hash) (*Channel, error) {
	c, err := scanChannel(db.QueryRow(ctx, "SELECT "+channelColumns+" FROM channels WHERE network = $1 AND channel_id = $2", network, id.Bytes()), id)
	if err != nil {
		return nil, fmt.Errorf("get channel %s on %s: %w", id.Hex(), network, err)
	}
	return c, nil
}

// ChannelKey names a channel: its network and its id.
type ChannelKey struct {
	Network string
	ID      common.Hash
}

// ChannelList returns the channels of keys that have a record, with one
// statement, in no order.
func ChannelList(ctx context.Context, db DBTX, keys []ChannelKey) ([]*Channel, error) {
	networks := make([]string, len(keys))
	ids := make([][]byte, len(keys))
	for i, k := range keys {
		networks[i], ids[i] = k.Network, k.ID.Bytes()
	}
	rows, err := db.Query(ctx, `SELECT channel_id, `+channelColumns+` FROM channels
		WHERE (network, channel_id) IN (SELECT * FROM unnest($1::text[], $2::bytea[]))`, networks, ids)
	if err != nil {
		return nil, fmt.Errorf("list %d channels: %w", len(keys), err)
	}
	defer rows.Close()
	var out []*Channel
	for rows.Next() {
		var id []byte
		var f channelFields
		if err := rows.Scan(append([]any{&id}, f.dest()...)...); err != nil {
			return nil, fmt.Errorf("list %d channels: %w", len(keys), err)
		}
		c, err := f.channel(common.BytesToHash(id))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %d channels: %w", len(keys), interpretError(err))
	}
	return out, nil
}

// AdoptedOf returns the channel.adopted data of the record s (busy with
// call busyCall, "" for none).
func AdoptedOf(s *channel.State, busyCall string) ChannelAdopted {
	a := ChannelAdopted{Config: s.Config, Charged: s.Charged.String(), Balance: s.OnChain.Balance.String(),
		TotalClaimed: s.OnChain.TotalClaimed.String(), WithdrawRequestedAt: s.OnChain.WithdrawRequestedAt, RefundNonce: "0", BusyCall: busyCall}
	if s.Signed != nil {
		a.Signed, a.Signature = s.Signed.String(), append(hexutil.Bytes(nil), s.Signature...)
	}
	if s.OnChain.RefundNonce != nil {
		a.RefundNonce = s.OnChain.RefundNonce.String()
	}
	return a
}

// ChannelPut writes the record s of a channel on network in tx, as a
// channel.adopted event whose projection creates its row or replaces it
// (ErrConflict when a call holds it): for tests that need rows with real
// vouchers.
func ChannelPut(ctx context.Context, tx pgx.Tx, network string, s *channel.State) error {
	a := AdoptedOf(s, "")
	a.Replace = true
	if err := Append(ctx, tx, NewEvent{Stream: ChannelStream(network, s.ChannelID), Type: EventChannelAdopted, Data: a}); err != nil {
		return fmt.Errorf("put channel %s on %s: %w", s.ChannelID.Hex(), network, err)
	}
	return nil
}

// ChannelAdopt writes the record s of a channel on network taken up from
// the chain, in tx, as a channel.adopted event whose projection creates
// its row: ErrConflict when it has one (a record is never replaced by the
// chain's view).
func ChannelAdopt(ctx context.Context, tx pgx.Tx, network string, s *channel.State) error {
	if err := Append(ctx, tx, NewEvent{Stream: ChannelStream(network, s.ChannelID), Type: EventChannelAdopted, Data: AdoptedOf(s, "")}); err != nil {
		return fmt.Errorf("adopt channel %s on %s: %w", s.ChannelID.Hex(), network, err)
	}
	return nil
}

// ChannelHold marks the channel id on network busy with call callID in
// tx, the call's admission, when no call holds it and its charge is
// charged (what the call's voucher was checked against). ok is false when
// either is not so: the call must not run (channel_busy, or the charge
// moved since the check).
func ChannelHold(ctx context.Context, tx pgx.Tx, network string, id common.Hash, callID string, charged *big.Int) (ok bool, err error) {
	held, err := ChannelHoldMany(ctx, tx, []ChannelHoldRequest{{Network: network, ID: id, CallID: callID, Charged: charged}})
	if err != nil {
		return false, err
	}
	return held[0], nil
}

// ChannelHoldRequest is a call's hold of its channel (ChannelHoldMany).
type ChannelHoldRequest struct {
	Network string
	ID      common.Hash
	CallID  string
	Charged *big.Int
}

// ChannelHoldMany is ChannelHold for each of hs, in order, in tx: held[i]
// tells whether hs[i] holds its channel. The first hold of each channel is
// made with one statement for all; a channel's later holds are refused
// once one holds it, and tried, with one more statement, when none did.
func ChannelHoldMany(ctx context.Context, tx pgx.Tx, hs []ChannelHoldRequest) (held []bool, err error) {
	type key struct {
		network string
		id      common.Hash
	}
	held = make([]bool, len(hs))
	taken := map[key]bool{}
	left := make([]int, len(hs))
	for i := range hs {
		left[i] = i
	}
	for len(left) > 0 {
		var next []int
		seen := map[key]bool{}
		var networks, calls, charges []string
		var ids [][]byte
		byCall := map[string]int{}
		for _, i := range left {
			h := &hs[i]
			k := key{h.Network, h.ID}
			switch {
			case taken[k]:
			case seen[k]:
				next = append(next, i)
			default:
				seen[k] = true
				networks, ids, calls, charges = append(networks, h.Network), append(ids, h.ID.Bytes()), append(calls, h.CallID), append(charges, h.Charged.String())
				byCall[h.CallID] = i
			}
		}
		rows, err := tx.Query(ctx, `UPDATE channels c SET busy_call = u.call
			FROM unnest($1::text[], $2::bytea[], $3::text[], $4::text[]) AS u(network, id, call, charged)
			WHERE c.network = u.network AND c.channel_id = u.id AND c.busy_call IS NULL AND c.charged = u.charged::numeric
			RETURNING c.busy_call`, networks, ids, calls, charges)
		if err != nil {
			return nil, fmt.Errorf("hold %d channels: %w", len(calls), err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("hold %d channels: %w", len(calls), err)
		}
		for _, call := range got {
			i := byCall[call]
			held[i] = true
			taken[key{hs[i].Network, hs[i].ID}] = true
		}
		left = next
	}
	return held, nil
}

// releaseChannelOf queues the statement that frees the channel call p.id
// holds busy (none for most calls), for the events that end a call
// without a charge: the call's voucher then pays for nothing, and its
// client may send it again for a new call, so the call's replay key
// (calls.payment_key) is set aside, made the call's own.
func releaseChannelOf(p projection) {
	p.b.Queue(`WITH freed AS (UPDATE channels SET busy_call = NULL WHERE busy_call = $1 RETURNING 1)
		UPDATE calls SET payment_key = payment_key || '/' || id WHERE id = $1 AND EXISTS (SELECT 1 FROM freed)`, p.id)
}
