package csvjson

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/jobs"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		name        string
		given       Input
		lim         *jobs.Limits
		expectField string
		expectMsg   string
	}{
		{name: "ok, csv", given: Input{Data: "a,b\n1,2\n", To: "json"}},
		{name: "ok, to defaults", given: Input{Data: "a,b\n1,2\n"}},
		{name: "ok, json to tsv", given: Input{Data: `[{"a":1}]`, To: "tsv"}},
		{name: "ok, nil limits", given: Input{Data: "a\n1", To: "csv"}, lim: nil},
		{name: "nok, data missing", given: Input{To: "json"}, expectField: "data", expectMsg: "is required"},
		{name: "nok, unknown to", given: Input{Data: "a\n1", To: "xml"}, expectField: "to", expectMsg: `must be one of json, csv or tsv, not "xml"`},
		{name: "nok, to is case-sensitive", given: Input{Data: "a\n1", To: "JSON"}, expectField: "to"},
		{name: "nok, ragged row", given: Input{Data: "a,b,c\n1,2,3\n4,5\n", To: "json"},
			expectField: "data", expectMsg: "line 3: row 2 has 2 fields, the header has 3"},
		{name: "nok, ragged row after quoted newlines", given: Input{Data: "a;b\r\n\"x\r\ny\";1\r\n1;2;3\r\n"},
			expectField: "data", expectMsg: "line 4: row 2 has 3 fields, the header has 2"},
		{name: "nok, unclosed quote", given: Input{Data: "a,b\n\"1,2\n"}, expectField: "data", expectMsg: "line 2: a quoted field is never closed"},
		{name: "nok, text after closing quote", given: Input{Data: "a,b\n\"1\"x,2\n"}, expectField: "data", expectMsg: "line 2: 'x' follows the closing quote"},
		{name: "nok, json element not an object", given: Input{Data: "[{\"a\":1},\n[1]]"},
			expectField: "data", expectMsg: "line 2: element 1 of the array is an array, not an object"},
		{name: "nok, json not an array", given: Input{Data: `{"a":1}`}, expectField: "data", expectMsg: "must be an array of objects"},
		{name: "nok, json syntax", given: Input{Data: "[{\"a\":1,}]"}, expectField: "data", expectMsg: "line 1: invalid JSON"},
		{name: "nok, only empty lines", given: Input{Data: "\n\n"}, expectField: "data", expectMsg: "no header row"},
		{name: "nok, too many rows", given: Input{Data: "a\n1\n2\n3\n"}, lim: &jobs.Limits{MaxRows: 2},
			expectField: "data", expectMsg: "more than 2 rows"},
		{name: "nok, sparse json objects", given: Input{Data: sparseJSON(1500)},
			expectField: "data", expectMsg: "the table has more than 2000000 cells (rows × columns)"},
		{name: "ok, rows at the limit", given: Input{Data: "a\n1\n2\n"}, lim: &jobs.Limits{MaxRows: 2}},
		// Each JSON row repeats every column name: 19 kB of text would
		// make 45 MB, 1 MiB some 45 GB.
		{name: "nok, json output past its limit", given: Input{Data: strings.Repeat("x", 9000) + "\n" + strings.Repeat("1\n", 5000)},
			expectField: "data", expectMsg: "converted to json it would take"},
		{name: "ok, the same to csv", given: Input{Data: strings.Repeat("x", 9000) + "\n" + strings.Repeat("1\n", 5000), To: "csv"}},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.given.Validate(tc.lim)
			if tc.expectField == "" {
				require.NoError(t, err)
				return
			}
			var inv *jobs.InvalidError
			require.ErrorAs(t, err, &inv)
			require.Equal(t, tc.expectField, inv.Field)
			require.Contains(t, inv.Message, tc.expectMsg)
		})
	}
}

