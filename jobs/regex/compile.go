package regex

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/dlclark/regexp2"
)

// Engine names, as the result reports them.
const (
	EngineRE2        = "re2"
	EngineECMAScript = "ecmascript"
)

// maxRE2Count is the largest repetition count Go's regexp accepts.
const maxRE2Count = 1000

// program is a pattern compiled for one text.
type program struct {
	engine  string
	ncap    int
	nhidden int
	names   []string
	sticky  bool
	// loops and groupLoop drive fixCaptures (see loop).
	loops     []loop
	groupLoop []int
	groupRel  []relation

	// re2: plain is the pattern; from finds the first match at or after the
	// second character of the text it is given, seeing the first one as
	// context; sticky0 and stickyFrom are the same anchored at the start.
	// Only those re2Matcher.exec runs are compiled (re2Programs): plain
	// and, unless contextFree, from; sticky0 and stickyFrom when sticky.
	plain, from, sticky0, stickyFrom *regexp.Regexp
	// contextFree: the pattern never looks at the character before a
	// position, so searching a suffix of the text gives the same matches.
	contextFree bool
	// re2Slots[i] is the slot of Go's group i+1: a group number, or ncap+h
	// for hidden group h. A group may occur more than once (see transform).
	re2Slots []int

	// ecmascript
	bt *regexp2.Regexp
}

// features are what a tree needs from an engine.
type features struct {
	backtrack   bool // lookaround, backreferences or counts RE2 refuses
	lineAnchors bool // ^ or $ under the m flag
	context     bool // looks at the character before a position
}

func scan(n *node, fl flagSet, f *features) {
	switch n.op {
	case opLook, opBackref:
		f.backtrack = true
	case opWordB:
		f.context = true
		if fl.unicode && fl.ignoreCase {
			// \b's word characters include ſ and K here; RE2's \b does not.
			f.backtrack = true
		}
	case opBegin, opEnd:
		if fl.multiline {
			f.lineAnchors = true
		}
		if n.op == opBegin {
			f.context = true
		}
	case opRepeat:
		if n.min > maxRE2Count || n.max > maxRE2Count {
			f.backtrack = true
		}
	}
	for _, s := range n.subs {
		scan(s, fl, f)
	}
}

// compile compiles p for searching text. It chooses RE2 unless the pattern
// needs backtracking, or uses ^ or $ under the m flag on a text holding
// line terminators other than \n (RE2's multi-line anchors know only \n).
func compile(p *parsed, text string) (*program, error) {
	var f features
	scan(p.root, p.flags, &f)
	root, t := transform(p.root, p.ncap)
	prog := &program{ncap: p.ncap, nhidden: t.hidden, names: p.names, sticky: p.flags.sticky,
		loops: t.loops, groupLoop: t.groupLoop, groupRel: t.groupRel}
	useRE2 := !f.backtrack && !(f.lineAnchors && strings.ContainsAny(text, "\r\u2028\u2029"))
	if useRE2 {
		e := &emitter{flags: p.flags, re2: true, escape: escapeRE2, ncap: p.ncap}
		e.emit(root)
		prog.contextFree = !f.context
		if prog.re2Programs(e.b.String()) == nil {
			prog.engine = EngineRE2
			prog.re2Slots = e.groups
			return prog, nil
		}
		// Go refuses some large programs ("expression too large"): the
		// backtracking engine runs them instead.
	}
	e := &emitter{flags: p.flags, escape: escapeECMAScript, ncap: p.ncap}
	e.emit(root)
	expr := e.b.String()
	if p.flags.sticky {
		expr = `\G(?:` + expr + `)`
	}
	bt, err := regexp2.Compile(expr, regexp2.ECMAScript)
	if err != nil {
		return nil, fmt.Errorf("compile for the ecmascript engine: %w", err)
	}
	prog.engine = EngineECMAScript
	prog.bt = bt
	return prog, nil
}

// re2Programs compiles expr, the pattern for Go's regexp, into the
// programs re2Matcher.exec runs for p: plain, and from unless p is
// contextFree; sticky0 and stickyFrom for a sticky p. Those it never runs
// are not compiled.
func (p *program) re2Programs(expr string) error {
	var errs []error
	compile := func(re **regexp.Regexp, expr string) {
		var err error
		*re, err = regexp.Compile(expr)
		errs = append(errs, err)
	}
	if p.sticky {
		compile(&p.sticky0, `\A(?:`+expr+`)`)
		compile(&p.stickyFrom, `\A(?s:.)(`+expr+`)`)
		return errors.Join(errs...)
	}
	compile(&p.plain, expr)
	if !p.contextFree {
		compile(&p.from, `\A(?s:.)(?s:.*?)(`+expr+`)`)
	}
	return errors.Join(errs...)
}

