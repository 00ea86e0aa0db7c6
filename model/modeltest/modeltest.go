// Package modeltest runs a fake Gemini API on loopback for tests. It speaks
// the REST format of generativelanguage.googleapis.com (v1beta
// models/{model}:generateContent): the real SDK, pointed at it through
// model.Config.BaseURL (GEMINI_BASE_URL), sends real requests and parses
// real answers, including grounding metadata and error bodies.
//
// Answers are scripted: replies queued with Enqueue are used first, in
// order; then the Handler answers. The default handler, Auto, answers a
// request with a response schema by a small JSON instance of that schema,
// and a request with Google Search by a grounded text with two sources, so
// end-to-end tests get valid answers without scripting each one.
package modeltest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/x402d/x402d/model"
)

// APIKey is the key the server accepts.
const APIKey = "modeltest-key"

// Server is a fake Gemini API.
type Server struct {
	// URL is the base URL to give the client (GEMINI_BASE_URL).
	URL string

	srv      *httptest.Server
	mu       sync.Mutex
	queue    []Reply
	handler  func(*Request) Reply
	requests []*Request
}

// NewServer starts a fake Gemini API that tb's cleanup stops.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{handler: Auto}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	tb.Cleanup(s.srv.Close)
	return s
}

// Config returns a client configuration for s: its URL, the accepted key
// and a short timeout.
func (s *Server) Config() *model.Config {
	return &model.Config{APIKey: APIKey, BaseURL: s.URL, Timeout: 5 * time.Second}
}

// Client returns a client of s built as the service builds its own
// (model.New with Config); tb fails if it cannot be built.
func (s *Server) Client(tb testing.TB) *model.Client {
	tb.Helper()
	c, err := model.New(context.Background(), s.Config())
	if err != nil {
		tb.Fatalf("modeltest: new model client: %v", err)
	}
	return c
}

// Bundle is a fake Gemini API and a job worker whose model client calls
// it: what a model operation's tests start with.
type Bundle[W any] struct {
	Fake   *Server
	Worker W
}

// NewBundle starts a fake Gemini API (NewServer) and builds a worker on a
// client of it (Client) with newWorker; tb fails if newWorker does.
func NewBundle[W any](tb testing.TB, newWorker func(*model.Client) (W, error)) *Bundle[W] {
	tb.Helper()
	fake := NewServer(tb)
	w, err := newWorker(fake.Client(tb))
	if err != nil {
		tb.Fatalf("modeltest: new worker: %v", err)
	}
	return &Bundle[W]{Fake: fake, Worker: w}
}

// Enqueue adds replies that the next requests get, in order, before the
// handler answers again.
func (s *Server) Enqueue(r ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, r...)
}

// SetHandler sets what answers requests once the queue is empty. Nil
// restores Auto.
func (s *Server) SetHandler(h func(*Request) Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h == nil {
		h = Auto
	}
	s.handler = h
}

// Requests returns the generateContent requests received so far.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.requests...)
}

// Request is one generateContent request as the server received it.
type Request struct {
	// Model is the model named in the path ("gemini-2.5-flash").
	Model string
	// APIVersion is the path's version ("v1beta").
	APIVersion string
	// Body is the decoded JSON body.
	Body GenerateContentRequest
	// Raw is the body as sent.
	Raw []byte
}

// Prompt returns the text of the request's contents, joined by newlines.
func (r *Request) Prompt() string { return r.Body.text(r.Body.Contents) }

// System returns the text of the system instruction.
func (r *Request) System() string {
	if r.Body.SystemInstruction == nil {
		return ""
	}
	return r.Body.text([]content{*r.Body.SystemInstruction})
}

// Schema returns the response schema, or nil.
func (r *Request) Schema() map[string]any {
	if r.Body.GenerationConfig == nil {
		return nil
	}
	return r.Body.GenerationConfig.ResponseSchema
}

// Search reports whether the request enables Google Search.
func (r *Request) Search() bool {
	for _, t := range r.Body.Tools {
		if _, ok := t["googleSearch"]; ok {
			return true
		}
	}
	return false
}

// MaxOutputTokens returns generationConfig.maxOutputTokens.
func (r *Request) MaxOutputTokens() int {
	if r.Body.GenerationConfig == nil {
		return 0
	}
	return r.Body.GenerationConfig.MaxOutputTokens
}

// GenerateContentRequest is the part of the REST request body the fake
// reads.
type GenerateContentRequest struct {
	Contents          []content         `json:"contents"`
	SystemInstruction *content          `json:"systemInstruction"`
	Tools             []map[string]any  `json:"tools"`
	GenerationConfig  *generationConfig `json:"generationConfig"`
}

