package evm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// validBeforeMargin is how long an authorization must stay valid after
// verification: about a block, as the official packages require.
const validBeforeMargin = 6 * time.Second

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// Chains maps each CAIP-2 network (eip155:<id>) the seller accepts to
	// a client of that chain. Required.
	Chains map[string]Reader
	// Relayer is the sender of simulated transfers: the address that will
	// settle. Defaults to the zero address.
	Relayer common.Address
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Factories6492, when set, are the only wallet factories whose
	// undeployed wallets may pay with an ERC-6492 signature (the relayer
	// pays the gas of the deployment). Nil: any factory whose deployment
	// and transfer simulate.
	Factories6492 []common.Address
	// UnpaidFor is how long a payer found unable to pay (a balance under
	// the amount) is refused again without the chain, for payments of at
	// least that amount. Defaults to 4 s, about two blocks of Base.
	UnpaidFor time.Duration
	// UnpaidEntries bounds the payers so remembered. Defaults to 50,000.
	UnpaidEntries int
	// PayerCodeGasCap bounds the gas of the simulated transfer, as
	// RelayerConfig.PayerCodeGasCap bounds its settlement: a payment
	// whose transfer needs more is refused. Defaults to
	// DefaultPayerCodeGasCap.
	PayerCodeGasCap uint64
	// Refusals are the wallets and factories whose code made a settlement
	// fail (RelayerConfig.Refusals, shared with the relayer): their
	// payments are refused before the chain is asked, as read at most a
	// second ago. Defaults to none.
	Refusals PayerCodeRefusals
}

// Verifier verifies exact EVM payments (EIP-3009). It implements
// x402.SchemeVerifier.
type Verifier struct {
	chains    map[string]Reader
	relayer   common.Address
	now       func() time.Time
	factories []common.Address

	// deployed caches assets found to have code (deployedKey).
	deployed sync.Map
	// unpaid remembers payers found unable to pay, for a moment.
	unpaid *unpaidCache
	// gasCap is VerifierConfig.PayerCodeGasCap.
	gasCap uint64
	// refusals are VerifierConfig.Refusals.
	refusals *refusals
}

var _ x402.SchemeVerifier = (*Verifier)(nil)