// loop is a quantified subpattern that holds capturing groups. JavaScript
// resets captures at the start of each iteration, so a group reports only
// what the last iteration captured; the engines keep the last capture of
// any iteration. Each such loop's body is wrapped in a hidden group, whose
// capture is the last iteration, and groups captured before it are dropped
// (see program.fixCaptures).
type loop struct {
	parent int // enclosing loop, -1 for none
	slot   int // the hidden group's slot
	rel    relation
}

// relation says where a capture made in a loop's last iteration lies
// relative to that iteration, which decides how an older one is told apart.
type relation uint8

const (
	// inside: the capture starts at or after the iteration's start;
	// older ones start before it.
	inside relation = iota
	// behind: the capture is in a lookbehind within the iteration, so it
	// ends at or after the iteration's start; older ones end before it.
	behind
	// backward: the loop runs right to left inside a lookbehind, so its
	// last iteration is its leftmost; older captures end after it.
	backward
)

// transformer rewrites a parsed tree for the engines.
type transformer struct {
	ncap      int
	loops     []loop
	groupLoop []int // groupLoop[c] is the innermost loop around group c, or -1
	groupRel  []relation
	hidden    int
}

// transform returns the tree the engines run, with its loops. Besides
// adding the hidden groups it applies JavaScript's rule that an iteration
// past the minimum may not match the empty string: X{m,n} with X able to
// match empty becomes X{m}N{0,n-m}, where N is X restricted to non-empty
// matches (nonEmpty), when N can be written.
func transform(root *node, ncap int) (*node, *transformer) {
	t := &transformer{ncap: ncap, groupLoop: make([]int, ncap+1), groupRel: make([]relation, ncap+1)}
	for i := range t.groupLoop {
		t.groupLoop[i] = -1
	}
	return t.walk(root, -1, inside, false), t
}

// walk rewrites n, which lies in loop cur with relation rel; inBehind says
// whether n is inside a lookbehind at all.
func (t *transformer) walk(n *node, cur int, rel relation, inBehind bool) *node {
	c := *n
	if c.op == opGroup && c.hidden == 0 {
		t.groupLoop[c.cap] = cur
		t.groupRel[c.cap] = rel
	}
	if c.op != opRepeat {
		subRel, subBehind := rel, inBehind
		if c.op == opLook && c.behind {
			subBehind = true
			if rel == inside {
				subRel = behind
			}
		}
		c.subs = make([]*node, len(n.subs))
		for i, s := range n.subs {
			c.subs[i] = t.walk(s, cur, subRel, subBehind)
		}
		return &c
	}
	body := n.subs[0]
	inner, innerRel := cur, rel
	hidden := 0
	if (n.max > 1 || n.max < 0) && hasGroup(body) {
		t.hidden++
		hidden = t.hidden
		inner = len(t.loops)
		t.loops = append(t.loops, loop{parent: cur, slot: t.ncap + hidden, rel: rel})
		innerRel = inside
		if inBehind {
			innerRel = backward
		}
	}
	body = t.walk(body, inner, innerRel, inBehind)
	wrap := func(b *node) *node {
		if hidden == 0 {
			return b
		}
		return &node{op: opGroup, hidden: hidden, subs: []*node{b}}
	}
	if n.min != n.max && nullable(body) {
		if ne, ok := nonEmpty(body); ok {
			rest := &node{op: opRepeat, subs: []*node{wrap(ne)}, min: 0, max: -1, greedy: n.greedy}
			if n.max >= 0 {
				rest.max = n.max - n.min
			}
			if n.min == 0 {
				return rest
			}
			first := &node{op: opRepeat, subs: []*node{wrap(body)}, min: n.min, max: n.min, greedy: n.greedy}
			return &node{op: opConcat, subs: []*node{first, rest}}
		}
	}
	c.subs = []*node{wrap(body)}
	return &c
}

func hasGroup(n *node) bool {
	if n.op == opGroup && n.hidden == 0 {
		return true
	}
	for _, s := range n.subs {
		if hasGroup(s) {
			return true
		}
	}
	return false
}

