package worker_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/paytest"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/channel"
)

// claimNetwork is anvil's network (Base's chain id).
const claimNetwork = "eip155:8453"

// claimBench is anvil with Circle's USDC and the channel contracts at
// their canonical addresses, a database, the relayer sending from
// devchain.RelayerAccount with its nonces in the database, and channels
// of the development accounts paying payTo (an account of no one, so its
// balance is what the settles paid it), claimed with the receiver
// authorizer's key (account 7).
type claimBench struct {
	t          *testing.T
	node       *anviltest.Node
	db         *dbtest.DB
	relayer    *evm.Relayer
	authorizer *ecdsa.PrivateKey
	payTo      common.Address
	chainID    *big.Int
	clock      *clock.Fake
	salt       int64
	// metrics, when set, counts the refunders' transactions (refunder).
	metrics *metrics.Metrics
}

func newClaimBench(t *testing.T, finality evm.FinalityPolicy) *claimBench {
	t.Helper()
	return newClaimBenchOn(t, finality, &anviltest.Config{BlockTime: -1})
}

// newClaimBenchOn is newClaimBench on a node of cfg.
func newClaimBenchOn(t *testing.T, finality evm.FinalityPolicy, cfg *anviltest.Config) *claimBench {
	t.Helper()
	ctx := context.Background()
	b := &claimBench{t: t, node: anviltest.Start(t, cfg), db: dbtest.Schema(ctx, t), authorizer: devKey(t, 7),
		payTo: common.HexToAddress("0x00000000000000000000000000000000000c1a1e"), chainID: big.NewInt(anviltest.ChainID),
		clock: clock.NewFake(time.Now())}
	b.relayer = b.newRelayer(finality)
	return b
}

// newRelayer starts a relayer process of the bench's key and nonce store.
func (b *claimBench) newRelayer(finality evm.FinalityPolicy) *evm.Relayer {
	b.t.Helper()
	relayer, err := evm.NewRelayer(&evm.RelayerConfig{
		Key: devKey(b.t, devchain.RelayerAccount), Chains: map[string]evm.Backend{claimNetwork: b.node.Client},
		Nonces: store.RelayerNonces{DB: b.db.Pool}, Refusals: store.PayerCodeRefusals{DB: b.db.Pool}, Finality: map[string]evm.FinalityPolicy{claimNetwork: finality},
		KeepEvery: 200 * time.Millisecond, KeepIdle: 200 * time.Millisecond, RPCTimeout: 5 * time.Second,
	})
	require.NoError(b.t, err)
	require.NoError(b.t, relayer.Start(context.Background()))
	b.t.Cleanup(relayer.Stop)
	return relayer
}

func devKey(t testing.TB, i int) *ecdsa.PrivateKey {
	t.Helper()
	k, err := devchain.DeriveKey(devchain.Mnemonic, uint32(i))
	require.NoError(t, err)
	return k
}

func devAddr(t testing.TB, i int) common.Address {
	return crypto.PubkeyToAddress(devKey(t, i).PublicKey)
}

// claimer returns a Claimer of the bench with policy interval and
// minAmount, on the bench's fake clock.
func (b *claimBench) claimer(interval time.Duration, minAmount int64) *worker.Claimer {
	b.t.Helper()
	return b.claimerWith(func(c *worker.ClaimConfig) {
		c.Interval, c.MinAmount, c.GoneAfter = interval, big.NewInt(minAmount), 5*time.Second
	})
}

// claimerWith returns a Claimer of the bench's database, relayer, node and
// authorizer, claiming any amount at once, on the bench's fake clock,
// with the changes edit makes to that configuration.
func (b *claimBench) claimerWith(edit func(*worker.ClaimConfig)) *worker.Claimer {
	b.t.Helper()
	cfg := &worker.ClaimConfig{
		Pool: b.db.Pool, Chain: b.relayer, Readers: map[string]worker.ClaimReader{claimNetwork: b.node.Client},
		AuthorizerKey: b.authorizer, MinAmount: big.NewInt(1), Clock: b.clock,
	}
	edit(cfg)
	c, err := worker.NewClaimer(cfg)
	require.NoError(b.t, err)
	return c
}

// benchChannel is a channel opened on chain and its payer's key.
type benchChannel struct {
	state *channel.State
	payer int
}

// open deposits deposit into a new channel of development account payer
// (through the collector, sent by the relayer's Send) and puts its row.
func (b *claimBench) open(payer int, deposit int64) *benchChannel {
	b.t.Helper()
	return b.openOf(devAddr(b.t, payer), devAddr(b.t, payer), payer, deposit)
}

// openOf opens a channel of payer with payerAuthorizer, development
// account signer's key signing the deposit (open).
func (b *claimBench) openOf(payer, payerAuthorizer common.Address, signer int, deposit int64) *benchChannel {
	b.t.Helper()
	ctx := context.Background()
	b.salt++
	c := channel.Config{Payer: payer, PayerAuthorizer: payerAuthorizer, Receiver: b.payTo,
		ReceiverAuthorizer: devAddr(b.t, 7), Token: devchain.USDC, WithdrawDelay: channel.MinWithdrawDelay,
		Salt: common.BigToHash(big.NewInt(b.salt))}
	id := c.ID(b.chainID)
	amount := big.NewInt(deposit)
	auth := &channel.ERC3009Authorization{ValidAfter: big.NewInt(0), ValidBefore: big.NewInt(time.Now().Unix() + 600), Salt: common.Hash{0x42}}
	var err error
	auth.Signature, err = channel.Sign(devKey(b.t, signer), channel.ReceiveAuthorizationDigest(b.chainID, devchain.USDC, devchain.TokenName, devchain.TokenVersion,
		&channel.ReceiveAuthorization{From: c.Payer, Value: amount, ValidAfter: auth.ValidAfter, ValidBefore: auth.ValidBefore, Nonce: channel.DepositNonce(id, auth.Salt)}))
	require.NoError(b.t, err)
	input, err := channel.DepositInput(&channel.Payload{Type: channel.TypeDeposit, Config: c, Voucher: channel.Voucher{ChannelID: id},
		Deposit: &channel.Deposit{Amount: amount, ERC3009: auth}})
	require.NoError(b.t, err)
	b.sendOK(input)
	st, err := channel.ReadState(ctx, b.node.Client, id, nil)
	require.NoError(b.t, err)
	require.Equal(b.t, amount, st.Balance)
	ch := &benchChannel{state: channel.NewState(&c, b.chainID, st), payer: signer}
	b.put(ch.state)
	return ch
}

