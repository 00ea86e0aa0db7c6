// Package csvjson implements the csv-json operation: convert a table between
// CSV/TSV text and a JSON array of objects, reporting the detected format and
// delimiter and the type of each column.
//
// Reading follows package internal/table: JSON when the text begins with '['
// or '{', else CSV or TSV with the delimiter detected among ',' ';' tab '|',
// RFC 4180 quoting and the first row as the header. A row with the wrong
// number of fields, bad quoting, or a JSON element that is not an object is
// refused by Validate (400, field "data", naming the line and row), before
// any payment.
//
// Decisions the contract leaves open:
//
//   - to defaults to "json" for CSV/TSV input and to "csv" for JSON input.
//   - Column names are made unique and non-empty everywhere in the result
//     (columns, JSON keys, CSV header): an empty header cell is "column_N"
//     (its 1-based position), a repeated name gets "_2", "_3", ...
//   - CSV cells are typed by what their exact text spells as JSON: "" is
//     null, true/false booleans, a JSON number literal an integer or number;
//     everything else, "007", "+1", "1,5", " 1", "TRUE" and "null" included,
//     a string, so no text is ever changed. Nothing is trimmed.
//   - A column's type is the common type of its non-null cells (integer
//     within number, any other mix string), "null" when all are null. In
//     JSON output from CSV every value takes its column's type: in a string
//     column, "90210" stays "90210" next to "02134".
//   - Numbers are copied digit for digit, never rounded: integers beyond
//     int64 (or 2^53) and exponents beyond float64 keep their exact text, as
//     JSON number literals. Readers whose numbers are doubles (JavaScript's
//     JSON.parse) should parse such columns with a big-number-aware reader.
//   - JSON input keeps each value's own JSON type in JSON output; objects
//     missing a key get null. Written as CSV/TSV, null is an empty cell,
//     booleans and numbers are their literal text, and nested objects and
//     arrays are their compact JSON text.
//   - A table may have at most 2,000,000 cells (rows × columns), which only
//     JSON input whose objects have different keys can reach.
//   - CSV/TSV output uses RFC 4180 quoting and CRLF line ends, with ','
//     or tab; fields holding any of ',' ';' tab '|' are quoted too, so the
//     output reads back as the same table with its delimiter detected.
package csvjson

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/x402d/x402d/internal/table"
	"github.com/x402d/x402d/jobs"
)

// Kind is the operation's name and River job kind.
const Kind = "csv-json"

// maxCells bounds rows × columns of a table. Text within the 1 MiB body
// limit holds about a million CSV cells at most; the bound matters for JSON
// whose objects each have other keys, which would otherwise make a table
// (and an output) far larger than its text.
const maxCells = 2_000_000

// maxJSONOutput bounds the JSON output of a table: each of its objects
// repeats every column's name, so a table of long names and many rows would
// otherwise make gigabytes from a text within the body limit (a name of
// 900 kB over 50,000 rows: 45 GB). Legitimate tables make a few times their
// text at most.
const maxJSONOutput = 32 << 20

// Target formats, the values of Input.To.
const (
	ToJSON = "json"
	ToCSV  = "csv"
	ToTSV  = "tsv"
)

// Input is the request body of csv-json.
type Input struct {
	// Data is the table: CSV or TSV text, or a JSON array of objects.
	Data string `json:"data"`
	// To is the target format: "json", "csv" or "tsv". Defaults to "json"
	// for CSV/TSV data and "csv" for JSON data.
	To string `json:"to"`
}

// Kind returns "csv-json".
func (Input) Kind() string { return Kind }

