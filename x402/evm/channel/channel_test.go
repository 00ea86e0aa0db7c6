package channel_test

import (
	"encoding/json"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm/channel"
)

var base = big.NewInt(8453)

// testConfig is a channel of the test requirements, paid by payerAccount.
func testConfig(t testing.TB) channel.Config {
	t.Helper()
	return channel.Config{
		Payer: account(t, payerAccount), PayerAuthorizer: account(t, payerAccount), Receiver: account(t, payToAccount),
		ReceiverAuthorizer: account(t, authorizerAccount), Token: devchain.USDC, WithdrawDelay: channel.MinWithdrawDelay,
	}
}

// payloadJSON is a payload of kind on c with a voucher of amount signed by
// the development account signer, with edit applied to its JSON form.
func payloadJSON(t testing.TB, kind string, c channel.Config, amount int64, signer int, edit func(m map[string]any)) json.RawMessage {
	t.Helper()
	id := c.ID(base)
	sig := sign(t, signer, channel.VoucherDigest(base, id, big.NewInt(amount)))
	var cfg map[string]any
	raw, err := json.Marshal(c)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &cfg))
	m := map[string]any{
		"type": kind, "channelConfig": cfg,
		"voucher": map[string]any{"channelId": id.Hex(), "maxClaimableAmount": big.NewInt(amount).String(), "signature": "0x" + common.Bytes2Hex(sig)},
	}
	if kind == channel.TypeDeposit {
		m["deposit"] = map[string]any{"amount": "50000", "authorization": map[string]any{"erc3009Authorization": map[string]any{
			"validAfter": "0", "validBefore": "99999999999", "salt": common.Hash{1}.Hex(), "signature": "0x01",
		}}}
	}
	if edit != nil {
		edit(m)
	}
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}

