package codereview

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The labelled corpus: testdata/corpus holds vulnerable and safe snippets.
// A line ending in a comment "want: <rule> [<rule>...]" must be found by
// the static rules; any other static finding is a false positive.
//
// corpus/dev was written together with the rules (and the rules tuned on
// it); corpus/heldout was written afterwards and labelled before the rules
// ever ran on it, and the rules were not changed for it: its figures are the
// honest estimate.
//
// Secrets are not stored in the files (a real-looking token in a repository
// trips secret scanners and push protection): a placeholder
// @@SECRET:<kind>@@ is replaced at test time by a random token of that kind,
// generated from a fixed seed.

var (
	secretsOnce sync.Once
	secretsVal  *secretScanner
	secretsErr  error
)

// testSecrets compiles the gitleaks rules once for the package's tests.
func testSecrets(t testing.TB) *secretScanner {
	t.Helper()
	secretsOnce.Do(func() { secretsVal, secretsErr = newSecretScanner() })
	require.NoError(t, secretsErr)
	return secretsVal
}

var extLanguage = map[string]string{
	".py": langPython, ".js": langJavaScript, ".ts": langTypeScript, ".go": langGo,
	".php": langPHP, ".java": langJava, ".rb": langRuby, ".sh": langShell,
}

var (
	wantMarker  = regexp.MustCompile(`(?:#|//)\s*want:\s*([a-z\- ]+)$`)
	placeholder = regexp.MustCompile(`@@SECRET:([a-z\-]+)@@`)
)

// fakeSecret returns a random token of kind, in the shape the real issuer
// uses.
func fakeSecret(r *rand.Rand, kind string) string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	pick := func(set string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = set[r.IntN(len(set))]
		}
		return string(b)
	}
	switch kind {
	case "github-pat":
		return "ghp_" + pick(alnum, 36)
	case "aws":
		return "AKIA" + pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
	case "stripe":
		return "sk_" + "live_" + pick(alnum, 24)
	case "slack-bot":
		return "xoxb-" + pick("0123456789", 12) + "-" + pick("0123456789", 13) + "-" + pick(alnum, 24)
	}
	panic("unknown secret kind " + kind)
}

type want struct {
	rule string
	line int
}

type corpusCase struct {
	set   string // dev or heldout
	name  string
	lang  string
	code  string
	wants []want
}

func loadCorpus(t testing.TB) []corpusCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "corpus", "*", "*"))
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(402, 1))
	var out []corpusCase
	for _, f := range files {
		lang, ok := extLanguage[filepath.Ext(f)]
		require.True(t, ok, "corpus file %s: unknown extension", f)
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		code := placeholder.ReplaceAllStringFunc(string(raw), func(m string) string {
			return fakeSecret(r, placeholder.FindStringSubmatch(m)[1])
		})
		c := corpusCase{set: filepath.Base(filepath.Dir(f)), name: filepath.Base(f), lang: lang, code: code}
		for i, line := range strings.Split(code, "\n") {
			if m := wantMarker.FindStringSubmatch(strings.TrimRight(line, " \r")); m != nil {
				for _, rule := range strings.Fields(m[1]) {
					c.wants = append(c.wants, want{rule: rule, line: i + 1})
				}
			}
		}
		out = append(out, c)
	}
	return out
}

type score struct{ tp, fp, fn int }

func (s score) precision() float64 {
	if s.tp+s.fp == 0 {
		return 1
	}
	return float64(s.tp) / float64(s.tp+s.fp)
}

func (s score) recall() float64 {
	if s.tp+s.fn == 0 {
		return 1
	}
	return float64(s.tp) / float64(s.tp+s.fn)
}