// NewVerifier returns a Verifier.
func NewVerifier(cfg *VerifierConfig) (*Verifier, error) {
	if len(cfg.Chains) == 0 {
		return nil, errors.New("evm verifier: no chains configured")
	}
	for network, reader := range cfg.Chains {
		if _, err := ChainID(network); err != nil {
			return nil, fmt.Errorf("evm verifier: %w", err)
		}
		if reader == nil {
			return nil, fmt.Errorf("evm verifier: no client for %s", network)
		}
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Verifier{chains: cfg.Chains, relayer: cfg.Relayer, now: now, factories: cfg.Factories6492,
		unpaid:   newUnpaidCache(cmp.Or(cfg.UnpaidFor, 4*time.Second), cmp.Or(cfg.UnpaidEntries, 50_000)),
		gasCap:   cmp.Or(cfg.PayerCodeGasCap, DefaultPayerCodeGasCap),
		refusals: newRefusals(cfg.Refusals)}, nil
}

// CheckChains checks each configured chain before the first payment
// (CheckChain): its client serves the chain its network names, and the
// network's token answers the network table's EIP-712 domain and decimals,
// so that a misplaced RPC URL or a wrong table entry fails at start-up.
func (v *Verifier) CheckChains(ctx context.Context) error {
	for network, reader := range v.chains {
		if err := CheckChain(ctx, network, reader); err != nil {
			return err
		}
	}
	return nil
}

// Verify checks payload against req, the seller's own requirement for the
// network the payload names, and returns the payment. A payment that is not
// acceptable is a *x402.Refusal; another error means the chain could not be
// read (try again).
func (v *Verifier) Verify(ctx context.Context, req *x402.Requirements, payload *x402.PaymentPayload) (*x402.Payment, error) {
	ctx = ethrpc.WithPurpose(ctx, ethrpc.PurposeVerify)
	if req.Scheme != "exact" || payload.Accepted.Scheme != "exact" {
		return nil, refuseNever(ReasonScheme, "scheme %q is not exact", payload.Accepted.Scheme)
	}
	ep, err := decodePayload(payload.Payload)
	if err != nil {
		if r, ok := errors.AsType[*x402.Refusal](err); ok {
			r.NeverValid = true
		}
		return nil, err
	}
	var extra x402.EVMExtra
	if len(req.Extra) > 0 {
		if err := json.Unmarshal(req.Extra, &extra); err != nil {
			return nil, fmt.Errorf("verify: requirement extra: %w", err)
		}
	}
	if extra.Name == "" || extra.Version == "" {
		return nil, refuseNever(ReasonMissingDomain, "the requirement has no EIP-712 name and version")
	}
	if payload.Accepted.Network != req.Network {
		return nil, refuseNever(ReasonNetworkMismatch, "payment is for %s, not %s", payload.Accepted.Network, req.Network)
	}
	chainID, err := ChainID(req.Network)
	if err != nil {
		return nil, fmt.Errorf("verify: requirement: %w", err)
	}
	reader := v.chains[req.Network]
	if reader == nil {
		return nil, fmt.Errorf("verify: no chain client for %s", req.Network)
	}
	asset, err := parseAddress("asset", req.Asset)
	if err != nil {
		return nil, fmt.Errorf("verify: requirement: %w", err)
	}
	payTo, err := parseAddress("payTo", req.PayTo)
	if err != nil {
		return nil, fmt.Errorf("verify: requirement: %w", err)
	}
	amount, err := parseUint256("amount", req.Amount)
	if err != nil {
		return nil, fmt.Errorf("verify: requirement: %w", err)
	}
	auth := ep.auth
	domain := &Domain{Name: extra.Name, Version: extra.Version, ChainID: chainID, VerifyingContract: asset}

	// Every check that needs no chain comes first, and a payment they
	// refuse is refused without the chain: its recipient, window and value.
	// Its signature, when it is 65 bytes, is recovered first (a signature
	// that is not the payer's is named whatever else is wrong, as the
	// official packages name it); a contract wallet's signature is checked
	// on chain only for a payment that passes these checks.
	now := v.now()
	if refusal := offlineFault(auth, payTo, amount, now, x402.ValidFor(ctx)); refusal != nil {
		if len(ep.signature) == 65 && recoverSigner(auth.Digest(domain), ep.signature) != auth.From {
			// Without the chain, the payer may be a contract wallet that
			// accepts the signature: named as a bad signature all the same.
			return nil, &x402.Refusal{Reason: ReasonSignature, NeverValid: refusal.NeverValid,
				Message: fmt.Sprintf("the signature is not %s's for this authorization (and %s)", auth.From.Hex(), refusal.Message)}
		}
		return nil, refusal
	}
	if err := v.checkRefused(ctx, req.Network, auth.From, ep.signature, now); err != nil {
		return nil, err
	}
	unpaid := unpaidKey{network: req.Network, asset: asset, payer: auth.From}
	if v.unpaid.cannotPay(unpaid, auth.Value, now) && len(ep.signature) == 65 && recoverSigner(auth.Digest(domain), ep.signature) == auth.From {
		return nil, refuse(ReasonInsufficientBalance, "%s held less than %s moments ago; fund the wallet and pay again", auth.From.Hex(), auth.Value)
	}
	if err := x402.GuardChain(ctx); err != nil {
		return nil, err
	}

	// The token checks the signature itself when the transfer is simulated
	// (the check the chain applies at settlement, EIP-1271 wallets
	// included): a payment whose simulation succeeds is its payer's, and
	// its signature is not recovered a second time here (ECDSA recovery
	// is among the costliest steps of a paid call's CPU). A
	// payment refused after the simulation has its signature checked
	// first, so that a bad signature is refused as such.
	if err := v.checkDeployed(ctx, reader, req.Network, asset); err != nil {
		if _, ok := errors.AsType[*x402.Refusal](err); ok {
			if serr := v.checkSignature(ctx, reader, auth, domain, ep.signature); serr != nil {
				return nil, serr
			}
		}
		return nil, err
	}
	if err := v.simulate(ctx, reader, asset, auth, ep.signature, v.gasCap); err != nil {
		if _, ok := errors.AsType[*x402.Refusal](err); ok {
			return nil, err
		}
		if isOutOfGas(err) {
			return nil, v.overCap(err)
		}
		if !isRevert(err) {
			return nil, fmt.Errorf("verify: simulate transfer: %w", err)
		}
		if msg := revertReason(err); revertsForBalance(msg) {
			// The token accepted the authorization and its signature
			// before it found the balance short.
			v.unpaid.remember(unpaid, auth.Value, now)
			return nil, refuse(ReasonInsufficientBalance, "%s holds less than %s (%s)", auth.From.Hex(), auth.Value, msg)
		}
		if err := v.checkSignature(ctx, reader, auth, domain, ep.signature); err != nil {
			return nil, err
		}
		err = diagnose(ctx, reader, asset, auth, &extra, err)
		r, ok := errors.AsType[*x402.Refusal](err)
		switch {
		case ok && r.Reason == ReasonInsufficientBalance:
			v.unpaid.remember(unpaid, auth.Value, now)
		case ok && r.Reason == ReasonSimulationFailed:
			// The payer's code may have run out of the cap inside the
			// token's call (which then reverts): it is, when the
			// transfer runs without it.
			if v.simulate(ctx, reader, asset, auth, ep.signature, 0) == nil {
				return nil, v.overCap(err)
			}
		}
		return nil, err
	}
	// Kept with its compact form, which the ledger then keeps with no
	// decoding.
	p, err := payload.LedgerPayment(ep.wire)
	if err != nil {
		return nil, fmt.Errorf("verify: encode payload: %w", err)
	}
	p.Network, p.Payer, p.Nonce, p.Amount, p.Asset = req.Network, auth.From.Hex(), auth.Nonce.Hex(), auth.Value.String(), asset.Hex()
	p.VerifiedAt, p.ValidBefore = now.UTC(), x402.UnixTime(auth.ValidBefore)
	return p, nil
}

// Authenticate checks that payload, for req, is a well-formed exact EVM
// payment to req's payTo of req's amount whose authorization its payer
// signed (an ECDSA signature of its key, or one its contract wallet
// accepts: EIP-1271, or ERC-6492 for a wallet not deployed yet, which
// read the chain), and returns the payer (x402.Authenticator). Its
// window, its nonce and the payer's balance are not checked: a payment
// only authenticated is never settled.
func (v *Verifier) Authenticate(ctx context.Context, req *x402.Requirements, payload *x402.PaymentPayload) (string, error) {
	ctx = ethrpc.WithPurpose(ctx, ethrpc.PurposeVerify)
	if req.Scheme != "exact" || payload.Accepted.Scheme != "exact" {
		return "", refuseNever(ReasonScheme, "scheme %q is not exact", payload.Accepted.Scheme)
	}
	if payload.Accepted.Network != req.Network {
		return "", refuseNever(ReasonNetworkMismatch, "payment is for %s, not %s", payload.Accepted.Network, req.Network)
	}
	ep, err := decodePayload(payload.Payload)
	if err != nil {
		return "", err
	}
	var extra x402.EVMExtra
	if len(req.Extra) > 0 {
		if err := json.Unmarshal(req.Extra, &extra); err != nil {
			return "", fmt.Errorf("authenticate: requirement extra: %w", err)
		}
	}
	chainID, err := ChainID(req.Network)
	if err != nil {
		return "", fmt.Errorf("authenticate: requirement: %w", err)
	}
	reader := v.chains[req.Network]
	if reader == nil {
		return "", fmt.Errorf("authenticate: no chain client for %s", req.Network)
	}
	asset, err := parseAddress("asset", req.Asset)
	if err != nil {
		return "", fmt.Errorf("authenticate: requirement: %w", err)
	}
	payTo, err := parseAddress("payTo", req.PayTo)
	if err != nil {
		return "", fmt.Errorf("authenticate: requirement: %w", err)
	}
	amount, err := parseUint256("amount", req.Amount)
	if err != nil {
		return "", fmt.Errorf("authenticate: requirement: %w", err)
	}
	auth := ep.auth
	switch {
	case auth.To != payTo:
		return "", refuseNever(ReasonRecipientMismatch, "authorization pays %s, not %s", auth.To.Hex(), payTo.Hex())
	case auth.Value.Cmp(amount) != 0:
		return "", refuseNever(ReasonValueMismatch, "authorization moves %s, the price is %s", auth.Value, amount)
	}
	domain := &Domain{Name: extra.Name, Version: extra.Version, ChainID: chainID, VerifyingContract: asset}
	if err := v.checkSignature(ctx, reader, auth, domain, ep.signature); err != nil {
		return "", err
	}
	return auth.From.Hex(), nil
}

// overCap is the refusal of a payment whose transfer needs more gas than
// the cap of a payer's code (err says how it failed under it).
func (v *Verifier) overCap(err error) error {
	return refuse(ReasonSimulationFailed, "the transfer needs more than %d gas, the most this seller lets a payer's code use (%v)", v.gasCap, err)
}

// RefusedCode returns the first of addrs whose code is refused on network
// now (PayerCodeRefusals, read as verification reads them), with the end
// of its refusal: for the batch-settlement scheme's vouchers that a
// contract wallet's code checks (chanpay).
func (v *Verifier) RefusedCode(ctx context.Context, network string, addrs ...common.Address) (common.Address, time.Time, bool, error) {
	return v.refusals.cached(ctx, network, v.now(), addrs...)
}

// checkRefused refuses a payment whose payer, or the factory its ERC-6492
// signature names, is refused for its code (PayerCodeRefusals).
func (v *Verifier) checkRefused(ctx context.Context, network string, payer common.Address, sig []byte, now time.Time) error {
	suspects := []common.Address{payer}
	if w, ok, _ := parse6492(sig); ok && w != nil {
		suspects = append(suspects, w.factory)
	}
	refused, until, ok, err := v.refusals.cached(ctx, network, now, suspects...)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if ok {
		return refuse(ReasonPayerCodeRefused, "%s's code made a settlement of this seller fail after its payment was verified; its payments are refused until %s",
			refused.Hex(), until.UTC().Format(time.RFC3339))
	}
	return nil
}

// Balance reads what p's payer holds of p's asset on p's network now
// (balanceOf), for the reservation of the payments in flight
// (x402.BalanceReader).
func (v *Verifier) Balance(ctx context.Context, p *x402.Payment) (*big.Int, error) {
	reader := v.chains[p.Network]
	if reader == nil {
		return nil, fmt.Errorf("no chain client for %s", p.Network)
	}
	asset, err := parseAddress("asset", p.Asset)
	if err != nil {
		return nil, err
	}
	payer, err := parseAddress("payer", p.Payer)
	if err != nil {
		return nil, err
	}
	balance, err := balanceOf(ethrpc.WithPurpose(ctx, ethrpc.PurposeReserve), reader, asset, payer)
	if err != nil {
		return nil, fmt.Errorf("read balance of %s: %w", payer.Hex(), err)
	}
	return balance, nil
}

// offlineFault returns the refusal of a payment whose recipient, window or
// value is wrong for the requirement (payTo, amount) at now: the checks
// that need no chain. The authorization must stay valid validFor after now
// (the operation's time budget and the settlement window,
// x402.WithValidFor), and at least validBeforeMargin. A payment that never
// could pay is NeverValid; an expired one may be one accepted before and
// sent again.
func offlineFault(auth *Authorization, payTo common.Address, amount *big.Int, now time.Time, validFor time.Duration) *x402.Refusal {
	switch {
	case auth.To != payTo:
		return &x402.Refusal{Reason: ReasonRecipientMismatch, NeverValid: true,
			Message: fmt.Sprintf("authorization pays %s, not %s", auth.To.Hex(), payTo.Hex())}
	case auth.ValidBefore.Cmp(big.NewInt(now.Add(validBeforeMargin).Unix())) < 0:
		return &x402.Refusal{Reason: ReasonValidBefore,
			Message: fmt.Sprintf("authorization expires at %s, too soon", auth.ValidBefore)}
	case validFor > validBeforeMargin && auth.ValidBefore.Cmp(big.NewInt(now.Add(validFor).Unix())) < 0:
		return shortValidity(auth, now, validFor)
	case auth.ValidAfter.Cmp(big.NewInt(now.Unix())) > 0:
		return &x402.Refusal{Reason: ReasonValidAfter, NeverValid: true,
			Message: fmt.Sprintf("authorization is valid only after %s", auth.ValidAfter)}
	case auth.Value.Cmp(amount) != 0:
		return &x402.Refusal{Reason: ReasonValueMismatch, NeverValid: true,
			Message: fmt.Sprintf("authorization moves %s, the price is %s", auth.Value, amount)}
	}
	return nil
}

// shortValidity is the refusal of auth, which expires less than validFor
// after now: the operation's time budget and the settlement window.
func shortValidity(auth *Authorization, now time.Time, validFor time.Duration) *x402.Refusal {
	return &x402.Refusal{Reason: ReasonValidBefore,
		Message: fmt.Sprintf("authorization expires at %s, %d s from now: it must stay valid at least %d s after verification, "+
			"for the operation's time budget and the settlement window (sign validBefore as now plus the quote's maxTimeoutSeconds)",
			auth.ValidBefore, new(big.Int).Sub(auth.ValidBefore, big.NewInt(now.Unix())), int64(validFor.Seconds()))}
}

// CheckValidity refuses, as Verifier.Verify does, an exact EVM payment
// whose authorization expires less than the validity ctx asks
// (x402.WithValidFor) after now, with no I/O: for payments verified
// elsewhere (a facilitator). A payload that does not decode is left to its
// verifier.
func CheckValidity(ctx context.Context, p *x402.PaymentPayload, now time.Time) error {
	validFor := x402.ValidFor(ctx)
	if validFor <= validBeforeMargin {
		return nil
	}
	ep, err := decodePayload(p.Payload)
	if err != nil {
		return nil
	}
	if ep.auth.ValidBefore.Cmp(big.NewInt(now.Add(validFor).Unix())) < 0 {
		return shortValidity(ep.auth, now, validFor)
	}
	return nil
}

// checkSignature checks that the payer signed auth in domain: an ECDSA
// signature of the payer's key, or one its contract wallet accepts
// (EIP-1271).
func (v *Verifier) checkSignature(ctx context.Context, reader Reader, auth *Authorization, domain *Domain, sig []byte) error {
	digest := auth.Digest(domain)
	if len(sig) == 65 && recoverSigner(digest, sig) == auth.From {
		return nil
	}
	w, err := undeployed6492(ctx, reader, auth.From, &sig)
	if err != nil {
		return err
	}
	if w != nil {
		ok, err := check6492(ctx, reader, w, auth.From, digest)
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		if !ok {
			return refuse(ReasonSignature, "the wallet %s that factory %s deploys does not accept the signature", auth.From.Hex(), w.factory.Hex())
		}
		return nil
	}
	code, err := reader.CodeAt(ctx, auth.From, nil)
	if err != nil {
		return fmt.Errorf("verify: read code of %s: %w", auth.From.Hex(), err)
	}
	if len(code) > 0 {
		ok, err := isValidSignature(ctx, reader, auth.From, digest, sig)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		return refuse(ReasonSignature, "contract wallet %s does not accept the signature", auth.From.Hex())
	}
	if len(sig) > 65 {
		// A smart wallet's signature from an address with no code and no
		// ERC-6492 wrapping that says how to deploy it.
		return refuse(ReasonUndeployedWallet, "%s has no code and the %d-byte signature is neither an ECDSA nor an ERC-6492 signature", auth.From.Hex(), len(sig))
	}
	return refuse(ReasonSignature, "the signature is not %s's for this authorization and domain (%q, %q, chain %s, %s)",
		auth.From.Hex(), domain.Name, domain.Version, domain.ChainID, domain.VerifyingContract.Hex())
}

// recoverSigner returns the signer of a 65-byte r‖s‖v signature (v 0, 1,
// 27 or 28, low s as the token requires), or the zero address.
func recoverSigner(digest common.Hash, sig []byte) common.Address {
	v := sig[64]
	if v >= 27 {
		v -= 27
	}
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:64])
	if !crypto.ValidateSignatureValues(v, r, s, true) {
		return common.Address{}
	}
	normalized := append(append([]byte{}, sig[:64]...), v)
	pub, err := crypto.SigToPub(digest[:], normalized)
	if err != nil {
		return common.Address{}
	}
	return crypto.PubkeyToAddress(*pub)
}

