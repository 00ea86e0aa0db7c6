package main

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"log/slog"
	"math/big"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/internal/startstop"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/ops"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/chanpay"
	"github.com/x402d/x402d/x402/svm"
)

// paymentStack is the payment step of the settlement mode, built once from
// the *Config by buildPayments: quotes and verification for the api,
// settlement for the workers, and the parts it opened and started (the
// embedded devchain, the RPC endpoints, the renewal of the Solana
// blockhash), which close stops, the last first.
type paymentStack struct {
	verifier x402.Verifier
	settler  x402.Settler
	// relayer is the EVM relayer, when the mode has one: worker processes
	// start it, follow its settlements until final and watch its balance
	// and fee waits (watchers).
	relayer *evm.Relayer
	// receiverAuthorizer is the receiver authorizer's key of the
	// batch-settlement channels (RECEIVER_AUTHORIZER_KEY), when the mode
	// offers them: worker processes claim the channels' vouchers with it
	// (channelClaimer). Nil: channels are not claimed.
	receiverAuthorizer *ecdsa.PrivateKey
	// solana is the Solana settler, when Solana is offered: worker
	// processes watch its fee payer's balance (watchers).
	solana *svm.Settler
	parts  parts
}

// close stops what the payment step opened and started, the last first.
func (p *paymentStack) close() { p.parts.Stop() }

// watchers are the balance watchers of a worker process (watchRelayer,
// watchFeePayer), to run until it stops.
func (p *paymentStack) watchers(cfg *Config, m *metrics.Metrics, logger *slog.Logger) []startstop.Service {
	var out []startstop.Service
	if p.solana != nil {
		out = append(out, startstop.NewFunc(func(ctx context.Context) { watchFeePayer(ctx, p.solana, cfg.SolanaLowBalance, m, logger) }))
	}
	if p.relayer != nil {
		out = append(out, startstop.NewFunc(func(ctx context.Context) { watchRelayer(ctx, p.relayer, cfg.RelayerLowBalance, m, logger) }))
	}
	return out
}

// buildPayments builds the payment step of the configured settlement mode
// (newEVMSettlement), with Solana when it is configured: the catalogue of
// quotes, the seller that verifies payments, and the settlers, the RPC
// endpoints' figures recorded in m. With embed and SETTLEMENT=devchain it
// starts the devchain in this process and serves it on DEVCHAIN_RPC_ADDR.
// On an error, what it opened is closed.
func buildPayments(ctx context.Context, cfg *Config, pool *pgxpool.Pool, specs []jobs.Spec, m *metrics.Metrics, logger *slog.Logger, embed bool) (_ *paymentStack, err error) {
	stack := &paymentStack{}
	defer func() {
		if err != nil {
			stack.close()
		}
	}()
	evmMode, err := newEVMSettlement(ctx, cfg, &settlementDeps{pool: pool, metrics: m, logger: logger, embed: embed}, &stack.parts)
	if err != nil {
		return nil, err
	}
	stack.relayer = evmMode.relayer
	catCfg := x402.CatalogConfig{PublicURL: cfg.PublicURL, PayToEVM: evmMode.payTo, EVMNetworks: evmMode.networks, MaxTimeoutSeconds: cfg.maxTimeoutSeconds()}
	schemes := map[string]x402.Scheme{"eip155": evmMode.scheme}
	settlers := x402.Settlers{"eip155": evmMode.settler}
	if ch := evmMode.channels; ch != nil {
		// Payment channels on the same networks, beside exact.
		catCfg.Channels = &x402.ChannelOption{ReceiverAuthorizer: ch.ReceiverAuthorizer().Hex(), WithdrawDelay: uint64(cfg.ChannelWithdrawDelay / time.Second)}
		key := "eip155/" + x402.SchemeBatchSettlement
		schemes[key] = x402.Scheme{Verifier: ch, Identify: chanpay.Identify}
		settlers[key] = ch
		// Its key signs the channels' claims too (claims.go).
		stack.receiverAuthorizer = evmMode.authorizer
	}
	sol, err := newSolanaSettlement(cfg)
	if err != nil {
		return nil, err
	}
	if sol != nil {
		catCfg.Solana = &x402.SolanaOption{PayTo: cfg.PayToSolana, FeePayer: sol.settler.FeePayer().String()}
		// Payments are reserved against the balance of the token account
		// they move funds from.
		schemes["solana"] = x402.Scheme{Verifier: sol.verifier, Identify: svm.Identify, Balance: sol.verifier.Balance}
		settlers["solana"] = sol.settler
		stack.solana = sol.settler
	}
	catalog, err := x402.NewCatalog(jobs.Offers(specs, cfg.GeminiAPIKey != ""), &catCfg)
	if err != nil {
		return nil, err
	}
	if sol != nil {
		stack.parts.runs(ctx, func(ctx context.Context) { renewSolanaBlockhash(ctx, sol.blockhashes, catalog, logger) })
	}
	for _, e := range catalog.Entries() {
		if !e.Sellable {
			logger.WarnContext(ctx, "operation not sold", "op", e.Offer.Name, "reason", e.BlockedReason)
		}
	}
	stack.verifier, stack.settler = x402.NewSeller(catalog, schemes), settlers
	return stack, nil
}

