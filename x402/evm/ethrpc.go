package evm

import (
	"context"

	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// The chain's JSON-RPC client is package ethrpc; these are the names of it
// that the service's wiring takes from evm.
type (
	// Backend is what settlement needs from a chain (ethrpc.Backend).
	// *ethclient.Client and *Endpoints satisfy it.
	Backend = ethrpc.Backend
	// Endpoints is a Backend over several endpoints of one chain.
	Endpoints = ethrpc.Endpoints
	// EndpointsConfig configures Endpoints.
	EndpointsConfig = ethrpc.Config
	// EndpointObserver receives the figures of one endpoint.
	EndpointObserver = ethrpc.Observer
	// MeterConfig configures Meter.
	MeterConfig = ethrpc.MeterConfig
)

// PurposeRelayer is the purpose of the relayer's reads of its balance and
// status (ethrpc.PurposeRelayer).
const PurposeRelayer = ethrpc.PurposeRelayer

// DefaultVerifyConcurrency is MeterConfig.VerifyConcurrency's default.
const DefaultVerifyConcurrency = ethrpc.DefaultVerifyConcurrency

// Dial connects to one JSON-RPC endpoint (ethrpc.Dial).
func Dial(ctx context.Context, url string) (*ethclient.Client, error) { return ethrpc.Dial(ctx, url) }

// DialChains starts the Endpoints of each network (ethrpc.DialChains).
func DialChains(ctx context.Context, urls map[string][]string, cfg *EndpointsConfig) (map[string]*Endpoints, error) {
	return ethrpc.DialChains(ctx, urls, cfg)
}

// Meter returns b with its calls counted by purpose (ethrpc.Meter).
func Meter(b Backend, cfg *MeterConfig) Backend { return ethrpc.Meter(b, cfg) }

// WithPurpose names the purpose of the RPC calls made with ctx
// (ethrpc.WithPurpose).
func WithPurpose(ctx context.Context, purpose string) context.Context {
	return ethrpc.WithPurpose(ctx, purpose)
}

// RedactURL names an endpoint without the parts that may carry a secret
// (ethrpc.RedactURL).
func RedactURL(raw string) (string, error) { return ethrpc.RedactURL(raw) }

var _ LogReader = (*ethrpc.Endpoints)(nil)
