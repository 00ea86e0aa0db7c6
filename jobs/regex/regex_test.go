package regex

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/nodetest"
	"github.com/x402d/x402d/jobs"
)

// The worker binds Work as a plain function.
var _ func(context.Context, Input) (*Result, error) = Work

func TestValidate(t *testing.T) {
	t.Parallel()
	small := jobs.Limits{MaxPatternChars: 5}.WithDefaults()
	for _, tc := range []struct {
		name  string
		in    Input
		lim   *jobs.Limits
		field string // "" means valid
	}{
		{name: "ok, plain", in: Input{Pattern: `a+`, Text: "aa"}},
		{name: "ok, all flags", in: Input{Pattern: `a`, Flags: "gimsuy"}},
		{name: "ok, flags in any order", in: Input{Pattern: `a`, Flags: "yug"}},
		{name: "ok, at the limit in characters", in: Input{Pattern: `ééééé`}, lim: &small},
		{name: "ok, nil limits", in: Input{Pattern: `x`}, lim: nil},
		{name: "ok, empty pattern, as new RegExp(\"\")", in: Input{Text: "a"}},
		{name: "nok, pattern too long", in: Input{Pattern: `aaaaaa`}, lim: &small, field: "pattern"},
		{name: "nok, default limit", in: Input{Pattern: strings.Repeat("a", 4097)}, field: "pattern"},
		{name: "nok, unknown flag", in: Input{Pattern: `a`, Flags: "x"}, field: "flags"},
		{name: "nok, v flag", in: Input{Pattern: `a`, Flags: "v"}, field: "flags"},
		{name: "nok, d flag", in: Input{Pattern: `a`, Flags: "d"}, field: "flags"},
		{name: "nok, repeated flag", in: Input{Pattern: `a`, Flags: "gig"}, field: "flags"},
		{name: "nok, unterminated group", in: Input{Pattern: `(a`}, field: "pattern"},
		{name: "nok, nothing to repeat", in: Input{Pattern: `+a`}, field: "pattern"},
		{name: "nok, identity escape under u", in: Input{Pattern: `\-`, Flags: "u"}, field: "pattern"},
		{name: "ok, identity escape without u", in: Input{Pattern: `\-`}},
		{name: "nok, unknown property", in: Input{Pattern: `\p{Nope}`, Flags: "u"}, field: "pattern"},
		{name: "nok, property Go lacks", in: Input{Pattern: `\p{Emoji}`, Flags: "u"}, field: "pattern"},
		{name: "ok, script property", in: Input{Pattern: `\p{sc=Cyrillic}+`, Flags: "u"}},
		{name: "nok, duplicate group name", in: Input{Pattern: `(?<a>x)(?<a>y)`}, field: "pattern"},
		{name: "nok, missing group name", in: Input{Pattern: `\k<b>(?<a>x)`}, field: "pattern"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lim := tc.lim
			if lim == nil && !strings.Contains(tc.name, "nil limits") {
				lim = &jobs.DefaultLimits
			}
			err := tc.in.Validate(lim)
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var ie *jobs.InvalidError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, tc.field, ie.Field)
		})
	}
}

func TestEngine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, flags, text, engine string
	}{
		{`\w+@\w+`, "g", "a@b", EngineRE2},
		{`(?<y>\d{4})-(\d\d)?`, "", "2024-", EngineRE2},
		{`(\w)\1`, "", "aa", EngineECMAScript},
		{`a(?=b)`, "", "ab", EngineECMAScript},
		{`(?<!a)b`, "", "ab", EngineECMAScript},
		{`a{1001}`, "", "a", EngineECMAScript},
		{`a{1000}`, "", "a", EngineRE2},
		{`\bk`, "iu", "k", EngineECMAScript},
		{`\bk`, "i", "k", EngineRE2},
		{`^a$`, "m", "a\nb", EngineRE2},
		{`^a$`, "m", "a\r\nb", EngineECMAScript},
		{`^a$`, "m", "a\u2028b", EngineECMAScript},
		{`^a$`, "", "a\r\nb", EngineRE2},
	} {
		t.Run(tc.pattern+"/"+tc.flags, func(t *testing.T) {
			t.Parallel()
			res, err := testRun(Input{Pattern: tc.pattern, Flags: tc.flags, Text: tc.text})
			require.NoError(t, err)
			require.Equal(t, tc.engine, res.Engine)
		})
	}
}