// openCharged opens a channel of payer with deposit (open) and charges it
// amount under its payer's voucher (charge).
func (b *claimBench) openCharged(payer int, deposit, amount int64) *benchChannel {
	b.t.Helper()
	ch := b.open(payer, deposit)
	b.charge(ch, amount, nil)
	return ch
}

// sendOK sends input to the settlement contract from the relayer and
// requires it mined successfully.
func (b *claimBench) sendOK(input []byte) *types.Receipt {
	b.t.Helper()
	ctx := context.Background()
	hash, err := b.relayer.Send(ctx, claimNetwork, channel.SettlementAddress, input, 0)
	require.NoError(b.t, err)
	r, err := b.relayer.Await(ctx, claimNetwork, hash)
	require.NoError(b.t, err)
	require.Equal(b.t, types.ReceiptStatusSuccessful, r.Status)
	return r
}

// charge charges ch amount under a voucher of its payer for the new
// cumulative total (signer: the voucher's key, the payer's when nil) and
// puts the row, as the admission of a paid call records it.
func (b *claimBench) charge(ch *benchChannel, amount int64, signer *ecdsa.PrivateKey) {
	b.t.Helper()
	if signer == nil {
		signer = devKey(b.t, ch.payer)
	}
	total := new(big.Int).Add(ch.state.Charged, big.NewInt(amount))
	sig, err := channel.Sign(signer, channel.VoucherDigest(b.chainID, ch.state.ChannelID, total))
	require.NoError(b.t, err)
	next, err := ch.state.Charge(&channel.Payload{Type: channel.TypeVoucher, Config: ch.state.Config,
		Voucher: channel.Voucher{ChannelID: ch.state.ChannelID, MaxClaimable: total, Signature: sig}}, big.NewInt(amount))
	require.NoError(b.t, err)
	ch.state = next
	b.put(next)
}

func (b *claimBench) put(s *channel.State) {
	b.t.Helper()
	ctx := context.Background()
	require.NoError(b.t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error { return store.ChannelPut(ctx, tx, claimNetwork, s) }))
}

// onChain returns ch's state on chain.
func (b *claimBench) onChain(ch *benchChannel) *channel.OnChain {
	b.t.Helper()
	st, err := channel.ReadState(context.Background(), b.node.Client, ch.state.ChannelID, nil)
	require.NoError(b.t, err)
	return st
}

// row returns ch's row.
func (b *claimBench) row(ch *benchChannel) *store.Channel {
	b.t.Helper()
	c, err := store.ChannelGet(context.Background(), b.db.Pool, claimNetwork, ch.state.ChannelID)
	require.NoError(b.t, err)
	return c
}

// usdc returns who's USDC balance.
func (b *claimBench) usdc(who common.Address) *big.Int {
	b.t.Helper()
	token, err := contracts.Load(contracts.FiatTokenV2_2)
	require.NoError(b.t, err)
	input, err := token.ABI.Pack("balanceOf", who)
	require.NoError(b.t, err)
	out, err := b.node.Client.CallContract(context.Background(), ethereum.CallMsg{To: &devchain.USDC, Data: input}, nil)
	require.NoError(b.t, err)
	return new(big.Int).SetBytes(out)
}

// nonce returns the relayer's count of mined transactions.
func (b *claimBench) nonce() uint64 {
	b.t.Helper()
	n, err := b.node.Client.NonceAt(context.Background(), b.relayer.Address(), nil)
	require.NoError(b.t, err)
	return n
}

// claimTxs returns the claim transactions recorded, with their channel
// counts and gas.
func (b *claimBench) claimTxs(kind string) (n, channels int, gas int64) {
	b.t.Helper()
	require.NoError(b.t, b.db.Pool.QueryRow(context.Background(),
		`SELECT count(*), coalesce(sum(cardinality(channels)), 0), coalesce(sum(gas_used), 0) FROM channel_claims WHERE kind = $1 AND state <> 'gone'`, kind).
		Scan(&n, &channels, &gas))
	return n, channels, gas
}

// initiateWithdraw starts a timed withdrawal of amount from ch, sent by
// its payer.
func (b *claimBench) initiateWithdraw(ch *benchChannel, amount int64) *types.Receipt {
	b.t.Helper()
	return b.payerSends(ch, "initiateWithdraw", big.NewInt(amount))
}

// finalizeWithdraw ends ch's timed withdrawal, sent by its payer.
func (b *claimBench) finalizeWithdraw(ch *benchChannel) {
	b.t.Helper()
	b.payerSends(ch, "finalizeWithdraw")
}

// payerSends sends the settlement contract's method of ch's configuration
// and args from ch's payer, and requires it mined successfully.
func (b *claimBench) payerSends(ch *benchChannel, method string, args ...any) *types.Receipt {
	b.t.Helper()
	settlement, err := contracts.Load(contracts.BatchSettlement)
	require.NoError(b.t, err)
	cfg := ch.state.Config
	input, err := settlement.ABI.Pack(method, append([]any{struct {
		Payer, PayerAuthorizer, Receiver, ReceiverAuthorizer, Token common.Address
		WithdrawDelay                                               *big.Int
		Salt                                                        [32]byte
	}{cfg.Payer, cfg.PayerAuthorizer, cfg.Receiver, cfg.ReceiverAuthorizer, cfg.Token, new(big.Int).SetUint64(cfg.WithdrawDelay), cfg.Salt}},
		args...)...)
	require.NoError(b.t, err)
	r := b.node.Transact(devKey(b.t, ch.payer), channel.SettlementAddress, input)
	require.Equal(b.t, types.ReceiptStatusSuccessful, r.Status)
	return r
}

