package evm

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"strings"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
)

// ParseKey parses a hex private key (RELAYER_KEY), with or without 0x.
func ParseKey(s string) (*ecdsa.PrivateKey, error) {
	key, err := crypto.HexToECDSA(strings.TrimPrefix(strings.TrimSpace(s), "0x"))
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	return key, nil
}

// DialChains connects to the JSON-RPC endpoint of each network
// (RPC_URL_<CHAIN> in rpc mode) and checks that it serves the chain the
// network names. On error it closes what it opened.
func DialChains(ctx context.Context, urls map[string]string) (map[string]*ethclient.Client, error) {
	clients := map[string]*ethclient.Client{}
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
	}
	for network, url := range urls {
		want, err := ChainID(network)
		if err != nil {
			closeAll()
			return nil, err
		}
		c, err := ethclient.DialContext(ctx, url)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("dial %s: %w", network, err)
		}
		clients[network] = c
		got, err := c.ChainID(ctx)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("dial %s: chain id: %w", network, err)
		}
		if got.Cmp(want) != 0 {
			closeAll()
			return nil, fmt.Errorf("dial %s: the endpoint serves chain %s", network, got)
		}
	}
	return clients, nil
}
