package regex

import (
	"fmt"
	"strings"
	"unicode"
)

// flagSet holds the parsed flags of a request.
type flagSet struct {
	global, ignoreCase, multiline, dotAll, unicode, sticky bool
}

// parseFlags parses JavaScript flag letters; it refuses other letters and
// repeats.
func parseFlags(s string) (flagSet, error) {
	var f flagSet
	for _, c := range s {
		var p *bool
		switch c {
		case 'g':
			p = &f.global
		case 'i':
			p = &f.ignoreCase
		case 'm':
			p = &f.multiline
		case 's':
			p = &f.dotAll
		case 'u':
			p = &f.unicode
		case 'y':
			p = &f.sticky
		default:
			return f, fmt.Errorf("%q is not a flag (allowed: g i m s u y)", c)
		}
		if *p {
			return f, fmt.Errorf("flag %q is repeated", c)
		}
		*p = true
	}
	return f, nil
}

// String returns the flags in JavaScript's canonical order, as RegExp's
// flags property does.
func (f flagSet) String() string {
	var b strings.Builder
	for _, x := range []struct {
		on bool
		c  byte
	}{{f.global, 'g'}, {f.ignoreCase, 'i'}, {f.multiline, 'm'}, {f.dotAll, 's'}, {f.unicode, 'u'}, {f.sticky, 'y'}} {
		if x.on {
			b.WriteByte(x.c)
		}
	}
	return b.String()
}

// op is the kind of a syntax tree node.
type op uint8

const (
	opEmpty   op = iota // the empty string
	opSet               // one character of set
	opConcat            // subs in sequence
	opAlt               // the first of subs that leads to a match
	opGroup             // capturing group cap around subs[0]
	opRepeat            // subs[0] repeated min..max times (max < 0: unbounded)
	opBegin             // ^ (multiline: also after a line terminator)
	opEnd               // $ (multiline: also before a line terminator)
	opWordB             // \b, or \B when neg
	opLook              // lookahead or lookbehind (behind), negative when neg
	opBackref           // \N or \k<name>: the text group cap captured
)

// node is a parsed regular expression.
type node struct {
	op       op
	subs     []*node
	set      charSet
	min, max int
	greedy   bool
	cap      int  // group number (opGroup, opBackref)
	hidden   int  // nonzero: a copy of a group made by unrolling (see unroll)
	neg      bool // opWordB: \B; opLook: negative
	behind   bool // opLook: lookbehind
	ref      string
}

// maxCount caps repetition counts; JavaScript's are unbounded, but no text
// we accept is longer.
const maxCount = 1 << 30

// syntaxError is a pattern JavaScript's RegExp would refuse (or one this
// implementation cannot run), with the character position it was found at.
type syntaxError struct {
	msg string
	pos int
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("%s (at character %d)", e.msg, e.pos)
}

// parsed is a pattern parsed under a set of flags.
type parsed struct {
	root  *node
	ncap  int
	names []string // names[i] is group i+1's name, "" when unnamed
	flags flagSet
}

type parser struct {
	src      []rune
	pos      int
	flags    flagSet
	ncap     int
	totalCap int
	named    bool // the pattern has named groups: \k is always a reference
	names    []string
	refs     []*node // \k<name> references, resolved at the end
}

// parse parses a JavaScript regular expression (ECMAScript 2024 syntax with
// Annex B's web-compatibility rules when the u flag is off).
func parse(pattern string, flags flagSet) (*parsed, error) {
	p := &parser{src: []rune(pattern), flags: flags}
	p.totalCap, p.named = prescan(p.src)
	root, err := p.disjunction()
	if err != nil {
		return nil, err
	}
	if p.more() {
		return nil, p.errorf("Unmatched ')'")
	}
	for _, ref := range p.refs {
		for i, n := range p.names {
			if n == ref.ref {
				ref.cap = i + 1
			}
		}
		if ref.cap == 0 {
			return nil, p.errorf("Invalid named capture referenced")
		}
	}
	return &parsed{root: root, ncap: p.ncap, names: p.names, flags: flags}, nil
}

// prescan counts the capturing groups and notes named ones, so that
// references may point forward.
func prescan(src []rune) (groups int, named bool) {
	inClass := false
	for i := 0; i < len(src); i++ {
		switch c := src[i]; {
		case c == '\\':
			i++
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
		case c == '(':
			if i+1 < len(src) && src[i+1] == '?' {
				if i+3 < len(src) && src[i+2] == '<' && src[i+3] != '=' && src[i+3] != '!' {
					groups++
					named = true
				}
				continue
			}
			groups++
		}
	}
	return groups, named
}