// isValidSignature asks a contract wallet whether it accepts sig for digest
// (EIP-1271). A reverting wallet does not.
func isValidSignature(ctx context.Context, reader Reader, wallet common.Address, digest common.Hash, sig []byte) (bool, error) {
	input, err := token.Pack("isValidSignature", digest, sig)
	if err != nil {
		return false, fmt.Errorf("verify: encode isValidSignature: %w", err)
	}
	out, err := reader.CallContract(ctx, ethereum.CallMsg{To: &wallet, Data: input}, nil)
	if err != nil {
		if isRevert(err) {
			return false, nil
		}
		return false, fmt.Errorf("verify: call isValidSignature on %s: %w", wallet.Hex(), err)
	}
	return len(out) >= 4 && bytes.Equal(out[:4], eip1271Magic[:]), nil
}

// checkDeployed checks that the asset is a contract: a call to an address
// with no code succeeds and would pass simulation.
func (v *Verifier) checkDeployed(ctx context.Context, reader Reader, network string, asset common.Address) error {
	key := deployedKey{network: network, asset: asset}
	if _, ok := v.deployed.Load(key); ok {
		return nil
	}
	code, err := reader.CodeAt(ctx, asset, nil)
	if err != nil {
		return fmt.Errorf("verify: read code of asset %s: %w", asset.Hex(), err)
	}
	if len(code) == 0 {
		return refuse(ReasonAssetNotDeployed, "asset %s has no code on %s", asset.Hex(), network)
	}
	v.deployed.Store(key, struct{}{})
	return nil
}

