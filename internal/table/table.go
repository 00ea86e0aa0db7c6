// Package table reads tables from text and writes them back: CSV and TSV with
// RFC 4180 quoting, or a JSON array of objects. It is the shared ground of the
// csv-json and data-clean operations.
//
// # Reading
//
// [Parse] decides the format by the first character that is not white space:
// '[' or '{' means JSON, anything else CSV. (A CSV whose first header cell
// begins with '[' or '{' can be read by quoting that cell, or with
// [ParseCSV].)
//
// CSV and TSV text:
//
//   - A UTF-8 byte order mark at the start is dropped.
//   - Records end at CRLF, LF or a lone CR, in any mix. Lines with no
//     characters at all are skipped (counted in [Table.SkippedLines]); a line
//     holding only spaces is a record.
//   - The field delimiter is one of ',' ';' tab '|'. Unless
//     [Options.Delimiter] names it, [DetectDelimiter] picks it by reading the
//     first records with each candidate, quotes respected, and scoring how
//     consistently the records have the header's number of fields.
//   - A field that begins with '"' is quoted: it ends at the next lone '"',
//     may hold delimiters, CR and LF (kept as they are), and "" stands for one
//     '"'. After the closing quote only a delimiter, a line end or the end of
//     the text may follow; anything else (also a space) is an error naming the
//     line. A '"' inside a field that does not begin with one is an ordinary
//     character. Nothing is trimmed: spaces around fields are part of them.
//   - The first record is the header. Every other record must have as many
//     fields as the header, or the parse fails naming the line and row;
//     [Options.AllowRagged] keeps such rows as they are instead.
//
// JSON text must be one array whose elements are all objects; an element of
// another kind is an error naming its index. The columns are the objects' keys
// in the order they are first seen; a key an object lacks is null in that
// row. When a key repeats inside one object the last value wins, as in
// JavaScript.
//
// # Values
//
// Every cell is a [Value]: its text and its [Type]. A CSV cell's type is read
// from its text by [Infer], with one rule: the text is typed as the JSON
// scalar it spells exactly, so converting it to JSON and back gives the same
// text.
//
//   - "" is null.
//   - "true" and "false" (lower case) are booleans.
//   - Text that is a JSON number literal is an integer when it has neither
//     fraction nor exponent, else a number. Size does not matter: digits
//     beyond the range of int64 or float64 are still a number literal, kept as
//     written and never rounded. "007", "+1", ".5", "1.", " 1", "NaN" are not
//     JSON literals, so they are strings and keep their text.
//   - Everything else, including "null", "TRUE" and "1,5", is a string.
//
// A JSON cell's type is its JSON type; its text is the string's content, the
// number literal as written, "true"/"false", "" for null, or the compact JSON
// of a nested object or array.
//
// A column's type is the common type of its non-null cells ([Type.Join]):
// integer within number, any other mix string, and null when every cell is
// null.
//
// # Writing
//
// [Writer] writes records with RFC 4180 quoting and CRLF line ends. It quotes
// more than RFC 4180 needs so that its output reads back as the same table
// through [Parse], delimiter detection included: every field holding '"', CR,
// LF or any candidate delimiter, the only field of a record when it is empty
// (an empty line would be skipped), a field starting with a byte order mark,
// and the first field of the text when it is empty or starts with a space,
// '[' or '{' (so that the text does not begin like JSON).
package table

import (
	"errors"
	"fmt"
)

// Format names a text format of tables.
type Format string

// The formats of tables.
const (
	// CSV is delimiter-separated text with any delimiter but tab.
	CSV Format = "csv"
	// TSV is delimiter-separated text whose delimiter is tab.
	TSV Format = "tsv"
	// JSON is a JSON array of objects.
	JSON Format = "json"
)

// Delimiters are the field delimiters [DetectDelimiter] chooses from, in the
// order it prefers them when the text does not decide.
const Delimiters = ",\t;|"

// Table is a parsed table.
type Table struct {
	// Format is the format the table was read from: CSV, TSV (CSV text whose
	// delimiter is tab) or JSON.
	Format Format
	// Delimiter is the field delimiter of CSV and TSV text, 0 for JSON.
	Delimiter byte
	// Header holds the column names as written, possibly empty or repeated.
	// See [UniqueNames].
	Header []string
	// Rows holds the data rows. Each has len(Header) cells unless the table
	// was read with [Options.AllowRagged].
	Rows [][]Value
	// Lines holds, for each row, the 1-based line of the text it starts on.
	Lines []int
	// SkippedLines counts the empty lines of CSV text that were skipped.
	SkippedLines int
}

// ColumnTypes returns the type of each column: the [Type.Join] of its cells.
// Cells beyond the header of a ragged row are not counted.
func (t *Table) ColumnTypes() []Type {
	types := make([]Type, len(t.Header))
	for _, row := range t.Rows {
		for i, v := range row {
			if i < len(types) {
				types[i] = types[i].Join(v.Type)
			}
		}
	}
	return types
}

// Value is one cell of a table.
type Value struct {
	// Text is the cell's text, as described in the package documentation.
	Text string
	// Type is the cell's type.
	Type Type
}

