package codereview

import (
	"strings"
)

// The static rules read code as tokens, not as text, so that a pattern in a
// comment or inside a string never fires and a string literal is known as
// one (with or without interpolation). The lexer is deliberately forgiving:
// it never fails, an unterminated string ends at the end of its line (or of
// the code for multi-line forms), and what it does not know is punctuation.

type kind uint8

const (
	kIdent  kind = iota // identifiers, keywords, $php / @ruby variables
	kString             // string literals of every form
	kNumber
	kPunct
	kRegex // regular expression literals (JavaScript, Ruby)
)

type token struct {
	kind kind
	text string // source text
	// Strings: body is the content between the delimiters; interp is set
	// when the literal interpolates expressions (f"{x}", `${x}`, "#{x}",
	// "$x"); shell is set for command literals (`...`, %x(...)).
	body   string
	interp bool
	shell  bool
	line   int // 1-based line of the first character
	end    int // line of the last character
}

func (t token) is(kind kind, text string) bool { return t.kind == kind && t.text == text }

// punct2 are the two-character operators the rules care about.
var punct2 = []string{"+=", ".=", "->", "::", "=>", "==", "!=", "<=", ">=", "&&", "||", "**", ":=", "<<", "?."}

type lexer struct {
	lang string
	src  string
	i    int
	line int
	toks []token
	// Ruby heredoc bodies already consumed: the lexer jumps over
	// [skipFrom, skipTo) when it reaches skipFrom.
	skipFrom, skipTo, skipLines int
}

// lex splits src into tokens for lang, dropping comments and whitespace.
func lex(lang, src string) []token {
	lx := &lexer{lang: lang, src: src, line: 1, skipFrom: -1}
	lx.run()
	return lx.toks
}

func (lx *lexer) peek(off int) byte {
	if lx.i+off < len(lx.src) {
		return lx.src[lx.i+off]
	}
	return 0
}

func (lx *lexer) has(s string) bool { return strings.HasPrefix(lx.src[lx.i:], s) }

// advance moves to position j, counting newlines.
func (lx *lexer) advance(j int) {
	if j > len(lx.src) {
		j = len(lx.src)
	}
	lx.line += strings.Count(lx.src[lx.i:j], "\n")
	lx.i = j
}

func (lx *lexer) emit(k kind, start, startLine int) *token {
	lx.toks = append(lx.toks, token{kind: k, text: lx.src[start:lx.i], line: startLine, end: lx.line})
	return &lx.toks[len(lx.toks)-1]
}

