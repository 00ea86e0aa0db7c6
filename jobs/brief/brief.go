// Package brief implements the brief operation: a one-page research brief
// answering a question, with key findings that cite numbered sources and
// the gaps the sources leave open.
//
// A brief takes two model calls. The first answers the question with
// Google Search grounding; the sources of the brief are the web chunks of
// that answer's grounding metadata, as the API returned them, and never
// URLs the model wrote. The second call turns the grounded answer, with
// citation marks placed from the grounding supports, into a structured
// brief (response schema). Its citations are then checked: a citation of
// a source number that does not exist is dropped, a finding left without a
// citation is dropped, and links or URLs in the text that are not sources
// are removed.
package brief

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/genai"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/model"
)

// Kind is the operation's name and River job kind.
const Kind = "brief"

// Bounds of the question, in characters.
const (
	minQuestionChars = 5
	maxQuestionChars = 400
)

// Bounds that keep a brief to one page.
const (
	maxFindings  = 8
	maxGaps      = 6
	maxBodyChars = 2400
	maxSources   = 12
)

// Input is the request body of brief.
type Input struct {
	// Question is what to research: 5 to 400 characters, any language.
	Question string `json:"question"`
}

// Kind returns "brief".
func (Input) Kind() string { return Kind }

// Validate requires a question of 5 to 400 characters (after trimming).
func (in Input) Validate(*jobs.Limits) error {
	q := strings.TrimSpace(in.Question)
	n := utf8.RuneCountInString(q)
	switch {
	case n == 0:
		return jobs.Invalid("question", "is required")
	case n < minQuestionChars:
		return jobs.Invalid("question", "is %d characters, fewer than %d", n, minQuestionChars)
	case n > maxQuestionChars:
		return jobs.Invalid("question", "is %d characters, more than %d", n, maxQuestionChars)
	case !utf8.ValidString(q):
		return jobs.Invalid("question", "is not valid UTF-8")
	}
	return nil
}

// Finding is one key finding and the sources that support it.
type Finding struct {
	Text string `json:"text"`
	// Sources are numbers of Result.Sources, at least one.
	Sources []int `json:"sources"`
}

// Source is a web page the search tool returned.
type Source struct {
	N     int    `json:"n"`
	URL   string `json:"url"`
	Title string `json:"title"`
}

// Result is brief's result object (contract.md).
type Result struct {
	Question string `json:"question"`
	// Brief is the one-page brief in Markdown, sources listed at its end.
	Brief       string    `json:"brief"`
	KeyFindings []Finding `json:"key_findings"`
	Sources     []Source  `json:"sources"`
	OpenGaps    []string  `json:"open_gaps"`
	// Model is the model version that wrote the brief.
	Model string `json:"model"`
}

// Worker computes briefs.
type Worker struct {
	model *model.Client
}

// NewWorker returns a worker that researches with client.
func NewWorker(client *model.Client) (*Worker, error) {
	if client == nil {
		return nil, errors.New("brief: a model client is required")
	}
	return &Worker{model: client}, nil
}

// Work researches in.Question. Model failures are errors (the job is
// retried; after its last attempt the call fails and is not charged).
func (w *Worker) Work(ctx context.Context, in Input) (*Result, error) {
	question := strings.TrimSpace(in.Question)

	// 1. A grounded answer: its metadata gives the sources.
	research, err := w.model.Generate(ctx, &model.Request{
		System:          researchSystem,
		Prompt:          "Question: " + question,
		Search:          true,
		MaxOutputTokens: 4096,
	})
	if err != nil {
		return nil, fmt.Errorf("brief: research: %w", err)
	}
	sources, chunkToN := sourcesOf(research.Grounding)
	if len(sources) == 0 {
		// A brief without sources is not delivered (nor charged); a later
		// attempt may fare better.
		return nil, fmt.Errorf("brief: %w", model.UnusableAnswer("the search returned no web sources"))
	}

	// 2. The structured brief, citing the numbered sources.
	var draft struct {
		Brief       string    `json:"brief"`
		KeyFindings []Finding `json:"key_findings"`
		OpenGaps    []string  `json:"open_gaps"`
	}
	structured, err := w.model.GenerateJSON(ctx, &model.Request{
		System:          structureSystem,
		Prompt:          structurePrompt(question, annotate(research.Text, research.Grounding, chunkToN), sources),
		Schema:          draftSchema,
		MaxOutputTokens: 4096,
		Temperature:     ptr(float32(0.2)),
	}, &draft)
	if err != nil {
		return nil, fmt.Errorf("brief: structure: %w", err)
	}

	findings := checkFindings(draft.KeyFindings, len(sources))
	if len(findings) == 0 {
		return nil, fmt.Errorf("brief: %w", model.UnusableAnswer("no key finding cites a returned source"))
	}
	gaps := cleanList(draft.OpenGaps, maxGaps)
	body := cleanBody(draft.Brief, sources)
	return &Result{
		Question:    question,
		Brief:       render(question, body, findings, gaps, sources),
		KeyFindings: findings,
		Sources:     sources,
		OpenGaps:    gaps,
		Model:       structured.ModelVersion,
	}, nil
}

