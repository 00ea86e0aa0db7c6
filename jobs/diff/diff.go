// Package diff implements the diff operation: a line diff of two texts with
// added and removed lists, hunks, and a unified diff that GNU patch applies
// to a to give b exactly, with or without final newlines.
//
// The edit script comes from Myers' O(ND) algorithm in its linear-space form
// (divide and conquer on the middle snake), bounded as GNU diff bounds it
// (diffseq.h): lines that occur nowhere in the other text are changed
// without a search, and a search for a middle snake that passes its cost
// limit gives up on the shortest script and splits at the furthest point it
// reached. The limit is GNU diff's, lowered for large inputs so that the
// whole search takes about SearchBudget steps at most. Memory stays linear
// in the input and time about linear: texts with few differences get the
// shortest script; texts with very many may get a longer one, still a
// correct diff that patch applies.
package diff

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
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

// Work computes the diff of in.A and in.B. It stops when ctx ends,
// returning an error wrapping ctx's.
func Work(ctx context.Context, in Input) (*Result, error) {
	res, err := ComputeContext(ctx, *in.A, *in.B)
	if err != nil {
		return nil, fmt.Errorf("diff: %w", err)
	}
	return res, nil
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
	res, _ := ComputeContext(context.Background(), a, b)
	return res
}

