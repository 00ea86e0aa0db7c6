package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm/channel"
	"github.com/x402d/x402d/x402/evm/chanpay"
)

// Defaults of the refund job's bounds (ClaimConfig).
const (
	// DefaultRefundAwait is ClaimConfig.RefundAwait's default.
	DefaultRefundAwait = 30 * time.Second
	// DefaultRefundResendAfter is ClaimConfig.RefundResendAfter's
	// default.
	DefaultRefundResendAfter = 2 * time.Minute
	// DefaultRefundGiveUpAfter is ClaimConfig.RefundGiveUpAfter's
	// default.
	DefaultRefundGiveUpAfter = 15 * time.Minute
)

// refundWorker works the refund jobs (chanpay.RefundArgs).
type refundWorker struct {
	river.WorkerDefaults[chanpay.RefundArgs]
	c *Claimer
}

// Work makes the job's refund (Claimer.Refund), snoozing while its
// transaction is awaited. The last attempt's error ends the refund as
// failed, its channel freed, when none of its transactions can be mined
// (Claimer.refundOpen); else the job snoozes RefundResendAfter, the
// channel held.
func (w *refundWorker) Work(ctx context.Context, job *river.Job[chanpay.RefundArgs]) error {
	snooze, err := w.c.Refund(ctx, &job.Args)
	if err != nil {
		if job.Attempt >= job.MaxAttempts {
			if w.c.refundOpen(ctx, &job.Args) {
				w.c.cfg.Logger.ErrorContext(ctx, "refund job out of attempts, but a transaction of it can be mined, or the chain cannot tell: looked at again later",
					"refund", job.Args.CallID, "error", err)
				return river.JobSnooze(w.c.cfg.RefundResendAfter)
			}
			w.c.cfg.Logger.ErrorContext(ctx, "refund job out of attempts: recorded failed", "refund", job.Args.CallID, "error", err)
			return errors.Join(err, w.c.refundFailed(ctx, &job.Args, channel.ReasonWaitForReceiptFailed,
				"the refund could not be made: "+err.Error(), ""))
		}
		return err
	}
	if snooze > 0 {
		return river.JobSnooze(snooze)
	}
	return nil
}

// Timeout bounds one run: a receipt's wait and the reads around it.
func (w *refundWorker) Timeout(*river.Job[chanpay.RefundArgs]) time.Duration {
	return w.c.cfg.RefundAwait + time.Minute
}

// refundTx is the channel_claims row of the refund of channel id mined in
// receipt, which paid back paid.
func refundTx(network string, id common.Hash, paid *big.Int, receipt *types.Receipt) *store.ChannelClaimTx {
	return &store.ChannelClaimTx{Network: network, Kind: store.ClaimKindRefund, Channels: []common.Hash{id}, Amount: paid,
		GasUsed: receipt.GasUsed, FollowedTx: x402.FollowedTx{Transaction: receipt.TxHash.Hex(), Block: blockOf(receipt)}}
}

// refundedIn returns what receipt's transaction refunded of channel id
// (its Refunded event; 0 when none: a refund with nothing left to pay
// back only moves the refund nonce).
func refundedIn(receipt *types.Receipt, id common.Hash) *big.Int {
	for _, l := range receipt.Logs {
		if l.Address == channel.SettlementAddress && len(l.Topics) >= 2 && l.Topics[0] == channel.RefundedTopic && l.Topics[1] == id && len(l.Data) >= 32 {
			return new(big.Int).SetBytes(l.Data[:32])
		}
	}
	return new(big.Int)
}

