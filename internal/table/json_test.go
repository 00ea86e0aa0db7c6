package table

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseJSON(t *testing.T) {
	t.Parallel()
	tab, err := Parse("\ufeff \n[\n"+
		`{"name": "Ann", "age": 31, "tags": ["a", "b"]},`+"\n"+
		`{"age": 1.50, "name": null, "extra": {"k" : [1, {"z": true}]}, "big": 123456789012345678901234567890},`+"\n"+
		`{"name": "B\u00f6b \"q\"", "name": "last wins", "ok": false, "age": -1e3}`+"\n]\n", nil)
	require.NoError(t, err)
	require.Equal(t, JSON, tab.Format)
	require.Equal(t, byte(0), tab.Delimiter)
	require.Equal(t, []string{"name", "age", "tags", "extra", "big", "ok"}, tab.Header)
	require.Equal(t, [][]Value{
		{{"Ann", String}, {"31", Integer}, {`["a","b"]`, Array}, {}, {}, {}},
		{{}, {"1.50", Number}, {}, {`{"k":[1,{"z":true}]}`, Object}, {"123456789012345678901234567890", Integer}, {}},
		{{"last wins", String}, {"-1e3", Number}, {}, {}, {}, {"false", Boolean}},
	}, tab.Rows)
	require.Equal(t, []int{3, 4, 5}, tab.Lines)
	require.Equal(t, []Type{String, Number, Array, Object, Integer, Boolean}, tab.ColumnTypes())
}

func TestParseJSONEmpty(t *testing.T) {
	t.Parallel()
	tab, err := Parse("[]", nil)
	require.NoError(t, err)
	require.Empty(t, tab.Header)
	require.Empty(t, tab.Rows)

	tab, err = Parse("[{}, {}]", nil)
	require.NoError(t, err)
	require.Empty(t, tab.Header)
	require.Len(t, tab.Rows, 2)
}

func TestParseJSONErrors(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		name      string
		given     string
		opts      *Options
		expectErr error
		expectMsg string
		line, row int
	}{
		{"nok, object", `{"a": 1}`, nil, ErrNotArray, "JSON input must be an array of objects, not an object", 1, 0},
		{"nok, string element", "[{\"a\":1},\n{\"a\":2},\n \"x\"]", nil, ErrNotObject, "line 3: element 2 of the array is a string, not an object", 3, 2},
		{"nok, array element", "[[1]]", nil, ErrNotObject, "element 0 of the array is an array, not an object", 1, 0},
		{"nok, null element", "[{}, null]", nil, ErrNotObject, "element 1 of the array is null, not an object", 1, 1},
		{"nok, number element", "[{},\r\n{},\r\n7]", nil, ErrNotObject, "line 3: element 2 of the array is a number", 3, 2},
		{"nok, syntax", "[\n{\"a\": 1,}\n]", nil, ErrSyntax, "line 2: invalid JSON", 2, 0},
		{"nok, truncated", "[\n{\"a\": 1}", nil, ErrSyntax, "line 2: invalid JSON: unexpected end of text", 2, 0},
		{"nok, trailing data", "[{}]\n\n[]", nil, ErrSyntax, "line 3: invalid JSON: data after the array", 3, 0},
		{"nok, bad value", "[{\"a\": tru}]", nil, ErrSyntax, "invalid JSON", 1, 0},
		{"nok, sparse objects, too many cells", "[{\"a\":1},\n{\"b\":1},\n{\"c\":1}]", &Options{MaxCells: 5}, ErrTooManyCells, "line 3: the table has more than 5 cells", 3, 0},
		{"nok, too many rows", "[{},\n{},\n{}]", &Options{MaxRows: 2}, ErrTooManyRows, "line 3: the table has more than 2 rows", 3, 0},
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

func TestParseDetectsFormat(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		given  string
		expect Format
	}{
		{"[]", JSON},
		{"\ufeff\r\n\t [{\"a\":1}]", JSON},
		{"{\"a\":1}", JSON}, // an error, but a JSON one
		{"\"[id]\",name\n1,2", CSV},
		{"a,[b]\n1,2", CSV},
		{"a\tb\n1\t2", TSV},
	}
	for _, tc := range testCases {
		tab, err := Parse(tc.given, nil)
		if tc.expect == JSON && err != nil {
			require.ErrorIs(t, err, ErrNotArray)
			continue
		}
		require.NoError(t, err, tc.given)
		require.Equal(t, tc.expect, tab.Format, tc.given)
	}
}
