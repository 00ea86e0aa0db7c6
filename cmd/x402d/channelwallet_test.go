package main

import (
	"context"
	"crypto/ecdsa"
	"maps"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm/channel"
)

// TestContractWalletChannel: a contract wallet (contracts.DevWallet, whose
// isValidSignature, EIP-1271, accepts its owner key's signatures) pays
// `serve` through a channel of its own with no payer authorizer, on the
// devchain (DevUSDC) and on anvil (Circle's USDC). Its deposit goes
// through the EIP-3009 collector (the token's receiveWithAuthorization
// checks the wallet's EIP-1271 signature); its vouchers, signed by the
// owner key, pay calls; a voucher signed by another key is refused with
// the spec's voucher-signature error and charges nothing; and the claim
// job claims the vouchers (claimWithSignature checks them through the
// wallet too) and settles them to payTo.
func TestContractWalletChannel(t *testing.T) {
	t.Parallel()
	claimAtOnce := map[string]string{"CHANNEL_CLAIM_MIN_AMOUNT": "1"}
	for _, tc := range []struct {
		name  string
		start func(ctx context.Context, t *testing.T) (base string, chain *ethclient.Client, db *dbtest.DB)
	}{
		{"Devchain", func(ctx context.Context, t *testing.T) (string, *ethclient.Client, *dbtest.DB) {
			base, _, chain, db, _ := startChannelService(ctx, t, claimAtOnce)
			return base, chain, db
		}},
		{"Anvil", func(ctx context.Context, t *testing.T) (string, *ethclient.Client, *dbtest.DB) {
			node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
			db := dbtest.Schema(ctx, t)
			env := anvilChannelEnv(t, node, db)
			env["CHANNEL_CLAIM_MIN_AMOUNT"] = claimAtOnce["CHANNEL_CLAIM_MIN_AMOUNT"]
			return startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{}), node.Client, db
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			base, chain, db := tc.start(ctx, t)
			payContractWalletChannel(ctx, t, base, chain, db)
		})
	}
}

// walletChannel returns the client of a new channel of wallet, with no
// payer authorizer, on the terms of the service at base (its quote of
// regex), signing with key, and those terms.
func walletChannel(ctx context.Context, t *testing.T, base string, wallet common.Address, key *ecdsa.PrivateKey) (*voucherClient, *channel.Terms) {
	t.Helper()
	v := &voucherClient{t: t, base: base, key: key}
	terms, err := channel.TermsOf(v.option(ctx, "regex"))
	require.NoError(t, err)
	v.config = channel.Config{Payer: wallet, Receiver: terms.PayTo, ReceiverAuthorizer: terms.ReceiverAuthorizer, Token: terms.Asset,
		WithdrawDelay: terms.WithdrawDelay, Salt: common.Hash{0x12, 0x71}}
	v.id = v.config.ID(terms.ChainID)
	return v, terms
}