func TestDecode(t *testing.T) {
	t.Parallel()
	c := testConfig(t)
	cfgOf := func(m map[string]any) map[string]any { return m["channelConfig"].(map[string]any) }
	voucherOf := func(m map[string]any) map[string]any { return m["voucher"].(map[string]any) }
	for _, tc := range []struct {
		name   string
		kind   string
		edit   func(m map[string]any)
		reason string // "" when valid
	}{
		{"Voucher", channel.TypeVoucher, nil, ""},
		{"Deposit", channel.TypeDeposit, nil, ""},
		{"Refund", channel.TypeRefund, nil, ""},
		{"RefundAmount", channel.TypeRefund, func(m map[string]any) { m["amount"] = "1500" }, ""},
		{"UnknownType", "claim", nil, channel.ReasonPayloadType},
		{"NotJSONObject", channel.TypeVoucher, func(m map[string]any) { m["type"] = 7 }, channel.ReasonPayloadType},
		{"NoConfig", channel.TypeVoucher, func(m map[string]any) { delete(m, "channelConfig") }, channel.ReasonVoucherPayload},
		{"ConfigFieldMissing", channel.TypeVoucher, func(m map[string]any) { delete(cfgOf(m), "token") }, channel.ReasonVoucherPayload},
		{"ConfigBadAddress", channel.TypeDeposit, func(m map[string]any) { cfgOf(m)["payer"] = "0x1234" }, channel.ReasonDepositPayload},
		{"ConfigZeroReceiverAuthorizer", channel.TypeVoucher, func(m map[string]any) {
			cfgOf(m)["receiverAuthorizer"] = common.Address{}.Hex()
		}, channel.ReasonVoucherPayload},
		{"ConfigBadSalt", channel.TypeRefund, func(m map[string]any) { cfgOf(m)["salt"] = "0x00" }, channel.ReasonRefundPayload},
		{"DelayAsString", channel.TypeVoucher, func(m map[string]any) { cfgOf(m)["withdrawDelay"] = "900" }, channel.ReasonVoucherPayload},
		{"DelayFractional", channel.TypeVoucher, func(m map[string]any) { cfgOf(m)["withdrawDelay"] = 900.5 }, channel.ReasonVoucherPayload},
		{"DelayTooShort", channel.TypeVoucher, func(m map[string]any) { cfgOf(m)["withdrawDelay"] = 899 }, channel.ReasonWithdrawDelayOutOfRange},
		{"DelayTooLong", channel.TypeVoucher, func(m map[string]any) { cfgOf(m)["withdrawDelay"] = 2_592_001 }, channel.ReasonWithdrawDelayOutOfRange},
		{"NoVoucher", channel.TypeVoucher, func(m map[string]any) { delete(m, "voucher") }, channel.ReasonVoucherPayload},
		{"ChannelIDShort", channel.TypeVoucher, func(m map[string]any) { voucherOf(m)["channelId"] = "0xabc" }, channel.ReasonChannelIDInvalid},
		{"AmountNegative", channel.TypeVoucher, func(m map[string]any) { voucherOf(m)["maxClaimableAmount"] = "-1" }, channel.ReasonVoucherPayload},
		{"AmountHex", channel.TypeVoucher, func(m map[string]any) { voucherOf(m)["maxClaimableAmount"] = "0x10" }, channel.ReasonVoucherPayload},
		{"AmountAboveUint128", channel.TypeVoucher, func(m map[string]any) {
			voucherOf(m)["maxClaimableAmount"] = new(big.Int).Lsh(big.NewInt(1), 128).String()
		}, channel.ReasonVoucherPayload},
		{"SignatureNotHex", channel.TypeVoucher, func(m map[string]any) { voucherOf(m)["signature"] = "zz" }, channel.ReasonVoucherPayload},
		{"DepositMissing", channel.TypeDeposit, func(m map[string]any) { delete(m, "deposit") }, channel.ReasonDepositPayload},
		{"DepositZero", channel.TypeDeposit, func(m map[string]any) { m["deposit"].(map[string]any)["amount"] = "0" }, channel.ReasonDepositPayload},
		{"DepositNoAuthorization", channel.TypeDeposit, func(m map[string]any) {
			m["deposit"].(map[string]any)["authorization"] = map[string]any{}
		}, channel.ReasonERC3009AuthorizationRequired},
		{"DepositBadSalt", channel.TypeDeposit, func(m map[string]any) {
			m["deposit"].(map[string]any)["authorization"].(map[string]any)["erc3009Authorization"].(map[string]any)["salt"] = "1"
		}, channel.ReasonDepositPayload},
		{"RefundAmountZero", channel.TypeRefund, func(m map[string]any) { m["amount"] = "0" }, channel.ReasonRefundAmountInvalid},
		{"RefundAmountWord", channel.TypeRefund, func(m map[string]any) { m["amount"] = "all" }, channel.ReasonRefundAmountInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := channel.Decode(payloadJSON(t, tc.kind, c, 10_000, payerAccount, tc.edit))
			if tc.reason != "" {
				requireReason(t, tc.reason, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.kind, p.Type)
			require.Equal(t, c, p.Config)
			require.Equal(t, c.ID(base), p.Voucher.ChannelID)
			require.Equal(t, int64(10_000), p.Voucher.MaxClaimable.Int64())
			require.Len(t, p.Voucher.Signature, 65)
			require.Equal(t, tc.kind == channel.TypeDeposit, p.Deposit != nil)
		})
	}
}