// ComputeContext returns the diff of a and b, or ctx's error (wrapped) once
// ctx ends.
func ComputeContext(ctx context.Context, a, b string) (*Result, error) {
	res := &Result{Identical: a == b, Hunks: []Hunk{}, Added: []LineText{}, Removed: []LineText{}}
	la, lb := split(a), split(b)
	if res.Identical {
		res.Stats.Unchanged = len(la)
		return res, nil
	}
	ia, ib := intern(la, lb)
	d := newDiffer(ctx, ia, ib, 0)
	if err := d.run(); err != nil {
		return nil, err
	}

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
	return res, nil
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

// The cost limit of a middle-snake search is the number of edit steps it
// takes from each end before it gives up on the shortest script: GNU diff's
// too_expensive, about twice the square root of the lines and at least
// gnuMinCostLimit, but lowered for large inputs so that the whole search
// stays within about SearchBudget diagonal steps (a search costs about the
// lines times its limit), and never below MinCostLimit.
const (
	// SearchBudget is about how many diagonal steps one diff's edit
	// search takes at most: a second or so of a core.
	SearchBudget = 1 << 26
	// MinCostLimit is the least cost limit of a search: a diff of fewer
	// differences than this is always the shortest.
	MinCostLimit = 64
	// gnuMinCostLimit is GNU diff's least cost limit.
	gnuMinCostLimit = 4096
)

// costLimit returns the cost limit of a search over n and m lines.
func costLimit(n, m int) int {
	limit := 1
	for diags := n + m + 3; diags != 0; diags >>= 2 {
		limit <<= 1
	}
	limit = max(limit, gnuMinCostLimit)
	return max(MinCostLimit, min(limit, SearchBudget/max(1, n+m)))
}

// ctxCheckEvery is how many diagonal steps a search takes between two looks
// at its context.
const ctxCheckEvery = 1 << 16

// differ finds an edit script between a and b, marking deleted lines of a
// and added lines of b: the shortest one while no search passes its cost
// limit.
type differ struct {
	ctx        context.Context
	a, b       []int32
	delA, addB []bool
	// xa and xb are the lines of a and b that occur in the other text
	// (their indexes in a and b), and xv and yv their ids: the search
	// runs on these, the others being changed whatever the script.
	xa, xb []int
	xv, yv []int32
	// fd and bd are the furthest-reaching points of the forward and
	// backward searches, by diagonal (offset by off).
	fd, bd []int
	off    int
	// limit is the cost limit of one search (costLimit).
	limit int
	// steps counts diagonal steps since the context was last read.
	steps int
	err   error
}

// newDiffer returns a differ of a and b with cost limit limit (0: the
// default for their sizes, costLimit).
func newDiffer(ctx context.Context, a, b []int32, limit int) *differ {
	d := &differ{ctx: ctx, a: a, b: b, delA: make([]bool, len(a)), addB: make([]bool, len(b))}
	// Discard the lines that occur nowhere in the other text: no common
	// subsequence holds them, so they are changed in every script, the
	// shortest included (GNU diff's discard_confusing_lines, its lines
	// without a match).
	var inA, inB []bool
	for _, set := range []struct {
		lines []int32
		in    *[]bool
	}{{a, &inA}, {b, &inB}} {
		n := int32(0)
		for _, id := range set.lines {
			n = max(n, id+1)
		}
		if int(n) > len(*set.in) {
			*set.in = append(*set.in, make([]bool, int(n)-len(*set.in))...)
		}
		for _, id := range set.lines {
			(*set.in)[id] = true
		}
	}
	seen := func(in []bool, id int32) bool { return int(id) < len(in) && in[id] }
	for i, id := range a {
		if seen(inB, id) {
			d.xa, d.xv = append(d.xa, i), append(d.xv, id)
		} else {
			d.delA[i] = true
		}
	}
	for j, id := range b {
		if seen(inA, id) {
			d.xb, d.yv = append(d.xb, j), append(d.yv, id)
		} else {
			d.addB[j] = true
		}
	}
	n, m := len(d.xv), len(d.yv)
	d.limit = limit
	if d.limit == 0 {
		d.limit = costLimit(n, m)
	}
	// Diagonals run from -m-1 to n+1.
	d.off = m + 1
	d.fd = make([]int, n+m+3)
	d.bd = make([]int, n+m+3)
	return d
}

// run marks the differences, or returns ctx's error once it ends.
func (d *differ) run() error {
	d.compare(0, len(d.xv), 0, len(d.yv), false)
	return d.err
}

// tick counts n diagonal steps and reports whether the search must stop
// (its context ended).
func (d *differ) tick(n int) bool {
	if d.err != nil {
		return true
	}
	if d.steps += n; d.steps >= ctxCheckEvery {
		d.steps = 0
		if err := d.ctx.Err(); err != nil {
			d.err = fmt.Errorf("edit search stopped: %w", err)
			return true
		}
	}
	return false
}

// compare marks the differences between xv[xoff:xlim] and yv[yoff:ylim]
// (GNU diff's compareseq). With minimal, the search for their middle snake
// has no cost limit.
func (d *differ) compare(xoff, xlim, yoff, ylim int, minimal bool) {
	for d.err == nil {
		for xoff < xlim && yoff < ylim && d.xv[xoff] == d.yv[yoff] {
			xoff++
			yoff++
		}
		for xoff < xlim && yoff < ylim && d.xv[xlim-1] == d.yv[ylim-1] {
			xlim--
			ylim--
		}
		switch {
		case xoff == xlim:
			for j := yoff; j < ylim; j++ {
				d.addB[d.xb[j]] = true
			}
			return
		case yoff == ylim:
			for i := xoff; i < xlim; i++ {
				d.delA[d.xa[i]] = true
			}
			return
		}
		p, ok := d.middle(xoff, xlim, yoff, ylim, minimal)
		if !ok {
			return
		}
		d.compare(xoff, p.x, yoff, p.y, p.loMinimal)
		// The second half in this loop rather than by recursion.
		xoff, yoff, minimal = p.x, p.y, p.hiMinimal
	}
}

// partition is where a search divides a range, and whether each half is to be
// searched without cost limit.
type partition struct {
	x, y                 int
	loMinimal, hiMinimal bool
}

// middle finds the midpoint of a shortest edit script of xv[xoff:xlim] and
// yv[yoff:ylim] (both non-empty, no common prefix or suffix), or, past the
// cost limit and unless minimal, a point on the furthest-reaching path of
// either search (GNU diff's diag, without its -H heuristic). ok is false
// when the context ended.
func (d *differ) middle(xoff, xlim, yoff, ylim int, minimal bool) (part partition, ok bool) {
	fd, bd, off := d.fd, d.bd, d.off
	xv, yv := d.xv, d.yv
	dmin, dmax := xoff-ylim, xlim-yoff // the valid diagonals
	fmid, bmid := xoff-yoff, xlim-ylim // the searches' centre diagonals
	fmin, fmax, bmin, bmax := fmid, fmid, bmid, bmid
	odd := (fmid-bmid)&1 != 0
	fd[off+fmid] = xoff
	bd[off+bmid] = xlim
	for c := 1; ; c++ {
		// Extend the forward search by an edit step on each diagonal.
		if fmin > dmin {
			fmin--
			fd[off+fmin-1] = -1
		} else {
			fmin++
		}
		if fmax < dmax {
			fmax++
			fd[off+fmax+1] = -1
		} else {
			fmax--
		}
		for k := fmax; k >= fmin; k -= 2 {
			tlo, thi := fd[off+k-1], fd[off+k+1]
			x := tlo + 1
			if tlo < thi {
				x = thi
			}
			y := x - k
			for x < xlim && y < ylim && xv[x] == yv[y] {
				x++
				y++
			}
			fd[off+k] = x
			if odd && bmin <= k && k <= bmax && bd[off+k] <= x {
				return partition{x: x, y: y, loMinimal: true, hiMinimal: true}, true
			}
		}
		// And the backward search.
		if bmin > dmin {
			bmin--
			bd[off+bmin-1] = math.MaxInt
		} else {
			bmin++
		}
		if bmax < dmax {
			bmax++
			bd[off+bmax+1] = math.MaxInt
		} else {
			bmax--
		}
		for k := bmax; k >= bmin; k -= 2 {
			tlo, thi := bd[off+k-1], bd[off+k+1]
			x := thi - 1
			if tlo < thi {
				x = tlo
			}
			y := x - k
			for xoff < x && yoff < y && xv[x-1] == yv[y-1] {
				x--
				y--
			}
			bd[off+k] = x
			if !odd && fmin <= k && k <= fmax && x <= fd[off+k] {
				return partition{x: x, y: y, loMinimal: true, hiMinimal: true}, true
			}
		}
		if d.tick(fmax - fmin + bmax - bmin + 2) {
			return partition{}, false
		}
		if minimal || c < d.limit {
			continue
		}
		// Too expensive: give up on the shortest script and split at the
		// better of the point furthest along a forward diagonal (largest
		// x+y) and the one furthest back along a backward diagonal
		// (smallest x+y), each judged by how far it came.
		fxybest, fxbest := -1, 0
		for k := fmax; k >= fmin; k -= 2 {
			x := min(fd[off+k], xlim)
			y := x - k
			if ylim < y {
				x, y = ylim+k, ylim
			}
			if fxybest < x+y {
				fxybest, fxbest = x+y, x
			}
		}
		bxybest, bxbest := math.MaxInt, 0
		for k := bmax; k >= bmin; k -= 2 {
			x := max(xoff, bd[off+k])
			y := x - k
			if y < yoff {
				x, y = yoff+k, yoff
			}
			if x+y < bxybest {
				bxybest, bxbest = x+y, x
			}
		}
		if (xlim+ylim)-bxybest < fxybest-(xoff+yoff) {
			return partition{x: fxbest, y: fxybest - fxbest, loMinimal: true}, true
		}
		return partition{x: bxbest, y: bxybest - bxbest, hiMinimal: true}, true
	}
}
