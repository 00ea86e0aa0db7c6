package regex

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/jobs"
)

// oracleCase is one case as testdata/oracle.mjs computes it with Node's
// RegExp.
type oracleCase struct {
	Pattern   string  `json:"pattern"`
	Text      string  `json:"text"`
	Flags     string  `json:"flags"`
	Deviation string  `json:"deviation"`
	Error     *string `json:"error"`
	Split     bool    `json:"split"`
	Matches   []Match `json:"matches"`
}

// runOracle runs node once over the whole corpus.
func runOracle(t *testing.T) []oracleCase {
	t.Helper()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node (v20+) is needed for the differential test; run: go tool task npm (or install Node.js)")
	dir, err := filepath.Abs("testdata")
	require.NoError(t, err)
	cmd := exec.Command(node, filepath.Join(dir, "oracle.mjs"), filepath.Join(dir, "corpus.json"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node oracle.mjs failed (run: go tool task npm): %s", stderr.String())
	var cases []oracleCase
	require.NoError(t, json.Unmarshal(out, &cases))
	return cases
}

// TestOracle compares every field of every corpus case with what Node's
// RegExp returns (exec without g, matchAll with g), and checks that patterns
// RegExp refuses are refused by Validate with a 400 naming the pattern.
func TestOracle(t *testing.T) {
	t.Parallel()
	cases := runOracle(t)
	require.GreaterOrEqual(t, len(cases), 300)

	engines := map[string]int{}
	deviations := 0
	for i, c := range cases {
		name := fmt.Sprintf("%03d_%q_%q_%q", i, c.Pattern, c.Flags, c.Text)
		in := Input{Pattern: c.Pattern, Text: c.Text, Flags: c.Flags}
		verr := in.Validate(&jobs.DefaultLimits)
		if c.Error != nil {
			var ie *jobs.InvalidError
			if !errors.As(verr, &ie) || ie.Field != "pattern" {
				t.Errorf("%s: JavaScript refuses it (%s), Validate gave %v", name, *c.Error, verr)
			}
			continue
		}
		if verr != nil {
			t.Errorf("%s: JavaScript accepts it, Validate refused: %v", name, verr)
			continue
		}
		res, err := testRun(in)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		engines[res.Engine]++
		if c.Deviation != "" {
			// A documented difference: the test keeps the documentation
			// honest by failing once the results agree.
			deviations++
			if !c.Split && reflect.DeepEqual(nonNil(res.Matches), nonNil(c.Matches)) {
				t.Errorf("%s: documented as a deviation (%s) but now agrees with JavaScript", name, c.Deviation)
			}
			continue
		}
		if c.Split {
			t.Errorf("%s: JavaScript's result splits a surrogate pair; move the case to a deviation group", name)
			continue
		}
		if res.Truncated || res.MatchCount != len(res.Matches) || res.Flags != canonicalFlags(c.Flags) {
			t.Errorf("%s: truncated %v, match_count %d for %d matches, flags %q", name, res.Truncated, res.MatchCount, len(res.Matches), res.Flags)
		}
		if got, want := nonNil(res.Matches), nonNil(c.Matches); !reflect.DeepEqual(got, want) {
			t.Errorf("%s (engine %s):\n got %s\nwant %s", name, res.Engine, mustJSON(got), mustJSON(want))
		}
	}
	t.Logf("%d cases: %d on re2, %d on ecmascript, %d documented deviations", len(cases), engines[EngineRE2], engines[EngineECMAScript], deviations)
	require.Positive(t, engines[EngineRE2])
	require.Positive(t, engines[EngineECMAScript])
}

func nonNil(ms []Match) []Match {
	if ms == nil {
		return []Match{}
	}
	return ms
}

func canonicalFlags(s string) string {
	f, err := parseFlags(s)
	if err != nil {
		return "?"
	}
	return f.String()
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