func TestCheckConfig(t *testing.T) {
	t.Parallel()
	terms, err := channel.TermsOf(requirements(t, "10000"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		edit   func(c *channel.Config)
		reason string
	}{
		{"Matches", func(*channel.Config) {}, ""},
		{"OtherSaltOtherPayer", func(c *channel.Config) {
			c.Salt = common.Hash{9}
			c.Payer = common.Address{1}
			c.PayerAuthorizer = common.Address{}
		}, ""},
		{"Receiver", func(c *channel.Config) { c.Receiver = common.Address{1} }, channel.ReasonReceiverMismatch},
		{"ReceiverAuthorizer", func(c *channel.Config) { c.ReceiverAuthorizer = common.Address{1} }, channel.ReasonReceiverAuthorizerMismatch},
		{"Token", func(c *channel.Config) { c.Token = common.Address{1} }, channel.ReasonTokenMismatch},
		{"WithdrawDelay", func(c *channel.Config) { c.WithdrawDelay = 901 }, channel.ReasonWithdrawDelayMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := testConfig(t)
			tc.edit(&c)
			p := &channel.Payload{Type: channel.TypeVoucher, Config: c, Voucher: channel.Voucher{ChannelID: c.ID(base)}}
			err := terms.CheckConfig(p)
			if tc.reason == "" {
				require.NoError(t, err)
			} else {
				requireReason(t, tc.reason, err)
			}
			// A channel id that is not the configuration's is refused first.
			p.Voucher.ChannelID[0] ^= 1
			requireReason(t, channel.ReasonChannelIDMismatch, terms.CheckConfig(p))
		})
	}
}

func TestTermsOf(t *testing.T) {
	t.Parallel()
	good := requirements(t, "10000")
	terms, err := channel.TermsOf(good)
	require.NoError(t, err)
	require.Equal(t, int64(8453), terms.ChainID.Int64())
	require.Equal(t, account(t, authorizerAccount), terms.ReceiverAuthorizer)
	require.Equal(t, uint64(channel.MinWithdrawDelay), terms.WithdrawDelay)
	for _, tc := range []struct {
		name   string
		edit   func(r *x402.Requirements)
		reason string
	}{
		{"Scheme", func(r *x402.Requirements) { r.Scheme = "exact" }, channel.ReasonScheme},
		{"Network", func(r *x402.Requirements) { r.Network = "solana:mainnet" }, channel.ReasonNetworkMismatch},
		{"NoAuthorizer", func(r *x402.Requirements) {
			r.Extra = json.RawMessage(`{"withdrawDelay":900,"name":"USD Coin","version":"2"}`)
		}, channel.ReasonAuthorizerNotConfigured},
		{"NoDomain", func(r *x402.Requirements) {
			r.Extra = json.RawMessage(`{"receiverAuthorizer":"0x14dC79964da2C08b23698B3D3cc7Ca32193d9955","withdrawDelay":900}`)
		}, channel.ReasonMissingEIP712Domain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := *good
			tc.edit(&r)
			_, err := channel.TermsOf(&r)
			requireReason(t, tc.reason, err)
		})
	}
}

func TestCheckCumulative(t *testing.T) {
	t.Parallel()
	price := big.NewInt(100)
	for _, tc := range []struct {
		kind    string
		charged int64
		signed  int64
		ok      bool
	}{
		{channel.TypeVoucher, 0, 100, true},
		{channel.TypeDeposit, 0, 100, true},
		{channel.TypeVoucher, 3200, 3300, true},
		// A client behind the seller (it lost a response) and one ahead
		// (it counted a call the seller did not charge) are both out of step.
		{channel.TypeVoucher, 3200, 3200, false},
		{channel.TypeVoucher, 3200, 3100, false},
		{channel.TypeVoucher, 3200, 3400, false},
		{channel.TypeDeposit, 3200, 100, false},
		// A refund's voucher is zero-charge: exactly what was charged.
		{channel.TypeRefund, 3200, 3200, true},
		{channel.TypeRefund, 3200, 3300, false},
	} {
		p := &channel.Payload{Type: tc.kind, Voucher: channel.Voucher{MaxClaimable: big.NewInt(tc.signed)}}
		err := channel.CheckCumulative(p, big.NewInt(tc.charged), price)
		if tc.ok {
			require.NoError(t, err, "%+v", tc)
			continue
		}
		requireReason(t, channel.ReasonCumulativeAmountMismatch, err)
		var r *x402.Refusal
		require.ErrorAs(t, err, &r)
		require.True(t, channel.Corrective(r.Reason))
	}
	require.True(t, channel.Corrective(channel.ReasonCumulativeBelowClaimed))
	require.False(t, channel.Corrective(channel.ReasonVoucherSignature))
}

