package x402

import (
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"
)

func TestNetworks(t *testing.T) {
	t.Parallel()
	// Spec 2.1: the primary network first, then the others in its order.
	require.Equal(t, []string{"eip155:8453", "eip155:42161", "eip155:137", "eip155:43114", "eip155:1329", "eip155:196",
		"solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"}, NetworkIDs())
	for _, n := range Networks() {
		require.Equal(t, 6, n.Decimals, n.ID)
		got, ok := NetworkByID(n.ID)
		require.True(t, ok)
		require.Equal(t, n, got)
		switch n.Namespace() {
		case "eip155":
			require.True(t, common.IsHexAddress(n.Asset), n.ID)
			require.Equal(t, common.HexToAddress(n.Asset).Hex(), n.Asset, "%s: the asset is EIP-55 checksummed", n.ID)
			require.NotEmpty(t, n.Name, n.ID)
			require.NotEmpty(t, n.Version, n.ID)
		case "solana":
			require.True(t, ValidSolanaAddress(n.Asset), n.ID)
			require.Empty(t, n.Name+n.Version, n.ID)
		default:
			t.Fatalf("namespace of %s", n.ID)
		}
	}
	_, ok := NetworkByID("eip155:1")
	require.False(t, ok)
}

func TestNormalizeNetwork(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"base": "eip155:8453", "Base-Sepolia": "eip155:84532", "eip155:137": "eip155:137", "EIP155:10": "eip155:10",
		"solana": SolanaMainnet, "solana-devnet": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", " polygon ": "eip155:137",
		"avalanche": "eip155:43114", "sei": "eip155:1329", "xlayer": "eip155:196", "arbitrum": "eip155:42161",
		// The reference of a CAIP-2 id is case-sensitive.
		"Solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp": SolanaMainnet, "xrpl:0": "xrpl:0", "stellar:pubnet": "stellar:pubnet",
	} {
		got, ok := NormalizeNetwork(in)
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "nonsense", ":", "eip155:", ":1", "e:1", "eip155:1 2", "eip155:1/2", "toolongnamespace:1", "eip155:<script>"} {
		_, ok := NormalizeNetwork(bad)
		require.False(t, ok, bad)
	}
}
