// Package regex implements the regex operation: run a JavaScript regular
// expression over a text and report every match with its capture groups.
//
// The pattern is parsed with JavaScript's grammar (ECMAScript 2024, with
// Annex B's web-compatibility rules when the u flag is off) and rewritten
// for one of two engines:
//
//   - re2 (Go's regexp, linear in the text) whenever the pattern allows;
//   - ecmascript (github.com/dlclark/regexp2, backtracking, under a time
//     limit) for backreferences, lookahead and lookbehind, repetition counts
//     above 1,000, \b under the i and u flags together, and ^ or $ under the
//     m flag when the text holds \r, U+2028 or U+2029.
//
// JavaScript's meaning is kept by spelling every class out rather than using
// the engine's own: \d is [0-9]; \w is [0-9A-Za-z_] (plus ſ and K under i
// and u); \s is JavaScript's WhiteSpace and LineTerminator characters; . is
// anything but \n \r U+2028 U+2029 unless the s flag is set; ^ and $ under
// m see all four line terminators; the i flag uses simple case folding with
// u and JavaScript's toUpperCase canonicalisation without it (so ſ does not
// match s and K does not match k without u). A quantified group captures
// only in its last iteration, as JavaScript resets captures on each one.
// Backreferences to groups that did not participate match the empty string.
//
// Positions are code points (characters) of the text, 0-based. The text is
// always a sequence of code points: a character outside the Basic
// Multilingual Plane is one character for ., classes and quantifiers even
// without the u flag (JavaScript without u sees two UTF-16 halves, which no
// character position can name). Matching follows JavaScript's
// RegExp.prototype.exec without g, and String.prototype.matchAll with g:
// after an empty match the search resumes one character further on; with y
// every match must start where the previous one ended.
//
// JavaScript refuses an iteration of a quantifier that matches the empty
// string once the minimum count is met; the pattern is rewritten so that
// such iterations cannot match empty (X* becomes N* with N the non-empty
// matches of X), which the engines then follow.
//
// Known differences from JavaScript (the first two are deviation cases of
// the differential test, which checks that they still differ): the astral
// characters above; a
// quantified group whose body is a sequence of parts that may all match
// empty (/(a?b?)*c/) keeps an empty last iteration, so its groups read ""
// where JavaScript has undefined; a backreference inside a loop to a group
// of an earlier iteration sees that capture on the ecmascript engine (in
// JavaScript it is reset); case-insensitive backreferences compare with
// regexp2's case folding; \p{...} knows General_Category, Script (long
// names) and the binary properties Go's unicode tables hold (Unicode 15),
// and refuses the others (Emoji, Script_Extensions, ...) with a 400.
package regex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/x402d/x402d/jobs"
)

// Kind is the operation's name and River job kind.
const Kind = "regex"

// The time budget of one call's matching on the ecmascript engine
// (TimeLimit): BaseTimeLimit plus PerCharTimeLimit a character of the text,
// at most MaxTimeLimit. A backtracking pattern that goes catastrophic on a
// short text is stopped in a fraction of a second, while a text of 1 MiB
// (about 250 ms of matching for a pattern with lookahead or a
// backreference, docs/performance.md) has the room it needs on a busy
// machine. The engine reads its clock every 100 ms: a match stops up to
// that much after its budget.
const (
	BaseTimeLimit    = 100 * time.Millisecond
	PerCharTimeLimit = time.Microsecond
	MaxTimeLimit     = 2 * time.Second
)

// TimeLimit returns the time budget of matching over text on the ecmascript
// engine.
func TimeLimit(text string) time.Duration {
	return min(MaxTimeLimit, BaseTimeLimit+time.Duration(utf8.RuneCountInString(text))*PerCharTimeLimit)
}

// Input is the request body of regex.
type Input struct {
	// Pattern is a JavaScript regular expression, without slashes; empty
	// matches the empty string at every position, as in JavaScript. It is
	// required (the input schema): a request without it is refused.
	Pattern string `json:"pattern"`
	// Text is the text to search.
	Text string `json:"text"`
	// Flags are JavaScript flag letters: g i m s u y, each at most once.
	Flags string `json:"flags"`
}

// Kind returns "regex".
func (Input) Kind() string { return Kind }

// Validate refuses a too long pattern, unknown or repeated flags, and
// patterns JavaScript would refuse or the chosen engine cannot compile. An
// empty pattern is JavaScript's `new RegExp("")`: it matches the empty
// string at every position.
func (in Input) Validate(lim *jobs.Limits) error {
	maxChars := jobs.DefaultLimits.MaxPatternChars
	if lim != nil && lim.MaxPatternChars > 0 {
		maxChars = lim.MaxPatternChars
	}
	if utf8.RuneCountInString(in.Pattern) > maxChars {
		return jobs.Invalid("pattern", "is longer than %d characters", maxChars)
	}
	_, err := prepare(in)
	return err
}

