package worker

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/channel"
)

// Defaults of ClaimConfig.
const (
	// DefaultClaimInterval is ClaimConfig.Interval's default
	// (CHANNEL_CLAIM_INTERVAL).
	DefaultClaimInterval = time.Hour
	// DefaultClaimCheckEvery is ClaimConfig.CheckEvery's default.
	DefaultClaimCheckEvery = 30 * time.Second
	// DefaultClaimMaxGas is ClaimConfig.MaxGas's default: a tenth of a
	// 30M-gas block (the relayer's batches' share, evm.DefaultBlockGasShare).
	DefaultClaimMaxGas = 3_000_000
	// ClaimGasPerChannel bounds the gas of a claimWithSignature per
	// channel it carries (measured 25,000 a channel for 40 channels with
	// Circle's USDC, 34,000 for 5: an ECDSA recovery and two storage
	// writes each, the transaction's own cost shared), for the count of
	// channels a transaction carries (MaxGas / ClaimGasPerChannel).
	ClaimGasPerChannel = 40_000
)

// DefaultClaimMinAmount returns ClaimConfig.MinAmount's default
// (CHANNEL_CLAIM_MIN_AMOUNT): 10,000,000 atomic units, 10 USDC.
func DefaultClaimMinAmount() *big.Int { return big.NewInt(10_000_000) }

// ClaimChain is what claims need of the chain: the relayer
// (evm.Relayer), which signs and sends from its key on its one nonce
// sequence and follows transactions to finality.
type ClaimChain interface {
	x402.Finality
	Send(ctx context.Context, network string, to common.Address, input []byte, gas uint64) (common.Hash, error)
	// SendTx is Send returning the transaction (its account nonce).
	SendTx(ctx context.Context, network string, to common.Address, input []byte, gas uint64) (*types.Transaction, error)
	Await(ctx context.Context, network string, hash common.Hash) (*types.Receipt, error)
	ChainID(network string) (*big.Int, error)
	Call(ctx context.Context, network string, to common.Address, input []byte) ([]byte, error)
	// Estimate is the gas Call's transaction would use.
	Estimate(ctx context.Context, network string, to common.Address, input []byte) (uint64, error)
	// RefusePayerCode refuses the code of wallets on network
	// (PAYER_CODE_REFUSE_FOR) and returns when the refusal ends: their
	// vouchers and deposits are refused at verification.
	RefusePayerCode(ctx context.Context, network string, addrs ...common.Address) (time.Time, error)
}

// ClaimReader reads a network's chain: channels' state, the settlement
// contract's logs, the head.
type ClaimReader interface {
	channel.Caller
	ethereum.LogFilterer
	ethereum.BlockNumberReader
	// NonceAt returns account's nonce at blockNumber (the head when nil).
	NonceAt(ctx context.Context, account common.Address, blockNumber *big.Int) (uint64, error)
}

// ClaimConfig configures a Claimer.
type ClaimConfig struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Chain sends and follows the claims. Required.
	Chain ClaimChain
	// Readers maps each network whose channels are claimed to a reader
	// of its chain. Required.
	Readers map[string]ClaimReader
	// AuthorizerKey is the receiver authorizer's key
	// (RECEIVER_AUTHORIZER_KEY): it signs the claims. Required.
	AuthorizerKey *ecdsa.PrivateKey
	// Interval is how long the oldest unclaimed charge of a network may
	// wait before its channels are claimed (CHANNEL_CLAIM_INTERVAL).
	// Defaults to DefaultClaimInterval.
	Interval time.Duration
	// MinAmount is the unclaimed total of a network (atomic units) at
	// which its channels are claimed whatever their age
	// (CHANNEL_CLAIM_MIN_AMOUNT). Defaults to DefaultClaimMinAmount.
	MinAmount *big.Int
	// CheckEvery is how often each network is looked at (the periodic
	// job): the watcher reads the new withdrawal and refund logs then.
	// Defaults to DefaultClaimCheckEvery.
	CheckEvery time.Duration
	// MaxGas bounds the gas of one claim transaction, and so the channels
	// it carries. Defaults to DefaultClaimMaxGas.
	MaxGas uint64
	// PayerCodeGasCap is the most gas the claim of a channel whose
	// vouchers are checked by its payer's code (EIP-1271), which goes
	// alone, may use: one that would need more is not sent
	// (channel.claim_refused), and one sent cannot burn more (its gas
	// limit). PAYER_CODE_GAS_CAP, as for exact settlements. Defaults to
	// evm.DefaultPayerCodeGasCap.
	PayerCodeGasCap uint64
	// MaxTxs bounds the claim transactions of one round. Defaults to 16.
	MaxTxs int
	// LogRange is the largest block range of one eth_getLogs. Defaults
	// to 2,000.
	LogRange uint64
	// LogRanges bounds the eth_getLogs requests of one round; the watcher
	// goes on from its cursor next round. Defaults to 50.
	LogRanges int
	// GoneAfter is how long a claim, settle or refund may stay in no block after
	// a reorganisation (the relayer's keeper gives the node the same
	// transaction again meanwhile) before what it did is made again.
	// Defaults to 20 s.
	GoneAfter time.Duration
	// RefundAwait bounds a refund job's wait for its transaction's
	// receipt in one run (refund.go); the job snoozes after it. Defaults to
	// DefaultRefundAwait.
	RefundAwait time.Duration
	// RefundResendAfter is how long a refund's transaction may stay
	// unmined before the refund is sent again in a new one (its nodes and
	// the relayer lost it; whichever is mined first refunds, the others
	// revert). Defaults to DefaultRefundResendAfter.
	RefundResendAfter time.Duration
	// RefundGiveUpAfter is how long after its request a refund whose
	// transactions were not mined is recorded failed, its channel freed,
	// once none of them can be mined any more (their relayer nonces used).
	// Defaults to DefaultRefundGiveUpAfter.
	RefundGiveUpAfter time.Duration
	// RefundCheckEvery is how long a refund job snoozes between two
	// waits for its transaction. Defaults to 1 s.
	RefundCheckEvery time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics counts claims and settles. Optional.
	Metrics *metrics.Metrics
	// Clock tells the claim policy's time and GoneAfter. Defaults to
	// clock.Real().
	Clock clock.Clock
}

