package store_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// TestSettlementMinedJSON writes settlement.mined's hashes of 32 bytes as
// their bytes and others as they are, reads both back whole, and leaves
// the calls out.
func TestSettlementMinedJSON(t *testing.T) {
	t.Parallel()
	const tx, block = "0x5e7a11ed00000000000000000000000000000000000000000000000000c0ffee", "0xb10c000000000000000000000000000000000000000000000000000000000001"
	tests := []struct {
		name string
		in   store.SettlementMined
		want string
	}{
		{"hashes of 32 bytes", store.SettlementMined{Transaction: tx, Block: x402.SettledBlock{Number: 34_567_890, Hash: block}, Calls: []string{"c1", "c2"}},
			`{"tx":"XnoR7QAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAADA/+4=","block":34567890,"hash":"sQwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE="}`},
		{"upper-case hex kept", store.SettlementMined{Transaction: "0x5E7A11ED00000000000000000000000000000000000000000000000000C0FFEE", Block: x402.SettledBlock{Number: 1, Hash: block}},
			`{"transaction":"0x5E7A11ED00000000000000000000000000000000000000000000000000C0FFEE","block":1,"hash":"sQwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE="}`},
		{"short hashes kept", store.SettlementMined{Transaction: "0x01", Block: x402.SettledBlock{Number: 2, Hash: "0x02"}},
			`{"transaction":"0x01","block":2,"block_hash":"0x02"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.in)
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(b))
			var back store.SettlementMined
			require.NoError(t, json.Unmarshal(b, &back))
			want := tt.in
			want.Calls = nil
			require.Equal(t, want, back)
		})
	}
}