func (lx *lexer) prev() *token {
	if len(lx.toks) == 0 {
		return nil
	}
	return &lx.toks[len(lx.toks)-1]
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isIdentPart(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

func (lx *lexer) run() {
	for lx.i < len(lx.src) {
		if lx.i == lx.skipFrom {
			lx.i = lx.skipTo
			lx.line += lx.skipLines
			lx.skipFrom = -1
			continue
		}
		c := lx.src[lx.i]
		switch {
		case c == '\n':
			lx.line++
			lx.i++
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			lx.i++
		case lx.comment():
		case lx.str():
		case c >= '0' && c <= '9':
			start, line := lx.i, lx.line
			for lx.i < len(lx.src) && (isIdentPart(lx.src[lx.i]) || lx.src[lx.i] == '.' && lx.peek(1) >= '0' && lx.peek(1) <= '9') {
				lx.i++
			}
			lx.emit(kNumber, start, line)
		case isIdentStart(c) || c == '$' && lx.varSigil() || c == '@' && lx.lang == langRuby:
			start, line := lx.i, lx.line
			lx.i++
			for lx.i < len(lx.src) && (isIdentPart(lx.src[lx.i]) || lx.src[lx.i] == '$' && lx.lang == langJavaScript || lx.src[lx.i] == '@' && lx.i == start+1) {
				lx.i++
			}
			if lx.lang == langRuby && lx.i < len(lx.src) && (lx.src[lx.i] == '?' || lx.src[lx.i] == '!') && lx.peek(1) != '=' {
				lx.i++
			}
			lx.emit(kIdent, start, line)
		default:
			start, line := lx.i, lx.line
			n := 1
			for _, p := range punct2 {
				if lx.has(p) {
					n = 2
					break
				}
			}
			lx.i += n
			lx.emit(kPunct, start, line)
		}
	}
}

// varSigil reports whether '$' at the cursor starts a variable or an
// identifier ($x in PHP, Ruby globals, JavaScript's $ identifiers).
func (lx *lexer) varSigil() bool {
	switch lx.lang {
	case langPHP, langRuby, langJavaScript, langTypeScript:
		return isIdentStart(lx.peek(1)) || lx.lang != langPHP && lx.lang != langRuby
	}
	return false
}

// comment skips a comment at the cursor and reports whether there was one.
func (lx *lexer) comment() bool {
	hash := func() bool {
		if lx.src[lx.i] != '#' {
			return false
		}
		if lx.lang == langPHP && lx.peek(1) == '[' {
			return false // PHP 8 attribute
		}
		lx.toEOL()
		return true
	}
	slash := func() bool {
		switch {
		case lx.has("//"):
			lx.toEOL()
			return true
		case lx.has("/*"):
			end := strings.Index(lx.src[lx.i+2:], "*/")
			if end < 0 {
				lx.advance(len(lx.src))
			} else {
				lx.advance(lx.i + 2 + end + 2)
			}
			return true
		}
		return false
	}
	switch lx.lang {
	case langPython, langShell:
		return hash()
	case langRuby:
		if lx.has("=begin") && (lx.i == 0 || lx.src[lx.i-1] == '\n') {
			end := strings.Index(lx.src[lx.i:], "\n=end")
			if end < 0 {
				lx.advance(len(lx.src))
			} else {
				lx.advance(lx.i + end + 5)
				lx.toEOL()
			}
			return true
		}
		return hash()
	case langPHP:
		return slash() || hash()
	default:
		return slash()
	}
}

func (lx *lexer) toEOL() {
	end := strings.IndexByte(lx.src[lx.i:], '\n')
	if end < 0 {
		lx.i = len(lx.src)
		return
	}
	lx.i += end
}

// str lexes a string, command or regex literal at the cursor.
func (lx *lexer) str() bool {
	switch lx.lang {
	case langPython:
		return lx.pythonString()
	case langJavaScript, langTypeScript:
		switch lx.src[lx.i] {
		case '\'', '"':
			lx.quoted(lx.src[lx.i], true, false, "")
			return true
		case '`':
			lx.template()
			return true
		case '/':
			if lx.regexAllowed() {
				lx.regex()
				return true
			}
		}
	case langGo:
		switch lx.src[lx.i] {
		case '"', '\'':
			lx.quoted(lx.src[lx.i], true, false, "")
			return true
		case '`':
			lx.raw('`')
			return true
		}
	case langJava:
		if lx.has(`"""`) {
			lx.triple(`"""`, true, "")
			return true
		}
		switch lx.src[lx.i] {
		case '"', '\'':
			lx.quoted(lx.src[lx.i], true, false, "")
			return true
		}
	case langPHP:
		return lx.phpString()
	case langRuby:
		return lx.rubyString()
	case langShell:
		switch lx.src[lx.i] {
		case '\'':
			lx.raw('\'')
			lx.prev().interp = false
			return true
		case '"':
			lx.quoted('"', true, true, "$")
			return true
		case '`':
			lx.quoted('`', true, true, "$")
			lx.prev().shell = true
			return true
		}
	default:
		switch lx.src[lx.i] {
		case '"', '\'':
			lx.quoted(lx.src[lx.i], true, false, "")
			return true
		}
	}
	return false
}

// quoted lexes a string delimited by q on both sides. With multiline false
// an unescaped newline ends it. interpMarks are the substrings that mark
// interpolation in its body.
func (lx *lexer) quoted(q byte, escapes, multiline bool, interpMarks string) *token {
	start, line := lx.i, lx.line
	j := lx.i + 1
	for j < len(lx.src) {
		c := lx.src[j]
		if escapes && c == '\\' {
			j += 2
			continue
		}
		if c == q {
			j++
			break
		}
		if c == '\n' && !multiline && q != '`' {
			break
		}
		j++
	}
	lx.advance(j)
	t := lx.emit(kString, start, line)
	t.body = strings.TrimSuffix(t.text[1:], string(q))
	t.interp = hasInterp(lx.lang, t.body, interpMarks)
	return t
}

// raw lexes a string without escapes, delimited by q.
func (lx *lexer) raw(q byte) {
	start, line := lx.i, lx.line
	end := strings.IndexByte(lx.src[lx.i+1:], q)
	if end < 0 {
		lx.advance(len(lx.src))
	} else {
		lx.advance(lx.i + 1 + end + 1)
	}
	t := lx.emit(kString, start, line)
	t.body = strings.TrimSuffix(t.text[1:], string(q))
}

// triple lexes a string delimited by delim (""" or ”').
func (lx *lexer) triple(delim string, escapes bool, interpMarks string) *token {
	start, line := lx.i, lx.line
	j := lx.i + len(delim)
	for j < len(lx.src) {
		if escapes && lx.src[j] == '\\' {
			j += 2
			continue
		}
		if strings.HasPrefix(lx.src[j:], delim) {
			j += len(delim)
			break
		}
		j++
	}
	lx.advance(j)
	t := lx.emit(kString, start, line)
	body := t.text[len(delim):]
	t.body = strings.TrimSuffix(body, delim)
	t.interp = hasInterp(lx.lang, t.body, interpMarks)
	return t
}

// hasInterp reports whether body interpolates an expression.
func hasInterp(lang, body, marks string) bool {
	switch marks {
	case "":
		return false
	case "{": // Python f-strings: {expr}, but {{ is a literal brace
		return strings.Contains(strings.ReplaceAll(body, "{{", ""), "{")
	case "#{":
		return strings.Contains(body, "#{")
	case "$": // PHP "$x", "{$x}"; shell "$x", "${x}", "$(cmd)"
		for i := 0; i+1 < len(body); i++ {
			if body[i] == '\\' {
				i++
				continue
			}
			if body[i] == '$' {
				n := body[i+1]
				if isIdentStart(n) || n == '{' || n == '(' || lang == langShell && (n >= '0' && n <= '9' || n == '@' || n == '*') {
					return true
				}
			}
		}
		return false
	}
	return strings.Contains(body, marks)
}

func (lx *lexer) pythonString() bool {
	j := lx.i
	for j < len(lx.src) && j-lx.i < 3 && strings.IndexByte("rRbBuUfF", lx.src[j]) >= 0 {
		j++
	}
	if j >= len(lx.src) || lx.src[j] != '\'' && lx.src[j] != '"' {
		return false
	}
	if j > lx.i && lx.i > 0 && isIdentPart(lx.src[lx.i-1]) {
		return false
	}
	prefix := strings.ToLower(lx.src[lx.i:j])
	marks := ""
	if strings.Contains(prefix, "f") {
		marks = "{"
	}
	escapes := !strings.Contains(prefix, "r")
	start := lx.i
	lx.i = j // prefix letters contain no newline
	q := lx.src[j]
	var t *token
	if strings.HasPrefix(lx.src[j:], strings.Repeat(string(q), 3)) {
		t = lx.triple(strings.Repeat(string(q), 3), escapes, marks)
	} else {
		t = lx.quoted(q, escapes, false, marks)
	}
	t.text = lx.src[start:lx.i]
	return true
}

// template lexes a JavaScript template literal, nested ${...} included.
func (lx *lexer) template() {
	start, line := lx.i, lx.line
	j := lx.i + 1
	depth := 0
	interp := false
	for j < len(lx.src) {
		c := lx.src[j]
		switch {
		case c == '\\':
			j += 2
			continue
		case depth == 0 && c == '`':
			j++
			lx.advance(j)
			t := lx.emit(kString, start, line)
			t.body = strings.TrimSuffix(t.text[1:], "`")
			t.interp = interp
			return
		case c == '$' && j+1 < len(lx.src) && lx.src[j+1] == '{':
			depth++
			interp = true
			j += 2
			continue
		case depth > 0 && c == '{':
			depth++
		case depth > 0 && c == '}':
			depth--
		}
		j++
	}
	lx.advance(j)
	t := lx.emit(kString, start, line)
	t.body = t.text[1:]
	t.interp = interp
}

// regexAllowed reports whether '/' at the cursor starts a regex literal
// rather than a division, from the token before it.
func (lx *lexer) regexAllowed() bool {
	if lx.peek(1) == '/' || lx.peek(1) == '*' {
		return false
	}
	p := lx.prev()
	if p == nil {
		return true
	}
	switch p.kind {
	case kNumber, kString, kRegex:
		return false
	case kIdent:
		switch p.text {
		case "return", "typeof", "case", "do", "else", "in", "of", "new", "delete", "void", "throw", "instanceof", "yield", "await", "when", "if", "unless", "and", "or", "not":
			return true
		}
		return false
	}
	return p.text != ")" && p.text != "]" && p.text != "}"
}

func (lx *lexer) regex() {
	start, line := lx.i, lx.line
	j := lx.i + 1
	class := false
	for j < len(lx.src) && lx.src[j] != '\n' {
		c := lx.src[j]
		if c == '\\' {
			j += 2
			continue
		}
		if c == '[' {
			class = true
		} else if c == ']' {
			class = false
		} else if c == '/' && !class {
			j++
			break
		}
		j++
	}
	for j < len(lx.src) && isIdentPart(lx.src[j]) {
		j++
	}
	lx.advance(j)
	lx.emit(kRegex, start, line)
}

func (lx *lexer) phpString() bool {
	switch {
	case lx.src[lx.i] == '\'':
		lx.quoted('\'', true, true, "")
		return true
	case lx.src[lx.i] == '"':
		lx.quoted('"', true, true, "$")
		return true
	case lx.src[lx.i] == '`':
		lx.quoted('`', true, true, "$").shell = true
		return true
	case lx.has("<<<"):
		return lx.phpHeredoc()
	}
	return false
}

// phpHeredoc lexes <<<ID ... ID (heredoc, interpolating) and <<<'ID'
// (nowdoc).
func (lx *lexer) phpHeredoc() bool {
	rest := lx.src[lx.i+3:]
	nl := strings.IndexByte(rest, '\n')
	if nl < 0 {
		return false
	}
	label := strings.TrimSpace(rest[:nl])
	nowdoc := strings.HasPrefix(label, "'")
	label = strings.Trim(label, `'"`)
	if label == "" || !isIdentStart(label[0]) {
		return false
	}
	start, line := lx.i, lx.line
	bodyStart := lx.i + 3 + nl + 1
	end, after := heredocEnd(lx.src, bodyStart, label)
	lx.advance(after)
	t := lx.emit(kString, start, line)
	t.body = lx.src[bodyStart:end]
	if !nowdoc {
		t.interp = hasInterp(lx.lang, t.body, "$")
	}
	return true
}

// heredocEnd finds the line that closes a heredoc started at bodyStart: the
// label alone on a line, optionally indented. It returns where the body
// ends and where the closing label ends.
func heredocEnd(src string, bodyStart int, label string) (end, after int) {
	pos := bodyStart
	for pos <= len(src) {
		nl := strings.IndexByte(src[pos:], '\n')
		lineEnd := len(src)
		if nl >= 0 {
			lineEnd = pos + nl
		}
		trimmed := strings.TrimLeft(src[pos:lineEnd], " \t")
		if strings.HasPrefix(trimmed, label) {
			tail := trimmed[len(label):]
			if tail == "" || !isIdentPart(tail[0]) {
				return pos, lineEnd - len(tail)
			}
		}
		if nl < 0 {
			return len(src), len(src)
		}
		pos = lineEnd + 1
	}
	return len(src), len(src)
}

func (lx *lexer) rubyString() bool {
	c := lx.src[lx.i]
	switch {
	case c == '\'':
		lx.quoted('\'', true, true, "")
		return true
	case c == '"':
		lx.quoted('"', true, true, "#{")
		return true
	case c == '`':
		lx.quoted('`', true, true, "#{").shell = true
		return true
	case c == '%' && lx.rubyPercent():
		return true
	case c == '<' && lx.has("<<") && lx.rubyHeredoc():
		return true
	case c == '/' && lx.regexAllowed():
		lx.regex()
		return true
	}
	return false
}

var rubyPairs = map[byte]byte{'(': ')', '[': ']', '{': '}', '<': '>'}

// rubyPercent lexes %q(..), %Q(..), %(..), %w, %W, %i, %I, %x(..).
func (lx *lexer) rubyPercent() bool {
	kindCh := lx.peek(1)
	open := kindCh
	n := 1
	if strings.IndexByte("qQwWiIx", kindCh) >= 0 {
		open = lx.peek(2)
		n = 2
	} else {
		kindCh = 'Q'
	}
	closeCh, ok := rubyPairs[open]
	if !ok {
		if open != '|' && open != '!' && open != '/' {
			return false
		}
		closeCh = open
	}
	if p := lx.prev(); n == 1 && p != nil && (p.kind == kIdent || p.kind == kNumber || p.text == ")" || p.text == "]") {
		return false // modulo operator
	}
	start, line := lx.i, lx.line
	j := lx.i + n + 1
	depth := 1
	for j < len(lx.src) && depth > 0 {
		switch lx.src[j] {
		case '\\':
			j++
		case open:
			if open != closeCh {
				depth++
			}
		case closeCh:
			depth--
		}
		j++
	}
	lx.advance(j)
	t := lx.emit(kString, start, line)
	t.body = strings.TrimSuffix(t.text[n+1:], string(closeCh))
	if kindCh == 'Q' || kindCh == 'W' || kindCh == 'I' || kindCh == 'x' {
		t.interp = hasInterp(lx.lang, t.body, "#{")
	}
	t.shell = kindCh == 'x'
	return true
}

// rubyHeredoc lexes <<~ID, <<-ID, <<ID and their quoted forms. The body
// starts on the next line; the rest of this line is lexed as usual and the
// body is jumped over when reached.
func (lx *lexer) rubyHeredoc() bool {
	j := lx.i + 2
	if j < len(lx.src) && (lx.src[j] == '~' || lx.src[j] == '-') {
		j++
	}
	quote := byte(0)
	if j < len(lx.src) && (lx.src[j] == '\'' || lx.src[j] == '"' || lx.src[j] == '`') {
		quote = lx.src[j]
		j++
	}
	k := j
	for k < len(lx.src) && isIdentPart(lx.src[k]) {
		k++
	}
	label := lx.src[j:k]
	if label == "" || quote == 0 && (label[0] < 'A' || label[0] > 'Z') {
		return false
	}
	if quote != 0 {
		if k >= len(lx.src) || lx.src[k] != quote {
			return false
		}
		k++
	}
	nl := strings.IndexByte(lx.src[k:], '\n')
	if nl < 0 || lx.skipFrom >= 0 {
		return false
	}
	bodyStart := k + nl + 1
	end, after := heredocEnd(lx.src, bodyStart, label)
	start, line := lx.i, lx.line
	lx.i = k
	t := lx.emit(kString, start, line)
	t.body = lx.src[bodyStart:end]
	t.end = line + strings.Count(lx.src[k:after], "\n")
	if quote != '\'' {
		t.interp = hasInterp(lx.lang, t.body, "#{")
	}
	t.shell = quote == '`'
	lx.skipFrom, lx.skipTo = k+nl, after
	lx.skipLines = strings.Count(lx.src[k+nl:after], "\n")
	return true
}
