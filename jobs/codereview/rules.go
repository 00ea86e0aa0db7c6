package codereview

import (
	"regexp"
	"slices"
	"strings"
)

// Static rule names (the finding's rule field when source is "static").
const (
	RuleEval    = "code-eval"
	RuleSQL     = "sql-injection"
	RuleSecret  = "hardcoded-secret"
	RuleCommand = "command-injection"
)

// Severities, most severe first (contract.md).
const (
	SeverityCritical = "critical"
	SeverityHigh     = "high"
	SeverityMedium   = "medium"
	SeverityLow      = "low"
	SeverityInfo     = "info"
)

var severityRank = map[string]int{SeverityCritical: 0, SeverityHigh: 1, SeverityMedium: 2, SeverityLow: 3, SeverityInfo: 4}

// Finding is one problem in the reviewed code.
type Finding struct {
	// Line and EndLine are 1-based and inside the code.
	Line    int `json:"line"`
	EndLine int `json:"end_line"`
	// Severity is critical, high, medium, low or info.
	Severity string `json:"severity"`
	// Rule names the problem: a static rule name or the model's own.
	Rule string `json:"rule"`
	// Source is "static" (deterministic rules) or "ai" (the model).
	Source  string `json:"source"`
	Message string `json:"message"`
	// Fix says concretely what to change.
	Fix string `json:"fix"`
}

// analysis runs the static rules over one piece of code.
type analysis struct {
	lang     string
	toks     []token
	findings []Finding
	// sqlVars are variables assigned a SQL statement literal.
	sqlVars map[string]bool
	// sinkFindings are reported after the literal rules' findings, so
	// that the more specific message of a literal wins de-duplication.
	sinkFindings []Finding
}

// staticFindings runs the code rules for lang (eval, SQL, shell) and the
// secret rules for every language.
func staticFindings(code, lang string, secrets *secretScanner) []Finding {
	var out []Finding
	if slices.Contains(staticLanguages, lang) {
		a := &analysis{lang: lang, sqlVars: map[string]bool{}}
		if lang == langShell {
			a.shellRules(code)
		} else {
			a.toks = lex(lang, code)
			a.tokenRules()
			a.findings = append(a.findings, a.sinkFindings...)
		}
		out = a.findings
	}
	if secrets != nil {
		for _, s := range secrets.scan(code) {
			sev := SeverityHigh
			if strings.Contains(s.ruleID, "private-key") {
				sev = SeverityCritical
			}
			out = append(out, Finding{
				Line: s.line, EndLine: s.end, Severity: sev, Rule: RuleSecret, Source: "static",
				Message: "Hard-coded secret (" + s.description + "; gitleaks rule " + s.ruleID + "): anyone who can read the code or its history can use it.",
				Fix:     fixSecret(lang),
			})
		}
	}
	return out
}

func (a *analysis) add(rule, sev string, line, end int, msg, fix string) {
	if end < line {
		end = line
	}
	a.findings = append(a.findings, Finding{Line: line, EndLine: end, Severity: sev, Rule: rule, Source: "static", Message: msg, Fix: fix})
}

// --- token helpers -------------------------------------------------------

func (a *analysis) tok(i int) token {
	if i < 0 || i >= len(a.toks) {
		return token{kind: kPunct, text: ""}
	}
	return a.toks[i]
}