// TestMatchesAcrossEngines runs patterns that both engines can run, once
// plainly and once with an always-true lookahead that forces ecmascript,
// and requires the same result.
func TestMatchesAcrossEngines(t *testing.T) {
	t.Parallel()
	text := "Ann <ann@example.com> 2024-05-17\r\nbob@test.org ſK é😀x\u2028end  (x)(y)"
	for _, tc := range []struct{ pattern, flags string }{
		{`(?<user>\w+)@(\w+)\.(com|org)`, "g"},
		{`\b\w`, "g"},
		{`\B.`, "gu"},
		{`^\S*|\S*$`, "g"},
		{`(\d+)-(\d+)?-?(x)?`, "g"},
		{`(?:(a)|(b)|[^ab])+`, "g"},
		{`[^\x00-\x7f]+`, "gu"},
		{`k`, "gi"},
		{`k|s`, "giu"},
		{`.*`, "gs"},
		{`\((\w)\)`, "gy"},
		{``, "g"},
	} {
		t.Run(tc.pattern+"/"+tc.flags, func(t *testing.T) {
			t.Parallel()
			pattern := tc.pattern
			if pattern == "" {
				pattern = "(?:)"
			}
			re2, err := testRun(Input{Pattern: pattern, Flags: tc.flags, Text: text})
			require.NoError(t, err)
			require.Equal(t, EngineRE2, re2.Engine)
			bt, err := testRun(Input{Pattern: `(?=[\s\S]|$)(?:` + pattern + `)`, Flags: tc.flags, Text: text})
			require.NoError(t, err)
			require.Equal(t, EngineECMAScript, bt.Engine)
			require.Equal(t, re2.Matches, bt.Matches)
			checkResult(t, text, re2)
		})
	}
}

func TestTruncated(t *testing.T) {
	t.Parallel()
	t.Run("MaxMatches", func(t *testing.T) {
		t.Parallel()
		res, err := testRun(Input{Pattern: "a", Flags: "g", Text: strings.Repeat("a", MaxMatches+1)})
		require.NoError(t, err)
		require.True(t, res.Truncated)
		require.Equal(t, MaxMatches, res.MatchCount)
		require.Equal(t, MaxMatches-1, res.Matches[MaxMatches-1].Index)
	})
	t.Run("ExactlyMaxMatches", func(t *testing.T) {
		t.Parallel()
		res, err := testRun(Input{Pattern: "a", Flags: "g", Text: strings.Repeat("a", MaxMatches)})
		require.NoError(t, err)
		require.False(t, res.Truncated)
		require.Equal(t, MaxMatches, res.MatchCount)
	})
	t.Run("OutputSize", func(t *testing.T) {
		t.Parallel()
		// Every match captures the rest of the text: quadratic output.
		text := strings.Repeat("xyz ", 5000)
		res, err := testRun(Input{Pattern: `(?=([\s\S]*))`, Flags: "g", Text: text})
		require.NoError(t, err)
		require.True(t, res.Truncated)
		require.Less(t, res.MatchCount, len(text)+1)
		require.Positive(t, res.MatchCount)
		checkResult(t, text, res)
	})
}

