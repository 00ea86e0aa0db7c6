package table

import (
	"fmt"
	"strings"
)

// Writer writes records as CSV or TSV text with RFC 4180 quoting and CRLF
// line ends, quoting whatever [Parse] needs to read the same table back (see
// the package documentation). The zero value is not usable; call
// [NewWriter].
type Writer struct {
	delim   byte
	buf     []byte
	records int
}

// NewWriter returns a Writer using delim, one of [Delimiters]. It panics on
// any other delimiter, a programming error.
func NewWriter(delim byte) *Writer {
	if strings.IndexByte(Delimiters, delim) < 0 {
		panic(fmt.Sprintf("table: delimiter %q is not one of %q", delim, Delimiters))
	}
	return &Writer{delim: delim}
}

// Grow makes room for n more bytes of output.
func (w *Writer) Grow(n int) {
	if cap(w.buf)-len(w.buf) < n {
		buf := make([]byte, len(w.buf), len(w.buf)+n)
		copy(buf, w.buf)
		w.buf = buf
	}
}

// WriteRecord writes one record. A record of no fields writes nothing, as an
// empty line would be skipped when read.
func (w *Writer) WriteRecord(fields []string) {
	if len(fields) == 0 {
		return
	}
	for i, f := range fields {
		w.field(f, i, len(fields))
	}
	w.end()
}

// WriteValues writes one record of the values' texts.
func (w *Writer) WriteValues(values []Value) {
	if len(values) == 0 {
		return
	}
	for i, v := range values {
		w.field(v.Text, i, len(values))
	}
	w.end()
}

func (w *Writer) field(f string, i, n int) {
	if i > 0 {
		w.buf = append(w.buf, w.delim)
	}
	if !w.needsQuotes(f, i, n) {
		w.buf = append(w.buf, f...)
		return
	}
	w.buf = append(w.buf, '"')
	for {
		j := strings.IndexByte(f, '"')
		if j < 0 {
			break
		}
		w.buf = append(w.buf, f[:j+1]...)
		w.buf = append(w.buf, '"')
		f = f[j+1:]
	}
	w.buf = append(w.buf, f...)
	w.buf = append(w.buf, '"')
}

func (w *Writer) end() {
	w.buf = append(w.buf, '\r', '\n')
	w.records++
}

// needsQuotes reports whether field f, the i-th of n in its record, must be
// quoted.
func (w *Writer) needsQuotes(f string, i, n int) bool {
	if w.records == 0 && i == 0 && (f == "" || f[0] == ' ' || f[0] == '[' || f[0] == '{') {
		// The text must not begin like JSON, also after a tab delimiter.
		return true
	}
	if f == "" {
		return n == 1
	}
	if strings.HasPrefix(f, bom) {
		return true
	}
	for k := 0; k < len(f); k++ {
		switch f[k] {
		case '"', '\r', '\n', ',', '\t', ';', '|':
			return true
		}
	}
	return false
}

// String returns the text written so far.
func (w *Writer) String() string { return string(w.buf) }

// Bytes returns the text written so far. It aliases the Writer's buffer
// until the next write.
func (w *Writer) Bytes() []byte { return w.buf }

// Len returns the number of bytes written so far.
func (w *Writer) Len() int { return len(w.buf) }

// Encode returns header and rows as CSV or TSV text with delimiter delim
// (one of [Delimiters]). A table of no columns is the empty text.
func Encode(header []string, rows [][]Value, delim byte) string {
	w := NewWriter(delim)
	if len(header) == 0 {
		return ""
	}
	// Room for every field once, its delimiter or line end, and a few
	// quotes, so that the buffer rarely grows.
	size := 0
	for _, h := range header {
		size += len(h) + 2
	}
	for _, row := range rows {
		for _, v := range row {
			size += len(v.Text) + 1
		}
		size++
	}
	w.Grow(size + size/16)
	w.WriteRecord(header)
	for _, row := range rows {
		w.WriteValues(row)
	}
	return w.String()
}