func (p *parser) more() bool { return p.pos < len(p.src) }

func (p *parser) peek() rune { return p.src[p.pos] }

func (p *parser) peekAt(i int) (rune, bool) {
	if p.pos+i < len(p.src) {
		return p.src[p.pos+i], true
	}
	return 0, false
}

func (p *parser) lookingAt(s string) bool {
	i := 0
	for _, c := range s {
		if r, ok := p.peekAt(i); !ok || r != c {
			return false
		}
		i++
	}
	return true
}

func (p *parser) errorf(format string, args ...any) error {
	return &syntaxError{msg: fmt.Sprintf(format, args...), pos: p.pos}
}

func (p *parser) disjunction() (*node, error) {
	var alts []*node
	for {
		a, err := p.alternative()
		if err != nil {
			return nil, err
		}
		alts = append(alts, a)
		if p.more() && p.peek() == '|' {
			p.pos++
			continue
		}
		break
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return &node{op: opAlt, subs: alts}, nil
}

func (p *parser) alternative() (*node, error) {
	var terms []*node
	for p.more() && p.peek() != '|' && p.peek() != ')' {
		t, err := p.term()
		if err != nil {
			return nil, err
		}
		if t.op != opEmpty {
			terms = append(terms, t)
		}
	}
	switch len(terms) {
	case 0:
		return &node{op: opEmpty}, nil
	case 1:
		return terms[0], nil
	}
	return &node{op: opConcat, subs: terms}, nil
}

func (p *parser) term() (*node, error) {
	start := p.pos
	var atom *node
	quantifiable := true
	switch c := p.peek(); {
	case c == '^' || c == '$':
		p.pos++
		atom = &node{op: opBegin}
		if c == '$' {
			atom.op = opEnd
		}
		quantifiable = false
	case p.lookingAt(`\b`) || p.lookingAt(`\B`):
		atom = &node{op: opWordB, neg: p.src[p.pos+1] == 'B'}
		p.pos += 2
		quantifiable = false
	case p.lookingAt("(?=") || p.lookingAt("(?!") || p.lookingAt("(?<=") || p.lookingAt("(?<!"):
		behind := p.src[p.pos+2] == '<'
		neg := p.src[p.pos+2] == '!' || (behind && p.src[p.pos+3] == '!')
		p.pos += 3
		if behind {
			p.pos++
		}
		sub, err := p.disjunction()
		if err != nil {
			return nil, err
		}
		if !p.more() || p.peek() != ')' {
			return nil, p.errorf("Unterminated group")
		}
		p.pos++
		atom = &node{op: opLook, subs: []*node{sub}, behind: behind, neg: neg}
		// Annex B lets lookaheads be quantified without the u flag.
		quantifiable = !behind && !p.flags.unicode
	default:
		var err error
		atom, err = p.atom()
		if err != nil {
			return nil, err
		}
	}
	min, max, greedy, ok, err := p.quantifier()
	if err != nil {
		return nil, err
	}
	if !ok {
		return atom, nil
	}
	if !quantifiable {
		p.pos = start
		return nil, p.errorf("Nothing to repeat")
	}
	if atom.op == opLook {
		// A quantified lookahead: an iteration never consumes, and JavaScript
		// refuses empty iterations once the minimum is reached, so it runs
		// once when the minimum is positive and never otherwise.
		if min == 0 {
			return &node{op: opEmpty}, nil
		}
		return atom, nil
	}
	return &node{op: opRepeat, subs: []*node{atom}, min: min, max: max, greedy: greedy}, nil
}

// quantifier parses an optional quantifier.
func (p *parser) quantifier() (min, max int, greedy, ok bool, err error) {
	if !p.more() {
		return 0, 0, false, false, nil
	}
	switch p.peek() {
	case '*':
		min, max = 0, -1
		p.pos++
	case '+':
		min, max = 1, -1
		p.pos++
	case '?':
		min, max = 0, 1
		p.pos++
	case '{':
		save := p.pos
		var braced bool
		min, max, braced = p.braced()
		if !braced {
			p.pos = save
			if p.flags.unicode {
				return 0, 0, false, false, p.errorf("Incomplete quantifier")
			}
			return 0, 0, false, false, nil
		}
		if max >= 0 && min > max {
			return 0, 0, false, false, p.errorf("numbers out of order in {} quantifier")
		}
	default:
		return 0, 0, false, false, nil
	}
	greedy = true
	if p.more() && p.peek() == '?' {
		greedy = false
		p.pos++
	}
	if p.more() {
		if c := p.peek(); c == '*' || c == '+' || c == '?' {
			return 0, 0, false, false, p.errorf("Nothing to repeat")
		}
		if p.peek() == '{' {
			save := p.pos
			if _, _, braced := p.braced(); braced {
				p.pos = save
				return 0, 0, false, false, p.errorf("Nothing to repeat")
			}
			p.pos = save
		}
	}
	return min, max, greedy, true, nil
}

// braced parses {n}, {n,} or {n,m} at p.pos.
func (p *parser) braced() (min, max int, ok bool) {
	p.pos++ // {
	min, ok = p.decimal()
	if !ok {
		return 0, 0, false
	}
	max = min
	if p.more() && p.peek() == ',' {
		p.pos++
		max = -1
		if p.more() && p.peek() >= '0' && p.peek() <= '9' {
			max, _ = p.decimal()
		}
	}
	if !p.more() || p.peek() != '}' {
		return 0, 0, false
	}
	p.pos++
	return min, max, true
}

// decimal parses digits, saturating at maxCount.
func (p *parser) decimal() (int, bool) {
	n, digits := 0, 0
	for p.more() && p.peek() >= '0' && p.peek() <= '9' {
		n = min(n*10+int(p.peek()-'0'), maxCount)
		digits++
		p.pos++
	}
	return n, digits > 0
}

func (p *parser) setNode(s charSet) *node {
	if p.flags.ignoreCase {
		s = caseClose(s, p.flags.unicode)
	}
	return &node{op: opSet, set: s.minus(surrogates)}
}

func (p *parser) atom() (*node, error) {
	c := p.peek()
	switch c {
	case '.':
		p.pos++
		if p.flags.dotAll {
			return &node{op: opSet, set: allChars.minus(surrogates)}, nil
		}
		return p.setNode(lineTerminators.negate()), nil
	case '(':
		return p.group()
	case '[':
		return p.class()
	case '\\':
		return p.atomEscape()
	case '*', '+', '?':
		return nil, p.errorf("Nothing to repeat")
	case '{':
		if p.flags.unicode {
			return nil, p.errorf("Lone quantifier brackets")
		}
		save := p.pos
		if _, _, ok := p.braced(); ok {
			p.pos = save
			return nil, p.errorf("Nothing to repeat")
		}
		p.pos = save + 1
		return p.setNode(single('{')), nil
	case '}', ']':
		if p.flags.unicode {
			return nil, p.errorf("Lone quantifier brackets")
		}
	}
	p.pos++
	return p.setNode(single(c)), nil
}

func (p *parser) group() (*node, error) {
	p.pos++ // (
	capture, name := true, ""
	if p.more() && p.peek() == '?' {
		switch {
		case p.lookingAt("?:"):
			p.pos += 2
			capture = false
		case p.lookingAt("?<"):
			p.pos += 2
			var err error
			if name, err = p.groupName(); err != nil {
				return nil, err
			}
			for _, n := range p.names {
				if n == name {
					return nil, p.errorf("Duplicate capture group name")
				}
			}
		default:
			return nil, p.errorf("Invalid group")
		}
	}
	var g *node
	if capture {
		p.ncap++
		p.names = append(p.names, name)
		g = &node{op: opGroup, cap: p.ncap}
	}
	sub, err := p.disjunction()
	if err != nil {
		return nil, err
	}
	if !p.more() || p.peek() != ')' {
		return nil, p.errorf("Unterminated group")
	}
	p.pos++
	if g == nil {
		return sub, nil
	}
	g.subs = []*node{sub}
	return g, nil
}

// groupName parses "name>" (RegExpIdentifierName without \u escapes).
func (p *parser) groupName() (string, error) {
	start := p.pos
	for p.more() && p.peek() != '>' {
		c := p.peek()
		first := p.pos == start
		ok := c == '$' || c == '_' || unicode.IsLetter(c) || unicode.Is(unicode.Nl, c) ||
			(!first && (unicode.IsDigit(c) || unicode.In(c, unicode.Mn, unicode.Mc, unicode.Pc) || c == 0x200C || c == 0x200D))
		if !ok {
			return "", p.errorf("Invalid capture group name")
		}
		p.pos++
	}
	if !p.more() || p.pos == start {
		return "", p.errorf("Invalid capture group name")
	}
	name := string(p.src[start:p.pos])
	p.pos++ // >
	return name, nil
}

func (p *parser) atomEscape() (*node, error) {
	p.pos++ // backslash
	if !p.more() {
		return nil, p.errorf("\\ at end of pattern")
	}
	c := p.peek()
	switch {
	case c >= '1' && c <= '9':
		save := p.pos
		n, _ := p.decimal()
		if n <= p.totalCap {
			return &node{op: opBackref, cap: n}, nil
		}
		if p.flags.unicode || p.named {
			return nil, p.errorf("Invalid escape")
		}
		p.pos = save
		if c >= '8' {
			p.pos++
			return p.setNode(single(c)), nil
		}
		return p.setNode(single(p.legacyOctal())), nil
	case c == 'k' && (p.flags.unicode || p.named):
		p.pos++
		if !p.more() || p.peek() != '<' {
			return nil, p.errorf("Invalid named reference")
		}
		p.pos++
		name, err := p.groupName()
		if err != nil {
			return nil, err
		}
		ref := &node{op: opBackref, ref: name}
		p.refs = append(p.refs, ref)
		return ref, nil
	}
	if s, ok, err := p.classEscape(); err != nil || ok {
		if err != nil {
			return nil, err
		}
		return p.setNode(s), nil
	}
	r, err := p.characterEscape(false)
	if err != nil {
		return nil, err
	}
	return p.setNode(single(r)), nil
}

// classEscape parses \d \D \s \S \w \W \p{..} \P{..} after the backslash.
func (p *parser) classEscape() (charSet, bool, error) {
	word := wordChars
	if p.flags.unicode && p.flags.ignoreCase {
		word = wordCharsIU
	}
	var s charSet
	switch p.peek() {
	case 'd':
		s = digitChars
	case 'D':
		s = digitChars.negate()
	case 's':
		s = spaceChars
	case 'S':
		s = spaceChars.negate()
	case 'w':
		s = word
	case 'W':
		s = word.negate()
	case 'p', 'P':
		if !p.flags.unicode {
			return nil, false, nil
		}
		neg := p.peek() == 'P'
		p.pos++
		if !p.more() || p.peek() != '{' {
			return nil, false, p.errorf("Invalid property name")
		}
		end := p.pos + 1
		for end < len(p.src) && p.src[end] != '}' {
			end++
		}
		if end == len(p.src) {
			return nil, false, p.errorf("Invalid property name")
		}
		body := string(p.src[p.pos+1 : end])
		set, ok := propertySet(body)
		if !ok {
			return nil, false, p.errorf("Invalid or unsupported property name %q", body)
		}
		p.pos = end + 1
		if neg {
			set = set.negate()
		}
		return set, true, nil
	default:
		return nil, false, nil
	}
	p.pos++
	return s, true, nil
}

// characterEscape parses a CharacterEscape after the backslash (and, inClass,
// the escapes only classes have).
func (p *parser) characterEscape(inClass bool) (rune, error) {
	c := p.peek()
	p.pos++
	switch c {
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'v':
		return '\v', nil
	case 'b':
		if inClass {
			return '\b', nil
		}
	case '-':
		if inClass {
			return '-', nil
		}
	case 'c':
		if r, ok := p.peekAt(0); ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' ||
			inClass && !p.flags.unicode && (r >= '0' && r <= '9' || r == '_')) {
			p.pos++
			return r % 32, nil
		}
		if p.flags.unicode {
			return 0, p.errorf("Invalid unicode escape")
		}
		// Annex B: a backslash not followed by a control letter is itself.
		p.pos--
		return '\\', nil
	case '0':
		if r, ok := p.peekAt(0); !ok || r < '0' || r > '9' {
			return 0, nil
		}
		if p.flags.unicode {
			return 0, p.errorf("Invalid decimal escape")
		}
		p.pos--
		return p.legacyOctal(), nil
	case 'x':
		if v, ok := p.hex(2); ok {
			return v, nil
		}
		if p.flags.unicode {
			return 0, p.errorf("Invalid escape")
		}
		return 'x', nil
	case 'u':
		if r, ok, err := p.unicodeEscape(); ok || err != nil {
			return r, err
		}
		if p.flags.unicode {
			return 0, p.errorf("Invalid Unicode escape")
		}
		return 'u', nil
	}
	if p.flags.unicode {
		if strings.ContainsRune(`^$\.*+?()[]{}|/`, c) {
			return c, nil
		}
		return 0, p.errorf("Invalid escape")
	}
	if inClass && c >= '1' && c <= '9' {
		if c >= '8' {
			return c, nil
		}
		p.pos--
		return p.legacyOctal(), nil
	}
	if c == 'k' && p.named {
		return 0, p.errorf("Invalid escape")
	}
	return c, nil
}