// Validate requires data and a known to, and parses the table, refusing
// bad quoting, rows of the wrong length, JSON that is not an array of
// objects, tables of more than lim.MaxRows rows, tables of more than
// 2,000,000 cells (rows × columns), and tables whose JSON output would pass
// 32 MiB.
func (in Input) Validate(lim *jobs.Limits) error {
	l := jobs.DefaultLimits
	if lim != nil {
		l = lim.WithDefaults()
	}
	if in.Data == "" {
		return jobs.Invalid("data", "is required")
	}
	switch in.To {
	case "", ToJSON, ToCSV, ToTSV:
	default:
		return jobs.Invalid("to", "must be one of json, csv or tsv, not %q", in.To)
	}
	t, err := parse(in.Data, l.MaxRows)
	if err != nil {
		return err
	}
	return checkOutput(t, target(t, in.To))
}

// target returns the format t is converted to when asked for to ("": the
// other format's default).
func target(t *table.Table, to string) string {
	if to != "" {
		return to
	}
	if t.Format == table.JSON {
		return ToCSV
	}
	return ToJSON
}

// checkOutput refuses, as invalid data, a conversion of t to format to
// whose output would pass its limit (maxJSONOutput).
func checkOutput(t *table.Table, to string) error {
	if to != ToJSON {
		return nil
	}
	if size := jsonSize(t, table.UniqueNames(t.Header)); size > maxJSONOutput {
		return jobs.Invalid("data", "converted to json it would take about %d MiB (each row repeats every column name), more than %d MiB: use shorter column names, fewer rows, or csv",
			size>>20, maxJSONOutput>>20)
	}
	return nil
}

// jsonSize returns about how many bytes t's rows take as JSON objects keyed
// by names (appendRows), before escapes.
func jsonSize(t *table.Table, names []string) int {
	size := 2
	for _, name := range names {
		size += (len(name) + 3) * len(t.Rows)
	}
	for _, row := range t.Rows {
		size += 3 + len(row)*4
		for _, v := range row {
			size += len(v.Text)
		}
	}
	return size
}

// parse reads data as a table, turning problems with the text into
// *jobs.InvalidError for field data. maxRows of 0 means no limit.
func parse(data string, maxRows int) (*table.Table, error) {
	t, err := table.Parse(data, &table.Options{MaxRows: maxRows, MaxCells: maxCells})
	var pe *table.ParseError
	if errors.As(err, &pe) {
		return nil, jobs.Invalid("data", "%s", pe.Msg)
	}
	if err != nil {
		return nil, fmt.Errorf("parse data: %w", err)
	}
	return t, nil
}

// Result is csv-json's result object (contract.md, "Results per operation").
type Result struct {
	// From is the input format: "csv", "tsv" or "json".
	From string `json:"from"`
	// To is the output format: "json", "csv" or "tsv".
	To string `json:"to"`
	// Delimiter is the input's field delimiter, null for JSON input.
	Delimiter *string `json:"delimiter"`
	// Columns are the table's columns in order.
	Columns []Column `json:"columns"`
	// RowCount is the number of data rows, the header not counted.
	RowCount int `json:"row_count"`
	// Output is the converted table: an array of objects for "json", a
	// string of CSV or TSV text otherwise.
	Output json.RawMessage `json:"output"`
}

// Column describes one column of the table.
type Column struct {
	// Name is the column's unique name, as used in the output.
	Name string `json:"name"`
	// Type is "integer", "number", "boolean", "string", "null" (every
	// value empty), or for JSON input also "object" or "array".
	Type string `json:"type"`
}

// Work converts in.Data to in.To. Work assumes in was validated; problems
// with the text are still *jobs.InvalidError.
func Work(ctx context.Context, in Input) (*Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("csv-json: %w", err)
	}
	t, err := parse(in.Data, 0)
	if err != nil {
		return nil, err
	}
	return Convert(t, in.To)
}

