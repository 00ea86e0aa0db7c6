// Package model is the service's one client of a language model: Google's
// Gemini API through its Go SDK (google.golang.org/genai).
//
// The client is small on purpose. It sends one generateContent request per
// call with bounded output tokens and a time limit, optionally with a
// response schema (structured output) or with Google Search grounding, and
// returns the text, the grounding metadata the API returned and the model
// version. It never retries: a failed call returns an error and the River
// job that made it is retried with backoff, so a paid call is charged only
// once a model answer has been turned into a result.
//
// [Retryable] tells rate limits (429), server errors (5xx) and timeouts,
// which a later attempt may get past, from permanent refusals (other 4xx, a
// blocked prompt), which it will not.
package model

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/genai"
)

// DefaultModel is the model used when Config.Model is empty (GEMINI_MODEL's
// default in contract.md).
const DefaultModel = "gemini-2.5-flash"

// ErrNoAPIKey is returned by New without an API key. Without one the model
// operations are not sold.
var ErrNoAPIKey = errors.New("model: no API key (set GEMINI_API_KEY)")

// Config configures a Client.
type Config struct {
	// APIKey is the Gemini API key (GEMINI_API_KEY). Required.
	APIKey string
	// Model is the model name (GEMINI_MODEL). Defaults to DefaultModel.
	Model string
	// BaseURL is the API's base URL (GEMINI_BASE_URL), e.g. a local fake
	// server in tests or a proxy. Defaults to Google's endpoint. It is
	// operator configuration and is reached with a plain HTTP client.
	BaseURL string
	// Timeout bounds one request, including reading the answer. Defaults to
	// 50 seconds, so that two requests fit in one job's time limit.
	Timeout time.Duration
	// MaxOutputTokens bounds each answer (thinking included). Defaults to
	// 8,192.
	MaxOutputTokens int32
	// HTTPClient sends the requests. Defaults to a client of its own.
	HTTPClient *http.Client
}

// Client calls the model. It is safe for concurrent use.
type Client struct {
	genai   *genai.Client
	model   string
	timeout time.Duration
	maxOut  int32
}

// New returns a client for cfg. It does no I/O.
func New(ctx context.Context, cfg *Config) (*Client, error) {
	if cfg == nil || strings.TrimSpace(cfg.APIKey) == "" {
		return nil, ErrNoAPIKey
	}
	httpClient := cfg.HTTPClient
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	cc := &genai.ClientConfig{
		APIKey: cfg.APIKey,
		// Explicit, so that GOOGLE_GENAI_USE_VERTEXAI in the environment
		// cannot switch the backend under us.
		Backend:    genai.BackendGeminiAPI,
		HTTPClient: httpClient,
		HTTPOptions: genai.HTTPOptions{
			BaseURL: cfg.BaseURL,
		},
	}
	gc, err := genai.NewClient(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("model: new genai client: %w", err)
	}
	return &Client{
		genai:   gc,
		model:   cmp.Or(cfg.Model, DefaultModel),
		timeout: cmp.Or(cfg.Timeout, 50*time.Second),
		maxOut:  cmp.Or(cfg.MaxOutputTokens, 8192),
	}, nil
}

// Model returns the configured model name.
func (c *Client) Model() string { return c.model }

// Request is one call to the model.
type Request struct {
	// System is the system instruction. Optional.
	System string
	// Prompt is the user turn.
	Prompt string
	// Schema, when set, asks for a JSON answer that follows it (structured
	// output). It cannot be combined with Search on every model.
	Schema *genai.Schema
	// Search lets the model ground its answer with Google Search; the
	// sources it used are in Response.Grounding.
	Search bool
	// MaxOutputTokens bounds the answer. Defaults to the client's bound and
	// may not exceed it.
	MaxOutputTokens int32
	// Temperature is the sampling temperature. Defaults to the model's.
	Temperature *float32
}

// Response is the model's answer.
type Response struct {
	// Text is the answer's text (thoughts left out).
	Text string
	// ModelVersion is the version the API reports, or the configured model.
	ModelVersion string
	// FinishReason is why the model stopped ("STOP", "MAX_TOKENS", ...).
	FinishReason string
	// Grounding is what Google Search returned, or nil when the answer is
	// not grounded.
	Grounding *Grounding
	// Usage counts tokens.
	Usage Usage
}