func TestCheckOnChain(t *testing.T) {
	t.Parallel()
	price := big.NewInt(100)
	for _, tc := range []struct {
		name             string
		kind             string
		signed, deposit  int64
		balance, claimed int64
		reason           string
	}{
		{"Voucher", channel.TypeVoucher, 600, 0, 1000, 500, ""},
		{"VoucherAtBalance", channel.TypeVoucher, 1000, 0, 1000, 500, ""},
		{"NoChannel", channel.TypeVoucher, 100, 0, 0, 0, channel.ReasonChannelNotFound},
		{"DepositCreates", channel.TypeDeposit, 100, 500, 0, 0, ""},
		{"DepositTopsUp", channel.TypeDeposit, 1400, 500, 1000, 500, ""},
		{"AboveBalance", channel.TypeVoucher, 1001, 0, 1000, 0, channel.ReasonCumulativeExceedsBalance},
		{"AboveBalanceWithDeposit", channel.TypeDeposit, 1501, 500, 1000, 0, channel.ReasonCumulativeExceedsBalance},
		{"NotAbovePriceOverClaimed", channel.TypeVoucher, 599, 0, 1000, 500, channel.ReasonCumulativeBelowClaimed},
		{"BelowClaimed", channel.TypeVoucher, 400, 0, 1000, 500, channel.ReasonCumulativeBelowClaimed},
		{"RefundAtClaimed", channel.TypeRefund, 500, 0, 1000, 500, ""},
		{"RefundBelowClaimed", channel.TypeRefund, 499, 0, 1000, 500, channel.ReasonCumulativeBelowClaimed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &channel.Payload{Type: tc.kind, Voucher: channel.Voucher{MaxClaimable: big.NewInt(tc.signed)}}
			if tc.deposit > 0 {
				p.Deposit = &channel.Deposit{Amount: big.NewInt(tc.deposit)}
			}
			err := channel.CheckOnChain(p, &channel.OnChain{Balance: big.NewInt(tc.balance), TotalClaimed: big.NewInt(tc.claimed)}, price)
			if tc.reason == "" {
				require.NoError(t, err)
			} else {
				requireReason(t, tc.reason, err)
			}
		})
	}
}

func TestCheckCharge(t *testing.T) {
	t.Parallel()
	require.NoError(t, channel.CheckCharge(big.NewInt(3200), big.NewInt(100), big.NewInt(3300)))
	require.NoError(t, channel.CheckCharge(big.NewInt(3200), big.NewInt(40), big.NewInt(3300)), "a call may cost less than its price")
	requireReason(t, channel.ReasonChargeExceedsSignedCumulative, channel.CheckCharge(big.NewInt(3200), big.NewInt(101), big.NewInt(3300)))
}

// TestRecover checks ECDSA recovery as OpenZeppelin's does it: 65 bytes, v
// 27 or 28, s in the lower half of the curve order.
func TestRecover(t *testing.T) {
	t.Parallel()
	digest := crypto.Keccak256Hash([]byte("voucher"))
	sig := sign(t, payerAccount, digest)
	got, ok := channel.Recover(digest, sig)
	require.True(t, ok)
	require.Equal(t, account(t, payerAccount), got)

	n := crypto.S256().Params().N
	high := append([]byte{}, sig...)
	copy(high[32:64], common.LeftPadBytes(new(big.Int).Sub(n, new(big.Int).SetBytes(sig[32:64])).Bytes(), 32))
	high[64] ^= 1 // 27 <-> 28: the same signer, with the other s
	for name, bad := range map[string][]byte{
		"HighS":   high,
		"VZero":   append(append([]byte{}, sig[:64]...), sig[64]-27),
		"Short":   sig[:64],
		"Long":    append(append([]byte{}, sig...), 0),
		"Garbage": make([]byte, 65),
	} {
		_, ok := channel.Recover(digest, bad)
		require.False(t, ok, name)
	}
}

