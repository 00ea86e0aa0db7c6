// Package jobs defines what a paid operation is: its catalogue entry (name,
// price, queue, examples, input schema), its input type with Validate, and the
// River job args that carry a call's input to a worker.
//
// Each operation lives in its own package below jobs/ (jobs/diff, jobs/regex,
// ...). An operation package provides:
//
//   - an Input type implementing [Input] (Kind returns the operation's name,
//     Validate checks the request before any payment is taken);
//   - a Work function (or a method on a small struct holding its dependencies)
//     that turns an Input into a result object, with no River in it;
//   - a Spec variable describing it for quotes and discovery, built with
//     [Define].
//
// The api decodes and validates bodies through [Operation.Decode]; the worker
// package registers one River worker per operation and calls Work; the
// quotes are built from each Spec's [Spec.Offer].
package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"
)

// Error codes of a failed call (store.JobFailed.Error), as the caller reads
// them.
const (
	// ErrorOperationFailed: the operation failed (a bug, an upstream down);
	// the payment is not settled.
	ErrorOperationFailed = "operation_failed"
	// ErrorPaymentExpired: the operation could not finish, retried, and be
	// settled before the payment's validBefore; the payment is not settled.
	ErrorPaymentExpired = "payment_expired"
)

// Queue names. Each queue has its own concurrency in the worker configuration,
// so slow model calls never starve pure operations or settlement.
const (
	QueuePure       = "pure"
	QueueModel      = "model"
	QueueBrowser    = "browser"
	QueueSettlement = "settlement"
	QueueIndex      = "index"
	// QueueMaintenance runs the retention sweeps.
	QueueMaintenance = "maintenance"
)

// Limits bounds request inputs. They are configuration, passed in explicitly.
type Limits struct {
	// MaxBodyBytes is the largest accepted request body. Defaults to
	// DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// MaxCodeChars bounds code-review's code. Defaults to
	// DefaultMaxCodeChars.
	MaxCodeChars int
	// MaxPatternChars bounds regex's pattern. Defaults to
	// DefaultMaxPatternChars.
	MaxPatternChars int
	// MaxRows bounds csv-json and data-clean tables. Defaults to
	// DefaultMaxRows.
	MaxRows int
	// FetchAllow are the non-public addresses that URLs given to operations
	// may name anyway (FETCH_ALLOW_CIDRS, for tests on loopback). Empty in
	// production: every non-public address is refused.
	FetchAllow []netip.Prefix
}

// The limits of contract.md: Limits' defaults.
const (
	DefaultMaxBodyBytes    = 1 << 20
	DefaultMaxCodeChars    = 200_000
	DefaultMaxPatternChars = 4096
	DefaultMaxRows         = 50_000
)

// WithDefaults returns a copy of l with zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.MaxCodeChars == 0 {
		l.MaxCodeChars = DefaultMaxCodeChars
	}
	if l.MaxPatternChars == 0 {
		l.MaxPatternChars = DefaultMaxPatternChars
	}
	if l.MaxRows == 0 {
		l.MaxRows = DefaultMaxRows
	}
	return l
}

// DefaultLimits are the limits of contract.md.
var DefaultLimits = Limits{}.WithDefaults()

// InvalidError reports request content that does not meet an operation's
// rules. The api answers it with 400 invalid_request and takes no payment.
type InvalidError struct {
	// Field names the offending input field, or is empty for the whole body.
	Field string
	// Message says what is wrong, for a person.
	Message string
}

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// Invalid returns an *InvalidError for field.
func Invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Input is implemented by every operation's input type.
type Input interface {
	// Kind returns the operation's name, which is also its River job kind
	// ("diff", "regex", ...). It must work on the zero value.
	Kind() string
	// Validate checks the input against the operation's rules and limits and
	// returns an *InvalidError when it does not meet them.
	Validate(lim *Limits) error
}

// Args are the River job args of one paid call of an operation.
type Args[In Input] struct {
	// CallID is the paid call this job computes the result for.
	CallID string `json:"call_id"`
	// Network is the network (CAIP-2) the call is paid on, set once its
	// payment is verified (PaidOn): the result's transaction records the
	// settlement's first submission with it.
	Network string `json:"network,omitempty"`
	// Input is the validated request.
	Input In `json:"input"`
	// ValidBefore is when the call's payment stops being settleable (unix
	// seconds; 0: never): no attempt starts, and no retry is scheduled,
	// that could not be settled before it.
	ValidBefore int64 `json:"valid_before,omitempty"`
	// Payer and Client are the call's payer (its payment's, on Network)
	// and client address (the address, or an IPv6 address's /64): a run
	// that ends unpaid is recorded under them (store.UnpaidPayerKey,
	// store.UnpaidClientKey).
	Payer  string `json:"payer,omitempty"`
	Client string `json:"client,omitempty"`
}

// Kind returns the operation's name, River's job kind for these args.
func (a Args[In]) Kind() string { return a.Input.Kind() }

