// Package diff implements the diff operation: a line diff of two texts with
// added and removed lists, hunks, and a unified diff that GNU patch applies
// to a to give b exactly, with or without final newlines.
//
// The edit script comes from Myers' O(ND) algorithm in its linear-space form
// (divide and conquer on the middle snake), after trimming the common prefix
// and suffix, so memory stays linear in the input and time is proportional to
// the input size times the number of differences.
package diff

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/x402d/x402d/jobs"
)

// Kind is the operation's name and River job kind.
const Kind = "diff"

// Context is the number of unchanged lines shown around each change.
const Context = 3

// Input is the request body of diff.
type Input struct {
	// A is the first (old) text.
	A *string `json:"a"`
	// B is the second (new) text.
	B *string `json:"b"`
}

// Kind returns "diff".
func (Input) Kind() string { return Kind }

// Validate requires both texts; the body limit bounds their size.
func (in Input) Validate(*jobs.Limits) error {
	if in.A == nil {
		return jobs.Invalid("a", "is required (a string, possibly empty)")
	}
	if in.B == nil {
		return jobs.Invalid("b", "is required (a string, possibly empty)")
	}
	return nil
}

// Result is diff's result object (contract.md, "Results per operation").
type Result struct {
	Identical bool       `json:"identical"`
	Stats     Stats      `json:"stats"`
	Hunks     []Hunk     `json:"hunks"`
	Added     []LineText `json:"added"`
	Removed   []LineText `json:"removed"`
	Unified   string     `json:"unified"`
}

// Stats counts lines by their fate.
type Stats struct {
	Added     int `json:"added"`
	Removed   int `json:"removed"`
	Unchanged int `json:"unchanged"`
}

// Hunk is one group of changes with its context, numbered as in the unified
// diff header: a start of an empty range is the line before it.
type Hunk struct {
	AStart int        `json:"a_start"`
	ALines int        `json:"a_lines"`
	BStart int        `json:"b_start"`
	BLines int        `json:"b_lines"`
	Lines  []HunkLine `json:"lines"`
}

// HunkLine is one line of a hunk: Op is " " (context), "-" or "+".
type HunkLine struct {
	Op   string `json:"op"`
	Text string `json:"text"`
}

// LineText is an added line (numbered in b) or a removed line (numbered in a),
// 1-based.
type LineText struct {
	Line int    `json:"line"`
	Text string `json:"text"`
}

// Spec describes diff for the catalogue, quotes and discovery.
var Spec = jobs.Spec{
	Name:        Kind,
	Price:       "0.010000",
	Queue:       jobs.QueuePure,
	Description: "Line diff of two texts: added and removed lines, hunks with counts, and a unified diff that patch applies.",
	InputExample: map[string]string{
		"a": "one\ntwo\nthree\n",
		"b": "one\n2\nthree\n",
	},
	InputSchema: json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
		`"required":["a","b"],"additionalProperties":false,"properties":{` +
		`"a":{"type":"string","description":"first (old) text"},` +
		`"b":{"type":"string","description":"second (new) text"}}}`),
	OutputExample: Compute("one\ntwo\nthree\n", "one\n2\nthree\n"),
}

// Op is the diff operation.
var Op = jobs.Define[Input](Spec)

// Work computes the diff of in.A and in.B.
func Work(_ context.Context, in Input) (*Result, error) {
	return Compute(*in.A, *in.B), nil
}

// line is one line of a text: its content without the newline, and whether
// a newline ended it (only a text's last line may lack one).
type line struct {
	text    string
	newline bool
}

func split(s string) []line {
	if s == "" {
		return nil
	}
	lines := make([]line, 0, strings.Count(s, "\n")+1)
	for len(s) > 0 {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			lines = append(lines, line{text: s})
			break
		}
		lines = append(lines, line{text: s[:i], newline: true})
		s = s[i+1:]
	}
	return lines
}

// op is one step of the edit script.
type op struct {
	kind byte // ' ', '-', '+'
	a, b int  // 0-based position in a and b before this step
}