// TestVerifyVoucher_ContractWallet verifies the vouchers of a channel
// whose payer is a contract wallet and that has no payer authorizer: the
// wallet's isValidSignature (EIP-1271) decides, read from the devchain.
func TestVerifyVoucher_ContractWallet(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	chain, err := devchain.New(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, chain.Close()) })
	wallet, err := contracts.Load(contracts.DevWallet)
	require.NoError(t, err)
	code, err := wallet.Deployment(account(t, payerAccount))
	require.NoError(t, err)
	r, err := chain.Transact(ctx, chain.Account(0), nil, nil, code)
	require.NoError(t, err)

	c := testConfig(t)
	c.Payer, c.PayerAuthorizer = r.ContractAddress, common.Address{}
	id := c.ID(base)
	voucher := func(signer int) *channel.Voucher {
		return &channel.Voucher{ChannelID: id, MaxClaimable: big.NewInt(500), Signature: sign(t, signer, channel.VoucherDigest(base, id, big.NewInt(500)))}
	}
	require.NoError(t, channel.VerifyVoucher(ctx, chain.Client(), base, &c, voucher(payerAccount)), "the wallet's owner signs for it")
	requireReason(t, channel.ReasonVoucherSignature, channel.VerifyVoucher(ctx, chain.Client(), base, &c, voucher(voucherAccount)))
	// With a payer authorizer, only its ECDSA signature counts, and no
	// chain is read.
	c.PayerAuthorizer = account(t, voucherAccount)
	id = c.ID(base)
	require.NoError(t, channel.VerifyVoucher(ctx, nil, base, &c, voucher(voucherAccount)))
	requireReason(t, channel.ReasonVoucherSignature, channel.VerifyVoucher(ctx, nil, base, &c, voucher(payerAccount)))
	// An EOA payer without a payer authorizer signs with its own key.
	c.Payer, c.PayerAuthorizer = account(t, payerAccount), common.Address{}
	id = c.ID(base)
	require.NoError(t, channel.VerifyVoucher(ctx, chain.Client(), base, &c, voucher(payerAccount)))
	require.Error(t, channel.VerifyVoucher(ctx, nil, base, &c, voucher(payerAccount)), "a payer's signature needs its code read")

	// A wallet whose check burns gas (DevBurnerWallet: any signature,
	// after rounds of hashing) is accepted within a cap it fits and
	// refused under one it does not: its check runs out of gas.
	burner, err := contracts.Load(contracts.DevBurnerWallet)
	require.NoError(t, err)
	code, err = burner.Deployment(big.NewInt(3000), false)
	require.NoError(t, err)
	r, err = chain.Transact(ctx, chain.Account(0), nil, nil, code)
	require.NoError(t, err)
	c.Payer, c.PayerAuthorizer = r.ContractAddress, common.Address{}
	id = c.ID(base)
	require.NoError(t, channel.VerifyVoucher(ctx, channel.GasCapped(chain.Client(), 5_000_000), base, &c, voucher(voucherAccount)))
	requireReason(t, channel.ReasonVoucherSignature, channel.VerifyVoucher(ctx, channel.GasCapped(chain.Client(), 150_000), base, &c, voucher(voucherAccount)))
}

