package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/x402d/x402d/model"
	"github.com/x402d/x402d/model/modeltest"
)

type testBundle struct {
	fake   *modeltest.Server
	client *model.Client
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	fake := modeltest.NewServer(t)
	client := fake.Client(t)
	return &testBundle{fake: fake, client: client}
}

var answerSchema = &genai.Schema{
	Type: genai.TypeObject,
	Properties: map[string]*genai.Schema{
		"verdict": {Type: genai.TypeString, Enum: []string{"yes", "no"}},
		"score":   {Type: genai.TypeInteger},
	},
	Required: []string{"verdict", "score"},
}

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("NoKey", func(t *testing.T) {
		t.Parallel()
		_, err := model.New(context.Background(), &model.Config{BaseURL: "http://127.0.0.1:1"})
		require.ErrorIs(t, err, model.ErrNoAPIKey)
		_, err = model.New(context.Background(), nil)
		require.ErrorIs(t, err, model.ErrNoAPIKey)
	})

	t.Run("DefaultModel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, model.DefaultModel, b.client.Model())
		_, err := b.client.Generate(context.Background(), &model.Request{Prompt: "hello"})
		require.NoError(t, err)
		reqs := b.fake.Requests()
		require.Len(t, reqs, 1)
		require.Equal(t, "gemini-2.5-flash", reqs[0].Model)
		require.Equal(t, "v1beta", reqs[0].APIVersion)
	})
}

