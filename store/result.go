package store

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ResultObject returns the result object of call id of operation op whose
// own fields are those of the JSON object fields:
// {"call_id":id,"op":op,...fields}. The calls row keeps fields alone (its
// id and op columns state the rest) and answers with this.
func ResultObject(id, op string, fields []byte) ([]byte, error) {
	fields = bytes.TrimSpace(fields)
	if len(fields) < 2 || fields[0] != '{' || fields[len(fields)-1] != '}' {
		return nil, fmt.Errorf("result of call %s: not a JSON object", id)
	}
	head, err := json.Marshal(struct {
		CallID string `json:"call_id"`
		Op     string `json:"op"`
	}{id, op})
	if err != nil {
		return nil, fmt.Errorf("result of call %s: %w", id, err)
	}
	rest := bytes.TrimSpace(fields[1:])
	b := make([]byte, 0, len(head)+len(rest)+1)
	b = append(b, head[:len(head)-1]...)
	if rest[0] != '}' {
		b = append(b, ',')
	}
	return append(b, rest...), nil
}

// resultFields returns the fields that ResultObject(id, op, fields) turns
// into result exactly, and whether there are such fields (result begins
// with the head ResultObject writes).
func resultFields(result []byte, id, op string) ([]byte, bool) {
	head, err := ResultObject(id, op, []byte("{}"))
	if err != nil || !bytes.HasPrefix(result, head[:len(head)-1]) {
		return nil, false
	}
	rest := result[len(head)-1:]
	fields := []byte("{}")
	if len(rest) > 1 && rest[0] == ',' {
		fields = append([]byte{'{'}, rest[1:]...)
	}
	if again, err := ResultObject(id, op, fields); err != nil || !bytes.Equal(again, result) {
		return nil, false
	}
	return fields, true
}

// resultHead is how a result object kept whole begins: rows written before
// migration 016, or in ledger form 1 (LEDGER_FORM=1), keep the call's id
// and op in it.
const resultHead = `{"call_id":`

// rowResult returns what the calls row of call id of operation op keeps of
// its result object: its fields (resultFields) unless form1 (ledger form
// 1, the object whole) or unless they do not give it
// back exactly. A result kept whole must begin as ResultObject begins it,
// which callResult tells the two forms by.
func rowResult(result []byte, id, op string, form1 bool) ([]byte, error) {
	if !hasResultHead(result) {
		return nil, fmt.Errorf("result of call %s: does not begin with its call_id", id)
	}
	if form1 {
		return result, nil
	}
	if fields, ok := resultFields(result, id, op); ok {
		return fields, nil
	}
	return result, nil
}

// hasResultHead reports whether b begins with resultHead.
func hasResultHead(b []byte) bool {
	return len(b) >= len(resultHead) && string(b[:len(resultHead)]) == resultHead
}

// callResult returns the result object of call id of operation op from
// what its row keeps: the object whole, or its fields alone
// (resultFields).
func callResult(stored []byte, id, op string) ([]byte, error) {
	if hasResultHead(stored) {
		return stored, nil
	}
	return ResultObject(id, op, stored)
}