// Compute returns the diff of a and b.
func Compute(a, b string) *Result {
	res := &Result{Identical: a == b, Hunks: []Hunk{}, Added: []LineText{}, Removed: []LineText{}}
	la, lb := split(a), split(b)
	if res.Identical {
		res.Stats.Unchanged = len(la)
		return res
	}
	ia, ib := intern(la, lb)
	d := &differ{a: ia, b: ib, delA: make([]bool, len(ia)), addB: make([]bool, len(ib))}
	d.compare(0, len(ia), 0, len(ib))

	script := make([]op, 0, len(ia)+len(ib))
	for i, j := 0, 0; i < len(ia) || j < len(ib); {
		switch {
		case i < len(ia) && d.delA[i]:
			script = append(script, op{'-', i, j})
			res.Removed = append(res.Removed, LineText{Line: i + 1, Text: la[i].text})
			i++
		case j < len(ib) && d.addB[j]:
			script = append(script, op{'+', i, j})
			res.Added = append(res.Added, LineText{Line: j + 1, Text: lb[j].text})
			j++
		default:
			script = append(script, op{' ', i, j})
			i++
			j++
		}
	}
	res.Stats = Stats{Added: len(res.Added), Removed: len(res.Removed), Unchanged: len(la) - len(res.Removed)}
	res.Hunks, res.Unified = hunks(script, la, lb)
	return res
}

// intern maps equal lines to equal integers so the search compares ints.
func intern(la, lb []line) ([]int32, []int32) {
	ids := make(map[line]int32, len(la))
	conv := func(ls []line) []int32 {
		out := make([]int32, len(ls))
		for i, l := range ls {
			id, ok := ids[l]
			if !ok {
				id = int32(len(ids))
				ids[l] = id
			}
			out[i] = id
		}
		return out
	}
	return conv(la), conv(lb)
}

// hunks groups the script into hunks with Context lines around changes and
// renders the unified diff.
func hunks(script []op, la, lb []line) ([]Hunk, string) {
	var out []Hunk
	var u strings.Builder
	u.WriteString("--- a\n+++ b\n")
	for p := 0; p < len(script); {
		if script[p].kind == ' ' {
			p++
			continue
		}
		start := max(0, p-Context)
		// Extend over changes separated by at most 2*Context unchanged lines.
		end, q := p, p
		for q < len(script) {
			if script[q].kind != ' ' {
				end = q
				q++
				continue
			}
			if q-end > 2*Context {
				break
			}
			q++
		}
		stop := min(len(script), end+1+Context)
		h := Hunk{Lines: make([]HunkLine, 0, stop-start)}
		for _, o := range script[start:stop] {
			switch o.kind {
			case ' ':
				h.ALines++
				h.BLines++
				h.Lines = append(h.Lines, HunkLine{" ", la[o.a].text})
			case '-':
				h.ALines++
				h.Lines = append(h.Lines, HunkLine{"-", la[o.a].text})
			case '+':
				h.BLines++
				h.Lines = append(h.Lines, HunkLine{"+", lb[o.b].text})
			}
		}
		h.AStart, h.BStart = script[start].a, script[start].b
		if h.ALines > 0 {
			h.AStart++
		}
		if h.BLines > 0 {
			h.BStart++
		}
		u.WriteString("@@ -")
		writeRange(&u, h.AStart, h.ALines)
		u.WriteString(" +")
		writeRange(&u, h.BStart, h.BLines)
		u.WriteString(" @@\n")
		for _, o := range script[start:stop] {
			var l line
			if o.kind == '+' {
				l = lb[o.b]
			} else {
				l = la[o.a]
			}
			u.WriteByte(o.kind)
			u.WriteString(l.text)
			u.WriteByte('\n')
			if !l.newline {
				u.WriteString("\\ No newline at end of file\n")
			}
		}
		out = append(out, h)
		p = stop
	}
	return out, u.String()
}

func writeRange(u *strings.Builder, start, n int) {
	u.WriteString(strconv.Itoa(start))
	if n != 1 {
		u.WriteByte(',')
		u.WriteString(strconv.Itoa(n))
	}
}

