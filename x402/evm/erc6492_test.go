package evm_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

// counterfactual returns the address of the DevWallet of owner that the
// devchain's factory would deploy with a fresh salt, funded with amount of
// the token before it exists, and the factory call that deploys it.
func counterfactual(t *testing.T, owner *ecdsa.PrivateKey, amount int64) (common.Address, []byte) {
	t.Helper()
	ctx := context.Background()
	factory, err := contracts.Load(contracts.DevWalletFactory)
	require.NoError(t, err)
	var salt [32]byte
	_, err = rand.Read(salt[:])
	require.NoError(t, err)
	ownerAddr := crypto.PubkeyToAddress(owner.PublicKey)
	input, err := factory.ABI.Pack("addressOf", ownerAddr, salt)
	require.NoError(t, err)
	out, err := chain.Client().CallContract(ctx, ethereum.CallMsg{To: &devchain.WalletFactory, Data: input}, nil)
	require.NoError(t, err)
	vals, err := factory.ABI.Unpack("addressOf", out)
	require.NoError(t, err)
	wallet := vals[0].(common.Address)
	require.NoError(t, chain.Mint(ctx, wallet, big.NewInt(amount)))
	deploy, err := factory.ABI.Pack("deploy", ownerAddr, salt)
	require.NoError(t, err)
	return wallet, deploy
}

// payment6492 is a payment from wallet (not deployed) signed by owner, its
// signature wrapped as ERC-6492 with the factory call that deploys it.
func payment6492(t *testing.T, owner *ecdsa.PrivateKey, wallet common.Address, factory common.Address, deploy []byte, signer *ecdsa.PrivateKey) *x402.PaymentPayload {
	t.Helper()
	pay := newPayment(t, owner, requirement())
	pay.auth.From = wallet
	inner, err := pay.auth.Sign(signer, pay.domain)
	require.NoError(t, err)
	pay.sig, err = evm.Wrap6492(factory, deploy, inner)
	require.NoError(t, err)
	return pay.payload(t, requirement())
}

// TestERC6492 pays from smart-contract wallets that do not exist yet, with
// ERC-6492 signatures, as agent wallets do: verification simulates the
// wallet's deployment and the transfer; settlement deploys it and moves the
// funds in one transaction. A signature the wallet would refuse, and a
// factory the seller does not allow, are refused with the official reasons.
func TestERC6492(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newVerifier(t)
	for _, mode := range relayerModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			owner := newKey(t)
			wallet, deploy := counterfactual(t, owner, 10_000)
			code, err := chain.Client().CodeAt(ctx, wallet, nil)
			require.NoError(t, err)
			require.Empty(t, code, "the wallet is not deployed yet")

			p, err := v.Verify(ctx, requirement(), payment6492(t, owner, wallet, devchain.WalletFactory, deploy, owner))
			require.NoError(t, err)
			require.Equal(t, wallet.Hex(), p.Payer)
			resp, err := newRelayerOn(t, chain.Client(), mode.opts...).Settle(ctx, p)
			require.NoError(t, err)
			require.True(t, resp.Success, resp.ErrorReason)
			code, err = chain.Client().CodeAt(ctx, wallet, nil)
			require.NoError(t, err)
			require.NotEmpty(t, code, "settlement deployed the wallet")
			require.Zero(t, balance(t, wallet).Sign(), "the wallet paid")

			// Settled again (a retry): the same transaction.
			again, err := newRelayerOn(t, chain.Client(), mode.opts...).Settle(ctx, p)
			require.NoError(t, err)
			require.Equal(t, onWire(resp), onWire(again))
		})
	}
	t.Run("DeployedSinceItSigned", func(t *testing.T) {
		// A wrapped signature of a wallet deployed meanwhile: its inner
		// signature, checked by the wallet (EIP-1271).
		t.Parallel()
		owner := newKey(t)
		wallet, deploy := counterfactual(t, owner, 10_000)
		payload := payment6492(t, owner, wallet, devchain.WalletFactory, deploy, owner)
		_, err := chain.Transact(ctx, chain.Account(devchain.DeployerAccount), &devchain.WalletFactory, nil, deploy)
		require.NoError(t, err)
		p, err := v.Verify(ctx, requirement(), payload)
		require.NoError(t, err)
		resp, err := newRelayer(t).Settle(ctx, p)
		require.NoError(t, err)
		require.True(t, resp.Success, resp.ErrorReason)
	})
	t.Run("WrongSigner", func(t *testing.T) {
		t.Parallel()
		owner := newKey(t)
		wallet, deploy := counterfactual(t, owner, 10_000)
		_, err := v.Verify(ctx, requirement(), payment6492(t, owner, wallet, devchain.WalletFactory, deploy, newKey(t)))
		requireRefusal(t, err, evm.ReasonSignature)
		code, err := chain.Client().CodeAt(ctx, wallet, nil)
		require.NoError(t, err)
		require.Empty(t, code, "verification deployed nothing")
	})
	t.Run("FactoryNotAllowed", func(t *testing.T) {
		t.Parallel()
		owner := newKey(t)
		wallet, deploy := counterfactual(t, owner, 10_000)
		strict, err := evm.NewVerifier(&evm.VerifierConfig{
			Chains:        map[string]evm.Reader{"eip155:8453": chain.Client()},
			Relayer:       chain.Account(devchain.RelayerAccount).Address,
			Factories6492: []common.Address{common.HexToAddress("0x000000000000000000000000000000000000fac7")},
		})
		require.NoError(t, err)
		_, err = strict.Verify(ctx, requirement(), payment6492(t, owner, wallet, devchain.WalletFactory, deploy, owner))
		requireRefusal(t, err, evm.ReasonUndeployedWallet)
	})
	t.Run("Malformed", func(t *testing.T) {
		t.Parallel()
		owner := newKey(t)
		pay := newPayment(t, owner, requirement())
		pay.sig = append([]byte{1, 2, 3}, common.FromHex("0x6492649264926492649264926492649264926492649264926492649264926492")...)
		_, err := v.Verify(ctx, requirement(), pay.payload(t, requirement()))
		requireRefusal(t, err, evm.ReasonPayload)
	})
}
