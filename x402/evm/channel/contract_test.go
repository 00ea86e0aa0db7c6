package channel_test

import (
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm/channel"
)

// parsedLogs returns the logs that parse decodes, in order.
func parsedLogs[T any](t *testing.T, logs []*types.Log, parse func(*types.Log) (T, bool, error)) []T {
	t.Helper()
	var out []T
	for _, l := range logs {
		v, ok, err := parse(l)
		require.NoError(t, err)
		if ok {
			out = append(out, v)
		}
	}
	return out
}

// TestContract_WithdrawalAndRefusals runs BatchSettlement on anvil with
// Circle's USDC, with deposits signed here: what it refuses (claims by
// others, above the voucher or the escrow, with another authorizer's
// signature, a collector called directly, a refund signature replayed; the
// refund's Refunded log names its channel, sender and amount), and
// a payer's timed withdrawal: WithdrawInitiated names when it may end, the
// seller still claims meanwhile, finalizing early is refused, and after the
// delay the payer gets what is left unclaimed.
func TestContract_WithdrawalAndRefusals(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
	settlement, err := contracts.Load(contracts.BatchSettlement)
	require.NoError(t, err)
	collector, err := contracts.Load(contracts.ERC3009DepositCollector)
	require.NoError(t, err)
	token, err := contracts.Load(contracts.FiatTokenV2_2)
	require.NoError(t, err)
	chainID := big.NewInt(anviltest.ChainID)

	pack := func(a *contracts.Artifact, method string, args ...any) []byte {
		t.Helper()
		input, err := a.ABI.Pack(method, args...)
		require.NoError(t, err, method)
		return input
	}
	send := func(from int, method string, args ...any) *types.Receipt {
		t.Helper()
		return node.Transact(key(t, from), channel.SettlementAddress, pack(settlement, method, args...))
	}
	// refused requires a call of method from the account from to revert
	// with the contract's error named want.
	refused := func(from int, to common.Address, a *contracts.Artifact, want, method string, args ...any) {
		t.Helper()
		_, err := node.Client.CallContract(ctx, ethereum.CallMsg{From: account(t, from), To: &to, Data: pack(a, method, args...)}, nil)
		require.Error(t, err, "%s must revert with %s", method, want)
		var de rpc.DataError
		require.True(t, errors.As(err, &de), "%s: %v", method, err)
		data, err := hexutil.Decode(de.ErrorData().(string))
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(data), 4)
		wantID := a.ABI.Errors[want].ID
		require.Equal(t, wantID[:4], data[:4], "%s reverted with another error", method)
	}
	state := func(id common.Hash) (balance, claimed *big.Int) {
		out, err := node.Client.CallContract(ctx, ethereum.CallMsg{To: &channel.SettlementAddress, Data: pack(settlement, "channels", id)}, nil)
		require.NoError(t, err)
		v, err := settlement.ABI.Unpack("channels", out)
		require.NoError(t, err)
		return v[0].(*big.Int), v[1].(*big.Int)
	}
	usdc := func(who common.Address) *big.Int {
		out, err := node.Client.CallContract(ctx, ethereum.CallMsg{To: &devchain.USDC, Data: pack(token, "balanceOf", who)}, nil)
		require.NoError(t, err)
		return new(big.Int).SetBytes(out)
	}

	// A channel funded with 100000 through the collector, the deposit
	// authorization signed here.
	c := testConfig(t)
	c.Salt = common.Hash{0x5a}
	id := c.ID(chainID)
	amount := big.NewInt(100_000)
	auth := &channel.ERC3009Authorization{ValidAfter: big.NewInt(0), ValidBefore: big.NewInt(time.Now().Unix() + 600), Salt: common.Hash{0x42}}
	auth.Signature = sign(t, payerAccount, channel.ReceiveAuthorizationDigest(chainID, devchain.USDC, devchain.TokenName, devchain.TokenVersion, &channel.ReceiveAuthorization{
		From: c.Payer, Value: amount, ValidAfter: auth.ValidAfter, ValidBefore: auth.ValidBefore, Nonce: channel.DepositNonce(id, auth.Salt),
	}))
	data, err := auth.CollectorData()
	require.NoError(t, err)
	refused(relayerAccount, channel.CollectorAddress, collector, "OnlyX402BatchSettlement", "collect", c.Payer, devchain.USDC, amount, id, data)
	short := c
	short.WithdrawDelay = channel.MinWithdrawDelay - 1
	refused(relayerAccount, channel.SettlementAddress, settlement, "WithdrawDelayOutOfRange", "deposit", tuple(&short), amount, channel.CollectorAddress, data)
	// The authorization is bound to its channel: spent on another, the
	// token refuses its signature.
	other := c
	other.Salt = common.Hash{0x5b}
	_, err = node.Client.CallContract(ctx, ethereum.CallMsg{From: account(t, relayerAccount), To: &channel.SettlementAddress,
		Data: pack(settlement, "deposit", tuple(&other), amount, channel.CollectorAddress, data)}, nil)
	require.ErrorContains(t, err, "invalid signature")
	send(relayerAccount, "deposit", tuple(&c), amount, channel.CollectorAddress, data)
	balance, _ := state(id)
	require.Equal(t, amount, balance)

	voucher := func(max int64) abiVoucherClaim {
		return abiVoucherClaim{
			Voucher:   abiVoucher{tuple(&c), big.NewInt(max)},
			Signature: sign(t, payerAccount, channel.VoucherDigest(chainID, id, big.NewInt(max))),
		}
	}
	claimOf := func(max, total int64) []abiVoucherClaim {
		v := voucher(max)
		v.TotalClaimed = big.NewInt(total)
		return []abiVoucherClaim{v}
	}
	authorize := func(signer int, max, total int64) []byte {
		return sign(t, signer, channel.ClaimBatchDigest(chainID, []channel.ClaimEntry{{ChannelID: id, MaxClaimable: big.NewInt(max), TotalClaimed: big.NewInt(total)}}))
	}
	refused(relayerAccount, channel.SettlementAddress, settlement, "NotAuthorizedToClaim", "claim", claimOf(30_000, 30_000))
	refused(payToAccount, channel.SettlementAddress, settlement, "ClaimExceedsCeiling", "claim", claimOf(30_000, 30_001))
	refused(payToAccount, channel.SettlementAddress, settlement, "ClaimExceedsBalance", "claim", claimOf(200_000, 100_001))
	refused(relayerAccount, channel.SettlementAddress, settlement, "InvalidSignature", "claimWithSignature", claimOf(30_000, 30_000), authorize(payToAccount, 30_000, 30_000))
	forged := claimOf(30_000, 30_000)
	forged[0].Signature = sign(t, voucherAccount, channel.VoucherDigest(chainID, id, big.NewInt(30_000)))
	refused(payToAccount, channel.SettlementAddress, settlement, "InvalidSignature", "claim", forged)
	// The receiver claims directly, without an authorizer's signature.
	send(payToAccount, "claim", claimOf(30_000, 30_000))
	_, claimed := state(id)
	require.Equal(t, int64(30_000), claimed.Int64())

	// A refund signature counts once: the nonce advances.
	rsig := sign(t, authorizerAccount, channel.RefundDigest(chainID, id, big.NewInt(0), big.NewInt(10_000)))
	r := send(relayerAccount, "refundWithSignature", tuple(&c), big.NewInt(10_000), big.NewInt(0), rsig)
	require.Equal(t, []*channel.Refunded{{ChannelID: id, Sender: account(t, relayerAccount), Amount: big.NewInt(10_000)}},
		parsedLogs(t, r.Logs, channel.ParseRefunded))
	refused(relayerAccount, channel.SettlementAddress, settlement, "InvalidRefundNonce", "refundWithSignature", tuple(&c), big.NewInt(10_000), big.NewInt(0), rsig)
	refused(relayerAccount, channel.SettlementAddress, settlement, "InvalidSignature", "refundWithSignature", tuple(&c), big.NewInt(10_001), big.NewInt(1), rsig)

	// The payer starts a timed withdrawal of all the unclaimed escrow.
	refused(relayerAccount, channel.SettlementAddress, settlement, "NotPayerSide", "initiateWithdraw", tuple(&c), big.NewInt(1))
	refused(payerAccount, channel.SettlementAddress, settlement, "WithdrawAmountExceedsAvailable", "initiateWithdraw", tuple(&c), big.NewInt(60_001))
	r = send(payerAccount, "initiateWithdraw", tuple(&c), big.NewInt(60_000))
	head, err := node.Client.HeaderByNumber(ctx, r.BlockNumber)
	require.NoError(t, err)
	require.Equal(t, []*channel.WithdrawInitiated{{ChannelID: id, Amount: big.NewInt(60_000), FinalizeAfter: head.Time + c.WithdrawDelay}},
		parsedLogs(t, r.Logs, channel.ParseWithdrawInitiated))
	require.Empty(t, parsedLogs(t, r.Logs, channel.ParseWithdrawFinalized))
	require.Empty(t, parsedLogs(t, r.Logs, channel.ParseRefunded))
	st, err := channel.ReadState(ctx, node.Client, id, nil)
	require.NoError(t, err)
	require.Equal(t, head.Time, st.WithdrawRequestedAt)
	refused(payerAccount, channel.SettlementAddress, settlement, "WithdrawalAlreadyPending", "initiateWithdraw", tuple(&c), big.NewInt(1))
	refused(payerAccount, channel.SettlementAddress, settlement, "WithdrawDelayNotElapsed", "finalizeWithdraw", tuple(&c))

	// During the delay the seller claims what it was owed since.
	send(relayerAccount, "claimWithSignature", claimOf(50_000, 45_000), authorize(authorizerAccount, 50_000, 45_000))
	_, claimed = state(id)
	require.Equal(t, int64(45_000), claimed.Int64())

	// After the delay the payer gets what is left unclaimed, less than it
	// asked for.
	require.NoError(t, node.Call(ctx, nil, "evm_increaseTime", hexutil.Uint64(c.WithdrawDelay)))
	payerBefore := usdc(c.Payer)
	r = send(payerAccount, "finalizeWithdraw", tuple(&c))
	require.Equal(t, new(big.Int).Add(payerBefore, big.NewInt(45_000)), usdc(c.Payer))
	require.Equal(t, []*channel.WithdrawFinalized{{ChannelID: id, Amount: big.NewInt(45_000)}}, parsedLogs(t, r.Logs, channel.ParseWithdrawFinalized))
	require.Empty(t, parsedLogs(t, r.Logs, channel.ParseWithdrawInitiated))
	balance, claimed = state(id)
	require.Equal(t, int64(45_000), balance.Int64())
	require.Equal(t, int64(45_000), claimed.Int64())
	refused(payerAccount, channel.SettlementAddress, settlement, "WithdrawalNotPending", "finalizeWithdraw", tuple(&c))

	// settle pays the receiver all it claimed, once.
	payToBefore := usdc(c.Receiver)
	send(relayerAccount, "settle", c.Receiver, devchain.USDC)
	require.Equal(t, new(big.Int).Add(payToBefore, big.NewInt(45_000)), usdc(c.Receiver))
	r = send(relayerAccount, "settle", c.Receiver, devchain.USDC)
	require.Empty(t, r.Logs, "nothing left to settle")
	require.Zero(t, usdc(channel.SettlementAddress).Sign(), "the escrow is empty")
}