// solanaSettlement is the Solana option: its verifier, its settler, and
// the blockhashes its quotes hand out.
type solanaSettlement struct {
	verifier    *svm.Verifier
	settler     *svm.Settler
	blockhashes *svm.Blockhashes
}

// newSolanaSettlement builds the Solana option, offered only when it can
// be settled: with a fee payer key (SOLANA_FEE_PAYER_KEY), an RPC endpoint
// (RPC_URL_SOLANA) and a receiving wallet (PAY_TO_SOLANA). It is nil
// without them.
func newSolanaSettlement(cfg *Config) (*solanaSettlement, error) {
	if cfg.SolanaFeePayer == "" || cfg.RPCURLSolana == "" || cfg.PayToSolana == "" {
		return nil, nil
	}
	key, err := svm.ParsePrivateKey(cfg.SolanaFeePayer)
	if err != nil {
		return nil, fmt.Errorf("SOLANA_FEE_PAYER_KEY: %w", err)
	}
	blockhashes := svm.NewBlockhashes(cfg.RPCURLSolana, nil)
	var smartWallets *svm.SmartWallets
	if len(cfg.SolanaSmartWalletPrograms) > 0 {
		programs, err := svm.ParseSmartWalletPrograms(cfg.SolanaSmartWalletPrograms)
		if err != nil {
			return nil, fmt.Errorf("SOLANA_SMART_WALLET_PROGRAMS: %w", err)
		}
		smartWallets = &svm.SmartWallets{Programs: programs}
	}
	verifier, err := svm.NewVerifier(&svm.VerifierConfig{FeePayer: key.PublicKey(), Simulator: svm.NewRPCSimulator(cfg.RPCURLSolana, nil),
		Blockhashes: blockhashes, SmartWallets: smartWallets, Balances: svm.NewTokenBalances(cfg.RPCURLSolana, nil)})
	if err != nil {
		return nil, err
	}
	// The verifier simulates every payment: the settler sends it without
	// the node simulating it again.
	settler, err := svm.NewSettler(&svm.SettlerConfig{Key: key, URL: cfg.RPCURLSolana, Commitment: cfg.SolanaCommitment, SkipPreflight: true})
	if err != nil {
		return nil, err
	}
	return &solanaSettlement{verifier: verifier, settler: settler, blockhashes: blockhashes}, nil
}

// solanaBlockhashEvery is how often the Solana option's blockhash is
// renewed: 5 blocks, so that a quote's blockhash has lost at most 2 s of
// its 60.
const solanaBlockhashEvery = 5 * x402.SolanaSlotTime