// nullable reports whether n may match the empty string.
func nullable(n *node) bool {
	switch n.op {
	case opSet:
		return false
	case opConcat:
		for _, s := range n.subs {
			if !nullable(s) {
				return false
			}
		}
		return true
	case opAlt:
		for _, s := range n.subs {
			if nullable(s) {
				return true
			}
		}
		return false
	case opGroup:
		return nullable(n.subs[0])
	case opRepeat:
		return n.min == 0 || nullable(n.subs[0])
	}
	return true // empty, assertions, backreferences
}

// never is a node that matches nothing.
var never = &node{op: opSet}

// nonEmpty returns n restricted to its non-empty matches, in the same order
// of preference, or ok false when that cannot be written.
func nonEmpty(n *node) (*node, bool) {
	if !nullable(n) {
		return n, true
	}
	switch n.op {
	case opEmpty, opBegin, opEnd, opWordB, opLook:
		return never, true
	case opGroup:
		sub, ok := nonEmpty(n.subs[0])
		if !ok {
			return nil, false
		}
		c := *n
		c.subs = []*node{sub}
		return &c, true
	case opAlt:
		var alts []*node
		for _, s := range n.subs {
			ne, ok := nonEmpty(s)
			if !ok {
				return nil, false
			}
			if ne != never {
				alts = append(alts, ne)
			}
		}
		switch len(alts) {
		case 0:
			return never, true
		case 1:
			return alts[0], true
		}
		return &node{op: opAlt, subs: alts}, true
	case opRepeat:
		// Dropping the zero-iteration path, which is the least preferred
		// (greedy) or the most (lazy), keeps the others in order.
		if nullable(n.subs[0]) || n.max == 0 {
			return nil, false
		}
		c := *n
		c.min = 1
		return &c, true
	}
	return nil, false
}

// emitter writes a tree in one engine's syntax.
type emitter struct {
	b      strings.Builder
	flags  flagSet
	re2    bool
	escape func(b *strings.Builder, r rune)
	ncap   int
	groups []int // slot of each group written, in order
}

func escapeRE2(b *strings.Builder, r rune) {
	if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
		b.WriteRune(r)
		return
	}
	fmt.Fprintf(b, `\x{%X}`, r)
}

func escapeECMAScript(b *strings.Builder, r rune) {
	switch {
	case r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'):
		b.WriteRune(r)
	case r > 0xFFFF:
		// regexp2 reads the pattern as code points; these are never syntax.
		b.WriteRune(r)
	default:
		fmt.Fprintf(b, `\u%04X`, r)
	}
}

func (e *emitter) set(s charSet) {
	if r, ok := s.single(); ok {
		e.escape(&e.b, r)
		return
	}
	if len(s) == 0 {
		if e.re2 {
			e.b.WriteString(`[^\x00-\x{10FFFF}]`)
		} else {
			e.b.WriteString(`[^\s\S]`)
		}
		return
	}
	e.b.WriteByte('[')
	for _, r := range s {
		e.escape(&e.b, r.lo)
		if r.hi > r.lo {
			if r.hi > r.lo+1 {
				e.b.WriteByte('-')
			}
			e.escape(&e.b, r.hi)
		}
	}
	e.b.WriteByte(']')
}

