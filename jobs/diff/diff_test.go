package diff

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/jobs"
)

func TestCompute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, a, b string
		stats      Stats
		unified    string
	}{
		{name: "identical", a: "x\ny\n", b: "x\ny\n", stats: Stats{Unchanged: 2}},
		{name: "both empty", a: "", b: "", stats: Stats{}},
		{name: "from empty", a: "", b: "one\ntwo\n", stats: Stats{Added: 2},
			unified: "--- a\n+++ b\n@@ -0,0 +1,2 @@\n+one\n+two\n"},
		{name: "to empty", a: "one\n", b: "", stats: Stats{Removed: 1},
			unified: "--- a\n+++ b\n@@ -1 +0,0 @@\n-one\n"},
		{name: "replace middle", a: "one\ntwo\nthree\n", b: "one\n2\nthree\n", stats: Stats{Added: 1, Removed: 1, Unchanged: 2},
			unified: "--- a\n+++ b\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"},
		{name: "final newline added", a: "one\ntwo", b: "one\ntwo\n", stats: Stats{Added: 1, Removed: 1, Unchanged: 1},
			unified: "--- a\n+++ b\n@@ -1,2 +1,2 @@\n one\n-two\n\\ No newline at end of file\n+two\n"},
		{name: "final newline removed", a: "one\n", b: "one", stats: Stats{Added: 1, Removed: 1},
			unified: "--- a\n+++ b\n@@ -1 +1 @@\n-one\n+one\n\\ No newline at end of file\n"},
		{name: "unchanged last line without newline", a: "a\nb\nc", b: "z\nb\nc", stats: Stats{Added: 1, Removed: 1, Unchanged: 2},
			unified: "--- a\n+++ b\n@@ -1,3 +1,3 @@\n-a\n+z\n b\n c\n\\ No newline at end of file\n"},
		{name: "insert after line 5", a: "1\n2\n3\n4\n5\n6\n7\n8\n9\n", b: "1\n2\n3\n4\n5\nnew\n6\n7\n8\n9\n", stats: Stats{Added: 1, Unchanged: 9},
			unified: "--- a\n+++ b\n@@ -3,6 +3,7 @@\n 3\n 4\n 5\n+new\n 6\n 7\n 8\n"},
		{name: "two hunks", a: "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", b: "x\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\ny\n", stats: Stats{Added: 2, Removed: 2, Unchanged: 10},
			unified: "--- a\n+++ b\n@@ -1,4 +1,4 @@\n-1\n+x\n 2\n 3\n 4\n@@ -9,4 +9,4 @@\n 9\n 10\n 11\n-12\n+y\n"},
		{name: "close changes merge", a: "1\n2\n3\n4\n5\n6\n7\n8\n", b: "x\n2\n3\n4\n5\n6\n7\ny\n", stats: Stats{Added: 2, Removed: 2, Unchanged: 6},
			unified: "--- a\n+++ b\n@@ -1,8 +1,8 @@\n-1\n+x\n 2\n 3\n 4\n 5\n 6\n 7\n-8\n+y\n"},
		{name: "crlf kept in text", a: "a\r\nb\r\n", b: "a\r\nc\r\n", stats: Stats{Added: 1, Removed: 1, Unchanged: 1},
			unified: "--- a\n+++ b\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+c\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := Compute(tc.a, tc.b)
			require.Equal(t, tc.a == tc.b, res.Identical)
			require.Equal(t, tc.stats, res.Stats)
			require.Equal(t, tc.unified, res.Unified)
			require.Equal(t, tc.b, apply(t, tc.a, res))
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	s := ""
	for _, tc := range []struct {
		in    Input
		field string
	}{
		{Input{B: &s}, "a"},
		{Input{A: &s}, "b"},
		{Input{A: &s, B: &s}, ""},
	} {
		err := tc.in.Validate(&jobs.DefaultLimits)
		if tc.field == "" {
			require.NoError(t, err)
			continue
		}
		var inv *jobs.InvalidError
		require.ErrorAs(t, err, &inv)
		require.Equal(t, tc.field, inv.Field)
	}
}

func TestAddedRemovedNumbering(t *testing.T) {
	t.Parallel()
	res := Compute("k\nold\nk2\n", "new1\nk\nk2\nnew2\n")
	require.Equal(t, []LineText{{1, "new1"}, {4, "new2"}}, res.Added)
	require.Equal(t, []LineText{{2, "old"}}, res.Removed)
}

// TestPatchRoundTrip checks, with GNU patch, that the unified diff of 1,000
// generated pairs turns a into b exactly.
func TestPatchRoundTrip(t *testing.T) {
	t.Parallel()
	patchBin, err := exec.LookPath("patch")
	require.NoError(t, err, "GNU patch is needed: go tool task tools (apt-get install -y patch)")
	rng := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	const pairs = 1000
	type pair struct{ a, b string }
	work := make(chan int)
	var wg sync.WaitGroup
	failures := make(chan string, pairs)
	inputs := make([]pair, pairs)
	for i := range inputs {
		a := genText(rng)
		inputs[i] = pair{a, mutate(rng, a)}
	}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := inputs[i]
				res := Compute(p.a, p.b)
				if p.a == p.b {
					if !res.Identical || res.Unified != "" {
						failures <- fmt.Sprintf("pair %d: identical texts not reported identical", i)
					}
					continue
				}
				base := filepath.Join(dir, strconv.Itoa(i))
				if err := os.WriteFile(base+".a", []byte(p.a), 0o600); err != nil {
					failures <- err.Error()
					continue
				}
				if err := os.WriteFile(base+".patch", []byte(res.Unified), 0o600); err != nil {
					failures <- err.Error()
					continue
				}
				out, err := exec.Command(patchBin, "--quiet", "--force", "-o", base+".out", base+".a", base+".patch").CombinedOutput()
				if err != nil {
					failures <- fmt.Sprintf("pair %d: patch: %v: %s\n%s", i, err, out, res.Unified)
					continue
				}
				got, err := os.ReadFile(base + ".out")
				if err != nil {
					failures <- err.Error()
					continue
				}
				if string(got) != p.b {
					failures <- fmt.Sprintf("pair %d: patched a differs from b\na=%q\nb=%q\ngot=%q\n%s", i, p.a, p.b, got, res.Unified)
				}
			}
		}()
	}
	for i := 0; i < pairs; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
}

