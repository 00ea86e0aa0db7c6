package store

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/x402d/x402d/x402"
)

// EventType is one type of the ledger's events, as the registry
// (EventTypeGet, EventTypeList) knows it: its name, the kind of stream it
// is appended to, the Go type of its payload, the projection an event of
// it updates (Append) and how the ops timeline shows it (Label, Kind,
// Fields).
type EventType struct {
	// Name is the type as the log keeps it (Event.Type).
	Name string
	// Stream is the kind of stream its events are appended to: "call"
	// (CallStream), "chain" (ChainStream) or "channel" (ChannelStream).
	Stream string
	// Label says in words what an event of the type records.
	Label string
	// Kind is how the event leaves its call: EventKindProgress,
	// EventKindSucceeded or EventKindFailed.
	Kind EventKind
	// Final is whether an event of the type moves its call to a final
	// state (IsFinalEvent).
	Final bool

	// decode returns the payload of an event of the type (Payload).
	decode func(e Event) (any, error)
	// fields decodes the payload of an event of the type and returns what
	// the ops timeline shows of it.
	fields func(e Event) ([]EventField, error)
	// project queues the projection statements of an event of the type,
	// being appended.
	project func(p projection, e *NewEvent) (mustTouch bool, err error)
}

// EventKind is how an event leaves the call it records: still going, or
// ended well or badly. The ops timeline marks the events of the last two.
type EventKind string

// The kinds of events.
const (
	// EventKindProgress: no mark. The call goes on, the event records a
	// fact of the chain, or the call's settlement was lost after its
	// result was released (settlement.lost, final all the same).
	EventKindProgress EventKind = ""
	// EventKindSucceeded: the call was paid.
	EventKindSucceeded EventKind = "ok"
	// EventKindFailed: the call's operation or settlement failed.
	EventKindFailed EventKind = "bad"
)

// EventField is one fact of an event's payload as the ops timeline shows
// it (EventType.Fields).
type EventField struct {
	// Name names the fact ("job", "payer", "amount lost").
	Name string
	// Value is the fact as text, laid out as Kind says.
	Value string
	// Kind says how Value is shown.
	Kind FieldKind
}

// FieldKind says how an EventField's value is shown.
type FieldKind int

// The kinds of fields.
const (
	// FieldText is shown as it is.
	FieldText FieldKind = iota
	// FieldMono is an address, a hash or a nonce: shown in a fixed-width
	// font.
	FieldMono
	// FieldJob is a River job's id: linked to the job's page.
	FieldJob
	// FieldAmount is an amount of USDC in its atomic units.
	FieldAmount
	// FieldPayer is the paying address, empty when the event leaves it to
	// its call's (Call.Payer, which the shower puts in its place).
	FieldPayer
)

// Decode returns the payload of e, an event of type t, as the Go value its
// type registers (PaidCall for call.paid, ...).
func (t EventType) Decode(e Event) (any, error) {
	if e.Type != t.Name {
		return nil, fmt.Errorf("decode event %d: type %s, not %s", e.ID, e.Type, t.Name)
	}
	return t.decode(e)
}

// Fields returns what the ops timeline shows of e, an event of type t: the
// facts an operator needs, never a call's poll token (a capability) nor a
// signed payment.
func (t EventType) Fields(e Event) ([]EventField, error) {
	if e.Type != t.Name {
		return nil, fmt.Errorf("show event %d: type %s, not %s", e.ID, e.Type, t.Name)
	}
	return t.fields(e)
}

// Payload decodes the payload of e as a T (Event.Decode): its binary form
// when it has one, its JSON otherwise.
func Payload[T any](e Event) (T, error) {
	var v T
	if err := e.Decode(&v); err != nil {
		return v, fmt.Errorf("decode %s: %w", e.Type, err)
	}
	return v, nil
}

// newPayload returns the payload of e, an event being appended, which
// must be a T.
func newPayload[T any](e *NewEvent) (T, error) {
	v, ok := e.Data.(T)
	if !ok {
		return v, fmt.Errorf("data is %T, want %T", e.Data, v)
	}
	return v, nil
}

