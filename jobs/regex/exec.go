package regex

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// MaxMatches is the most matches a result holds; a result cut there has
// Truncated set.
const MaxMatches = 10_000

// maxOutputBytes bounds the total size of the matched and captured text in
// a result (captures may overlap, so a 1 MiB text could otherwise produce
// gigabytes). A result cut there has Truncated set.
const maxOutputBytes = 16 << 20

// ErrTimeout reports that the ecmascript engine ran past its time limit.
// It depends on the text, so Validate cannot catch it; Work returns it
// wrapped.
var ErrTimeout = errors.New("regex: match time limit exceeded")

// span is a match: byte offsets and code point indexes of the whole match
// and each group (-1 when the group did not participate).
type span struct {
	bytes, cps []int
}

// newSpan returns a span with every slot unset: the match, the pattern's
// groups, then the hidden groups.
func newSpan(p *program) *span {
	n := 2 * (1 + p.ncap + p.nhidden)
	sp := &span{bytes: make([]int, n), cps: make([]int, n)}
	for i := range n {
		sp.bytes[i], sp.cps[i] = -1, -1
	}
	return sp
}

// matcher runs one exec step: the first match at or after a position (or,
// sticky, exactly there).
type matcher interface {
	exec(atByte, atCP int) (*span, error)
}

// run collects the matches of prog in text like JavaScript's matchAll (g
// flag) or exec (no g flag), with lastIndex advancing one character past
// an empty match.
func run(ctx context.Context, prog *program, fl flagSet, text string, deadline time.Time) (*Result, error) {
	res := &Result{Engine: prog.engine, Flags: fl.String(), Matches: []Match{}}
	var m matcher
	if prog.engine == EngineRE2 {
		m = &re2Matcher{prog: prog, text: text}
	} else {
		m = newBTMatcher(prog, text, deadline)
	}
	atByte, atCP, output := 0, 0, 0
	for atByte <= len(text) {
		if len(res.Matches)%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("match: %w", err)
			}
		}
		sp, err := m.exec(atByte, atCP)
		if err != nil {
			return nil, err
		}
		if sp == nil {
			break
		}
		prog.fixCaptures(sp)
		if len(res.Matches) == MaxMatches {
			res.Truncated = true
			break
		}
		match := buildMatch(sp, prog.names, text)
		size := len(match.Match)
		for _, g := range match.Groups {
			if g.Value != nil {
				size += len(*g.Value)
			}
		}
		if output+size > maxOutputBytes {
			res.Truncated = true
			break
		}
		output += size
		res.Matches = append(res.Matches, match)
		if !fl.global {
			break
		}
		atByte, atCP = sp.bytes[1], sp.cps[1]
		if sp.bytes[0] == sp.bytes[1] {
			// An empty match: the next search starts one character on.
			if atByte == len(text) {
				break
			}
			_, w := utf8.DecodeRuneInString(text[atByte:])
			atByte += w
			atCP++
		}
	}
	res.MatchCount = len(res.Matches)
	return res, nil
}

func buildMatch(sp *span, names []string, text string) Match {
	m := Match{
		Match:  text[sp.bytes[0]:sp.bytes[1]],
		Index:  sp.cps[0],
		End:    sp.cps[1],
		Groups: make([]Group, len(names)),
	}
	for i := range m.Groups {
		g := &m.Groups[i]
		if names[i] != "" {
			g.Name = &names[i]
		}
		b0, b1 := sp.bytes[2*i+2], sp.bytes[2*i+3]
		if b0 < 0 {
			continue
		}
		v, idx := text[b0:b1], sp.cps[2*i+2]
		g.Value, g.Index = &v, &idx
	}
	return m
}

// re2Matcher runs the re2 engine. Go's regexp cannot start a search in the
// middle of a text while seeing the character before it, so a search from
// a later position runs on the text from the character before it, with a
// prefix that consumes that character (see program).
type re2Matcher struct {
	prog  *program
	text  string
	order []int
}

