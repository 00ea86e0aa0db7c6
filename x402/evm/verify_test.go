package evm_test

import (
	"context"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

func TestVerifier_Refusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newVerifier(t)
	r := newRelayer(t)
	payer := chain.Account(1).Key

	// A payment already settled, and a contract that is not a token.
	settled := newPayment(t, payer, requirement())
	p, err := v.Verify(ctx, requirement(), settled.payload(t, requirement()))
	require.NoError(t, err)
	resp, err := r.Settle(ctx, p)
	require.NoError(t, err)
	require.True(t, resp.Success, resp.ErrorReason)
	notToken := deployWallet(t, payer, 0)

	testCases := []struct {
		name string
		// req changes the seller's requirement; the client signs for it.
		req func(req *x402.Requirements)
		// pay changes what the client signs.
		pay func(p *payment)
		// payload changes the payload after signing.
		payload func(pp *x402.PaymentPayload)
		// validFor is the validity the seller asks (x402.WithValidFor).
		validFor   time.Duration
		wantReason string
	}{
		{
			name:       "nok, scheme of the payload",
			payload:    func(pp *x402.PaymentPayload) { pp.Accepted.Scheme = "upto" },
			wantReason: evm.ReasonScheme,
		},
		{
			name:       "nok, scheme of the requirement",
			req:        func(req *x402.Requirements) { req.Scheme = "upto" },
			wantReason: evm.ReasonScheme,
		},
		{
			name:       "nok, payload is not JSON of the exact EVM payload",
			payload:    func(pp *x402.PaymentPayload) { pp.Payload = json.RawMessage(`{"signature":1}`) },
			wantReason: evm.ReasonPayload,
		},
		{
			name:       "nok, payload is a Solana payload",
			payload:    func(pp *x402.PaymentPayload) { pp.Payload = json.RawMessage(`{"transaction":"AQID"}`) },
			wantReason: evm.ReasonPayload,
		},
		{
			name: "nok, nonce is not 32 bytes",
			payload: func(pp *x402.PaymentPayload) {
				pp.Payload = json.RawMessage(strings.Replace(string(pp.Payload), `"nonce":"0x`, `"nonce":"0x12`, 1))
			},
			wantReason: evm.ReasonPayload,
		},
		{
			name:       "nok, value is not a decimal number",
			payload:    func(pp *x402.PaymentPayload) { setAuthField(pp, "value", "0x2710") },
			wantReason: evm.ReasonPayload,
		},
		{
			name:       "nok, signature missing",
			payload:    func(pp *x402.PaymentPayload) { setField(pp, "signature", "") },
			wantReason: evm.ReasonMissingSignature,
		},
		{
			name:       "nok, requirement without EIP-712 domain",
			req:        func(req *x402.Requirements) { req.Extra = nil },
			pay:        func(p *payment) { p.domain.Name, p.domain.Version = "USD Coin", "2" },
			wantReason: evm.ReasonMissingDomain,
		},
		{
			name:       "nok, network of the payload",
			payload:    func(pp *x402.PaymentPayload) { pp.Accepted.Network = "eip155:84532" },
			wantReason: evm.ReasonNetworkMismatch,
		},
		{
			name:       "nok, signed by another key",
			pay:        func(p *payment) { p.key = chain.Account(2).Key },
			wantReason: evm.ReasonSignature,
		},
		{
			name:       "nok, signed with another EIP-712 name",
			pay:        func(p *payment) { p.domain.Name = "USDC" },
			wantReason: evm.ReasonSignature,
		},
		{
			name:       "nok, signed for another chain",
			pay:        func(p *payment) { p.domain.ChainID = big.NewInt(84532) },
			wantReason: evm.ReasonSignature,
		},
		{
			name:       "nok, signature with high s",
			pay:        func(p *payment) { p.sig = highS(t, p) },
			wantReason: evm.ReasonSignature,
		},
		{
			name:       "nok, smart wallet signature from an address with no code",
			pay:        func(p *payment) { p.sig = make([]byte, 160) },
			wantReason: evm.ReasonUndeployedWallet,
		},
		// The token checks the signature when the transfer is simulated;
		// the verifier checks it itself only for a payment it refuses, and
		// first, so that a bad signature is named whatever else is wrong.
		{
			name:       "nok, signed by another key, paying someone else",
			pay:        func(p *payment) { p.key = chain.Account(2).Key; p.auth.To = chain.Account(5).Address },
			wantReason: evm.ReasonSignature,
		},
		{
			name:       "nok, signed by another key, expiring",
			pay:        func(p *payment) { p.key = chain.Account(2).Key; p.auth.ValidBefore = big.NewInt(time.Now().Unix() + 3) },
			wantReason: evm.ReasonSignature,
		},
		{
			name:       "nok, signed by another key, underpaying",
			pay:        func(p *payment) { p.key = chain.Account(2).Key; p.auth.Value = big.NewInt(9999) },
			wantReason: evm.ReasonSignature,
		},
		{
			name:       "nok, signed by another key, for an asset with no code",
			req:        func(req *x402.Requirements) { req.Asset = "0x00000000000000000000000000000000000A55e7" },
			pay:        func(p *payment) { p.key = chain.Account(2).Key },
			wantReason: evm.ReasonSignature,
		},
		{
			name:       "nok, signed by another key, for a payer without funds",
			pay:        func(p *payment) { p.auth.From = crypto.PubkeyToAddress(newKey(t).PublicKey) },
			wantReason: evm.ReasonSignature,
		},
		{
			name:       "nok, signed by another key, with an authorization already used",
			pay:        func(p *payment) { p.key = chain.Account(2).Key; p.auth.Nonce = settled.auth.Nonce },
			wantReason: evm.ReasonSignature,
		},
		{
			name:       "nok, pays someone else",
			pay:        func(p *payment) { p.auth.To = chain.Account(5).Address },
			wantReason: evm.ReasonRecipientMismatch,
		},
		{
			name:       "nok, expires within the 6 s margin",
			pay:        func(p *payment) { p.auth.ValidBefore = big.NewInt(time.Now().Unix() + 3) },
			wantReason: evm.ReasonValidBefore,
		},
		{
			name:       "nok, expires before the operation's budget and the settlement window",
			pay:        func(p *payment) { p.auth.ValidBefore = big.NewInt(time.Now().Unix() + 150) },
			validFor:   3 * time.Minute,
			wantReason: evm.ReasonValidBefore,
		},
		{
			name:       "nok, not valid yet",
			pay:        func(p *payment) { p.auth.ValidAfter = big.NewInt(time.Now().Unix() + 60) },
			wantReason: evm.ReasonValidAfter,
		},
		{
			name:       "nok, overpays",
			pay:        func(p *payment) { p.auth.Value = big.NewInt(10001) },
			wantReason: evm.ReasonValueMismatch,
		},
		{
			name:       "nok, underpays",
			pay:        func(p *payment) { p.auth.Value = big.NewInt(9999) },
			wantReason: evm.ReasonValueMismatch,
		},
		{
			name:       "nok, asset with no code",
			req:        func(req *x402.Requirements) { req.Asset = "0x00000000000000000000000000000000000A55e7" },
			wantReason: evm.ReasonAssetNotDeployed,
		},
		{
			name:       "nok, asset without EIP-3009",
			req:        func(req *x402.Requirements) { req.Asset = notToken.Hex() },
			wantReason: evm.ReasonEIP3009NotSupported,
		},
		{
			name: "nok, requirement names the token wrongly",
			req: func(req *x402.Requirements) {
				req.Extra = json.RawMessage(`{"name":"USD Coin (Bridged)","version":"2"}`)
			},
			wantReason: evm.ReasonTokenNameMismatch,
		},
		{
			name:       "nok, requirement has the wrong token version",
			req:        func(req *x402.Requirements) { req.Extra = json.RawMessage(`{"name":"USD Coin","version":"1"}`) },
			wantReason: evm.ReasonTokenVersionMismatch,
		},
		{
			name:       "nok, payer without funds",
			pay:        func(p *payment) { p.key = newKey(t); p.auth.From = crypto.PubkeyToAddress(p.key.PublicKey) },
			wantReason: evm.ReasonInsufficientBalance,
		},
		{
			name:       "nok, authorization already used",
			pay:        func(p *payment) { p.auth.Nonce = settled.auth.Nonce },
			wantReason: evm.ReasonNonceAlreadyUsed,
		},
		{
			name: "nok, transfer reverts for another reason",
			// The token refuses transfers to the zero address.
			req:        func(req *x402.Requirements) { req.PayTo = common.Address{}.Hex() },
			wantReason: evm.ReasonSimulationFailed,
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := requirement()
			if tc.req != nil {
				tc.req(req)
			}
			// The client signs what the (changed) requirement asks.
			signed := *req
			if len(signed.Extra) == 0 {
				signed.Extra = requirement().Extra
			}
			p := newPayment(t, payer, &signed)
			if tc.pay != nil {
				tc.pay(p)
			}
			pp := p.payload(t, req)
			if tc.payload != nil {
				tc.payload(pp)
			}
			_, err := v.Verify(x402.WithValidFor(ctx, tc.validFor), req, pp)
			requireRefusal(t, err, tc.wantReason)
		})
	}
}

