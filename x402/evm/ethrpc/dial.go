package ethrpc

import (
	"context"
	"fmt"
	"net/http"

	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
)

// Dial connects to a JSON-RPC endpoint. Over HTTP its requests share kept-alive
// connections, as many as are in use at once (newTransport).
func Dial(ctx context.Context, url string) (*ethclient.Client, error) {
	c, err := rpc.DialOptions(ctx, url, rpc.WithHTTPClient(&http.Client{Transport: newTransport()}))
	if err != nil {
		return nil, err
	}
	return ethclient.NewClient(c), nil
}

// newTransport returns the HTTP transport of a JSON-RPC client: its
// requests share kept-alive connections, as many as are in use at once.
// go-ethereum's default client keeps two idle connections per host, so
// concurrent settlements and verifications would open and close a
// connection for nearly every request beyond two, leaving sockets in
// TIME-WAIT.
func newTransport() *http.Transport {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = 256
	transport.MaxIdleConnsPerHost = 256
	return transport
}

// DialChains starts the Endpoints of each network (RPC_URL_<CHAIN>: one URL
// or several), each checked to serve the chain the network names, with the
// settings of cfg (its Network and URLs are set per network; nil: the
// defaults). On error it stops what it started. The caller stops the
// others.
func DialChains(ctx context.Context, urls map[string][]string, cfg *Config) (map[string]*Endpoints, error) {
	out := map[string]*Endpoints{}
	stopAll := func() {
		for _, e := range out {
			e.Stop()
		}
	}
	for network, list := range urls {
		c := Config{}
		if cfg != nil {
			c = *cfg
		}
		c.Network, c.URLs = network, list
		e, err := New(ctx, &c)
		if err != nil {
			stopAll()
			return nil, err
		}
		if err := e.Start(ctx); err != nil {
			e.Stop()
			stopAll()
			return nil, fmt.Errorf("dial %s: %w", network, err)
		}
		out[network] = e
	}
	return out, nil
}