// TestCorrectiveExtra checks the JSON of the corrective 402's extra and of
// a payment response's, as the spec spells them.
func TestCorrectiveExtra(t *testing.T) {
	t.Parallel()
	extra := &channel.Extra{ReceiverAuthorizer: account(t, authorizerAccount), WithdrawDelay: 900, Name: "USD Coin", Version: "2"}
	plain, err := json.Marshal(extra)
	require.NoError(t, err)
	require.NotContains(t, string(plain), "channelState")
	state := &channel.ChannelState{ChannelID: common.Hash{0xab}, Balance: "100000", TotalClaimed: "500", RefundNonce: "1", ChargedCumulativeAmount: "3200"}
	out, err := json.Marshal(channel.CorrectiveExtra(extra, state, &channel.VoucherState{SignedMaxClaimable: "3200", Signature: []byte{1, 2}}))
	require.NoError(t, err)
	require.JSONEq(t, `{"receiverAuthorizer":"`+strings.ToLower(account(t, authorizerAccount).Hex())+`","withdrawDelay":900,"name":"USD Coin","version":"2",
		"channelState":{"channelId":"`+common.Hash{0xab}.Hex()+`","balance":"100000","totalClaimed":"500","withdrawRequestedAt":0,"refundNonce":"1","chargedCumulativeAmount":"3200"},
		"voucherState":{"signedMaxClaimable":"3200","signature":"0x0102"}}`, string(out))
	require.Nil(t, extra.ChannelState, "the option's own extra is unchanged")
	resp, err := json.Marshal(channel.ResponseExtra{ChargedAmount: "700", ChannelState: state})
	require.NoError(t, err)
	require.Contains(t, string(resp), `"chargedAmount":"700"`)
}

// TestVerify runs the checks of Terms.Verify in order: the first failing
// one is the answer.
func TestVerify(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	terms, err := channel.TermsOf(requirements(t, "100"))
	require.NoError(t, err)
	price := big.NewInt(100)
	funded := &channel.OnChain{Balance: big.NewInt(10_000), TotalClaimed: big.NewInt(200), RefundNonce: new(big.Int)}
	for _, tc := range []struct {
		name    string
		signer  int
		amount  int64
		charged *big.Int
		edit    func(c *channel.Config)
		st      *channel.OnChain
		reason  string
	}{
		{"Pays", payerAccount, 400, big.NewInt(300), nil, funded, ""},
		{"NoSellerRecord", payerAccount, 400, nil, nil, funded, ""},
		{"OtherReceiverFirst", voucherAccount, 1, big.NewInt(300), func(c *channel.Config) { c.Receiver = common.Address{1} }, funded, channel.ReasonReceiverMismatch},
		{"BehindBeforeSignature", voucherAccount, 300, big.NewInt(300), nil, funded, channel.ReasonCumulativeAmountMismatch},
		{"NotThePayers", voucherAccount, 400, big.NewInt(300), nil, funded, channel.ReasonVoucherSignature},
		{"NotFunded", payerAccount, 400, big.NewInt(300), nil, &channel.OnChain{Balance: new(big.Int), TotalClaimed: new(big.Int)}, channel.ReasonChannelNotFound},
		{"AboveEscrow", payerAccount, 10_100, big.NewInt(10_000), nil, funded, channel.ReasonCumulativeExceedsBalance},
		{"BelowClaimed", payerAccount, 200, nil, nil, funded, channel.ReasonCumulativeBelowClaimed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := testConfig(t)
			if tc.edit != nil {
				tc.edit(&c)
			}
			p, err := channel.Decode(payloadJSON(t, channel.TypeVoucher, c, tc.amount, tc.signer, nil))
			require.NoError(t, err)
			err = terms.Verify(ctx, nil, p, tc.charged, price, tc.st, 0)
			if tc.reason == "" {
				require.NoError(t, err)
			} else {
				requireReason(t, tc.reason, err)
			}
		})
	}
}

func TestRefundAmount(t *testing.T) {
	t.Parallel()
	ask := func(amount int64) *channel.Payload {
		p := &channel.Payload{Type: channel.TypeRefund}
		if amount > 0 {
			p.RefundAmount = big.NewInt(amount)
		}
		return p
	}
	for _, tc := range []struct {
		asked, balance, charged int64
		want                    int64 // 0: no balance
	}{
		{0, 100_000, 3200, 96_800},
		{1500, 100_000, 3200, 1500},
		{200_000, 100_000, 3200, 96_800},
		{0, 3200, 3200, 0},
		{10, 3000, 3200, 0},
	} {
		got, err := channel.RefundAmount(ask(tc.asked), big.NewInt(tc.balance), big.NewInt(tc.charged))
		if tc.want == 0 {
			requireReason(t, channel.ReasonRefundNoBalance, err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got.Int64(), "%+v", tc)
	}
}