// TestClaim_ManyChannelsOneTransaction opens 40 channels with real
// deposits, charges them under real vouchers, and runs a claim round: the
// 40 are claimed in one claimWithSignature (each channel's claimed total
// on chain is its charge, its row all claimed) within
// worker.ClaimGasPerChannel a channel, then one settle pays payTo their
// sum; a second round sends nothing.
func TestClaim_ManyChannelsOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClaimBench(t, evm.FinalityPolicy{})
	var chans []*benchChannel
	sum := new(big.Int)
	const n = 40
	for i := range n {
		ch := b.open(i%4, 1_000_000)
		for range i%5 + 1 {
			b.charge(ch, 10_000, nil)
		}
		sum.Add(sum, ch.state.Charged)
		chans = append(chans, ch)
	}
	c := b.claimer(time.Hour, 1) // the amount is due at once
	require.NoError(t, c.Round(ctx, claimNetwork))

	txs, channels, gas := b.claimTxs(store.ClaimKindClaim)
	require.Equal(t, 1, txs, "one claim transaction")
	require.Equal(t, n, channels)
	t.Logf("claimWithSignature of %d channels: %d gas, %d a channel", channels, gas, gas/int64(channels))
	require.Less(t, gas/int64(channels), int64(worker.ClaimGasPerChannel), "the bound the batches are sized with holds")
	for _, ch := range chans {
		require.Equal(t, ch.state.Charged, b.onChain(ch).TotalClaimed)
		row := b.row(ch)
		require.Equal(t, ch.state.Charged, row.State.OnChain.TotalClaimed)
		require.Nil(t, row.UnclaimedSince)
	}
	settles, _, settleGas := b.claimTxs(store.ClaimKindSettle)
	require.Equal(t, 1, settles)
	t.Logf("settle: %d gas", settleGas)
	require.Equal(t, sum, b.usdc(b.payTo), "payTo holds every charge once")

	totals, err := store.ChannelTotalsList(ctx, b.db.Pool)
	require.NoError(t, err)
	require.Len(t, totals, 1)
	require.Equal(t, n, totals[0].Channels)
	require.Zero(t, totals[0].Unclaimed.Sign())
	require.Equal(t, sum, totals[0].Claimed)
	require.Equal(t, sum, totals[0].Settled)

	before := b.nonce()
	require.NoError(t, c.Round(ctx, claimNetwork))
	require.Equal(t, before, b.nonce(), "nothing left to claim or settle: nothing sent")
	events, err := store.EventListByStream(ctx, b.db.Pool, store.ChannelStream(claimNetwork, chans[0].state.ChannelID))
	require.NoError(t, err)
	require.Equal(t, store.EventChannelClaimed, events[len(events)-1].Type)
}

// TestClaim_DropsFailingRows claims five channels of which three cannot
// be claimed (a voucher signed by another key; a charge over the
// channel's balance; a channel its payer emptied by a timed withdrawal the
// seller did not claim before, the delay passed): the three are found by
// halving the batch's simulation, left out with their reason, and the
// other two claimed in one transaction; the next round does not try the
// three again until their charge moves.
func TestClaim_DropsFailingRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClaimBench(t, evm.FinalityPolicy{})
	good1, badSig, good2, over, gone := b.open(0, 1_000_000), b.open(1, 1_000_000), b.open(2, 1_000_000), b.open(3, 50_000), b.open(0, 80_000)
	b.charge(good1, 10_000, nil)
	b.charge(badSig, 10_000, devKey(t, 5))
	b.charge(good2, 30_000, nil)
	b.charge(over, 60_000, nil)
	b.charge(gone, 20_000, nil)
	b.initiateWithdraw(gone, 80_000)
	require.NoError(t, b.node.Call(ctx, nil, "evm_increaseTime", channel.MinWithdrawDelay+1))
	b.finalizeWithdraw(gone)
	require.Zero(t, b.onChain(gone).Balance.Sign(), "the payer took it all back")
	c := b.claimer(time.Hour, 1)
	require.NoError(t, c.Round(ctx, claimNetwork))

	n, channels, _ := b.claimTxs(store.ClaimKindClaim)
	require.Equal(t, 1, n)
	require.Equal(t, 2, channels)
	require.Equal(t, good1.state.Charged, b.onChain(good1).TotalClaimed)
	require.Equal(t, good2.state.Charged, b.onChain(good2).TotalClaimed)
	require.Zero(t, b.onChain(badSig).TotalClaimed.Sign())
	require.Zero(t, b.onChain(over).TotalClaimed.Sign())
	require.Zero(t, b.onChain(gone).TotalClaimed.Sign())
	reason := func(ch *benchChannel) string {
		var r *string
		require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT claim_refused_reason FROM channels WHERE channel_id = $1", ch.state.ChannelID.Bytes()).Scan(&r))
		require.NotNil(t, r)
		return *r
	}
	require.Equal(t, "InvalidSignature", reason(badSig))
	require.Equal(t, "ClaimExceedsBalance", reason(over))
	require.Equal(t, "ClaimExceedsBalance", reason(gone))
	require.Zero(t, b.row(gone).State.OnChain.WithdrawRequestedAt, "its withdrawal was seen, and its end")
	require.Zero(t, b.row(gone).State.OnChain.Balance.Sign(), "the balance the payer left")
	events, err := store.EventListByStream(ctx, b.db.Pool, store.ChannelStream(claimNetwork, gone.state.ChannelID))
	require.NoError(t, err)
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	require.Equal(t, []string{store.EventChannelWithdrawInitiated, store.EventChannelWithdrawFinalized, store.EventChannelClaimRefused},
		types[len(types)-3:], "the withdrawal's start and end, in the chain's order")
	require.Equal(t, new(big.Int).Add(good1.state.Charged, good2.state.Charged), b.usdc(b.payTo))

	before := b.nonce()
	require.NoError(t, c.Round(ctx, claimNetwork))
	require.Equal(t, before, b.nonce(), "the refused rows are not tried again at the same charge")
	u, err := store.ChannelUnclaimed(ctx, b.db.Pool, claimNetwork)
	require.NoError(t, err)
	require.Zero(t, u.Channels, "refused rows do not hold the policy")
}