// sourcesOf numbers the grounding's web chunks (http and https URLs,
// de-duplicated) from 1, and maps chunk indices to those numbers.
func sourcesOf(g *model.Grounding) ([]Source, map[int]int) {
	chunkToN := map[int]int{}
	if g == nil {
		return nil, chunkToN
	}
	var out []Source
	byURL := map[string]int{}
	for i, c := range g.Chunks {
		u, err := url.Parse(c.URI)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			continue
		}
		if n, ok := byURL[c.URI]; ok {
			chunkToN[i] = n
			continue
		}
		if len(out) == maxSources {
			continue
		}
		title := strings.TrimSpace(c.Title)
		if title == "" {
			title = c.Domain
		}
		if title == "" {
			title = u.Hostname()
		}
		n := len(out) + 1
		out = append(out, Source{N: n, URL: c.URI, Title: title})
		byURL[c.URI] = n
		chunkToN[i] = n
	}
	return out, chunkToN
}

// annotate places citation marks [n] after each supported span of the
// research text, from the grounding supports (byte offsets).
func annotate(text string, g *model.Grounding, chunkToN map[int]int) string {
	if g == nil {
		return text
	}
	marks := map[int][]int{}
	for _, s := range g.Supports {
		end := s.End
		if end <= 0 || end > len(text) {
			continue
		}
		for !utf8.RuneStart(text[min(end, len(text)-1)]) && end < len(text) {
			end++
		}
		for _, c := range s.Chunks {
			if n, ok := chunkToN[c]; ok && !slices.Contains(marks[end], n) {
				marks[end] = append(marks[end], n)
			}
		}
	}
	ends := make([]int, 0, len(marks))
	for e := range marks {
		ends = append(ends, e)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(ends)))
	for _, e := range ends {
		ns := marks[e]
		slices.Sort(ns)
		var b strings.Builder
		for _, n := range ns {
			fmt.Fprintf(&b, "[%d]", n)
		}
		text = text[:e] + b.String() + text[e:]
	}
	return text
}

// checkFindings keeps the findings whose citations name existing sources,
// with only those citations, sorted and de-duplicated.
func checkFindings(in []Finding, nSources int) []Finding {
	var out []Finding
	for _, f := range in {
		// The sources list is what counts; marks in the text would repeat
		// (or contradict) it.
		text := tidy(citation.ReplaceAllString(f.Text, ""))
		var ns []int
		for _, n := range f.Sources {
			if n >= 1 && n <= nSources && !slices.Contains(ns, n) {
				ns = append(ns, n)
			}
		}
		if text == "" || len(ns) == 0 {
			continue
		}
		slices.Sort(ns)
		out = append(out, Finding{Text: text, Sources: ns})
		if len(out) == maxFindings {
			break
		}
	}
	return out
}

func cleanList(in []string, limit int) []string {
	out := []string{}
	for _, s := range in {
		s = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(s), "-*• "))
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
		if len(out) == limit {
			break
		}
	}
	return out
}

var (
	citation     = regexp.MustCompile(`\[(\d+(?:\s*[,;]\s*\d+)*)\]`)
	markdownLink = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	bareURL      = regexp.MustCompile(`<?\bhttps?://[^\s<>()\]]+>?`)
	sourcesHead  = regexp.MustCompile(`(?im)^\s*#{1,6}\s*(sources|references|bibliography|citations)\b.*$`)
)

var (
	spaceBeforePunct = regexp.MustCompile(`[ \t]+([.,;:!?)\]])`)
	innerSpaces      = regexp.MustCompile(`(\S)[ \t]{2,}`)
	emptyParens      = regexp.MustCompile(`\(\s*(see\s*)?\)`)
)

