package evm

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"net/http"
	"strings"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
)

// ParseKey parses a hex private key (RELAYER_KEY), with or without 0x.
func ParseKey(s string) (*ecdsa.PrivateKey, error) {
	key, err := crypto.HexToECDSA(strings.TrimPrefix(strings.TrimSpace(s), "0x"))
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	return key, nil
}

// Dial connects to a JSON-RPC endpoint. Over HTTP its requests share kept-alive
// connections, as many as are in use at once: go-ethereum's default client
// keeps two idle connections per host, so concurrent settlements and
// verifications opened and closed a connection for nearly every request
// beyond two (60 sockets in TIME-WAIT 14 s into 50 paid calls/s in the split
// layout).
func Dial(ctx context.Context, url string) (*ethclient.Client, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = 256
	transport.MaxIdleConnsPerHost = 256
	c, err := rpc.DialOptions(ctx, url, rpc.WithHTTPClient(&http.Client{Transport: transport}))
	if err != nil {
		return nil, err
	}
	return ethclient.NewClient(c), nil
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
		c, err := Dial(ctx, url)
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
