package codereview

import (
	"cmp"
	"regexp"
	"slices"
	"strings"
)

// dedupe sorts findings by line, severity and rule and keeps one finding
// per rule and overlapping line range (the most severe; static before ai).
func dedupe(fs []Finding) []Finding {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(severityRank[a.Severity], severityRank[b.Severity]),
			strings.Compare(sourceOrder(a.Source), sourceOrder(b.Source)),
			strings.Compare(a.Rule, b.Rule),
		)
	})
	out := fs[:0:0]
	for _, f := range fs {
		dup := false
		for _, k := range out {
			if k.Rule == f.Rule && overlap(k, f) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, f)
		}
	}
	return out
}

func sourceOrder(s string) string {
	if s == "static" {
		return "0"
	}
	return "1"
}

func overlap(a, b Finding) bool { return a.Line <= b.EndLine && b.Line <= a.EndLine }

// aiFinding is a finding as the model reports it.
type aiFinding struct {
	Line     int    `json:"line"`
	EndLine  int    `json:"end_line"`
	Severity string `json:"severity"`
	Rule     string `json:"rule"`
	Message  string `json:"message"`
	Fix      string `json:"fix"`
}

var severityAliases = map[string]string{
	"critical": SeverityCritical, "blocker": SeverityCritical,
	"high": SeverityHigh, "error": SeverityHigh, "major": SeverityHigh,
	"medium": SeverityMedium, "moderate": SeverityMedium, "warning": SeverityMedium,
	"low": SeverityLow, "minor": SeverityLow,
	"info": SeverityInfo, "informational": SeverityInfo, "note": SeverityInfo, "style": SeverityInfo,
}

var nonRuleChars = regexp.MustCompile(`[^a-z0-9]+`)

// categories recognise the static rules' subjects in the model's words, so
// that the model's report of a problem a static rule already found is not
// listed twice.
var categories = []struct {
	rule string
	re   *regexp.Regexp
}{
	{RuleSQL, regexp.MustCompile(`(?i)\bsql\b|sqli|query injection`)},
	{RuleCommand, regexp.MustCompile(`(?i)command[- ]injection|shell[- ]injection|os[- ]command|\bshell\b|subprocess|system\(`)},
	{RuleEval, regexp.MustCompile(`(?i)\beval\b|\bexec\(|code[- ]injection|code[- ]execution|arbitrary code|new function`)},
	{RuleSecret, regexp.MustCompile(`(?i)hard[- ]?coded|secret|api[- ]?key|credential|password|token`)},
}

// category returns the static rule a model finding is about, or "".
func category(f aiFinding) string {
	text := f.Rule + " " + f.Message
	for _, c := range categories {
		if c.re.MatchString(text) {
			return c.rule
		}
	}
	return ""
}

// cleanAI turns the model's findings into findings that meet the contract:
// a line inside the code (end clamped to it), a severity of the scale, a
// rule name, a message and a fix. Findings that cannot be made to (no line
// inside the code, an unknown severity, no message or no fix) are dropped,
// and so are those that repeat a static finding.
func cleanAI(in []aiFinding, lines int, static []Finding) []Finding {
	var out []Finding
	for _, f := range in {
		if f.Line < 1 || f.Line > lines {
			continue
		}
		end := f.EndLine
		if end < f.Line {
			end = f.Line
		}
		end = min(end, lines)
		sev, ok := severityAliases[strings.ToLower(strings.TrimSpace(f.Severity))]
		if !ok {
			continue
		}
		msg, fix := strings.TrimSpace(f.Message), strings.TrimSpace(f.Fix)
		if msg == "" || fix == "" {
			continue
		}
		rule := strings.Trim(nonRuleChars.ReplaceAllString(strings.ToLower(f.Rule), "-"), "-")
		if rule == "" {
			rule = "ai-review"
		}
		if len(rule) > 64 {
			rule = strings.TrimRight(rule[:64], "-")
		}
		nf := Finding{Line: f.Line, EndLine: end, Severity: sev, Rule: rule, Source: "ai", Message: msg, Fix: fix}
		if cat := category(f); cat != "" && slices.ContainsFunc(static, func(s Finding) bool {
			return s.Rule == cat && overlap(s, nf)
		}) {
			continue
		}
		out = append(out, nf)
	}
	return out
}

// countSeverities counts findings per severity; every severity is present.
func countSeverities(fs []Finding) Counts {
	var c Counts
	for _, f := range fs {
		switch f.Severity {
		case SeverityCritical:
			c.Critical++
		case SeverityHigh:
			c.High++
		case SeverityMedium:
			c.Medium++
		case SeverityLow:
			c.Low++
		case SeverityInfo:
			c.Info++
		}
	}
	return c
}
