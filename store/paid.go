package store

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// paidPackedVersion is the first byte of call.paid's binary form
// (PaidCall.MarshalEventBinary).
const paidPackedVersion = 1

// MarshalEventBinary returns call.paid's data in its binary form, which
// Append keeps in the event's bin column: when its payment has a packed
// ledger form (x402.Payment.MarshalLedgerBinary, an exact EVM payment),
// that form packed with the call's other fields into one value: the
// payment, the operation, the poll token (its 24 bytes when it is the
// base64url of 24 bytes, as the api makes them), the request's hash and
// the job's id. ok is false for any other payment, which is written as
// JSON fields (MarshalJSON). UnmarshalEventBinary reads it.
func (c PaidCall) MarshalEventBinary() ([]byte, bool) {
	if c.Form1 {
		return nil, false
	}
	return c.pack(c.Payment.MarshalLedgerBinary)
}

// pack packs c with its payment packed by payment.
func (c PaidCall) pack(payment func() ([]byte, bool)) ([]byte, bool) {
	packed, ok := payment()
	if !ok || c.JobID < 0 {
		return nil, false
	}
	b := make([]byte, 0, len(packed)+96)
	b = append(b, paidPackedVersion)
	b = appendPackedBytes(b, packed)
	b = appendPackedBytes(b, []byte(c.Op))
	if raw, err := base64.RawURLEncoding.DecodeString(c.Token); err == nil && len(raw) == 24 && base64.RawURLEncoding.EncodeToString(raw) == c.Token {
		b = append(b, 0)
		b = append(b, raw...)
	} else {
		b = append(b, 1)
		b = appendPackedBytes(b, []byte(c.Token))
	}
	b = appendPackedBytes(b, c.RequestHash)
	b = binary.AppendUvarint(b, uint64(c.JobID))
	return b, true
}

// UnmarshalEventBinary decodes what MarshalEventBinary wrote.
func (c *PaidCall) UnmarshalEventBinary(b []byte) error {
	if err := c.unpack(b); err != nil {
		return fmt.Errorf("decode call.paid: %w", err)
	}
	return nil
}

// validJSON marks PaidCall's MarshalJSON as json.Marshal's (encodeData).
func (PaidCall) validJSON() {}

// MarshalJSON encodes call.paid's data as JSON: the binary form
// (MarshalEventBinary) as {"p": its base64}, the form call.paid's data
// had before the event log kept binary data (migration 017), or, for a
// payment without a packed form, as fields (PaymentVerified's, and
// job_id). UnmarshalJSON reads both. With Form1 the payment is
// packed in its form 1 (x402.Payment.MarshalLedgerBinaryForm1).
func (c PaidCall) MarshalJSON() ([]byte, error) {
	payment := c.Payment.MarshalLedgerBinary
	if c.Form1 {
		payment = c.Payment.MarshalLedgerBinaryForm1
	}
	b, ok := c.pack(payment)
	if !ok {
		return json.Marshal(paidFields(c))
	}
	return json.Marshal(struct {
		Packed string `json:"p"`
	}{base64.RawStdEncoding.EncodeToString(b)})
}

// UnmarshalJSON decodes call.paid's data, packed or as fields, and the data
// of payment.verified (PaymentVerified's fields).
func (c *PaidCall) UnmarshalJSON(data []byte) error { return decodePaidJSON(data, c) }

// paidFields is PaidCall without its methods: its fields' JSON.
type paidFields PaidCall

// decodePaidCall decodes a call's payment as callPaid reads it: call.paid's
// binary form (its first byte paidPackedVersion), or JSON, call.paid's or
// payment.verified's data or {"payment": ...} of a row that kept its own
// (decodePaidJSON). Each is parsed once.
func decodePaidCall(data []byte, c *PaidCall) error {
	if len(data) > 0 && data[0] == paidPackedVersion {
		*c = PaidCall{}
		return c.UnmarshalEventBinary(data)
	}
	return decodePaidJSON(data, c)
}

// decodePaidJSON is PaidCall.UnmarshalJSON.
func decodePaidJSON(data []byte, c *PaidCall) error {
	*c = PaidCall{}
	// The packed form is an object of one key, "p"; the fields' first
	// key is another, whoever wrote them (Go keeps their order, jsonb
	// puts shorter keys first).
	if !bytes.HasPrefix(bytes.TrimLeft(data, "{ \t\r\n"), []byte(`"p"`)) {
		return json.Unmarshal(data, (*paidFields)(c))
	}
	var v struct {
		Packed string `json:"p"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	b, err := base64.RawStdEncoding.DecodeString(v.Packed)
	if err != nil {
		return fmt.Errorf("decode call.paid: %w", err)
	}
	return c.UnmarshalEventBinary(b)
}

// unpack decodes the binary form (MarshalEventBinary).
func (c *PaidCall) unpack(b []byte) error {
	var err error
	if len(b) == 0 || b[0] != paidPackedVersion {
		return errors.New("packed form unknown")
	}
	b = b[1:]
	next := func() []byte {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			err = cmpErr(err, errors.New("truncated"))
			b = nil
			return nil
		}
		v := b[k : k+int(n) : k+int(n)]
		b = b[k+int(n):]
		return v
	}
	*c = PaidCall{}
	payment := next()
	c.Op = string(next())
	switch {
	case len(b) >= 25 && b[0] == 0:
		c.Token = base64.RawURLEncoding.EncodeToString(b[1:25])
		b = b[25:]
	case len(b) >= 1 && b[0] == 1:
		b = b[1:]
		c.Token = string(next())
	default:
		return errors.New("truncated at its token")
	}
	if h := next(); len(h) > 0 {
		c.RequestHash = h
	}
	job, k := binary.Uvarint(b)
	if k <= 0 || job > math.MaxInt64 {
		err = cmpErr(err, errors.New("truncated at its job"))
	} else if len(b) != k {
		err = cmpErr(err, errors.New("trailing bytes"))
	}
	if err != nil {
		return err
	}
	c.JobID = int64(job)
	return c.Payment.UnmarshalLedgerBinary(payment)
}

// cmpErr returns err, or next when err is nil.
func cmpErr(err, next error) error {
	if err != nil {
		return err
	}
	return next
}

func appendPackedBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}