// Usage counts the tokens of one call.
type Usage struct {
	PromptTokens   int32 `json:"prompt_tokens"`
	OutputTokens   int32 `json:"output_tokens"`
	ThoughtsTokens int32 `json:"thoughts_tokens"`
}

// Grounding is the grounding metadata of an answer: the web pages the search
// tool returned and which parts of the text they support. It comes from the
// API's groundingMetadata, never from the text the model wrote.
type Grounding struct {
	// Queries are the search queries the model ran.
	Queries []string
	// Chunks are the web sources, in the API's order; Support.Chunks index
	// into it.
	Chunks []Chunk
	// Supports tie spans of Text to the chunks that support them.
	Supports []Support
}

// Chunk is one web source returned by the search tool.
type Chunk struct {
	URI    string
	Title  string
	Domain string
}

// Support says that the bytes [Start, End) of the answer's text are
// supported by Chunks.
type Support struct {
	Start, End int
	Text       string
	Chunks     []int
}

// Generate sends req and returns the answer. An error is an *Error when the
// API answered with one; see Retryable.
func (c *Client) Generate(ctx context.Context, req *Request) (*Response, error) {
	if strings.TrimSpace(req.Prompt) == "" {
		return nil, errors.New("model: empty prompt")
	}
	maxOut := c.maxOut
	if req.MaxOutputTokens > 0 && req.MaxOutputTokens < maxOut {
		maxOut = req.MaxOutputTokens
	}
	gcfg := &genai.GenerateContentConfig{
		MaxOutputTokens: maxOut,
		Temperature:     req.Temperature,
	}
	if req.System != "" {
		gcfg.SystemInstruction = genai.NewContentFromText(req.System, genai.RoleUser)
	}
	if req.Schema != nil {
		gcfg.ResponseMIMEType = "application/json"
		gcfg.ResponseSchema = req.Schema
	}
	if req.Search {
		gcfg.Tools = []*genai.Tool{{GoogleSearch: &genai.GoogleSearch{}}}
	}

	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	resp, err := c.genai.Models.GenerateContent(ctx, c.model, genai.Text(req.Prompt), gcfg)
	if err != nil {
		return nil, classify(ctx, err, time.Since(start))
	}
	return c.response(resp)
}

// GenerateJSON sends req, which must carry a Schema, and decodes the JSON
// answer into out. An answer that is not such JSON (cut off at the token
// bound, or malformed) is a retryable error.
func (c *Client) GenerateJSON(ctx context.Context, req *Request, out any) (*Response, error) {
	if req.Schema == nil {
		return nil, errors.New("model: GenerateJSON needs a schema")
	}
	resp, err := c.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(stripFence(resp.Text)), out); err != nil {
		return resp, &Error{
			Message:   fmt.Sprintf("answer is not the requested JSON (finish reason %s): %v", resp.FinishReason, err),
			retryable: true,
		}
	}
	return resp, nil
}

func (c *Client) response(resp *genai.GenerateContentResponse) (*Response, error) {
	if pf := resp.PromptFeedback; pf != nil && pf.BlockReason != "" {
		return nil, &Error{Message: fmt.Sprintf("prompt blocked: %s %s", pf.BlockReason, pf.BlockReasonMessage)}
	}
	if len(resp.Candidates) == 0 || resp.Candidates[0] == nil {
		return nil, &Error{Message: "answer has no candidates", retryable: true}
	}
	cand := resp.Candidates[0]
	out := &Response{
		ModelVersion: cmp.Or(resp.ModelVersion, c.model),
		FinishReason: string(cand.FinishReason),
	}
	if u := resp.UsageMetadata; u != nil {
		out.Usage = Usage{PromptTokens: u.PromptTokenCount, OutputTokens: u.CandidatesTokenCount, ThoughtsTokens: u.ThoughtsTokenCount}
	}
	var text strings.Builder
	if cand.Content != nil {
		for _, p := range cand.Content.Parts {
			if p != nil && !p.Thought {
				text.WriteString(p.Text)
			}
		}
	}
	out.Text = text.String()
	switch cand.FinishReason {
	case genai.FinishReasonSafety, genai.FinishReasonBlocklist, genai.FinishReasonProhibitedContent, genai.FinishReasonSPII, genai.FinishReasonRecitation:
		return nil, &Error{Message: fmt.Sprintf("answer withheld by the model: %s", cand.FinishReason)}
	}
	if strings.TrimSpace(out.Text) == "" {
		return nil, &Error{Message: fmt.Sprintf("empty answer (finish reason %s)", cand.FinishReason), retryable: true}
	}
	if gm := cand.GroundingMetadata; gm != nil {
		out.Grounding = grounding(gm)
	}
	return out, nil
}

