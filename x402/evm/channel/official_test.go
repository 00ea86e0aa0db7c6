package channel_test

import (
	"encoding/json"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm/channel"
)

// Development accounts of the tests.
const (
	payerAccount      = 3
	voucherAccount    = 4
	authorizerAccount = 7
	relayerAccount    = 8
	payToAccount      = 9
)

// account returns the address of a development account.
func account(t testing.TB, i int) common.Address {
	t.Helper()
	key, err := devchain.DeriveKey(devchain.Mnemonic, uint32(i))
	require.NoError(t, err)
	return crypto.PubkeyToAddress(key.PublicKey)
}

// requirements returns a batch-settlement option of a 402 on Base for USDC
// at price, paid to payToAccount with authorizerAccount's key as receiver
// authorizer.
func requirements(t testing.TB, price string) *x402.Requirements {
	t.Helper()
	extra, err := json.Marshal(channel.Extra{
		ReceiverAuthorizer: account(t, authorizerAccount), WithdrawDelay: channel.MinWithdrawDelay,
		Name: devchain.TokenName, Version: devchain.TokenVersion,
	})
	require.NoError(t, err)
	return &x402.Requirements{
		Scheme: channel.Scheme, Network: "eip155:8453", Amount: price, Asset: devchain.USDC.Hex(),
		PayTo: account(t, payToAccount).Hex(), MaxTimeoutSeconds: 300, Extra: extra,
	}
}

// signRequest is what compat/batch_sign.mjs signs.
type signRequest struct {
	Requirements   *x402.Requirements `json:"requirements"`
	Payer          int                `json:"payer"`
	VoucherSigner  *int               `json:"voucherSigner,omitempty"`
	ZeroAuthorizer bool               `json:"zeroAuthorizer,omitempty"`
	Vouchers       []string           `json:"vouchers"`
	Claims         []signClaim        `json:"claims,omitempty"`
	Refund         *signRefund        `json:"refund,omitempty"`
}

type signClaim struct {
	MaxClaimableAmount string `json:"maxClaimableAmount"`
	TotalClaimed       string `json:"totalClaimed"`
}

type signRefund struct {
	Nonce  string `json:"nonce"`
	Amount string `json:"amount"`
}

// signed is what compat/batch_sign.mjs prints.
type signed struct {
	Config    json.RawMessage `json:"config"`
	ChannelID common.Hash     `json:"channelId"`
	Deposit   struct {
		Payload json.RawMessage `json:"payload"`
	} `json:"deposit"`
	Vouchers []struct {
		ChannelID          string `json:"channelId"`
		MaxClaimableAmount string `json:"maxClaimableAmount"`
		Signature          string `json:"signature"`
	} `json:"vouchers"`
	VoucherDigests   []common.Hash `json:"voucherDigests"`
	ClaimBatchDigest common.Hash   `json:"claimBatchDigest"`
	RefundDigest     *common.Hash  `json:"refundDigest"`
	DomainSeparator  common.Hash   `json:"domainSeparator"`
}

// voucherPayload returns the voucher payload of the i-th voucher signed,
// as the official client sends it.
func (s *signed) voucherPayload(t testing.TB, i int, kind string) json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"type": kind, "channelConfig": s.Config, "voucher": s.Vouchers[i]})
	require.NoError(t, err)
	return raw
}

// officialSign runs compat/batch_sign.mjs: the official batch-settlement
// client signs req.
func officialSign(t testing.TB, req *signRequest) *signed {
	t.Helper()
	compat, err := filepath.Abs("../../../compat")
	require.NoError(t, err)
	_, err = exec.LookPath("node")
	require.NoError(t, err, "node (v20+) is needed for the compatibility test; run: go tool task npm (or install Node.js)")
	_, err = os.Stat(filepath.Join(compat, "node_modules", "@x402", "evm", "package.json"))
	require.NoError(t, err, "the official x402 packages are missing; run: go tool task npm")
	in, err := json.Marshal(req)
	require.NoError(t, err)
	cmd := exec.Command("node", filepath.Join(compat, "batch_sign.mjs"), string(in))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node batch_sign.mjs: %s", stderr.String())
	var s signed
	require.NoError(t, json.Unmarshal(out, &s), string(out))
	return &s
}