// deployedKey is an asset of a network found to have code
// (Verifier.deployed): the address itself, not its checksummed text (a
// hash each paid call would compute).
type deployedKey struct {
	network string
	asset   common.Address
}

// simulate runs the transfer with eth_call from the relayer, with gas (0:
// the node's default): nil when it
// succeeds, the node's error (a revert, isRevert, when the transfer fails)
// otherwise.
func (v *Verifier) simulate(ctx context.Context, reader Reader, asset common.Address, auth *Authorization, sig []byte, gas uint64) error {
	w, err := undeployed6492(ctx, reader, auth.From, &sig)
	if err != nil {
		return err
	}
	if w != nil {
		// A wallet not deployed yet (ERC-6492): its deployment and the
		// transfer, as settlement will send them.
		if v.factories != nil && !slices.Contains(v.factories, w.factory) {
			return refuse(ReasonUndeployedWallet, "wallet factory %s is not one this seller deploys wallets with", w.factory.Hex())
		}
		input, err := deployAndTransfer(w, asset, auth)
		if err != nil {
			return err
		}
		multicall := Multicall3
		_, err = reader.CallContract(ctx, ethereum.CallMsg{From: v.relayer, To: &multicall, Data: input, Gas: gas}, nil)
		return err
	}
	input, err := transferInput(auth, sig)
	if err != nil {
		return err
	}
	_, err = reader.CallContract(ctx, ethereum.CallMsg{From: v.relayer, To: &asset, Data: input, Gas: gas}, nil)
	return err
}