// Claimer claims the vouchers of the seller's batch-settlement channels
// and settles what was claimed to the receiver. Each round on a network
// (Round; the periodic ClaimArgs job) does, under the network's claim
// lock:
//
//  1. follow: the claim, settle and refund transactions not final yet
//     are followed (ClaimChain.Follow); one a reorganisation undid and
//     the node did not mine again within GoneAfter is made again: its
//     channels are read from the chain again (channel.claimed with
//     Undone) and claimed again in this round, its receiver settled
//     again, its refund sent again (channel.refund_undone).
//  2. watch: the settlement contract's WithdrawInitiated and
//     WithdrawFinalized logs from the stored cursor on, in bounded
//     ranges; a channel held whose payer started a timed withdrawal gets
//     channel.withdraw_initiated and is claimed in this round, whatever
//     the policy; one whose payer finished it gets
//     channel.withdraw_finalized (no withdrawal pending, the chain's
//     balance). Its Refunded logs that no refund of the log records (a
//     refund recorded failed whose signature was mined later, by anyone)
//     get channel.refund_seen: the row takes the chain's balance and
//     refund nonce, its holder kept.
//  3. claim: when the policy says so (Due: the oldest unclaimed charge is
//     Interval old, or the unclaimed total reaches MinAmount) every
//     channel with charges unclaimed, else only the urgent ones, in
//     claimWithSignature transactions of at most MaxGas: each channel's
//     state is read first (a claim already made, by a transaction whose
//     record a crash lost, is recorded as it is, nothing sent; one in the
//     node's pending state is left to the next round), the batch
//     is run (eth_call, at the fees it is sent with: ClaimChain.Call)
//     and the rows that make it fail are found by halving, left out and
//     recorded (channel.claim_refused); a channel whose voucher check
//     runs its payer's code (EIP-1271) is claimed in a transaction of its
//     own, left out the same way if it reverts on chain; the receipt is
//     recorded with channel.claimed for each channel carried.
//  4. settle: each receiver and token whose claimed total on chain
//     exceeds its settled total is settled (settle), recorded with
//     channel.settled.
//
// No database transaction is open while the chain is asked or sent to.
type Claimer struct {
	cfg  ClaimConfig
	from common.Address
}

// NewClaimer returns a Claimer.
func NewClaimer(config *ClaimConfig) (*Claimer, error) {
	cfg := *config
	if cfg.Pool == nil || cfg.Chain == nil || cfg.AuthorizerKey == nil || len(cfg.Readers) == 0 {
		return nil, errors.New("worker: a claimer needs Pool, Chain, Readers and AuthorizerKey")
	}
	cfg.Interval = cmp.Or(cfg.Interval, DefaultClaimInterval)
	if cfg.MinAmount == nil || cfg.MinAmount.Sign() <= 0 {
		cfg.MinAmount = DefaultClaimMinAmount()
	}
	cfg.CheckEvery = cmp.Or(cfg.CheckEvery, DefaultClaimCheckEvery)
	cfg.MaxGas = cmp.Or(cfg.MaxGas, DefaultClaimMaxGas)
	cfg.PayerCodeGasCap = cmp.Or(cfg.PayerCodeGasCap, evm.DefaultPayerCodeGasCap)
	cfg.MaxTxs = cmp.Or(cfg.MaxTxs, 16)
	cfg.LogRange = cmp.Or(cfg.LogRange, 2_000)
	cfg.LogRanges = cmp.Or(cfg.LogRanges, 50)
	cfg.GoneAfter = cmp.Or(cfg.GoneAfter, 20*time.Second)
	cfg.RefundAwait = cmp.Or(cfg.RefundAwait, DefaultRefundAwait)
	cfg.RefundResendAfter = cmp.Or(cfg.RefundResendAfter, DefaultRefundResendAfter)
	cfg.RefundGiveUpAfter = cmp.Or(cfg.RefundGiveUpAfter, DefaultRefundGiveUpAfter)
	cfg.RefundCheckEvery = cmp.Or(cfg.RefundCheckEvery, time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	return &Claimer{cfg: cfg, from: crypto.PubkeyToAddress(cfg.AuthorizerKey.PublicKey)}, nil
}

// ClaimPolicy is when a network's channels are claimed.
type ClaimPolicy struct {
	// Interval is the longest an unclaimed charge waits.
	Interval time.Duration
	// MinAmount is the unclaimed total that is claimed at once.
	MinAmount *big.Int
}

// Due reports whether channels whose oldest unclaimed charge dates from
// oldest (zero: none) and whose unclaimed total is amount are claimed at
// now.
func (p ClaimPolicy) Due(oldest time.Time, amount *big.Int, now time.Time) bool {
	if oldest.IsZero() || amount == nil || amount.Sign() <= 0 {
		return false
	}
	return now.Sub(oldest) >= p.Interval || amount.Cmp(p.MinAmount) >= 0
}

// maxChannels is the most channels one claim transaction carries.
func (c *Claimer) maxChannels() int {
	return max(1, int(c.cfg.MaxGas/ClaimGasPerChannel))
}

// ClaimArgs are the args of the periodic job that runs a claim round on
// a network.
type ClaimArgs struct {
	Network string `json:"network"`
}

// Kind is the River job kind.
func (ClaimArgs) Kind() string { return "channel.claim" }

// InsertOpts puts the rounds on the settlement queue, one waiting per
// network.
func (ClaimArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueSettlement, MaxAttempts: 3,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
			rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning, rivertype.JobStateRetryable, rivertype.JobStateScheduled,
		}}}
}

type claimWorker struct {
	river.WorkerDefaults[ClaimArgs]
	c *Claimer
}