// Refund runs the refund job of a: it makes the cooperative refund a
// request accepted (chanpay.Scheme.Refund), and records its outcome,
// channel.refunded or channel.refund_failed, which frees the channel. It
// is run again until then (River retries; snooze, when positive, is when
// to look again), and each run starts from what the chain and the log
// show, so no run sends a second refund for one mined:
//
//  1. the channel's refund nonce on chain past a.Nonce: the refund was
//     mined (by a transaction of this request, the only one that signs
//     with a.Nonce while the channel is held): its receipt is recorded;
//  2. no transaction sent yet, or the last one sent RefundResendAfter ago
//     and still unmined (the node and the relayer lost it): the refund is
//     signed with the receiver authorizer's key (refund nonce a.Nonce:
//     whichever of its transactions is mined first refunds, the others
//     revert) and sent through the relayer, recorded
//     (channel.refund_sent) before it is awaited;
//  3. the last transaction is awaited up to RefundAwait: mined, it is
//     recorded; reverted, the refund failed; unmined, the job snoozes, and
//     past RefundGiveUpAfter from the request the refund is recorded
//     failed (wait_for_receipt_failed).
//
// A refund is recorded failed, its channel freed, only once none of its
// transactions can be mined any more (open): each took a relayer nonce
// that a transaction mined since used, the channel's refund nonce not
// moved, both read at one block. Until then, past RefundGiveUpAfter too,
// it is awaited and sent again as above: a transaction of it mined late
// would leave the channel's record above the chain's balance, and the
// vouchers accepted on that record beyond what can be claimed.
func (c *Claimer) Refund(ctx context.Context, a *chanpay.RefundArgs) (snooze time.Duration, err error) {
	r, err := c.newRefundRun(a)
	if err != nil {
		return 0, err
	}
	for {
		rec, err := store.ChannelRefundGet(ctx, c.cfg.Pool, a.Network, a.ChannelID, a.CallID)
		if err != nil || rec.Done() {
			return 0, err
		}
		mined, err := r.mined(ctx)
		if err != nil {
			return 0, err
		}
		if mined {
			return 0, r.recordMined(ctx, rec)
		}
		now := c.cfg.Clock.Now()
		if len(rec.Sent) == 0 || now.Sub(rec.Sent[len(rec.Sent)-1].At) >= c.cfg.RefundResendAfter {
			if now.Sub(a.RequestedAt) >= c.cfg.RefundGiveUpAfter && len(rec.Sent) > 0 {
				mined, done, err := r.giveUpClosed(ctx, rec)
				switch {
				case err != nil || done:
					return 0, err
				case mined:
					continue
				}
				r.log.WarnContext(ctx, "refund not mined in time, but a transaction of it still can be: sent again, its channel held")
			}
			if err := r.send(ctx, rec); err != nil {
				if errors.Is(err, errRefundOpen) {
					return c.cfg.RefundCheckEvery, nil
				}
				return 0, err
			}
			continue
		}
		last := common.HexToHash(rec.Sent[len(rec.Sent)-1].Transaction)
		actx, cancel := context.WithTimeout(ctx, c.cfg.RefundAwait)
		receipt, err := c.cfg.Chain.Await(actx, a.Network, last)
		cancel()
		switch {
		case err == nil && receipt.Status == types.ReceiptStatusSuccessful:
			return 0, r.record(ctx, receipt)
		case err == nil:
			// Reverted: another transaction of it mined first, or the
			// refund fails.
			c.cfg.Metrics.ChannelTx(a.Network, store.ClaimKindRefund, "reverted", receipt.GasUsed, 0)
			mined, open, err := r.open(ctx, rec)
			switch {
			case err != nil:
				return 0, err
			case mined:
				continue
			case open:
				// An earlier transaction of it can still be mined.
				return c.cfg.RefundCheckEvery, nil
			}
			return 0, c.refundFailed(ctx, a, channel.ReasonRefundTransactionFailed,
				fmt.Sprintf("refund transaction %s reverted", receipt.TxHash.Hex()), receipt.TxHash.Hex())
		case ctx.Err() != nil:
			return 0, ctx.Err()
		}
		r.log.InfoContext(ctx, "refund transaction not mined yet", "transaction", last.Hex(), "error", err)
		if mined, err := r.mined(ctx); err != nil || mined {
			if err != nil {
				return 0, err
			}
			continue
		}
		now = c.cfg.Clock.Now()
		if now.Sub(a.RequestedAt) >= c.cfg.RefundGiveUpAfter {
			mined, done, err := r.giveUpClosed(ctx, rec)
			switch {
			case err != nil || done:
				return 0, err
			case mined:
				continue
			}
		}
		if now.Sub(rec.Sent[len(rec.Sent)-1].At) >= c.cfg.RefundResendAfter {
			continue
		}
		return c.cfg.RefundCheckEvery, nil
	}
}

