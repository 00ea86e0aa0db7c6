package x402

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSettleResponseLedgerBinary(t *testing.T) {
	t.Parallel()
	const base = "eip155:8453"
	hash := "0x6e903cbc43593f02da852e18c9d8988cf9e22542bde8e1e4356ff630739b092c"
	tests := []struct {
		name string
		r    SettleResponse
		// size is the packed form's length, when the test pins it.
		size int
	}{
		{"evm", SettleResponse{Success: true, Payer: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f", Transaction: hash, Network: base}, 61},
		{"evm lower-case payer", SettleResponse{Success: true, Payer: "0x23618e81e3f5cdf7f54c3d65f7fbc0abf5b21e8f", Transaction: hash, Network: base}, 61},
		{"upper-case hash kept as it is", SettleResponse{Success: true, Payer: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f", Transaction: strings.ToUpper(hash[:4]) + hash[4:], Network: base}, 0},
		{"hash without 0x", SettleResponse{Success: true, Transaction: hash[2:], Network: base}, 0},
		{"solana", SettleResponse{Success: true, Payer: "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin",
			Transaction: "5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnbJLgp8uirBgmQpjKhoR4tjF3ZpRzrFmBV6UjKdiSZkQUW", Network: "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"}, 0},
		{"failed", SettleResponse{ErrorReason: "invalid_exact_evm_nonce_used", Payer: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f", Network: base}, 0},
		{"other network", SettleResponse{Success: true, Transaction: hash, Network: "eip155:84532"}, 0},
		{"empty", SettleResponse{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := tt.r.MarshalLedgerBinary(base)
			if tt.size != 0 {
				require.Len(t, b, tt.size)
			}
			var got SettleResponse
			require.NoError(t, got.UnmarshalLedgerBinary(b, base))
			require.Equal(t, tt.r, got)
			// Every shorter prefix is refused, never misread.
			for i := range b {
				require.Error(t, new(SettleResponse).UnmarshalLedgerBinary(b[:i], base), "prefix %d", i)
			}
			require.Error(t, new(SettleResponse).UnmarshalLedgerBinary(append(b, 0), base), "trailing byte")
		})
	}
}
