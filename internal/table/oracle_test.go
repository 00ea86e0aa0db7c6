package table

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/nodetest"
)

// oracleCase is one CSV text of the differential corpus and the delimiter a
// person reading it would say it uses.
type oracleCase struct {
	name  string
	input string
	delim byte
}

// oracleCorpus returns the edge cases compared against csv-parse.
func oracleCorpus() []oracleCase {
	wide := func() string {
		var b strings.Builder
		for r := 0; r < 4; r++ {
			for c := 0; c < 30; c++ {
				if c > 0 {
					b.WriteByte(',')
				}
				b.WriteString(strings.Repeat("x", r+c%3))
			}
			b.WriteString("\n")
		}
		return b.String()
	}
	return []oracleCase{
		{"Simple", "a,b,c\n1,2,3\n", ','},
		{"NoFinalNewline", "a,b\n1,2", ','},
		{"CRLF", "a,b\r\n1,2\r\n", ','},
		{"LoneCR", "a,b\r1,2\r3,4", ','},
		{"MixedLineEnds", "a,b\r\n1,2\n3,4\r5,6", ','},
		{"CRAtEnd", "a,b\r1,2\r", ','},
		{"BOM", "\ufeffa,b\n1,2\n", ','},
		{"BOMQuotedHeader", "\ufeff\"a\",b\n1,2", ','},
		{"BOMInsideKept", "a,b\n\ufeffx,y\n", ','},
		{"QuotedLF", "a,b\n\"line1\nline2\",x\n", ','},
		{"QuotedCRLF", "a,b\r\n\"l1\r\nl2\",x\r\n", ','},
		{"QuotedLoneCR", "a,b\n\"l1\rl2\",x\n", ','},
		{"QuotedOnlyNewline", "a,b\n\"\n\",x\n", ','},
		{"QuotedCRBeforeOuterLF", "a,b\n\"x\r\",y\n", ','},
		{"QuotedEmptyLinesInside", "id,text\n1,\"a\n\nb\"\n2,c\n", ','},
		{"QuotedCRLFAtEOF", "a\n\"x\r\ny\"", ','},
		{"DoubledQuotes", "a,b\n\"say \"\"hi\"\"\",x\n", ','},
		{"OnlyDoubledQuote", "a,b\n\"\"\"\",x\n", ','},
		{"TwoDoubledQuotes", "a,b\n\"\"\"\"\"\",x\n", ','},
		{"QuotedDelimiterAndQuote", "a,b\n\"x,\"\"y\"\",z\",w\n", ','},
		{"QuoteInHeader", "\"na\"\"me\",b\n1,2\n", ','},
		{"EmptyQuoted", "a,b\n\"\",\"\"\n", ','},
		{"EmptyFields", "a,b,c\n,,\n1,,3\n", ','},
		{"TrailingDelimiter", "a,b,c\n1,2,\n", ','},
		{"QuotedThenDelimiterAtEOF", "a,b\n\"x\",", ','},
		{"QuotedAtEOF", "a,b\n1,\"2\"", ','},
		{"EmptyLinesBetween", "a,b\n\n1,2\n\n\n3,4\n", ','},
		{"LeadingEmptyLines", "\n\na,b\n1,2", ','},
		{"CRLFEmptyLines", "a,b\r\n\r\n1,2\r\n\r\n", ','},
		{"CREmptyLines", "\r\ra,b\r\r1,2\r", ','},
		{"TrailingNewlines", "a,b\n1,2\n\n\n", ','},
		{"SpacesAroundFields", "a , b\n 1 , 2 \n", ','},
		{"SpaceBeforeQuote", "a,b\n \"x\",y\n", ','},
		{"QuotedWithInnerSpaces", "a,b\n\"  x  \",y\n", ','},
		{"SpaceAfterClosingQuote", "a,b\n\"x\" ,y\n", ','},
		{"TextAfterClosingQuote", "a,b\n\"x\"y,z\n", ','},
		{"EmptyQuotedThenText", "a,b\n\"\"x,y\n", ','},
		{"UnclosedQuote", "a,b\n\"x,y\n", ','},
		{"UnclosedQuoteInHeader", "\"a,b\n1,2\n", ','},
		{"BareQuoteInField", "a,b\n5'11\",tall\n", ','},
		{"QuoteInMiddle", "a,b\nab\"c,d\n", ','},
		{"QuoteAtEndOfUnquoted", "a,b\nx\",y\n", ','},
		{"SingleColumn", "name\nAnn\nBob\n", ','},
		{"SingleColumnEmptyLine", "name\nAnn\n\nBob\n", ','},
		{"SingleColumnQuotedEmpty", "name\n\"\"\nBob\n", ','},
		{"WhitespaceOnlyRecord", "a\n \nb\n", ','},
		{"HeaderOnly", "a,b,c\n", ','},
		{"HeaderOnlyNoNewline", "a,b,c", ','},
		{"OnlyBOM", "\ufeff", ','},
		{"OnlyEmptyLines", "\n\r\n\r", ','},
		{"RaggedShort", "a,b,c\n1,2\n", ','},
		{"RaggedLong", "a,b\n1,2,3\n", ','},
		{"DuplicateHeader", "a,a,b\n1,2,3\n", ','},
		{"Numbers", "i,f,e\n1,1.5,1e10\n-0,0.0,2E-3\n", ','},
		{"LeadingZeros", "zip,code\n02134,007\n90210,1\n", ','},
		{"Booleans", "flag,x\ntrue,1\nFALSE,2\n", ','},
		{"BigIntegers", "id,n\n123456789012345678901234567890,1\n", ','},
		{"ControlCharacters", "a,b\n\x00,\x01\x7f\n", ','},
		{"LongField", "a,b\n" + strings.Repeat("long ", 2000) + ",\"" + strings.Repeat("q\"\"", 500) + "\"\n", ','},
		{"ManyColumns", wide(), ','},
		{"Semicolon", "name;price\nfoo;1,5\nbar;2,25\n", ';'},
		{"SemicolonQuoted", "\"a;b\";c\n\"x;y\";z\n", ';'},
		{"SemicolonQuotedCommas", "\"a,b\";\"c,d\"\n\"1,2\";\"3,4\"\n", ';'},
		{"SemicolonExcelGerman", "Produkt;Preis;Menge\nÄpfel;1,99;3\nBirnen;2,49;10\n", ';'},
		{"SemicolonQuotedNewline", "a;b\n\"x\ny\";z\n", ';'},
		{"Tab", "name\tnote\nx\ta,b,c\ny\td;e\n", '\t'},
		{"TabQuotedTab", "a\tb\n\"x\ty\"\tz\n", '\t'},
		{"TabEmptyFields", "a\tb\tc\n\t\t\n1\t\t3\n", '\t'},
		{"TabWithSpaces", "a\tb\n 1\t 2 \n", '\t'},
		{"TabCRLF", "a\tb\r\n1\t2\r\n", '\t'},
		{"Pipe", "id|name|score\n1|Ann|3.5\n2|Bob|4\n", '|'},
		{"PipeQuotedPipe", "a|b\n\"x|y\"|z\n", '|'},
		{"PipeNamesWithCommas", "Smith, John|42\nDoe, Jane|33\n", '|'},
		{"Unicode", "名前,都市\n太郎,東京\nZoë,Zürich\n", ','},
		{"Emoji", "a,b\n😀,\"👍,👎\"\n", ','},
		{"CombiningAndRTL", "word,meaning\nשלום,peace\ncafe\u0301,coffee\n", ','},
		{"ProseCommasInTSV", "title\tbody\nHi\tHello, world, again\nBye\tSee you, later\n", '\t'},
	}
}