// refundOpen reports whether a transaction of refund a sent can still be
// mined, or was (refundRun.open), or that cannot be read.
func (c *Claimer) refundOpen(ctx context.Context, a *chanpay.RefundArgs) bool {
	rec, err := store.ChannelRefundGet(ctx, c.cfg.Pool, a.Network, a.ChannelID, a.CallID)
	if err != nil {
		return true
	}
	if len(rec.Sent) == 0 {
		return false
	}
	r, err := c.newRefundRun(a)
	if err != nil {
		return true
	}
	mined, open, err := r.open(ctx, rec)
	return err != nil || mined || open
}

// refundRun is one run of a refund job.
type refundRun struct {
	c      *Claimer
	a      *chanpay.RefundArgs
	reader ClaimReader
	nonce  *big.Int
	amount *big.Int
	log    *slog.Logger
}

func (c *Claimer) newRefundRun(a *chanpay.RefundArgs) (*refundRun, error) {
	reader := c.cfg.Readers[a.Network]
	if reader == nil {
		return nil, fmt.Errorf("refund %s: no chain reader for %s", a.CallID, a.Network)
	}
	nonce, ok1 := new(big.Int).SetString(a.Nonce, 10)
	amount, ok2 := new(big.Int).SetString(a.Amount, 10)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("refund %s: nonce %q or amount %q is not a number", a.CallID, a.Nonce, a.Amount)
	}
	return &refundRun{c: c, a: a, reader: reader, nonce: nonce, amount: amount,
		log: c.cfg.Logger.With("job", "channel.refund", "refund", a.CallID, "network", a.Network)}, nil
}

// mined reports whether the chain shows the refund made: the channel's
// refund nonce past the request's.
func (r *refundRun) mined(ctx context.Context) (bool, error) {
	st, err := channel.ReadState(ctx, r.reader, r.a.ChannelID, nil)
	if err != nil {
		return false, fmt.Errorf("refund %s: %w", r.a.CallID, err)
	}
	return st.RefundNonce.Cmp(r.nonce) > 0, nil
}

// open reads the chain at its head: mined, the refund was made (the
// channel's refund nonce past the request's); open, a transaction of it
// sent (rec.Sent) can still be mined: the relayer's nonce it took is not
// used yet. A transaction whose nonce was not recorded (a record older
// than its AccountNonce) is not counted.
func (r *refundRun) open(ctx context.Context, rec *store.ChannelRefundRecord) (mined, open bool, err error) {
	head, err := r.reader.BlockNumber(ctx)
	if err != nil {
		return false, false, fmt.Errorf("refund %s: read head: %w", r.a.CallID, err)
	}
	at := new(big.Int).SetUint64(head)
	st, err := channel.ReadState(ctx, r.reader, r.a.ChannelID, at)
	if err != nil {
		return false, false, fmt.Errorf("refund %s: %w", r.a.CallID, err)
	}
	if st.RefundNonce.Cmp(r.nonce) > 0 {
		return true, false, nil
	}
	used := map[string]uint64{}
	for _, s := range rec.Sent {
		if s.From == "" {
			continue
		}
		n, ok := used[s.From]
		if !ok {
			if n, err = r.reader.NonceAt(ctx, common.HexToAddress(s.From), at); err != nil {
				return false, false, fmt.Errorf("refund %s: read nonce of %s: %w", r.a.CallID, s.From, err)
			}
			used[s.From] = n
		}
		if s.AccountNonce >= n {
			return false, true, nil
		}
	}
	return false, false, nil
}

// giveUpClosed gives the refund up (giveUp) once none of its transactions
// can be mined any more (open): done reports it given up (or the error of
// recording it), mined that it was mined meanwhile (the record is read
// again); neither, that a transaction of it still can be.
func (r *refundRun) giveUpClosed(ctx context.Context, rec *store.ChannelRefundRecord) (mined, done bool, err error) {
	mined, open, err := r.open(ctx, rec)
	if err != nil || mined || open {
		return mined, false, err
	}
	return false, true, r.giveUp(ctx, rec)
}

// errRefundOpen is send's error when the refund would revert but a
// transaction of it sent before can still be mined: the refund is not
// recorded failed yet.
var errRefundOpen = errors.New("refund would revert, a transaction of it sent still can be mined")