func TestVerifier_Accepts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newVerifier(t)

	t.Run("EOA", func(t *testing.T) {
		t.Parallel()
		key := chain.Account(3).Key
		p := newPayment(t, key, requirement())
		pp := p.payload(t, requirement())
		before := time.Now()
		got, err := v.Verify(ctx, requirement(), pp)
		require.NoError(t, err)
		require.WithinRange(t, got.VerifiedAt, before.Truncate(time.Second), time.Now())
		require.Equal(t, time.UTC, got.VerifiedAt.Location())
		require.Equal(t, "eip155:8453", got.Network)
		require.Equal(t, "0x90F79bf6EB2c4f870365E785982E1f101E93b906", got.Payer)
		require.Equal(t, strings.ToLower(p.auth.Nonce.Hex()), got.Nonce)
		require.Equal(t, price, got.Amount)
		require.Equal(t, "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", got.Asset)
		// The ledger keeps the version, the option accepted and the
		// signed authorization, not the resource or the extensions.
		var back x402.PaymentPayload
		require.NoError(t, json.Unmarshal(got.Payload, &back))
		require.NotNil(t, pp.Resource)
		kept := *pp
		kept.Resource, kept.Extensions = nil, nil
		require.Equal(t, kept, back)
	})

	t.Run("VZeroOrOne", func(t *testing.T) {
		t.Parallel()
		p := newPayment(t, chain.Account(3).Key, requirement())
		sig, err := p.auth.Sign(p.key, p.domain)
		require.NoError(t, err)
		sig[64] -= 27
		p.sig = sig
		_, err = v.Verify(ctx, requirement(), p.payload(t, requirement()))
		require.NoError(t, err)
	})

	t.Run("LongValidityWindow", func(t *testing.T) {
		t.Parallel()
		// The official Go client signs an hour ahead whatever the timeout.
		p := newPayment(t, chain.Account(3).Key, requirement())
		p.auth.ValidBefore = big.NewInt(time.Now().Unix() + 3600)
		_, err := v.Verify(ctx, requirement(), p.payload(t, requirement()))
		require.NoError(t, err)
	})

	t.Run("LeavesTheBudgetAndTheSettlementWindow", func(t *testing.T) {
		t.Parallel()
		// The official TypeScript client signs the quote's
		// maxTimeoutSeconds ahead.
		p := newPayment(t, chain.Account(3).Key, requirement())
		p.auth.ValidBefore = big.NewInt(time.Now().Unix() + 300)
		_, err := v.Verify(x402.WithValidFor(ctx, 3*time.Minute), requirement(), p.payload(t, requirement()))
		require.NoError(t, err)
	})

	t.Run("Balance", func(t *testing.T) {
		t.Parallel()
		key := chain.Account(4).Key
		got, err := v.Verify(ctx, requirement(), newPayment(t, key, requirement()).payload(t, requirement()))
		require.NoError(t, err)
		balance, err := v.Balance(ctx, got)
		require.NoError(t, err)
		want, err := chain.BalanceOf(ctx, crypto.PubkeyToAddress(key.PublicKey))
		require.NoError(t, err)
		require.Equal(t, want, balance)
		require.Positive(t, balance.Sign())
	})

	t.Run("AddressesInAnyCase", func(t *testing.T) {
		t.Parallel()
		req := requirement()
		req.PayTo = strings.ToLower(req.PayTo)
		req.Asset = strings.ToLower(req.Asset)
		p := newPayment(t, chain.Account(3).Key, req)
		pp := p.payload(t, req)
		setAuthField(pp, "from", strings.ToLower(p.auth.From.Hex()))
		setAuthField(pp, "to", strings.ToUpper(p.auth.To.Hex()[2:]))
		pp.Payload = json.RawMessage(strings.Replace(string(pp.Payload), `"to":"`, `"to":"0x`, 1))
		got, err := v.Verify(ctx, req, pp)
		require.NoError(t, err)
		require.Equal(t, p.auth.From.Hex(), got.Payer)
		payer, nonce, err := evm.Identify(pp)
		require.NoError(t, err)
		require.Equal(t, got.Payer, payer)
		require.Equal(t, got.Nonce, nonce)
	})

	t.Run("ContractWallet", func(t *testing.T) {
		t.Parallel()
		owner := newKey(t)
		wallet := deployWallet(t, owner, 50_000)
		p := newPayment(t, owner, requirement())
		p.auth.From = wallet
		pp := p.payload(t, requirement())
		got, err := v.Verify(ctx, requirement(), pp)
		require.NoError(t, err)
		require.Equal(t, wallet.Hex(), got.Payer)

		// Another key's signature is not the wallet's.
		p.key = newKey(t)
		_, err = v.Verify(ctx, requirement(), p.payload(t, requirement()))
		requireRefusal(t, err, evm.ReasonSignature)
	})
}