// Work runs a round on the job's network.
func (w *claimWorker) Work(ctx context.Context, job *river.Job[ClaimArgs]) error {
	return w.c.Round(ctx, job.Args.Network)
}

// Register registers the workers of the claim job and of the refund job
// (chanpay.RefundArgs, refund.go).
func (c *Claimer) Register(workers *river.Workers) error {
	if err := river.AddWorkerSafely(workers, &claimWorker{c: c}); err != nil {
		return fmt.Errorf("worker: register channel.claim: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &refundWorker{c: c}); err != nil {
		return fmt.Errorf("worker: register channel.refund: %w", err)
	}
	return nil
}

// PeriodicJobs returns the claim rounds' periodic jobs, one per network
// every CheckEvery.
func (c *Claimer) PeriodicJobs() []*river.PeriodicJob {
	var out []*river.PeriodicJob
	for network := range c.cfg.Readers {
		out = append(out, river.NewPeriodicJob(river.PeriodicInterval(c.cfg.CheckEvery),
			func() (river.JobArgs, *river.InsertOpts) { return ClaimArgs{Network: network}, nil },
			&river.PeriodicJobOpts{RunOnStart: true}))
	}
	return out
}

// Round runs one claim round on network (see Claimer); another process's
// round running there makes it return at once.
func (c *Claimer) Round(ctx context.Context, network string) error {
	reader := c.cfg.Readers[network]
	if reader == nil {
		return fmt.Errorf("claim %s: no chain reader", network)
	}
	conn, err := c.cfg.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("claim %s: %w", network, err)
	}
	defer conn.Release()
	mine, err := store.ChannelClaimLock(ctx, conn, network)
	if err != nil || !mine {
		return err
	}
	defer func() {
		if err := store.ChannelClaimUnlock(context.WithoutCancel(ctx), conn, network); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	networks, err := store.ChannelNetworkList(ctx, c.cfg.Pool)
	if err != nil {
		return fmt.Errorf("claim %s: %w", network, err)
	}
	if !slices.Contains(networks, network) {
		// No channel there: nothing to follow, watch or claim.
		return nil
	}
	r := &claimRound{c: c, network: network, reader: reader, urgent: map[common.Hash]bool{},
		log: c.cfg.Logger.With("network", network, "job", "channel.claim")}
	if r.chainID, err = c.cfg.Chain.ChainID(network); err != nil {
		return fmt.Errorf("claim %s: %w", network, err)
	}
	if err := r.follow(ctx); err != nil {
		return fmt.Errorf("claim %s: follow: %w", network, err)
	}
	if err := r.watch(ctx); err != nil {
		// The claims go on: a channel whose withdrawal or refund is
		// missed this round is found next round, long before a
		// withdrawal's delay ends.
		r.log.WarnContext(ctx, "withdrawal and refund watcher failed; it goes on from its cursor next round", "error", err)
	}
	if err := r.claim(ctx); err != nil {
		return fmt.Errorf("claim %s: %w", network, err)
	}
	if err := r.settle(ctx); err != nil {
		return fmt.Errorf("claim %s: settle: %w", network, err)
	}
	return nil
}

// claimRound is one round on one network.
type claimRound struct {
	c       *Claimer
	network string
	chainID *big.Int
	reader  ClaimReader
	log     *slog.Logger
	// urgent are the channels claimed this round whatever the policy: a
	// withdrawal started, or their claim was undone.
	urgent map[common.Hash]bool
}

// record runs fn in a transaction of its own (Claimer.record).
func (r *claimRound) record(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return r.c.record(ctx, fn)
}

// follow follows the claims and settles not final yet.
func (r *claimRound) follow(ctx context.Context) error {
	pending, err := store.ChannelClaimPendingList(ctx, r.c.cfg.Pool, r.network, 1000)
	if err != nil || len(pending) == 0 {
		return err
	}
	txs := make([]x402.FollowedTx, len(pending))
	for i, p := range pending {
		txs[i] = p.FollowedTx
	}
	if _, err := r.c.cfg.Chain.Follow(ctx, r.network, txs); err != nil {
		return err
	}
	var final []string
	now := r.c.cfg.Clock.Now()
	for i, p := range pending {
		switch txs[i].State {
		case x402.TxFinal:
			final = append(final, p.Transaction)
		case x402.TxMoved:
			if err := store.ChannelClaimMove(ctx, r.c.cfg.Pool, r.network, p.Transaction, txs[i].Block); err != nil {
				return err
			}
		case x402.TxGone:
			if p.GoneSince.IsZero() {
				r.log.WarnContext(ctx, "channel transaction undone by a reorganisation: the keeper gives it to the node again",
					"kind", p.Kind, "transaction", p.Transaction, "block", p.Block.Number)
				if err := store.ChannelClaimGone(ctx, r.c.cfg.Pool, r.network, p.Transaction, now, false); err != nil {
					return err
				}
				continue
			}
			if now.Sub(p.GoneSince) < r.c.cfg.GoneAfter {
				continue
			}
			if err := r.undone(ctx, &p); err != nil {
				return err
			}
		}
	}
	if len(final) > 0 {
		return store.ChannelClaimFinal(ctx, r.c.cfg.Pool, r.network, final)
	}
	return nil
}

// undone makes again what p, undone by a reorganisation, did: a claim's
// channels take the chain's claimed totals again and are claimed in this
// round; a settle is made again by this round's settle step (which reads
// the chain's totals); a refund is sent again (refundUndone).
func (r *claimRound) undone(ctx context.Context, p *store.ChannelClaimTx) error {
	if p.Kind == store.ClaimKindRefund {
		return r.refundUndone(ctx, p)
	}
	var events []store.NewEvent
	if p.Kind == store.ClaimKindClaim {
		for _, id := range p.Channels {
			st, err := channel.ReadState(ctx, r.reader, id, nil)
			if err != nil {
				return err
			}
			events = append(events, store.NewEvent{Stream: store.ChannelStream(r.network, id), Type: store.EventChannelClaimed,
				Data: store.ChannelClaimed{TotalClaimed: st.TotalClaimed.String(), Undone: p.Transaction}})
			r.urgent[id] = true
		}
	}
	r.log.WarnContext(ctx, "channel transaction undone by a reorganisation and not mined again: made again", "kind", p.Kind,
		"transaction", p.Transaction, "channels", len(p.Channels))
	r.c.cfg.Metrics.ChannelReorganised(r.network, p.Kind)
	return r.record(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := store.ChannelClaimGone(ctx, tx, r.network, p.Transaction, r.c.cfg.Clock.Now(), true); err != nil {
			return err
		}
		return store.Append(ctx, tx, events...)
	})
}