// send signs the refund and sends it through the relayer (rec.Sent: its
// transactions sent before), and records the transaction; a run that
// reverts (refund_simulation_failed) ends the refund failed, unless the
// refund was mined meanwhile, or one of rec.Sent can still be
// (errRefundOpen).
func (r *refundRun) send(ctx context.Context, rec *store.ChannelRefundRecord) error {
	row, err := store.ChannelGet(ctx, r.c.cfg.Pool, r.a.Network, r.a.ChannelID)
	if err != nil {
		return err
	}
	chainID, err := r.c.cfg.Chain.ChainID(r.a.Network)
	if err != nil {
		return err
	}
	input, err := r.c.refundInput(chainID, &row.State.Config, r.nonce, r.amount)
	if err != nil {
		return err
	}
	sent, err := r.c.cfg.Chain.SendTx(ctx, r.a.Network, channel.SettlementAddress, input, 0)
	if err != nil {
		if !isRevert(err) {
			return fmt.Errorf("refund %s: send: %w", r.a.CallID, err)
		}
		mined, open, merr := r.open(ctx, rec)
		switch {
		case merr != nil || mined:
			return merr
		case open:
			r.log.WarnContext(ctx, "refund would revert, but a transaction of it sent still can be mined: its channel held", "error", err)
			return errRefundOpen
		}
		return r.c.refundFailed(ctx, r.a, channel.ReasonRefundSimulationFailed, "the refund would revert: "+revertMessage(err), "")
	}
	from, err := types.Sender(types.LatestSignerForChainID(chainID), sent)
	if err != nil {
		return fmt.Errorf("refund %s: sender of %s: %w", r.a.CallID, sent.Hash().Hex(), err)
	}
	r.log.InfoContext(ctx, "refund sent", "transaction", sent.Hash().Hex(), "account_nonce", sent.Nonce(), "sends_before", len(rec.Sent))
	return r.c.record(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return store.Append(ctx, tx, store.NewEvent{Stream: store.ChannelStream(r.a.Network, r.a.ChannelID), Type: store.EventChannelRefundSent,
			Data: store.ChannelRefundSent{CallID: r.a.CallID, Transaction: sent.Hash().Hex(), At: r.c.cfg.Clock.Now().UTC(),
				From: from.Hex(), AccountNonce: sent.Nonce()}})
	})
}

// minedReceiptWait bounds the wait for the receipt of each transaction of
// a refund the chain shows made: the one mined has its receipt at once.
const minedReceiptWait = 5 * time.Second

// recordMined records the refund the chain shows made: the receipt of its
// transaction, the last sent first; when none of them (a run that died
// between its send and its record), the Refunded event of the channel
// in the last LogRange blocks.
func (r *refundRun) recordMined(ctx context.Context, rec *store.ChannelRefundRecord) error {
	for i := len(rec.Sent) - 1; i >= 0; i-- {
		actx, cancel := context.WithTimeout(ctx, min(r.c.cfg.RefundAwait, minedReceiptWait))
		receipt, err := r.c.cfg.Chain.Await(actx, r.a.Network, common.HexToHash(rec.Sent[i].Transaction))
		cancel()
		if err == nil && receipt.Status == types.ReceiptStatusSuccessful {
			return r.record(ctx, receipt)
		}
	}
	receipt, err := r.c.lastRefunded(ctx, r.reader, r.a.ChannelID)
	if err != nil {
		return fmt.Errorf("refund %s: %w", r.a.CallID, err)
	}
	r.log.WarnContext(ctx, "refund mined by a transaction whose send was not recorded", "transaction", receipt.TxHash.Hex())
	return r.record(ctx, receipt)
}

// lastRefunded returns the last Refunded event of channel id in the last
// LogRange blocks as a receipt of its transaction that holds it alone (no
// gas); a receipt with no transaction when there is none.
func (c *Claimer) lastRefunded(ctx context.Context, reader ClaimReader, id common.Hash) (*types.Receipt, error) {
	head, err := reader.BlockNumber(ctx)
	if err != nil {
		return nil, fmt.Errorf("read head: %w", err)
	}
	logs, err := reader.FilterLogs(ctx, ethereum.FilterQuery{FromBlock: new(big.Int).SetUint64(head - min(head, c.cfg.LogRange)),
		ToBlock: new(big.Int).SetUint64(head), Addresses: []common.Address{channel.SettlementAddress},
		Topics: [][]common.Hash{{channel.RefundedTopic}, {id}}})
	if err != nil {
		return nil, fmt.Errorf("read the Refunded events of channel %s: %w", id.Hex(), err)
	}
	receipt := &types.Receipt{Status: types.ReceiptStatusSuccessful}
	if n := len(logs); n > 0 {
		receipt.TxHash, receipt.BlockNumber, receipt.BlockHash = logs[n-1].TxHash, new(big.Int).SetUint64(logs[n-1].BlockNumber), logs[n-1].BlockHash
		receipt.Logs = []*types.Log{&logs[n-1]}
	}
	return receipt, nil
}