// diagnose names why a transfer of auth reverted, reading the token the way
// the official packages do: authorization state, name, version, balance.
// It returns a *x402.Refusal, or an error when the chain cannot be read.
func diagnose(ctx context.Context, reader Reader, asset common.Address, auth *Authorization, extra *x402.EVMExtra, revert error) error {
	used, err := authorizationState(ctx, reader, asset, auth)
	if err != nil {
		if isRevert(err) || errors.Is(err, errBadResult) {
			return refuse(ReasonEIP3009NotSupported, "asset %s has no EIP-3009 authorizationState", asset.Hex())
		}
		return err
	}
	if used {
		return refuse(ReasonNonceAlreadyUsed, "authorization %s of %s is already used", auth.Nonce.Hex(), auth.From.Hex())
	}
	if extra != nil {
		if name, err := readString(ctx, reader, asset, "name"); err == nil && name != extra.Name {
			return refuse(ReasonTokenNameMismatch, "the token's name is %q, the requirement says %q", name, extra.Name)
		}
		if version, err := readString(ctx, reader, asset, "version"); err == nil && version != extra.Version {
			return refuse(ReasonTokenVersionMismatch, "the token's version is %q, the requirement says %q", version, extra.Version)
		}
	}
	balance, err := balanceOf(ctx, reader, asset, auth.From)
	if err == nil && balance.Cmp(auth.Value) < 0 {
		return refuse(ReasonInsufficientBalance, "%s holds %s, the payment is %s", auth.From.Hex(), balance, auth.Value)
	}
	return refuse(ReasonSimulationFailed, "the transfer reverts: %s", revertReason(revert))
}