// watch reads the WithdrawInitiated, WithdrawFinalized and Refunded logs
// from the cursor to the head, in ranges of LogRange, and records them on
// the channels held (withdrawals, refundsSeen).
func (r *claimRound) watch(ctx context.Context) error {
	head, err := r.reader.BlockNumber(ctx)
	if err != nil {
		return fmt.Errorf("read head: %w", err)
	}
	from, known, err := store.ChannelClaimCursor(ctx, r.c.cfg.Pool, r.network)
	if err != nil {
		return err
	}
	if !known {
		// The first round reads back one range: channels are held only
		// from their first deposit, which this process saw; a withdrawal
		// older than that is found by the claim's read of the channel.
		from = head - min(head, r.c.cfg.LogRange-1)
	}
	for n := 0; from <= head && n < r.c.cfg.LogRanges; n++ {
		to := min(head, from+r.c.cfg.LogRange-1)
		logs, err := r.reader.FilterLogs(ctx, ethereum.FilterQuery{
			FromBlock: new(big.Int).SetUint64(from), ToBlock: new(big.Int).SetUint64(to),
			Addresses: []common.Address{channel.SettlementAddress},
			Topics:    [][]common.Hash{{channel.WithdrawInitiatedTopic, channel.WithdrawFinalizedTopic, channel.RefundedTopic}},
		})
		if err != nil {
			return fmt.Errorf("read withdrawal and refund logs %d-%d: %w", from, to, err)
		}
		if err := r.withdrawals(ctx, logs); err != nil {
			return err
		}
		if err := store.ChannelClaimCursorSet(ctx, r.c.cfg.Pool, r.network, to+1); err != nil {
			return err
		}
		from = to + 1
	}
	return nil
}

// withdrawals records the WithdrawInitiated and WithdrawFinalized logs of
// the channels held, in the chain's order: a channel whose withdrawal is
// pending at the last of its logs is urgent; one whose withdrawal ended
// gets the chain's balance. Their Refunded logs that no refund records
// are recorded too (refundsSeen).
func (r *claimRound) withdrawals(ctx context.Context, logs []types.Log) error {
	var ids []common.Hash
	seen := map[common.Hash]bool{}
	for i := range logs {
		if len(logs[i].Topics) < 2 || logs[i].Removed || seen[logs[i].Topics[1]] {
			continue
		}
		seen[logs[i].Topics[1]] = true
		ids = append(ids, logs[i].Topics[1])
	}
	if len(ids) == 0 {
		return nil
	}
	held, err := store.ChannelHeld(ctx, r.c.cfg.Pool, r.network, ids)
	if err != nil {
		return err
	}
	var events []store.NewEvent
	balances := map[common.Hash]*big.Int{}
	for i := range logs {
		l := &logs[i]
		if l.Removed {
			continue
		}
		if w, ok, err := channel.ParseWithdrawInitiated(l); err == nil && ok && held[w.ChannelID] {
			ch, err := store.ChannelGet(ctx, r.c.cfg.Pool, r.network, w.ChannelID)
			if err != nil {
				return err
			}
			started := w.FinalizeAfter - min(w.FinalizeAfter, ch.State.Config.WithdrawDelay)
			r.urgent[w.ChannelID] = true
			r.log.WarnContext(ctx, "payer started a timed withdrawal: the channel is claimed now", "channel", w.ChannelID.Hex(),
				"finalize_after", time.Unix(int64(w.FinalizeAfter), 0).UTC(), "amount", w.Amount.String())
			events = append(events, store.NewEvent{Stream: store.ChannelStream(r.network, w.ChannelID), Type: store.EventChannelWithdrawInitiated,
				Data: store.ChannelWithdrawInitiated{Block: l.BlockNumber, Transaction: l.TxHash.Hex(), At: started,
					FinalizeAfter: w.FinalizeAfter, Amount: w.Amount.String()}})
		}
		if w, ok, err := channel.ParseWithdrawFinalized(l); err == nil && ok && held[w.ChannelID] {
			// The balance now, not at the log's block: a deposit mined
			// since was recorded with the balance after it.
			if balances[w.ChannelID] == nil {
				st, err := channel.ReadState(ctx, r.reader, w.ChannelID, nil)
				if err != nil {
					return fmt.Errorf("read channel %s after its withdrawal: %w", w.ChannelID.Hex(), err)
				}
				balances[w.ChannelID] = st.Balance
			}
			delete(r.urgent, w.ChannelID)
			events = append(events, store.NewEvent{Stream: store.ChannelStream(r.network, w.ChannelID), Type: store.EventChannelWithdrawFinalized,
				Data: store.ChannelWithdrawFinalized{Block: l.BlockNumber, Transaction: l.TxHash.Hex(), Amount: w.Amount.String(),
					Balance: balances[w.ChannelID].String()}})
		}
	}
	refunds, err := r.refundsSeen(ctx, logs, held)
	if err != nil {
		return err
	}
	events = append(events, refunds...)
	if len(events) == 0 {
		return nil
	}
	return r.record(ctx, func(ctx context.Context, tx pgx.Tx) error { return store.Append(ctx, tx, events...) })
}

