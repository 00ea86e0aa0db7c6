package jobs_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/brief"
	"github.com/x402d/x402d/jobs/codereview"
	"github.com/x402d/x402d/jobs/csvjson"
	"github.com/x402d/x402d/jobs/dataclean"
	"github.com/x402d/x402d/jobs/diff"
	"github.com/x402d/x402d/jobs/regex"
	"github.com/x402d/x402d/jobs/urlmeta"
)

// resolved returns op's result schema, ready to validate.
func resolved(t *testing.T, op jobs.Operation) *jsonschema.Resolved {
	t.Helper()
	m, err := op.ResultSchema()
	require.NoError(t, err)
	raw, err := json.Marshal(m)
	require.NoError(t, err)
	var s jsonschema.Schema
	require.NoError(t, json.Unmarshal(raw, &s))
	r, err := s.Resolve(nil)
	require.NoError(t, err)
	return r
}

// asCall returns result as a call answers it: with its call_id and op.
func asCall(t *testing.T, op string, result any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(result)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	m["call_id"], m["op"] = "c1", op
	return m
}

func TestResultSchema(t *testing.T) {
	t.Parallel()
	unmatched, err := regex.Work(context.Background(), regex.Input{Pattern: `(a)|(b)`, Text: "b", Flags: "g"})
	require.NoError(t, err)
	csv, err := csvjson.Work(context.Background(), csvjson.Input{Data: "a,b\n1,x\n", To: "json"})
	require.NoError(t, err)
	tests := []struct {
		name   string
		op     jobs.Operation
		result any
		valid  bool
	}{
		{"brief example", brief.Op, brief.Op.OutputExample, true},
		{"code-review example", codereview.Op, codereview.Op.OutputExample, true},
		{"csv-json example", csvjson.Op, csvjson.Op.OutputExample, true},
		{"csv-json rows (any JSON in output)", csvjson.Op, csv, true},
		{"data-clean example", dataclean.Op, dataclean.Op.OutputExample, true},
		{"diff example", diff.Op, diff.Op.OutputExample, true},
		{"regex example", regex.Op, regex.Op.OutputExample, true},
		{"regex with an unmatched group (null value)", regex.Op, unmatched, true},
		{"url-meta example", urlmeta.Op, urlmeta.Op.OutputExample, true},
		{"url-meta without a title (null)", urlmeta.Op, urlmeta.Result{URL: "https://example.com/", OG: map[string]string{}, Twitter: map[string]string{}}, true},
		{"another operation's result", regex.Op, diff.Op.OutputExample, false},
		{"a count that is a string", regex.Op, map[string]any{"engine": "re2", "flags": "", "match_count": "1", "truncated": false, "matches": []any{}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := resolved(t, tt.op).Validate(asCall(t, tt.op.Name, tt.result))
			if tt.valid {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

// TestCatalogueTextIsLatin1 keeps what a quote carries (the bazaar
// extension holds the description, schemas and examples) within Latin-1:
// Cloudflare's agents client encodes the PaymentPayload, which echoes the
// extension, with btoa, which throws on any other character, and so could
// not pay.
func TestCatalogueTextIsLatin1(t *testing.T) {
	t.Parallel()
	for _, op := range []jobs.Operation{brief.Op, codereview.Op, csvjson.Op, dataclean.Op, diff.Op, regex.Op, urlmeta.Op} {
		raw, err := json.Marshal([]any{op.Name, op.Price, op.Description, op.InputExample, op.InputSchema, op.OutputExample})
		require.NoError(t, err)
		for i, r := range string(raw) {
			if r > 0xFF {
				t.Errorf("%s: %q at byte %d of its catalogue entry", op.Name, r, i)
				break
			}
		}
	}
}