func grounding(gm *genai.GroundingMetadata) *Grounding {
	g := &Grounding{Queries: gm.WebSearchQueries}
	for _, ch := range gm.GroundingChunks {
		// Keep every chunk, web or not, so that support indices stay valid;
		// non-web chunks have an empty URI and are never cited.
		var c Chunk
		if ch != nil && ch.Web != nil {
			c = Chunk{URI: ch.Web.URI, Title: ch.Web.Title, Domain: ch.Web.Domain}
		}
		g.Chunks = append(g.Chunks, c)
	}
	for _, s := range gm.GroundingSupports {
		if s == nil || s.Segment == nil {
			continue
		}
		sup := Support{Start: int(s.Segment.StartIndex), End: int(s.Segment.EndIndex), Text: s.Segment.Text}
		for _, i := range s.GroundingChunkIndices {
			if int(i) >= 0 && int(i) < len(g.Chunks) {
				sup.Chunks = append(sup.Chunks, int(i))
			}
		}
		g.Supports = append(g.Supports, sup)
	}
	return g
}

// stripFence removes a Markdown code fence some models put around JSON.
func stripFence(s string) string {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "```") {
		return s
	}
	s = strings.TrimPrefix(s, "```")
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "```"))
}

// Error is a failed model call.
type Error struct {
	// Status is the HTTP status the API answered with, or 0.
	Status int
	// Message says what went wrong.
	Message string
	// Err is the underlying error, if any.
	Err error

	retryable bool
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("model: %d: %s", e.Status, e.Message)
	}
	return "model: " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether a later attempt may succeed: rate limits,
// server errors, timeouts, cut-off or empty answers.
func (e *Error) Retryable() bool { return e.retryable }

// UnusableAnswer returns the error for an answer that arrived but cannot be
// used (it cites nothing that exists, it grounds nothing): retryable, since
// the model may answer better the next time.
func UnusableAnswer(format string, args ...any) *Error {
	return &Error{Message: "unusable answer: " + fmt.Sprintf(format, args...), retryable: true}
}

// Retryable reports whether err is a model failure that a later attempt may
// get past (429, 408, 5xx, a timeout, a network error, an unusable answer).
// Permanent failures (another 4xx, a blocked prompt) are not.
func Retryable(err error) bool {
	var me *Error
	if errors.As(err, &me) {
		return me.retryable
	}
	return false
}

// classify turns an SDK error into an *Error.
func classify(ctx context.Context, err error, elapsed time.Duration) error {
	var apiErr genai.APIError
	if errors.As(err, &apiErr) {
		code := apiErr.Code
		msg := apiErr.Message
		if apiErr.Status != "" {
			msg = apiErr.Status + ": " + msg
		}
		return &Error{
			Status:    code,
			Message:   msg,
			Err:       err,
			retryable: code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code >= 500,
		}
	}
	var netErr net.Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return &Error{Message: fmt.Sprintf("timed out after %s", elapsed.Round(time.Millisecond)), Err: err, retryable: true}
	case ctx.Err() != nil:
		return fmt.Errorf("model: %w", ctx.Err())
	}
	// Connection refused, reset, TLS and the like: transient.
	return &Error{Message: "request failed: " + err.Error(), Err: err, retryable: true}
}