// defineEvent completes t with the decoding of its payload, a T, the
// fields show makes of it and the projection project queues for it.
func defineEvent[T any](t EventType, show func(T) []EventField, project func(projection, T) (bool, error)) EventType {
	t.decode = func(e Event) (any, error) { return Payload[T](e) }
	t.fields = func(e Event) ([]EventField, error) {
		v, err := Payload[T](e)
		if err != nil {
			return nil, err
		}
		return show(v), nil
	}
	t.project = func(p projection, e *NewEvent) (bool, error) {
		v, err := newPayload[T](e)
		if err != nil {
			return false, err
		}
		return project(p, v)
	}
	return t
}

// eventTypes is the registry: every type of the call, chain and channel
// streams, by name. It is made once and only read.
var eventTypes = registry(
	defineEvent(EventType{Name: EventCallPaid, Stream: "call", Label: "payment verified and job queued"},
		showPaidCall, projectCallPaid),
	defineEvent(EventType{Name: EventPaymentVerified, Stream: "call", Label: "payment verified"},
		showPaymentVerified, projectPaymentVerified),
	defineEvent(EventType{Name: EventPaymentIdentified, Stream: "call", Label: "payment identifier bound"},
		showPaymentIdentified, projectPaymentIdentified),
	defineEvent(EventType{Name: EventJobQueued, Stream: "call", Label: "job queued"},
		showJobQueued, projectJobQueued),
	defineEvent(EventType{Name: EventJobStarted, Stream: "call", Label: "job started"},
		showJobStarted, projectJobStarted),
	defineEvent(EventType{Name: EventJobSucceeded, Stream: "call", Label: "result recorded, settlement queued"},
		showJobSucceeded, projectJobSucceeded),
	defineEvent(EventType{Name: EventJobFailed, Stream: "call", Label: "operation failed, not charged", Kind: EventKindFailed, Final: true},
		showJobFailed, projectJobFailed),
	defineEvent(EventType{Name: EventSettlementSubmitted, Stream: "call", Label: "settlement attempted"},
		showSettlementSubmitted, projectSettlementSubmitted),
	defineEvent(EventType{Name: EventSettlementConfirmed, Stream: "call", Label: "settled, result released", Kind: EventKindSucceeded, Final: true},
		showSettlementDone, projectSettlementDone),
	defineEvent(EventType{Name: EventSettlementFailed, Stream: "call", Label: "settlement refused, result withheld", Kind: EventKindFailed, Final: true},
		showSettlementDone, projectSettlementDone),
	defineEvent(EventType{Name: EventSettlementResent, Stream: "call", Label: "settlement undone by a reorganisation, made again"},
		showSettlementResent, projectSettlementResent),
	defineEvent(EventType{Name: EventSettlementLost, Stream: "call", Label: "settlement undone, or its jobs exhausted, and lost", Final: true},
		showSettlementLost, projectSettlementLost),
	defineEvent(EventType{Name: EventSettlementMined, Stream: "chain", Label: "settlement transaction mined"},
		showSettlementMined, projectSettlementMined),
	defineEvent(EventType{Name: EventSettlementFinal, Stream: "chain", Label: "settlement transactions final"},
		showSettlementFinal, projectSettlementFinal),
	// The channels' (channel.go): the payments', then the claims'.
	defineEvent(EventType{Name: EventChannelOpened, Stream: "channel", Label: "channel opened by a deposit"},
		showChannelOpened, projectChannelOpened),
	defineEvent(EventType{Name: EventChannelAdopted, Stream: "channel", Label: "channel taken up from the chain"},
		showChannelAdopted, projectChannelAdopted),
	defineEvent(EventType{Name: EventChannelDeposited, Stream: "channel", Label: "channel topped up"},
		showChannelOpened, projectChannelOpened),
	defineEvent(EventType{Name: EventChannelCharged, Stream: "channel", Label: "call charged to the channel"},
		showChannelCharged, projectChannelCharged),
	defineEvent(EventType{Name: EventChannelRefundRequested, Stream: "channel", Label: "cooperative refund asked; its job queued"},
		showChannelRefundRequested, projectChannelRefundRequested),
	defineEvent(EventType{Name: EventChannelRefundSent, Stream: "channel", Label: "refund transaction sent"},
		showChannelRefundSent, projectChannelRefundSent),
	defineEvent(EventType{Name: EventChannelRefunded, Stream: "channel", Label: "channel refunded"},
		showChannelRefunded, projectChannelRefunded),
	defineEvent(EventType{Name: EventChannelRefundFailed, Stream: "channel", Label: "refund failed; channel freed"},
		showChannelRefundFailed, projectChannelRefundFailed),
	defineEvent(EventType{Name: EventChannelRefundSeen, Stream: "channel", Label: "refund mined that no refund recorded"},
		showChannelRefundSeen, projectChannelRefundSeen),
	defineEvent(EventType{Name: EventChannelRefundUndone, Stream: "channel", Label: "refund undone by a reorganisation, sent again"},
		showChannelRefundUndone, projectChannelRefundUndone),
	defineEvent(EventType{Name: EventChannelClaimed, Stream: "channel", Label: "vouchers claimed on chain"},
		showChannelClaimed, projectChannelClaimed),
	defineEvent(EventType{Name: EventChannelSettled, Stream: "channel", Label: "claimed funds settled to the receiver"},
		showChannelSettled, projectChannelSettled),
	defineEvent(EventType{Name: EventChannelWithdrawInitiated, Stream: "channel", Label: "payer started a timed withdrawal"},
		showChannelWithdrawInitiated, projectChannelWithdrawInitiated),
	defineEvent(EventType{Name: EventChannelWithdrawFinalized, Stream: "channel", Label: "payer finished a timed withdrawal"},
		showChannelWithdrawFinalized, projectChannelWithdrawFinalized),
	defineEvent(EventType{Name: EventChannelClaimRefused, Stream: "channel", Label: "claim refused by its simulation"},
		showChannelClaimRefused, projectChannelClaimRefused),
)