// tidy removes what deleting marks and URLs leaves behind: spaces before
// punctuation, runs of spaces, empty parentheses.
func tidy(s string) string {
	s = emptyParens.ReplaceAllString(s, "")
	s = spaceBeforePunct.ReplaceAllString(s, "$1")
	s = innerSpaces.ReplaceAllString(s, "$1 ")
	return strings.TrimSpace(s)
}

// keepCitations rewrites a citation mark keeping only existing source
// numbers ("[2, 9]" with 3 sources becomes "[2]"; "[9]" disappears).
func keepCitations(mark string, nSources int) string {
	var keep []string
	for _, part := range strings.FieldsFunc(strings.Trim(mark, "[]"), func(r rune) bool { return r == ',' || r == ';' || r == ' ' }) {
		n, err := strconv.Atoi(part)
		if err == nil && n >= 1 && n <= nSources {
			keep = append(keep, strconv.Itoa(n))
		}
	}
	if len(keep) == 0 {
		return ""
	}
	return "[" + strings.Join(keep, ", ") + "]"
}

// cleanBody makes the model's brief text safe to publish: no links or URLs
// other than the sources', no citations of missing sources, no sources
// section of its own (render adds the real one), at most about a page.
func cleanBody(body string, sources []Source) string {
	isSource := func(u string) bool {
		return slices.ContainsFunc(sources, func(s Source) bool { return s.URL == u })
	}
	if loc := sourcesHead.FindStringIndex(body); loc != nil {
		body = body[:loc[0]]
	}
	body = markdownLink.ReplaceAllStringFunc(body, func(m string) string {
		sub := markdownLink.FindStringSubmatch(m)
		if isSource(sub[2]) {
			return m
		}
		return sub[1]
	})
	body = replaceOutsideLinks(body, func(u string) string {
		if isSource(strings.Trim(u, "<>")) {
			return u
		}
		return ""
	})
	body = tidy(citation.ReplaceAllStringFunc(body, func(m string) string { return keepCitations(m, len(sources)) }))
	if utf8.RuneCountInString(body) > maxBodyChars {
		body = cutAtSentence(body, maxBodyChars)
	}
	return body
}

