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

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm/channel"
)

// TestState follows the seller's record of a channel through calls: the
// baseline of a channel it has no record of is the chain's claimed total,
// each charge stays within its voucher, and the claim is of all that was
// charged with the last voucher.
func TestState(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	terms, err := channel.TermsOf(requirements(t, "100"))
	require.NoError(t, err)
	price := big.NewInt(100)
	c := testConfig(t)
	st := &channel.OnChain{Balance: big.NewInt(1000), TotalClaimed: big.NewInt(300), RefundNonce: big.NewInt(2)}
	s := channel.NewState(&c, base, st)
	require.Equal(t, int64(300), s.Charged.Int64(), "the chain's claimed total is the baseline")
	require.Nil(t, s.LastVoucher())
	_, ok := s.Claim()
	require.False(t, ok, "nothing to claim before a voucher")

	pay := func(s *channel.State, amount int64, charge int64) (*channel.State, error) {
		p, err := channel.Decode(payloadJSON(t, channel.TypeVoucher, c, amount, payerAccount, nil))
		require.NoError(t, err)
		if err := terms.Verify(ctx, nil, p, s.Charged, price, &s.OnChain, 0); err != nil {
			return nil, err
		}
		return s.Charge(p, big.NewInt(charge))
	}
	s, err = pay(s, 400, 100)
	require.NoError(t, err)
	s, err = pay(s, 500, 60) // cheaper than its price
	require.NoError(t, err)
	require.Equal(t, int64(460), s.Charged.Int64())
	require.Equal(t, int64(160), s.Unclaimed().Int64())
	_, err = pay(s, 500, 100)
	requireReason(t, channel.ReasonCumulativeAmountMismatch, err)
	_, err = pay(s, 560, 101)
	requireReason(t, channel.ReasonChargeExceedsSignedCumulative, err)

	claim, ok := s.Claim()
	require.True(t, ok)
	require.Equal(t, int64(460), claim.TotalClaimed.Int64())
	require.Equal(t, int64(500), claim.Voucher.MaxClaimable.Int64())
	require.Equal(t, s.ChannelID, claim.Voucher.ChannelID)
	require.Equal(t, &channel.ChannelState{ChannelID: c.ID(base), Balance: "1000", TotalClaimed: "300", RefundNonce: "2", ChargedCumulativeAmount: "460"}, s.Snapshot())
	require.Equal(t, "500", s.LastVoucher().SignedMaxClaimable)
}

// TestOfficialClientRecovers answers a fresh official client (it lost its
// channel state) with the corrective 402 built from the seller's record,
// on anvil where the channel's claimed total is behind what the seller
// charged: the client checks the last voucher's signature, adopts the
// seller's cumulative amount and pays the next call with exactly the
// voucher the seller expects. A corrective 402 whose voucher another key
// signed does not move it.
func TestOfficialClientRecovers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
	compat, err := filepath.Abs("../../../compat")
	require.NoError(t, err)
	chainID := big.NewInt(anviltest.ChainID)
	req := requirements(t, "10000")
	terms, err := channel.TermsOf(req)
	require.NoError(t, err)
	price := big.NewInt(10_000)

	// The official client's channel (payer, its own authorizer, salt 0),
	// funded with 100000, three calls charged and the first claimed.
	c := testConfig(t)
	id := c.ID(chainID)
	deposit := big.NewInt(100_000)
	auth := &channel.ERC3009Authorization{ValidAfter: big.NewInt(0), ValidBefore: big.NewInt(time.Now().Unix() + 600), Salt: common.Hash{7}}
	auth.Signature = sign(t, payerAccount, channel.ReceiveAuthorizationDigest(chainID, devchain.USDC, devchain.TokenName, devchain.TokenVersion, &channel.ReceiveAuthorization{
		From: c.Payer, Value: deposit, ValidAfter: auth.ValidAfter, ValidBefore: auth.ValidBefore, Nonce: channel.DepositNonce(id, auth.Salt),
	}))
	input, err := channel.DepositInput(&channel.Payload{Type: channel.TypeDeposit, Config: c, Voucher: channel.Voucher{ChannelID: id}, Deposit: &channel.Deposit{Amount: deposit, ERC3009: auth}})
	require.NoError(t, err)
	node.Transact(key(t, relayerAccount), channel.SettlementAddress, input)
	st, err := channel.ReadState(ctx, node.Client, id, nil)
	require.NoError(t, err)
	s := channel.NewState(&c, chainID, st)
	for i := int64(1); i <= 3; i++ {
		p, err := channel.Decode(payloadJSON(t, channel.TypeVoucher, c, i*price.Int64(), payerAccount, nil))
		require.NoError(t, err)
		require.NoError(t, terms.Verify(ctx, node.Client, p, s.Charged, price, &s.OnChain, 0))
		s, err = s.Charge(p, price)
		require.NoError(t, err)
		if i == 1 {
			claim, ok := s.Claim()
			require.True(t, ok)
			authorization, err := channel.Sign(key(t, authorizerAccount), channel.ClaimBatchDigestOf(chainID, []channel.Claim{claim}))
			require.NoError(t, err)
			input, err := channel.ClaimWithSignatureInput([]channel.Claim{claim}, authorization)
			require.NoError(t, err)
			node.Transact(key(t, relayerAccount), channel.SettlementAddress, input)
		}
	}
	st, err = channel.ReadState(ctx, node.Client, id, nil)
	require.NoError(t, err)
	s.OnChain = *st
	require.Equal(t, int64(10_000), st.TotalClaimed.Int64())
	require.Equal(t, int64(30_000), s.Charged.Int64())

	recover := func(last *channel.VoucherState) (recovered bool, payload json.RawMessage) {
		t.Helper()
		var extra channel.Extra
		require.NoError(t, json.Unmarshal(req.Extra, &extra))
		corrective := *req
		corrective.Extra, err = json.Marshal(channel.CorrectiveExtra(&extra, s.Snapshot(), last))
		require.NoError(t, err)
		raw, err := json.Marshal(x402.PaymentRequired{X402Version: 2, Error: channel.ReasonCumulativeAmountMismatch,
			Resource: x402.ResourceInfo{URL: "http://127.0.0.1/api/x402/regex"}, Accepts: []x402.Requirements{corrective}})
		require.NoError(t, err)
		cmd := exec.Command("node", filepath.Join(compat, "batch_recover.mjs"), string(raw))
		cmd.Env = append(os.Environ(), "RPC_URL="+node.URL, "PAYER="+strconv.Itoa(payerAccount))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "node batch_recover.mjs: %s", stderr.String())
		var res struct {
			Recovered bool            `json:"recovered"`
			Payload   json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(out, &res), string(out))
		return res.Recovered, res.Payload
	}

	recovered, raw := recover(s.LastVoucher())
	require.True(t, recovered)
	p, err := channel.Decode(raw)
	require.NoError(t, err)
	require.Equal(t, channel.TypeVoucher, p.Type)
	require.Equal(t, int64(40_000), p.Voucher.MaxClaimable.Int64(), "the seller's charge plus the price")
	require.NoError(t, terms.Verify(ctx, node.Client, p, s.Charged, price, &s.OnChain, 0))

	forged := s.LastVoucher()
	forged.Signature = sign(t, voucherAccount, channel.VoucherDigest(chainID, id, s.Signed))
	recovered, _ = recover(forged)
	require.False(t, recovered, "a voucher the client did not sign does not move it")
}

