package evm_test

import (
	"testing"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	// Development account 8, the devchain's relayer.
	for _, s := range []string{
		"0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
		"dbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97\n",
	} {
		key, err := evm.ParseKey(s)
		require.NoError(t, err)
		require.Equal(t, chain.Account(devchain.RelayerAccount).Address, crypto.PubkeyToAddress(key.PublicKey))
	}
	_, err := evm.ParseKey("0x1234")
	require.Error(t, err)
}