// TestClaim_WithdrawInitiated: a payer starts a timed withdrawal
// (initiateWithdraw from the payer) while the policy would claim nothing
// for an hour: the next round's watcher reads the WithdrawInitiated log,
// records it on the channel, and the channel is claimed at once, long
// before the delay ends; its voucher is not lost. A channel of another
// payer stays unclaimed (the policy is not due). Once the payer finishes
// the withdrawal (WithdrawFinalized), the channel's row has none pending
// and the balance left on chain.
func TestClaim_WithdrawInitiated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClaimBench(t, evm.FinalityPolicy{})
	leaving, staying := b.openCharged(0, 500_000, 70_000), b.openCharged(1, 500_000, 20_000)
	c := b.claimer(time.Hour, 1_000_000_000)
	require.NoError(t, c.Round(ctx, claimNetwork))
	require.Zero(t, b.onChain(leaving).TotalClaimed.Sign(), "not due")

	cfg := leaving.state.Config
	b.initiateWithdraw(leaving, 500_000-70_000)
	started := b.onChain(leaving).WithdrawRequestedAt
	require.NotZero(t, started)

	require.NoError(t, c.Round(ctx, claimNetwork))
	require.Equal(t, leaving.state.Charged, b.onChain(leaving).TotalClaimed, "claimed at once: no voucher lost")
	require.Equal(t, started, b.row(leaving).State.OnChain.WithdrawRequestedAt)
	require.Zero(t, b.onChain(staying).TotalClaimed.Sign(), "the other channel waits for the policy")
	head, err := b.node.Client.HeaderByNumber(ctx, nil)
	require.NoError(t, err)
	require.Less(t, head.Time, started+cfg.WithdrawDelay, "claimed before the delay ends")
	require.Equal(t, leaving.state.Charged, b.usdc(b.payTo))

	// The payer finishes its withdrawal: the next round's watcher reads
	// the WithdrawFinalized log; the channel has no withdrawal pending and
	// the balance the chain shows.
	require.NoError(t, b.node.Call(ctx, nil, "evm_increaseTime", cfg.WithdrawDelay+1))
	b.finalizeWithdraw(leaving)
	require.NoError(t, c.Round(ctx, claimNetwork))
	row := b.row(leaving)
	require.Zero(t, row.State.OnChain.WithdrawRequestedAt, "no withdrawal pending")
	require.Equal(t, leaving.state.Charged, row.State.OnChain.Balance, "what the payer left: what was claimed")
	require.Equal(t, b.onChain(leaving).Balance, row.State.OnChain.Balance)
	urgent, err := store.ChannelListToClaim(ctx, b.db.Pool, claimNetwork, 10, true, nil, nil)
	require.NoError(t, err)
	require.Empty(t, urgent)
}

// TestClaim_Reorganisation claims two channels on a chain whose
// transactions are final 5 blocks deep, then replaces the claim's block
// and the settle's with empty ones and has the node forget them: the
// claim is sent again, the channels' claimed totals on chain end equal to
// their charges, payTo holds their sum once, and every record ends final
// (or gone, when made again). Keeper: the relayer's keeper gives the node
// the same transactions again (they are mined elsewhere: moved).
// RecordsLost: the relayer's records of them are lost too (a new relayer
// process, its nonce store emptied), so they stay gone and the claimer,
// after GoneAfter, reads the channels from the chain and claims and
// settles them again in new transactions.
func TestClaim_Reorganisation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		lost bool
	}{{"Keeper", false}, {"RecordsLost", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := newClaimBench(t, evm.FinalityPolicy{Depth: 5})
			one, two := b.openCharged(0, 1_000_000, 40_000), b.openCharged(1, 1_000_000, 25_000)
			c := b.claimer(time.Hour, 1)
			require.NoError(t, c.Round(ctx, claimNetwork))
			require.Equal(t, one.state.Charged, b.onChain(one).TotalClaimed)
			var oldest int64
			var first string
			require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT block_number, transaction FROM channel_claims WHERE kind = 'claim'").Scan(&oldest, &first))
			head, err := b.node.Client.BlockNumber(ctx)
			require.NoError(t, err)
			if tc.lost {
				b.relayer.Stop()
			}
			require.NoError(t, b.node.Call(ctx, nil, "anvil_reorg", head-uint64(oldest)+1, []any{}))
			require.NoError(t, b.node.Call(ctx, nil, "anvil_dropAllTransactions"))
			require.Zero(t, b.onChain(one).TotalClaimed.Sign(), "the reorganisation undid the claim")
			if tc.lost {
				_, err := b.db.Pool.Exec(ctx, "DELETE FROM relayer_txs; DELETE FROM relayer_nonces")
				require.NoError(t, err)
				b.relayer = b.newRelayer(evm.FinalityPolicy{Depth: 5})
				c = b.claimer(time.Hour, 1)
			}

			sum := new(big.Int).Add(one.state.Charged, two.state.Charged)
			require.Eventually(t, func() bool {
				require.NoError(t, b.node.Mine(ctx))
				b.clock.Advance(time.Second)
				require.NoError(t, c.Round(ctx, claimNetwork))
				var pending int
				require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM channel_claims WHERE state = 'pending'").Scan(&pending))
				return pending == 0 && b.onChain(one).TotalClaimed.Cmp(one.state.Charged) == 0 && b.onChain(two).TotalClaimed.Cmp(two.state.Charged) == 0 &&
					b.usdc(b.payTo).Cmp(sum) == 0
			}, 60*time.Second, 50*time.Millisecond, "the claim is made again and becomes final")
			require.Equal(t, one.state.Charged, b.row(one).State.OnChain.TotalClaimed)
			require.Equal(t, two.state.Charged, b.row(two).State.OnChain.TotalClaimed)
			require.Equal(t, sum, b.usdc(b.payTo), "payTo paid once")
			totals, err := store.ChannelTotalsList(ctx, b.db.Pool)
			require.NoError(t, err)
			require.Equal(t, sum, totals[0].Claimed)
			require.Equal(t, sum, totals[0].Settled)
			var state string
			require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT state FROM channel_claims WHERE transaction = $1", first).Scan(&state))
			claims, _, _ := b.claimTxs(store.ClaimKindClaim)
			require.Equal(t, 1, claims, "one claim counts")
			if tc.lost {
				require.Equal(t, "gone", state, "the first claim was undone for good")
			} else {
				require.Equal(t, "final", state, "the same claim, mined again, is final")
			}
		})
	}
}