// record records the refund mined in receipt: channel.refunded, with the
// channel's state after it, which frees the channel, and in the same
// transaction its channel_claims row (kind refund), which the claim
// round follows until final (claimRound.refundUndone) when the
// transaction is known.
func (r *refundRun) record(ctx context.Context, receipt *types.Receipt) error {
	after, err := channel.ReadState(ctx, r.reader, r.a.ChannelID, receipt.BlockNumber)
	if err != nil {
		return fmt.Errorf("refund %s: %w", r.a.CallID, err)
	}
	row, err := store.ChannelGet(ctx, r.c.cfg.Pool, r.a.Network, r.a.ChannelID)
	if err != nil {
		return err
	}
	paid := refundedIn(receipt, r.a.ChannelID)
	tx := ""
	if receipt.TxHash != (common.Hash{}) {
		tx = receipt.TxHash.Hex()
	}
	refunded := store.NewEvent{Stream: store.ChannelStream(r.a.Network, r.a.ChannelID), Type: store.EventChannelRefunded,
		Data: store.ChannelRefunded{CallID: r.a.CallID, Transaction: tx, Amount: paid.String(), Nonce: r.a.Nonce,
			Balance: after.Balance.String(), TotalClaimed: after.TotalClaimed.String(), WithdrawRequestedAt: after.WithdrawRequestedAt,
			Charged: row.State.Charged.String()}}
	err = r.c.record(ctx, func(ctx context.Context, dbtx pgx.Tx) error {
		if tx == "" || receipt.BlockHash == (common.Hash{}) {
			return store.Append(ctx, dbtx, refunded)
		}
		return store.ChannelClaimRecord(ctx, dbtx, refundTx(r.a.Network, r.a.ChannelID, paid, receipt), refunded)
	})
	if err != nil {
		r.log.ErrorContext(ctx, "refund mined but not recorded; the job is run again", "transaction", tx, "error", err)
		return err
	}
	r.c.cfg.Metrics.ChannelTx(r.a.Network, store.ClaimKindRefund, "mined", receipt.GasUsed, 0)
	r.log.InfoContext(ctx, "channel refunded", "transaction", tx, "amount", paid.String())
	return nil
}

// giveUp records the refund failed: no transaction of it was mined within
// RefundGiveUpAfter of its request, and none can be any more (open).
func (r *refundRun) giveUp(ctx context.Context, rec *store.ChannelRefundRecord) error {
	last := ""
	if n := len(rec.Sent); n > 0 {
		last = rec.Sent[n-1].Transaction
	}
	r.log.WarnContext(ctx, "refund not mined in time: recorded failed, its channel freed", "transactions", len(rec.Sent), "last", last)
	return r.c.refundFailed(ctx, r.a, channel.ReasonWaitForReceiptFailed,
		fmt.Sprintf("no transaction of the refund was mined within %s (%d sent)", r.c.cfg.RefundGiveUpAfter, len(rec.Sent)), last)
}

// refundFailed records refund a failed for reason: channel.refund_failed,
// which frees its channel.
func (c *Claimer) refundFailed(ctx context.Context, a *chanpay.RefundArgs, reason, message, tx string) error {
	return c.record(ctx, func(ctx context.Context, dbtx pgx.Tx) error {
		return store.Append(ctx, dbtx, store.NewEvent{Stream: store.ChannelStream(a.Network, a.ChannelID), Type: store.EventChannelRefundFailed,
			Data: store.ChannelRefundFailed{CallID: a.CallID, Reason: reason, Message: message, Transaction: tx}})
	})
}

// record runs fn in a transaction of its own, written even when the
// job's context ends meanwhile (what it records is on chain).
func (c *Claimer) record(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	// It writes channels' rows (a claim's, many at once) that paid calls'
	// transactions write too: it gives way to them.
	return store.InYieldingTx(rctx, c.cfg.Pool, func(tx pgx.Tx) error { return fn(rctx, tx) })
}