// Convert returns the result of converting t to format to ("" for the
// default of t's format).
func Convert(t *table.Table, to string) (*Result, error) {
	to = target(t, to)
	if err := checkOutput(t, to); err != nil {
		return nil, err
	}
	names := table.UniqueNames(t.Header)
	types := t.ColumnTypes()
	res := &Result{From: string(t.Format), To: to, RowCount: len(t.Rows), Columns: make([]Column, len(names))}
	if t.Delimiter != 0 {
		d := string(t.Delimiter)
		res.Delimiter = &d
	}
	for i, name := range names {
		res.Columns[i] = Column{Name: name, Type: types[i].String()}
	}
	switch to {
	case ToJSON:
		res.Output = appendRows(nil, t, names, types)
	case ToCSV, ToTSV:
		delim := byte(',')
		if to == ToTSV {
			delim = '\t'
		}
		text := table.Encode(names, t.Rows, delim)
		res.Output = appendString(make([]byte, 0, len(text)+len(text)/8+2), text)
	default:
		return nil, jobs.Invalid("to", "must be one of json, csv or tsv, not %q", to)
	}
	return res, nil
}

// appendRows appends t's rows as a JSON array of objects keyed by names.
// Values from CSV take their column's type; values from JSON keep their own.
func appendRows(dst []byte, t *table.Table, names []string, types []table.Type) []byte {
	keys := make([][]byte, len(names))
	for i, name := range names {
		keys[i] = append(appendString(nil, name), ':')
	}
	if dst == nil {
		size := jsonSize(t, names)
		dst = make([]byte, 0, size+size/16)
	}
	fromJSON := t.Format == table.JSON
	dst = append(dst, '[')
	for r, row := range t.Rows {
		if r > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		for i, v := range row {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, keys[i]...)
			typ := v.Type
			if !fromJSON && typ != table.Null {
				typ = types[i]
			}
			switch typ {
			case table.Null:
				dst = append(dst, "null"...)
			case table.String:
				dst = appendString(dst, v.Text)
			default: // literal JSON: numbers, booleans, nested values
				dst = append(dst, v.Text...)
			}
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendString appends s as a JSON string. Each byte of invalid UTF-8 becomes
// U+FFFD, as with encoding/json; control characters, U+2028 and U+2029 are
// escaped; everything else is copied.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// inputSchema is the JSON Schema of csv-json's request body.
const inputSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "csv-json request",
  "type": "object",
  "properties": {
    "data": {
      "type": "string",
      "minLength": 1,
      "description": "The table: CSV or TSV text (delimiter detected among comma, semicolon, tab and pipe; RFC 4180 quoting; first row is the header; at most 50,000 rows), or a JSON array of objects."
    },
    "to": {
      "type": "string",
      "enum": ["json", "csv", "tsv"],
      "description": "Target format. Defaults to json for CSV/TSV data and csv for JSON data."
    }
  },
  "required": ["data"],
  "additionalProperties": false
}`

// exampleInput is the input of the catalogue example.
var exampleInput = Input{
	Data: "sku;name;price;in_stock;zip\nA-1;Widget;9.99;true;02134\nB-2;\"Gadget; large\";12;false;90210\n",
	To:   ToJSON,
}

// Op is csv-json's catalogue entry and request decoder.
var Op = jobs.Define[Input](jobs.Spec{
	Name:         Kind,
	Price:        "0.020000",
	Queue:        jobs.QueuePure,
	Description:  "Convert a table between CSV/TSV and a JSON array of objects, either direction: delimiter detected (comma, semicolon, tab, pipe), RFC 4180 quoting, first row as header, typed columns (integer, number, boolean, null for empty, else string) and row count.",
	InputExample: exampleInput,
	InputSchema:  json.RawMessage(inputSchema),
	OutputExample: Result{
		From:      "csv",
		To:        "json",
		Delimiter: ptr(";"),
		Columns: []Column{
			{Name: "sku", Type: "string"},
			{Name: "name", Type: "string"},
			{Name: "price", Type: "number"},
			{Name: "in_stock", Type: "boolean"},
			{Name: "zip", Type: "string"},
		},
		RowCount: 2,
		Output: json.RawMessage(`[{"sku":"A-1","name":"Widget","price":9.99,"in_stock":true,"zip":"02134"},` +
			`{"sku":"B-2","name":"Gadget; large","price":12,"in_stock":false,"zip":"90210"}]`),
	},
})

func ptr[T any](v T) *T { return &v }
