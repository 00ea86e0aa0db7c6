package facilitator_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/evmtest"
	"github.com/x402d/x402d/x402/facilitator"
)

// testBundle is a facilitator served over HTTP, settling on a devchain with
// the evm package (evmtest), and clients of it.
type testBundle struct {
	chain       *devchain.Chain
	facilitator *evmtest.Facilitator
	client      *facilitator.Client
	// withChain is a client that can read the chain (Config.Chains).
	withChain *facilitator.Client
}

const token = "Bearer test-token"

func setup(t *testing.T) *testBundle {
	t.Helper()
	stack := evmtest.New(t)
	b := &testBundle{chain: stack.Chain, facilitator: stack.Facilitator(t, token)}
	var err error
	b.client, err = facilitator.New(&facilitator.Config{
		URL:    b.facilitator.URL + "/",
		Header: http.Header{"Authorization": {token}},
	})
	require.NoError(t, err)
	b.withChain, err = facilitator.New(&facilitator.Config{
		URL:    b.facilitator.URL + "/",
		Header: http.Header{"Authorization": {token}},
		Chains: map[string]evm.LogReader{stack.Chain.Network(): stack.Chain.Client()},
	})
	require.NoError(t, err)
	return b
}

func (b *testBundle) requirement() *x402.Requirements {
	return &x402.Requirements{
		Scheme: "exact", Network: "eip155:8453", Amount: "10000", Asset: devchain.USDC.Hex(),
		PayTo: b.chain.Account(devchain.PayToAccount).Address.Hex(), MaxTimeoutSeconds: 300,
		Extra: json.RawMessage(`{"name":"USD Coin","version":"2"}`),
	}
}

// pay returns a payment payload of req signed by development account i.
func (b *testBundle) pay(t *testing.T, i int, req *x402.Requirements) *x402.PaymentPayload {
	t.Helper()
	key := b.chain.Account(i).Key
	var nonce common.Hash
	_, err := rand.Read(nonce[:])
	require.NoError(t, err)
	value, _ := new(big.Int).SetString(req.Amount, 10)
	now := time.Now().Unix()
	auth := &evm.Authorization{
		From: crypto.PubkeyToAddress(key.PublicKey), To: common.HexToAddress(req.PayTo), Value: value,
		ValidAfter: big.NewInt(now - 600), ValidBefore: big.NewInt(now + 300), Nonce: nonce,
	}
	sig, err := auth.Sign(key, &evm.Domain{Name: "USD Coin", Version: "2", ChainID: big.NewInt(8453), VerifyingContract: devchain.USDC})
	require.NoError(t, err)
	raw, err := json.Marshal(x402.ExactEVMPayload{Signature: "0x" + common.Bytes2Hex(sig), Authorization: auth.Wire()})
	require.NoError(t, err)
	return &x402.PaymentPayload{X402Version: 2, Accepted: *req, Payload: raw}
}

func TestClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	t.Run("Supported", func(t *testing.T) {
		s, err := b.client.Supported(ctx)
		require.NoError(t, err)
		require.Len(t, s.Kinds, 3)
		require.True(t, s.Supports("exact", "eip155:8453"))
		require.False(t, s.Supports("exact", "base"), "v1 names are not v2 networks")
		require.False(t, s.Supports("exact", "eip155:84532"))
		require.JSONEq(t, `{"feePayer":"2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"}`, string(s.Kinds[2].Extra))
		require.Equal(t, []string{"bazaar"}, s.Extensions)
	})

	t.Run("VerifyThenSettle", func(t *testing.T) {
		req := b.requirement()
		payload := b.pay(t, 2, req)
		asked := time.Now()
		p, err := b.client.Verify(ctx, req, payload)
		require.NoError(t, err)
		require.WithinRange(t, p.VerifiedAt, asked, time.Now(), "verified when asked")
		require.Equal(t, b.chain.Account(2).Address.Hex(), p.Payer)
		payer, nonce, err := evm.Identify(payload)
		require.NoError(t, err)
		require.Equal(t, payer, p.Payer)
		require.Equal(t, nonce, p.Nonce)
		require.Equal(t, "10000", p.Amount)

		before, err := b.chain.BalanceOf(ctx, b.chain.Account(2).Address)
		require.NoError(t, err)
		resp, err := b.client.Settle(ctx, p)
		require.NoError(t, err)
		require.True(t, resp.Success, resp.ErrorReason)
		require.Equal(t, "eip155:8453", resp.Network)
		require.Len(t, resp.Transaction, 66)
		after, err := b.chain.BalanceOf(ctx, b.chain.Account(2).Address)
		require.NoError(t, err)
		require.Equal(t, int64(10_000), new(big.Int).Sub(before, after).Int64())

		// Verified again after settlement: the facilitator's reason.
		_, err = b.client.Verify(ctx, req, payload)
		var refusal *x402.Refusal
		require.ErrorAs(t, err, &refusal)
		require.Equal(t, evm.ReasonNonceAlreadyUsed, refusal.Reason)

		// Settled again: the facilitator refuses with 400 and a reason.
		resp, err = b.client.Settle(ctx, p)
		require.NoError(t, err)
		require.False(t, resp.Success)
		require.Equal(t, evm.ReasonNonceAlreadyUsed, resp.ErrorReason)
	})

	t.Run("ValidityTheSellerAsks", func(t *testing.T) {
		// Signed 300 s ahead: refused when the seller asks 6 minutes,
		// before the facilitator is asked; accepted when it asks 3.
		req := b.requirement()
		payload := b.pay(t, 2, req)
		_, err := b.client.Verify(x402.WithValidFor(ctx, 6*time.Minute), req, payload)
		var refusal *x402.Refusal
		require.ErrorAs(t, err, &refusal)
		require.Equal(t, evm.ReasonValidBefore, refusal.Reason)
		require.Contains(t, refusal.Message, "at least 360 s")
		_, err = b.client.Verify(x402.WithValidFor(ctx, 3*time.Minute), req, payload)
		require.NoError(t, err)
	})

	// The facilitator settles, but its answer is lost; the retry is
	// refused as nonce_already_used. A client that reads the chain finds
	// its own settlement there: the payment is settled once and the result
	// delivered. Without the chain the refusal stands.
	t.Run("LostAnswerThenRetry", func(t *testing.T) {
		req := b.requirement()
		payload := b.pay(t, 3, req)
		p, err := b.withChain.Verify(ctx, req, payload)
		require.NoError(t, err)
		before, err := b.chain.BalanceOf(ctx, b.chain.Account(3).Address)
		require.NoError(t, err)

		b.facilitator.LoseSettleAnswers.Store(1)
		_, err = b.withChain.Settle(ctx, p)
		require.Error(t, err, "a lost answer is retried")

		resp, err := b.withChain.Settle(ctx, p)
		require.NoError(t, err)
		require.True(t, resp.Success, resp.ErrorReason)
		receipt, err := b.chain.Client().TransactionReceipt(ctx, common.HexToHash(resp.Transaction))
		require.NoError(t, err)
		require.Equal(t, uint64(1), receipt.Status)
		after, err := b.chain.BalanceOf(ctx, b.chain.Account(3).Address)
		require.NoError(t, err)
		require.Equal(t, int64(10_000), new(big.Int).Sub(before, after).Int64(), "moved once")

		resp, err = b.client.Settle(ctx, p)
		require.NoError(t, err)
		require.False(t, resp.Success)
		require.Equal(t, evm.ReasonNonceAlreadyUsed, resp.ErrorReason)
	})

	// A payment canceled by its payer is used too, but by no transfer: the
	// refusal stands even with the chain.
	t.Run("CanceledStaysRefused", func(t *testing.T) {
		req := b.requirement()
		payload := b.pay(t, 4, req)
		p, err := b.withChain.Verify(ctx, req, payload)
		require.NoError(t, err)
		var wire x402.ExactEVMPayload
		require.NoError(t, json.Unmarshal(payload.Payload, &wire))
		evmtest.CancelAuthorization(t, b.chain, b.chain.Account(4).Key,
			common.HexToAddress(wire.Authorization.From), common.HexToHash(wire.Authorization.Nonce))
		resp, err := b.withChain.Settle(ctx, p)
		require.NoError(t, err)
		require.False(t, resp.Success)
		require.Equal(t, evm.ReasonNonceAlreadyUsed, resp.ErrorReason)
	})

	t.Run("VerifyRefused", func(t *testing.T) {
		req := b.requirement()
		payload := b.pay(t, 2, req)
		other := *req
		other.PayTo = b.chain.Account(5).Address.Hex()
		_, err := b.client.Verify(ctx, &other, payload)
		var refusal *x402.Refusal
		require.ErrorAs(t, err, &refusal)
		require.Equal(t, evm.ReasonRecipientMismatch, refusal.Reason)
		require.NotEmpty(t, refusal.Message)
	})

	t.Run("FacilitatorDown", func(t *testing.T) {
		down := setup(t)
		down.facilitator.Fail.Store(http.StatusBadGateway)
		req := down.requirement()
		payload := down.pay(t, 2, req)
		_, err := down.client.Verify(ctx, req, payload)
		require.Error(t, err)
		var refusal *x402.Refusal
		require.NotErrorAs(t, err, &refusal, "a facilitator that is down is not a refusal")
		raw, err := json.Marshal(payload)
		require.NoError(t, err)
		resp, err := down.client.Settle(ctx, &x402.Payment{Network: req.Network, Payer: "0x1", Nonce: "0x2", Amount: req.Amount, Asset: req.Asset, Payload: raw})
		require.Error(t, err, "retry later")
		require.Nil(t, resp)
		_, err = down.client.Supported(ctx)
		require.Error(t, err)
	})

	t.Run("UnknownNetworkNeedsIdentify", func(t *testing.T) {
		req := b.requirement()
		payload := b.pay(t, 2, req)
		payload.Accepted.Network = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"
		_, err := b.client.Verify(ctx, req, payload)
		require.ErrorContains(t, err, "cannot identify")
	})
}

func TestNew(t *testing.T) {
	t.Parallel()
	_, err := facilitator.New(&facilitator.Config{})
	require.Error(t, err)
	_, err = facilitator.New(&facilitator.Config{URL: "ftp://example.com"})
	require.Error(t, err)
}