// TestContract_ClaimMany funds many channels in one transaction (multicall
// of deposits) and claims them all with one claimWithSignature, on anvil
// with Circle's USDC, then settles them with one transfer: each channel's
// claimed total is its voucher's, and payTo gets the sum.
func TestContract_ClaimMany(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
	settlement, err := contracts.Load(contracts.BatchSettlement)
	require.NoError(t, err)
	chainID := big.NewInt(anviltest.ChainID)
	const n = 40
	deposit, charged := big.NewInt(1_000_000), big.NewInt(0)
	var deposits [][]byte
	var claims []channel.Claim
	for i := range n {
		c := testConfig(t)
		c.Salt = common.BigToHash(big.NewInt(int64(1000 + i)))
		id := c.ID(chainID)
		auth := &channel.ERC3009Authorization{ValidAfter: big.NewInt(0), ValidBefore: big.NewInt(time.Now().Unix() + 600), Salt: common.Hash{0x42}}
		auth.Signature = sign(t, payerAccount, channel.ReceiveAuthorizationDigest(chainID, devchain.USDC, devchain.TokenName, devchain.TokenVersion, &channel.ReceiveAuthorization{
			From: c.Payer, Value: deposit, ValidAfter: auth.ValidAfter, ValidBefore: auth.ValidBefore, Nonce: channel.DepositNonce(id, auth.Salt),
		}))
		p := &channel.Payload{Type: channel.TypeDeposit, Config: c, Voucher: channel.Voucher{ChannelID: id}, Deposit: &channel.Deposit{Amount: deposit, ERC3009: auth}}
		input, err := channel.DepositInput(p)
		require.NoError(t, err)
		deposits = append(deposits, input)
		// 100 calls of 0.01 USDC each, the last voucher signed for them all.
		total := big.NewInt(int64(100 * 10_000))
		if i%2 == 1 {
			total = big.NewInt(int64(100*10_000 - 5_000)) // a seller may charge less than signed
		}
		max := big.NewInt(100 * 10_000)
		claims = append(claims, channel.Claim{Config: c, TotalClaimed: total, Voucher: channel.Voucher{
			ChannelID: id, MaxClaimable: max, Signature: sign(t, payerAccount, channel.VoucherDigest(chainID, id, max)),
		}})
		charged.Add(charged, total)
	}
	multicall, err := settlement.ABI.Pack("multicall", deposits)
	require.NoError(t, err)
	s := newTxSender(t, node)
	r := s.send(relayerAccount, multicall, 12_000_000)
	t.Logf("%d deposits in one multicall: %d gas, %d a deposit", n, r.GasUsed, r.GasUsed/n)

	authorization, err := channel.Sign(key(t, authorizerAccount), channel.ClaimBatchDigestOf(chainID, claims))
	require.NoError(t, err)
	input, err := channel.ClaimWithSignatureInput(claims, authorization)
	require.NoError(t, err)
	r = s.send(relayerAccount, input, 12_000_000)
	t.Logf("claimWithSignature of %d channels: %d gas, %d a channel", n, r.GasUsed, r.GasUsed/n)
	for _, c := range claims {
		st, err := channel.ReadState(ctx, node.Client, c.Voucher.ChannelID, nil)
		require.NoError(t, err)
		require.Equal(t, c.TotalClaimed, st.TotalClaimed)
		require.Equal(t, deposit, st.Balance)
	}
	payTo := account(t, payToAccount)
	input, err = channel.SettleInput(payTo, devchain.USDC)
	require.NoError(t, err)
	r = s.send(relayerAccount, input, 200_000)
	t.Logf("settle: %d gas", r.GasUsed)
	require.Len(t, r.Logs, 2, "one Transfer, one Settled")
	ev, err := settlement.ABI.Unpack("Settled", r.Logs[1].Data)
	require.NoError(t, err)
	require.Equal(t, charged, ev[0].(*big.Int))
}