// TestCatastrophicBudget runs a catastrophic pattern on a short text as a
// paid call does (Work): the backtracking engine stops at the budget of a
// text that short (TimeLimit), well before MaxTimeLimit, with ErrTimeout;
// the budget grows with the text, up to MaxTimeLimit.
func TestCatastrophicBudget(t *testing.T) {
	t.Parallel()
	in := Input{Pattern: `^(a+)+\1$`, Text: strings.Repeat("a", 40) + "!"}
	start := time.Now()
	_, err := Work(context.Background(), in)
	took := time.Since(start)
	require.ErrorIs(t, err, ErrTimeout)
	require.Contains(t, err.Error(), "ecmascript")
	require.NotContains(t, err.Error(), in.Text, "the error repeats the text")
	t.Logf("stopped after %v", took)
	require.Less(t, took, MaxTimeLimit/2, "a catastrophic pattern on 41 characters ran for %v", took)

	require.Equal(t, BaseTimeLimit+41*PerCharTimeLimit, TimeLimit(in.Text))
	require.Equal(t, BaseTimeLimit+(1<<20)*PerCharTimeLimit, TimeLimit(strings.Repeat("é", 1<<20)))
	require.Equal(t, MaxTimeLimit, TimeLimit(strings.Repeat("a", 4<<20)))
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	in := Input{Pattern: `(?=(a|aa)+b)`, Text: strings.Repeat("a", 60)}
	start := time.Now()
	_, err := Run(context.Background(), in, 50*time.Millisecond)
	require.ErrorIs(t, err, ErrTimeout)
	require.Less(t, time.Since(start), 5*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Work(ctx, Input{Pattern: "a", Flags: "g", Text: "aaa"})
	require.ErrorIs(t, err, context.Canceled)
}

func TestLargeText(t *testing.T) {
	t.Parallel()
	text := benchText(1 << 20)
	for _, pattern := range []string{emailPattern, doubledWordPattern} {
		res, err := testRun(Input{Pattern: pattern, Flags: "g", Text: text})
		require.NoError(t, err)
		require.Positive(t, res.MatchCount)
		checkResult(t, text, res)
	}
}

// TestFoldOutsideCaseRanges checks foldOutsideCaseRanges against Go's
// unicode tables: every character with a case folding orbit is either in
// unicode.CaseRanges or in the list.
func TestFoldOutsideCaseRanges(t *testing.T) {
	t.Parallel()
	var missing []rune
	for c := rune(0); c <= unicode.MaxRune; c++ {
		if unicode.SimpleFold(c) == c {
			continue
		}
		in := false
		for _, cr := range unicode.CaseRanges {
			if rune(cr.Lo) <= c && c <= rune(cr.Hi) {
				in = true
				break
			}
		}
		if !in {
			missing = append(missing, c)
		}
	}
	require.Equal(t, foldOutsideCaseRanges, missing)
}

func TestOp(t *testing.T) {
	t.Parallel()
	require.Equal(t, Kind, Op.Name)
	require.Equal(t, "0.010000", Op.Price)
	require.Equal(t, jobs.QueuePure, Op.Queue)
	var schema map[string]any
	require.NoError(t, json.Unmarshal(Op.InputSchema, &schema))

	body, err := json.Marshal(Op.InputExample)
	require.NoError(t, err)
	args, err := Op.Decode("call-1", body, &jobs.DefaultLimits)
	require.NoError(t, err)
	require.Equal(t, Kind, args.Kind())
	require.Equal(t, exampleInput, args.(jobs.Args[Input]).Input)

	res := Op.OutputExample.(*Result)
	require.Equal(t, 2, res.MatchCount)
	require.Equal(t, "ann@example.com", res.Matches[0].Match)
	require.Equal(t, "user", *res.Matches[0].Groups[0].Name)
	require.Nil(t, res.Matches[0].Groups[1].Name)

	_, err = Op.Decode("call-2", []byte(`{"pattern":"a","text":"a","flag":"g"}`), &jobs.DefaultLimits)
	var ie *jobs.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "flag", ie.Field)
	_, err = Op.Decode("call-3", []byte(`{"pattern":"a","flags":"gg"}`), &jobs.DefaultLimits)
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "flags", ie.Field)
}

func TestResultJSON(t *testing.T) {
	t.Parallel()
	res, err := testRun(Input{Pattern: `(?<a>x)|(y)`, Text: "y", Flags: "ug"})
	require.NoError(t, err)
	b, err := json.Marshal(res)
	require.NoError(t, err)
	require.JSONEq(t, `{"engine":"re2","flags":"gu","match_count":1,"truncated":false,"matches":[
		{"match":"y","index":0,"end":1,"groups":[{"name":"a","value":null,"index":null},{"name":null,"value":"y","index":0}]}]}`, string(b))

	res, err = testRun(Input{Pattern: `z`, Text: "y"})
	require.NoError(t, err)
	b, err = json.Marshal(res)
	require.NoError(t, err)
	require.JSONEq(t, `{"engine":"re2","flags":"","match_count":0,"truncated":false,"matches":[]}`, string(b))
}

// checkResult checks what holds for every result: positions within the
// text, each match and group equal to the text at its position, matches in
// order.
func checkResult(t testing.TB, text string, res *Result) {
	t.Helper()
	runes := []rune(toValidUTF8(text))
	require.Equal(t, len(res.Matches), res.MatchCount)
	require.LessOrEqual(t, res.MatchCount, MaxMatches)
	prev := -1
	for _, m := range res.Matches {
		require.True(t, 0 <= m.Index && m.Index <= m.End && m.End <= len(runes), "match %+v outside text of %d characters", m, len(runes))
		require.Equal(t, string(runes[m.Index:m.End]), m.Match)
		require.GreaterOrEqual(t, m.Index, prev)
		prev = m.Index
		for _, g := range m.Groups {
			require.Equal(t, g.Value == nil, g.Index == nil)
			if g.Index == nil {
				continue
			}
			end := *g.Index + utf8.RuneCountInString(*g.Value)
			require.True(t, 0 <= *g.Index && end <= len(runes), "group %+v outside text", g)
			require.Equal(t, string(runes[*g.Index:end]), *g.Value)
		}
	}
}