// payContractWalletChannel runs TestContractWalletChannel against the
// service at base settling on the chain of client.
func payContractWalletChannel(ctx context.Context, t *testing.T, base string, client *ethclient.Client, db *dbtest.DB) {
	t.Helper()
	owner, err := crypto.GenerateKey()
	require.NoError(t, err)
	stranger, err := crypto.GenerateKey()
	require.NoError(t, err)
	walletArtifact, err := contracts.Load(contracts.DevWallet)
	require.NoError(t, err)
	code, err := walletArtifact.Deployment(crypto.PubkeyToAddress(owner.PublicKey))
	require.NoError(t, err)
	wallet := fundedWallet(ctx, t, client, 3, code, 100_000)

	v, terms := walletChannel(ctx, t, base, wallet, owner)
	payToBefore := usdcBalance(ctx, t, client, terms.PayTo)
	charged := func() string {
		c, err := store.ChannelGet(ctx, db.Pool, devchainNetwork, v.id)
		require.NoError(t, err)
		return c.State.Charged.String()
	}
	const regexBody = `{"pattern":"\\d+","text":"a1b22","flags":"g"}`

	deposit := postVoucher(ctx, t, base, "regex", regexBody, v.depositHeader(ctx, "regex", 50_000, 10_000))
	require.Equal(t, http.StatusOK, deposit.status, deposit.body)
	require.True(t, deposit.settlement.Success)
	require.Len(t, deposit.settlement.Transaction, 66, "the deposit is sent")
	require.Equal(t, wallet.Hex(), deposit.settlement.Payer)
	onchain, err := channel.ReadState(ctx, client, v.id, nil)
	require.NoError(t, err)
	require.Equal(t, "50000", onchain.Balance.String(), "the wallet's deposit on chain")

	paid := postVoucher(ctx, t, base, "regex", regexBody, v.header(ctx, "regex", 20_000))
	require.Equal(t, http.StatusOK, paid.status, paid.body)
	require.Empty(t, paid.settlement.Transaction, "a voucher sends nothing")

	forged := postVoucher(ctx, t, base, "regex", regexBody, v.headerSignedBy(ctx, "regex", 30_000, stranger))
	require.Equal(t, http.StatusPaymentRequired, forged.status, forged.body)
	require.Equal(t, channel.ReasonVoucherSignature, forged.required.Error)
	require.Equal(t, "20000", charged(), "the forged voucher charged nothing")

	paid = postVoucher(ctx, t, base, "regex", regexBody, v.header(ctx, "regex", 30_000))
	require.Equal(t, http.StatusOK, paid.status, paid.body)
	require.Equal(t, "30000", charged())

	// A claim round now, as the periodic job runs it.
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	_, err = rc.Insert(ctx, worker.ClaimArgs{Network: devchainNetwork}, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := channel.ReadState(ctx, client, v.id, nil)
		require.NoError(t, err)
		return st.TotalClaimed.String() == "30000"
	}, 30*time.Second, 50*time.Millisecond, "the claim job claims the wallet's vouchers")
	require.Eventually(t, func() bool {
		return new(big.Int).Sub(usdcBalance(ctx, t, client, terms.PayTo), payToBefore).String() == "30000"
	}, 30*time.Second, 50*time.Millisecond, "and settles them to payTo")
	c, err := store.ChannelGet(ctx, db.Pool, devchainNetwork, v.id)
	require.NoError(t, err)
	require.Equal(t, "30000", c.State.OnChain.TotalClaimed.String())
	require.Nil(t, c.UnclaimedSince)
}

// burnerBench is `serve` on anvil and a channel, not opened yet, of a new
// DevBurnerWallet (10 rounds of hashing, funded with 100,000) with no
// payer authorizer (startBurnerBench).
type burnerBench struct {
	base   string
	node   *anviltest.Node
	db     *dbtest.DB
	wallet common.Address
	v      *voucherClient
	// turn sets the wallet gasless: its isValidSignature then accepts a
	// free eth_call and refuses a mined transaction.
	turn func()
}

// startBurnerBench starts a burnerBench, serve's settings with extra.
func startBurnerBench(ctx context.Context, t *testing.T, extra map[string]string) *burnerBench {
	t.Helper()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
	db := dbtest.Schema(ctx, t)
	env := anvilChannelEnv(t, node, db)
	maps.Copy(env, extra)
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})
	burner, err := contracts.Load(contracts.DevBurnerWallet)
	require.NoError(t, err)
	code, err := burner.Deployment(big.NewInt(10), false)
	require.NoError(t, err)
	wallet := fundedWallet(ctx, t, node.Client, 3, code, 100_000)
	gasless, err := burner.ABI.Pack("setGasless", true)
	require.NoError(t, err)
	funder, err := devchain.DeriveKey(devchain.Mnemonic, 3)
	require.NoError(t, err)
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	v, _ := walletChannel(ctx, t, base, wallet, key)
	return &burnerBench{base: base, node: node, db: db, wallet: wallet, v: v,
		turn: func() { transact(ctx, t, node.Client, funder, &wallet, gasless) }}
}

