package codereview

import (
	"fmt"
	"math"
	"strings"

	"github.com/spf13/viper"
	"github.com/zricethezav/gitleaks/v8/config"
)

// secretScanner finds hard-coded secrets with gitleaks' default rule set
// (github.com/zricethezav/gitleaks/v8, config/gitleaks.toml: about 220
// rules with keywords, entropy thresholds and allowlists, maintained by the
// gitleaks project). The rules are loaded through gitleaks' own config
// package; the scan applies them as gitleaks' detector does for one
// fragment of text: keyword pre-filter, regex, secret group, entropy, then
// the global and per-rule allowlists. The detector package itself is not
// used: it brings archive readers and git sources the service does not need.
type secretScanner struct {
	rules  []config.Rule
	global []*config.Allowlist
}

// newSecretScanner compiles gitleaks' default rules. It takes about a
// hundred milliseconds; do it once per process.
func newSecretScanner() (*secretScanner, error) {
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(config.DefaultConfig)); err != nil {
		return nil, fmt.Errorf("read gitleaks config: %w", err)
	}
	var vc config.ViperConfig
	if err := v.Unmarshal(&vc); err != nil {
		return nil, fmt.Errorf("decode gitleaks config: %w", err)
	}
	cfg, err := vc.Translate()
	if err != nil {
		return nil, fmt.Errorf("translate gitleaks config: %w", err)
	}
	s := &secretScanner{global: cfg.Allowlists}
	for _, r := range cfg.GetOrderedRules() {
		if r.Regex == nil || r.Path != nil || r.SkipReport {
			// Path rules name files, which a code review has none of.
			continue
		}
		s.rules = append(s.rules, r)
	}
	return s, nil
}

// secretMatch is one hard-coded secret.
type secretMatch struct {
	ruleID      string
	description string
	line, end   int
}

// scan returns the secrets in code, at most one per rule and line.
func (s *secretScanner) scan(code string) []secretMatch {
	lower := strings.ToLower(code)
	lineStarts := []int{0}
	for i := 0; i < len(code); i++ {
		if code[i] == '\n' {
			lineStarts = append(lineStarts, i+1)
		}
	}
	lineOf := func(off int) int {
		lo, hi := 0, len(lineStarts)
		for lo+1 < hi {
			mid := (lo + hi) / 2
			if lineStarts[mid] <= off {
				lo = mid
			} else {
				hi = mid
			}
		}
		return lo + 1
	}
	lineText := func(start, end int) string {
		ls := lineStarts[lineOf(start)-1]
		le := strings.IndexByte(code[end:], '\n')
		if le < 0 {
			return code[ls:]
		}
		return code[ls : end+le]
	}

	var out []secretMatch
	seen := map[[2]any]bool{}
	for i := range s.rules {
		r := &s.rules[i]
		if !hasKeyword(lower, r.Keywords) {
			continue
		}
		for _, m := range r.Regex.FindAllStringIndex(code, -1) {
			match := strings.Trim(code[m[0]:m[1]], "\n")
			end := m[0] + len(match)
			secret := match
			if groups := r.Regex.FindStringSubmatch(match); len(groups) >= 2 {
				if r.SecretGroup > 0 {
					if len(groups) <= r.SecretGroup {
						continue
					}
					secret = groups[r.SecretGroup]
				} else {
					for _, g := range groups[1:] {
						if g != "" {
							secret = g
							break
						}
					}
				}
			}
			if r.Entropy != 0 && shannonEntropy(secret) <= r.Entropy {
				continue
			}
			line := lineText(m[0], end)
			if strings.Contains(line, "gitleaks:allow") ||
				allowed(s.global, secret, match, line) || allowed(r.Allowlists, secret, match, line) {
				continue
			}
			sm := secretMatch{ruleID: r.RuleID, description: r.Description, line: lineOf(m[0]), end: lineOf(max(end-1, m[0]))}
			key := [2]any{r.RuleID, sm.line}
			if seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, sm)
		}
	}
	return out
}

func hasKeyword(lower string, keywords []string) bool {
	if len(keywords) == 0 {
		return true
	}
	for _, k := range keywords {
		if strings.Contains(lower, k) {
			return true
		}
	}
	return false
}

// allowed applies gitleaks allowlists to a finding: each list's regexes
// target the secret, the whole match or the line; stop words target the
// secret. Commit and path conditions never hold for a pasted snippet, so a
// list that requires them (match condition AND) never allows.
func allowed(lists []*config.Allowlist, secret, match, line string) bool {
	for _, a := range lists {
		target := secret
		switch a.RegexTarget {
		case "match":
			target = match
		case "line":
			target = line
		}
		regexOK := a.RegexAllowed(target)
		stopOK, _ := a.ContainsStopWord(secret)
		if a.MatchCondition == config.AllowlistMatchAnd {
			if len(a.Commits) > 0 || len(a.Paths) > 0 {
				continue
			}
			checks := 0
			ok := true
			if len(a.Regexes) > 0 {
				checks++
				ok = ok && regexOK
			}
			if len(a.StopWords) > 0 {
				checks++
				ok = ok && stopOK
			}
			if checks > 0 && ok {
				return true
			}
			continue
		}
		if regexOK || stopOK {
			return true
		}
	}
	return false
}

// shannonEntropy is the entropy in bits per character of s's bytes' code
// points, as gitleaks computes it.
func shannonEntropy(s string) float64 {
	if s == "" {
		return 0
	}
	counts := map[rune]int{}
	for _, r := range s {
		counts[r]++
	}
	inv := 1 / float64(len(s))
	var h float64
	for _, n := range counts {
		f := float64(n) * inv
		h -= f * math.Log2(f)
	}
	return h
}