// PaidOn returns a copy of a whose call is paid on network by a payment
// settleable until validBefore (zero: no end).
func (a Args[In]) PaidOn(network string, validBefore time.Time) JobArgs {
	a.Network = network
	if !validBefore.IsZero() {
		a.ValidBefore = validBefore.Unix()
	}
	return a
}

// PaidBy returns a copy of a whose call is paid by payer from client
// address client: should its run end unpaid, it counts against both.
func (a Args[In]) PaidBy(payer, client string) JobArgs {
	a.Payer, a.Client = payer, client
	return a
}

// JobArgs is what Decode returns: River job args ready to insert once
// PaidOn has named the network of the call's verified payment.
type JobArgs interface {
	Kind() string
	PaidOn(network string, validBefore time.Time) JobArgs
	PaidBy(payer, client string) JobArgs
}

// Spec describes an operation for the catalogue, quotes and discovery.
type Spec struct {
	// Name is the operation's name and the last segment of its path.
	Name string
	// Price is the fixed price in USD with 6 decimals, e.g. "0.010000".
	Price string
	// Queue is the River queue the operation runs on.
	Queue string
	// Description says what the operation returns, for quotes and discovery.
	Description string
	// UsesModel marks the operations that need GEMINI_API_KEY to be sellable.
	UsesModel bool
	// ReadsWeb marks the operations that fetch pages from the web (the
	// caller's URL, or sources found): their result depends on the world.
	ReadsWeb bool
	// InputExample is a valid request body.
	InputExample any
	// InputSchema is the JSON Schema (draft 2020-12) of the request body.
	InputSchema json.RawMessage
	// OutputExample is the result of InputExample (without call_id and op).
	OutputExample any
}

// Operation is a Spec plus the decoder of its request bodies.
type Operation struct {
	Spec
	decode func(callID string, body []byte, lim *Limits) (JobArgs, error)
}

// Define returns the Operation for spec whose input type is In.
func Define[In Input](spec Spec) Operation {
	var zero In
	if zero.Kind() != spec.Name {
		panic(fmt.Sprintf("jobs: spec name %q differs from input kind %q", spec.Name, zero.Kind()))
	}
	required, err := schemaRequired(spec.InputSchema)
	if err != nil {
		panic(fmt.Sprintf("jobs: %s: %v", spec.Name, err))
	}
	return Operation{
		Spec: spec,
		decode: func(callID string, body []byte, lim *Limits) (JobArgs, error) {
			var in In
			if err := DecodeStrict(body, &in); err != nil {
				return nil, err
			}
			if err := in.Validate(lim); err != nil {
				return nil, err
			}
			if err := checkRequired(body, required); err != nil {
				return nil, err
			}
			return Args[In]{CallID: callID, Input: in}, nil
		},
	}
}

// schemaRequired returns the "required" fields of an input schema: the one
// statement of which fields a request must carry.
func schemaRequired(schema json.RawMessage) ([]string, error) {
	if len(schema) == 0 {
		return nil, nil
	}
	var s struct {
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	return s.Required, nil
}

// checkRequired returns an *InvalidError naming the first of required that
// the JSON object body lacks or sets to null. A field absent is a client's
// mistake even where its zero value would be valid input (an empty regex
// pattern, an empty text to diff): it is never run as that value.
func checkRequired(body []byte, required []string) error {
	if len(required) == 0 {
		return nil
	}
	var fields map[string]present
	if err := json.Unmarshal(body, &fields); err != nil {
		return &InvalidError{Message: "request body is not valid JSON: " + err.Error()}
	}
	for _, name := range required {
		if !fields[name] {
			return Invalid(name, "is required")
		}
	}
	return nil
}

// present records whether a field holds a value other than null, without
// decoding it.
type present bool

func (p *present) UnmarshalJSON(b []byte) error {
	*p = string(b) != "null"
	return nil
}

// Decode decodes body into the operation's input, validates it, and returns
// the River job args for call callID. Bad content is an *InvalidError.
func (o Operation) Decode(callID string, body []byte, lim *Limits) (JobArgs, error) {
	return o.decode(callID, body, lim)
}

// DecodeStrict decodes a JSON object into v, refusing unknown fields, trailing
// data and non-object bodies with an *InvalidError naming the field.
func DecodeStrict(body []byte, v any) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return &InvalidError{Message: "request body is required (a JSON object)"}
	}
	if trimmed[0] != '{' {
		return &InvalidError{Message: "request body must be a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr):
			return &InvalidError{Field: typeErr.Field, Message: fmt.Sprintf("must be a %s", typeErr.Type.Kind())}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return &InvalidError{Field: field, Message: "unknown field"}
		default:
			return &InvalidError{Message: "request body is not valid JSON: " + err.Error()}
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &InvalidError{Message: "request body has data after the JSON object"}
	}
	return nil
}
