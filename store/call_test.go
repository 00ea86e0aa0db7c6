package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStoredResult keeps results without their call_id and op and serves
// them back byte for byte; results written whole before are served as kept.
func TestStoredResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, id, result, stored string
	}{
		{"fields", "c1", `{"call_id":"c1","op":"regex","engine":"re2","matches":[]}`, `{"engine":"re2","matches":[]}`},
		{"no fields", "c1", `{"call_id":"c1","op":"diff"}`, `{}`},
		{"spacing kept", "c1", `{"call_id":"c1","op":"diff","a": [1, 2] }`, `{"a": [1, 2] }`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored, err := storedResult(tc.id, []byte(tc.result))
			require.NoError(t, err)
			require.Equal(t, tc.stored, stored)
			op := "regex"
			if tc.name != "fields" {
				op = "diff"
			}
			require.Equal(t, tc.result, string(servedResult(tc.id, op, []byte(stored))))
			require.Equal(t, tc.result, string(servedResult(tc.id, op, []byte(tc.result))), "a row written whole")
		})
	}
	for _, bad := range []string{
		`{"x":1}`,
		`{"call_id":"c2","op":"diff","x":1}`,
		`{"call_id":"c1","op":"di\"ff","x":1}`,
		`{"call_id":"c1","op":"diff"`,
		`{"call_id":"c1","op":"diff" ,"x":1}`,
		``,
	} {
		_, err := storedResult("c1", []byte(bad))
		require.Error(t, err, bad)
	}
}
