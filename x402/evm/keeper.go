package evm

import (
	"context"
	"fmt"
	"log/slog"
	"math/big"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// keeper sees that no nonce of the relayer's key on one chain stays a gap
// behind later ones, whichever process allocated it: in passes, it forgets
// what the chain mined, touches what this process awaits, and gives the
// node again what it lacks, replacing a transaction priced under the base
// fee or unmined too long and filling a nonce whose transaction will not
// come.
//
// It runs on a goroutine of its own (run), started by Relayer.Start and
// ended by Relayer.Stop: a pass at least every idle (transactions a
// reorganisation undid are given back while no settlement waits), and soon
// after a nudge from a receipt wait that lasted every (it may be behind a
// gap), but never two within every. Only that goroutine runs passes, so
// last needs no lock; senders is an atomic, read by the batcher.
type keeper struct {
	network string
	address common.Address
	owner   string
	backend Backend
	nonces  *nonces
	sender  *sender
	logger  *slog.Logger
	// every, idle, replaceAfter and orphanAfter are KeepEvery, KeepIdle,
	// ReplaceAfter and OrphanAfter of RelayerConfig.
	every, idle, replaceAfter, orphanAfter time.Duration
	clock                                  clock.Clock

	// passes wakes run for a pass (receipt waits ask for one).
	passes passRequests
	// last is when the last pass started (run's only).
	last time.Time
	// senders is how many processes were last seen sending with the
	// relayer's key on the chain (pass), this one included; 0 until then.
	senders atomic.Int64
}

// unsentAfter is how long a nonce allocated by another process may stay
// without a recorded transaction before it is filled.
const unsentAfter = 5 * time.Second

// resendLowest is how many of the lowest outstanding nonces each keeping
// pass sends again when the node cannot say which it lacks.
const resendLowest = 8

// passRequests carries the requests for a keeper's pass: receipt waits
// make them, the keeper takes them. Made before both, it is how a wait
// reaches the keeper without pointing at it.
type passRequests chan struct{}

func newPassRequests() passRequests { return make(passRequests, 1) }

// ask asks for a pass soon; it never blocks.
func (p passRequests) ask() {
	select {
	case p <- struct{}{}:
	default:
	}
}

// run makes passes until ctx ends: one every idle, and one soon after each
// nudge, at most one per every. A pass a nudge asked for counts as
// settlement's in the RPC figures (ethrpc.PurposeSettle), the others as
// finality's.
func (k *keeper) run(ctx context.Context) {
	idle := k.clock.NewTimer(k.idle)
	defer idle.Stop()
	for {
		purpose := ethrpc.PurposeFinality
		select {
		case <-ctx.Done():
			return
		case <-k.passes:
			purpose = ethrpc.PurposeSettle
		case <-idle.C():
		}
		if wait := k.last.Add(k.every).Sub(k.clock.Now()); wait > 0 {
			t := k.clock.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
		k.last = k.clock.Now()
		if err := k.pass(ethrpc.WithPurpose(ctx, purpose)); err != nil && ctx.Err() == nil {
			k.logger.WarnContext(ctx, "relayer nonce keeping failed", "network", k.network, "error", err)
		}
		idle.Reset(k.idle)
	}
}

// pass resolves the relayer's outstanding nonces on the chain once: nonces
// the chain mined are forgotten, and this process's others touched; a
// transaction of this process that got no answer, or is unmined after
// replaceAfter, and one of another process left untouched for orphanAfter
// (its process died, or died before sending), is sent again as it is while
// its fee cap covers the base fee, and replaced with fees the chain takes
// otherwise; a nonce with no transaction recorded is filled with a transfer
// of nothing to the relayer itself; and the node is given again every
// transaction from the first nonce it says it lacks.
func (k *keeper) pass(ctx context.Context) error {
	mined, err := k.nonces.readMined(ctx)
	if err != nil {
		return err
	}
	// This process is alive and awaits these: they are not orphans, however
	// long a congested chain keeps them waiting.
	if mine := k.nonces.awaited(mined); len(mine) > 0 {
		if err := k.nonces.touch(ctx, mine); err != nil {
			return err
		}
	}
	outstanding, err := k.nonces.outstanding(ctx, mined)
	if err != nil {
		return err
	}
	// The processes sending with this key now: the owners of the nonces
	// outstanding, each of which a live process touches on every pass.
	// They share the gas a batcher may leave unmined.
	senders := map[string]bool{k.owner: true}
	for _, o := range outstanding {
		if k.clock.Now().Sub(o.UpdatedAt) < k.orphanAfter {
			senders[o.Owner] = true
		}
	}
	k.senders.Store(int64(len(senders)))
	if len(outstanding) == 0 {
		return nil
	}
	head, err := k.backend.HeaderByNumber(ctx, nil)
	if err != nil {
		return fmt.Errorf("read head block: %w", err)
	}
	baseFee := cmpOr(head.BaseFee, new(big.Int))
	// The node's count of the relayer's transactions, those it holds ready
	// to mine included: the first nonce it does not hold. Outstanding, it
	// is a gap that every later transaction waits behind, however many
	// there are: a node loses transactions at times (anvil drops one whose
	// fee cap a rising base fee passed, and with it those that follow).
	gap, gapErr := k.backend.PendingNonceAt(ctx, k.address)
	for i, o := range outstanding {
		own, isOwn := k.nonces.ownOf(o.Nonce)
		tx := own.tx
		// Due when it got no answer, when it waited replaceAfter, and at
		// once when the base fee rose above its fee cap: the node holds it
		// back, and every later nonce behind it.
		due := isOwn && (own.failed || k.clock.Now().Sub(own.sentAt) >= k.replaceAfter || tx.GasFeeCap().Cmp(baseFee) < 0)
		// A nonce with no transaction recorded is filled sooner: its
		// process records one within milliseconds of the allocation, or
		// died in between.
		if !isOwn && (k.clock.Now().Sub(o.UpdatedAt) >= k.orphanAfter || o.Raw == nil && k.clock.Now().Sub(o.UpdatedAt) >= unsentAfter) {
			// Another process's, untouched for orphanAfter: it died, or
			// died before sending. Its own transaction goes on if there is
			// one (the settlements in it then complete); a nothing fills
			// the nonce otherwise.
			due = true
			tx = decodeTx(o.Raw)
		}
		if !due {
			// A node that lost transactions is given them again at once,
			// whoever sent them: from the first nonce it says it lacks.
			// A node that cannot say is given the lowest few, which hold
			// every later one, once they have waited two passes (a node
			// that has them says so).
			lost := o.Nonce >= gap
			if gapErr != nil {
				lost = i < resendLowest && o.Nonce == mined+uint64(i) && (!isOwn || k.clock.Now().Sub(own.sentAt) >= 2*k.every)
			}
			if lost && o.Raw != nil {
				head := tx
				if head == nil {
					if head = decodeTx(o.Raw); head == nil {
						continue
					}
				}
				_ = k.sender.resend(ctx, head)
			}
			continue
		}
		if tx == nil {
			if err := k.sender.fill(ctx, o.Nonce, nil); err != nil {
				k.logger.WarnContext(ctx, "relayer could not fill an orphaned nonce", "network", k.network, "nonce", o.Nonce, "error", err)
			}
			continue
		}
		if tx.GasFeeCap().Cmp(baseFee) >= 0 {
			// Priced to be mined: it waits for room in a block, or the node
			// lost it. Sent again as it is (a node that has it says so);
			// raising its fees would only bid against our own.
			err := k.sender.resend(ctx, tx)
			if err == nil {
				if !isOwn {
					_ = k.nonces.adopt(ctx, o.Nonce, o.Raw)
				}
				continue
			}
			if !isFeeTooLow(err) {
				continue
			}
		}
		// Priced under the base fee: not minable now. The same call again
		// at fees the chain takes.
		if err := k.sender.replace(ctx, tx); err != nil {
			k.logger.WarnContext(ctx, "relayer replacement failed", "network", k.network, "nonce", o.Nonce, "error", err)
		}
	}
	return nil
}

// decodeTx decodes a recorded transaction; nil when there is none or it
// cannot be read.
func decodeTx(raw []byte) *types.Transaction {
	if raw == nil {
		return nil
	}
	tx := new(types.Transaction)
	if err := tx.UnmarshalBinary(raw); err != nil {
		return nil
	}
	return tx
}
