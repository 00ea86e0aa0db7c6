package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/startstop"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// FollowerConfig configures a Follower.
type FollowerConfig struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Finality follows the settlement transactions on chain. Required.
	Finality x402.Finality
	// Settler makes a settlement again when a reorganisation undid it.
	// Required.
	Settler x402.Settler
	// Every is the time between two rounds. Defaults to 2 s.
	Every time.Duration
	// GoneAfter is how long a transaction may stay in no block after a
	// reorganisation before the settlements it carried are made again
	// apart: meanwhile the keeper gives the node the same transaction
	// again, which settles them all at once. Defaults to 20 s.
	GoneAfter time.Duration
	// Batch is the most transactions of a network one round looks at.
	// Defaults to 1,000.
	Batch int
	// Logger receives the follower's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// LedgerForm1 writes the calls rows in ledger form 1
	// (Config.LedgerForm1).
	LedgerForm1 bool
	// Metrics counts final revenue and reorganised settlements. Optional.
	Metrics *metrics.Metrics
	// Clock times the rounds and GoneAfter. Defaults to clock.Real().
	Clock clock.Clock
}

// Follower follows paid calls' settlements after their receipt until
// their network holds them final (settlement_watch): a round every Every
// looks at the transactions awaiting finality, records those now final
// (one settlement.final event for all of a round's), and meets those a
// reorganisation undid: a transaction mined again elsewhere is followed
// there, each call whose transfer it no longer carries is settled again,
// and one in no block for GoneAfter has its calls settled again apart. A
// settlement that cannot be made again (its authorization expired, its
// nonce used without a transfer) is recorded lost (settlement.lost), with
// its amount, and logged as an error. No database transaction is open
// while the chain is asked or sent to, and each settlement made again is
// recorded as soon as it is made; one process at a time follows a network
// (a session advisory lock), the others skipping it that round.
type Follower struct {
	startstop.Base
	cfg FollowerConfig
}

// NewFollower returns a Follower; Start runs it.
func NewFollower(config *FollowerConfig) (*Follower, error) {
	cfg := *config
	if cfg.Pool == nil || cfg.Finality == nil || cfg.Settler == nil {
		return nil, errors.New("worker: a follower needs Pool, Finality and Settler")
	}
	cfg.Every = cmp.Or(cfg.Every, 2*time.Second)
	cfg.GoneAfter = cmp.Or(cfg.GoneAfter, 20*time.Second)
	cfg.Batch = cmp.Or(cfg.Batch, 1000)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	return &Follower{cfg: cfg}, nil
}

// Start runs rounds until Stop or until ctx ends. Starting a started
// Follower does nothing; Stop ends the rounds and waits for the one
// running.
func (f *Follower) Start(ctx context.Context) error {
	f.Base.Start(ctx, f.run)
	return nil
}

