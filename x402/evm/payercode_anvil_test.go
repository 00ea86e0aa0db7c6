package evm_test

import (
	"bytes"
	"context"
	"errors"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

// flipAfterSimulation is a chain client through which the attacker flips
// its wallet's answer (DevBurnerWallet.setGasless) with a transaction of its
// own, mined as soon as the relayer has run the wallet's transfer at the
// fees of its transaction: between the last simulation and the send.
type flipAfterSimulation struct {
	evm.Backend
	wallet common.Address
	flip   func()
	once   sync.Once
}

func (f *flipAfterSimulation) CallContract(ctx context.Context, msg ethereum.CallMsg, block *big.Int) ([]byte, error) {
	out, err := f.Backend.CallContract(ctx, msg, block)
	if err == nil && msg.GasFeeCap != nil && bytes.Contains(msg.Data, f.wallet.Bytes()) {
		f.once.Do(f.flip)
	}
	return out, err
}

// TestAnvil_PayerCodeBounded pays from hostile contract wallets on Circle's
// USDC, each holding the price, whose isValidSignature (EIP-1271) burns
// gas: one that accepts only at a gas price of zero (verification's
// eth_call) is caught by the settlement's simulation at the transaction's
// fees, nothing sent; one that needs more than the gas cap is refused by
// verification; one that flips between the simulation and the send costs
// one reverted transaction under the cap, never sent again. Each is then
// refused by verification (through the refusals in Postgres, as another
// process reads them) and by settlement, and the relayer's later plain
// transfers keep the gas limit of a plain transfer.
func TestAnvil_PayerCodeBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAnvil(t, &anviltest.Config{BlockTime: time.Second})
	refusals := store.PayerCodeRefusals{DB: b.nonces.DB}
	relayerAddr := chain.Account(devchain.RelayerAccount).Address
	const gasCap = evm.DefaultPayerCodeGasCap
	newVerifier := func() *evm.Verifier {
		v, err := evm.NewVerifier(&evm.VerifierConfig{Chains: map[string]evm.Reader{"eip155:8453": b.node.Client},
			Relayer: relayerAddr, Refusals: refusals, PayerCodeGasCap: gasCap})
		require.NoError(t, err)
		return v
	}
	verifier := newVerifier()

	burner, err := contracts.Load(contracts.DevBurnerWallet)
	require.NoError(t, err)
	token, err := contracts.Load(contracts.FiatTokenV2_2)
	require.NoError(t, err)
	funder := devAccountKey(t, 7)
	// wallet deploys a DevBurnerWallet burning rounds of hashing, funded
	// with the price.
	wallet := func(rounds int64, gasless bool) common.Address {
		code, err := burner.Deployment(big.NewInt(rounds), gasless)
		require.NoError(t, err)
		addr := b.node.Deploy(funder, code)
		transfer, err := token.ABI.Pack("transfer", addr, big.NewInt(10_000))
		require.NoError(t, err)
		b.node.Transact(funder, devchain.USDC, transfer)
		return addr
	}
	// pay returns a payment from w: its signature is anything, the wallet
	// decides.
	pay := func(w common.Address) *x402.PaymentPayload {
		p := newPayment(t, newKey(t), requirement())
		p.auth.From = w
		return p.payload(t, requirement())
	}
	refusedBy := func(v *evm.Verifier, w common.Address, reason string) *x402.Refusal {
		t.Helper()
		_, err := v.Verify(ctx, requirement(), pay(w))
		r, ok := errors.AsType[*x402.Refusal](err)
		require.True(t, ok, "verification of %s: %v", w.Hex(), err)
		require.Equal(t, reason, r.Reason, r.Message)
		return r
	}

	gasless := wallet(400, true)
	greedy := wallet(20_000, false)
	flipper := wallet(400, false)
	setGasless, err := burner.ABI.Pack("setGasless", true)
	require.NoError(t, err)
	attacker := devAccountKey(t, 6)
	var reverted []uint64
	var revertedMu sync.Mutex
	relayer := b.relayer(t, &flipAfterSimulation{Backend: b.node.Client, wallet: flipper,
		flip: func() { b.node.Transact(attacker, flipper, setGasless) }}, func(c *evm.RelayerConfig) {
		c.Refusals, c.PayerCodeGasCap = refusals, gasCap
		c.Reverted = func(network string, gas uint64) {
			revertedMu.Lock()
			reverted = append(reverted, gas)
			revertedMu.Unlock()
		}
	})
	sent := func() uint64 {
		n, err := b.node.Client.NonceAt(ctx, relayerAddr, nil)
		require.NoError(t, err)
		return n
	}
	settle := func(p *x402.Payment) *x402.SettleResponse {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		resp, err := relayer.Settle(sctx, p)
		require.NoError(t, err, "a settlement of payer code ends at its first attempt")
		return resp
	}
	before := sent()

	// Accepts at a gas price of zero only: verification passes, the
	// settlement's simulation at the transaction's fees does not.
	p, err := verifier.Verify(ctx, requirement(), pay(gasless))
	require.NoError(t, err)
	resp := settle(p)
	require.False(t, resp.Success)
	require.Empty(t, resp.Transaction)
	require.Equal(t, before, sent(), "nothing sent for the gasless wallet")

	// Burns more than the cap: refused by verification.
	r := refusedBy(verifier, greedy, evm.ReasonSimulationFailed)
	require.Contains(t, r.Message, "needs more than 500000 gas")

	// Flips after the simulation: one transaction, reverted under the cap.
	p, err = verifier.Verify(ctx, requirement(), pay(flipper))
	require.NoError(t, err)
	resp = settle(p)
	require.False(t, resp.Success)
	require.NotEmpty(t, resp.Transaction)
	receipt, err := b.node.Client.TransactionReceipt(ctx, common.HexToHash(resp.Transaction))
	require.NoError(t, err)
	require.Equal(t, types.ReceiptStatusFailed, receipt.Status)
	tx, _, err := b.node.Client.TransactionByHash(ctx, receipt.TxHash)
	require.NoError(t, err)
	require.LessOrEqual(t, tx.Gas(), uint64(gasCap))
	require.Equal(t, before+1, sent(), "one transaction sent for the flipping wallet")
	revertedMu.Lock()
	require.Equal(t, []uint64{receipt.GasUsed}, reverted, "the reverted gas is reported")
	revertedMu.Unlock()
	// Settled again (another attempt): refused, nothing sent.
	resp = settle(p)
	require.Equal(t, evm.ReasonPayerCodeRefused, resp.ErrorReason)
	require.Equal(t, before+1, sent())

	// Both wallets are refused by verification: here (at most a second
	// later) and in another process at once.
	other := newVerifier()
	for _, w := range []common.Address{gasless, flipper} {
		refusedBy(other, w, evm.ReasonPayerCodeRefused)
		require.Eventually(t, func() bool {
			_, err := verifier.Verify(ctx, requirement(), pay(w))
			r, ok := errors.AsType[*x402.Refusal](err)
			return ok && r.Reason == evm.ReasonPayerCodeRefused
		}, 10*time.Second, 50*time.Millisecond)
	}

	// Honest contract wallets settle under the cap: one deployed, one
	// deployed by its settlement (ERC-6492).
	for _, deployed := range []bool{true, false} {
		owner := newKey(t)
		w, deploy := b.fundedWallet(t, owner, [32]byte{1})
		payload := payment6492(t, owner, w, devchain.WalletFactory, deploy, owner)
		if deployed {
			b.node.Transact(funder, devchain.WalletFactory, deploy)
			p := newPayment(t, owner, requirement())
			p.auth.From = w
			payload = p.payload(t, requirement())
		}
		p, err := verifier.Verify(ctx, requirement(), payload)
		require.NoError(t, err)
		resp := settle(p)
		require.True(t, resp.Success, resp.ErrorReason)
		receipt, err := b.node.Client.TransactionReceipt(ctx, common.HexToHash(resp.Transaction))
		require.NoError(t, err)
		t.Logf("an honest contract wallet's settlement (deployed before: %v) used %d gas", deployed, receipt.GasUsed)
	}

	// Plain transfers keep a plain transfer's gas limit.
	const plain = 3
	for i := range plain {
		key := devAccountKey(t, i)
		p, err := verifier.Verify(ctx, requirement(), newPayment(t, key, requirement()).payload(t, requirement()))
		require.NoError(t, err)
		resp := settle(p)
		require.True(t, resp.Success, resp.ErrorReason)
		tx, _, err := b.node.Client.TransactionByHash(ctx, common.HexToHash(resp.Transaction))
		require.NoError(t, err)
		require.Less(t, tx.Gas(), uint64(150_000), "a plain transfer's gas limit")
	}
	require.Equal(t, before+6, sent())
	for _, w := range []common.Address{gasless, greedy, flipper} {
		require.Equal(t, int64(10_000), b.balance(t, w).Int64(), "wallet %s paid nothing", w)
	}
	b.requireClean(t, plain+2)
}
