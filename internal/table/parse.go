package table

import (
	"fmt"
	"strings"
)

// Options adjust how text is parsed. The zero value detects everything and
// is strict.
type Options struct {
	// Delimiter is the field delimiter of CSV text, one of [Delimiters].
	// Defaults to detecting it with [DetectDelimiter].
	Delimiter byte
	// AllowRagged keeps rows whose number of fields differs from the
	// header's as they are. Defaults to false: such a row is an
	// ErrFieldCount error.
	AllowRagged bool
	// MaxRows, when positive, is the most data rows accepted; one more is an
	// ErrTooManyRows error, raised without reading the rest of the text.
	MaxRows int
	// MaxCells, when positive, bounds rows × columns; more is an
	// ErrTooManyCells error. CSV text has at most about one cell per byte,
	// but JSON objects with few keys each, all different, make a table far
	// larger than its text: this bounds the memory a parse may take.
	MaxCells int
}

// bom is the UTF-8 byte order mark.
const bom = "\uFEFF"

// Parse reads a table from text: JSON when its first character that is not
// white space is '[' or '{', else CSV or TSV. opts may be nil. Problems with
// the text are *ParseError.
func Parse(text string, opts *Options) (*Table, error) {
	if looksLikeJSON(text) {
		return ParseJSON(text, opts)
	}
	return ParseCSV(text, opts)
}

// looksLikeJSON reports whether text, after a byte order mark and white
// space, begins with '[' or '{'.
func looksLikeJSON(text string) bool {
	text = strings.TrimPrefix(text, bom)
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case ' ', '\t', '\r', '\n':
		case '[', '{':
			return true
		default:
			return false
		}
	}
	return false
}

// ParseCSV reads CSV or TSV text (see the package documentation). opts may
// be nil. Problems with the text are *ParseError.
func ParseCSV(text string, opts *Options) (*Table, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	text = strings.TrimPrefix(text, bom)
	delim := o.Delimiter
	switch {
	case delim == 0:
		delim = DetectDelimiter(text)
	case strings.IndexByte(Delimiters, delim) < 0:
		return nil, fmt.Errorf("table: delimiter %q is not one of %q", delim, Delimiters)
	}

	t := &Table{Format: CSV, Delimiter: delim}
	if delim == '\t' {
		t.Format = TSV
	}
	lx := lexer{s: text, delim: delim, line: 1}
	header, _, err := lx.next()
	if err != nil {
		return nil, err
	}
	if header == nil {
		return nil, &ParseError{Err: ErrEmpty, Msg: "the text has no header row"}
	}
	t.Header = append([]string(nil), header...)

	// Rows are counted roughly ahead (line feeds, an upper bound unless
	// the text ends lines with lone CRs) so that nothing is copied while
	// growing, and cells are carved out of large shared blocks, so that a
	// row costs no allocation of its own.
	est := strings.Count(text[lx.pos:], "\n") + 1
	if o.MaxRows > 0 {
		est = min(est, o.MaxRows)
	}
	t.Rows = make([][]Value, 0, est)
	t.Lines = make([]int, 0, est)
	// No text has more cells than bytes plus one per row.
	block := make([]Value, 0, min(est*len(t.Header), len(text)+est))
	for {
		fields, line, err := lx.next()
		if err != nil {
			return nil, err
		}
		if fields == nil {
			break
		}
		if o.MaxRows > 0 && len(t.Rows) == o.MaxRows {
			return nil, &ParseError{Err: ErrTooManyRows, Line: line,
				Msg: fmt.Sprintf("line %d: the table has more than %d rows", line, o.MaxRows)}
		}
		if o.MaxCells > 0 && (len(t.Rows)+1)*len(t.Header) > o.MaxCells {
			return nil, tooManyCells(line, o.MaxCells)
		}
		if len(fields) != len(t.Header) && !o.AllowRagged {
			row := len(t.Rows) + 1
			return nil, &ParseError{Err: ErrFieldCount, Line: line, Row: row,
				Msg: fmt.Sprintf("line %d: row %d has %d %s, the header has %d",
					line, row, len(fields), plural(len(fields), "field", "fields"), len(t.Header))}
		}
		n := len(fields)
		if cap(block)-len(block) < n {
			// Later rows hold at most one cell per byte left, plus one.
			block = make([]Value, 0, n+min(64*len(t.Header)+1024, len(text)-lx.pos+1))
		}
		row := block[len(block) : len(block)+n : len(block)+n]
		block = block[:len(block)+n]
		for i, f := range fields {
			row[i] = Value{Text: f, Type: Infer(f)}
		}
		t.Rows = append(t.Rows, row)
		t.Lines = append(t.Lines, line)
	}
	t.SkippedLines = lx.skipped
	return t, nil
}