// run does a round every Every until ctx ends.
func (f *Follower) run(ctx context.Context) {
	t := f.cfg.Clock.NewTicker(f.cfg.Every)
	defer t.Stop()
	for {
		if err := f.Round(ctx); err != nil && ctx.Err() == nil {
			f.cfg.Logger.WarnContext(ctx, "finality round failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// Round looks once at the settlements awaiting finality on each network
// that has some. (The settler gives the node again its transactions that a
// reorganisation undid on its own: evm.Relayer's keeper.)
func (f *Follower) Round(ctx context.Context) error {
	networks, err := store.WatchNetworkList(ctx, f.cfg.Pool)
	if err != nil {
		return err
	}
	var errs []error
	for _, network := range networks {
		if err := f.follow(ctx, network); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// recordTimeout bounds the short transaction that records what the chain
// was told (a settlement made again): it is written even when the round's
// context ends meanwhile, since the settlement is on chain.
const recordTimeout = 30 * time.Second

// follow looks at the settlement transactions of network awaiting
// finality. No database transaction is open while the chain is asked or
// sent to: the rows are read, the chain asked where their transactions
// are, and each step recorded in its own short transaction (a settlement
// made again right after it is sent), so that a later error never takes
// back the record of a settlement on chain. A session advisory lock
// (store.WatchFollowLock) keeps the other processes off the network meanwhile.
func (f *Follower) follow(ctx context.Context, network string) error {
	conn, err := f.cfg.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("follow %s: %w", network, err)
	}
	defer conn.Release()
	mine, err := store.WatchFollowLock(ctx, conn, network)
	if err != nil {
		return fmt.Errorf("follow: %w", err)
	}
	if !mine {
		return nil
	}
	defer func() {
		if err := store.WatchFollowUnlock(context.WithoutCancel(ctx), conn, network); err != nil {
			// The lock goes with its session.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	watched, err := store.WatchList(ctx, conn, network, f.cfg.Batch)
	if err != nil || len(watched) == 0 {
		return err
	}
	txs := make([]x402.FollowedTx, len(watched))
	for i, w := range watched {
		txs[i] = w.FollowedTx
	}
	block, err := f.cfg.Finality.Follow(ctx, network, txs)
	if err != nil {
		return err
	}
	var final []store.WatchedTx
	for i, w := range watched {
		switch txs[i].State {
		case x402.TxFinal:
			final = append(final, w)
		case x402.TxMoved:
			if err := f.moved(ctx, w, txs[i].Block); err != nil {
				return err
			}
		case x402.TxGone:
			if w.GoneSince.IsZero() {
				f.cfg.Logger.WarnContext(ctx, "settlement transaction undone by a reorganisation: the keeper gives it to the node again",
					"network", network, "transaction", w.Transaction, "block", w.Block.Number, "calls", len(w.Calls))
				if err := pgx.BeginFunc(ctx, f.cfg.Pool, func(tx pgx.Tx) error {
					return store.WatchGone(ctx, tx, network, w.Transaction, f.cfg.Clock.Now())
				}); err != nil {
					return fmt.Errorf("follow %s: %w", network, err)
				}
				continue
			}
			if f.cfg.Clock.Now().Sub(w.GoneSince) < f.cfg.GoneAfter {
				continue
			}
			for _, id := range w.Calls {
				if err := f.settleAgain(ctx, w, id); err != nil {
					return err
				}
			}
		}
	}
	if len(final) == 0 {
		return nil
	}
	if err := pgx.BeginFunc(ctx, f.cfg.Pool, func(tx pgx.Tx) error {
		return store.WatchFinal(ctx, tx, network, block, final)
	}); err != nil {
		return fmt.Errorf("follow %s: %w", network, err)
	}
	for _, w := range final {
		f.cfg.Metrics.RevenueFinal(network, w.Amount)
	}
	return nil
}

// moved follows w, mined again in block after a reorganisation: each call
// whose transfer it still carries stays with it (settlement.resent names
// the same transaction and its new block, recorded with the move), the
// others are settled again.
func (f *Follower) moved(ctx context.Context, w store.WatchedTx, block x402.SettledBlock) error {
	calls, err := store.CallListToSettle(ctx, f.cfg.Pool, w.Calls)
	if err != nil {
		return err
	}
	payments := make([]*x402.Payment, len(calls))
	for i, c := range calls {
		payments[i] = &c.Payment
	}
	carried, err := f.cfg.Finality.Carried(ctx, w.Network, w.Transaction, payments)
	if err != nil {
		return err
	}
	stayed := 0
	err = pgx.BeginFunc(ctx, f.cfg.Pool, func(tx pgx.Tx) error {
		if err := store.WatchMove(ctx, tx, w.Network, w.Transaction, block); err != nil {
			return err
		}
		for i, c := range calls {
			if !carried[i] {
				continue
			}
			resp := x402.SettleResponse{Success: true, Transaction: w.Transaction, Network: w.Network, Payer: c.Payment.Payer}
			if err := store.Append(ctx, tx, store.NewEvent{Stream: store.CallStream(c.ID), Type: store.EventSettlementResent,
				Data: store.SettlementResent{Previous: w.Transaction, Response: resp, Block: &block,
					Form1: f.cfg.LedgerForm1}}); err != nil {
				return err
			}
			stayed++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("follow %s: moved %s: %w", w.Network, w.Transaction, err)
	}
	for range stayed {
		f.cfg.Metrics.SettlementReorganised(w.Network, metrics.ReorgMoved)
	}
	for i, c := range calls {
		if !carried[i] {
			if err := f.settleAgain(ctx, w, c.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// settleAgain settles the payment of call id again: w, the transaction
// that settled it, was undone. Made again in another transaction, the call
// is followed there (settlement.resent); refused, it is lost
// (settlement.lost). Either is recorded in its own transaction as soon as
// the settler answers, the round's context ended or not (recordTimeout). A
// settler error leaves it for the next round.
func (f *Follower) settleAgain(ctx context.Context, w store.WatchedTx, id string) error {
	call, err := store.CallGetToSettle(ctx, f.cfg.Pool, id)
	if err != nil {
		return err
	}
	log := f.cfg.Logger.With("call_id", id, "network", w.Network, "previous", w.Transaction)
	resp, err := f.cfg.Settler.Settle(ctx, &call.Payment)
	if err != nil {
		log.WarnContext(ctx, "settlement after a reorganisation failed; tried again next round", "error", err)
		return nil
	}
	if resp.Success && resp.Transaction == w.Transaction {
		// The same transaction is back: the next round finds it moved.
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	err = pgx.BeginFunc(rctx, f.cfg.Pool, func(tx pgx.Tx) error {
		if err := store.WatchDrop(rctx, tx, w.Network, w.Transaction, id); err != nil {
			return err
		}
		if !resp.Success {
			return store.Append(rctx, tx, store.NewEvent{Stream: store.CallStream(id), Type: store.EventSettlementLost,
				Data: store.SettlementLost{Previous: w.Transaction, Network: w.Network, Amount: call.Amount, Reason: resp.ErrorReason}})
		}
		if err := store.Append(rctx, tx, store.NewEvent{Stream: store.CallStream(id), Type: store.EventSettlementResent,
			Data: store.SettlementResent{Previous: w.Transaction, Response: *resp, Cost: resp.Cost, Block: resp.Block,
				Form1: f.cfg.LedgerForm1}}); err != nil {
			return err
		}
		if resp.Block != nil {
			return store.WatchAdd(rctx, tx, []store.Watched{{CallID: id, Network: w.Network, Transaction: resp.Transaction, Block: *resp.Block}})
		}
		return nil
	})
	if err != nil {
		log.ErrorContext(ctx, "settlement after a reorganisation sent but not recorded", "success", resp.Success,
			"transaction", resp.Transaction, "error", err)
		return fmt.Errorf("follow %s: record the settlement of %s made again: %w", w.Network, id, err)
	}
	if !resp.Success {
		log.ErrorContext(ctx, "settlement lost: a reorganisation undid it and it cannot be made again", "amount", call.Amount, "reason", resp.ErrorReason)
		f.cfg.Metrics.SettlementReorganised(w.Network, metrics.ReorgLost)
		return nil
	}
	if resp.Block == nil {
		f.cfg.Metrics.RevenueFinal(w.Network, call.Amount)
	}
	log.WarnContext(ctx, "settlement made again after a reorganisation", "transaction", resp.Transaction)
	f.cfg.Metrics.SettlementReorganised(w.Network, metrics.ReorgResent)
	return nil
}
