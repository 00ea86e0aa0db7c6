package evm

import (
	"crypto/ecdsa"
	"fmt"
	"strings"

	"github.com/ethereum/go-ethereum/crypto"
)

// ParseKey parses a hex private key (RELAYER_KEY), with or without 0x.
func ParseKey(s string) (*ecdsa.PrivateKey, error) {
	key, err := crypto.HexToECDSA(strings.TrimPrefix(strings.TrimSpace(s), "0x"))
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	return key, nil
}