type content struct {
	Role  string `json:"role"`
	Parts []struct {
		Text string `json:"text"`
	} `json:"parts"`
}

type generationConfig struct {
	MaxOutputTokens  int            `json:"maxOutputTokens"`
	ResponseMIMEType string         `json:"responseMimeType"`
	ResponseSchema   map[string]any `json:"responseSchema"`
	Temperature      *float64       `json:"temperature"`
}

func (GenerateContentRequest) text(cs []content) string {
	var parts []string
	for _, c := range cs {
		for _, p := range c.Parts {
			parts = append(parts, p.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// Reply is one scripted answer.
type Reply struct {
	// Status is the HTTP status; 0 means 200. Any other status answers with
	// the API's error body built from Status, ErrorStatus and Message.
	Status int
	// ErrorStatus is the error's status name ("RESOURCE_EXHAUSTED");
	// defaults to the name the API uses for Status.
	ErrorStatus string
	// Message is the error message.
	Message string
	// Delay holds the answer back, to test time limits.
	Delay time.Duration

	// Text is the model's answer.
	Text string
	// FinishReason defaults to "STOP".
	FinishReason string
	// BlockReason, when set, answers with promptFeedback.blockReason and no
	// candidates.
	BlockReason string
	// Queries are the web search queries of the grounding metadata.
	Queries []string
	// Sources are the grounding chunks (web URI and title).
	Sources []Source
	// Supports tie parts of Text to sources; their byte offsets are
	// computed from Segment.
	Supports []Support
	// ModelVersion defaults to the requested model.
	ModelVersion string
}

// Source is a web grounding chunk.
type Source struct {
	URI, Title string
}

// Support says that Segment, a substring of the reply's Text, is supported
// by the sources at Chunks (0-based).
type Support struct {
	Segment string
	Chunks  []int
}

// JSONReply returns a reply whose text is v encoded as JSON.
func JSONReply(v any) Reply {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("modeltest: encode reply: %v", err))
	}
	return Reply{Text: string(b)}
}

// ErrorReply returns an error answer with the given HTTP status.
func ErrorReply(status int, message string) Reply {
	return Reply{Status: status, Message: message}
}

var statusNames = map[int]string{
	400: "INVALID_ARGUMENT",
	403: "PERMISSION_DENIED",
	404: "NOT_FOUND",
	408: "DEADLINE_EXCEEDED",
	429: "RESOURCE_EXHAUSTED",
	500: "INTERNAL",
	503: "UNAVAILABLE",
	504: "DEADLINE_EXCEEDED",
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	// Path: /{version}/models/{model}:generateContent
	version, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	name, method, _ := strings.Cut(strings.TrimPrefix(rest, "models/"), ":")
	if r.Method != http.MethodPost || !strings.HasPrefix(rest, "models/") || method != "generateContent" {
		writeError(w, Reply{Status: http.StatusNotFound, Message: fmt.Sprintf("modeltest: %s %s is not served", r.Method, r.URL.Path)})
		return
	}
	switch key := r.Header.Get("x-goog-api-key"); {
	case key == "":
		writeError(w, Reply{Status: http.StatusForbidden, Message: "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API."})
		return
	case key != APIKey:
		writeError(w, Reply{Status: http.StatusBadRequest, Message: "API key not valid. Please pass a valid API key."})
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, Reply{Status: http.StatusBadRequest, Message: "modeltest: read body: " + err.Error()})
		return
	}
	req := &Request{Model: name, APIVersion: version, Raw: raw}
	if err := json.Unmarshal(raw, &req.Body); err != nil {
		writeError(w, Reply{Status: http.StatusBadRequest, Message: "Invalid JSON payload received. " + err.Error()})
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	var reply Reply
	if len(s.queue) > 0 {
		reply, s.queue = s.queue[0], s.queue[1:]
	} else {
		reply = s.handler(req)
	}
	s.mu.Unlock()

	if reply.Delay > 0 {
		select {
		case <-time.After(reply.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if reply.Status != 0 && reply.Status != http.StatusOK {
		writeError(w, reply)
		return
	}
	body, err := answer(req, reply)
	if err != nil {
		writeError(w, Reply{Status: http.StatusInternalServerError, Message: "modeltest: " + err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, r Reply) {
	status := r.ErrorStatus
	if status == "" {
		status = statusNames[r.Status]
	}
	if status == "" {
		status = "UNKNOWN"
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]any{
		"code": r.Status, "message": r.Message, "status": status,
	}})
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(r.Status)
	_, _ = w.Write(body)
}

// answer builds the REST GenerateContentResponse of reply.
func answer(req *Request, reply Reply) ([]byte, error) {
	version := reply.ModelVersion
	if version == "" {
		version = req.Model
	}
	usage := map[string]any{
		"promptTokenCount":     len(req.Raw) / 4,
		"candidatesTokenCount": len(reply.Text) / 4,
		"totalTokenCount":      len(req.Raw)/4 + len(reply.Text)/4,
	}
	if reply.BlockReason != "" {
		return json.Marshal(map[string]any{
			"promptFeedback": map[string]any{"blockReason": reply.BlockReason},
			"usageMetadata":  usage,
			"modelVersion":   version,
		})
	}
	finish := reply.FinishReason
	if finish == "" {
		finish = "STOP"
	}
	cand := map[string]any{
		"content":      map[string]any{"role": "model", "parts": []any{map[string]any{"text": reply.Text}}},
		"finishReason": finish,
		"index":        0,
	}
	if len(reply.Sources) > 0 || len(reply.Queries) > 0 {
		gm, err := groundingMetadata(reply)
		if err != nil {
			return nil, err
		}
		cand["groundingMetadata"] = gm
	}
	return json.Marshal(map[string]any{
		"candidates":    []any{cand},
		"usageMetadata": usage,
		"modelVersion":  version,
		"responseId":    fmt.Sprintf("modeltest-%d", time.Now().UnixNano()),
	})
}

func groundingMetadata(reply Reply) (map[string]any, error) {
	chunks := make([]any, len(reply.Sources))
	for i, src := range reply.Sources {
		chunks[i] = map[string]any{"web": map[string]any{"uri": src.URI, "title": src.Title}}
	}
	supports := make([]any, 0, len(reply.Supports))
	for _, sup := range reply.Supports {
		start := strings.Index(reply.Text, sup.Segment)
		if start < 0 {
			return nil, fmt.Errorf("support segment %q is not in the reply text", sup.Segment)
		}
		scores := make([]float64, len(sup.Chunks))
		for i := range scores {
			scores[i] = 0.9
		}
		seg := map[string]any{"endIndex": start + len(sup.Segment), "text": sup.Segment}
		if start > 0 {
			// The API leaves zero-valued fields out.
			seg["startIndex"] = start
		}
		supports = append(supports, map[string]any{
			"segment":               seg,
			"groundingChunkIndices": sup.Chunks,
			"confidenceScores":      scores,
		})
	}
	queries := reply.Queries
	if queries == nil {
		queries = []string{}
	}
	return map[string]any{
		"webSearchQueries":  queries,
		"groundingChunks":   chunks,
		"groundingSupports": supports,
		"searchEntryPoint":  map[string]any{"renderedContent": "<div class=\"container\">modeltest search suggestions</div>"},
	}, nil
}

// Auto answers any request plausibly: a request with a response schema gets
// a small instance of the schema (every property, one item per array, the
// first enum value, "example" for strings, 1 for numbers); a request with
// Google Search gets a grounded text citing two sources; anything else gets
// a short text.
func Auto(req *Request) Reply {
	if schema := req.Schema(); schema != nil {
		return JSONReply(Instance(schema))
	}
	if req.Search() {
		text := "The first source states the main finding. The second source adds a detail."
		return Reply{
			Text:    text,
			Queries: []string{firstLine(req.Prompt())},
			Sources: []Source{
				{URI: "https://vertexaisearch.cloud.google.com/grounding-api-redirect/modeltest-1", Title: "source-one.example"},
				{URI: "https://vertexaisearch.cloud.google.com/grounding-api-redirect/modeltest-2", Title: "source-two.example"},
			},
			Supports: []Support{
				{Segment: "The first source states the main finding.", Chunks: []int{0}},
				{Segment: "The second source adds a detail.", Chunks: []int{1}},
			},
		}
	}
	return Reply{Text: "modeltest answer"}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if len(line) > 80 {
		line = line[:80]
	}
	return line
}

// Instance returns a small value that satisfies schema, an OpenAPI schema
// object as the API receives it ("type": "OBJECT", "properties", "items",
// "enum", ...).
func Instance(schema map[string]any) any {
	if enum, ok := schema["enum"].([]any); ok && len(enum) > 0 {
		return enum[0]
	}
	switch strings.ToUpper(fmt.Sprint(schema["type"])) {
	case "OBJECT":
		out := map[string]any{}
		props, _ := schema["properties"].(map[string]any)
		for name, p := range props {
			if ps, ok := p.(map[string]any); ok {
				out[name] = Instance(ps)
			}
		}
		return out
	case "ARRAY":
		items, _ := schema["items"].(map[string]any)
		if items == nil {
			return []any{}
		}
		return []any{Instance(items)}
	case "INTEGER", "NUMBER":
		if min, ok := schema["minimum"].(float64); ok && min > 1 {
			return min
		}
		return 1
	case "BOOLEAN":
		return false
	default:
		return "example"
	}
}
