package channel_test

import (
	"crypto/ecdsa"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm/channel"
)

// testChain is a chain the scenario runs on: its client and a way to send
// a development account's transaction and require it mined successfully.
type testChain struct {
	client *ethclient.Client
	send   func(t *testing.T, from int, to common.Address, data []byte) *types.Receipt
}

// abiConfig is a ChannelConfig as go-ethereum's ABI encoder takes it.
type abiConfig struct {
	Payer              common.Address
	PayerAuthorizer    common.Address
	Receiver           common.Address
	ReceiverAuthorizer common.Address
	Token              common.Address
	WithdrawDelay      *big.Int
	Salt               [32]byte
}

func tuple(c *channel.Config) abiConfig {
	return abiConfig{c.Payer, c.PayerAuthorizer, c.Receiver, c.ReceiverAuthorizer, c.Token, new(big.Int).SetUint64(c.WithdrawDelay), c.Salt}
}

type abiVoucher struct {
	Channel            abiConfig
	MaxClaimableAmount *big.Int
}

type abiVoucherClaim struct {
	Voucher      abiVoucher
	Signature    []byte
	TotalClaimed *big.Int
}

func key(t testing.TB, i int) *ecdsa.PrivateKey {
	t.Helper()
	k, err := devchain.DeriveKey(devchain.Mnemonic, uint32(i))
	require.NoError(t, err)
	return k
}

// sign signs digest with the development account i as Solidity's ECDSA
// takes it (v 27 or 28).
func sign(t testing.TB, i int, digest common.Hash) []byte {
	t.Helper()
	sig, err := crypto.Sign(digest[:], key(t, i))
	require.NoError(t, err)
	sig[64] += 27
	return sig
}

// TestOnChain runs a channel's life on anvil with Circle's USDC and on the
// devchain with DevUSDC, on this repository's BatchSettlement and
// ERC3009DepositCollector at the canonical addresses: the official client's
// deposit goes through the collector (receiveWithAuthorization), its
// vouchers are claimed with claimWithSignature of the receiver authorizer,
// the claimed amount is settled to payTo and the rest refunded with
// refundWithSignature; every amount moves as the spec says, and the
// contract's digests are this package's.
func TestOnChain(t *testing.T) {
	t.Parallel()
	t.Run("Anvil", func(t *testing.T) {
		t.Parallel()
		node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
		scenario(t, &testChain{client: node.Client, send: func(t *testing.T, from int, to common.Address, data []byte) *types.Receipt {
			return node.Transact(key(t, from), to, data)
		}})
	})
	t.Run("Devchain", func(t *testing.T) {
		t.Parallel()
		chain, err := devchain.New(t.Context(), nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, chain.Close()) })
		scenario(t, &testChain{client: chain.Client(), send: func(t *testing.T, from int, to common.Address, data []byte) *types.Receipt {
			r, err := chain.Transact(t.Context(), chain.Account(from), &to, nil, data)
			require.NoError(t, err)
			return r
		}})
	})
}