// repoRoot returns the directory holding go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := nodetest.Root()
	require.NoError(t, err)
	return root
}

type oracleResult struct {
	Records [][]string `json:"records"`
	Error   string     `json:"error"`
}

// runOracle parses each case with csv-parse, with the delimiter given.
func runOracle(t *testing.T, inputs []string, delims []byte) []oracleResult {
	t.Helper()
	root := repoRoot(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed (needed for the csv-parse differential test): run: go tool task npm")
	}
	if _, err := os.Stat(filepath.Join(root, "compat", "node_modules", "csv-parse", "package.json")); err != nil {
		t.Fatalf("csv-parse is not installed in compat/node_modules: run: go tool task npm")
	}
	type in struct {
		Input     string `json:"input"`
		Delimiter string `json:"delimiter"`
	}
	cases := make([]in, len(inputs))
	for i := range inputs {
		cases[i] = in{Input: inputs[i], Delimiter: string(delims[i])}
	}
	body, err := json.Marshal(cases)
	require.NoError(t, err)
	cmd := exec.CommandContext(t.Context(), node, filepath.Join(root, "internal", "table", "testdata", "csvparse.mjs"), root)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "csv-parse oracle failed (run: go tool task npm): %s", stderr.String())
	var results []oracleResult
	require.NoError(t, json.Unmarshal(out, &results))
	require.Len(t, results, len(inputs))
	return results
}