// refundsSeen returns the channel.refund_seen events of the Refunded logs
// of the channels held that the seller's log does not record: a refund's
// signature stays valid until the channel's refund nonce moves, so a
// refund recorded failed (its channel freed) can be mined later, by
// anyone who saw it, and the row would keep a balance the chain no longer
// has. A log is recorded when its transaction is no recorded refund's
// (channel.refunded, channel.refund_seen), the row's refund nonce is
// behind the chain's, and no refund of the channel awaits its outcome
// (its job records the refund the chain shows made, whichever
// transaction made it); the event carries the chain's balance and refund
// nonce now, which the row takes.
func (r *claimRound) refundsSeen(ctx context.Context, logs []types.Log, held map[common.Hash]bool) ([]store.NewEvent, error) {
	var events []store.NewEvent
	channels := map[common.Hash]*refundKnown{}
	for i := range logs {
		l := &logs[i]
		if l.Removed {
			continue
		}
		rf, ok, err := channel.ParseRefunded(l)
		if err != nil || !ok || !held[rf.ChannelID] {
			continue
		}
		k := channels[rf.ChannelID]
		if k == nil {
			if k, err = r.refundKnown(ctx, rf.ChannelID); err != nil {
				return nil, err
			}
			channels[rf.ChannelID] = k
		}
		tx := strings.ToLower(l.TxHash.Hex())
		if k.skip || k.recorded[tx] {
			continue
		}
		k.recorded[tx] = true
		r.log.WarnContext(ctx, "refund mined that no refund records: the channel takes the chain's balance", "channel", rf.ChannelID.Hex(),
			"transaction", l.TxHash.Hex(), "sender", rf.Sender.Hex(), "amount", rf.Amount.String(), "balance", k.chain.Balance.String())
		events = append(events, store.NewEvent{Stream: store.ChannelStream(r.network, rf.ChannelID), Type: store.EventChannelRefundSeen,
			Data: store.ChannelRefundSeen{Block: l.BlockNumber, Transaction: l.TxHash.Hex(), Sender: rf.Sender.Hex(), Amount: rf.Amount.String(),
				Balance: k.chain.Balance.String(), RefundNonce: k.chain.RefundNonce.String()}})
	}
	return events, nil
}

// refundKnown is what refundsSeen knows of channel id: the transactions
// of its refunds recorded, its state on chain now, and whether its logs
// are left alone (the row's refund nonce is the chain's, or a refund of
// it awaits its outcome).
type refundKnown struct {
	recorded map[string]bool
	chain    *channel.OnChain
	skip     bool
}

// refundKnown reads what refundsSeen knows of channel id.
func (r *claimRound) refundKnown(ctx context.Context, id common.Hash) (*refundKnown, error) {
	recorded, err := store.ChannelRefundTransactions(ctx, r.c.cfg.Pool, r.network, id)
	if err != nil {
		return nil, err
	}
	row, err := store.ChannelGet(ctx, r.c.cfg.Pool, r.network, id)
	if err != nil {
		return nil, err
	}
	chain, err := channel.ReadState(ctx, r.reader, id, nil)
	if err != nil {
		return nil, fmt.Errorf("read channel %s after its refund: %w", id.Hex(), err)
	}
	k := &refundKnown{recorded: recorded, chain: chain}
	if row.State.OnChain.RefundNonce != nil && row.State.OnChain.RefundNonce.Cmp(chain.RefundNonce) >= 0 {
		k.skip = true
		return k, nil
	}
	if row.BusyCall != "" {
		rec, err := store.ChannelRefundGet(ctx, r.c.cfg.Pool, r.network, id, row.BusyCall)
		if err != nil {
			return nil, err
		}
		k.skip = rec.Requested != nil && !rec.Done()
	}
	return k, nil
}

// claim claims the channels the policy, or urgency, says.
func (r *claimRound) claim(ctx context.Context) error {
	u, err := store.ChannelUnclaimed(ctx, r.c.cfg.Pool, r.network)
	if err != nil {
		return err
	}
	policy := ClaimPolicy{Interval: r.c.cfg.Interval, MinAmount: r.c.cfg.MinAmount}
	due := policy.Due(u.Oldest, u.Amount, r.c.cfg.Clock.Now())
	if !due && u.Urgent == 0 && len(r.urgent) == 0 {
		return nil
	}
	also := make([]common.Hash, 0, len(r.urgent))
	for id := range r.urgent {
		also = append(also, id)
	}
	// A channel charged again while the round claims it is left to the
	// next round: each is looked at once a round.
	var done []common.Hash
	for range r.c.cfg.MaxTxs {
		rows, err := store.ChannelListToClaim(ctx, r.c.cfg.Pool, r.network, r.c.maxChannels(), !due, also, done)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		for _, row := range rows {
			done = append(done, row.State.ChannelID)
		}
		if err := r.claimBatch(ctx, rows); err != nil {
			return err
		}
	}
	return nil
}

// claimRow is a channel to claim: its row, its claim, and its claimed
// total on chain before.
type claimRow struct {
	row    *store.ChannelToClaim
	claim  channel.Claim
	before *big.Int
}