// TestOfficialClient has the official client sign deposits and vouchers
// of channels of each kind (the payer signing, a separate voucher signer,
// no payer authorizer) and checks that this package decodes and verifies
// them, computes the same channel ids and digests, and refuses them once
// altered.
func TestOfficialClient(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	chain, err := devchain.New(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, chain.Close()) })
	chainID := big.NewInt(8453)

	other := voucherAccount
	for _, tc := range []struct {
		name       string
		req        signRequest
		authorizer common.Address
	}{
		{"PayerSigns", signRequest{Payer: payerAccount}, account(t, payerAccount)},
		{"VoucherSigner", signRequest{Payer: payerAccount, VoucherSigner: &other}, account(t, voucherAccount)},
		{"NoPayerAuthorizer", signRequest{Payer: payerAccount, ZeroAuthorizer: true}, common.Address{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := tc.req
			req.Requirements = requirements(t, "10000")
			req.Vouchers = []string{"10000", "20000", "123456789012345678901234567890"}
			req.Claims = []signClaim{{"20000", "20000"}, {"20000", "15000"}}
			req.Refund = &signRefund{Nonce: "7", Amount: "30000"}
			s := officialSign(t, &req)

			require.Equal(t, s.DomainSeparator, channel.DomainSeparator(chainID))
			terms, err := channel.TermsOf(req.Requirements)
			require.NoError(t, err)

			dep, err := channel.Decode(s.Deposit.Payload)
			require.NoError(t, err)
			require.Equal(t, channel.TypeDeposit, dep.Type)
			require.Equal(t, tc.authorizer, dep.Config.PayerAuthorizer)
			require.Equal(t, s.ChannelID, dep.Config.ID(chainID), "channel id")
			require.Equal(t, s.ChannelID, dep.Voucher.ChannelID)
			require.NoError(t, terms.CheckConfig(dep))
			require.NoError(t, channel.VerifyVoucher(ctx, chain.Client(), chainID, &dep.Config, &dep.Voucher))
			require.NoError(t, terms.VerifyDepositAuthorization(ctx, chain.Client(), dep, time.Now().Unix()))
			require.Equal(t, "50000", dep.Deposit.Amount.String(), "the client deposits 5 prices by default")
			require.NoError(t, channel.CheckCumulative(dep, big.NewInt(0), big.NewInt(10000)))

			// The deposit authorization's nonce binds it to the channel: with
			// another salt, amount or payer it is not the payer's signature.
			tampered := *dep.Deposit.ERC3009
			tampered.Salt[31] ^= 1
			altered := *dep
			altered.Deposit = &channel.Deposit{Amount: dep.Deposit.Amount, ERC3009: &tampered}
			requireReason(t, channel.ReasonReceiveAuthorizationSignature, terms.VerifyDepositAuthorization(ctx, chain.Client(), &altered, time.Now().Unix()))
			altered.Deposit = &channel.Deposit{Amount: big.NewInt(50001), ERC3009: dep.Deposit.ERC3009}
			requireReason(t, channel.ReasonReceiveAuthorizationSignature, terms.VerifyDepositAuthorization(ctx, chain.Client(), &altered, time.Now().Unix()))
			requireReason(t, channel.ReasonValidBefore, terms.VerifyDepositAuthorization(ctx, chain.Client(), dep, dep.Deposit.ERC3009.ValidBefore.Int64()))

			for i, amount := range req.Vouchers {
				p, err := channel.Decode(s.voucherPayload(t, i, channel.TypeVoucher))
				require.NoError(t, err)
				require.Equal(t, amount, p.Voucher.MaxClaimable.String())
				require.Equal(t, s.VoucherDigests[i], channel.VoucherDigest(chainID, p.Voucher.ChannelID, p.Voucher.MaxClaimable))
				require.NoError(t, channel.VerifyVoucher(ctx, chain.Client(), chainID, &p.Config, &p.Voucher))
				// Another amount under the same signature is not signed.
				p.Voucher.MaxClaimable = new(big.Int).Add(p.Voucher.MaxClaimable, big.NewInt(1))
				requireReason(t, channel.ReasonVoucherSignature, channel.VerifyVoucher(ctx, chain.Client(), chainID, &p.Config, &p.Voucher))
			}
			// Another chain names another channel, and signs other digests.
			require.NotEqual(t, s.ChannelID, dep.Config.ID(big.NewInt(84532)))
			requireReason(t, channel.ReasonVoucherSignature, channel.VerifyVoucher(ctx, chain.Client(), big.NewInt(84532), &dep.Config, &dep.Voucher))

			entries := make([]channel.ClaimEntry, len(req.Claims))
			for i, c := range req.Claims {
				entries[i] = channel.ClaimEntry{ChannelID: s.ChannelID, MaxClaimable: mustAmount(t, c.MaxClaimableAmount), TotalClaimed: mustAmount(t, c.TotalClaimed)}
			}
			require.Equal(t, s.ClaimBatchDigest, channel.ClaimBatchDigest(chainID, entries))
			require.NotNil(t, s.RefundDigest)
			require.Equal(t, *s.RefundDigest, channel.RefundDigest(chainID, s.ChannelID, big.NewInt(7), big.NewInt(30000)))
		})
	}
}

