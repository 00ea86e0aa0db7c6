package table

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func addSeeds(f *testing.F) {
	for _, c := range oracleCorpus() {
		f.Add(c.input)
	}
	f.Add(`[{"a": 1, "b": [1, {"c": null}]}, {"b": "x\ny", "a": 1e999}]`)
	f.Add(`[{"a": 1}, 2]`)
	f.Add("[\n")
}

// FuzzParse checks that no text makes Parse panic and that what it returns
// holds together.
func FuzzParse(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, text string) {
		tab, err := Parse(text, nil)
		ragged, raggedErr := Parse(text, &Options{AllowRagged: true})
		if err != nil {
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			require.NotEmpty(t, pe.Msg)
			if errors.Is(err, ErrFieldCount) {
				// Reading on may meet a later problem, never a field count.
				if raggedErr != nil {
					require.NotErrorIs(t, raggedErr, ErrFieldCount)
					var rpe *ParseError
					require.ErrorAs(t, raggedErr, &rpe)
					require.GreaterOrEqual(t, rpe.Line, pe.Line)
				}
			} else {
				require.Equal(t, err, raggedErr)
			}
			return
		}
		require.NoError(t, raggedErr)
		require.Equal(t, tab, ragged)
		require.Len(t, tab.Lines, len(tab.Rows))
		last := 0
		for i, row := range tab.Rows {
			require.Len(t, row, len(tab.Header))
			if tab.Format == JSON {
				require.GreaterOrEqual(t, tab.Lines[i], max(last, 1))
			} else {
				require.Greater(t, tab.Lines[i], last)
			}
			last = tab.Lines[i]
			if tab.Format != JSON {
				for _, v := range row {
					require.Equal(t, Infer(v.Text), v.Type)
				}
			}
		}
		if tab.Format != JSON {
			require.Equal(t, tab.Delimiter, DetectDelimiter(text))
		}
	})
}

// FuzzRoundTrip checks that every table read from any text is written and
// read back unchanged, with every delimiter.
func FuzzRoundTrip(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, text string) {
		tab, err := Parse(text, nil)
		if err != nil {
			return
		}
		for _, d := range []byte(Delimiters) {
			checkRoundTrip(t, tab, d)
		}
	})
}