// TestClaimPolicy: a network's channels are claimed once the oldest
// unclaimed charge is Interval old or the unclaimed total reaches
// MinAmount, never with nothing unclaimed.
func TestClaimPolicy(t *testing.T) {
	t.Parallel()
	now := clock.NewFake(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	p := worker.ClaimPolicy{Interval: time.Hour, MinAmount: big.NewInt(10_000_000)}
	for _, tc := range []struct {
		name   string
		age    time.Duration
		amount int64
		due    bool
	}{
		{"Nothing", 0, 0, false},
		{"YoungAndSmall", 59 * time.Minute, 9_999_999, false},
		{"OldEnough", time.Hour, 1, true},
		{"Older", 3 * time.Hour, 10_000, true},
		{"Enough", time.Second, 10_000_000, true},
		{"More", 0, 50_000_000, true},
		{"OldButNothing", 2 * time.Hour, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oldest := time.Time{}
			if tc.amount > 0 {
				oldest = now.Now().Add(-tc.age)
			}
			require.Equal(t, tc.due, p.Due(oldest, big.NewInt(tc.amount), now.Now()))
		})
	}
}

// TestClaim_RiverJob runs the claim rounds as the service does: the
// periodic channel.claim job of each network, worked by River, claims and
// settles a charged channel.
func TestClaim_RiverJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClaimBench(t, evm.FinalityPolicy{})
	ch := b.openCharged(0, 1_000_000, 10_000)
	c := b.claimerWith(func(c *worker.ClaimConfig) { c.CheckEvery = time.Hour })
	require.Len(t, c.PeriodicJobs(), 1, "one periodic job per network")
	client, err := worker.NewClient(&worker.Deps{Pool: b.db.Pool, Settler: &paytest.Payments{}, Logger: slog.New(slog.DiscardHandler),
		Register: []func(*river.Workers) error{c.Register}},
		&worker.Config{Work: true, FetchPollInterval: 50 * time.Millisecond, PeriodicJobs: c.PeriodicJobs()})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, worker.Stop(client, 5*time.Second)) })
	require.Eventually(t, func() bool { return b.usdc(b.payTo).Cmp(ch.state.Charged) == 0 }, 30*time.Second, 50*time.Millisecond,
		"the periodic job (run at start) claims and settles the channel")
	require.Equal(t, ch.state.Charged, b.onChain(ch).TotalClaimed)
}

// cutChain is the relayer, and a process that dies once its claim is
// sent: the first Await ends with the round (a worker killed between its
// claim's send and its record).
type cutChain struct {
	*evm.Relayer
	cut bool
}

func (c *cutChain) Await(ctx context.Context, network string, hash common.Hash) (*types.Receipt, error) {
	if !c.cut {
		c.cut = true
		return nil, context.Canceled
	}
	return c.Relayer.Await(ctx, network, hash)
}

// TestClaim_CrashAfterSend: a round whose process dies once its claim is
// sent (before the receipt is recorded) leaves the claim to the chain; the
// next round, in a new process, reads the channels' state, finds them
// claimed, records them so without sending a claim again, and settles:
// nothing claimed twice, nothing lost.
func TestClaim_CrashAfterSend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClaimBench(t, evm.FinalityPolicy{})
	one, two := b.openCharged(0, 1_000_000, 10_000), b.openCharged(1, 1_000_000, 20_000)
	before := b.nonce()
	dying := b.claimerWith(func(c *worker.ClaimConfig) { c.Chain = &cutChain{Relayer: b.relayer} })
	require.Error(t, dying.Round(ctx, claimNetwork))
	n, _, _ := b.claimTxs(store.ClaimKindClaim)
	require.Zero(t, n, "nothing recorded")
	require.NotNil(t, b.row(one).UnclaimedSince)

	require.Eventually(t, func() bool { return b.onChain(one).TotalClaimed.Cmp(one.state.Charged) == 0 }, 10*time.Second, 20*time.Millisecond,
		"the claim sent goes on")
	require.NoError(t, b.claimer(time.Hour, 1).Round(ctx, claimNetwork))
	require.Equal(t, before+2, b.nonce(), "one claim, one settle: nothing sent twice")
	for _, ch := range []*benchChannel{one, two} {
		require.Equal(t, ch.state.Charged, b.onChain(ch).TotalClaimed)
		require.Equal(t, ch.state.Charged, b.row(ch).State.OnChain.TotalClaimed)
		require.Nil(t, b.row(ch).UnclaimedSince)
	}
	require.Equal(t, new(big.Int).Add(one.state.Charged, two.state.Charged), b.usdc(b.payTo))
}