func mustAmount(t testing.TB, s string) *big.Int {
	t.Helper()
	v, err := channel.ParseAmount(s)
	require.NoError(t, err)
	return v
}

// requireReason requires err to be a refusal with reason.
func requireReason(t testing.TB, reason string, err error) {
	t.Helper()
	var r *x402.Refusal
	require.ErrorAs(t, err, &r)
	require.Equal(t, reason, r.Reason, r.Message)
}

// TestOfficialFacilitator runs a channel's life with the official client
// and facilitator only (compat/batch_facilitate.mjs) on anvil, against
// this repository's contracts at the canonical addresses: the official
// code's calls (deposit through the collector, claimWithSignature, settle,
// refundWithSignature) succeed on them and move what the spec says.
func TestOfficialFacilitator(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
	compat, err := filepath.Abs("../../../compat")
	require.NoError(t, err)
	req := requirements(t, "10000")
	raw, err := json.Marshal(req)
	require.NoError(t, err)
	token, err := contracts.Load(contracts.FiatTokenV2_2)
	require.NoError(t, err)
	usdc := func(who common.Address) *big.Int {
		input, err := token.ABI.Pack("balanceOf", who)
		require.NoError(t, err)
		out, err := node.Client.CallContract(ctx, ethereum.CallMsg{To: &devchain.USDC, Data: input}, nil)
		require.NoError(t, err)
		return new(big.Int).SetBytes(out)
	}
	payer, payTo := account(t, payerAccount), account(t, payToAccount)
	payerBefore, payToBefore := usdc(payer), usdc(payTo)

	cmd := exec.Command("node", filepath.Join(compat, "batch_facilitate.mjs"), string(raw))
	cmd.Env = append(os.Environ(), "RPC_URL="+node.URL, "PAYER="+strconv.Itoa(payerAccount),
		"FACILITATOR="+strconv.Itoa(relayerAccount), "AUTHORIZER="+strconv.Itoa(authorizerAccount))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node batch_facilitate.mjs: %s", stderr.String())
	type verify struct {
		IsValid       bool            `json:"isValid"`
		InvalidReason string          `json:"invalidReason"`
		Extra         json.RawMessage `json:"extra"`
	}
	type settle struct {
		Success     bool   `json:"success"`
		ErrorReason string `json:"errorReason"`
		Transaction string `json:"transaction"`
		Amount      string `json:"amount"`
	}
	var res struct {
		ChannelID     common.Hash `json:"channelId"`
		DepositVerify verify      `json:"depositVerify"`
		DepositSettle settle      `json:"depositSettle"`
		VoucherVerify []verify    `json:"voucherVerify"`
		ClaimSettle   settle      `json:"claimSettle"`
		SettleSettle  settle      `json:"settleSettle"`
		RefundVerify  verify      `json:"refundVerify"`
		RefundSettle  settle      `json:"refundSettle"`
	}
	require.NoError(t, json.Unmarshal(out, &res), string(out))
	require.True(t, res.DepositVerify.IsValid, res.DepositVerify.InvalidReason)
	require.True(t, res.DepositSettle.Success, res.DepositSettle.ErrorReason)
	require.Len(t, res.VoucherVerify, 3)
	for _, v := range res.VoucherVerify {
		require.True(t, v.IsValid, v.InvalidReason)
	}
	require.True(t, res.ClaimSettle.Success, res.ClaimSettle.ErrorReason)
	require.True(t, res.SettleSettle.Success, res.SettleSettle.ErrorReason)
	require.Equal(t, "30000", res.SettleSettle.Amount)
	require.True(t, res.RefundVerify.IsValid, res.RefundVerify.InvalidReason)
	require.True(t, res.RefundSettle.Success, res.RefundSettle.ErrorReason)
	require.Equal(t, "20000", res.RefundSettle.Amount)

	// The payer paid three calls, the receiver got them, the escrow is empty.
	require.Equal(t, new(big.Int).Sub(payerBefore, big.NewInt(30000)), usdc(payer))
	require.Equal(t, new(big.Int).Add(payToBefore, big.NewInt(30000)), usdc(payTo))
	require.Zero(t, usdc(channel.SettlementAddress).Sign())
}
