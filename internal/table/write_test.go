package table

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWriter(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		name   string
		delim  byte
		given  [][]string
		expect string
	}{
		{"ok, plain", ',', [][]string{{"a", "b"}, {"1", "2"}}, "a,b\r\n1,2\r\n"},
		{"ok, RFC 4180 specials", ',', [][]string{{"a", "b"}, {"x,y", "say \"hi\""}, {"l1\nl2", "c\rr"}},
			"a,b\r\n\"x,y\",\"say \"\"hi\"\"\"\r\n\"l1\nl2\",\"c\rr\"\r\n"},
		{"ok, other candidate delimiters quoted", '\t', [][]string{{"a", "b"}, {"1,5", "x;y|z"}, {"t\tt", "plain"}},
			"a\tb\r\n\"1,5\"\t\"x;y|z\"\r\n\"t\tt\"\tplain\r\n"},
		{"ok, lone empty field quoted", ',', [][]string{{"a"}, {""}, {"b"}}, "a\r\n\"\"\r\nb\r\n"},
		{"ok, empty fields in a wider record not quoted", ';', [][]string{{"a", "b"}, {"", ""}}, "a;b\r\n;\r\n"},
		{"ok, first field starting like JSON quoted", ',', [][]string{{"[id]", "[x]"}, {"[1]", "{2}"}}, "\"[id]\",[x]\r\n[1],{2}\r\n"},
		{"ok, empty first field quoted before a tab", '\t', [][]string{{"", "["}, {"", "x"}}, "\"\"\t[\r\n\tx\r\n"},
		{"ok, first field starting with a space quoted", '|', [][]string{{" a", " b"}, {" 1", " 2"}}, "\" a\"| b\r\n 1| 2\r\n"},
		{"ok, BOM at field start quoted", ',', [][]string{{"\ufeffa", "b\ufeff"}}, "\"\ufeffa\",b\ufeff\r\n"},
		{"ok, spaces and unicode kept", ',', [][]string{{" a b ", "Zoë 😀"}}, "\" a b \",Zoë 😀\r\n"},
		{"ok, no fields writes nothing", ',', [][]string{{}, {"a"}}, "a\r\n"},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := NewWriter(tc.delim)
			for _, rec := range tc.given {
				w.WriteRecord(rec)
			}
			require.Equal(t, tc.expect, w.String())
			require.Equal(t, len(tc.expect), w.Len())
			require.Equal(t, tc.expect, string(w.Bytes()))
		})
	}
}

func TestNewWriterPanicsOnBadDelimiter(t *testing.T) {
	t.Parallel()
	require.Panics(t, func() { NewWriter(':') })
}

func TestEncodeNoColumns(t *testing.T) {
	t.Parallel()
	require.Empty(t, Encode(nil, [][]Value{{}, {}}, ','))
}

// TestRoundTrip checks parse, write, parse gives the same table, with the
// delimiter detected again, for every corpus case and every delimiter.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	inputs := []string{
		`[{"a": "x,y;z|w", "b": "q\"uote", "c": "  [pad] "}, {"a": "", "c": "\r\n"}, {"b": {"n": [1, 2]}}]`,
		`[{"": "empty key", " ": "space key"}]`,
		`[{"[": "{"}]`,
		`[{"only": ""}, {"only": null}, {"only": "\ufeff"}]`,
	}
	for _, c := range oracleCorpus() {
		inputs = append(inputs, c.input)
	}
	for _, in := range inputs {
		tab, err := Parse(in, nil)
		if err != nil {
			continue // the corpus holds errors on purpose
		}
		for _, d := range []byte(Delimiters) {
			checkRoundTrip(t, tab, d)
		}
	}
}

// checkRoundTrip writes tab with delimiter d and requires that reading the
// text back, delimiter detected, gives the same texts.
func checkRoundTrip(t *testing.T, tab *Table, d byte) {
	t.Helper()
	if len(tab.Header) == 0 {
		return
	}
	text := Encode(tab.Header, tab.Rows, d)
	back, err := Parse(text, nil)
	require.NoError(t, err, "reading back %q", text)
	require.Equal(t, records(tab), records(back), "reading back %q", text)
	if len(tab.Header) > 1 {
		require.Equal(t, string(d), string(back.Delimiter), "delimiter of %q", text)
	}
	for i, row := range back.Rows {
		for j, v := range row {
			require.Equal(t, Infer(tab.Rows[i][j].Text), v.Type)
		}
	}
	require.True(t, strings.HasSuffix(text, "\r\n"))
}