// Cell returns the Value of a CSV cell: text typed by [Infer].
func Cell(text string) Value { return Value{Text: text, Type: Infer(text)} }

// Type is the type of a cell or a column. Its names are JSON Schema's.
type Type uint8

// The types of cells and columns.
const (
	// Null is an empty CSV cell, a JSON null or a missing key.
	Null Type = iota
	// Boolean is true or false.
	Boolean
	// Integer is a number without fraction or exponent.
	Integer
	// Number is any other number.
	Number
	// String is text.
	String
	// Object is a nested JSON object (JSON input only).
	Object
	// Array is a nested JSON array (JSON input only).
	Array
)

// String returns the type's JSON Schema name: "null", "boolean", "integer",
// "number", "string", "object" or "array".
func (t Type) String() string {
	switch t {
	case Null:
		return "null"
	case Boolean:
		return "boolean"
	case Integer:
		return "integer"
	case Number:
		return "number"
	case String:
		return "string"
	case Object:
		return "object"
	case Array:
		return "array"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// MarshalText encodes the type as its name.
func (t Type) MarshalText() ([]byte, error) {
	if t > Array {
		return nil, fmt.Errorf("table: unknown type %d", uint8(t))
	}
	return []byte(t.String()), nil
}

// Join returns the common type of t and u: null joined with anything is the
// other type, integer joined with number is number, and any other two
// different types join to string.
func (t Type) Join(u Type) Type {
	switch {
	case t == u || u == Null:
		return t
	case t == Null:
		return u
	case (t == Integer && u == Number) || (t == Number && u == Integer):
		return Number
	default:
		return String
	}
}

// Infer returns the type of a CSV cell's text (see the package documentation).
func Infer(s string) Type {
	if s == "" {
		return Null
	}
	switch c := s[0]; {
	case c == '-' || (c >= '0' && c <= '9'):
		return numberType(s)
	case c == 't':
		if s == "true" {
			return Boolean
		}
	case c == 'f':
		if s == "false" {
			return Boolean
		}
	}
	return String
}

// numberType returns Integer or Number when s is a JSON number literal, else
// String.
func numberType(s string) Type {
	i := 0
	if s[0] == '-' {
		i++
	}
	// Integer part: 0, or a non-zero digit followed by digits.
	switch {
	case i >= len(s):
		return String
	case s[i] == '0':
		i++
	case s[i] >= '1' && s[i] <= '9':
		for i++; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		}
	default:
		return String
	}
	t := Integer
	if i < len(s) && s[i] == '.' {
		i++
		start := i
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		}
		if i == start {
			return String
		}
		t = Number
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		start := i
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		}
		if i == start {
			return String
		}
		t = Number
	}
	if i != len(s) {
		return String
	}
	return t
}

// UniqueNames returns header with every name usable as a distinct JSON key:
// an empty name becomes "column_N" (N its 1-based position), and a name seen
// before gets the first free suffix "_2", "_3", .... Names already unique and
// non-empty are kept.
func UniqueNames(header []string) []string {
	out := make([]string, len(header))
	taken := make(map[string]bool, len(header))
	for _, name := range header {
		taken[name] = true
	}
	used := make(map[string]bool, len(header))
	for i, name := range header {
		if name == "" {
			name = fmt.Sprintf("column_%d", i+1)
		}
		if used[name] {
			base := name
			for n := 2; ; n++ {
				name = fmt.Sprintf("%s_%d", base, n)
				if !used[name] && !taken[name] {
					break
				}
			}
		}
		used[name] = true
		out[i] = name
	}
	return out
}

// Errors that [ParseError.Err] holds; test with errors.Is.
var (
	// ErrEmpty means the text holds no record, not even a header.
	ErrEmpty = errors.New("no header row")
	// ErrQuote means a quoted field is not closed, or is followed by
	// something other than a delimiter or a line end.
	ErrQuote = errors.New("bad quoting")
	// ErrFieldCount means a row has more or fewer fields than the header.
	ErrFieldCount = errors.New("wrong number of fields")
	// ErrSyntax means JSON text is not valid JSON.
	ErrSyntax = errors.New("invalid JSON")
	// ErrNotArray means JSON text is not an array.
	ErrNotArray = errors.New("not a JSON array")
	// ErrNotObject means an element of the JSON array is not an object.
	ErrNotObject = errors.New("array element is not an object")
	// ErrTooManyRows means the table has more rows than [Options.MaxRows].
	ErrTooManyRows = errors.New("too many rows")
	// ErrTooManyCells means the table has more cells than
	// [Options.MaxCells].
	ErrTooManyCells = errors.New("too many cells")
)

// ParseError is a problem with the text being parsed: the caller's input,
// never a fault of the program.
type ParseError struct {
	// Err is one of the Err variables of this package.
	Err error
	// Line is the 1-based line of the text where the problem is, or 0.
	Line int
	// Row is the 1-based data row (the header is row 0) of ErrFieldCount,
	// and the 0-based array index of ErrNotObject; 0 otherwise.
	Row int
	// Msg says what is wrong, for a person; it includes Line and Row.
	Msg string
}

func (e *ParseError) Error() string { return e.Msg }

// Unwrap returns e.Err.
func (e *ParseError) Unwrap() error { return e.Err }
