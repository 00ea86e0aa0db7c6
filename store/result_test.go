package store

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResultObject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, fields, want string
	}{
		{"fields", `{"x":1,"y":[2]}`, `{"call_id":"c1","op":"diff","x":1,"y":[2]}`},
		{"empty", `{}`, `{"call_id":"c1","op":"diff"}`},
		{"spaced", ` { "x" : 1 } `, `{"call_id":"c1","op":"diff","x" : 1 }`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ResultObject("c1", "diff", []byte(tt.fields))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
			fields, ok := resultFields(got, "c1", "diff")
			require.True(t, ok)
			back, err := callResult(fields, "c1", "diff")
			require.NoError(t, err)
			require.Equal(t, tt.want, string(back), "the row's fields answer the same bytes")
		})
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{`, `1`} {
		_, err := ResultObject("c1", "diff", []byte(bad))
		require.Error(t, err, bad)
	}
}

// TestResultFields: a result is kept without its head only when putting
// the head back gives the same bytes; anything else is kept whole, and read
// back as it is.
func TestResultFields(t *testing.T) {
	t.Parallel()
	for _, result := range []string{
		`{"call_id":"c2","op":"diff","x":1}`,  // another call
		`{"call_id":"c1","op":"regex","x":1}`, // another op
		`{"call_id":"c1","op":"diff", "x":1}`, // spaced otherwise
		`{"call_id":"c1","op":"diff",}`,       // not JSON
		`{"op":"diff","call_id":"c1","x":1}`,  // another order
		`{"call_id": "c1","op":"diff","x":1}`, // spaced
		`{"x":1}`,                             // no head
	} {
		_, ok := resultFields([]byte(result), "c1", "diff")
		require.False(t, ok, result)
		if strings.HasPrefix(result, resultHead) {
			back, err := callResult([]byte(result), "c1", "diff")
			require.NoError(t, err)
			require.Equal(t, result, string(back), "kept whole, read as it is")
		}
	}
}