// TestMinimalAgainstGNUDiff checks that the edit script is as short as the
// one `diff --minimal` finds: with minimal scripts the numbers of added and
// removed lines are both determined.
func TestMinimalAgainstGNUDiff(t *testing.T) {
	t.Parallel()
	diffBin, err := exec.LookPath("diff")
	require.NoError(t, err, "GNU diff is needed: go tool task tools (apt-get install -y diffutils)")
	rng := rand.New(rand.NewPCG(3, 4))
	dir := t.TempDir()
	for i := 0; i < 200; i++ {
		a := genText(rng)
		b := mutate(rng, a)
		fa, fb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		require.NoError(t, os.WriteFile(fa, []byte(a), 0o600))
		require.NoError(t, os.WriteFile(fb, []byte(b), 0o600))
		out, _ := exec.Command(diffBin, "--minimal", "-U0", fa, fb).Output()
		var added, removed int
		for _, l := range strings.Split(string(out), "\n") {
			switch {
			case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
			case strings.HasPrefix(l, "+"):
				added++
			case strings.HasPrefix(l, "-"):
				removed++
			}
		}
		res := Compute(a, b)
		require.Equal(t, added, res.Stats.Added, "pair %d\na=%q\nb=%q", i, a, b)
		require.Equal(t, removed, res.Stats.Removed, "pair %d\na=%q\nb=%q", i, a, b)
	}
}

// TestLarge diffs two 100,000-line texts with 1% of lines changed.
func TestLarge(t *testing.T) {
	t.Parallel()
	a, b := bigPair(100_000, 0.01)
	res := Compute(a, b)
	require.False(t, res.Identical)
	require.Equal(t, b, apply(t, a, res))
	require.InDelta(t, 667, res.Stats.Removed, 100)
}