// sparseJSON returns n objects, each with a key of its own.
func sparseJSON(n int) string {
	var b strings.Builder
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"k%d":1}`, i)
	}
	b.WriteString("]")
	return b.String()
}

// TestValidateDefaultRowLimit checks the contract's 50,000 rows.
func TestValidateDefaultRowLimit(t *testing.T) {
	t.Parallel()
	rows := func(n int) string {
		return "n\n" + strings.Repeat("1\n", n)
	}
	require.NoError(t, Input{Data: rows(50_000)}.Validate(&jobs.DefaultLimits))
	err := Input{Data: rows(50_001)}.Validate(&jobs.DefaultLimits)
	var inv *jobs.InvalidError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "data", inv.Field)
	require.Contains(t, inv.Message, "line 50002: the table has more than 50000 rows")
}

func TestWork(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		name          string
		given         Input
		expectFrom    string
		expectTo      string
		expectDelim   any
		expectColumns string
		expectRows    int
		expectOutput  string
	}{
		{
			name:       "ok, csv to json with typed columns",
			given:      Input{Data: "id,price,ok,zip,note,empty\n1,9.5,true,02134,,\n2,10,false,90210,hi,\n", To: "json"},
			expectFrom: "csv", expectTo: "json", expectDelim: ",",
			expectColumns: `[{"name":"id","type":"integer"},{"name":"price","type":"number"},{"name":"ok","type":"boolean"},{"name":"zip","type":"string"},{"name":"note","type":"string"},{"name":"empty","type":"null"}]`,
			expectRows:    2,
			expectOutput: `[{"id":1,"price":9.5,"ok":true,"zip":"02134","note":null,"empty":null},` +
				`{"id":2,"price":10,"ok":false,"zip":"90210","note":"hi","empty":null}]`,
		},
		{
			name:       "ok, mixed column becomes strings",
			given:      Input{Data: "v\n1\ntrue\nx\n1.5\n"},
			expectFrom: "csv", expectTo: "json", expectDelim: ",",
			expectColumns: `[{"name":"v","type":"string"}]`,
			expectRows:    4,
			expectOutput:  `[{"v":"1"},{"v":"true"},{"v":"x"},{"v":"1.5"}]`,
		},
		{
			name:       "ok, big numbers kept exactly",
			given:      Input{Data: "big\tsmall\n123456789012345678901234567890\t1e400\n-9007199254740993\t0.10000000000000000000001\n"},
			expectFrom: "tsv", expectTo: "json", expectDelim: "\t",
			expectColumns: `[{"name":"big","type":"integer"},{"name":"small","type":"number"}]`,
			expectRows:    2,
			expectOutput:  `[{"big":123456789012345678901234567890,"small":1e400},{"big":-9007199254740993,"small":0.10000000000000000000001}]`,
		},
		{
			name:       "ok, duplicate and empty headers renamed",
			given:      Input{Data: "a|a||a_2\n1|2|3|4\n", To: "json"},
			expectFrom: "csv", expectTo: "json", expectDelim: "|",
			expectColumns: `[{"name":"a","type":"integer"},{"name":"a_3","type":"integer"},{"name":"column_3","type":"integer"},{"name":"a_2","type":"integer"}]`,
			expectRows:    1,
			expectOutput:  `[{"a":1,"a_3":2,"column_3":3,"a_2":4}]`,
		},
		{
			name:       "ok, quoting, BOM, CRLF and unicode",
			given:      Input{Data: "\ufeffname;text\r\n\"Zoë\";\"l1\r\nsaid \"\"hi\"\" <b>\"\r\n", To: "json"},
			expectFrom: "csv", expectTo: "json", expectDelim: ";",
			expectColumns: `[{"name":"name","type":"string"},{"name":"text","type":"string"}]`,
			expectRows:    1,
			expectOutput:  `[{"name":"Zoë","text":"l1\r\nsaid \"hi\" <b>"}]`,
		},
		{
			name:       "ok, semicolon csv to csv",
			given:      Input{Data: "a;b\n1,5;x, y\n", To: "csv"},
			expectFrom: "csv", expectTo: "csv", expectDelim: ";",
			expectColumns: `[{"name":"a","type":"string"},{"name":"b","type":"string"}]`,
			expectRows:    1,
			expectOutput:  `"a,b\r\n\"1,5\",\"x, y\"\r\n"`,
		},
		{
			name:       "ok, json to csv by default",
			given:      Input{Data: `[{"id": 1, "tags": ["a","b"], "meta": {"k": "v, w"}}, {"id": 2.50, "name": "Bob \"B\"", "ok": true, "meta": null}]`},
			expectFrom: "json", expectTo: "csv", expectDelim: nil,
			expectColumns: `[{"name":"id","type":"number"},{"name":"tags","type":"array"},{"name":"meta","type":"object"},{"name":"name","type":"string"},{"name":"ok","type":"boolean"}]`,
			expectRows:    2,
			expectOutput:  `"id,tags,meta,name,ok\r\n1,\"[\"\"a\"\",\"\"b\"\"]\",\"{\"\"k\"\":\"\"v, w\"\"}\",,\r\n2.50,,,\"Bob \"\"B\"\"\",true\r\n"`,
		},
		{
			name:       "ok, json to tsv",
			given:      Input{Data: `[{"a": "x\ty", "b": 1}]`, To: "tsv"},
			expectFrom: "json", expectTo: "tsv", expectDelim: nil,
			expectColumns: `[{"name":"a","type":"string"},{"name":"b","type":"integer"}]`,
			expectRows:    1,
			expectOutput:  `"a\tb\r\n\"x\ty\"\t1\r\n"`,
		},
		{
			name:       "ok, json to json keeps each value's type and fills missing keys",
			given:      Input{Data: `[{"v": 1}, {"v": "1", "w": [true]}, {}]`, To: "json"},
			expectFrom: "json", expectTo: "json", expectDelim: nil,
			expectColumns: `[{"name":"v","type":"string"},{"name":"w","type":"array"}]`,
			expectRows:    3,
			expectOutput:  `[{"v":1,"w":null},{"v":"1","w":[true]},{"v":null,"w":null}]`,
		},
		{
			name:       "ok, header only",
			given:      Input{Data: "a,b\n"},
			expectFrom: "csv", expectTo: "json", expectDelim: ",",
			expectColumns: `[{"name":"a","type":"null"},{"name":"b","type":"null"}]`,
			expectRows:    0,
			expectOutput:  `[]`,
		},
		{
			name:       "ok, empty json array",
			given:      Input{Data: "[]", To: "csv"},
			expectFrom: "json", expectTo: "csv", expectDelim: nil,
			expectColumns: `[]`,
			expectRows:    0,
			expectOutput:  `""`,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, tc.given.Validate(&jobs.DefaultLimits))
			res, err := Work(t.Context(), tc.given)
			require.NoError(t, err)
			body, err := json.Marshal(res)
			require.NoError(t, err)
			var got map[string]any
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.UseNumber()
			require.NoError(t, dec.Decode(&got))
			require.Equal(t, tc.expectFrom, got["from"])
			require.Equal(t, tc.expectTo, got["to"])
			require.Equal(t, tc.expectDelim, got["delimiter"])
			require.Equal(t, json.Number(fmt.Sprint(tc.expectRows)), got["row_count"])
			cols, err := json.Marshal(got["columns"])
			require.NoError(t, err)
			require.JSONEq(t, tc.expectColumns, string(cols))
			// Compared as compact text, so numbers are compared digit for
			// digit.
			require.True(t, json.Valid(res.Output))
			require.Equal(t, compact(t, tc.expectOutput), compact(t, string(res.Output)))
		})
	}
}

func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, json.Compact(&b, []byte(s)))
	return b.String()
}

func TestWorkCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Work(ctx, Input{Data: "a\n1"})
	require.ErrorIs(t, err, context.Canceled)
}

// TestRoundTrip converts CSV to JSON and that JSON back to CSV, and JSON to
// CSV and back to JSON, requiring the same text each time.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	csvs := []string{
		"id,name,price,ok,zip,note\r\n1,Ann,9.5,true,02134,\"multi\r\nline, \"\"quoted\"\"\"\r\n2,Bob,1e3,false,90210,\r\n",
		"a\r\n\"\"\r\nx\r\n",
		"big,n\r\n123456789012345678901234567890,-0\r\n",
		"\"[a]\",b\r\n{, lead\r\n",
	}
	for _, in := range csvs {
		js := run(t, Input{Data: in, To: "json"})
		back := run(t, Input{Data: string(js.Output), To: "csv"})
		var text string
		require.NoError(t, json.Unmarshal(back.Output, &text))
		require.Equal(t, in, text)
	}
	jsons := []string{
		`[{"a":1,"b":"x","c":null,"d":true,"e":2.5}]`,
		`[{"n":123456789012345678901234567890,"f":1e400}]`,
	}
	for _, in := range jsons {
		csv := run(t, Input{Data: in, To: "tsv"})
		var text string
		require.NoError(t, json.Unmarshal(csv.Output, &text))
		back := run(t, Input{Data: text, To: "json"})
		require.Equal(t, in, string(back.Output))
	}
}

func run(t *testing.T, in Input) *Result {
	t.Helper()
	require.NoError(t, in.Validate(&jobs.DefaultLimits))
	res, err := Work(t.Context(), in)
	require.NoError(t, err)
	return res
}

func TestAppendString(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"", "plain", `q"uote`, `back\slash`, "\x00\x01\x1f\x7f", "\t\r\n", "<&>", "Zoë 😀 名前",
		"\u2028\u2029", "bad \xff utf8 \xe2\x82", "\xed\xa0\x80 surrogate", "\ufeffbom",
	} {
		got := appendString(nil, s)
		require.True(t, json.Valid(got), "%q", got)
		want, err := json.Marshal(s)
		require.NoError(t, err)
		var a, b string
		require.NoError(t, json.Unmarshal(got, &a))
		require.NoError(t, json.Unmarshal(want, &b))
		require.Equal(t, b, a, "decoding %q", got)
	}
}