// legacyOctal parses Annex B's LegacyOctalEscapeSequence at p.pos.
func (p *parser) legacyOctal() rune {
	v, n := rune(0), 0
	limit := 3
	if p.peek() > '3' {
		limit = 2
	}
	for n < limit && p.more() && p.peek() >= '0' && p.peek() <= '7' {
		v = v*8 + p.peek() - '0'
		p.pos++
		n++
	}
	return v
}

// hex parses exactly n hex digits.
func (p *parser) hex(n int) (rune, bool) {
	v := rune(0)
	for i := range n {
		r, ok := p.peekAt(i)
		if !ok {
			return 0, false
		}
		d := hexValue(r)
		if d < 0 {
			return 0, false
		}
		v = v*16 + d
	}
	p.pos += n
	return v, true
}

func hexValue(r rune) rune {
	switch {
	case r >= '0' && r <= '9':
		return r - '0'
	case r >= 'a' && r <= 'f':
		return r - 'a' + 10
	case r >= 'A' && r <= 'F':
		return r - 'A' + 10
	}
	return -1
}

// unicodeEscape parses what follows \u: four hex digits (a surrogate pair
// written as two escapes is one character) or, with the u flag, {hex}.
func (p *parser) unicodeEscape() (rune, bool, error) {
	if p.flags.unicode && p.more() && p.peek() == '{' {
		save := p.pos
		p.pos++
		v, digits := rune(0), 0
		for p.more() && hexValue(p.peek()) >= 0 {
			v = min(v*16+hexValue(p.peek()), unicode.MaxRune+1)
			digits++
			p.pos++
		}
		if digits == 0 || !p.more() || p.peek() != '}' || v > unicode.MaxRune {
			p.pos = save
			return 0, false, p.errorf("Invalid Unicode escape")
		}
		p.pos++
		return v, true, nil
	}
	v, ok := p.hex(4)
	if !ok {
		return 0, false, nil
	}
	if v >= 0xD800 && v <= 0xDBFF && p.lookingAt(`\u`) {
		save := p.pos
		p.pos += 2
		if lo, ok := p.hex(4); ok && lo >= 0xDC00 && lo <= 0xDFFF {
			return (v-0xD800)<<10 + (lo - 0xDC00) + 0x10000, true, nil
		}
		p.pos = save
	}
	return v, true, nil
}