func (e *emitter) emit(n *node) {
	switch n.op {
	case opEmpty:
		e.b.WriteString(`(?:)`)
	case opSet:
		e.set(n.set)
	case opConcat:
		for _, s := range n.subs {
			if s.op == opAlt {
				e.b.WriteString("(?:")
				e.emit(s)
				e.b.WriteString(")")
				continue
			}
			e.emit(s)
		}
	case opAlt:
		for i, s := range n.subs {
			if i > 0 {
				e.b.WriteByte('|')
			}
			e.emit(s)
		}
	case opGroup:
		slot := n.cap
		if n.hidden > 0 {
			slot = e.ncap + n.hidden
		}
		e.groups = append(e.groups, slot)
		switch {
		case e.re2:
			e.b.WriteByte('(')
		case n.hidden > 0:
			// Named groups are numbered after the numbered ones, so the
			// pattern's own group numbers stay as they are.
			fmt.Fprintf(&e.b, "(?<h%d>", n.hidden)
		default:
			// An explicit number: a group written twice (see transform)
			// stays one group.
			fmt.Fprintf(&e.b, "(?<%d>", n.cap)
		}
		e.emit(n.subs[0])
		e.b.WriteByte(')')
	case opRepeat:
		e.b.WriteString("(?:")
		e.emit(n.subs[0])
		e.b.WriteString(")")
		switch {
		case n.min == 0 && n.max < 0:
			e.b.WriteByte('*')
		case n.min == 1 && n.max < 0:
			e.b.WriteByte('+')
		case n.min == 0 && n.max == 1:
			e.b.WriteByte('?')
		case n.max < 0:
			fmt.Fprintf(&e.b, "{%d,}", n.min)
		case n.min == n.max:
			fmt.Fprintf(&e.b, "{%d}", n.min)
		default:
			fmt.Fprintf(&e.b, "{%d,%d}", n.min, n.max)
		}
		if !n.greedy {
			e.b.WriteByte('?')
		}
	case opBegin:
		switch {
		case e.re2 && e.flags.multiline:
			e.b.WriteString(`(?m:^)`)
		case e.re2:
			e.b.WriteString(`\A`)
		case e.flags.multiline:
			e.b.WriteString(`(?<![^\n\r\u2028\u2029])`)
		default:
			e.b.WriteString(`^`)
		}
	case opEnd:
		switch {
		case e.re2 && e.flags.multiline:
			e.b.WriteString(`(?m:$)`)
		case e.re2:
			e.b.WriteString(`\z`)
		case e.flags.multiline:
			e.b.WriteString(`(?![^\n\r\u2028\u2029])`)
		default:
			e.b.WriteString(`(?![\s\S])`)
		}
	case opWordB:
		if e.re2 {
			if n.neg {
				e.b.WriteString(`\B`)
			} else {
				e.b.WriteString(`\b`)
			}
			return
		}
		w := wordChars
		if e.flags.unicode && e.flags.ignoreCase {
			w = wordCharsIU
		}
		sub := &emitter{flags: e.flags, escape: e.escape}
		sub.set(w)
		W := sub.b.String()
		if n.neg {
			fmt.Fprintf(&e.b, `(?:(?<=%[1]s)(?=%[1]s)|(?<!%[1]s)(?!%[1]s))`, W)
		} else {
			fmt.Fprintf(&e.b, `(?:(?<=%[1]s)(?!%[1]s)|(?<!%[1]s)(?=%[1]s))`, W)
		}
	case opLook:
		switch {
		case n.behind && n.neg:
			e.b.WriteString("(?<!")
		case n.behind:
			e.b.WriteString("(?<=")
		case n.neg:
			e.b.WriteString("(?!")
		default:
			e.b.WriteString("(?=")
		}
		e.emit(n.subs[0])
		e.b.WriteByte(')')
	case opBackref:
		ref := `\` + strconv.Itoa(n.cap)
		if e.flags.ignoreCase {
			e.b.WriteString("(?i:" + ref + ")")
		} else {
			e.b.WriteString("(?:" + ref + ")")
		}
	}
}

// fixCaptures drops, in a span holding every slot, the captures that an
// earlier iteration of a loop made: JavaScript reports a group inside a
// loop only when the loop's last iteration set it. The hidden group of a
// loop spans its last iteration; see relation for telling older captures.
func (p *program) fixCaptures(sp *span) {
	type iter struct{ start, end int }
	last := make([]iter, len(p.loops)) // each loop's last iteration; start -1 for none
	current := func(parent int, rel relation, start, end int) bool {
		if start < 0 {
			return false
		}
		if parent < 0 {
			return true
		}
		it := last[parent]
		switch {
		case it.start < 0:
			return false
		case rel == behind:
			return end >= it.start
		case rel == backward:
			return end <= it.end
		}
		return start >= it.start
	}
	for i, l := range p.loops {
		start, end := sp.cps[2*l.slot], sp.cps[2*l.slot+1]
		if !current(l.parent, l.rel, start, end) {
			start = -1
		}
		last[i] = iter{start, end}
	}
	for c := 1; c <= p.ncap; c++ {
		l := p.groupLoop[c]
		if l < 0 || sp.cps[2*c] < 0 {
			continue
		}
		if !current(l, p.groupRel[c], sp.cps[2*c], sp.cps[2*c+1]) {
			sp.cps[2*c], sp.cps[2*c+1] = -1, -1
			sp.bytes[2*c], sp.bytes[2*c+1] = -1, -1
		}
	}
}