// claimBatch claims rows in one transaction: those the chain shows
// claimed already are recorded so, those whose claim fails its run are
// left out and recorded, the rest are sent.
func (r *claimRound) claimBatch(ctx context.Context, rows []store.ChannelToClaim) error {
	var events []store.NewEvent
	var todo []claimRow
	for i := range rows {
		row := &rows[i]
		id := row.State.ChannelID
		st, err := channel.ReadState(ctx, r.reader, id, nil)
		if err != nil {
			return err
		}
		if st.TotalClaimed.Cmp(row.State.Charged) >= 0 {
			// Claimed already: by a transaction whose record was lost
			// (a crash between its send and its record), or by one a
			// reorganisation moved. Nothing to send.
			events = append(events, store.NewEvent{Stream: store.ChannelStream(r.network, id), Type: store.EventChannelClaimed,
				Data: store.ChannelClaimed{TotalClaimed: st.TotalClaimed.String()}})
			continue
		}
		if row.State.Config.ReceiverAuthorizer != r.c.from {
			events = append(events, refusedEvent(r.network, row, "the channel's receiverAuthorizer is not RECEIVER_AUTHORIZER_KEY's"))
			continue
		}
		if r.inFlight(ctx, id, row.State.Charged) {
			// A claim of it sent and not mined yet (by a process that
			// died before recording it): the next round finds it mined,
			// or, if it never is, claims the channel then.
			r.log.InfoContext(ctx, "channel claim in flight: left to the next round", "channel", id.Hex())
			continue
		}
		c, ok := row.State.Claim()
		if !ok {
			continue
		}
		todo = append(todo, claimRow{row: row, claim: c, before: st.TotalClaimed})
	}
	good, refused, err := r.simulate(ctx, todo)
	if err != nil {
		return err
	}
	if len(refused) > 0 {
		failed := make([]claimRow, len(refused))
		for i, f := range refused {
			failed[i] = f.row
		}
		_, coded, err := r.byPayerCode(ctx, failed)
		if err != nil {
			return err
		}
		for _, row := range coded {
			if err := r.refuseWallet(ctx, row.row, "its claim's run fails"); err != nil {
				return err
			}
		}
	}
	for _, f := range refused {
		r.log.WarnContext(ctx, "channel claim left out: its run fails", "channel", f.row.row.State.ChannelID.Hex(),
			"charged", f.row.row.State.Charged.String(), "reason", f.reason)
		events = append(events, refusedEvent(r.network, f.row.row, f.reason))
	}
	if len(events) > 0 {
		if err := r.record(ctx, func(ctx context.Context, tx pgx.Tx) error { return store.Append(ctx, tx, events...) }); err != nil {
			return err
		}
	}
	plain, coded, err := r.byPayerCode(ctx, good)
	if err != nil {
		return err
	}
	if len(plain) > 0 {
		if err := r.send(ctx, plain, 0); err != nil {
			return err
		}
	}
	// A claim that runs a payer's code goes alone, its gas capped: code
	// that answered the simulation otherwise than the transaction reverts
	// its own claim only, at most at the cap, and is then left out until
	// its charge moves, as one whose lone run reverts or needs more than
	// the cap is, unsent.
	limit := r.c.cfg.PayerCodeGasCap
	for _, row := range coded {
		gas, reason, err := r.codedGas(ctx, row, limit)
		if err != nil {
			return err
		}
		if reason != "" {
			r.log.WarnContext(ctx, "channel claim left out: its payer's code", "channel", row.row.State.ChannelID.Hex(),
				"charged", row.row.State.Charged.String(), "limit", limit, "reason", reason)
			if err := r.refuseWallet(ctx, row.row, reason); err != nil {
				return err
			}
			refused := refusedEvent(r.network, row.row, reason)
			if err := r.record(ctx, func(ctx context.Context, tx pgx.Tx) error { return store.Append(ctx, tx, refused) }); err != nil {
				return err
			}
			continue
		}
		err = r.send(ctx, []claimRow{row}, gas)
		if !errors.Is(err, errClaimReverted) {
			if err != nil {
				return err
			}
			continue
		}
		r.log.WarnContext(ctx, "channel claim left out: it reverted on chain, its payer's code answering otherwise than its run",
			"channel", row.row.State.ChannelID.Hex(), "charged", row.row.State.Charged.String(), "error", err)
		if err := r.refuseWallet(ctx, row.row, "reverted on chain"); err != nil {
			return err
		}
		refused := refusedEvent(r.network, row.row, "reverted on chain")
		if err := r.record(ctx, func(ctx context.Context, tx pgx.Tx) error { return store.Append(ctx, tx, refused) }); err != nil {
			return err
		}
	}
	return nil
}

// refuseWallet refuses the code of row's payer, a contract wallet whose
// code checked the channel's vouchers and then failed their claim (for
// why): its further vouchers and deposits are refused at verification
// for PAYER_CODE_REFUSE_FOR, as an exact payment's wallet whose code
// failed its settlement is. It comes before the claim's refusal is
// recorded, which ends the channel's tries at its charge.
func (r *claimRound) refuseWallet(ctx context.Context, row *store.ChannelToClaim, why string) error {
	payer := row.State.Config.Payer
	until, err := r.c.cfg.Chain.RefusePayerCode(ctx, r.network, payer)
	if err != nil {
		return fmt.Errorf("refuse the code of %s: %w", payer.Hex(), err)
	}
	r.log.WarnContext(ctx, "payer code refused: it failed its channel's claim", "payer", payer.Hex(),
		"channel", row.State.ChannelID.Hex(), "until", until, "why", why)
	return nil
}

// codedGas returns the gas limit of row's claim alone: its estimate and a
// quarter more, within limit. A claim it will not send has a reason
// instead: one whose estimate is over limit, or whose run alone reverts
// (the payer's code answered the batch's simulation otherwise).
func (r *claimRound) codedGas(ctx context.Context, row claimRow, limit uint64) (gas uint64, reason string, err error) {
	input, err := r.claimInput([]claimRow{row})
	if err != nil {
		return 0, "", err
	}
	estimate, err := r.c.cfg.Chain.Estimate(ctx, r.network, channel.SettlementAddress, input)
	switch {
	case err != nil && evm.IsRevert(err):
		return 0, "its run alone reverts", nil
	case err != nil:
		return 0, "", err
	case estimate > limit:
		return 0, fmt.Sprintf("needs more than PAYER_CODE_GAS_CAP (%d gas)", limit), nil
	}
	return min(estimate+estimate/4, limit), "", nil
}

// errClaimReverted is the error of a claim mined and reverted.
var errClaimReverted = errors.New("the claim reverted on chain")

// byPayerCode splits rows into those whose vouchers are checked by ECDSA
// alone (a payer authorizer, or a payer without code) and those whose
// check runs the payer's code (EIP-1271: no payer authorizer, a payer
// with code).
func (r *claimRound) byPayerCode(ctx context.Context, rows []claimRow) (plain, coded []claimRow, err error) {
	for _, row := range rows {
		c := row.row.State.Config
		if c.PayerAuthorizer != (common.Address{}) {
			plain = append(plain, row)
			continue
		}
		code, err := r.reader.CodeAt(ctx, c.Payer, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("read code of payer %s: %w", c.Payer.Hex(), err)
		}
		if len(code) == 0 {
			plain = append(plain, row)
		} else {
			coded = append(coded, row)
		}
	}
	return plain, coded, nil
}