// prepare parses and compiles in, returning an *jobs.InvalidError for bad
// flags or patterns.
func prepare(in Input) (*program, error) {
	fl, err := parseFlags(in.Flags)
	if err != nil {
		return nil, jobs.Invalid("flags", "%v", err)
	}
	p, err := parse(in.Pattern, fl)
	if err != nil {
		return nil, jobs.Invalid("pattern", "invalid regular expression: %v", err)
	}
	prog, err := compile(p, in.Text)
	if err != nil {
		return nil, jobs.Invalid("pattern", "%v", err)
	}
	return prog, nil
}

// Result is regex's result object (contract.md, "Results per operation").
type Result struct {
	// Engine is "re2" or "ecmascript".
	Engine string `json:"engine"`
	// Flags are the request's flags in canonical order ("gimsuy").
	Flags string `json:"flags"`
	// MatchCount is len(Matches).
	MatchCount int `json:"match_count"`
	// Truncated is set when matches were left out: more than MaxMatches, or
	// more than 16 MiB of matched and captured text.
	Truncated bool `json:"truncated"`
	// Matches are in text order.
	Matches []Match `json:"matches"`
}

// Match is one match.
type Match struct {
	// Match is the matched text.
	Match string `json:"match"`
	// Index and End are the match's first and one-past-last character.
	Index int `json:"index"`
	End   int `json:"end"`
	// Groups are the capture groups in pattern order.
	Groups []Group `json:"groups"`
}

// Group is one capture group of a match. Value and Index are null when the
// group did not participate; Name is null for unnamed groups.
type Group struct {
	Name  *string `json:"name"`
	Value *string `json:"value"`
	Index *int    `json:"index"`
}

// Work runs in within the time budget of its text (TimeLimit).
func Work(ctx context.Context, in Input) (*Result, error) {
	return Run(ctx, in, TimeLimit(in.Text))
}

// Run runs in.Pattern over in.Text. The ecmascript engine stops after
// timeLimit (or at ctx's deadline), returning an error wrapping ErrTimeout.
func Run(ctx context.Context, in Input, timeLimit time.Duration) (*Result, error) {
	fl, err := parseFlags(in.Flags)
	if err != nil {
		return nil, fmt.Errorf("regex: %w", jobs.Invalid("flags", "%v", err))
	}
	in.Text = toValidUTF8(in.Text)
	prog, err := prepare(in)
	if err != nil {
		return nil, fmt.Errorf("regex: %w", err)
	}
	deadline := time.Now().Add(timeLimit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	res, err := run(ctx, prog, fl, in.Text, deadline)
	if errors.Is(err, ErrTimeout) {
		return nil, fmt.Errorf("regex %s engine: %w: stopped after its budget of %v for a text of %d characters",
			prog.engine, err, timeLimit, utf8.RuneCountInString(in.Text))
	}
	if err != nil {
		return nil, fmt.Errorf("regex %s engine: %w", prog.engine, err)
	}
	return res, nil
}

// toValidUTF8 replaces invalid UTF-8 (which JSON decoding never produces)
// with U+FFFD, so that bytes and characters agree.
func toValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]rune, 0, len(s))
	for _, r := range s {
		b = append(b, r)
	}
	return string(b)
}

// inputSchema is the JSON Schema of regex's request body.
const inputSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "regex request",
  "type": "object",
  "properties": {
    "pattern": {
      "type": "string",
      "minLength": 1,
      "maxLength": 4096,
      "description": "A JavaScript regular expression without the enclosing slashes, e.g. (?<user>\\w+)@(\\w+)\\.com."
    },
    "text": {
      "type": "string",
      "description": "The text to search. Positions in the result count its characters (code points) from 0."
    },
    "flags": {
      "type": "string",
      "pattern": "^[gimsuy]{0,6}$",
      "default": "",
      "description": "JavaScript flag letters, each at most once: g (all matches), i (ignore case), m (multi-line ^ and $), s (. matches newlines), u (Unicode), y (sticky)."
    }
  },
  "required": ["pattern"],
  "additionalProperties": false
}`

var exampleInput = Input{
	Pattern: `(?<user>\w+)@(\w+)\.com`,
	Text:    "Write to ann@example.com or bob@test.com.",
	Flags:   "g",
}

func exampleOutput() *Result {
	res, err := Work(context.Background(), exampleInput)
	if err != nil {
		panic(fmt.Sprintf("regex: example: %v", err))
	}
	return res
}

// Spec describes regex for the catalogue, quotes and discovery.
var Spec = jobs.Spec{
	Name:          Kind,
	Price:         "0.010000",
	Queue:         jobs.QueuePure,
	Description:   "Runs a JavaScript regular expression (flags g i m s u y) over a text: every match with its character index, end and capture groups (named or not). Linear-time RE2 whenever the pattern allows; backreferences and lookaround run on an ECMAScript engine under a time limit.",
	InputExample:  exampleInput,
	InputSchema:   json.RawMessage(inputSchema),
	OutputExample: exampleOutput(),
}

// Op is regex's catalogue entry and request decoder.
var Op = jobs.Define[Input](Spec)