func tooManyCells(line, maxCells int) error {
	return &ParseError{Err: ErrTooManyCells, Line: line,
		Msg: fmt.Sprintf("line %d: the table has more than %d cells (rows × columns)", line, maxCells)}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// lexer splits CSV text into records.
type lexer struct {
	s     string
	pos   int
	line  int // the 1-based line of s[pos]
	delim byte
	// skipped counts the empty lines skipped so far.
	skipped int
	fields  []string
	buf     []byte
	// endedAtEOF reports whether the last record ended at the end of s
	// rather than at a line end.
	endedAtEOF bool
	// unclosed reports that the last error was a quoted field never closed.
	unclosed bool
	// countBare asks to count in bare the fields that are not quoted but
	// hold a quote (for delimiter detection).
	countBare bool
	bare      int
}

// next returns the fields of the next record and the line it starts on, or
// nil fields at the end of the text. The slice is reused by the next call;
// the strings are not.
func (l *lexer) next() ([]string, int, error) {
	s := l.s
	// Skip empty lines.
	for l.pos < len(s) {
		c := s[l.pos]
		if c == '\n' {
			l.pos++
		} else if c == '\r' {
			l.pos++
			if l.pos < len(s) && s[l.pos] == '\n' {
				l.pos++
			}
		} else {
			break
		}
		l.line++
		l.skipped++
	}
	if l.pos >= len(s) {
		return nil, 0, nil
	}

	start := l.line
	fields := l.fields[:0]
	delim := l.delim
	pos := l.pos
	for {
		if pos < len(s) && s[pos] == '"' {
			text, end, err := l.quoted(pos)
			if err != nil {
				return nil, 0, err
			}
			fields = append(fields, text)
			pos = end
			if pos == len(s) {
				l.endedAtEOF = true
				break
			}
			c := s[pos]
			if c == delim {
				pos++
				continue
			}
			if c != '\n' && c != '\r' {
				return nil, 0, &ParseError{Err: ErrQuote, Line: l.line,
					Msg: fmt.Sprintf("line %d: %q follows the closing quote of a field; only a delimiter or a line end may (a quote inside a quoted field is written twice)", l.line, c)}
			}
		} else {
			i := pos
			for i < len(s) {
				c := s[i]
				if c == delim || c == '\n' || c == '\r' {
					break
				}
				i++
			}
			fields = append(fields, s[pos:i])
			if l.countBare && strings.IndexByte(s[pos:i], '"') >= 0 {
				l.bare++
			}
			pos = i
			if pos == len(s) {
				l.endedAtEOF = true
				break
			}
			if s[pos] == delim {
				pos++
				continue
			}
		}
		// A line end closes the record.
		l.endedAtEOF = false
		if s[pos] == '\r' && pos+1 < len(s) && s[pos+1] == '\n' {
			pos++
		}
		pos++
		l.line++
		break
	}
	l.pos = pos
	l.fields = fields
	return fields, start, nil
}

// quoted reads the quoted field whose opening quote is at s[pos]. It returns
// the field's text and the position after its closing quote.
func (l *lexer) quoted(pos int) (string, int, error) {
	s := l.s
	open := l.line
	i := pos + 1
	seg := i
	escaped := false
	l.buf = l.buf[:0]
	for {
		j := strings.IndexByte(s[i:], '"')
		if j < 0 {
			l.unclosed = true
			return "", 0, &ParseError{Err: ErrQuote, Line: open,
				Msg: fmt.Sprintf("line %d: a quoted field is never closed", open)}
		}
		l.line += countLines(s[i : i+j])
		q := i + j
		if q+1 < len(s) && s[q+1] == '"' {
			l.buf = append(l.buf, s[seg:q+1]...)
			seg = q + 2
			i = seg
			escaped = true
			continue
		}
		if !escaped {
			return s[pos+1 : q], q + 1, nil
		}
		l.buf = append(l.buf, s[seg:q]...)
		return string(l.buf), q + 1, nil
	}
}

// countLines counts the line ends in s: CRLF, LF and lone CR. A CR at the end
// of s counts as a lone CR.
func countLines(s string) int {
	n := strings.Count(s, "\n")
	if strings.IndexByte(s, '\r') < 0 {
		return n
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '\r' && (i+1 == len(s) || s[i+1] != '\n') {
			n++
		}
	}
	return n
}

// Detection reads at most this many records and bytes of the text.
const (
	sniffRecords = 50
	sniffBytes   = 64 << 10
)

// DetectDelimiter returns the field delimiter of CSV text, one of
// [Delimiters]. It reads the first records (at most 50, within the first
// 64 KiB) with each candidate, quotes respected, and takes the candidate
// that splits the header into two or more fields and then, in order:
// gives the largest share of records with the header's number of fields (a
// quoting error counts as one record that does not), the smallest share of
// unquoted fields holding a quote (RFC 4180 quotes those, so they hint at a
// split inside a quoted field), the smallest share of fields starting with
// a space (a sign of prose, as in "Smith, John"), splits the header into
// the most fields, and comes first in [Delimiters]. When no candidate
// splits the header, the table has one column and the delimiter is ','.
func DetectDelimiter(text string) byte {
	text = strings.TrimPrefix(text, bom)
	sample, truncated := text, false
	if len(sample) > sniffBytes {
		sample, truncated = sample[:sniffBytes], true
	}
	best, bestScore := byte(','), sniffScore{}
	for i := 0; i < len(Delimiters); i++ {
		d := Delimiters[i]
		sc := sniff(sample, d, truncated)
		if sc.better(bestScore) {
			best, bestScore = d, sc
		}
	}
	return best
}

// sniffScore is how well one candidate delimiter fits the sample.
type sniffScore struct {
	header  int // fields in the header
	records int // records after the header
	match   int // of those, records with the header's field count
	fields  int // fields after the first of each record
	spaced  int // of those, fields starting with a space
	all     int // all fields
	bare    int // of those, fields not quoted but holding a quote
}

// better reports whether s beats t. A score whose header has fewer than two
// fields never wins.
func (s sniffScore) better(t sniffScore) bool {
	if s.header < 2 {
		return false
	}
	if t.header < 2 {
		return true
	}
	// Fractions are compared by cross-multiplying.
	sm, sr := s.consistency()
	tm, tr := t.consistency()
	if a, b := sm*tr, tm*sr; a != b {
		return a > b
	}
	if a, b := s.bare*t.all, t.bare*s.all; a != b {
		return a < b
	}
	if a, b := s.spaced*t.fields, t.spaced*s.fields; a != b {
		return a < b
	}
	return s.header > t.header
}

// consistency returns the fraction of records after the header that have
// the header's field count, as numerator and denominator; 1/1 when there are
// no such records.
func (s sniffScore) consistency() (int, int) {
	if s.records == 0 {
		return 1, 1
	}
	return s.match, s.records
}

// sniff scores delimiter d on sample, the start of the text (truncated) or
// all of it.
func sniff(sample string, d byte, truncated bool) sniffScore {
	var sc sniffScore
	lx := lexer{s: sample, delim: d, line: 1, countBare: true}
	for n := 0; n < sniffRecords; n++ {
		fields, _, err := lx.next()
		if err != nil {
			// An unclosed quote in a truncated sample is where it was cut;
			// anything else is a record that does not fit.
			if !truncated || !lx.unclosed {
				sc.records++
			}
			break
		}
		if fields == nil || (truncated && lx.endedAtEOF) {
			break
		}
		if n == 0 {
			sc.header = len(fields)
		} else {
			sc.records++
			if len(fields) == sc.header {
				sc.match++
			}
		}
		sc.all += len(fields)
		sc.bare += lx.bare
		lx.bare = 0
		for _, f := range fields[1:] {
			sc.fields++
			if f != "" && f[0] == ' ' {
				sc.spaced++
			}
		}
	}
	return sc
}