// closing returns the index of the bracket closing the one at i.
func (a *analysis) closing(i int) int {
	depth := 0
	for j := i; j < len(a.toks); j++ {
		t := a.toks[j]
		if t.kind != kPunct {
			continue
		}
		switch t.text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return len(a.toks) - 1
}

// args splits the call arguments between the '(' at open and its closing
// parenthesis into top-level comma-separated expressions.
func (a *analysis) args(open int) (args [][]token, closeIdx int) {
	closeIdx = a.closing(open)
	if closeIdx <= open {
		// An unclosed '(' as the last token.
		return nil, closeIdx
	}
	return splitTopLevel(a.toks[open+1:closeIdx], nil), closeIdx
}

// splitTopLevel splits toks into the comma-separated expressions at bracket
// depth zero. With stop, it ends before the first token for which stop,
// given the token and the depth before it, reports true.
func splitTopLevel(toks []token, stop func(t token, depth int) bool) [][]token {
	var args [][]token
	var cur []token
	depth := 0
	for _, t := range toks {
		if stop != nil && stop(t, depth) {
			break
		}
		if t.kind == kPunct {
			switch t.text {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				depth--
			case ",":
				if depth == 0 {
					args = append(args, cur)
					cur = nil
					continue
				}
			}
		}
		cur = append(cur, t)
	}
	if len(cur) > 0 {
		args = append(args, cur)
	}
	return args
}

// chain returns the dotted receiver chain ending at the identifier at i:
// for Runtime.getRuntime().exec it returns [Runtime getRuntime exec].
func (a *analysis) chain(i int) []string {
	parts := []string{a.toks[i].text}
	j := i
	for j >= 2 {
		sep := a.toks[j-1]
		if sep.kind != kPunct || (sep.text != "." && sep.text != "->" && sep.text != "::" && sep.text != "?.") {
			break
		}
		k := j - 2
		if a.toks[k].is(kPunct, ")") {
			// Skip back over a call's arguments.
			depth := 0
			for ; k >= 0; k-- {
				if a.toks[k].is(kPunct, ")") {
					depth++
				} else if a.toks[k].is(kPunct, "(") {
					depth--
					if depth == 0 {
						break
					}
				}
			}
			k--
		}
		if k < 0 || a.toks[k].kind != kIdent && a.toks[k].kind != kString {
			break
		}
		parts = append(parts, a.toks[k].text)
		j = k
	}
	slices.Reverse(parts)
	return parts
}

// member reports whether the identifier at i follows a member access (it is
// a method, not a free function).
func (a *analysis) member(i int) bool {
	p := a.tok(i - 1)
	return p.kind == kPunct && (p.text == "." || p.text == "->" || p.text == "::" || p.text == "?.")
}

func (a *analysis) concatOp(t token) bool {
	if t.kind != kPunct {
		return false
	}
	switch t.text {
	case "+", "+=":
		return true
	case ".", ".=":
		return a.lang == langPHP
	case "<<":
		return a.lang == langRuby
	}
	return false
}

// constant reports whether an expression is made of literals only.
func (a *analysis) constant(e []token) bool {
	if len(e) == 0 {
		return false
	}
	for _, t := range e {
		switch {
		case t.kind == kString && !t.interp && !t.shell, t.kind == kNumber:
		case t.kind == kPunct && (a.concatOp(t) || t.text == "(" || t.text == ")"):
		default:
			return false
		}
	}
	return true
}

var formatFuncs = map[string]bool{"Sprintf": true, "sprintf": true, "format": true, "Format": true, "formatted": true, "vsprintf": true}

// built reports whether an expression builds a string from parts that are
// not all literals: interpolation, concatenation with a non-literal,
// %-formatting, .format(), Sprintf and the like.
func (a *analysis) built(e []token) bool {
	if a.constant(e) {
		return false
	}
	for j, t := range e {
		switch {
		case t.kind == kString && t.interp:
			return true
		case a.concatOp(t):
			return true
		case t.kind == kString && j+1 < len(e) && e[j+1].is(kPunct, "%") && (a.lang == langPython || a.lang == langRuby):
			return true
		case t.kind == kIdent && formatFuncs[t.text] && j+1 < len(e) && e[j+1].is(kPunct, "("):
			return true
		case t.kind == kIdent && (t.text == "join" || t.text == "concat" || t.text == "replace") && j > 0 && e[j-1].is(kPunct, "."):
			return true
		}
	}
	return false
}

// inputNames are identifiers that usually carry a caller's input.
var inputNames = regexp.MustCompile(`(?i)^(\$_(GET|POST|REQUEST|COOKIE|SERVER|FILES)|request|req|params|query|body|form|args|argv|ARGV|input|user_?input|getParameter|getQueryString|getHeader|stdin|gets|cmd|command|code|expr|expression|payload|data)$`)

// fromInput reports whether e mentions a typical input source.
func fromInput(e []token) bool {
	for _, t := range e {
		if t.kind == kIdent && inputNames.MatchString(t.text) {
			return true
		}
		if t.kind == kString && t.interp && (strings.Contains(t.body, "params") || strings.Contains(t.body, "request") || strings.Contains(t.body, "$_")) {
			return true
		}
	}
	return false
}

// lineSpan returns the first and last lines of e.
func lineSpan(e []token) (int, int) {
	if len(e) == 0 {
		return 0, 0
	}
	first, last := e[0].line, e[0].end
	for _, t := range e {
		first = min(first, t.line)
		last = max(last, t.end)
	}
	return first, last
}

// --- the token rules -----------------------------------------------------

func (a *analysis) tokenRules() {
	for i := 0; i < len(a.toks); i++ {
		t := a.toks[i]
		switch t.kind {
		case kString:
			if t.shell && t.interp {
				a.add(RuleCommand, SeverityCritical, t.line, t.end,
					"Shell command literal interpolates a value: the shell parses it, so input containing ; | $( ) or quotes runs further commands.",
					fixShell(a.lang))
			}
			a.sqlLiteral(i)
		case kIdent:
			a.sqlAppend(i)
			if a.tok(i+1).is(kPunct, "(") {
				args, _ := a.args(i + 1)
				a.call(i, args)
			} else if a.lang == langRuby {
				if args, ok := a.rubyBareArgs(i); ok {
					a.call(i, args)
				}
			}
		}
	}
}

// rubyBareArgs returns the arguments of a Ruby call written without
// parentheses (system "ls #{dir}"), up to the end of the line.
func (a *analysis) rubyBareArgs(i int) ([][]token, bool) {
	switch a.toks[i].text {
	case "eval", "system", "exec", "spawn", "instance_eval", "class_eval", "module_eval", "popen", "capture2", "capture2e", "capture3", "popen3", "popen2", "popen2e":
	default:
		return nil, false
	}
	n := a.tok(i + 1)
	if n.line != a.toks[i].line || n.kind == kPunct && n.text != "[" && n.text != ":" || n.kind == kIdent && (n.text == "do" || n.text == "if" || n.text == "unless") {
		return nil, false
	}
	end := i + 1
	for end < len(a.toks) && a.toks[end].line == a.toks[i].line {
		end++
	}
	args := splitTopLevel(a.toks[i+1:end], func(t token, depth int) bool {
		return t.kind == kIdent && depth == 0 && (t.text == "do" || t.text == "if" || t.text == "unless")
	})
	return args, len(args) > 0
}

// call applies the call-shaped rules to the call of the identifier at i.
func (a *analysis) call(i int, args [][]token) {
	name := a.toks[i].text
	chain := a.chain(i)
	recv := ""
	if len(chain) > 1 {
		recv = chain[len(chain)-2]
	}
	member := a.member(i)
	line := a.toks[i].line
	var arg0 []token
	if len(args) > 0 {
		arg0 = args[0]
	}
	_, end := lineSpan(slices.Concat(args...))
	end = max(end, line)

	switch a.lang {
	case langPython:
		switch {
		case !member && (name == "eval" || name == "exec"):
			a.evalFinding(line, end, name+"()", arg0)
		case recv == "os" && (name == "system" || strings.HasPrefix(name, "popen")),
			(recv == "subprocess" || recv == "commands") && (name == "getoutput" || name == "getstatusoutput"),
			name == "create_subprocess_shell":
			a.shellFinding(line, end, recv+"."+name+"()", arg0)
		case recv == "subprocess" && (name == "run" || name == "call" || name == "check_call" || name == "check_output" || name == "Popen"):
			if kwargTrue(args, "shell") {
				a.shellFinding(line, end, "subprocess."+name+"(..., shell=True)", arg0)
			} else if shellDashC(arg0, a) {
				a.shellFinding(line, end, "subprocess."+name+"() running a shell with -c", arg0)
			}
		}
	case langJavaScript, langTypeScript:
		cpRecv := !member || recv == "child_process" || recv == "childProcess" || recv == "cp" || recv == "shell" || recv == "proc" || slices.Contains(chain, "require")
		switch {
		case name == "eval" && (!member || recv == "window" || recv == "globalThis"):
			a.evalFinding(line, end, "eval()", arg0)
		case name == "Function" && (!member || recv == "window" || recv == "globalThis"):
			if len(args) > 0 {
				a.evalFinding(line, end, "new Function()", args[len(args)-1])
			}
		case !member && (name == "setTimeout" || name == "setInterval" || name == "setImmediate"):
			if len(arg0) > 0 && arg0[0].kind == kString {
				a.evalFinding(line, end, name+"() with a string", arg0)
			}
		case recv == "vm" && (strings.HasPrefix(name, "runIn") || name == "Script" || name == "compileFunction"):
			a.evalFinding(line, end, "vm."+name+"()", arg0)
		case (name == "exec" || name == "execSync") && cpRecv:
			a.shellFinding(line, end, "child_process."+name+"()", arg0)
		case name == "spawn" || name == "spawnSync" || name == "execFile" || name == "execFileSync":
			if hasShellTrue(args) {
				a.shellFinding(line, end, name+"() with shell: true", slices.Concat(args...))
			} else if shellDashC(slices.Concat(args...), a) {
				a.shellFinding(line, end, name+"() running a shell with -c", slices.Concat(args...))
			}
		}
	case langGo:
		switch {
		case recv == "exec" && (name == "Command" || name == "CommandContext"):
			rest := args
			if name == "CommandContext" && len(rest) > 0 {
				rest = rest[1:]
			}
			if shellDashC(slices.Concat(rest...), a) {
				a.shellFinding(line, end, "exec."+name+" running a shell with -c", slices.Concat(rest...))
			}
		case member && name == "Eval":
			a.evalFinding(line, end, recv+".Eval()", arg0)
		}
	case langPHP:
		switch {
		case !member && (name == "eval" || name == "create_function"):
			a.evalFinding(line, end, name+"()", slices.Concat(args...))
		case !member && name == "assert" && len(arg0) > 0 && arg0[0].kind == kString:
			a.evalFinding(line, end, "assert() with a string", arg0)
		case !member && name == "preg_replace" && len(arg0) == 1 && arg0[0].kind == kString && pregEval(arg0[0].body):
			a.evalFinding(line, end, "preg_replace() with the /e modifier", args[min(1, len(args)-1)])
		case !member && (name == "system" || name == "exec" || name == "shell_exec" || name == "passthru" || name == "popen" || name == "proc_open" || name == "pcntl_exec"):
			if !phpEscaped(arg0) {
				a.shellFinding(line, end, name+"()", arg0)
			}
		}
	case langJava:
		switch {
		case name == "exec" && (slices.Contains(chain, "getRuntime") || recv == "runtime" || recv == "rt" || recv == "Runtime"):
			if len(arg0) > 0 && arg0[0].is(kIdent, "new") {
				if shellDashC(arg0, a) {
					a.shellFinding(line, end, "Runtime.exec() running a shell with -c", arg0)
				}
			} else {
				a.shellFinding(line, end, "Runtime.exec()", arg0)
			}
		case name == "ProcessBuilder" || name == "command" && member && strings.Contains(strings.ToLower(recv), "builder"):
			if shellDashC(slices.Concat(args...), a) {
				a.shellFinding(line, end, "ProcessBuilder running a shell with -c", slices.Concat(args...))
			}
		case member && (name == "eval" || name == "evaluate") && scriptReceiver(chain):
			a.evalFinding(line, end, recv+"."+name+"()", arg0)
		case name == "parseExpression" && member:
			a.evalFinding(line, end, "SpEL parseExpression()", arg0)
		}
	case langRuby:
		switch {
		case !member && name == "eval" || recv == "binding" && name == "eval" || recv == "Kernel" && name == "eval":
			a.evalFinding(line, end, "eval", arg0)
		case name == "instance_eval" || name == "class_eval" || name == "module_eval":
			if len(arg0) > 0 {
				a.evalFinding(line, end, name+" with a string", arg0)
			}
		case (!member || recv == "Kernel" || recv == "Process") && (name == "system" || name == "exec" || name == "spawn"),
			recv == "IO" && name == "popen",
			recv == "Open3" && strings.HasPrefix(name, "capture") || recv == "Open3" && strings.HasPrefix(name, "popen"),
			recv == "PTY" && name == "spawn":
			cmdArgs := args
			if len(cmdArgs) > 1 && len(cmdArgs[0]) > 0 && cmdArgs[0][0].is(kPunct, "{") {
				cmdArgs = cmdArgs[1:] // environment hash first
			}
			if len(cmdArgs) == 0 || len(cmdArgs[0]) == 0 {
				break
			}
			if cmdArgs[0][0].is(kPunct, "[") {
				// The array form runs the program without a shell.
				if shellDashC(cmdArgs[0], a) {
					a.shellFinding(line, end, name+" running a shell with -c", cmdArgs[0])
				}
			} else if len(cmdArgs) == 1 || len(cmdArgs) == 2 && isRubyOptions(cmdArgs[1]) {
				a.shellFinding(line, end, name, cmdArgs[0])
			}
		}
	}
	a.sqlSink(i, name, member, chain, args)
}

func scriptReceiver(chain []string) bool {
	joined := strings.ToLower(strings.Join(chain[:len(chain)-1], "."))
	for _, w := range []string{"engine", "script", "shell", "nashorn", "groovy", "js", "interpreter"} {
		if strings.Contains(joined, w) {
			return true
		}
	}
	return false
}

func isRubyOptions(e []token) bool {
	// chdir: "/tmp", exception: true, ... (a trailing options hash)
	return len(e) >= 2 && e[0].kind == kIdent && e[1].is(kPunct, ":") || len(e) > 0 && e[0].is(kPunct, "{")
}

// kwargTrue reports whether a Python call has name=True.
func kwargTrue(args [][]token, name string) bool {
	for _, e := range args {
		if len(e) == 3 && e[0].is(kIdent, name) && e[1].is(kPunct, "=") && e[2].is(kIdent, "True") {
			return true
		}
	}
	return false
}

// hasShellTrue reports whether a Node options object sets shell: true.
func hasShellTrue(args [][]token) bool {
	for _, e := range args {
		for j := 0; j+2 < len(e); j++ {
			if (e[j].is(kIdent, "shell") || e[j].kind == kString && e[j].body == "shell") && e[j+1].is(kPunct, ":") && !e[j+2].is(kIdent, "false") {
				return true
			}
		}
	}
	return false
}

var shellNames = map[string]bool{"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "/bin/sh": true, "/bin/bash": true, "/usr/bin/bash": true, "/bin/zsh": true, "/usr/bin/env": true, "cmd": true, "cmd.exe": true, "powershell": true, "powershell.exe": true, "pwsh": true}

// shellDashC reports whether e runs a shell with -c (or cmd /c) on a string
// that is not a literal.
func shellDashC(e []token, a *analysis) bool {
	sawShell, sawC := false, false
	for j, t := range e {
		switch {
		case t.kind == kString && !sawShell && shellNames[t.body]:
			sawShell = true
		case t.kind == kString && sawShell && !sawC && (t.body == "-c" || t.body == "/c" || t.body == "/C" || t.body == "-Command" || t.body == "-lc"):
			sawC = true
		case sawC && t.is(kPunct, ","):
		case sawC:
			// The command string: what follows -c up to the next comma.
			var cmd []token
			for k := j; k < len(e) && !e[k].is(kPunct, ","); k++ {
				cmd = append(cmd, e[k])
			}
			for len(cmd) > 0 && (cmd[len(cmd)-1].is(kPunct, ")") || cmd[len(cmd)-1].is(kPunct, "]") || cmd[len(cmd)-1].is(kPunct, "}")) {
				cmd = cmd[:len(cmd)-1]
			}
			return len(cmd) > 0 && !a.constant(cmd)
		}
	}
	return false
}

// phpEscaped reports whether every variable in e is passed through
// escapeshellarg or escapeshellcmd.
func phpEscaped(e []token) bool {
	if len(e) == 0 {
		return false
	}
	vars := 0
	for j := 0; j < len(e); j++ {
		t := e[j]
		if t.kind == kIdent && (t.text == "escapeshellarg" || t.text == "escapeshellcmd") && j+1 < len(e) && e[j+1].is(kPunct, "(") {
			depth := 0
			for j++; j < len(e); j++ {
				if e[j].is(kPunct, "(") {
					depth++
				} else if e[j].is(kPunct, ")") {
					depth--
					if depth == 0 {
						break
					}
				}
			}
			continue
		}
		if t.kind == kIdent && strings.HasPrefix(t.text, "$") || t.kind == kString && t.interp {
			vars++
		}
		if t.kind == kIdent && !strings.HasPrefix(t.text, "$") && j+1 < len(e) && e[j+1].is(kPunct, "(") {
			vars++ // another function's result
		}
	}
	return vars == 0
}

// pregEval reports whether a preg_replace pattern literal ends with
// modifiers that include e.
func pregEval(pattern string) bool {
	if len(pattern) < 2 {
		return false
	}
	delim := pattern[0]
	if c, ok := map[byte]byte{'(': ')', '{': '}', '[': ']', '<': '>'}[delim]; ok {
		delim = c
	}
	end := strings.LastIndexByte(pattern, delim)
	return end > 0 && strings.Contains(pattern[end+1:], "e")
}

// evalFinding reports code evaluation of arg (a constant string is low).
func (a *analysis) evalFinding(line, end int, what string, arg []token) {
	if len(arg) == 0 {
		return
	}
	if arg[0].is(kIdent, "function") || arg[0].is(kPunct, "&") && a.lang == langRuby || arg[0].is(kPunct, "(") && slices.ContainsFunc(arg, func(t token) bool { return t.is(kPunct, "=>") }) {
		return // a function, not a string
	}
	switch {
	case a.constant(arg):
		a.add(RuleEval, SeverityLow, line, end,
			what+" evaluates a constant string as code. It is not injectable today, but it hides code from review and tools and invites later concatenation.",
			fixEval(a.lang))
	case a.built(arg) || fromInput(arg):
		a.add(RuleEval, SeverityCritical, line, end,
			what+" evaluates a string built from variable data as code: whoever controls that data runs arbitrary code in this process.",
			fixEval(a.lang))
	default:
		a.add(RuleEval, SeverityHigh, line, end,
			what+" evaluates a variable as code: if its value can come from outside, that is arbitrary code execution.",
			fixEval(a.lang))
	}
}

// shellFinding reports a shell command built from non-literal data.
func (a *analysis) shellFinding(line, end int, what string, cmd []token) {
	if len(cmd) == 0 || a.constant(cmd) {
		return
	}
	sev := SeverityHigh
	if a.built(cmd) || fromInput(cmd) {
		sev = SeverityCritical
	}
	a.add(RuleCommand, sev, line, end,
		what+" passes a command string built from variable data to a shell: input containing ; | & $( ) or quotes runs further commands.",
		fixShell(a.lang))
}

// --- SQL -----------------------------------------------------------------

// sqlStatement matches a literal that starts a SQL statement.
var sqlStatement = regexp.MustCompile("(?is)^\\s*\\(?\\s*(select\\s+(\\*|distinct|count|top|[\\w.\"`\\[\\]]+(\\s+as\\s+\\w+)?\\s*(,|\\s+from\\b))|insert\\s+(ignore\\s+)?into\\s|update\\s+[\\w.\"`\\[\\]]+\\s+set\\s|delete\\s+from\\s|replace\\s+into\\s|merge\\s+into\\s|(create|drop|alter|truncate)\\s+(table|database|index|view|schema)\\b|with\\s+\\w+\\s+as\\s*\\()")

// sqlFragment matches the parts of SQL that a query built in pieces has.
var sqlFragment = regexp.MustCompile("(?is)\\b(select|insert|update|delete|where|and|or|order\\s+by|group\\s+by|having|limit|offset|values|set|from|join|like|in)\\b|[\\w\\]\\)`\"]\\s*(=|<>|!=|<=|>=|<|>)\\s*['\"(]?\\s*($|#\\{|\\$\\{|\\{|%|\\$)")

// sqlLiteral flags the SQL statement literal at i when it is combined with
// data: interpolated, concatenated, %-formatted, .format()ed or passed to a
// Sprintf-like function with arguments.
func (a *analysis) sqlLiteral(i int) {
	t := a.toks[i]
	if t.shell || !sqlStatement.MatchString(t.body) {
		return
	}
	// Remember `q = "SELECT ..."` so that `q += input` is caught.
	if v, ok := a.assignedTo(i); ok {
		a.sqlVars[v] = true
	}
	next, prev := a.tok(i+1), a.tok(i-1)
	how := ""
	switch {
	case t.interp:
		how = "string interpolation"
	case next.is(kPunct, "%") && (a.lang == langPython || a.lang == langRuby):
		how = "%-formatting"
	case next.is(kPunct, ".") && a.tok(i+2).is(kIdent, "format") && a.lang == langPython:
		how = "str.format()"
	case a.concatOp(next) && !a.literalAt(i+2):
		how = "concatenation"
	case a.concatOp(prev) && !a.literalBefore(i-2):
		how = "concatenation"
	case prev.is(kPunct, "(") && a.tok(i-2).kind == kIdent && formatFuncs[a.tok(i-2).text] && next.is(kPunct, ",") && hasVerb(t.body):
		how = a.tok(i-2).text + "()"
	case next.is(kPunct, "+") && a.lang != langPHP:
		// "..." + "..." + x: look further along the chain.
		j := i + 1
		for a.concatOp(a.tok(j)) && a.literalAt(j+1) {
			j += 2
		}
		if a.concatOp(a.tok(j)) {
			how = "concatenation"
		}
	}
	if how == "" {
		return
	}
	end := t.end
	for j := i + 1; j < len(a.toks) && j < i+40; j++ {
		n := a.toks[j]
		if n.is(kPunct, ";") || n.is(kPunct, ")") && n.line > t.end || n.line > end+1 {
			break
		}
		if a.concatOp(n) || n.kind == kString {
			end = max(end, n.end)
		}
	}
	a.add(RuleSQL, SeverityHigh, t.line, end,
		"SQL statement built by "+how+": a value containing a quote changes the query (SQL injection).",
		fixSQL(a.lang))
}

// sqlAppend flags q += input (q .= input, q << input) on a variable that
// holds a SQL statement.
func (a *analysis) sqlAppend(i int) {
	v := a.toks[i].text
	if !a.sqlVars[v] || a.member(i) {
		return
	}
	op := a.tok(i + 1)
	var rhs []token
	switch {
	case a.concatOp(op) && (op.text == "+=" || op.text == ".=" || op.text == "<<"):
		rhs = a.statement(i + 2)
	case op.is(kPunct, "=") && a.tok(i+2).is(kIdent, v) && a.concatOp(a.tok(i+3)):
		rhs = a.statement(i + 4)
	default:
		return
	}
	if len(rhs) == 0 || a.constant(rhs) {
		return
	}
	_, end := lineSpan(rhs)
	a.add(RuleSQL, SeverityHigh, a.toks[i].line, max(end, a.toks[i].line),
		"SQL statement extended with variable data by concatenation: a value containing a quote changes the query (SQL injection).",
		fixSQL(a.lang))
}

// statement returns the tokens from i to the end of the statement: a ';'
// or the end of the line outside brackets.
func (a *analysis) statement(i int) []token {
	if i >= len(a.toks) {
		return nil
	}
	var out []token
	depth := 0
	line := a.toks[i].line
	for j := i; j < len(a.toks); j++ {
		t := a.toks[j]
		if depth == 0 && (t.is(kPunct, ";") || t.line > line && !a.concatOp(out[len(out)-1])) {
			break
		}
		if t.kind == kPunct {
			switch t.text {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				depth--
				if depth < 0 {
					return out
				}
			}
		}
		out = append(out, t)
		line = t.end
	}
	return out
}

// assignedTo returns the variable that the expression starting at the
// literal at i is assigned to.
func (a *analysis) assignedTo(i int) (string, bool) {
	p := a.tok(i - 1)
	if p.is(kPunct, "(") && a.tok(i-2).is(kPunct, "=") {
		i--
		p = a.tok(i - 1)
	}
	if (p.is(kPunct, "=") || p.is(kPunct, ":=")) && a.tok(i-2).kind == kIdent {
		return a.tok(i - 2).text, true
	}
	return "", false
}

func (a *analysis) literalAt(j int) bool {
	t := a.tok(j)
	return t.kind == kString && !t.interp || t.kind == kNumber
}

func (a *analysis) literalBefore(j int) bool { return a.literalAt(j) }

var formatVerb = regexp.MustCompile(`%[-+# 0-9.]*[svdqxXfgeEtTbc]|\{\d*\}`)

func hasVerb(s string) bool { return formatVerb.MatchString(s) }

// sqlSinks are the calls that take SQL text as their first argument.
var sqlSinks = map[string]bool{
	"execute": true, "executemany": true, "executescript": true, "query": true, "raw": true, "exec": true,
	"find_by_sql": true, "where": true, "order": true, "select_all": true, "select_one": true, "select_value": true, "select_rows": true,
	"createQuery": true, "createNativeQuery": true, "createSQLQuery": true, "executeQuery": true, "executeUpdate": true, "executeLargeUpdate": true,
	"addBatch": true, "prepareStatement": true, "prepare": true, "rawQuery": true, "execSQL": true,
	"Query": true, "QueryRow": true, "QueryContext": true, "QueryRowContext": true, "Exec": true, "ExecContext": true, "Prepare": true, "PrepareContext": true, "Raw": true, "Where": true,
	"mysqli_query": true, "mysql_query": true, "pg_query": true, "sqlite_query": true, "get_results": true, "get_row": true, "get_var": true, "get_col": true,
	"unprepared": true, "selectRaw": true, "whereRaw": true, "orderByRaw": true, "havingRaw": true, "statement": true, "select": true,
	"queryForObject": true, "queryForList": true, "update": true, "batchUpdate": true,
}

// sqlSink flags a query call whose SQL text is built from data and reads as
// SQL, even when it is not a whole statement (where("name = '#{n}'")).
func (a *analysis) sqlSink(i int, name string, member bool, chain []string, args [][]token) {
	if !sqlSinks[name] || len(args) == 0 {
		return
	}
	// Free functions named like a sink only count in PHP (mysqli_query);
	// elsewhere a query is a method of a connection, cursor or model.
	if !member && a.lang != langPHP {
		return
	}
	if a.lang == langJavaScript && name == "exec" && (len(chain) == 1 || chain[0] == "child_process") {
		return
	}
	arg := args[0]
	if a.lang == langPHP && !member && len(args) > 1 {
		arg = args[1] // mysqli_query($link, $sql)
	}
	if !a.built(arg) {
		return
	}
	if !slices.ContainsFunc(arg, func(t token) bool {
		return t.kind == kString && (sqlFragment.MatchString(t.body) || sqlStatement.MatchString(t.body))
	}) {
		return
	}
	line, end := lineSpan(arg)
	a.sinkFindings = append(a.sinkFindings, Finding{
		Line: line, EndLine: max(end, line), Severity: SeverityHigh, Rule: RuleSQL, Source: "static",
		Message: "Query text passed to " + name + "() is built from variable data: a value containing a quote changes the query (SQL injection).",
		Fix:     fixSQL(a.lang),
	})
}

// --- shell scripts -------------------------------------------------------

var (
	shEval              = regexp.MustCompile(`(?:^|[;&|({]\s*|\bthen\s+|\bdo\s+|\belse\s+)eval\s+(.*)`)
	shDashC             = regexp.MustCompile(`\b(?:sh|bash|zsh|dash|ksh|su(?:\s+\S+)?)\s+(?:-[a-zA-Z]+\s+)*-[a-z]*c\s+(.+)`)
	shSSH               = regexp.MustCompile(`\bssh\s+(?:-\S+\s+)*[\w@.$\-{}"]+\s+(".*")`)
	shArgs              = regexp.MustCompile(`\$(?:[0-9@*]|\{[0-9@*])`)
	trustedSubstitution = regexp.MustCompile(`^"?\$\([^$` + "`" + `()]*\)"?\s*$`)
	shVar               = regexp.MustCompile(`\$(?:\{[^}]+\}|[A-Za-z_][A-Za-z0-9_]*|[0-9@*])`)
	shDangerCm          = regexp.MustCompile(`^(?:sudo\s+)?(rm|mv|cp|chmod|chown|ln|curl|wget|ssh|scp|rsync|tar|unzip|find|xargs|mysql|psql|mkdir|kill|docker|git|cat|ls|grep|cd|source|\.)\b`)
)

// shellRules applies line rules to a shell script with comments removed
// and continuation lines joined.
func (a *analysis) shellRules(code string) {
	lines := strings.Split(code, "\n")
	for i := 0; i < len(lines); i++ {
		start := i + 1
		text := stripShellComment(lines[i])
		for strings.HasSuffix(strings.TrimRight(text, " \t\r"), "\\") && i+1 < len(lines) {
			text = strings.TrimSuffix(strings.TrimRight(text, " \t\r"), "\\") + " " + stripShellComment(lines[i+1])
			i++
		}
		end := i + 1
		a.shellLine(strings.TrimSpace(strings.TrimSuffix(text, "\r")), start, end)
	}
}

func (a *analysis) shellLine(text string, line, end int) {
	if text == "" {
		return
	}
	if m := shEval.FindStringSubmatch(text); m != nil {
		switch arg := m[1]; {
		case trustedSubstitution.MatchString(arg):
			// eval "$(ssh-agent -s)": the output of a fixed program, the
			// documented way to load its settings.
		case !strings.Contains(arg, "$") && !strings.Contains(arg, "`"):
			a.add(RuleEval, SeverityLow, line, end, "eval of a constant string: it hides code from review and invites later concatenation.", fixEval(langShell))
		case shArgs.MatchString(arg) || strings.Contains(arg, "$(") || strings.Contains(arg, "`"):
			a.add(RuleEval, SeverityCritical, line, end, "eval re-parses its arguments as shell code: script arguments or command output passed to it run as commands.", fixEval(langShell))
		default:
			a.add(RuleEval, SeverityHigh, line, end, "eval re-parses a variable's value as shell code: if the value can come from outside, that runs arbitrary commands.", fixEval(langShell))
		}
		return
	}
	if m := shDashC.FindStringSubmatch(text); m != nil && dynamicShellWord(m[1]) {
		a.add(RuleCommand, SeverityCritical, line, end, "The command string given to a shell's -c interpolates a variable: its value is parsed as shell code, so ; | $( ) in it run further commands.", fixShell(langShell))
		return
	}
	if m := shSSH.FindStringSubmatch(text); m != nil && dynamicShellWord(m[1]) {
		a.add(RuleCommand, SeverityHigh, line, end, "The remote command given to ssh interpolates a variable: the remote shell parses it, so ; | $( ) in the value run further commands there.", fixShell(langShell))
		return
	}
	for _, cmd := range splitShellCommands(text) {
		if !shDangerCm.MatchString(cmd) {
			continue
		}
		if v := unquotedExpansion(cmd); v != "" {
			a.add(RuleCommand, SeverityMedium, line, end,
				"Unquoted expansion "+v+" in a command: word splitting and globbing turn a value with spaces or * into extra arguments (or none), e.g. rm -rf $dir with dir=\"/ x\".",
				"Quote every expansion: \"$var\" (and \"${arr[@]}\" for arrays); put -- before file operands, e.g. rm -rf -- \"$dir\".")
			return
		}
	}
}

// dynamicShellWord reports whether the first shell word of s (a quoted or
// bare argument) expands a variable or command substitution inside double
// quotes or bare; single quotes keep it literal.
func dynamicShellWord(s string) bool {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "'") {
		return false
	}
	if strings.HasPrefix(s, `"`) {
		end := 1
		for end < len(s) && s[end] != '"' {
			if s[end] == '\\' {
				end++
			}
			end++
		}
		word := s[1:min(end, len(s))]
		return shVar.MatchString(word) || strings.Contains(word, "$(") || strings.Contains(word, "`")
	}
	word, _, _ := strings.Cut(s, " ")
	return strings.Contains(word, "$")
}

// splitShellCommands splits a line at ; && || | outside quotes.
func splitShellCommands(s string) []string {
	var out []string
	var cur strings.Builder
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' && i+1 < len(s) {
				cur.WriteByte(c)
				i++
				c = s[i]
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == ';' || c == '|' || c == '&':
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteByte(c)
	}
	out = append(out, strings.TrimSpace(cur.String()))
	// Drop control keywords in front of commands (then rm ..., do cp ...).
	for i, c := range out {
		for _, kw := range []string{"then ", "do ", "else ", "if ", "while ", "until ", "!"} {
			c = strings.TrimPrefix(strings.TrimSpace(c), kw)
		}
		out[i] = strings.TrimSpace(c)
	}
	return out
}