// refundUndone makes again the refund of p, recorded mined
// (channel.refunded) and undone by a reorganisation that the node did
// not mine again within GoneAfter. While the channel's refund nonce on
// chain is still the one the refund was signed with, the refund is
// signed again with it, for the amount it paid back, sent through the
// relayer and awaited; mined, its transaction is recorded
// (channel.refund_undone, its channel_claims row followed in turn) and
// p's row marked gone, in one transaction. A refund nonce moved on means
// the signature was mined by a transaction of someone else's (anyone may
// send it): that transaction, the channel's last Refunded event unless
// the log records it, is recorded in its place, nothing sent. A send
// that would revert, or one reverted, sends nothing more. Either way the
// row takes the chain's balance and refund nonce (channel.refund_undone,
// naming no transaction when none made the refund). A refund of the
// channel awaiting its outcome leaves p to the next round: its job
// records the chain's state.
func (r *claimRound) refundUndone(ctx context.Context, p *store.ChannelClaimTx) error {
	if len(p.Channels) != 1 {
		return fmt.Errorf("refund %s names %d channels", p.Transaction, len(p.Channels))
	}
	id := p.Channels[0]
	was, err := store.ChannelRefundOf(ctx, r.c.cfg.Pool, r.network, id, p.Transaction)
	if errors.Is(err, store.ErrNotFound) {
		// Its events removed: nothing to sign it again from.
		r.log.ErrorContext(ctx, "refund undone by a reorganisation, its event not found: not made again", "transaction", p.Transaction,
			"channel", id.Hex())
		return store.ChannelClaimGone(ctx, r.c.cfg.Pool, r.network, p.Transaction, r.c.cfg.Clock.Now(), true)
	}
	if err != nil {
		return err
	}
	row, err := store.ChannelGet(ctx, r.c.cfg.Pool, r.network, id)
	if err != nil {
		return err
	}
	if row.BusyCall != "" && row.BusyCall != was.CallID {
		rec, err := store.ChannelRefundGet(ctx, r.c.cfg.Pool, r.network, id, row.BusyCall)
		if err != nil {
			return err
		}
		if rec.Requested != nil && !rec.Done() {
			r.log.InfoContext(ctx, "refund undone by a reorganisation: another refund of its channel awaits its outcome, left to the next round",
				"transaction", p.Transaction, "channel", id.Hex())
			return nil
		}
	}
	nonce, ok1 := new(big.Int).SetString(was.Nonce, 10)
	amount, ok2 := new(big.Int).SetString(was.Amount, 10)
	if !ok1 || !ok2 {
		return fmt.Errorf("refund %s: nonce %q or amount %q is not a number", p.Transaction, was.Nonce, was.Amount)
	}
	st, err := channel.ReadState(ctx, r.reader, id, nil)
	if err != nil {
		return fmt.Errorf("refund %s: %w", p.Transaction, err)
	}
	r.log.WarnContext(ctx, "refund undone by a reorganisation and not mined again: made again", "transaction", p.Transaction,
		"channel", id.Hex(), "refund", was.CallID, "amount", amount.String(), "nonce", nonce.String(), "chain_nonce", st.RefundNonce.String())
	r.c.cfg.Metrics.ChannelReorganised(r.network, p.Kind)
	var receipt *types.Receipt
	resent := false
	switch {
	case st.RefundNonce.Cmp(nonce) > 0:
		// Its signature, or another refund's, was mined by a transaction
		// of someone else's: recorded in its place unless recorded
		// already.
		if receipt, err = r.refundedBy(ctx, id, p.Transaction); err != nil {
			return err
		}
	case st.RefundNonce.Cmp(nonce) == 0 && amount.Sign() > 0:
		if receipt, err = r.resendRefund(ctx, &row.State.Config, nonce, amount); err != nil {
			return err
		}
		resent = receipt != nil
	}
	undone := store.ChannelRefundUndone{CallID: was.CallID, Undone: p.Transaction, Amount: "0", Nonce: was.Nonce}
	var rec *store.ChannelClaimTx
	var at *big.Int
	if receipt != nil {
		paid := refundedIn(receipt, id)
		rec = refundTx(r.network, id, paid, receipt)
		undone.Transaction, undone.Amount, at = rec.Transaction, paid.String(), receipt.BlockNumber
	}
	if st, err = channel.ReadState(ctx, r.reader, id, at); err != nil {
		return fmt.Errorf("refund %s: %w", p.Transaction, err)
	}
	undone.Balance, undone.RefundNonce = st.Balance.String(), st.RefundNonce.String()
	ev := store.NewEvent{Stream: store.ChannelStream(r.network, id), Type: store.EventChannelRefundUndone, Data: undone}
	err = r.record(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := store.ChannelClaimGone(ctx, tx, r.network, p.Transaction, r.c.cfg.Clock.Now(), true); err != nil {
			return err
		}
		if rec == nil {
			return store.Append(ctx, tx, ev)
		}
		return store.ChannelClaimRecord(ctx, tx, rec, ev)
	})
	if err != nil {
		return err
	}
	if rec == nil {
		r.log.WarnContext(ctx, "refund undone and not made again: the channel takes the chain's state", "transaction", p.Transaction,
			"balance", undone.Balance, "refund_nonce", undone.RefundNonce)
		return nil
	}
	if resent {
		r.c.cfg.Metrics.ChannelTx(r.network, store.ClaimKindRefund, "mined", receipt.GasUsed, 0)
	}
	r.log.InfoContext(ctx, "refund undone made again", "undone", p.Transaction, "transaction", rec.Transaction, "amount", undone.Amount,
		"sent_again", resent)
	return nil
}