// typeRegistry is the registered types, in their order and by name.
type typeRegistry struct {
	list   []EventType
	byName map[string]EventType
}

// registry makes the registry of types, in their order.
func registry(types ...EventType) typeRegistry {
	r := typeRegistry{list: types, byName: make(map[string]EventType, len(types))}
	for _, t := range types {
		if _, dup := r.byName[t.Name]; dup {
			panic("store: event type " + t.Name + " registered twice")
		}
		r.byName[t.Name] = t
	}
	return r
}

// EventTypeGet returns the registered type named name, false when there is
// none (an index event's, or one unknown).
func EventTypeGet(name string) (EventType, bool) {
	t, ok := eventTypes.byName[name]
	return t, ok
}

// EventTypeList returns every registered type: the call's, in the order a
// call goes through them, then the chain's.
func EventTypeList() []EventType { return slices.Clone(eventTypes.list) }

// IsFinalEvent reports whether a call event of type typ moves the call to a
// final state.
func IsFinalEvent(typ string) bool { return eventTypes.byName[typ].Final }

// projectRegistered is the projector of the registered streams' events
// (call and chain): the projection its type registers.
func projectRegistered(b *pgx.Batch, rows *projectedRows, e *NewEvent, data []byte, now time.Time) (bool, error) {
	kind, id, _ := strings.Cut(e.Stream, "/")
	t, ok := eventTypes.byName[e.Type]
	if !ok || t.Stream != kind {
		return false, fmt.Errorf("unknown %s event type %q", kind, e.Type)
	}
	return t.project(projection{b: b, rows: rows, id: id, typ: e.Type, data: data, now: now}, e)
}

// jobField is a River job's id as a field.
func jobField(name string, id int64) EventField {
	return EventField{Name: name, Value: strconv.FormatInt(id, 10), Kind: FieldJob}
}

// blockFields is the block a settlement names, if it does.
func blockFields(fs []EventField, block *x402.SettledBlock) []EventField {
	if block != nil {
		fs = append(fs, EventField{Name: "block", Value: strconv.FormatUint(block.Number, 10)})
	}
	return fs
}