// TestClaim_BoundedByGas: a claim transaction carries at most the
// channels MaxGas allows (two here), so five channels take three claims in
// one round, and one settle.
func TestClaim_BoundedByGas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClaimBench(t, evm.FinalityPolicy{})
	sum := new(big.Int)
	for i := range 5 {
		ch := b.openCharged(i%4, 100_000, 1_000)
		sum.Add(sum, ch.state.Charged)
	}
	c := b.claimerWith(func(c *worker.ClaimConfig) { c.MaxGas = 80_000 })
	require.NoError(t, c.Round(ctx, claimNetwork))
	n, channels, _ := b.claimTxs(store.ClaimKindClaim)
	require.Equal(t, 3, n)
	require.Equal(t, 5, channels)
	settles, _, _ := b.claimTxs(store.ClaimKindSettle)
	require.Equal(t, 1, settles)
	require.Equal(t, sum, b.usdc(b.payTo))
}

// TestClaim_WatcherResumes: the watcher reads WithdrawInitiated logs in
// ranges of LogRange blocks, at most LogRanges a round, from its stored
// cursor: a withdrawal a dozen blocks past the cursor is found by the
// round whose ranges reach it, each round going on where the last stopped (the
// cursor is the database's: a new Claimer goes on from it), and its
// channel is claimed in that round; a log of a channel the seller does not
// hold is passed over.
func TestClaim_WatcherResumes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClaimBench(t, evm.FinalityPolicy{})
	ch, stranger := b.open(0, 500_000), b.open(1, 500_000)
	b.charge(ch, 10_000, nil)
	_, err := b.db.Pool.Exec(ctx, "DELETE FROM channels WHERE channel_id = $1", stranger.state.ChannelID.Bytes())
	require.NoError(t, err)
	head, err := b.node.Client.BlockNumber(ctx)
	require.NoError(t, err)
	require.NoError(t, store.ChannelClaimCursorSet(ctx, b.db.Pool, claimNetwork, head+1))
	for range 9 {
		require.NoError(t, b.node.Mine(ctx))
	}
	b.initiateWithdraw(stranger, 1_000)
	at := b.initiateWithdraw(ch, 1_000).BlockNumber.Uint64()
	require.Greater(t, at, head+9)
	from := head + 1
	for rounds := 0; b.onChain(ch).TotalClaimed.Sign() == 0; rounds++ {
		require.Less(t, rounds, 10, "the withdrawal is never found")
		c := b.claimerWith(func(c *worker.ClaimConfig) { c.MinAmount, c.LogRange, c.LogRanges = big.NewInt(1_000_000_000), 2, 2 })
		require.NoError(t, c.Round(ctx, claimNetwork))
		next, known, err := store.ChannelClaimCursor(ctx, b.db.Pool, claimNetwork)
		require.NoError(t, err)
		require.True(t, known)
		require.Equal(t, from+4, next, "four blocks a round, from where the last stopped")
		if b.onChain(ch).TotalClaimed.Sign() == 0 {
			require.Less(t, next-1, at, "not found before its block is read")
		} else {
			require.GreaterOrEqual(t, next-1, at, "found by the round that read its block")
		}
		from = next
	}
	require.Equal(t, ch.state.Charged, b.onChain(ch).TotalClaimed)
	require.NotZero(t, b.row(ch).State.OnChain.WithdrawRequestedAt)
}

// claimKillChild is set in the environment of the worker process
// TestClaim_KilledMidClaim starts and kills.
const claimKillChild = "X402D_CLAIM_KILL_CHILD"

// blockedChain is the relayer of a process killed mid-claim: once its
// claim is sent it says so on stdout and waits for its end.
type blockedChain struct{ *evm.Relayer }

func (c blockedChain) Await(ctx context.Context, network string, hash common.Hash) (*types.Receipt, error) {
	fmt.Println("claim sent", hash.Hex())
	<-ctx.Done()
	return nil, ctx.Err()
}

// claimChild is the killed worker process: a claim round on the database
// and the node the parent names, whose claim is sent and never recorded.
func claimChild(t *testing.T) {
	ctx := context.Background()
	poolCfg, err := pgxpool.ParseConfig(os.Getenv("X402D_CLAIM_DB"))
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	require.NoError(t, err)
	client, err := ethclient.Dial(os.Getenv("X402D_CLAIM_NODE"))
	require.NoError(t, err)
	relayer, err := evm.NewRelayer(&evm.RelayerConfig{Key: devKey(t, devchain.RelayerAccount), Chains: map[string]evm.Backend{claimNetwork: client},
		Nonces: store.RelayerNonces{DB: pool}})
	require.NoError(t, err)
	require.NoError(t, relayer.Start(ctx))
	c, err := worker.NewClaimer(&worker.ClaimConfig{Pool: pool, Chain: blockedChain{relayer}, Readers: map[string]worker.ClaimReader{claimNetwork: client},
		AuthorizerKey: devKey(t, 7), MinAmount: big.NewInt(1)})
	require.NoError(t, err)
	_ = c.Round(ctx, claimNetwork)
	t.Fatal("the round ended: it should have been killed")
}