func TestOp(t *testing.T) {
	t.Parallel()
	require.Equal(t, Kind, Op.Name)
	require.Equal(t, "0.020000", Op.Price)
	require.Equal(t, jobs.QueuePure, Op.Queue)
	require.False(t, Op.UsesModel)
	require.NotEmpty(t, Op.Description)

	var schema struct {
		Schema     string   `json:"$schema"`
		Required   []string `json:"required"`
		Properties struct {
			To struct {
				Enum []string `json:"enum"`
			} `json:"to"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(Op.InputSchema, &schema))
	require.Equal(t, "https://json-schema.org/draft/2020-12/schema", schema.Schema)
	require.Equal(t, []string{"data"}, schema.Required)
	for _, to := range schema.Properties.To.Enum {
		require.NoError(t, Input{Data: "a\n1", To: to}.Validate(nil), to)
	}
	require.ElementsMatch(t, []string{ToJSON, ToCSV, ToTSV}, schema.Properties.To.Enum)

	body, err := json.Marshal(Op.InputExample)
	require.NoError(t, err)
	args, err := Op.Decode("call-1", body, &jobs.DefaultLimits)
	require.NoError(t, err)
	require.Equal(t, Kind, args.Kind())
	in := args.(jobs.Args[Input]).Input

	// The catalogue's output example is what Work returns for its input.
	res, err := Work(t.Context(), in)
	require.NoError(t, err)
	got, err := json.Marshal(res)
	require.NoError(t, err)
	want, err := json.Marshal(Op.OutputExample)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got))
	var keys map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(got, &keys))
	require.Len(t, keys, 6)
	for _, k := range []string{"from", "to", "delimiter", "columns", "row_count", "output"} {
		require.Contains(t, keys, k)
	}

	_, err = Op.Decode("call-2", []byte(`{"data":"a\n1","from":"csv"}`), &jobs.DefaultLimits)
	var inv *jobs.InvalidError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "from", inv.Field)
	_, err = Op.Decode("call-3", []byte(`{"data":"a,b\n1"}`), &jobs.DefaultLimits)
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "data", inv.Field)
	require.Contains(t, inv.Message, "line 2")
}

// FuzzConvert checks that any data either fails validation with an
// *InvalidError or converts to valid JSON that converts back to the same
// table.
func FuzzConvert(f *testing.F) {
	f.Add("a,b\n1,2\n", "json")
	f.Add("a;b\n\"x\ny\";1e400\n", "csv")
	f.Add(`[{"a": [1, {"b": null}], "c": "\u2028"}]`, "tsv")
	f.Add("x\n\xff\n", "json")
	f.Fuzz(func(t *testing.T, data, to string) {
		if !utf8.ValidString(data) {
			// Requests are JSON: their strings are always valid UTF-8.
			data = strings.ToValidUTF8(data, "\uFFFD")
		}
		in := Input{Data: data, To: to}
		if err := in.Validate(&jobs.DefaultLimits); err != nil {
			var inv *jobs.InvalidError
			require.True(t, errors.As(err, &inv), "%v", err)
			return
		}
		res, err := Work(t.Context(), in)
		require.NoError(t, err)
		require.True(t, json.Valid(res.Output), "%s", res.Output)
		require.Len(t, res.Columns, len(uniqueColumnNames(res)))
		if res.To == ToJSON {
			// JSON output read back as a table has the same columns and rows.
			back := run(t, Input{Data: string(res.Output), To: "json"})
			require.Equal(t, res.RowCount, back.RowCount)
			if res.RowCount > 0 {
				require.Equal(t, names(res.Columns), names(back.Columns))
			}
			require.Equal(t, compactString(res.Output), compactString(back.Output))
		}
	})
}

func names(cols []Column) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.Name
	}
	return out
}

func uniqueColumnNames(res *Result) map[string]bool {
	m := map[string]bool{}
	for _, c := range res.Columns {
		m[c.Name] = true
	}
	return m
}

func compactString(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		panic(fmt.Sprintf("compact: %v", err))
	}
	return buf.String()
}