// TestBudget diffs texts of about 900 kB whose edit search has no short
// answer: 150,000 lines a side with no line in common, and 150,000 lines a
// side drawn at random from a few distinct lines (every line occurs in both
// texts, and the shortest script is long). Each ends within a few seconds
// with a correct diff, and a search whose context ended stops with its
// error.
func TestBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		a, b string
	}{
		{"no line in common", disjointPair(150_000), ""},
		{"few distinct lines", adversarialPair(150_000), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, _ := strings.Cut(tc.a, "\x00")
			require.Greater(t, len(a)+len(b), 850_000)
			type ended struct {
				res *Result
				err error
			}
			done := make(chan ended, 1)
			start := time.Now()
			go func() {
				res, err := Work(context.Background(), Input{A: &a, B: &b})
				done <- ended{res, err}
			}()
			var end ended
			select {
			case end = <-done:
			case <-time.After(budget):
				t.Fatalf("the diff of %d bytes ran past %v", len(a)+len(b), budget)
			}
			require.NoError(t, end.err)
			res := end.res
			t.Logf("%d bytes in %v: %+v", len(a)+len(b), time.Since(start), res.Stats)
			require.Equal(t, b, apply(t, a, res))
			require.Equal(t, len(split(a)), res.Stats.Removed+res.Stats.Unchanged)
			require.Equal(t, len(split(b)), res.Stats.Added+res.Stats.Unchanged)
		})
	}
	t.Run("context ended", func(t *testing.T) {
		a, b, _ := strings.Cut(adversarialPair(20_000), "\x00")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Work(ctx, Input{A: &a, B: &b})
		require.ErrorIs(t, err, context.Canceled)
	})
}

// budget is how long TestBudget's diffs may take: a few seconds of a core,
// with room for a machine shared with other tests.
const budget = 15 * time.Second

// TestCostLimit checks the cost limit's figures: GNU diff's 4096 for
// small inputs, lowered to keep the search within SearchBudget for large
// ones, never below MinCostLimit.
func TestCostLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, m, limit int }{
		{0, 0, 4096},
		{10, 10, 4096},
		{8_000, 8_000, 4096},
		{150_000, 150_000, SearchBudget / 300_000},
		{1 << 20, 1 << 20, MinCostLimit},
	} {
		require.Equal(t, tc.limit, costLimit(tc.n, tc.m), "%d, %d lines", tc.n, tc.m)
	}
}

// TestOverLimitStillADiff runs the search with a tiny cost limit on
// generated pairs: the script may be longer than the shortest, never
// wrong.
func TestOverLimitStillADiff(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 8))
	longer := 0
	for i := 0; i < 500; i++ {
		a := genText(rng)
		b := mutate(rng, mutate(rng, a))
		la, lb := split(a), split(b)
		ia, ib := intern(la, lb)
		d := newDiffer(context.Background(), ia, ib, 1)
		require.NoError(t, d.run())
		// The marks leave a common subsequence: the lines kept, in order.
		var keptA, keptB []int32
		removed, added := 0, 0
		for i, del := range d.delA {
			if del {
				removed++
			} else {
				keptA = append(keptA, ia[i])
			}
		}
		for j, add := range d.addB {
			if add {
				added++
			} else {
				keptB = append(keptB, ib[j])
			}
		}
		require.Equal(t, keptA, keptB, "pair %d\na=%q\nb=%q", i, a, b)
		if min := Compute(a, b); removed+added > min.Stats.Added+min.Stats.Removed {
			longer++
		}
	}
	t.Logf("%d of 500 scripts longer than the shortest", longer)
}

func TestWork(t *testing.T) {
	t.Parallel()
	a, b := "x\n", "y\n"
	res, err := Work(context.Background(), Input{A: &a, B: &b})
	require.NoError(t, err)
	require.Equal(t, Stats{Added: 1, Removed: 1}, res.Stats)
}