// TestClaim_KilledMidClaim kills (SIGKILL) a worker process whose claim
// round sent its claim, unmined yet (2-second blocks), and runs the next
// round in another process at once: it finds the claim in the node's
// pending state and sends none again; the channels' claims sum to their
// charges on chain (the Claimed events: nothing claimed twice), every
// charge is claimed and settled once to payTo (nothing lost), and the rows
// agree once the next rounds find the claim mined.
func TestClaim_KilledMidClaim(t *testing.T) {
	if os.Getenv(claimKillChild) != "" {
		claimChild(t)
		return
	}
	t.Parallel()
	ctx := context.Background()
	b := newClaimBenchOn(t, evm.FinalityPolicy{}, &anviltest.Config{BlockTime: 2 * time.Second})
	one, two := b.openCharged(0, 1_000_000, 10_000), b.openCharged(1, 1_000_000, 30_000)
	from, err := b.node.Client.BlockNumber(ctx)
	require.NoError(t, err)
	before := b.nonce()

	cmd := exec.Command(os.Args[0], "-test.run=^TestClaim_KilledMidClaim$", "-test.count=1")
	cmd.Env = append(os.Environ(), claimKillChild+"=1", "X402D_CLAIM_DB="+b.db.URL, "X402D_CLAIM_NODE="+b.node.URL)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	sent := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			if hash, ok := strings.CutPrefix(lines.Text(), "claim sent "); ok {
				sent <- hash
			}
		}
		close(sent)
	}()
	var hash string
	select {
	case hash = <-sent:
	case <-time.After(60 * time.Second):
		t.Fatal("the child sent no claim")
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	_, err = b.node.Client.TransactionReceipt(ctx, common.HexToHash(hash))
	require.ErrorIs(t, err, ethereum.NotFound, "killed before its claim was mined")

	// The next rounds, as the periodic job runs them.
	next := b.claimer(time.Hour, 1)
	sum := new(big.Int).Add(one.state.Charged, two.state.Charged)
	// Until every charge is settled and each row records its claim (the
	// killed process's claim may be recorded by a later round than the
	// one that settles).
	require.Eventually(t, func() bool {
		require.NoError(t, next.Round(ctx, claimNetwork))
		return b.usdc(b.payTo).Cmp(sum) >= 0 && b.row(one).State.OnChain.TotalClaimed.Cmp(one.state.Charged) == 0 &&
			b.row(two).State.OnChain.TotalClaimed.Cmp(two.state.Charged) == 0
	}, 30*time.Second, 200*time.Millisecond)
	require.Equal(t, sum, b.usdc(b.payTo), "every charge settled once")
	require.Eventually(t, func() bool { return b.nonce() == before+2 }, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, before+2, b.nonce(), "the killed process's claim, and a settle: no claim sent again")

	logs, err := b.node.Client.FilterLogs(ctx, ethereum.FilterQuery{FromBlock: new(big.Int).SetUint64(from), Addresses: []common.Address{channel.SettlementAddress},
		Topics: [][]common.Hash{{crypto.Keccak256Hash([]byte("Claimed(bytes32,address,uint128,uint128)"))}}})
	require.NoError(t, err)
	claimed := map[common.Hash]*big.Int{}
	for _, l := range logs {
		if claimed[l.Topics[1]] == nil {
			claimed[l.Topics[1]] = new(big.Int)
		}
		claimed[l.Topics[1]].Add(claimed[l.Topics[1]], new(big.Int).SetBytes(l.Data[:32]))
	}
	for _, ch := range []*benchChannel{one, two} {
		require.Equal(t, ch.state.Charged, claimed[ch.state.ChannelID], "claimed once in all")
		require.Equal(t, ch.state.Charged, b.onChain(ch).TotalClaimed)
		require.Equal(t, ch.state.Charged, b.row(ch).State.OnChain.TotalClaimed)
		require.Nil(t, b.row(ch).UnclaimedSince)
	}
	totals, err := store.ChannelTotalsList(ctx, b.db.Pool)
	require.NoError(t, err)
	require.Equal(t, sum, totals[0].Claimed)
	require.Equal(t, sum, totals[0].Settled)
}

// countingChain is the relayer, counting the claims' simulations.
type countingChain struct {
	*evm.Relayer
	calls int
}

func (c *countingChain) Call(ctx context.Context, network string, to common.Address, input []byte) ([]byte, error) {
	c.calls++
	return c.Relayer.Call(ctx, network, to, input)
}

// TestClaim_HalvingFindsFewCalls: one bad voucher among 32 channels is
// found by halving the batch's simulation in a few runs (one of the 32, a
// pair per level of 5 levels, and the good ones together: 12 at most), not
// one run per channel; the 31 others are claimed in one transaction.
func TestClaim_HalvingFindsFewCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newClaimBench(t, evm.FinalityPolicy{})
	const n = 32
	for i := range n {
		ch := b.open(i%4, 100_000)
		var signer *ecdsa.PrivateKey
		if i == 19 {
			signer = devKey(t, 5)
		}
		b.charge(ch, 1_000, signer)
	}
	chain := &countingChain{Relayer: b.relayer}
	c := b.claimerWith(func(c *worker.ClaimConfig) { c.Chain = chain })
	require.NoError(t, c.Round(ctx, claimNetwork))
	txs, channels, _ := b.claimTxs(store.ClaimKindClaim)
	require.Equal(t, 1, txs)
	require.Equal(t, n-1, channels)
	t.Logf("%d simulations for %d channels, one bad", chain.calls, n)
	require.LessOrEqual(t, chain.calls, 12)
}

// burnerChannel opens a channel of a new DevBurnerWallet (no payer
// authorizer; isValidSignature burns rounds of hashing and accepts any
// signature, or, while gasless, only a call at a gas price of zero),
// funded by development account 1, and charges it 20,000; gasless sets
// the wallet gasless.
func (b *claimBench) burnerChannel(rounds int64) (ch *benchChannel, gasless func()) {
	b.t.Helper()
	burner, err := contracts.Load(contracts.DevBurnerWallet)
	require.NoError(b.t, err)
	code, err := burner.Deployment(big.NewInt(rounds), false)
	require.NoError(b.t, err)
	wallet := b.node.Deploy(devKey(b.t, 1), code)
	token, err := contracts.Load(contracts.FiatTokenV2_2)
	require.NoError(b.t, err)
	fund, err := token.ABI.Pack("transfer", wallet, big.NewInt(100_000))
	require.NoError(b.t, err)
	b.node.Transact(devKey(b.t, 1), devchain.USDC, fund)
	ch = b.openOf(wallet, common.Address{}, 1, 100_000)
	b.charge(ch, 20_000, nil)
	set, err := burner.ABI.Pack("setGasless", true)
	require.NoError(b.t, err)
	return ch, func() { b.node.Transact(devKey(b.t, 1), wallet, set) }
}

