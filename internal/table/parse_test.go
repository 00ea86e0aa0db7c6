package table

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseCSV(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		name         string
		given        string
		opts         *Options
		expectFormat Format
		expectDelim  byte
		expect       [][]string
		expectLines  []int
		expectSkip   int
	}{
		{
			name:         "ok, comma",
			given:        "a,b\n1,2\n3,4\n",
			expectFormat: CSV, expectDelim: ',',
			expect:      [][]string{{"a", "b"}, {"1", "2"}, {"3", "4"}},
			expectLines: []int{2, 3},
		},
		{
			name:         "ok, lines count quoted line ends and skipped lines",
			given:        "\r\na,b\r\n\"x\r\ny\",1\r\n\r\n\"p\rq\nr\",2\n3,4",
			expectFormat: CSV, expectDelim: ',',
			expect:      [][]string{{"a", "b"}, {"x\r\ny", "1"}, {"p\rq\nr", "2"}, {"3", "4"}},
			expectLines: []int{3, 6, 9},
			expectSkip:  2,
		},
		{
			name:         "ok, tab is TSV",
			given:        "a\tb\n1\t2\n",
			expectFormat: TSV, expectDelim: '\t',
			expect:      [][]string{{"a", "b"}, {"1", "2"}},
			expectLines: []int{2},
		},
		{
			name:         "ok, forced delimiter",
			given:        "a,b;c\n1,2;3\n",
			opts:         &Options{Delimiter: ';'},
			expectFormat: CSV, expectDelim: ';',
			expect:      [][]string{{"a,b", "c"}, {"1,2", "3"}},
			expectLines: []int{2},
		},
		{
			name:         "ok, ragged allowed",
			given:        "a,b,c\n1\n1,2,3,4\n",
			opts:         &Options{AllowRagged: true},
			expectFormat: CSV, expectDelim: ',',
			expect:      [][]string{{"a", "b", "c"}, {"1"}, {"1", "2", "3", "4"}},
			expectLines: []int{2, 3},
		},
		{
			name:         "ok, header only",
			given:        "\ufeffa;b;c",
			expectFormat: CSV, expectDelim: ';',
			expect: [][]string{{"a", "b", "c"}},
		},
		{
			name:         "ok, max rows reached exactly",
			given:        "a\n1\n2\n",
			opts:         &Options{MaxRows: 2},
			expectFormat: CSV, expectDelim: ',',
			expect:      [][]string{{"a"}, {"1"}, {"2"}},
			expectLines: []int{2, 3},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tab, err := Parse(tc.given, tc.opts)
			require.NoError(t, err)
			require.Equal(t, tc.expectFormat, tab.Format)
			require.Equal(t, string(tc.expectDelim), string(tab.Delimiter))
			require.Equal(t, tc.expect, records(tab))
			if tc.expectLines == nil {
				require.Empty(t, tab.Lines)
			} else {
				require.Equal(t, tc.expectLines, tab.Lines)
			}
			require.Equal(t, tc.expectSkip, tab.SkippedLines)
		})
	}
}

