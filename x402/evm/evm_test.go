package evm_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/json"
	"errors"
	"math/big"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/leaktest"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

// chain is the devchain every test of the package shares: tests use their
// own payers or fresh nonces, so they do not disturb each other.
var chain *devchain.Chain

// TestMain runs the package's tests on the shared devchain, and fails the
// run when they leave a goroutine behind (a relayer's, an endpoint's)
// once the devchain is closed.
func TestMain(m *testing.M) {
	os.Exit(leaktest.Main(m, func() (func() error, error) {
		var err error
		chain, err = devchain.New(context.Background(), nil)
		if err != nil {
			return nil, err
		}
		return chain.Close, nil
	}))
}

const price = "10000"

// requirement is the seller's requirement for a call on the devchain.
func requirement() *x402.Requirements {
	return &x402.Requirements{
		Scheme:            "exact",
		Network:           "eip155:8453",
		Amount:            price,
		Asset:             devchain.USDC.Hex(),
		PayTo:             chain.Account(devchain.PayToAccount).Address.Hex(),
		MaxTimeoutSeconds: 300,
		Extra:             json.RawMessage(`{"name":"USD Coin","version":"2"}`),
	}
}

// payment is what a client signs: an authorization, the domain it signs it
// in and the key, before it is turned into a PaymentPayload.
type payment struct {
	key    *ecdsa.PrivateKey
	auth   *evm.Authorization
	domain *evm.Domain
	// sig, when set, replaces the signature.
	sig []byte
}

// newPayment returns a valid payment of req by key.
func newPayment(t *testing.T, key *ecdsa.PrivateKey, req *x402.Requirements) *payment {
	t.Helper()
	var extra x402.EVMExtra
	require.NoError(t, json.Unmarshal(req.Extra, &extra))
	id, err := evm.ChainID(req.Network)
	require.NoError(t, err)
	value, ok := new(big.Int).SetString(req.Amount, 10)
	require.True(t, ok)
	var nonce common.Hash
	_, err = rand.Read(nonce[:])
	require.NoError(t, err)
	now := time.Now().Unix()
	return &payment{
		key: key,
		auth: &evm.Authorization{
			From:        crypto.PubkeyToAddress(key.PublicKey),
			To:          common.HexToAddress(req.PayTo),
			Value:       value,
			ValidAfter:  big.NewInt(now - 600),
			ValidBefore: big.NewInt(now + int64(req.MaxTimeoutSeconds)),
			Nonce:       nonce,
		},
		domain: &evm.Domain{Name: extra.Name, Version: extra.Version, ChainID: id, VerifyingContract: common.HexToAddress(req.Asset)},
	}
}

// payload signs the payment and returns the PaymentPayload.
func (p *payment) payload(t *testing.T, req *x402.Requirements) *x402.PaymentPayload {
	t.Helper()
	sig := p.sig
	if sig == nil {
		var err error
		sig, err = p.auth.Sign(p.key, p.domain)
		require.NoError(t, err)
	}
	raw, err := json.Marshal(x402.ExactEVMPayload{Signature: hexutilEncode(sig), Authorization: p.auth.Wire()})
	require.NoError(t, err)
	return &x402.PaymentPayload{X402Version: 2, Resource: &x402.ResourceInfo{URL: "http://127.0.0.1/api/x402/test"}, Accepted: *req, Payload: raw}
}

func hexutilEncode(b []byte) string { return "0x" + common.Bytes2Hex(b) }

// newKey returns a key with no funds.
func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	return key
}

// fundedKey returns a fresh key holding amount of the token.
func fundedKey(t *testing.T, amount int64) *ecdsa.PrivateKey {
	t.Helper()
	return fundedKeys(t, 1, amount)[0]
}

// fundedKeys returns n new keys holding amount each, minted concurrently
// so that the mints share few blocks: the package's chain mines a block per
// transaction when idle, and each block moves its clock a second ahead.
func fundedKeys(t *testing.T, n int, amount int64) []*ecdsa.PrivateKey {
	t.Helper()
	keys := make([]*ecdsa.PrivateKey, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range keys {
		keys[i] = newKey(t)
		wg.Go(func() {
			errs[i] = chain.Mint(context.Background(), crypto.PubkeyToAddress(keys[i].PublicKey), big.NewInt(amount))
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return keys
}

func newVerifier(t *testing.T) *evm.Verifier {
	t.Helper()
	v, err := evm.NewVerifier(&evm.VerifierConfig{
		Chains:  map[string]evm.Reader{"eip155:8453": chain.Client()},
		Relayer: chain.Account(devchain.RelayerAccount).Address,
	})
	require.NoError(t, err)
	return v
}

func newRelayer(t testing.TB) *evm.Relayer {
	t.Helper()
	return newRelayerOn(t, chain.Client())
}

// newRelayerOn returns a relayer of the shared chain reached through node,
// configured further by opts.
func newRelayerOn(t testing.TB, node evm.Backend, opts ...func(*evm.RelayerConfig)) *evm.Relayer {
	t.Helper()
	cfg := &evm.RelayerConfig{
		Key:    chain.Account(devchain.RelayerAccount).Key,
		Chains: map[string]evm.Backend{"eip155:8453": node},
	}
	for _, opt := range opts {
		opt(cfg)
	}
	r, err := evm.NewRelayer(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)
	return r
}

// batched configures a relayer to settle in batches through the devchain's
// Multicall3-compatible contract.
func batched(cfg *evm.RelayerConfig) {
	cfg.Multicall = map[string]common.Address{"eip155:8453": devchain.Multicall}
}

// relayerModes are the two ways a relayer sends transfers: a transaction
// each, or in batches.
var relayerModes = []struct {
	name string
	opts []func(*evm.RelayerConfig)
}{
	{"Single", nil},
	{"Batched", []func(*evm.RelayerConfig){batched}},
}

// deployWallet deploys a DevWallet owned by owner's key, holding amount of
// the token.
func deployWallet(t *testing.T, owner *ecdsa.PrivateKey, amount int64) common.Address {
	t.Helper()
	ctx := context.Background()
	wallet, err := contracts.Load(contracts.DevWallet)
	require.NoError(t, err)
	data, err := wallet.Deployment(crypto.PubkeyToAddress(owner.PublicKey))
	require.NoError(t, err)
	receipt, err := chain.Transact(ctx, chain.Account(devchain.DeployerAccount), nil, nil, data)
	require.NoError(t, err)
	if amount > 0 {
		require.NoError(t, chain.Mint(ctx, receipt.ContractAddress, big.NewInt(amount)))
	}
	return receipt.ContractAddress
}

func balance(t *testing.T, addr common.Address) *big.Int {
	t.Helper()
	b, err := chain.BalanceOf(context.Background(), addr)
	require.NoError(t, err)
	return b
}

func requireRefusal(t *testing.T, err error, reason string) {
	t.Helper()
	require.Error(t, err)
	var refusal *x402.Refusal
	require.ErrorAs(t, err, &refusal, "want a refusal, got %v", err)
	require.Equal(t, reason, refusal.Reason, refusal.Message)
	require.NotEmpty(t, refusal.Message)
}

func callMsg(to common.Address, data []byte) ethereum.CallMsg {
	return ethereum.CallMsg{To: &to, Data: data}
}

func loadToken() (*contracts.Artifact, error) { return contracts.Load(contracts.DevUSDC) }
