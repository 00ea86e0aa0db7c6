package main

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/internal/startstop"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/channel"
	"github.com/x402d/x402d/x402/evm/chanpay"
	"github.com/x402d/x402d/x402/facilitator"
)

// evmSettlement is the EVM side of the settlement mode (SETTLEMENT): what
// verifies and settles EVM payments, and what the quotes offer. Each mode
// builds its own (devchainSettlement, rpcSettlement,
// facilitatorSettlement); nothing else asks which mode runs.
type evmSettlement struct {
	// scheme verifies, identifies and, when the mode reads balances,
	// reserves the EVM payments.
	scheme  x402.Scheme
	settler x402.Settler
	// relayer is the mode's relayer, nil in facilitator mode: worker
	// processes start it, follow its settlements until final and watch
	// its balance.
	relayer *evm.Relayer
	// networks are the EVM networks the quotes offer, primary first.
	networks []string
	// payTo is the receiving address the quotes name.
	payTo string
	// channels, when set, verifies and settles batch-settlement payments
	// (payment channels) on networks, which the quotes then offer: with a
	// receiver authorizer key (RECEIVER_AUTHORIZER_KEY) only.
	channels *chanpay.Scheme
	// authorizer is the receiver authorizer's key, set with channels: it
	// signs their claims (claims.go) and refunds.
	authorizer *ecdsa.PrivateKey
}

// settlementDeps are what the settlement modes use besides the *Config.
type settlementDeps struct {
	// pool is the database the relayer allocates its nonces in and the
	// refusals of payer code are shared through (nil: kept in process).
	pool    *pgxpool.Pool
	metrics *metrics.Metrics
	logger  *slog.Logger
	// embed runs the devchain in this process (`x402d serve`): the other
	// subcommands reach it at DEVCHAIN_RPC_ADDR.
	embed bool
}

// settlementMode is what one settlement mode (SETTLEMENT) is made of: the
// settings it needs, whether its settlements share transactions by
// default, and the builder of its EVM side. modeOf is the one place that
// tells the modes apart.
type settlementMode struct {
	// check reports, through fail, the settings the mode needs that are
	// missing (Config.validate).
	check func(c *Config, fail func(format string, args ...any))
	// batchByDefault is SETTLEMENT_BATCH=auto's answer.
	batchByDefault bool
	// build builds the EVM side; what it opens and starts is added to
	// parts, which stops it.
	build func(ctx context.Context, cfg *Config, deps *settlementDeps, parts *parts) (*evmSettlement, error)
}

// modeOf returns the settlement mode m; ok is false for a value that is no
// mode (SettlementMode.UnmarshalText refuses those).
func modeOf(m SettlementMode) (mode settlementMode, ok bool) {
	switch m {
	case SettlementDevchain:
		return settlementMode{check: func(*Config, func(string, ...any)) {}, batchByDefault: true, build: devchainSettlement}, true
	case SettlementRPC:
		return settlementMode{check: checkRPCSettlement, build: rpcSettlement}, true
	case SettlementFacilitator:
		return settlementMode{check: checkFacilitatorSettlement, build: facilitatorSettlement}, true
	}
	return settlementMode{}, false
}

// newEVMSettlement builds the EVM side of cfg's settlement mode; what it
// opens and starts is added to parts, which stops it.
func newEVMSettlement(ctx context.Context, cfg *Config, deps *settlementDeps, parts *parts) (*evmSettlement, error) {
	mode, ok := modeOf(cfg.Settlement)
	if !ok {
		return nil, fmt.Errorf("SETTLEMENT: %q is not a settlement mode", cfg.Settlement)
	}
	return mode.build(ctx, cfg, deps, parts)
}

// checkRPCSettlement reports what SETTLEMENT=rpc needs and lacks: an RPC
// endpoint and the relayer's key.
func checkRPCSettlement(c *Config, fail func(format string, args ...any)) {
	if len(c.RPCURLs) == 0 {
		fail("SETTLEMENT=rpc needs at least one RPC_URL_<CHAIN>, e.g. RPC_URL_EIP155_8453")
	}
	if c.RelayerKey == "" {
		fail("SETTLEMENT=rpc needs RELAYER_KEY, the key that pays the settlements' gas")
	}
}