func (m *re2Matcher) exec(atByte, atCP int) (*span, error) {
	p := m.prog
	var loc []int
	base := 0
	switch {
	case atByte == 0 && p.sticky:
		loc = p.sticky0.FindStringSubmatchIndex(m.text)
	case atByte == 0:
		loc = p.plain.FindStringSubmatchIndex(m.text)
	case p.contextFree && !p.sticky:
		base = atByte
		loc = p.plain.FindStringSubmatchIndex(m.text[atByte:])
	default:
		_, w := utf8.DecodeLastRuneInString(m.text[:atByte])
		base = atByte - w
		re := p.from
		if p.sticky {
			re = p.stickyFrom
		}
		loc = re.FindStringSubmatchIndex(m.text[base:])
		if loc != nil {
			loc = loc[2:]
		}
	}
	if loc == nil {
		return nil, nil
	}
	sp := newSpan(p)
	sp.bytes[0], sp.bytes[1] = loc[0]+base, loc[1]+base
	for i, slot := range p.re2Slots {
		start, end := loc[2*i+2], loc[2*i+3]
		// A group written twice (see transform): the later capture wins.
		if start < 0 || (sp.bytes[2*slot] >= 0 && start+base < sp.bytes[2*slot]) {
			continue
		}
		sp.bytes[2*slot], sp.bytes[2*slot+1] = start+base, end+base
	}
	// Every offset lies at or after atByte (RE2 runs no lookbehind), so one
	// forward walk from atByte over the offsets in order converts them all.
	m.order = m.order[:0]
	for i, x := range sp.bytes {
		if x >= 0 {
			m.order = append(m.order, i)
		}
	}
	slices.SortFunc(m.order, func(a, b int) int { return sp.bytes[a] - sp.bytes[b] })
	b, cp := atByte, atCP
	for _, i := range m.order {
		off := sp.bytes[i]
		cp += utf8.RuneCountInString(m.text[b:off])
		b = off
		sp.cps[i] = cp
	}
	return sp, nil
}

// btMatcher runs the ecmascript engine (regexp2), which works on code
// points.
type btMatcher struct {
	prog     *program
	runes    []rune
	byteAt   []int32 // byteAt[i] is the byte offset of code point i
	deadline time.Time
}

func newBTMatcher(prog *program, text string, deadline time.Time) *btMatcher {
	n := utf8.RuneCountInString(text)
	m := &btMatcher{prog: prog, runes: make([]rune, 0, n), byteAt: make([]int32, 0, n+1), deadline: deadline}
	for i, r := range text {
		m.runes = append(m.runes, r)
		m.byteAt = append(m.byteAt, int32(i))
	}
	m.byteAt = append(m.byteAt, int32(len(text)))
	return m
}

func (m *btMatcher) exec(_, atCP int) (*span, error) {
	left := time.Until(m.deadline)
	if left <= 0 {
		return nil, ErrTimeout
	}
	m.prog.bt.MatchTimeout = left
	res, err := m.prog.bt.FindRunesMatchStartingAt(m.runes, atCP)
	if err != nil {
		// regexp2's only error is its timeout, whose message holds the
		// whole text: the call's answer and its ledger get ErrTimeout.
		return nil, ErrTimeout
	}
	if res == nil {
		return nil, nil
	}
	p := m.prog
	sp := newSpan(p)
	sp.cps[0], sp.cps[1] = res.Index, res.Index+res.Length
	for slot := 1; slot < len(sp.cps)/2; slot++ {
		var g *regexp2.Group
		if slot <= p.ncap {
			g = res.GroupByNumber(slot)
		} else {
			g = res.GroupByName("h" + strconv.Itoa(slot-p.ncap))
		}
		if g != nil && len(g.Captures) > 0 {
			sp.cps[2*slot], sp.cps[2*slot+1] = g.Index, g.Index+g.Length
		}
	}
	for i, cp := range sp.cps {
		sp.bytes[i] = -1
		if cp >= 0 {
			sp.bytes[i] = int(m.byteAt[cp])
		}
	}
	return sp, nil
}