func FuzzDiff(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nc\nd")
	f.Add("", "x")
	f.Add("same", "same")
	f.Add("1\n2\n3\n4\n5\n6\n7\n8\n9\n", "0\n2\n3\n4\n5\n6\n7\n8\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		res := Compute(a, b)
		require.Equal(t, a == b, res.Identical)
		require.Equal(t, b, apply(t, a, res))
		require.Equal(t, len(split(a)), res.Stats.Removed+res.Stats.Unchanged)
		require.Equal(t, len(split(b)), res.Stats.Added+res.Stats.Unchanged)
	})
}

// BenchmarkBudget diffs TestBudget's texts of 900 kB.
func BenchmarkBudget(b *testing.B) {
	for _, bc := range []struct {
		name string
		pair string
	}{
		{"NoLineInCommon", disjointPair(150_000)},
		{"FewDistinctLines", adversarialPair(150_000)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			x, y, _ := strings.Cut(bc.pair, "\x00")
			b.SetBytes(int64(len(x) + len(y)))
			b.ReportAllocs()
			for b.Loop() {
				Compute(x, y)
			}
		})
	}
}

func BenchmarkDiff10k(b *testing.B) {
	a, bb := bigPair(10_000, 0.01)
	b.SetBytes(int64(len(a) + len(bb)))
	b.ReportAllocs()
	for b.Loop() {
		Compute(a, bb)
	}
}

// BenchmarkGNUDiff10k runs GNU diff -u on the same files as BenchmarkDiff10k,
// process start included, for a side-by-side figure.
func BenchmarkGNUDiff10k(b *testing.B) {
	diffBin, err := exec.LookPath("diff")
	require.NoError(b, err)
	a, bb := bigPair(10_000, 0.01)
	dir := b.TempDir()
	fa, fb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	require.NoError(b, os.WriteFile(fa, []byte(a), 0o600))
	require.NoError(b, os.WriteFile(fb, []byte(bb), 0o600))
	b.SetBytes(int64(len(a) + len(bb)))
	for b.Loop() {
		_ = exec.Command(diffBin, "-u", fa, fb).Run()
	}
}

// apply applies res's unified diff to a with a small applier of its own
// (independent of GNU patch), checking on the way that every context and
// removed line matches a and that the hunks of res list the same lines.
func apply(t testing.TB, a string, res *Result) string {
	t.Helper()
	if res.Identical {
		require.Empty(t, res.Unified)
		require.Empty(t, res.Hunks)
		return a
	}
	la := strings.SplitAfter(a, "\n")
	if la[len(la)-1] == "" {
		la = la[:len(la)-1]
	}
	lines := strings.SplitAfter(res.Unified, "\n")
	require.Equal(t, "--- a\n", lines[0])
	require.Equal(t, "+++ b\n", lines[1])
	lines = lines[2 : len(lines)-1] // the text ends with a newline
	var out []string
	pos, hunk := 0, -1
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch l[0] {
		case '@':
			hunk++
			h := res.Hunks[hunk]
			var as, al, bs, bl int
			al, bl = 1, 1
			if _, err := fmt.Sscanf(l, "@@ -%d,%d +", &as, &al); err != nil {
				_, err = fmt.Sscanf(l, "@@ -%d +", &as)
				require.NoError(t, err, l)
			}
			rest := l[strings.Index(l, "+")+1:]
			if _, err := fmt.Sscanf(rest, "%d,%d @@", &bs, &bl); err != nil {
				_, err = fmt.Sscanf(rest, "%d @@", &bs)
				require.NoError(t, err, l)
				bl = 1
			}
			require.Equal(t, [4]int{h.AStart, h.ALines, h.BStart, h.BLines}, [4]int{as, al, bs, bl}, l)
			start := as - 1
			if al == 0 {
				start = as
			}
			require.GreaterOrEqual(t, start, pos, "hunks overlap or go backwards")
			out = append(out, la[pos:start]...)
			pos = start
			k := 0
			for ; i+1 < len(lines) && lines[i+1][0] != '@'; i++ {
				body := lines[i+1]
				if body[0] == '\\' {
					last := len(out) - 1
					if lines[i][0] == '-' {
						require.False(t, strings.HasSuffix(la[pos-1], "\n"))
						continue
					}
					out[last] = strings.TrimSuffix(out[last], "\n")
					if lines[i][0] == ' ' {
						require.False(t, strings.HasSuffix(la[pos-1], "\n"))
					}
					continue
				}
				require.Equal(t, h.Lines[k], HunkLine{body[:1], strings.TrimSuffix(body[1:], "\n")})
				k++
				switch body[0] {
				case ' ', '-':
					require.Equal(t, strings.TrimSuffix(la[pos], "\n"), strings.TrimSuffix(body[1:], "\n"))
					if body[0] == ' ' {
						out = append(out, body[1:])
					}
					pos++
				case '+':
					out = append(out, body[1:])
				}
			}
			require.Equal(t, len(h.Lines), k)
		default:
			t.Fatalf("unexpected line %q", l)
		}
	}
	require.Equal(t, len(res.Hunks), hunk+1)
	out = append(out, la[pos:]...)
	return strings.Join(out, "")
}