// inFlight reports whether the node's pending state (the transactions it
// holds, unmined) claims channel id up to charged already. A node that
// does not answer for its pending state says no: the claim is sent, and a
// claim mined twice changes nothing the second time.
func (r *claimRound) inFlight(ctx context.Context, id common.Hash, charged *big.Int) bool {
	st, err := channel.ReadState(ctx, r.reader, id, big.NewInt(int64(rpc.PendingBlockNumber)))
	return err == nil && st.TotalClaimed.Cmp(charged) >= 0
}

func refusedEvent(network string, row *store.ChannelToClaim, reason string) store.NewEvent {
	return store.NewEvent{Stream: store.ChannelStream(network, row.State.ChannelID), Type: store.EventChannelClaimRefused,
		Data: store.ChannelClaimRefused{Charged: row.State.Charged.String(), Reason: reason}}
}

// claimInput returns the signed claimWithSignature input of rows.
func (r *claimRound) claimInput(rows []claimRow) ([]byte, error) {
	claims := make([]channel.Claim, len(rows))
	for i, row := range rows {
		claims[i] = row.claim
	}
	sig, err := channel.Sign(r.c.cfg.AuthorizerKey, channel.ClaimBatchDigestOf(r.chainID, claims))
	if err != nil {
		return nil, err
	}
	return channel.ClaimWithSignatureInput(claims, sig)
}

// refusedRow is a row whose claim's run fails, and why.
type refusedRow struct {
	row    claimRow
	reason string
}

// simulate runs the claim of rows (eth_call) and returns the rows whose
// claims run together and those that fail: a batch that fails is halved
// until the failing rows stand alone, so k failing rows of n cost about
// 2k·log2(n) runs, not n.
func (r *claimRound) simulate(ctx context.Context, rows []claimRow) (good []claimRow, refused []refusedRow, err error) {
	if len(rows) == 0 {
		return nil, nil, nil
	}
	run := func(rows []claimRow) (string, error) {
		input, err := r.claimInput(rows)
		if err != nil {
			return "", err
		}
		_, err = r.c.cfg.Chain.Call(ctx, r.network, channel.SettlementAddress, input)
		if err == nil {
			return "", nil
		}
		if !isRevert(err) {
			return "", err
		}
		return revertMessage(err), nil
	}
	var split func(rows []claimRow) error
	split = func(rows []claimRow) error {
		reason, err := run(rows)
		switch {
		case err != nil:
			return err
		case reason == "":
			good = append(good, rows...)
			return nil
		case len(rows) == 1:
			refused = append(refused, refusedRow{row: rows[0], reason: reason})
			return nil
		}
		half := len(rows) / 2
		if err := split(rows[:half]); err != nil {
			return err
		}
		return split(rows[half:])
	}
	if err := split(rows); err != nil {
		return nil, nil, fmt.Errorf("run claim: %w", err)
	}
	if len(refused) > 0 && len(good) > 0 {
		// The rows that ran in parts run together too, unless a row fails
		// only beside another (a channel twice): then next round.
		if reason, err := run(good); err != nil || reason != "" {
			return nil, refused, errors.Join(err, errors.New("the claim's rows that run apart fail together: "+reason))
		}
	}
	return good, refused, nil
}

// send sends the claim of rows with gas (0: estimated), awaits its receipt
// and records it.
func (r *claimRound) send(ctx context.Context, rows []claimRow, gas uint64) error {
	input, err := r.claimInput(rows)
	if err != nil {
		return err
	}
	hash, err := r.c.cfg.Chain.Send(ctx, r.network, channel.SettlementAddress, input, gas)
	if err != nil {
		return err
	}
	r.log.InfoContext(ctx, "channel claim sent", "transaction", hash.Hex(), "channels", len(rows))
	receipt, err := r.c.cfg.Chain.Await(ctx, r.network, hash)
	if err != nil {
		// The transaction is the relayer's to send again; the next round
		// reads the channels' state and finds the claim made.
		return err
	}
	if receipt.Status != types.ReceiptStatusSuccessful {
		r.c.cfg.Metrics.ChannelTx(r.network, store.ClaimKindClaim, "reverted", receipt.GasUsed, len(rows))
		return fmt.Errorf("claim %s (%d gas): %w; the next round runs the channels again", receipt.TxHash.Hex(), receipt.GasUsed, errClaimReverted)
	}
	claimed := claimedIn(receipt)
	rec := &store.ChannelClaimTx{Network: r.network, Kind: store.ClaimKindClaim, Amount: new(big.Int), GasUsed: receipt.GasUsed,
		FollowedTx: x402.FollowedTx{Transaction: receipt.TxHash.Hex(), Block: blockOf(receipt)}}
	var events []store.NewEvent
	for _, row := range rows {
		id := row.row.State.ChannelID
		total := row.claim.TotalClaimed
		if got, ok := claimed[id]; ok {
			total = got
		}
		rec.Channels = append(rec.Channels, id)
		rec.Amount.Add(rec.Amount, new(big.Int).Sub(total, row.before))
		events = append(events, store.NewEvent{Stream: store.ChannelStream(r.network, id), Type: store.EventChannelClaimed,
			Data: store.ChannelClaimed{Transaction: receipt.TxHash.Hex(), TotalClaimed: total.String()}})
	}
	if err := r.record(ctx, func(ctx context.Context, tx pgx.Tx) error { return store.ChannelClaimRecord(ctx, tx, rec, events...) }); err != nil {
		r.log.ErrorContext(ctx, "channel claim mined but not recorded; the next round finds it on chain", "transaction", rec.Transaction, "error", err)
		return err
	}
	r.c.cfg.Metrics.ChannelTx(r.network, store.ClaimKindClaim, "mined", receipt.GasUsed, len(rows))
	r.log.InfoContext(ctx, "channels claimed", "transaction", rec.Transaction, "channels", len(rows), "amount", rec.Amount.String(),
		"gas", receipt.GasUsed, "gas_per_channel", receipt.GasUsed/uint64(len(rows)))
	return nil
}