// claimRefusedReason returns the reason ch's claim was refused at its
// present charge, "" if it was not.
func (b *claimBench) claimRefusedReason(ch *benchChannel) string {
	b.t.Helper()
	var reason *string
	require.NoError(b.t, b.db.Pool.QueryRow(context.Background(), "SELECT claim_refused_reason FROM channels WHERE channel_id = $1 AND claim_refused_charged = charged",
		ch.state.ChannelID.Bytes()).Scan(&reason))
	if reason == nil {
		return ""
	}
	return *reason
}

// refusedWallets returns the addresses whose code is refused on the
// bench's network now (table payer_code_refusals).
func (b *claimBench) refusedWallets() []common.Address {
	b.t.Helper()
	refused, err := store.PayerCodeRefusals{DB: b.db.Pool}.PayerCodeRefused(context.Background(), claimNetwork, time.Now())
	require.NoError(b.t, err)
	out := make([]common.Address, 0, len(refused))
	for a := range refused {
		out = append(out, a)
	}
	return out
}

// flippingChain is the relayer, and a payer that sets its wallet gasless
// once the batch's run passed: before the lone claim (the one sent with
// its own gas limit) is sent, or, atEstimate, before its gas is
// estimated.
type flippingChain struct {
	*evm.Relayer
	flip       func()
	flipped    bool
	atEstimate bool
}

func (c *flippingChain) turn() {
	if !c.flipped {
		c.flipped = true
		c.flip()
	}
}

func (c *flippingChain) Send(ctx context.Context, network string, to common.Address, input []byte, gas uint64) (common.Hash, error) {
	if gas != 0 {
		c.turn()
	}
	return c.Relayer.Send(ctx, network, to, input, gas)
}

func (c *flippingChain) Estimate(ctx context.Context, network string, to common.Address, input []byte) (uint64, error) {
	if c.atEstimate {
		c.turn()
	}
	return c.Relayer.Estimate(ctx, network, to, input)
}

// TestClaim_PayerCode: channels whose payer is a contract wallet with no
// payer authorizer, whose voucher check runs the wallet's code, beside a
// channel of a plain payer. Each wallet (DevBurnerWallet) accepts
// signatures at a gas price of zero only once set gasless: an eth_call
// passes, a mined claim reverts. RunAtFees: set gasless before the round,
// it is found by the claim's run, made at the fees the claim is sent
// with, and left out with the contract's reason; nothing reverts.
// TurnsAtSend: set gasless between its lone claim's estimate and its
// send, its claim reverts on chain and only its own: it is left out
// ("reverted on chain"). TurnsAtEstimate: set gasless between the
// batch's run and the lone claim's estimate, its claim is left out unsent
// ("its run alone reverts"). OverGasCap: a wallet whose check burns more gas
// than PAYER_CODE_GAS_CAP is left out, its claim not sent. Either way the
// other channel is claimed and settled, the wallet's code is refused
// (PAYER_CODE_REFUSE_FOR: its vouchers are refused at verification), and
// the next round sends nothing (the wallet's channel is not tried again at
// the same charge).
func TestClaim_PayerCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		rounds     int64
		gasCap     uint64
		gasless    bool
		turnsAfter bool
		reason     string
		sent       uint64
	}{
		{"RunAtFees", 10, 0, true, false, "InvalidSignature", 2},
		{"TurnsAtSend", 10, 0, true, true, "reverted on chain", 3},
		{"TurnsAtEstimate", 10, 0, true, true, "its run alone reverts", 2},
		{"OverGasCap", 3000, 150_000, false, false, "needs more than PAYER_CODE_GAS_CAP (150000 gas)", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := newClaimBench(t, evm.FinalityPolicy{})
			honest := b.openCharged(0, 1_000_000, 10_000)
			hostile, gasless := b.burnerChannel(tc.rounds)
			chain := worker.ClaimChain(b.relayer)
			switch {
			case tc.turnsAfter:
				chain = &flippingChain{Relayer: b.relayer, flip: gasless, atEstimate: tc.name == "TurnsAtEstimate"}
			case tc.gasless:
				gasless()
			}
			c := b.claimerWith(func(c *worker.ClaimConfig) { c.Chain, c.PayerCodeGasCap = chain, tc.gasCap })
			before := b.nonce()
			require.NoError(t, c.Round(ctx, claimNetwork))
			require.Equal(t, before+tc.sent, b.nonce(), "the claims and a settle")
			require.Equal(t, honest.state.Charged, b.onChain(honest).TotalClaimed)
			require.Zero(t, b.onChain(hostile).TotalClaimed.Sign())
			require.Equal(t, tc.reason, b.claimRefusedReason(hostile))
			n, channels, _ := b.claimTxs(store.ClaimKindClaim)
			require.Equal(t, 1, n, "one claim mined")
			require.Equal(t, 1, channels)
			require.Equal(t, honest.state.Charged, b.usdc(b.payTo))
			require.Equal(t, []common.Address{hostile.state.Config.Payer}, b.refusedWallets(),
				"the wallet is refused, its further vouchers with it; the honest payer is not")

			before = b.nonce()
			require.NoError(t, c.Round(ctx, claimNetwork))
			require.Equal(t, before, b.nonce(), "the wallet's channel is not tried again at the same charge")
		})
	}
}