// TestOfficialClientReadsResponses has the official client apply the
// payment responses of a deposit and of vouchers, some charged less than
// their price: its channel record follows the charges, so that its next
// voucher is the one the seller expects; a response whose channel state
// disagrees with the charge is not applied.
func TestOfficialClientReadsResponses(t *testing.T) {
	t.Parallel()
	compat, err := filepath.Abs("../../../compat")
	require.NoError(t, err)
	c := testConfig(t)
	st := &channel.OnChain{Balance: big.NewInt(0), TotalClaimed: big.NewInt(0), RefundNonce: new(big.Int)}
	s := channel.NewState(&c, base, st)
	price := big.NewInt(10_000)
	type step struct {
		Header        string `json:"header"`
		ChannelID     string `json:"channelId"`
		RequestAmount string `json:"requestAmount"`
		DepositAmount string `json:"depositAmount,omitempty"`
	}
	var steps []step
	add := func(r *channel.Response, deposit string) {
		h, err := x402.EncodeHeader(r)
		require.NoError(t, err)
		steps = append(steps, step{Header: h, ChannelID: s.ChannelID.Hex(), RequestAmount: price.String(), DepositAmount: deposit})
	}
	charge := func(amount int64, charged int64) {
		p, err := channel.Decode(payloadJSON(t, channel.TypeVoucher, c, amount, payerAccount, nil))
		require.NoError(t, err)
		s, err = s.Charge(p, big.NewInt(charged))
		require.NoError(t, err)
	}
	s.OnChain.Balance = big.NewInt(50_000)
	charge(10_000, 10_000)
	add(channel.DepositResponse("eip155:8453", s, common.Hash{1}, big.NewInt(50_000), big.NewInt(10_000)), "50000")
	charge(20_000, 7_000)
	add(channel.VoucherResponse("eip155:8453", s, big.NewInt(7_000)), "")
	charge(27_000, 10_000)
	lying := channel.VoucherResponse("eip155:8453", s, big.NewInt(10_000))
	lying.Extra.ChannelState.ChargedCumulativeAmount = "99999"
	add(lying, "")
	add(channel.VoucherResponse("eip155:8453", s, big.NewInt(10_000)), "")

	raw, err := json.Marshal(steps)
	require.NoError(t, err)
	var stderr strings.Builder
	cmd := exec.Command("node", filepath.Join(compat, "batch_response.mjs"), string(raw))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node batch_response.mjs: %s", stderr.String())
	var records []*struct {
		ChargedCumulativeAmount string `json:"chargedCumulativeAmount"`
		Balance                 string `json:"balance"`
	}
	require.NoError(t, json.Unmarshal(out, &records), string(out))
	require.Len(t, records, 4)
	for i, want := range []string{"10000", "17000", "17000", "27000"} {
		require.NotNil(t, records[i], "step %d", i)
		require.Equal(t, want, records[i].ChargedCumulativeAmount, "step %d", i)
		require.Equal(t, "50000", records[i].Balance, "step %d", i)
	}
	require.Equal(t, s.Charged.String(), records[3].ChargedCumulativeAmount, "the client's next voucher is the seller's charge plus the price")
}
