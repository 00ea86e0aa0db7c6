package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJobSucceededBinary: job.succeeded's binary form gives back what its
// JSON forms give back, with or without a transaction named before
// sending; ledger form 1 (Form1) and values the form does not hold
// are written as JSON; a value cut short or too long is refused.
func TestJobSucceededBinary(t *testing.T) {
	t.Parallel()
	result := json.RawMessage(`{"call_id":"c1","op":"diff","x":1}`)
	sum := sha256.Sum256(result)
	digest := hex.EncodeToString(sum[:])
	tests := []struct {
		name   string
		j      JobSucceeded
		binary bool
		// size is the binary form's length.
		size int
	}{
		{"a run's result", JobSucceeded{JobID: 602, Result: result, Attempt: 1, SettleJobID: 603}, true, 40},
		{"with the transaction named before sending", JobSucceeded{JobID: 602, Result: result, Attempt: 1, SettleJobID: 603,
			Transaction: "5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnb"}, true, 84},
		{"the digest only", JobSucceeded{JobID: 71, Bytes: 268, SHA256: digest}, true, 0},
		{"ledger form 1", JobSucceeded{JobID: 602, Result: result, Form1: true}, false, 0},
		{"a digest in upper case", JobSucceeded{JobID: 71, Bytes: 268, SHA256: "AB" + digest[2:]}, false, 0},
		{"a negative job", JobSucceeded{JobID: -1, Result: result}, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, ok := tt.j.MarshalEventBinary()
			require.Equal(t, tt.binary, ok)
			if !ok {
				return
			}
			if tt.size != 0 {
				require.Len(t, b, tt.size)
			}
			raw, err := json.Marshal(tt.j)
			require.NoError(t, err)
			var want, got JobSucceeded
			require.NoError(t, json.Unmarshal(raw, &want))
			require.NoError(t, got.UnmarshalEventBinary(b))
			require.Equal(t, want, got)
			e := Event{Type: EventJobSucceeded, Data: json.RawMessage(emptyData), Bin: b}
			got = JobSucceeded{}
			require.NoError(t, e.Decode(&got))
			require.Equal(t, want, got)
			for i := range b {
				require.Error(t, new(JobSucceeded).UnmarshalEventBinary(b[:i]), "cut at %d", i)
			}
			require.Error(t, new(JobSucceeded).UnmarshalEventBinary(append(b, 0)), "a byte too many")
		})
	}
}