func TestVerifier_ChainUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dead, err := ethclient.Dial("http://127.0.0.1:1")
	require.NoError(t, err)
	v, err := evm.NewVerifier(&evm.VerifierConfig{Chains: map[string]evm.Reader{"eip155:8453": dead}})
	require.NoError(t, err)
	p := newPayment(t, chain.Account(3).Key, requirement())
	_, err = v.Verify(ctx, requirement(), p.payload(t, requirement()))
	require.Error(t, err)
	var refusal *x402.Refusal
	require.NotErrorAs(t, err, &refusal, "an unreachable chain is not a refusal")
	require.Error(t, v.CheckChains(ctx))
}

func TestVerifier_CheckChains(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.NoError(t, newVerifier(t).CheckChains(ctx))
	wrong, err := evm.NewVerifier(&evm.VerifierConfig{Chains: map[string]evm.Reader{"eip155:84532": chain.Client()}})
	require.NoError(t, err)
	require.ErrorContains(t, wrong.CheckChains(ctx), "serves chain 8453")
	_, err = evm.NewVerifier(&evm.VerifierConfig{Chains: map[string]evm.Reader{"base": chain.Client()}})
	require.Error(t, err)
}

func TestIdentify(t *testing.T) {
	t.Parallel()
	p := newPayment(t, chain.Account(3).Key, requirement())
	pp := p.payload(t, requirement())
	setAuthField(pp, "nonce", strings.ToUpper(p.auth.Nonce.Hex()[2:]))
	pp.Payload = json.RawMessage(strings.Replace(string(pp.Payload), `"nonce":"`, `"nonce":"0x`, 1))
	payer, nonce, err := evm.Identify(pp)
	require.NoError(t, err)
	require.Equal(t, "0x90F79bf6EB2c4f870365E785982E1f101E93b906", payer)
	require.Equal(t, strings.ToLower(p.auth.Nonce.Hex()), nonce)

	// No signature check: a payment whose signature is garbage is still
	// named.
	setField(pp, "signature", "0x1234")
	_, _, err = evm.Identify(pp)
	require.NoError(t, err)

	pp.Payload = json.RawMessage(`{}`)
	_, _, err = evm.Identify(pp)
	requireRefusal(t, err, evm.ReasonPayload)
}