// TestParseCSV_MatchesCSVParse compares the raw cells of every corpus case
// with what the npm package csv-parse reads, using the delimiter we detect.
func TestParseCSV_MatchesCSVParse(t *testing.T) {
	t.Parallel()
	corpus := oracleCorpus()
	require.GreaterOrEqual(t, len(corpus), 60)
	inputs := make([]string, len(corpus))
	delims := make([]byte, len(corpus))
	for i, c := range corpus {
		inputs[i] = c.input
		delims[i] = DetectDelimiter(c.input)
	}
	results := runOracle(t, inputs, delims)

	for i, c := range corpus {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, string(c.delim), string(delims[i]), "detected delimiter")
			tab, err := ParseCSV(c.input, &Options{AllowRagged: true})
			want := results[i]
			switch {
			case want.Error != "":
				var pe *ParseError
				require.ErrorAs(t, err, &pe, "csv-parse fails with %s", want.Error)
				require.ErrorIs(t, err, ErrQuote)
			case len(want.Records) == 0:
				require.ErrorIs(t, err, ErrEmpty)
			default:
				require.NoError(t, err)
				require.Equal(t, want.Records, records(tab))
			}
		})
	}
}

// TestParseCSV_MatchesCSVParseOnRoundTrip feeds the writer's output for the
// corpus tables to csv-parse: any RFC 4180 reader must see the same cells.
func TestParseCSV_MatchesCSVParseOnRoundTrip(t *testing.T) {
	t.Parallel()
	var (
		names  []string
		inputs []string
		delims []byte
		want   [][][]string
	)
	for _, c := range oracleCorpus() {
		tab, err := ParseCSV(c.input, &Options{AllowRagged: true})
		if errors.Is(err, ErrQuote) || errors.Is(err, ErrEmpty) {
			continue
		}
		require.NoError(t, err, c.name)
		for _, d := range []byte{',', '\t', ';', '|'} {
			names = append(names, c.name+"/"+string(d))
			inputs = append(inputs, Encode(tab.Header, tab.Rows, d))
			delims = append(delims, d)
			want = append(want, records(tab))
		}
	}
	results := runOracle(t, inputs, delims)
	for i := range inputs {
		require.Empty(t, results[i].Error, names[i])
		require.Equal(t, want[i], results[i].Records, names[i])
	}
}

// records returns the header and rows of t as raw texts.
func records(t *Table) [][]string {
	out := [][]string{t.Header}
	for _, row := range t.Rows {
		texts := make([]string, len(row))
		for i, v := range row {
			texts[i] = v.Text
		}
		out = append(out, texts)
	}
	return out
}