// TestAnvil_GaslessWalletDeposit: a contract wallet whose isValidSignature
// accepts signatures only at a gas price of zero (DevBurnerWallet set
// gasless: verification's eth_call passes, a mined transaction reverts)
// opens a channel with a deposit to `serve` on anvil. The deposit is run
// at the fees it would be sent with before it is sent: it is refused
// (invalid_batch_settlement_evm_deposit_simulation_failed), nothing is
// sent, and the wallet keeps its funds.
func TestAnvil_GaslessWalletDeposit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBurnerBench(ctx, t, nil)
	b.turn()
	base, node, wallet, v := b.base, b.node, b.wallet, b.v
	relayer := devAddress(t, devchain.RelayerAccount)
	sent, err := node.Client.NonceAt(ctx, relayer, nil)
	require.NoError(t, err)

	deposit := postVoucher(ctx, t, base, "regex", `{"pattern":"\\d+","text":"a1b22"}`, v.depositHeader(ctx, "regex", 50_000, 10_000))
	require.Equal(t, http.StatusPaymentRequired, deposit.status, deposit.body)
	require.Contains(t, deposit.body, channel.ReasonDepositSimulationFailed)
	after, err := node.Client.NonceAt(ctx, relayer, nil)
	require.NoError(t, err)
	require.Equal(t, sent, after, "nothing sent")
	require.Equal(t, big.NewInt(100_000), usdcBalance(ctx, t, node.Client, wallet), "the wallet keeps its funds")
}

// TestAnvil_TurnedWalletRefused: a contract wallet (DevBurnerWallet) opens
// a channel with `serve` on anvil and pays a voucher, then turns gasless
// (its isValidSignature accepts a free eth_call and refuses a mined
// transaction). Its next voucher still verifies and is served, but the
// claim round's run at the fees the claim would be sent with fails: the
// claim is not sent, the wallet's code is refused (PAYER_CODE_REFUSE_FOR),
// and its next voucher is refused before its signature is checked
// (invalid_batch_settlement_evm_payer_code_refused), charging nothing.
func TestAnvil_TurnedWalletRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBurnerBench(ctx, t, map[string]string{"CHANNEL_CLAIM_MIN_AMOUNT": "1"})
	base, node, db, wallet, v := b.base, b.node, b.db, b.wallet, b.v
	const regexBody = `{"pattern":"\\d+","text":"a1b22"}`
	charged := func() string {
		c, err := store.ChannelGet(ctx, db.Pool, devchainNetwork, v.id)
		require.NoError(t, err)
		return c.State.Charged.String()
	}

	deposit := postVoucher(ctx, t, base, "regex", regexBody, v.depositHeader(ctx, "regex", 50_000, 10_000))
	require.Equal(t, http.StatusOK, deposit.status, deposit.body)
	b.turn()
	paid := postVoucher(ctx, t, base, "regex", regexBody, v.header(ctx, "regex", 20_000))
	require.Equal(t, http.StatusOK, paid.status, "verification's free call still accepts: %s", paid.body)

	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	require.NoError(t, err)
	_, err = rc.Insert(ctx, worker.ClaimArgs{Network: devchainNetwork}, nil)
	require.NoError(t, err)
	var refusedAt time.Time
	require.Eventually(t, func() bool {
		refused, err := store.PayerCodeRefusals{DB: db.Pool}.PayerCodeRefused(ctx, devchainNetwork, time.Now())
		require.NoError(t, err)
		_, ok := refused[wallet]
		refusedAt = time.Now()
		return ok
	}, 30*time.Second, 50*time.Millisecond, "the claim round refuses the wallet's code")
	onchain, err := channel.ReadState(ctx, node.Client, v.id, nil)
	require.NoError(t, err)
	require.Less(t, onchain.TotalClaimed.Int64(), int64(20_000), "the charge the turned wallet's code checked is not claimed")

	// Verification reads the refusals at most a second old.
	<-time.After(time.Until(refusedAt.Add(time.Second)))
	refused := postVoucher(ctx, t, base, "regex", regexBody, v.header(ctx, "regex", 30_000))
	require.Equal(t, http.StatusPaymentRequired, refused.status, refused.body)
	require.Equal(t, channel.ReasonPayerCodeRefused, refused.required.Error)
	require.Equal(t, "20000", charged(), "the refused voucher charged nothing")
}