// txSender sends development accounts' transactions with a gas limit and
// requires them mined successfully.
type txSender struct {
	t    *testing.T
	node *anviltest.Node
}

func newTxSender(t *testing.T, node *anviltest.Node) *txSender { return &txSender{t: t, node: node} }

func (s *txSender) send(from int, input []byte, gas uint64) *types.Receipt {
	s.t.Helper()
	ctx := s.t.Context()
	k := key(s.t, from)
	nonce, err := s.node.Client.PendingNonceAt(ctx, account(s.t, from))
	require.NoError(s.t, err)
	tx, err := types.SignNewTx(k, types.LatestSignerForChainID(big.NewInt(anviltest.ChainID)), &types.DynamicFeeTx{
		ChainID: big.NewInt(anviltest.ChainID), Nonce: nonce, To: &channel.SettlementAddress, Data: input, Gas: gas,
		GasTipCap: big.NewInt(1_000_000_000), GasFeeCap: big.NewInt(100_000_000_000),
	})
	require.NoError(s.t, err)
	require.NoError(s.t, s.node.Client.SendTransaction(ctx, tx))
	var r *types.Receipt
	require.Eventually(s.t, func() bool {
		r, err = s.node.Client.TransactionReceipt(ctx, tx.Hash())
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(s.t, types.ReceiptStatusSuccessful, r.Status)
	return r
}