func TestDomainSeparatorMatchesToken(t *testing.T) {
	t.Parallel()
	// The token computes its separator in Solidity (OpenZeppelin EIP712)
	// at the address the devchain placed it.
	out, err := chain.Client().CallContract(context.Background(), callMsg(devchain.USDC, crypto.Keccak256([]byte("DOMAIN_SEPARATOR()"))[:4]), nil)
	require.NoError(t, err)
	d := evm.Domain{Name: "USD Coin", Version: "2", ChainID: big.NewInt(8453), VerifyingContract: devchain.USDC}
	require.Equal(t, common.BytesToHash(out), d.Separator())
}

func TestChainID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		network string
		want    int64
	}{
		{"eip155:8453", 8453}, {"eip155:1", 1}, {"eip155:324705682", 324705682},
		{"eip155:", 0}, {"eip155:08453", 0}, {"eip155:-1", 0}, {"eip155:0", 0}, {"base", 0},
		{"solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", 0}, {"eip155:12x", 0},
	} {
		id, err := evm.ChainID(tc.network)
		if tc.want == 0 {
			require.Error(t, err, tc.network)
			continue
		}
		require.NoError(t, err, tc.network)
		require.Equal(t, tc.want, id.Int64())
	}
}

// setField sets a top-level string field of the exact EVM payload.
func setField(pp *x402.PaymentPayload, field, value string) {
	var m map[string]any
	_ = json.Unmarshal(pp.Payload, &m)
	m[field] = value
	pp.Payload, _ = json.Marshal(m)
}

// setAuthField sets a field of the authorization.
func setAuthField(pp *x402.PaymentPayload, field, value string) {
	var m map[string]map[string]any
	var top map[string]any
	_ = json.Unmarshal(pp.Payload, &top)
	_ = json.Unmarshal(pp.Payload, &m)
	auth := m["authorization"]
	auth[field] = value
	top["authorization"] = auth
	pp.Payload, _ = json.Marshal(top)
}

// highS returns the payment's signature with s replaced by n-s, which
// recovers the same key but which the token refuses.
func highS(t *testing.T, p *payment) []byte {
	t.Helper()
	sig, err := p.auth.Sign(p.key, p.domain)
	require.NoError(t, err)
	n := crypto.S256().Params().N
	s := new(big.Int).Sub(n, new(big.Int).SetBytes(sig[32:64]))
	copy(sig[32:64], common.LeftPadBytes(s.Bytes(), 32))
	sig[64] = 27 + (1 - (sig[64] - 27))
	return sig
}