// transferInput encodes transferWithAuthorization: the (v,r,s) form for a
// 65-byte signature (v as 27 or 28), the (bytes) form otherwise.
func transferInput(auth *Authorization, sig []byte) ([]byte, error) {
	var (
		input []byte
		err   error
	)
	if len(sig) == 65 {
		v := sig[64]
		if v < 27 {
			v += 27
		}
		input, err = packTransferVRS(auth, v, sig[:32], sig[32:64])
	} else {
		input, err = token.Pack(fnTransferBytes, auth.From, auth.To, auth.Value, auth.ValidAfter, auth.ValidBefore, auth.Nonce, sig)
	}
	if err != nil {
		return nil, fmt.Errorf("encode transferWithAuthorization: %w", err)
	}
	return input, nil
}

// packTransferVRS encodes transferWithAuthorization's (v,r,s) form, as
// token.Pack does, without its reflection: its arguments are nine words,
// the selector before them (one of each paid call's costs twice: its
// verification's run of the transfer, its settlement's).
func packTransferVRS(auth *Authorization, v byte, r, s []byte) ([]byte, error) {
	out := make([]byte, 4+9*32)
	copy(out, token.Methods[fnTransferVRS].ID)
	w := out[4:]
	copy(w[12:32], auth.From[:])
	copy(w[32+12:64], auth.To[:])
	for i, n := range []*big.Int{auth.Value, auth.ValidAfter, auth.ValidBefore} {
		if n == nil || n.Sign() < 0 || n.BitLen() > 256 {
			return nil, fmt.Errorf("encode transferWithAuthorization: %v is no uint256", n)
		}
		n.FillBytes(w[64+32*i : 96+32*i])
	}
	copy(w[160:192], auth.Nonce[:])
	w[223] = v
	copy(w[224+32-len(r):256], r)
	copy(w[256+32-len(s):288], s)
	return out, nil
}