func FuzzRegex(f *testing.F) {
	for _, seed := range []struct{ pattern, text, flags string }{
		{`(?<w>\w+)@(\w+)`, "ann@example.com", "g"},
		{`(a|ab)(c|bcd)(d*)`, "abcd", ""},
		{`(?:(a)|b)+\1?`, "abab", "gi"},
		{`(?<=(\d+))x`, "12x 3x", "g"},
		{`^.$`, "😀\n\r\u2028é", "gmsu"},
		{`\b|\B`, "a b", "gy"},
		{`[^\W\d]*?`, "ſKk 9", "giu"},
		{`(a*)*b`, "aab", "g"},
		{`\u{1F600}|\cJ|\x41|\101`, "A😀\n", "gu"},
	} {
		f.Add(seed.pattern, seed.text, seed.flags)
	}
	f.Fuzz(func(t *testing.T, pattern, text, flags string) {
		in := Input{Pattern: pattern, Text: text, Flags: flags}
		start := time.Now()
		defer func() {
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("took %v", d)
			}
		}()
		if in.Validate(&jobs.DefaultLimits) != nil {
			return
		}
		res, err := Run(context.Background(), in, 200*time.Millisecond)
		if errors.Is(err, ErrTimeout) {
			return
		}
		require.NoError(t, err)
		checkResult(t, text, res)
	})
}

const (
	emailPattern       = `(?<user>[\w.+-]+)@(?<host>[\w-]+(?:\.[\w-]+)+)`
	doubledWordPattern = `\b(\w+)\s+\1\b`
)

// benchText returns about n bytes of log-like lines with addresses, dates,
// some doubled words and non-ASCII text.
func benchText(n int) string {
	lines := []string{
		"2024-05-17T10:00:01Z INFO user ann.lee+tag@example.com logged in from 10.0.0.1\n",
		"2024-05-17T10:00:02Z WARN the the cache for bob@test.org expired after 30s\n",
		"2024-05-17T10:00:03Z INFO Grüße an café — naïve résumé 😀 sent to zoë@mail.example.de\n",
		"2024-05-17T10:00:04Z DEBUG request id=7f3a path=/api/x402/regex status=200 took 12ms\n",
	}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(lines[i%len(lines)])
	}
	return b.String()
}

// BenchmarkRegex1MB times the regex operation over 1 MiB of text on each
// engine path, and beside each, V8's own RegExp on the same pattern and
// text (testdata/bench.mjs, in node: its time a pass, process start not
// included, as ns/op), the reference the differential test checks
// results against.
func BenchmarkRegex1MB(b *testing.B) {
	text := benchText(1 << 20)
	for _, bc := range []struct{ name, pattern, engine string }{
		{"re2", emailPattern, EngineRE2},
		{"ecmascript", doubledWordPattern, EngineECMAScript},
		{"ecmascript_lookahead", emailPattern + `(?=\s)`, EngineECMAScript},
	} {
		b.Run(bc.name+"/v8", func(b *testing.B) {
			file := filepath.Join(b.TempDir(), "text")
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				b.Fatal(err)
			}
			if _, matches := nodetest.Bench(b, "testdata/bench.mjs", file, bc.pattern, "g"); matches == 0 {
				b.Fatal("V8 found no match")
			}
		})
		b.Run(bc.name, func(b *testing.B) {
			in := Input{Pattern: bc.pattern, Text: text, Flags: "g"}
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				res, err := Run(context.Background(), in, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if res.Engine != bc.engine || res.MatchCount == 0 {
					b.Fatalf("engine %s, %d matches", res.Engine, res.MatchCount)
				}
			}
		})
	}
}

// testRun runs in with a time limit far above MaxTimeLimit: the tests
// share the machine with every other package's tests, and only TestTimeout
// is about the limit.
func testRun(in Input) (*Result, error) {
	return Run(context.Background(), in, time.Minute)
}

// TestEmptyPattern runs JavaScript's empty expression, new RegExp(""): it
// matches the empty string at every position, the end included, once per
// character (code point with u, UTF-16 unit without).
func TestEmptyPattern(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, text, flags string
		want              []int
	}{
		{"global", "ab", "g", []int{0, 1, 2}},
		{"once without g", "ab", "", []int{0}},
		{"empty text", "", "g", []int{0}},
		{"code points with u", "é😀", "gu", []int{0, 1, 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Pattern: "", Text: tt.text, Flags: tt.flags}
			require.NoError(t, in.Validate(nil))
			res, err := testRun(in)
			require.NoError(t, err)
			var at []int
			for _, m := range res.Matches {
				require.Empty(t, m.Match)
				require.Equal(t, m.Index, m.End)
				at = append(at, m.Index)
			}
			require.Equal(t, tt.want, at)
		})
	}
}
