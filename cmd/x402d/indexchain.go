package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/svm"
)

// indexChainProbeEvery is how often the chain reader's endpoints read
// their heads: it reads once a run, so a slow probe spares the providers'
// limits.
const indexChainProbeEvery = 15 * time.Second

// chainReader returns the index's chain reader and its periodic job. In a
// process that works jobs, it reads each network of RPC_URL_<CHAIN> (its
// own endpoints, stopped when ctx ends, their figures not in /metrics,
// which has the settlement's), and Solana mainnet with RPC_URL_SOLANA (a
// client of its own), on INDEX_CHAIN_CRON; elsewhere, and without any RPC
// URL, it reads no network (its worker is registered all the same, so
// that every process knows the job).
func (a *app) chainReader(ctx context.Context, pool *pgxpool.Pool, withWorker bool) (*index.ChainReader, []*river.PeriodicJob, error) {
	cfg := index.ChainReaderConfig{Pool: pool, Finality: a.cfg.Finality, MaxRange: uint64(a.cfg.IndexChainMaxRange), Logger: a.logger}
	if !withWorker || len(a.cfg.RPCURLs) == 0 && a.cfg.RPCURLSolana == "" {
		return index.NewChainReader(&cfg), nil, nil
	}
	if a.cfg.RPCURLSolana != "" {
		cfg.Solana = map[string]index.SolanaChain{x402.SolanaMainnet: svm.NewHistory(a.cfg.RPCURLSolana, nil)}
		if a.cfg.IndexSolanaRate > 0 {
			cfg.SolanaCallGap = time.Second / time.Duration(a.cfg.IndexSolanaRate)
		}
	}
	chains, err := evm.DialChains(ctx, a.cfg.RPCURLs, &evm.EndpointsConfig{
		ProbeEvery: indexChainProbeEvery,
		Logger:     a.logger,
	})
	if err != nil {
		return nil, nil, err
	}
	context.AfterFunc(ctx, func() {
		for _, e := range chains {
			e.Stop()
		}
	})
	cfg.Chains = map[string]index.Chain{}
	for network, e := range chains {
		cfg.Chains[network] = e
	}
	jobs, err := index.ChainPeriodicJobs(a.cfg.IndexChainCron)
	if err != nil {
		return nil, nil, err
	}
	return index.NewChainReader(&cfg), jobs, nil
}