func scenario(t *testing.T, c *testChain) {
	ctx := t.Context()
	settlement, err := contracts.Load(contracts.BatchSettlement)
	require.NoError(t, err)
	token, err := contracts.Load(contracts.FiatTokenV2_2)
	require.NoError(t, err)
	chainID, err := c.client.ChainID(ctx)
	require.NoError(t, err)

	call := func(to common.Address, a *contracts.Artifact, method string, args ...any) []any {
		t.Helper()
		input, err := a.ABI.Pack(method, args...)
		require.NoError(t, err)
		out, err := c.client.CallContract(ctx, ethereum.CallMsg{To: &to, Data: input}, nil)
		require.NoError(t, err, method)
		res, err := a.ABI.Unpack(method, out)
		require.NoError(t, err, method)
		return res
	}
	view := func(method string, args ...any) []any {
		return call(channel.SettlementAddress, settlement, method, args...)
	}
	usdc := func(who common.Address) *big.Int { return call(devchain.USDC, token, "balanceOf", who)[0].(*big.Int) }
	input := func(b []byte, err error) []byte {
		t.Helper()
		require.NoError(t, err)
		return b
	}
	send := func(from int, input []byte) *types.Receipt {
		t.Helper()
		r := c.send(t, from, channel.SettlementAddress, input)
		require.Equal(t, types.ReceiptStatusSuccessful, r.Status)
		return r
	}
	events := func(r *types.Receipt) map[string]int {
		seen := map[string]int{}
		for _, l := range r.Logs {
			if ev, err := settlement.ABI.EventByID(l.Topics[0]); err == nil && l.Address == channel.SettlementAddress {
				seen[ev.Name]++
			}
		}
		return seen
	}

	for name, want := range map[string]common.Hash{
		"CHANNEL_CONFIG_TYPEHASH": channel.ConfigTypeHash, "VOUCHER_TYPEHASH": channel.VoucherTypeHash,
		"REFUND_TYPEHASH": channel.RefundTypeHash, "CLAIM_ENTRY_TYPEHASH": channel.ClaimEntryTypeHash,
		"CLAIM_BATCH_TYPEHASH": channel.ClaimBatchTypeHash,
	} {
		require.Equal(t, want, common.Hash(view(name)[0].([32]byte)), name)
	}
	require.Equal(t, channel.DomainSeparator(chainID), common.Hash(view("DOMAIN_SEPARATOR")[0].([32]byte)))
	require.Equal(t, int64(channel.MinWithdrawDelay), view("MIN_WITHDRAW_DELAY")[0].(*big.Int).Int64())
	require.Equal(t, int64(channel.MaxWithdrawDelay), view("MAX_WITHDRAW_DELAY")[0].(*big.Int).Int64())

	price := big.NewInt(10_000)
	req := &signRequest{
		Requirements: requirements(t, price.String()), Payer: payerAccount,
		Vouchers: []string{"10000", "20000", "30000"}, Claims: []signClaim{{"30000", "30000"}},
		Refund: &signRefund{Nonce: "0", Amount: "20000"},
	}
	s := officialSign(t, req)
	terms, err := channel.TermsOf(req.Requirements)
	require.NoError(t, err)
	payer, payTo := account(t, payerAccount), account(t, payToAccount)

	// The deposit: verified here, then sent by the relayer.
	dep, err := channel.Decode(s.Deposit.Payload)
	require.NoError(t, err)
	id := dep.Voucher.ChannelID
	require.Equal(t, id, common.Hash(view("getChannelId", tuple(&dep.Config))[0].([32]byte)), "getChannelId")
	require.NoError(t, terms.CheckConfig(dep))
	require.NoError(t, channel.VerifyVoucher(ctx, c.client, chainID, &dep.Config, &dep.Voucher))
	require.NoError(t, terms.VerifyDepositAuthorization(ctx, c.client, dep, time.Now().Unix()))
	state := func() *channel.OnChain {
		st, err := channel.ReadState(ctx, c.client, id, nil)
		require.NoError(t, err)
		return st
	}
	require.NoError(t, channel.CheckOnChain(dep, state(), price))
	noDeposit := *dep
	noDeposit.Deposit = nil
	requireReason(t, channel.ReasonChannelNotFound, channel.CheckOnChain(&noDeposit, state(), price))

	payerBefore, escrowBefore := usdc(payer), usdc(channel.SettlementAddress)
	r := send(relayerAccount, input(channel.DepositInput(dep)))
	require.Equal(t, map[string]int{"ChannelCreated": 1, "Deposited": 1}, events(r))
	t.Logf("deposit: %d gas", r.GasUsed)
	require.Equal(t, new(big.Int).Sub(payerBefore, dep.Deposit.Amount), usdc(payer))
	require.Equal(t, new(big.Int).Add(escrowBefore, dep.Deposit.Amount), usdc(channel.SettlementAddress))
	require.Zero(t, usdc(channel.CollectorAddress).Sign(), "the collector keeps nothing")
	st := state()
	require.Equal(t, dep.Deposit.Amount, st.Balance)
	require.Zero(t, st.TotalClaimed.Sign())

	// The vouchers of three calls, each checked against the seller's charge
	// and the chain.
	charged := new(big.Int)
	var last *channel.Payload
	for i := range req.Vouchers {
		p, err := channel.Decode(s.voucherPayload(t, i, channel.TypeVoucher))
		require.NoError(t, err)
		require.Equal(t, s.VoucherDigests[i], common.Hash(view("getVoucherDigest", id, p.Voucher.MaxClaimable)[0].([32]byte)))
		require.NoError(t, terms.CheckConfig(p))
		require.NoError(t, channel.CheckCumulative(p, charged, price))
		require.NoError(t, channel.VerifyVoucher(ctx, c.client, chainID, &p.Config, &p.Voucher))
		require.NoError(t, channel.CheckOnChain(p, state(), price))
		require.NoError(t, channel.CheckCharge(charged, price, p.Voucher.MaxClaimable))
		charged.Add(charged, price)
		last = p
	}

	// One claim of the last voucher, signed by the receiver authorizer and
	// sent by the relayer.
	claim := []channel.Claim{{Config: last.Config, Voucher: last.Voucher, TotalClaimed: charged}}
	digest := channel.ClaimBatchDigestOf(chainID, claim)
	require.Equal(t, s.ClaimBatchDigest, digest, "the official types' digest")
	rows := []abiVoucherClaim{{Voucher: abiVoucher{tuple(&last.Config), last.Voucher.MaxClaimable}, Signature: last.Voucher.Signature, TotalClaimed: charged}}
	require.Equal(t, digest, common.Hash(view("getClaimBatchDigest", rows)[0].([32]byte)), "the contract's digest")
	authorization, err := channel.Sign(key(t, authorizerAccount), digest)
	require.NoError(t, err)
	r = send(relayerAccount, input(channel.ClaimWithSignatureInput(claim, authorization)))
	require.Equal(t, map[string]int{"Claimed": 1}, events(r))
	t.Logf("claimWithSignature of one channel: %d gas", r.GasUsed)
	st = state()
	require.Equal(t, dep.Deposit.Amount, st.Balance)
	require.Equal(t, charged, st.TotalClaimed)
	rs := view("receivers", payTo, devchain.USDC)
	require.Equal(t, charged, rs[0].(*big.Int))
	require.Zero(t, rs[1].(*big.Int).Sign())
	// The same voucher claimed again changes nothing; a voucher now below
	// the claimed total is refused here.
	r = send(relayerAccount, input(channel.ClaimWithSignatureInput(claim, authorization)))
	require.Empty(t, events(r))
	first, err := channel.Decode(s.voucherPayload(t, 0, channel.TypeVoucher))
	require.NoError(t, err)
	requireReason(t, channel.ReasonCumulativeBelowClaimed, channel.CheckOnChain(first, state(), price))

	// settle pays payTo the claimed amount in one transfer.
	payToBefore := usdc(payTo)
	r = send(relayerAccount, input(channel.SettleInput(payTo, devchain.USDC)))
	require.Equal(t, map[string]int{"Settled": 1}, events(r))
	require.Equal(t, new(big.Int).Add(payToBefore, charged), usdc(payTo))
	rs = view("receivers", payTo, devchain.USDC)
	require.Equal(t, charged, rs[1].(*big.Int))

	// A cooperative refund of the rest, authorized by the receiver
	// authorizer's signature and sent by the relayer.
	refund := new(big.Int).Sub(dep.Deposit.Amount, charged)
	require.Equal(t, req.Refund.Amount, refund.String())
	rdigest := channel.RefundDigest(chainID, id, big.NewInt(0), refund)
	require.Equal(t, *s.RefundDigest, rdigest)
	require.Equal(t, rdigest, common.Hash(view("getRefundDigest", id, big.NewInt(0), refund)[0].([32]byte)))
	payerBefore = usdc(payer)
	r = send(relayerAccount, input(channel.RefundWithSignatureInput(&dep.Config, refund, big.NewInt(0), sign(t, authorizerAccount, rdigest))))
	require.Equal(t, map[string]int{"Refunded": 1}, events(r))
	require.Equal(t, new(big.Int).Add(payerBefore, refund), usdc(payer))
	st = state()
	require.Equal(t, charged, st.Balance)
	require.Equal(t, charged, st.TotalClaimed)
	require.Equal(t, int64(1), st.RefundNonce.Int64())
	require.Zero(t, usdc(channel.SettlementAddress).Cmp(escrowBefore), "the escrow holds nothing of the channel")
}
