package evm

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
)

func TestParseFinality(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		name      string
		given     string
		expect    FinalityPolicy
		expectErr bool
	}{
		{name: "ok, safe", given: "safe", expect: FinalityPolicy{Tag: FinalitySafe}},
		{name: "ok, finalized with spaces and capitals", given: " Finalized ", expect: FinalityPolicy{Tag: FinalityFinalized}},
		{name: "ok, depth", given: "depth:12", expect: FinalityPolicy{Depth: 12}},
		{name: "ok, receipt", given: "receipt", expect: FinalityPolicy{}},
		{name: "ok, depth 0 is the receipt", given: "depth:0", expect: FinalityPolicy{}},
		{name: "nok, latest", given: "latest", expectErr: true},
		{name: "nok, depth without a number", given: "depth:", expectErr: true},
		{name: "nok, negative depth", given: "depth:-1", expectErr: true},
		{name: "nok, a bare number", given: "12", expectErr: true},
		{name: "nok, empty", given: "", expectErr: true},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseFinality(tc.given)
			if tc.expectErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.expect, got)
			again, err := ParseFinality(got.String())
			require.NoError(t, err)
			require.Equal(t, got, again, "String reads back")
		})
	}
}

func TestDefaultFinality(t *testing.T) {
	t.Parallel()
	require.Equal(t, FinalityPolicy{Tag: FinalitySafe}, DefaultFinality("eip155:8453"))
	require.Equal(t, FinalityPolicy{Tag: FinalityFinalized}, DefaultFinality("eip155:137"))
	require.Equal(t, FinalityPolicy{Tag: FinalityFinalized}, DefaultFinality("eip155:31337"), "a network not listed")
	require.False(t, DefaultFinality("eip155:8453").AtReceipt())
	require.True(t, FinalityPolicy{}.AtReceipt())
}

// TestDefaultFinality_EveryNetwork reads the finality of every EVM network
// of the table: a misspelt entry would fall back to "finalized" unseen.
func TestDefaultFinality_EveryNetwork(t *testing.T) {
	t.Parallel()
	for _, n := range x402.Networks() {
		if n.Namespace() != "eip155" {
			continue
		}
		_, err := ParseFinality(n.Finality)
		require.NoError(t, err, n.ID)
	}
}