// unquotedExpansion returns the first $var expansion in cmd that is outside
// quotes, or "".
func unquotedExpansion(cmd string) string {
	var quote byte
	for i := 0; i < len(cmd); i++ {
		c := cmd[i]
		switch {
		case c == '\\':
			i++
		case quote == '\'':
			if c == '\'' {
				quote = 0
			}
		case c == '$' && i+1 < len(cmd) && cmd[i+1] == '(':
			// Skip a command substitution: its words are another
			// command's, quoted on their own.
			depth := 0
			for i++; i < len(cmd); i++ {
				if cmd[i] == '(' {
					depth++
				} else if cmd[i] == ')' {
					depth--
					if depth == 0 {
						break
					}
				}
			}
		case quote == '"':
			if c == '"' {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '$':
			if m := shVar.FindString(cmd[i:]); m != "" && strings.HasPrefix(cmd[i:], m) {
				if m == "$#" || m == "$?" || m == "$$" {
					continue
				}
				return m
			}
		}
	}
	return ""
}

// stripShellComment removes a # comment (a # that starts a word, outside
// quotes).
func stripShellComment(line string) string {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && quote != '\'':
			i++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t' || line[i-1] == ';'):
			if i == 0 && strings.HasPrefix(line, "#!") {
				return ""
			}
			return line[:i]
		}
	}
	return line
}