// checkFacilitatorSettlement reports what SETTLEMENT=facilitator needs and
// lacks: the facilitator's URL.
func checkFacilitatorSettlement(c *Config, fail func(format string, args ...any)) {
	if c.FacilitatorURL == "" {
		fail("SETTLEMENT=facilitator needs FACILITATOR_URL")
	}
}

// devchainSettlement is SETTLEMENT=devchain: the relayer settles on the
// development chain, embedded (deps.embed, served on DEVCHAIN_RPC_ADDR) or
// reached at DEVCHAIN_RPC_ADDR, with development accounts #8 (RELAYER_KEY)
// and #9 (PAY_TO_EVM) unless set.
func devchainSettlement(ctx context.Context, cfg *Config, deps *settlementDeps, parts *parts) (*evmSettlement, error) {
	var client evm.Backend
	if deps.embed {
		chain, err := serveDevchain(ctx, cfg, deps.logger, parts)
		if err != nil {
			return nil, err
		}
		client = chain.Client()
	} else {
		c, err := evm.Dial(ctx, "http://"+cfg.DevchainRPCAddr)
		if err != nil {
			return nil, fmt.Errorf("devchain at %s: %w", cfg.DevchainRPCAddr, err)
		}
		parts.closes(c.Close)
		client = c
	}
	chains := &relayerChains{clients: map[string]evm.Backend{devchainNetwork: client}, multicall: map[string]common.Address{},
		// The devchain never reorganises: its settlements are final at
		// their receipt.
		finality: map[string]evm.FinalityPolicy{devchainNetwork: {}}}
	// The devchain has a Multicall3-compatible contract: settlements
	// share transactions unless SETTLEMENT_BATCH=off.
	if cfg.batch() {
		chains.multicall[devchainNetwork] = devchain.Multicall
	}
	relayerKey := cfg.RelayerKey
	if relayerKey == "" {
		key, err := devchain.DeriveKey(devchain.Mnemonic, devchain.RelayerAccount)
		if err != nil {
			return nil, err
		}
		relayerKey = fmt.Sprintf("%x", key.D.FillBytes(make([]byte, 32)))
	}
	payTo := cfg.PayToEVM
	if payTo == "" {
		key, err := devchain.DeriveKey(devchain.Mnemonic, devchain.PayToAccount)
		if err != nil {
			return nil, err
		}
		payTo = crypto.PubkeyToAddress(key.PublicKey).Hex()
	}
	authorizerKey := cfg.ReceiverAuthorizerKey
	if authorizerKey == "" {
		key, err := devchain.DeriveKey(devchain.Mnemonic, devchain.ReceiverAuthorizerAccount)
		if err != nil {
			return nil, err
		}
		authorizerKey = fmt.Sprintf("%x", key.D.FillBytes(make([]byte, 32)))
	}
	s, err := relayerSettlement(ctx, cfg, deps, parts, chains, relayerKey, authorizerKey)
	if err != nil {
		return nil, err
	}
	s.networks, s.payTo = []string{devchainNetwork}, payTo
	return s, nil
}

// serveDevchain starts the embedded devchain and serves it on
// DEVCHAIN_RPC_ADDR until parts stop.
func serveDevchain(ctx context.Context, cfg *Config, logger *slog.Logger, parts *parts) (*devchain.Chain, error) {
	ln, err := net.Listen("tcp", cfg.DevchainRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("devchain: listen on %s: %w", cfg.DevchainRPCAddr, err)
	}
	chain, err := devchain.New(ctx, cfg.devchain(logger))
	if err != nil {
		ln.Close()
		return nil, err
	}
	parts.closes(func() { _ = chain.Close() })
	parts.runs(ctx, func(ctx context.Context) {
		if err := chain.Serve(ctx, ln); err != nil && ctx.Err() == nil {
			logger.Error("devchain stopped serving", "error", err)
		}
	})
	logger.InfoContext(ctx, "devchain serving", "addr", ln.Addr().String(), "usdc", devchain.USDC.Hex())
	return chain, nil
}