func genText(rng *rand.Rand) string {
	n := rng.IntN(30)
	var s strings.Builder
	for i := 0; i < n; i++ {
		s.WriteString(words[rng.IntN(len(words))])
		s.WriteByte('\n')
	}
	out := s.String()
	if out != "" && rng.IntN(4) == 0 {
		out = strings.TrimSuffix(out, "\n")
	}
	return out
}

var words = []string{"alpha", "beta", "gamma", "delta", "", "  indented", "x", "y", "}", "{", "ünïcode", "tab\there"}

func mutate(rng *rand.Rand, a string) string {
	lines := strings.SplitAfter(a, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	edits := rng.IntN(6)
	for e := 0; e < edits; e++ {
		switch k := rng.IntN(3); {
		case k == 0 && len(lines) > 0:
			i := rng.IntN(len(lines))
			lines = append(lines[:i], lines[i+1:]...)
		case k == 1:
			i := rng.IntN(len(lines) + 1)
			lines = append(lines[:i], append([]string{words[rng.IntN(len(words))] + "\n"}, lines[i:]...)...)
		case len(lines) > 0:
			lines[rng.IntN(len(lines))] = words[rng.IntN(len(words))] + "\n"
		}
	}
	out := strings.Join(lines, "")
	switch rng.IntN(5) {
	case 0:
		out = strings.TrimSuffix(out, "\n")
	case 1:
		if out != "" && !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
	}
	return out
}

func bigPair(n int, frac float64) (string, string) {
	rng := rand.New(rand.NewPCG(5, 6))
	var a, b bytes.Buffer
	for i := 0; i < n; i++ {
		l := fmt.Sprintf("line %d: %x\n", i, rng.Uint64())
		a.WriteString(l)
		switch r := rng.Float64(); {
		case r < frac/3:
			// removed
		case r < 2*frac/3:
			b.WriteString("changed " + l)
		case r < frac:
			b.WriteString(l)
			b.WriteString(fmt.Sprintf("inserted %d\n", i))
		default:
			b.WriteString(l)
		}
	}
	return a.String(), b.String()
}

// disjointPair returns two texts of n lines each, a and b joined by a NUL,
// with no line of one in the other (three bytes a line).
func disjointPair(n int) string {
	var s strings.Builder
	for side := range 2 {
		for i := range n {
			// 2 characters of 64 on one side, of another 64 on the other:
			// lines repeat within a side, never across.
			s.WriteByte(byte('0' + side*64/2 + i%32))
			s.WriteByte(byte('0' + (i/32)%64))
			s.WriteByte('\n')
		}
		if side == 0 {
			s.WriteByte(0)
		}
	}
	return s.String()
}

// adversarialPair returns two texts of n lines each, a and b joined by a
// NUL, each line drawn at random from 8 (three bytes a line): every line
// occurs in both, and their shortest edit script is long.
func adversarialPair(n int) string {
	rng := rand.New(rand.NewPCG(9, 10))
	var s strings.Builder
	for side := range 2 {
		for range n {
			s.WriteString("l")
			s.WriteByte(byte('0' + rng.IntN(8)))
			s.WriteByte('\n')
		}
		if side == 0 {
			s.WriteByte(0)
		}
	}
	return s.String()
}
