package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/svm"
)

// buildPayments builds the payment step of the configured settlement mode:
// the catalogue of quotes, the seller that verifies payments, and the
// settler, its RPC endpoints' figures recorded in m. With embed and SETTLEMENT=devchain it starts the devchain in this
// process and serves it on DEVCHAIN_RPC_ADDR.
func buildPayments(ctx context.Context, cfg *Config, pool *pgxpool.Pool, specs []jobs.Spec, m *metrics.Metrics, logger *slog.Logger, embed bool) (*paymentStack, error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	var chain *devchain.Chain
	if cfg.Settlement == SettlementDevchain && embed {
		ln, err := net.Listen("tcp", cfg.DevchainRPCAddr)
		if err != nil {
			return nil, fmt.Errorf("devchain: listen on %s: %w", cfg.DevchainRPCAddr, err)
		}
		if chain, err = devchain.New(ctx, cfg.devchain(logger)); err != nil {
			ln.Close()
			return nil, err
		}
		serveCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		go func() {
			if err := chain.Serve(serveCtx, ln); err != nil && serveCtx.Err() == nil {
				logger.Error("devchain stopped serving", "error", err)
			}
		}()
		closers = append(closers, func() { stop(); _ = chain.Close() })
		logger.InfoContext(ctx, "devchain serving", "addr", ln.Addr().String(), "usdc", devchain.USDC.Hex())
	}
	verifier, settler, closeFn, err := evmSettlement(ctx, cfg, chain, pool, m, logger)
	if err != nil {
		closeAll()
		return nil, err
	}
	closers = append(closers, closeFn)

	catCfg := x402.CatalogConfig{PublicURL: cfg.PublicURL, PayToEVM: cfg.PayToEVM, MaxTimeoutSeconds: cfg.maxTimeoutSeconds()}
	switch cfg.Settlement {
	case SettlementDevchain:
		catCfg.EVMNetworks = []string{devchainNetwork}
		if catCfg.PayToEVM == "" {
			key, err := devchain.DeriveKey(devchain.Mnemonic, devchain.PayToAccount)
			if err != nil {
				closeAll()
				return nil, err
			}
			catCfg.PayToEVM = crypto.PubkeyToAddress(key.PublicKey).Hex()
		}
	case SettlementRPC:
		for _, n := range x402.Networks() {
			if _, ok := cfg.RPCURLs[n.ID]; ok {
				catCfg.EVMNetworks = append(catCfg.EVMNetworks, n.ID)
			}
		}
	case SettlementFacilitator:
		catCfg.EVMNetworks = []string{devchainNetwork}
	}
	evmScheme := x402.Scheme{Verifier: verifier, Identify: evm.Identify}
	if v, ok := verifier.(*evm.Verifier); ok {
		// Payments verified here are reserved against their payer's
		// balance, read from the chain as verification reads it.
		evmScheme.Balance = v.Balance
	}
	schemes := map[string]x402.Scheme{"eip155": evmScheme}
	settlers := x402.Settlers{"eip155": settler}
	// Solana is offered only when it can be settled: a fee payer key, an
	// RPC endpoint and a receiving wallet.
	var blockhashes *svm.Blockhashes
	if cfg.SolanaFeePayer != "" && cfg.RPCURLSolana != "" && cfg.PayToSolana != "" {
		key, err := svm.ParsePrivateKey(cfg.SolanaFeePayer)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("SOLANA_FEE_PAYER_KEY: %w", err)
		}
		blockhashes = svm.NewBlockhashes(cfg.RPCURLSolana, nil)
		var smartWallets *svm.SmartWallets
		if len(cfg.SolanaSmartWalletPrograms) > 0 {
			programs, err := svm.ParseSmartWalletPrograms(cfg.SolanaSmartWalletPrograms)
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("SOLANA_SMART_WALLET_PROGRAMS: %w", err)
			}
			smartWallets = &svm.SmartWallets{Programs: programs}
		}
		sv, err := svm.NewVerifier(&svm.VerifierConfig{FeePayer: key.PublicKey(), Simulator: svm.NewRPCSimulator(cfg.RPCURLSolana, nil),
			Blockhashes: blockhashes, SmartWallets: smartWallets, Balances: svm.NewTokenBalances(cfg.RPCURLSolana, nil)})
		if err != nil {
			closeAll()
			return nil, err
		}
		// The verifier simulates every payment: the settler sends it
		// without the node simulating it again.
		ss, err := svm.NewSettler(svm.SettlerConfig{Key: key, URL: cfg.RPCURLSolana, Commitment: cfg.SolanaCommitment, SkipPreflight: true})
		if err != nil {
			closeAll()
			return nil, err
		}
		catCfg.Solana = &x402.SolanaOffer{PayTo: cfg.PayToSolana, FeePayer: key.PublicKey().String()}
		// Payments are reserved against the balance of the token account
		// they move funds from.
		schemes["solana"] = x402.Scheme{Verifier: sv, Identify: svm.Identify, Balance: sv.Balance}
		settlers["solana"] = ss
	}
	catalog, err := x402.NewCatalog(jobs.Offers(specs, cfg.GeminiAPIKey != ""), &catCfg)
	if err != nil {
		closeAll()
		return nil, err
	}
	if blockhashes != nil {
		renewCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		closers = append(closers, stop)
		go renewSolanaBlockhash(renewCtx, blockhashes, catalog, logger)
	}
	for _, e := range catalog.Entries() {
		if !e.Sellable {
			logger.WarnContext(ctx, "operation not sold", "op", e.Offer.Name, "reason", e.BlockedReason)
		}
	}
	seller := x402.NewSeller(catalog, schemes)
	stack := &paymentStack{verifier: seller, settler: settlers, close: closeAll}
	stack.relayer, _ = settler.(*evm.Relayer)
	stack.solana, _ = settlers["solana"].(*svm.Settler)
	return stack, nil
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