// solanaBlockhashStale is how old a handed-out blockhash may grow while
// the node does not answer before quotes stop handing it out (clients then
// fetch their own): past it, a payment naming it would have too little of
// its window left.
const solanaBlockhashStale = 10 * time.Second

// renewSolanaBlockhash hands clients a fresh blockhash in the Solana
// option's extra until ctx ends, so that a payment's window starts at its
// quote; while the node does not answer, the last one is kept for
// solanaBlockhashStale, then none is handed out.
func renewSolanaBlockhash(ctx context.Context, blockhashes *svm.Blockhashes, catalog *x402.Catalog, logger *slog.Logger) {
	t := time.NewTicker(solanaBlockhashEvery)
	defer t.Stop()
	var setAt time.Time
	for {
		bh, err := blockhashes.Latest(ctx)
		if err == nil {
			if err = catalog.SetSolanaBlockhash(bh.Hash.String(), bh.LastValidBlockHeight); err == nil {
				setAt = time.Now()
			}
		}
		if err != nil && ctx.Err() == nil {
			logger.WarnContext(ctx, "Solana blockhash not renewed", "error", err)
			if !setAt.IsZero() && time.Since(setAt) > solanaBlockhashStale {
				if err := catalog.SetSolanaBlockhash("", 0); err != nil {
					logger.WarnContext(ctx, "Solana blockhash not withdrawn", "error", err)
				} else {
					setAt = time.Time{}
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchRelayer reads the relayer's balance on each chain every half minute
// for /metrics, with whether its settlements wait for the base fee, and
// warns when a balance is under low (wei; nil: never), until ctx ends.
func watchRelayer(ctx context.Context, relayer *evm.Relayer, low *big.Int, m *metrics.Metrics, logger *slog.Logger) {
	ctx = evm.WithPurpose(ctx, evm.PurposeRelayer)
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		balances, err := relayer.Balances(ctx)
		if err != nil {
			logger.WarnContext(ctx, "read relayer balance", "error", err)
		}
		waits := relayer.FeeWait()
		for network, b := range balances {
			_, waiting := waits[network]
			m.RelayerState(network, b, waiting)
			if low != nil && b.Cmp(low) < 0 {
				logger.WarnContext(ctx, "relayer balance is low: top it up or settlements stop", "network", network,
					"relayer", relayer.Address().Hex(), "balance_wei", b.String(), "warn_below_wei", low.String())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchFeePayer records the Solana fee payer's balance in m every 30 s
// until ctx ends, warning when it is under low (lamports; nil: never).
func watchFeePayer(ctx context.Context, settler *svm.Settler, low *big.Int, m *metrics.Metrics, logger *slog.Logger) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		balance, err := settler.Balance(ctx)
		if err != nil && ctx.Err() == nil {
			logger.WarnContext(ctx, "read Solana fee payer balance", "error", err)
		}
		if err == nil {
			m.SolanaFeePayerBalance(balance)
			if low != nil && new(big.Int).SetUint64(balance).Cmp(low) < 0 {
				logger.WarnContext(ctx, "Solana fee payer balance is low: top it up or settlements stop",
					"fee_payer", settler.FeePayer().String(), "balance_lamports", balance, "warn_below_lamports", low.String())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// relayerStatus reports relayer's state for the dashboard; nil without a
// relayer.
func relayerStatus(relayer *evm.Relayer) func(ctx context.Context) ([]ops.RelayerChain, error) {
	if relayer == nil {
		return nil
	}
	return func(ctx context.Context) ([]ops.RelayerChain, error) {
		chains, err := relayer.Status(evm.WithPurpose(ctx, evm.PurposeRelayer))
		out := make([]ops.RelayerChain, len(chains))
		for i, c := range chains {
			out[i] = ops.RelayerChain{Network: c.Network, BalanceWei: c.Balance, BaseFeeWei: c.BaseFee, MaxFeeWei: relayer.MaxFee(), FeeWait: c.FeeWait}
		}
		return out, err
	}
}