func TestGenerate(t *testing.T) {
	t.Parallel()

	t.Run("SendsPromptSystemAndBound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fake.Enqueue(modeltest.Reply{Text: "an answer", ModelVersion: "gemini-2.5-flash-001"})
		resp, err := b.client.Generate(context.Background(), &model.Request{System: "be brief", Prompt: "what is 2+2?", MaxOutputTokens: 100})
		require.NoError(t, err)
		require.Equal(t, "an answer", resp.Text)
		require.Equal(t, "gemini-2.5-flash-001", resp.ModelVersion)
		require.Equal(t, "STOP", resp.FinishReason)
		require.Nil(t, resp.Grounding)

		req := b.fake.Requests()[0]
		require.Equal(t, "what is 2+2?", req.Prompt())
		require.Equal(t, "be brief", req.System())
		require.Equal(t, 100, req.MaxOutputTokens())
		require.Nil(t, req.Schema())
		require.False(t, req.Search())
	})

	t.Run("OutputBoundNeverAboveClient", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.client.Generate(context.Background(), &model.Request{Prompt: "x", MaxOutputTokens: 1 << 20})
		require.NoError(t, err)
		require.Equal(t, 8192, b.fake.Requests()[0].MaxOutputTokens())
	})

	t.Run("Grounding", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		text := "Go 1.26 was released. It has a new GC."
		b.fake.Enqueue(modeltest.Reply{
			Text:    text,
			Queries: []string{"go 1.26 release"},
			Sources: []modeltest.Source{{URI: "https://go.dev/doc/go1.26", Title: "go.dev"}, {URI: "https://example.org/gc", Title: "example.org"}},
			Supports: []modeltest.Support{
				{Segment: "Go 1.26 was released.", Chunks: []int{0}},
				{Segment: "It has a new GC.", Chunks: []int{0, 1}},
			},
		})
		resp, err := b.client.Generate(context.Background(), &model.Request{Prompt: "go 1.26?", Search: true})
		require.NoError(t, err)
		require.True(t, b.fake.Requests()[0].Search())
		g := resp.Grounding
		require.NotNil(t, g)
		require.Equal(t, []string{"go 1.26 release"}, g.Queries)
		require.Equal(t, []model.Chunk{{URI: "https://go.dev/doc/go1.26", Title: "go.dev"}, {URI: "https://example.org/gc", Title: "example.org"}}, g.Chunks)
		require.Len(t, g.Supports, 2)
		require.Equal(t, 0, g.Supports[0].Start)
		require.Equal(t, "Go 1.26 was released.", text[g.Supports[0].Start:g.Supports[0].End])
		require.Equal(t, "It has a new GC.", text[g.Supports[1].Start:g.Supports[1].End])
		require.Equal(t, []int{0, 1}, g.Supports[1].Chunks)
	})

	t.Run("Schema", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fake.Enqueue(modeltest.Reply{Text: "```json\n{\"verdict\":\"no\",\"score\":3}\n```"})
		var out struct {
			Verdict string `json:"verdict"`
			Score   int    `json:"score"`
		}
		_, err := b.client.GenerateJSON(context.Background(), &model.Request{Prompt: "judge", Schema: answerSchema}, &out)
		require.NoError(t, err)
		require.Equal(t, "no", out.Verdict)
		require.Equal(t, 3, out.Score)

		req := b.fake.Requests()[0]
		require.Equal(t, "application/json", req.Body.GenerationConfig.ResponseMIMEType)
		schema := req.Schema()
		require.Equal(t, "OBJECT", schema["type"])
		require.ElementsMatch(t, []any{"verdict", "score"}, schema["required"])
	})

	t.Run("SchemaAutoInstance", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var out map[string]any
		_, err := b.client.GenerateJSON(context.Background(), &model.Request{Prompt: "judge", Schema: answerSchema}, &out)
		require.NoError(t, err)
		require.Equal(t, map[string]any{"verdict": "yes", "score": float64(1)}, out)
	})

	t.Run("MalformedJSONIsRetryable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fake.Enqueue(modeltest.Reply{Text: `{"verdict":"ye`, FinishReason: "MAX_TOKENS"})
		var out map[string]any
		_, err := b.client.GenerateJSON(context.Background(), &model.Request{Prompt: "judge", Schema: answerSchema}, &out)
		require.Error(t, err)
		require.True(t, model.Retryable(err))
		require.Contains(t, err.Error(), "MAX_TOKENS")
	})
}

func TestErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name          string
		reply         modeltest.Reply
		wantStatus    int
		wantRetryable bool
	}{
		{"RateLimited", modeltest.ErrorReply(http.StatusTooManyRequests, "Resource has been exhausted (e.g. check quota)."), 429, true},
		{"Internal", modeltest.ErrorReply(http.StatusInternalServerError, "An internal error has occurred."), 500, true},
		{"Unavailable", modeltest.ErrorReply(http.StatusServiceUnavailable, "The model is overloaded. Please try again later."), 503, true},
		{"InvalidArgument", modeltest.ErrorReply(http.StatusBadRequest, "Request contains an invalid argument."), 400, false},
		{"NotFound", modeltest.ErrorReply(http.StatusNotFound, "models/gemini-0 is not found for API version v1beta"), 404, false},
		{"PromptBlocked", modeltest.Reply{BlockReason: "SAFETY"}, 0, false},
		{"AnswerWithheld", modeltest.Reply{Text: "", FinishReason: "SAFETY"}, 0, false},
		{"EmptyAnswer", modeltest.Reply{Text: "", FinishReason: "OTHER"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.fake.Enqueue(tt.reply)
			_, err := b.client.Generate(context.Background(), &model.Request{Prompt: "hello"})
			require.Error(t, err)
			var me *model.Error
			require.True(t, errors.As(err, &me), "%T %v", err, err)
			require.Equal(t, tt.wantStatus, me.Status)
			require.Equal(t, tt.wantRetryable, model.Retryable(err), "%v", err)
			// The SDK did not retry on its own: one request only.
			require.Len(t, b.fake.Requests(), 1)
		})
	}

	t.Run("WrongKey", func(t *testing.T) {
		t.Parallel()
		fake := modeltest.NewServer(t)
		cfg := fake.Config()
		cfg.APIKey = "wrong"
		client, err := model.New(context.Background(), cfg)
		require.NoError(t, err)
		_, err = client.Generate(context.Background(), &model.Request{Prompt: "hello"})
		require.Error(t, err)
		require.False(t, model.Retryable(err))
		require.Contains(t, err.Error(), "API key not valid")
	})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		fake := modeltest.NewServer(t)
		cfg := fake.Config()
		cfg.Timeout = 100 * time.Millisecond
		client, err := model.New(context.Background(), cfg)
		require.NoError(t, err)
		fake.Enqueue(modeltest.Reply{Text: "late", Delay: 2 * time.Second})
		start := time.Now()
		_, err = client.Generate(context.Background(), &model.Request{Prompt: "hello"})
		require.Error(t, err)
		require.Less(t, time.Since(start), time.Second)
		require.True(t, model.Retryable(err), "%v", err)
		require.Contains(t, err.Error(), "timed out")
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		client, err := model.New(context.Background(), &model.Config{APIKey: "k", BaseURL: "http://127.0.0.1:1", Timeout: time.Second})
		require.NoError(t, err)
		_, err = client.Generate(context.Background(), &model.Request{Prompt: "hello"})
		require.Error(t, err)
		require.True(t, model.Retryable(err), "%v", err)
	})

	t.Run("CallerCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fake.Enqueue(modeltest.Reply{Text: "late", Delay: 2 * time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := b.client.Generate(ctx, &model.Request{Prompt: "hello"})
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, model.Retryable(err))
	})
}

// TestWireFormat checks the raw body the SDK sends, field by field as the
// REST API documents it, so the fake's parsing is not what is being tested.
func TestWireFormat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	temp := float32(0.2)
	_, err := b.client.Generate(context.Background(), &model.Request{System: "sys", Prompt: "p", Schema: answerSchema, Temperature: &temp, MaxOutputTokens: 256})
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.Unmarshal(b.fake.Requests()[0].Raw, &body))
	gc := body["generationConfig"].(map[string]any)
	require.Equal(t, float64(256), gc["maxOutputTokens"])
	require.Equal(t, "application/json", gc["responseMimeType"])
	require.InDelta(t, 0.2, gc["temperature"], 1e-6)
	require.Contains(t, gc, "responseSchema")
	require.Equal(t, "sys", body["systemInstruction"].(map[string]any)["parts"].([]any)[0].(map[string]any)["text"])
	contents := body["contents"].([]any)
	require.Len(t, contents, 1)
	require.Equal(t, "user", contents[0].(map[string]any)["role"])
	require.True(t, strings.Contains(string(b.fake.Requests()[0].Raw), `"text":"p"`))
}