// rpcSettlement is SETTLEMENT=rpc: the relayer settles with RELAYER_KEY on
// every network with RPC_URL_<CHAIN>, which the quotes offer.
func rpcSettlement(ctx context.Context, cfg *Config, deps *settlementDeps, parts *parts) (*evmSettlement, error) {
	dialed, err := dialRPC(ctx, cfg.RPCURLs, deps, parts)
	if err != nil {
		return nil, err
	}
	chains := &relayerChains{clients: map[string]evm.Backend{}, multicall: map[string]common.Address{}, finality: map[string]evm.FinalityPolicy{}}
	for network, e := range dialed {
		chains.clients[network] = e
		// Through Multicall3 on every chain with SETTLEMENT_BATCH=on
		// (relayerSettlement checks it is deployed there).
		if cfg.batch() {
			chains.multicall[network] = evm.Multicall3
		}
	}
	s, err := relayerSettlement(ctx, cfg, deps, parts, chains, cfg.RelayerKey, cfg.ReceiverAuthorizerKey)
	if err != nil {
		return nil, err
	}
	for _, n := range x402.Networks() {
		if _, ok := cfg.RPCURLs[n.ID]; ok {
			s.networks = append(s.networks, n.ID)
		}
	}
	s.payTo = cfg.PayToEVM
	return s, nil
}

// facilitatorSettlement is SETTLEMENT=facilitator: the remote facilitator
// at FACILITATOR_URL verifies and settles; RPC_URL_<CHAIN>, when set, lets
// the client recognise its own settlement behind a retry refused as
// nonce_already_used.
func facilitatorSettlement(ctx context.Context, cfg *Config, deps *settlementDeps, parts *parts) (*evmSettlement, error) {
	dialed, err := dialRPC(ctx, cfg.RPCURLs, deps, parts)
	if err != nil {
		return nil, err
	}
	chains := map[string]evm.LogReader{}
	for network, c := range dialed {
		// The facilitator settles with the network table's domain,
		// which the quotes carry: checked as in the other modes.
		if err := evm.CheckChain(ctx, network, c); err != nil {
			return nil, err
		}
		chains[network] = c
	}
	if len(chains) == 0 {
		deps.logger.WarnContext(ctx, "facilitator mode without RPC_URL_<CHAIN>: a settlement whose answer is lost is refused on retry as nonce_already_used and its result withheld; set RPC_URL_<CHAIN> so that it is found on chain")
	}
	c, err := facilitator.New(&facilitator.Config{URL: cfg.FacilitatorURL, Chains: chains})
	if err != nil {
		return nil, fmt.Errorf("FACILITATOR_URL: %w", err)
	}
	return &evmSettlement{scheme: x402.Scheme{Verifier: c, Identify: evm.Identify}, settler: c,
		networks: []string{devchainNetwork}, payTo: cfg.PayToEVM}, nil
}

// relayerChains are the chains a relayer settles on: a client, and where
// Multicall3 batches settlements, per network, and the finality policies
// beside FINALITY_<CHAIN>'s.
type relayerChains struct {
	clients   map[string]evm.Backend
	multicall map[string]common.Address
	finality  map[string]evm.FinalityPolicy
}