// differ finds a shortest edit script between a and b, marking deleted lines
// of a and added lines of b.
type differ struct {
	a, b       []int32
	delA, addB []bool
	v1, v2     []int // scratch of the middle-snake search, reused
}

// compare marks the differences between a[aLo:aHi] and b[bLo:bHi].
func (d *differ) compare(aLo, aHi, bLo, bHi int) {
	for aLo < aHi && bLo < bHi && d.a[aLo] == d.b[bLo] {
		aLo++
		bLo++
	}
	for aLo < aHi && bLo < bHi && d.a[aHi-1] == d.b[bHi-1] {
		aHi--
		bHi--
	}
	switch {
	case aLo == aHi:
		for j := bLo; j < bHi; j++ {
			d.addB[j] = true
		}
		return
	case bLo == bHi:
		for i := aLo; i < aHi; i++ {
			d.delA[i] = true
		}
		return
	}
	x, y, ok := d.middle(aLo, aHi, bLo, bHi)
	if !ok || (x == aLo && y == bLo) || (x == aHi && y == bHi) {
		// No split that makes progress: everything in the range changed.
		for i := aLo; i < aHi; i++ {
			d.delA[i] = true
		}
		for j := bLo; j < bHi; j++ {
			d.addB[j] = true
		}
		return
	}
	d.compare(aLo, x, bLo, y)
	d.compare(x, aHi, y, bHi)
}

// middle finds where a forward and a reverse furthest-reaching path meet in
// a[aLo:aHi] x b[bLo:bHi] (both non-empty, no common prefix or suffix) and
// returns that point in absolute coordinates. ok is false only when the
// ranges share nothing.
func (d *differ) middle(aLo, aHi, bLo, bHi int) (x, y int, ok bool) {
	a, b := d.a[aLo:aHi], d.b[bLo:bHi]
	n, m := len(a), len(b)
	maxD := (n + m + 1) / 2
	off := maxD
	size := 2*maxD + 2
	if cap(d.v1) < size {
		d.v1 = make([]int, size)
		d.v2 = make([]int, size)
	}
	v1, v2 := d.v1[:size], d.v2[:size]
	for i := range v1 {
		v1[i], v2[i] = -1, -1
	}
	v1[off+1], v2[off+1] = 0, 0
	delta := n - m
	front := delta%2 != 0
	k1start, k1end, k2start, k2end := 0, 0, 0, 0
	for dd := 0; dd < maxD; dd++ {
		for k1 := -dd + k1start; k1 <= dd-k1end; k1 += 2 {
			i := off + k1
			var x1 int
			if k1 == -dd || (k1 != dd && v1[i-1] < v1[i+1]) {
				x1 = v1[i+1]
			} else {
				x1 = v1[i-1] + 1
			}
			y1 := x1 - k1
			for x1 < n && y1 < m && a[x1] == b[y1] {
				x1++
				y1++
			}
			v1[i] = x1
			switch {
			case x1 > n:
				k1end += 2
			case y1 > m:
				k1start += 2
			case front:
				j := off + delta - k1
				if j >= 0 && j < size && v2[j] != -1 && x1 >= n-v2[j] {
					return aLo + x1, bLo + y1, true
				}
			}
		}
		for k2 := -dd + k2start; k2 <= dd-k2end; k2 += 2 {
			i := off + k2
			var x2 int
			if k2 == -dd || (k2 != dd && v2[i-1] < v2[i+1]) {
				x2 = v2[i+1]
			} else {
				x2 = v2[i-1] + 1
			}
			y2 := x2 - k2
			for x2 < n && y2 < m && a[n-x2-1] == b[m-y2-1] {
				x2++
				y2++
			}
			v2[i] = x2
			switch {
			case x2 > n:
				k2end += 2
			case y2 > m:
				k2start += 2
			case !front:
				j := off + delta - k2
				if j >= 0 && j < size && v1[j] != -1 {
					x1 := v1[j]
					y1 := off + x1 - j
					if x1 >= n-x2 {
						return aLo + x1, bLo + y1, true
					}
				}
			}
		}
	}
	return 0, 0, false
}