func showPaymentVerified(v PaymentVerified) []EventField {
	return []EventField{
		{Name: "op", Value: v.Op},
		{Name: "payer", Value: v.Payment.Payer, Kind: FieldMono},
		{Name: "network", Value: v.Payment.Network},
		{Name: "amount", Value: v.Payment.Amount, Kind: FieldAmount},
		{Name: "asset", Value: v.Payment.Asset, Kind: FieldMono},
		{Name: "nonce", Value: v.Payment.Nonce, Kind: FieldMono},
	}
}

// showPaidCall: call.paid is payment.verified with its job (job.queued's).
func showPaidCall(v PaidCall) []EventField {
	return append(showPaymentVerified(v.PaymentVerified), jobField("job", v.JobID))
}

func showPaymentIdentified(v PaymentIdentified) []EventField {
	return []EventField{{Name: "payment id", Value: v.ID, Kind: FieldMono}}
}

func showJobQueued(v JobQueued) []EventField {
	return []EventField{jobField("job", v.JobID), {Name: "queue", Value: v.Queue}}
}

func showJobStarted(v JobStarted) []EventField {
	return []EventField{jobField("job", v.JobID), {Name: "attempt", Value: strconv.Itoa(v.Attempt)}}
}

func showJobSucceeded(v JobSucceeded) []EventField {
	fs := []EventField{jobField("job", v.JobID), {Name: "result", Value: fmt.Sprintf("%d bytes", v.Bytes)}}
	if v.Attempt != 0 {
		// The run's start, recorded with its success.
		fs = append(fs, EventField{Name: "attempt", Value: strconv.Itoa(v.Attempt)})
	}
	if v.SettleJobID != 0 {
		// The settlement's first submission, recorded with it.
		fs = append(fs, jobField("settlement job", v.SettleJobID))
	}
	return fs
}

func showJobFailed(v JobFailed) []EventField {
	return []EventField{jobField("job", v.JobID), {Name: "error", Value: v.Error}, {Name: "message", Value: v.Message}}
}

func showSettlementSubmitted(v SettlementSubmitted) []EventField {
	return []EventField{jobField("job", v.JobID), {Name: "network", Value: v.Network}, {Name: "attempt", Value: strconv.Itoa(v.Attempt)}}
}

func showSettlementDone(v SettlementDone) []EventField {
	fs := []EventField{
		{Name: "transaction", Value: v.Response.Transaction, Kind: FieldMono},
		{Name: "network", Value: v.Response.Network},
		{Name: "payer", Value: v.Response.Payer, Kind: FieldPayer},
	}
	if v.Response.ErrorReason != "" {
		fs = append(fs, EventField{Name: "reason", Value: v.Response.ErrorReason})
	}
	return blockFields(fs, v.Block)
}

func showSettlementResent(v SettlementResent) []EventField {
	return blockFields([]EventField{
		{Name: "undone", Value: v.Previous, Kind: FieldMono},
		{Name: "transaction", Value: v.Response.Transaction, Kind: FieldMono},
		{Name: "network", Value: v.Response.Network},
	}, v.Block)
}

func showSettlementLost(v SettlementLost) []EventField {
	// A call reconciled after its settlement jobs were exhausted has no
	// transaction undone.
	first := EventField{Name: "undone", Value: v.Previous, Kind: FieldMono}
	if v.Previous == "" {
		first = EventField{Name: "reconciled", Value: "settlement jobs exhausted"}
	}
	return []EventField{
		first,
		{Name: "network", Value: v.Network},
		{Name: "amount lost", Value: v.Amount, Kind: FieldAmount},
		{Name: "reason", Value: v.Reason},
	}
}

func showSettlementMined(v SettlementMined) []EventField {
	return []EventField{
		{Name: "transaction", Value: v.Transaction, Kind: FieldMono},
		{Name: "block", Value: strconv.FormatUint(v.Block.Number, 10)},
		{Name: "block hash", Value: v.Block.Hash, Kind: FieldMono},
	}
}

func showSettlementFinal(v SettlementFinal) []EventField {
	return []EventField{
		{Name: "block", Value: strconv.FormatUint(v.Block, 10)},
		{Name: "transactions", Value: strings.Join(v.Transactions, " "), Kind: FieldMono},
		{Name: "calls", Value: strconv.Itoa(v.Calls)},
		{Name: "amount", Value: v.Amount, Kind: FieldAmount},
	}
}