// errBadResult is a call whose result does not decode (no code at the
// address, or another contract).
var errBadResult = errors.New("unexpected call result")

func authorizationState(ctx context.Context, reader Reader, asset common.Address, auth *Authorization) (bool, error) {
	out, err := call(ctx, reader, asset, "authorizationState", auth.From, auth.Nonce)
	if err != nil {
		return false, err
	}
	used, ok := out[0].(bool)
	if !ok {
		return false, errBadResult
	}
	return used, nil
}

func balanceOf(ctx context.Context, reader Reader, asset, account common.Address) (*big.Int, error) {
	out, err := call(ctx, reader, asset, "balanceOf", account)
	if err != nil {
		return nil, err
	}
	balance, ok := out[0].(*big.Int)
	if !ok {
		return nil, errBadResult
	}
	return balance, nil
}

func readString(ctx context.Context, reader Reader, asset common.Address, method string) (string, error) {
	out, err := call(ctx, reader, asset, method)
	if err != nil {
		return "", err
	}
	s, ok := out[0].(string)
	if !ok {
		return "", errBadResult
	}
	return s, nil
}

// call calls a view method of the token ABI.
func call(ctx context.Context, reader Reader, to common.Address, method string, args ...any) ([]any, error) {
	input, err := token.Pack(method, args...)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", method, err)
	}
	out, err := reader.CallContract(ctx, ethereum.CallMsg{To: &to, Data: input}, nil)
	if err != nil {
		if isRevert(err) {
			return nil, err
		}
		return nil, fmt.Errorf("call %s on %s: %w", method, to.Hex(), err)
	}
	res, err := token.Unpack(method, out)
	if err != nil || len(res) == 0 {
		return nil, fmt.Errorf("call %s on %s: %w", method, to.Hex(), errBadResult)
	}
	return res, nil
}

