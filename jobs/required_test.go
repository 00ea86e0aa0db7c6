package jobs_test

import (
	"encoding/json"
	"errors"
	"testing"

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

// TestRequiredFields: on every operation, a request without one of its
// required fields (contract.md), or with it null, is refused naming the
// field, even where the field's zero value is valid input; the catalogue
// example with every field decodes.
func TestRequiredFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		op       jobs.Operation
		required []string
	}{
		{regex.Op, []string{"pattern"}},
		{diff.Op, []string{"a", "b"}},
		{csvjson.Op, []string{"data"}},
		{urlmeta.Op, []string{"url"}},
		{brief.Op, []string{"question"}},
		{dataclean.Op, []string{"data"}},
		{codereview.Op, []string{"code", "language"}},
	}
	for _, tt := range tests {
		t.Run(tt.op.Name, func(t *testing.T) {
			t.Parallel()
			example, err := json.Marshal(tt.op.InputExample)
			require.NoError(t, err)
			_, err = tt.op.Decode("c1", example, &jobs.DefaultLimits)
			require.NoError(t, err)
			for _, field := range tt.required {
				for _, mode := range []string{"missing", "null"} {
					var body map[string]any
					require.NoError(t, json.Unmarshal(example, &body))
					require.Contains(t, body, field, "the example has every required field")
					if mode == "missing" {
						delete(body, field)
					} else {
						body[field] = nil
					}
					raw, err := json.Marshal(body)
					require.NoError(t, err)
					_, err = tt.op.Decode("c1", raw, &jobs.DefaultLimits)
					var invalid *jobs.InvalidError
					require.True(t, errors.As(err, &invalid), "%s %s: %v", field, mode, err)
					require.Equal(t, field, invalid.Field, "%s %s: %v", field, mode, err)
					require.Contains(t, invalid.Message, "is required", "%s %s", field, mode)
				}
			}
		})
	}
}

// TestEmptyStringIsAValue: a required field present as "" is the value ""
// where the operation accepts it, as in JavaScript: the empty regex
// matches at every position, an empty text is diffed.
func TestEmptyStringIsAValue(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		op   jobs.Operation
		body string
	}{
		{regex.Op, `{"pattern":"","text":"ab","flags":"g"}`},
		{diff.Op, `{"a":"","b":""}`},
	} {
		_, err := tt.op.Decode("c1", []byte(tt.body), &jobs.DefaultLimits)
		require.NoError(t, err, tt.op.Name)
	}
}