func TestParseCSVErrors(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		name      string
		given     string
		opts      *Options
		expectErr error
		expectMsg string
		line, row int
	}{
		{
			name:      "nok, short row",
			given:     "a,b,c\n1,2,3\n\n4,5\n",
			expectErr: ErrFieldCount, line: 4, row: 2,
			expectMsg: "line 4: row 2 has 2 fields, the header has 3",
		},
		{
			name:      "nok, long row after quoted newline",
			given:     "a,b\n\"x\ny\",1\n1,2,3\n",
			expectErr: ErrFieldCount, line: 4, row: 2,
			expectMsg: "line 4: row 2 has 3 fields, the header has 2",
		},
		{
			name:      "nok, one field",
			given:     "a;b\r\nx\r\n",
			expectErr: ErrFieldCount, line: 2, row: 1,
			expectMsg: "line 2: row 1 has 1 field, the header has 2",
		},
		{
			name:      "nok, unclosed quote names the line it opens on",
			given:     "a,b\n1,2\n3,\"four\n5,6\n",
			expectErr: ErrQuote, line: 3,
			expectMsg: "line 3: a quoted field is never closed",
		},
		{
			name:      "nok, text after closing quote",
			given:     "a,b\n\"x\ny\" z,1\n",
			expectErr: ErrQuote, line: 3,
			expectMsg: `line 3: ' ' follows the closing quote`,
		},
		{
			name:      "nok, empty",
			given:     "\ufeff\r\n\n",
			expectErr: ErrEmpty,
			expectMsg: "no header row",
		},
		{
			name:      "nok, too many rows",
			given:     "a\n1\n2\n3\n",
			opts:      &Options{MaxRows: 2},
			expectErr: ErrTooManyRows, line: 4,
			expectMsg: "line 4: the table has more than 2 rows",
		},
		{
			name:      "nok, too many cells",
			given:     "a,b\n1,2\n3,4\n",
			opts:      &Options{MaxCells: 3},
			expectErr: ErrTooManyCells, line: 3,
			expectMsg: "line 3: the table has more than 3 cells (rows × columns)",
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tc.given, tc.opts)
			require.ErrorIs(t, err, tc.expectErr)
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			require.Contains(t, pe.Error(), tc.expectMsg)
			require.Equal(t, tc.line, pe.Line)
			require.Equal(t, tc.row, pe.Row)
		})
	}
}

func TestParseCSVBadDelimiter(t *testing.T) {
	t.Parallel()
	_, err := ParseCSV("a:b", &Options{Delimiter: ':'})
	require.ErrorContains(t, err, "not one of")
}

func TestParseTypes(t *testing.T) {
	t.Parallel()
	tab, err := Parse("n,s,b,e\n1.5,007,true,\n", nil)
	require.NoError(t, err)
	require.Equal(t, []Value{{"1.5", Number}, {"007", String}, {"true", Boolean}, {"", Null}}, tab.Rows[0])
}

func TestDetectDelimiter(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		name   string
		given  string
		expect byte
	}{
		{"ok, single column", "name\nAnn\nBob\n", ','},
		{"ok, empty", "", ','},
		{"ok, decimal commas under semicolons", "a;b\n1,5;2\n2,75;3\n", ';'},
		{"ok, consistency beats field count", "a,b,c,d|x\n1|2\n3|4\n", '|'},
		{"ok, quoted delimiters do not count", "\"x;y;z\",b\n\"1;2;3\",4\n", ','},
		{"ok, a quoting error is a record that does not fit", "a,b|c,d\n\"1\"|2,3\n", '|'},
		{"ok, spaces after the delimiter suggest prose", "Smith, John|42\nDoe, Jane|33\n", '|'},
		{"ok, sloppy spaces still split when alone", "a, b, c\n1, 2, 3\n", ','},
		{"ok, more fields break a tie", "a;b;c|d\n1;2;3|4\n", ';'},
		{"ok, preference order breaks a full tie", "a,b\tc\n1,2\t3\n", ','},
		{"ok, BOM", "\ufeffa\tb\n1\t2\n", '\t'},
		{"ok, header only", "a|b|c", '|'},
	}
	for _, tc := range testCases {
		require.Equal(t, string(tc.expect), string(DetectDelimiter(tc.given)), tc.name)
	}
}

// TestDetectDelimiterLongText checks detection on a text longer than the
// sample, cut in the middle of a quoted field.
func TestDetectDelimiterLongText(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("id;text;n\n")
	for i := 0; b.Len() < sniffBytes*2; i++ {
		b.WriteString("1;\"a, b, c\n" + strings.Repeat("x", 2000) + "\";3\n")
	}
	text := b.String()
	require.Equal(t, "x", text[sniffBytes:sniffBytes+1], "the sample must end inside a quoted field")
	require.Equal(t, ";", string(DetectDelimiter(text)))
	// The cut record is left out, not counted against the delimiter.
	sc := sniff(text[:sniffBytes], ';', true)
	require.Equal(t, 3, sc.header)
	const header, record = len("id;text;n\n"), len("1;\"a, b, c\n\";3\n") + 2000
	require.Equal(t, (sniffBytes-header)/record, sc.records)
	require.Equal(t, sc.records, sc.match)
	tab, err := Parse(text, nil)
	require.NoError(t, err)
	require.Len(t, tab.Header, 3)
}