// match pairs findings with wants: a finding matches a want of its rule
// whose line is inside the finding's lines.
func match(findings []Finding, wants []want) (tp, fp, fn []string) {
	used := make([]bool, len(wants))
	for _, f := range findings {
		hit := -1
		for i, w := range wants {
			if !used[i] && w.rule == f.Rule && w.line >= f.Line && w.line <= f.EndLine {
				hit = i
				break
			}
		}
		desc := fmt.Sprintf("%s %d-%d", f.Rule, f.Line, f.EndLine)
		if hit < 0 {
			fp = append(fp, desc)
			continue
		}
		used[hit] = true
		tp = append(tp, desc)
	}
	for i, w := range wants {
		if !used[i] {
			fn = append(fn, fmt.Sprintf("%s %d", w.rule, w.line))
		}
	}
	return tp, fp, fn
}

// TestCorpus measures the static rules' precision and recall on the
// labelled corpus, per rule and overall, and fails when they fall below the
// floors (set just under the figures measured when the rules were written,
// so that a regression fails).
func TestCorpus(t *testing.T) {
	t.Parallel()
	secrets := testSecrets(t)
	cases := loadCorpus(t)

	langs := map[string]bool{}
	vulnerable, safe := 0, 0
	for _, c := range cases {
		langs[c.lang] = true
		if len(c.wants) > 0 {
			vulnerable++
		} else {
			safe++
		}
	}
	require.GreaterOrEqual(t, len(cases), 40, "the corpus has at least 40 snippets")
	require.GreaterOrEqual(t, safe, 15, "the corpus has safe snippets")
	for _, l := range staticLanguages {
		require.True(t, langs[l], "the corpus covers %s", l)
	}

	perRule := map[string]*score{}
	for _, r := range []string{RuleEval, RuleSQL, RuleSecret, RuleCommand} {
		perRule[r] = &score{}
	}
	perSet := map[string]*score{"dev": {}, "heldout": {}}
	var total score
	var report []string
	for _, c := range cases {
		findings := dedupe(staticFindings(c.code, c.lang, secrets))
		tp, fp, fn := match(findings, c.wants)
		for _, d := range tp {
			perRule[strings.Fields(d)[0]].tp++
		}
		for _, d := range fp {
			perRule[strings.Fields(d)[0]].fp++
		}
		for _, d := range fn {
			perRule[strings.Fields(d)[0]].fn++
		}
		for _, s := range []*score{&total, perSet[c.set]} {
			s.tp += len(tp)
			s.fp += len(fp)
			s.fn += len(fn)
		}
		if len(fp)+len(fn) > 0 {
			report = append(report, fmt.Sprintf("%s/%s: false positives %v, missed %v", c.set, c.name, fp, fn))
		}
	}
	sort.Strings(report)
	for _, line := range report {
		t.Log(line)
	}
	rules := make([]string, 0, len(perRule))
	for r := range perRule {
		rules = append(rules, r)
	}
	slices.Sort(rules)
	t.Logf("corpus: %d snippets (%d vulnerable, %d safe) in %d languages", len(cases), vulnerable, safe, len(langs))
	for _, r := range rules {
		s := perRule[r]
		t.Logf("%-18s precision %.3f  recall %.3f  (tp %d, fp %d, fn %d)", r, s.precision(), s.recall(), s.tp, s.fp, s.fn)
	}
	for _, set := range []string{"dev", "heldout"} {
		s := perSet[set]
		t.Logf("%-18s precision %.3f  recall %.3f  (tp %d, fp %d, fn %d)", "set "+set, s.precision(), s.recall(), s.tp, s.fp, s.fn)
	}
	t.Logf("%-18s precision %.3f  recall %.3f  (tp %d, fp %d, fn %d)", "all", total.precision(), total.recall(), total.tp, total.fp, total.fn)

	require.GreaterOrEqual(t, total.precision(), 0.90, "overall precision")
	require.GreaterOrEqual(t, total.recall(), 0.85, "overall recall")
	require.GreaterOrEqual(t, perSet["heldout"].precision(), 0.80, "held-out precision")
	require.GreaterOrEqual(t, perSet["heldout"].recall(), 0.70, "held-out recall")
}
