package brief

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/model"
	"github.com/x402d/x402d/model/modeltest"
)

func setup(t *testing.T) *modeltest.Bundle[*Worker] {
	t.Helper()
	return modeltest.NewBundle(t, NewWorker)
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		q       string
		wantErr bool
	}{
		{"ok, five characters", "abcde", false},
		{"ok, four hundred characters", strings.Repeat("é", 400), false},
		{"ok, Japanese", "量子計算とは", false},
		{"ok, trimmed to five", "  abcde  ", false},
		{"nok, empty", "", true},
		{"nok, spaces", "     ", true},
		{"nok, four characters", "abcd", true},
		{"nok, four characters padded", "  abcd   ", true},
		{"nok, 401 characters", strings.Repeat("a", 401), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Input{Question: tt.q}.Validate(&jobs.DefaultLimits)
			if !tt.wantErr {
				require.NoError(t, err)
				return
			}
			var invalid *jobs.InvalidError
			require.ErrorAs(t, err, &invalid)
			require.Equal(t, "question", invalid.Field)
		})
	}
}

// researchReply is a grounded answer with three sources; the text itself
// names a URL, which must never become a source.
func researchReply() modeltest.Reply {
	text := "Rust 1.80 stabilised LazyLock. Its release notes list it (see https://from-model-text.example/rust). Adoption figures are unknown."
	return modeltest.Reply{
		Text:    text,
		Queries: []string{"rust 1.80 LazyLock"},
		Sources: []modeltest.Source{
			{URI: "https://vertexaisearch.cloud.google.com/grounding-api-redirect/AAA", Title: "blog.rust-lang.org"},
			{URI: "https://vertexaisearch.cloud.google.com/grounding-api-redirect/BBB", Title: "doc.rust-lang.org"},
			{URI: "https://vertexaisearch.cloud.google.com/grounding-api-redirect/AAA", Title: "blog.rust-lang.org (again)"},
			{URI: "ftp://not-web.example/file", Title: "not a web page"},
		},
		Supports: []modeltest.Support{
			{Segment: "Rust 1.80 stabilised LazyLock.", Chunks: []int{0, 1}},
			{Segment: "Its release notes list it", Chunks: []int{2}},
		},
	}
}

