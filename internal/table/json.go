package table

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ParseJSON reads a table from a JSON array of objects (see the package
// documentation). opts may be nil; Delimiter and AllowRagged do not apply. Problems with the
// text are *ParseError.
func ParseJSON(text string, opts *Options) (*Table, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	text = strings.TrimPrefix(text, bom)
	lines := lineCounter{s: text, line: 1}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()

	tok, err := dec.Token()
	if err != nil {
		return nil, jsonError(err, dec, &lines)
	}
	if tok != json.Delim('[') {
		return nil, &ParseError{Err: ErrNotArray, Line: 1,
			Msg: fmt.Sprintf("JSON input must be an array of objects, not %s", describe(tok))}
	}

	t := &Table{Format: JSON, Header: []string{}}
	columns := map[string]int{}
	for i := 0; dec.More(); i++ {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonError(err, dec, &lines)
		}
		line := lines.at(int(dec.InputOffset()) - 1)
		if tok != json.Delim('{') {
			return nil, &ParseError{Err: ErrNotObject, Line: line, Row: i,
				Msg: fmt.Sprintf("line %d: element %d of the array is %s, not an object", line, i, describe(tok))}
		}
		if o.MaxRows > 0 && len(t.Rows) == o.MaxRows {
			return nil, &ParseError{Err: ErrTooManyRows, Line: line,
				Msg: fmt.Sprintf("line %d: the table has more than %d rows", line, o.MaxRows)}
		}
		row := make([]Value, len(t.Header))
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, jsonError(err, dec, &lines)
			}
			key := tok.(string) // object keys are strings
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, jsonError(err, dec, &lines)
			}
			v, err := jsonValue(raw)
			if err != nil {
				return nil, jsonError(err, dec, &lines)
			}
			col, ok := columns[key]
			if !ok {
				col = len(t.Header)
				columns[key] = col
				t.Header = append(t.Header, key)
			}
			for len(row) <= col {
				row = append(row, Value{})
			}
			row[col] = v
		}
		if _, err := dec.Token(); err != nil { // '}'
			return nil, jsonError(err, dec, &lines)
		}
		if o.MaxCells > 0 && (len(t.Rows)+1)*len(t.Header) > o.MaxCells {
			return nil, tooManyCells(line, o.MaxCells)
		}
		t.Rows = append(t.Rows, row)
		t.Lines = append(t.Lines, line)
	}
	if _, err := dec.Token(); err != nil { // ']'
		return nil, jsonError(err, dec, &lines)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		line := lines.at(int(dec.InputOffset()))
		return nil, &ParseError{Err: ErrSyntax, Line: line,
			Msg: fmt.Sprintf("line %d: invalid JSON: data after the array", line)}
	}
	// Rows read before a column first appeared lack it: null.
	for i, row := range t.Rows {
		for len(row) < len(t.Header) {
			row = append(row, Value{})
		}
		t.Rows[i] = row
	}
	return t, nil
}

// jsonValue returns the Value of one JSON value.
func jsonValue(raw json.RawMessage) (Value, error) {
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return Value{}, err
		}
		return Value{Text: s, Type: String}, nil
	case 't', 'f':
		return Value{Text: string(raw), Type: Boolean}, nil
	case 'n':
		return Value{}, nil
	case '{', '[':
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return Value{}, err
		}
		typ := Object
		if raw[0] == '[' {
			typ = Array
		}
		return Value{Text: b.String(), Type: typ}, nil
	default:
		typ := Integer
		if bytes.ContainsAny(raw, ".eE") {
			typ = Number
		}
		return Value{Text: string(raw), Type: typ}, nil
	}
}

// describe names the kind of a JSON token, with its article.
func describe(tok json.Token) string {
	switch tok := tok.(type) {
	case json.Delim:
		if tok == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	default:
		return fmt.Sprintf("%T", tok)
	}
}

// jsonError turns an error of the JSON decoder into a *ParseError.
func jsonError(err error, dec *json.Decoder, lines *lineCounter) error {
	offset := int(dec.InputOffset())
	var se *json.SyntaxError
	if errors.As(err, &se) {
		offset = int(se.Offset)
	}
	msg := err.Error()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		offset = len(lines.s)
		msg = "unexpected end of text"
	}
	msg = strings.TrimPrefix(msg, "json: ")
	line := lines.at(offset)
	return &ParseError{Err: ErrSyntax, Line: line, Msg: fmt.Sprintf("line %d: invalid JSON: %s", line, msg)}
}

// lineCounter maps increasing byte offsets of s to 1-based line numbers in
// linear total time.
type lineCounter struct {
	s    string
	pos  int
	line int
}

// at returns the line of s[offset]. Offsets before the last one asked are
// counted from the start again.
func (c *lineCounter) at(offset int) int {
	offset = min(max(offset, 0), len(c.s))
	if offset < c.pos {
		c.pos, c.line = 0, 1
	}
	for i := c.pos; i < offset; i++ {
		switch c.s[i] {
		case '\n':
			c.line++
		case '\r':
			if i+1 == len(c.s) || c.s[i+1] != '\n' {
				c.line++
			}
		}
	}
	c.pos = offset
	return c.line
}