// relayerSettlement builds the relayer that settles with relayerKey on
// chains and the verifier of its payments, whose balances reserve them,
// and checks each chain (its id, its token's EIP-712 domain and decimals
// against the network table, Multicall3 where it batches): a mismatch
// refuses to start. With authorizerKey (the receiver authorizer's, "" for
// none) and a database, it verifies and settles payment channels too,
// what it starts for them stopped by parts.
func relayerSettlement(ctx context.Context, cfg *Config, deps *settlementDeps, parts *parts, chains *relayerChains, relayerKey, authorizerKey string) (*evmSettlement, error) {
	key, err := evm.ParseKey(relayerKey)
	if err != nil {
		return nil, fmt.Errorf("RELAYER_KEY: %w", err)
	}
	readers, backends := map[string]evm.Reader{}, map[string]evm.Backend{}
	for network, c := range chains.clients {
		// One metered client per chain: the verifier's calls and the
		// relayer's counted by purpose, the verifier's giving way.
		b := evm.Meter(c, &evm.MeterConfig{VerifyConcurrency: cfg.VerifyRPCConcurrency, Observe: deps.metrics.RPCObserver(network)})
		readers[network], backends[network] = b, b
	}
	for network, p := range cfg.Finality {
		chains.finality[network] = p
	}
	relayerCfg := &evm.RelayerConfig{Key: key, Chains: backends, Multicall: chains.multicall, Logger: deps.logger,
		MaxFee: cfg.SettlementMaxFee, BlockGasShare: cfg.SettlementBatchGasShare, Finality: chains.finality,
		PayerCodeGasCap: uint64(cfg.PayerCodeGasCap), PayerCodeRefuseFor: cfg.PayerCodeRefuseFor, Reverted: deps.metrics.SettlementReverted}
	var refusals evm.PayerCodeRefusals
	if deps.pool != nil {
		// Every process sending with RELAYER_KEY allocates its nonces in
		// the one database, and every api and worker shares the refusals
		// of payer code.
		relayerCfg.Nonces = store.RelayerNonces{DB: deps.pool}
		refusals = store.PayerCodeRefusals{DB: deps.pool}
		relayerCfg.Refusals = refusals
	}
	relayer, err := evm.NewRelayer(relayerCfg)
	if err != nil {
		return nil, err
	}
	if err := relayer.CheckMulticall(ctx); err != nil {
		return nil, fmt.Errorf("SETTLEMENT_BATCH: %w", err)
	}
	verifier, err := evm.NewVerifier(&evm.VerifierConfig{Chains: readers, Relayer: relayer.Address(), Factories6492: cfg.Factories6492,
		PayerCodeGasCap: uint64(cfg.PayerCodeGasCap), Refusals: refusals})
	if err != nil {
		return nil, err
	}
	if err := verifier.CheckChains(ctx); err != nil {
		return nil, err
	}
	// Payments verified here are reserved against their payer's balance,
	// read from the chain as verification reads it.
	s := &evmSettlement{scheme: x402.Scheme{Verifier: verifier, Identify: evm.Identify, Balance: verifier.Balance},
		settler: relayer, relayer: relayer}
	if authorizerKey == "" || deps.pool == nil {
		return s, nil
	}
	authorizer, err := evm.ParseKey(authorizerKey)
	if err != nil {
		return nil, fmt.Errorf("RECEIVER_AUTHORIZER_KEY: %w", err)
	}
	if authorizer.D.Cmp(key.D) == 0 {
		return nil, errors.New("RECEIVER_AUTHORIZER_KEY: is the relayer's key; use a key of its own")
	}
	callers := map[string]channel.Caller{}
	for network, b := range backends {
		callers[network] = b
	}
	if s.channels, err = chanpay.New(&chanpay.Config{Pool: deps.pool, Chains: callers, Sender: relayer, ReceiverAuthorizer: authorizer,
		PayerCodeGasCap: uint64(cfg.PayerCodeGasCap), Refusals: verifier}); err != nil {
		return nil, err
	}
	// Its reads of the channels' records end before the pool closes.
	parts.closes(s.channels.Wait)
	s.authorizer = authorizer
	return s, nil
}

// dialRPC starts the RPC_URL_<CHAIN> endpoints of each network (none: no
// clients), their figures recorded in deps.metrics, and adds their stop to
// parts.
func dialRPC(ctx context.Context, urls map[string][]string, deps *settlementDeps, parts *parts) (map[string]*evm.Endpoints, error) {
	m := deps.metrics
	chains, err := evm.DialChains(ctx, urls, &evm.EndpointsConfig{
		Observe: func(network, endpoint string) evm.EndpointObserver { return m.RPCEndpoint(network, endpoint) },
		Logger:  deps.logger,
	})
	if err != nil {
		return nil, err
	}
	parts.closes(func() {
		for _, e := range chains {
			e.Stop()
		}
	})
	return chains, nil
}

var _ evm.EndpointObserver = (*metrics.RPCEndpoint)(nil)

// parts are what the payment step opened and started, stopped as one by
// Stop, the last first: each is added as soon as it is opened, so that a
// build failing half-way stops what it opened and nothing is left to a
// clean-up written by hand.
type parts struct {
	group startstop.Group
}

// closes adds close, run at Stop, for something already open.
func (p *parts) closes(close func()) {
	_ = p.group.Start(context.Background(), closing(close))
}

// runs starts run on a goroutine of its own until Stop, which waits for
// it; its context keeps ctx's values, not its end.
func (p *parts) runs(ctx context.Context, run func(ctx context.Context)) {
	_ = p.group.Start(context.WithoutCancel(ctx), startstop.NewFunc(run))
}

// Stop stops every part, the last added first. Stopping twice does
// nothing.
func (p *parts) Stop() { p.group.Stop() }

// closing is something already open as a startstop.Service: Start does
// nothing, Stop closes it.
type closing func()

// Start does nothing: the part is open already.
func (closing) Start(context.Context) error { return nil }

// Stop closes the part.
func (c closing) Stop() { c() }