// claimedTopic is the Claimed event's topic.
var claimedTopic = crypto.Keccak256Hash([]byte("Claimed(bytes32,address,uint128,uint128)"))

// claimedIn returns the channels' claimed totals after receipt's
// transaction, from its Claimed events (newTotalClaimed).
func claimedIn(receipt *types.Receipt) map[common.Hash]*big.Int {
	out := map[common.Hash]*big.Int{}
	for _, l := range receipt.Logs {
		if l.Address == channel.SettlementAddress && len(l.Topics) == 3 && l.Topics[0] == claimedTopic && len(l.Data) == 64 {
			out[l.Topics[1]] = new(big.Int).SetBytes(l.Data[32:64])
		}
	}
	return out
}

// blockOf returns the block of receipt.
func blockOf(receipt *types.Receipt) x402.SettledBlock {
	return x402.SettledBlock{Number: receipt.BlockNumber.Uint64(), Hash: receipt.BlockHash.Hex()}
}

// receiversInput is the input of receivers(receiver, token).
func receiversInput(receiver, token common.Address) []byte {
	return append(append(crypto.Keccak256([]byte("receivers(address,address)"))[:4:4],
		common.LeftPadBytes(receiver.Bytes(), 32)...), common.LeftPadBytes(token.Bytes(), 32)...)
}

// settle settles each receiver and token whose claimed total on chain
// exceeds its settled one.
func (r *claimRound) settle(ctx context.Context) error {
	pairs, err := store.ChannelReceiverList(ctx, r.c.cfg.Pool, r.network)
	if err != nil {
		return err
	}
	for _, p := range pairs {
		out, err := r.reader.CallContract(ctx, ethereum.CallMsg{To: &channel.SettlementAddress, Data: receiversInput(p.Receiver, p.Token)}, nil)
		if err != nil {
			return fmt.Errorf("read receivers(%s, %s): %w", p.Receiver.Hex(), p.Token.Hex(), err)
		}
		if len(out) < 64 {
			return fmt.Errorf("read receivers(%s, %s): %d bytes", p.Receiver.Hex(), p.Token.Hex(), len(out))
		}
		claimed, settled := new(big.Int).SetBytes(out[:32]), new(big.Int).SetBytes(out[32:64])
		amount := new(big.Int).Sub(claimed, settled)
		if amount.Sign() <= 0 {
			// Settled already (by this process, or by anyone: settle is
			// open to all); the figures are the chain's.
			if err := store.ChannelReceiverSet(ctx, r.c.cfg.Pool, r.network, p, claimed, settled); err != nil {
				return err
			}
			continue
		}
		input, err := channel.SettleInput(p.Receiver, p.Token)
		if err != nil {
			return err
		}
		hash, err := r.c.cfg.Chain.Send(ctx, r.network, channel.SettlementAddress, input, 0)
		if err != nil {
			return err
		}
		receipt, err := r.c.cfg.Chain.Await(ctx, r.network, hash)
		if err != nil {
			return err
		}
		if receipt.Status != types.ReceiptStatusSuccessful {
			r.c.cfg.Metrics.ChannelTx(r.network, store.ClaimKindSettle, "reverted", receipt.GasUsed, 0)
			return fmt.Errorf("settle %s reverted on chain (%d gas)", receipt.TxHash.Hex(), receipt.GasUsed)
		}
		rec := &store.ChannelClaimTx{Network: r.network, Kind: store.ClaimKindSettle, Receiver: p.Receiver, Token: p.Token, Amount: amount,
			GasUsed: receipt.GasUsed, FollowedTx: x402.FollowedTx{Transaction: receipt.TxHash.Hex(), Block: blockOf(receipt)}}
		if err := r.record(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if err := store.ChannelClaimRecord(ctx, tx, rec); err != nil {
				return err
			}
			return store.ChannelReceiverSet(ctx, tx, r.network, p, claimed, claimed)
		}); err != nil {
			r.log.ErrorContext(ctx, "channel settle mined but not recorded", "transaction", rec.Transaction, "error", err)
			return err
		}
		r.c.cfg.Metrics.ChannelTx(r.network, store.ClaimKindSettle, "mined", receipt.GasUsed, 0)
		r.log.InfoContext(ctx, "claimed funds settled", "transaction", rec.Transaction, "receiver", p.Receiver.Hex(), "amount", amount.String(),
			"gas", receipt.GasUsed)
	}
	return nil
}

// settlementErrors are the settlement contract's custom errors, by
// selector, to name a claim's revert.
var settlementErrors = func() map[[4]byte]string {
	out := map[[4]byte]string{}
	a, err := contracts.Load(contracts.BatchSettlement)
	if err != nil {
		return out
	}
	for name, e := range a.ABI.Errors {
		out[[4]byte(e.ID[:4])] = name
	}
	return out
}()

// isRevert reports whether err is a node's answer that a call reverted
// (not a failure to reach it).
func isRevert(err error) bool {
	var de rpcDataError
	return errors.As(err, &de) || strings.Contains(err.Error(), "execution reverted")
}

// rpcDataError is a node's JSON-RPC error with data (a revert's).
type rpcDataError interface{ ErrorData() any }

// revertMessage names a revert: the settlement contract's custom error
// when its data is one, else the node's message.
func revertMessage(err error) string {
	var de rpcDataError
	if errors.As(err, &de) {
		if s, ok := de.ErrorData().(string); ok {
			if data, derr := hexutil.Decode(s); derr == nil && len(data) >= 4 {
				if name, ok := settlementErrors[[4]byte(data[:4])]; ok {
					return name
				}
			}
		}
	}
	return err.Error()
}