func TestWork(t *testing.T) {
	t.Parallel()

	t.Run("SourcesOnlyFromGrounding", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.Fake.Enqueue(researchReply(), modeltest.JSONReply(map[string]any{
			"brief": "Rust 1.80 added LazyLock [1]. See [the notes](https://vertexaisearch.cloud.google.com/grounding-api-redirect/AAA) " +
				"and [a made-up page](https://invented.example/page) or https://invented.example/bare [7]. It is documented [2, 9].\n\n## Sources\n1. https://invented.example/list",
			"key_findings": []map[string]any{
				{"text": "LazyLock is stable since Rust 1.80 [1] [5].", "sources": []int{2, 1, 2, 5}},
				{"text": "A claim citing a source the search did not return.", "sources": []int{7}},
				{"text": "A claim citing nothing.", "sources": []int{}},
				{"text": "  ", "sources": []int{1}},
			},
			"open_gaps": []string{"Adoption figures.", "", "- Adoption figures."},
		}))

		res, err := b.Worker.Work(context.Background(), Input{Question: "  What did Rust 1.80 stabilise?  "})
		require.NoError(t, err)
		require.Equal(t, "What did Rust 1.80 stabilise?", res.Question)

		// Sources: the grounding's web chunks, de-duplicated, numbered.
		require.Equal(t, []Source{
			{N: 1, URL: "https://vertexaisearch.cloud.google.com/grounding-api-redirect/AAA", Title: "blog.rust-lang.org"},
			{N: 2, URL: "https://vertexaisearch.cloud.google.com/grounding-api-redirect/BBB", Title: "doc.rust-lang.org"},
		}, res.Sources)
		// The finding citing only a missing source, and the empty ones, are
		// dropped; missing numbers are removed from the one that stays.
		require.Equal(t, []Finding{{Text: "LazyLock is stable since Rust 1.80.", Sources: []int{1, 2}}}, res.KeyFindings)
		require.Equal(t, []string{"Adoption figures."}, res.OpenGaps)
		require.Equal(t, "gemini-2.5-flash", res.Model)

		// The Markdown has no URL that is not a source, and every citation
		// mark names an existing source.
		require.NotContains(t, res.Brief, "invented.example")
		require.NotContains(t, res.Brief, "from-model-text.example")
		for _, m := range citation.FindAllStringSubmatch(res.Brief, -1) {
			for _, part := range strings.Split(m[1], ",") {
				n := strings.TrimSpace(part)
				require.Contains(t, []string{"1", "2"}, n, "citation %s in %q", m[0], res.Brief)
			}
		}
		require.Contains(t, res.Brief, "[the notes](https://vertexaisearch.cloud.google.com/grounding-api-redirect/AAA)")
		require.Contains(t, res.Brief, "a made-up page")
		require.Contains(t, res.Brief, "It is documented [2].")
		require.Equal(t, 1, strings.Count(res.Brief, "## Sources"))
		require.Contains(t, res.Brief, "2. [doc.rust-lang.org](https://vertexaisearch.cloud.google.com/grounding-api-redirect/BBB)")
		require.True(t, strings.HasPrefix(res.Brief, "# What did Rust 1.80 stabilise?\n"))

		// Two calls: grounded research without a schema, then the
		// structured brief with a schema and no search.
		reqs := b.Fake.Requests()
		require.Len(t, reqs, 2)
		require.True(t, reqs[0].Search())
		require.Nil(t, reqs[0].Schema())
		require.Contains(t, reqs[0].Prompt(), "What did Rust 1.80 stabilise?")
		require.False(t, reqs[1].Search())
		require.NotNil(t, reqs[1].Schema())
		p := reqs[1].Prompt()
		// Citation marks placed from the grounding supports.
		require.Contains(t, p, "Rust 1.80 stabilised LazyLock.[1][2] Its release notes list it[1] (see")
		require.Contains(t, p, "[1] blog.rust-lang.org\n[2] doc.rust-lang.org\n")
		require.NotContains(t, p, "grounding-api-redirect", "the model sees numbers and titles, not URLs")
	})

	t.Run("NoSourcesIsRetryable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.Fake.Enqueue(modeltest.Reply{Text: "An answer without grounding, citing https://made-up.example/."})
		_, err := b.Worker.Work(context.Background(), Input{Question: "Anything at all?"})
		require.Error(t, err)
		require.True(t, model.Retryable(err))
		require.Len(t, b.Fake.Requests(), 1, "no structuring call without sources")
	})

	t.Run("NoValidFindingIsRetryable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.Fake.Enqueue(researchReply(), modeltest.JSONReply(map[string]any{
			"brief":        "Text.",
			"key_findings": []map[string]any{{"text": "cites only a missing source", "sources": []int{3}}},
			"open_gaps":    []string{},
		}))
		_, err := b.Worker.Work(context.Background(), Input{Question: "What did Rust 1.80 stabilise?"})
		require.Error(t, err)
		require.True(t, model.Retryable(err))
	})

	t.Run("ModelErrors", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.Fake.Enqueue(modeltest.ErrorReply(http.StatusTooManyRequests, "Resource has been exhausted (e.g. check quota)."))
		_, err := b.Worker.Work(context.Background(), Input{Question: "What did Rust 1.80 stabilise?"})
		require.True(t, model.Retryable(err), "%v", err)

		b.Fake.Enqueue(researchReply(), modeltest.ErrorReply(http.StatusInternalServerError, "An internal error has occurred."))
		_, err = b.Worker.Work(context.Background(), Input{Question: "What did Rust 1.80 stabilise?"})
		require.True(t, model.Retryable(err), "%v", err)

		b.Fake.Enqueue(modeltest.ErrorReply(http.StatusBadRequest, "User location is not supported for the API use."))
		_, err = b.Worker.Work(context.Background(), Input{Question: "What did Rust 1.80 stabilise?"})
		require.Error(t, err)
		require.False(t, model.Retryable(err), "%v", err)
	})

	t.Run("DefaultFakeAnswers", func(t *testing.T) {
		t.Parallel()
		// The fake's default handler gives a valid brief, for end-to-end
		// tests that do not script answers.
		b := setup(t)
		res, err := b.Worker.Work(context.Background(), Input{Question: "Is the default fake enough?"})
		require.NoError(t, err)
		require.Len(t, res.Sources, 2)
		require.NotEmpty(t, res.KeyFindings)
	})
}

func TestAnnotateUTF8(t *testing.T) {
	t.Parallel()
	text := "量子は速い。次の文。"
	g := &model.Grounding{
		Chunks:   []model.Chunk{{URI: "https://a.example/"}},
		Supports: []model.Support{{Start: 0, End: len("量子は速い。"), Chunks: []int{0}}, {Start: 0, End: 4, Chunks: []int{0}}},
	}
	got := annotate(text, g, map[int]int{0: 1})
	require.True(t, strings.HasPrefix(got, "量子[1]は速い。[1]次の文。"), got)
}

func TestCleanBodyLength(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("A sentence of some length. ", 200)
	got := cleanBody(long, nil)
	require.LessOrEqual(t, len([]rune(got)), maxBodyChars)
	require.True(t, strings.HasSuffix(got, "."), got[len(got)-20:])
}

func TestOutputExample(t *testing.T) {
	t.Parallel()
	body, err := json.Marshal(Op.OutputExample)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	for _, k := range []string{"question", "brief", "key_findings", "sources", "open_gaps", "model"} {
		require.Contains(t, m, k)
	}
	body, err = json.Marshal(Op.InputExample)
	require.NoError(t, err)
	_, err = Op.Decode("c1", body, &jobs.DefaultLimits)
	require.NoError(t, err)
}