// refundedBy returns, as a receipt holding it alone, the last Refunded
// event of channel id (Claimer.lastRefunded) when its transaction is
// neither undone nor a refund the log records; nil otherwise.
func (r *claimRound) refundedBy(ctx context.Context, id common.Hash, undone string) (*types.Receipt, error) {
	receipt, err := r.c.lastRefunded(ctx, r.reader, id)
	if err != nil || receipt.TxHash == (common.Hash{}) || receipt.BlockHash == (common.Hash{}) {
		return nil, err
	}
	recorded, err := store.ChannelRefundTransactions(ctx, r.c.cfg.Pool, r.network, id)
	if err != nil {
		return nil, err
	}
	tx := strings.ToLower(receipt.TxHash.Hex())
	if recorded[tx] || strings.EqualFold(tx, undone) {
		return nil, nil
	}
	return receipt, nil
}

// refundInput returns the refundWithSignature input of config's channel
// on chain chainID for amount with refund nonce nonce, signed with the
// receiver authorizer's key.
func (c *Claimer) refundInput(chainID *big.Int, config *channel.Config, nonce, amount *big.Int) ([]byte, error) {
	sig, err := channel.Sign(c.cfg.AuthorizerKey, channel.RefundDigest(chainID, config.ID(chainID), nonce, amount))
	if err != nil {
		return nil, fmt.Errorf("sign refund: %w", err)
	}
	return channel.RefundWithSignatureInput(config, amount, nonce, sig)
}

// resendRefund signs the refund of config's channel for amount with
// refund nonce nonce, sends it and awaits its receipt: nil when it would
// revert or reverted.
func (r *claimRound) resendRefund(ctx context.Context, config *channel.Config, nonce, amount *big.Int) (*types.Receipt, error) {
	input, err := r.c.refundInput(r.chainID, config, nonce, amount)
	if err != nil {
		return nil, err
	}
	hash, err := r.c.cfg.Chain.Send(ctx, r.network, channel.SettlementAddress, input, 0)
	if err != nil {
		if isRevert(err) {
			r.log.WarnContext(ctx, "refund undone would revert if sent again", "error", revertMessage(err))
			return nil, nil
		}
		return nil, fmt.Errorf("send refund again: %w", err)
	}
	receipt, err := r.c.cfg.Chain.Await(ctx, r.network, hash)
	if err != nil {
		// The relayer's keeper sends it again; mined, the next round
		// finds the refund nonce moved on and records its transaction
		// (refundedBy); else it is sent again then.
		return nil, fmt.Errorf("await refund %s sent again: %w", hash.Hex(), err)
	}
	if receipt.Status != types.ReceiptStatusSuccessful {
		r.c.cfg.Metrics.ChannelTx(r.network, store.ClaimKindRefund, "reverted", receipt.GasUsed, 0)
		return nil, nil
	}
	return receipt, nil
}