// classAtom is one element of a character class: a character or a set.
type classAtom struct {
	set    charSet
	r      rune
	single bool
}

func (p *parser) class() (*node, error) {
	p.pos++ // [
	negated := false
	if p.more() && p.peek() == '^' {
		negated = true
		p.pos++
	}
	var rs []runeRange
	for {
		if !p.more() {
			return nil, p.errorf("Unterminated character class")
		}
		if p.peek() == ']' {
			p.pos++
			break
		}
		a, err := p.classAtom()
		if err != nil {
			return nil, err
		}
		if p.lookingAt("-") {
			if next, ok := p.peekAt(1); ok && next != ']' {
				p.pos++
				b, err := p.classAtom()
				if err != nil {
					return nil, err
				}
				if !a.single || !b.single {
					if p.flags.unicode {
						return nil, p.errorf("Invalid character class")
					}
					rs = append(append(append(rs, a.set...), runeRange{'-', '-'}), b.set...)
					continue
				}
				if a.r > b.r {
					return nil, p.errorf("Range out of order in character class")
				}
				rs = append(rs, runeRange{a.r, b.r})
				continue
			}
		}
		rs = append(rs, a.set...)
	}
	s := normalize(rs)
	if p.flags.ignoreCase {
		s = caseClose(s, p.flags.unicode)
	}
	if negated {
		s = s.negate()
	}
	return &node{op: opSet, set: s.minus(surrogates)}, nil
}

func (p *parser) classAtom() (classAtom, error) {
	c := p.peek()
	if c != '\\' {
		p.pos++
		return classAtom{set: single(c), r: c, single: true}, nil
	}
	p.pos++
	if !p.more() {
		return classAtom{}, p.errorf("\\ at end of pattern")
	}
	if s, ok, err := p.classEscape(); err != nil || ok {
		return classAtom{set: s}, err
	}
	if p.flags.unicode && p.peek() >= '1' && p.peek() <= '9' {
		return classAtom{}, p.errorf("Invalid class escape")
	}
	r, err := p.characterEscape(true)
	if err != nil {
		return classAtom{}, err
	}
	return classAtom{set: single(r), r: r, single: true}, nil
}
