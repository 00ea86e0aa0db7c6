package main

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/worker"
)

// channelClaimer returns the claimer of the batch-settlement channels on
// the relayer's networks (worker.Claimer: claims on CHANNEL_CLAIM_INTERVAL
// and CHANNEL_CLAIM_MIN_AMOUNT, signed with the receiver authorizer's key,
// sent by the relayer), or nil when the mode has no relayer or offers no
// channels (no receiver authorizer key).
func channelClaimer(cfg *Config, pool *pgxpool.Pool, payments *paymentStack, m *metrics.Metrics, logger *slog.Logger) (*worker.Claimer, error) {
	if payments.relayer == nil || payments.receiverAuthorizer == nil {
		return nil, nil
	}
	readers := map[string]worker.ClaimReader{}
	for network, b := range payments.relayer.Backends() {
		readers[network] = b
	}
	return worker.NewClaimer(&worker.ClaimConfig{Pool: pool, Chain: payments.relayer, Readers: readers,
		AuthorizerKey: payments.receiverAuthorizer, Interval: cfg.ChannelClaimInterval, MinAmount: cfg.ChannelClaimMinAmount, PayerCodeGasCap: uint64(cfg.PayerCodeGasCap),
		Logger: logger, Metrics: m})
}