// isRevert reports whether err is the node saying the call reverted (with
// the revert's data, or saying "execution reverted"), as opposed to the
// node being unreachable or failing to run it. Every JSON-RPC error has an
// ErrorData method: one without data is a revert only by its message. A
// node that answers a call at "latest" while a reorganisation shortens
// its chain fails with no data ("BlockOutOfRangeError: block height is 43
// but requested was 45", anvil): taken for a revert, it refused a good
// payment (402) and would have left a settled call's work unpaid.
func isRevert(err error) bool {
	var de interface{ ErrorData() any }
	if errors.As(err, &de) && de.ErrorData() != nil {
		return true
	}
	return strings.Contains(err.Error(), "execution reverted")
}

// revertReason returns the revert message of err, decoded from its data when
// there is any.
func revertReason(err error) string {
	var de interface{ ErrorData() any }
	if errors.As(err, &de) {
		if s, ok := de.ErrorData().(string); ok {
			data := common.FromHex(s)
			if msg, uerr := abiUnpackRevert(data); uerr == nil {
				return msg
			}
			if id := token.Errors["ERC20InsufficientBalance"].ID; len(data) >= 4 && bytes.Equal(data[:4], id[:4]) {
				return "ERC20InsufficientBalance"
			}
		}
	}
	return err.Error()
}

// refuse returns a *x402.Refusal.
func refuse(reason, format string, args ...any) error {
	return &x402.Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// refuseNever returns a *x402.Refusal of a payment that could never be
// accepted (NeverValid).
func refuseNever(reason, format string, args ...any) error {
	return &x402.Refusal{Reason: reason, Message: fmt.Sprintf(format, args...), NeverValid: true}
}