// replaceOutsideLinks applies fn to bare URLs that are not inside a kept
// Markdown link.
func replaceOutsideLinks(s string, fn func(string) string) string {
	links := markdownLink.FindAllStringIndex(s, -1)
	var b strings.Builder
	last := 0
	for _, m := range bareURL.FindAllStringIndex(s, -1) {
		inside := slices.ContainsFunc(links, func(l []int) bool { return m[0] >= l[0] && m[1] <= l[1] })
		if inside {
			continue
		}
		b.WriteString(s[last:m[0]])
		b.WriteString(fn(s[m[0]:m[1]]))
		last = m[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// cutAtSentence shortens s to at most limit characters, ending at a
// sentence or paragraph end when there is one in the second half.
func cutAtSentence(s string, limit int) string {
	runes := []rune(s)
	cut := string(runes[:limit])
	best := -1
	for _, sep := range []string{"\n\n", ". ", "。", "! ", "? "} {
		if i := strings.LastIndex(cut, sep); i > best {
			best = i + len(strings.TrimRight(sep, " \n"))
		}
	}
	if best > len(cut)/2 {
		return strings.TrimSpace(cut[:best])
	}
	return strings.TrimSpace(cut) + "…"
}

// render assembles the Markdown brief.
func render(question, body string, findings []Finding, gaps []string, sources []Source) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", oneLine(question))
	if body != "" {
		b.WriteString(body)
		b.WriteString("\n\n")
	}
	b.WriteString("## Key findings\n\n")
	for _, f := range findings {
		fmt.Fprintf(&b, "- %s", oneLine(f.Text))
		for _, n := range f.Sources {
			fmt.Fprintf(&b, " [%d]", n)
		}
		b.WriteString("\n")
	}
	if len(gaps) > 0 {
		b.WriteString("\n## Open gaps\n\n")
		for _, g := range gaps {
			fmt.Fprintf(&b, "- %s\n", oneLine(g))
		}
	}
	b.WriteString("\n## Sources\n\n")
	for _, s := range sources {
		fmt.Fprintf(&b, "%d. [%s](%s)\n", s.N, escapeLinkText(s.Title), s.URL)
	}
	return b.String()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func escapeLinkText(s string) string {
	return strings.NewReplacer("[", `\[`, "]", `\]`).Replace(oneLine(s))
}

const researchSystem = `You are a careful research assistant. Search the web to answer the user's question.
Write a factual answer of 250 to 500 words in the language of the question: the main findings with specifics (names, numbers, dates), where sources disagree, and what could not be established.
Only state what the search results support. Do not list sources or URLs; they are collected separately.`

const structureSystem = `You turn a researched answer into a one-page brief, in the language of the question.
Sources are numbered; cite them only by their numbers, as listed. Never invent sources, numbers or URLs, and do not write a source list.
The brief text is Markdown without headings: 2 to 4 short paragraphs with citation marks like [1] or [2, 3].
Key findings: 3 to 8 self-contained statements, each with the numbers of the sources that support it.
Open gaps: what the sources leave unanswered or uncertain (1 to 6 items).`

func structurePrompt(question, answer string, sources []Source) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Question: %s\n\n", question)
	b.WriteString("Researched answer (citation marks [n] refer to the sources below):\n<answer>\n")
	b.WriteString(answer)
	b.WriteString("\n</answer>\n\nSources:\n")
	for _, s := range sources {
		fmt.Fprintf(&b, "[%d] %s\n", s.N, oneLine(s.Title))
	}
	return b.String()
}

var draftSchema = &genai.Schema{
	Type: genai.TypeObject,
	Properties: map[string]*genai.Schema{
		"brief": {Type: genai.TypeString, Description: "The brief's text: Markdown, 2 to 4 paragraphs, citation marks [n]."},
		"key_findings": {
			Type: genai.TypeArray,
			Items: &genai.Schema{
				Type: genai.TypeObject,
				Properties: map[string]*genai.Schema{
					"text":    {Type: genai.TypeString},
					"sources": {Type: genai.TypeArray, Items: &genai.Schema{Type: genai.TypeInteger}, Description: "Numbers of the supporting sources."},
				},
				Required:         []string{"text", "sources"},
				PropertyOrdering: []string{"text", "sources"},
			},
		},
		"open_gaps": {Type: genai.TypeArray, Items: &genai.Schema{Type: genai.TypeString}},
	},
	Required:         []string{"brief", "key_findings", "open_gaps"},
	PropertyOrdering: []string{"brief", "key_findings", "open_gaps"},
}

func ptr[T any](v T) *T { return &v }

// inputSchema is the JSON Schema of brief's request body.
const inputSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "brief request",
  "type": "object",
  "properties": {
    "question": {
      "type": "string",
      "minLength": 5,
      "maxLength": 400,
      "description": "The question to research, 5 to 400 characters, in any language."
    }
  },
  "required": ["question"],
  "additionalProperties": false
}`

var exampleSources = []Source{
	{N: 1, URL: "https://vertexaisearch.cloud.google.com/grounding-api-redirect/AUZIYQE-example-1", Title: "x402.org"},
	{N: 2, URL: "https://vertexaisearch.cloud.google.com/grounding-api-redirect/AUZIYQE-example-2", Title: "github.com"},
}

var exampleFindings = []Finding{
	{Text: "x402 revives the HTTP 402 status code so that a server can quote a price and a client can pay per request.", Sources: []int{1}},
	{Text: "Payments are signed stablecoin transfers that a facilitator verifies and settles on chain.", Sources: []int{1, 2}},
}

var exampleGaps = []string{"Independent figures on adoption and transaction volume."}

const exampleQuestion = "What is the x402 payment protocol?"

const exampleBody = "x402 is an open protocol for paying for HTTP resources per request [1]. A server answers an unpaid request with 402 and a price; the client signs a stablecoin payment and retries with it [1, 2]."

// Op is brief's catalogue entry and request decoder.
var Op = jobs.Define[Input](jobs.Spec{
	Name:        Kind,
	Price:       "0.250000",
	Queue:       jobs.QueueModel,
	UsesModel:   true,
	ReadsWeb:    true,
	Description: "One-page research brief answering a question (5 to 400 characters, any language), researched with Google Search: Markdown brief, key findings each citing numbered sources, the sources (only URLs the search returned), and open gaps.",
	InputExample: Input{
		Question: exampleQuestion,
	},
	InputSchema: json.RawMessage(inputSchema),
	OutputExample: Result{
		Question:    exampleQuestion,
		Brief:       render(exampleQuestion, exampleBody, exampleFindings, exampleGaps, exampleSources),
		KeyFindings: exampleFindings,
		Sources:     exampleSources,
		OpenGaps:    exampleGaps,
		Model:       model.DefaultModel,
	},
})
