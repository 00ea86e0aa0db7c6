package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/x402d/x402d/store"
)

// LockTimeout is how long the service's swaps of a partition (the
// probes' removal, x402d archive) and the retention job's creation of
// partitions wait for each of their locks before they give up with
// ErrPartitionBusy, the log left as it was, to be tried again by the next
// run (Archive, PruneProbes, EnsurePartitions): appends to the event log
// queue behind a wait for the log's lock, so they wait at most this long.
const LockTimeout = 2 * time.Second

// ErrPartitionBusy is the error of a partition's swap that gave up waiting
// for a lock (LockTimeout) held by another transaction, a long reader of
// the event log for instance. Nothing was changed; a later run tries again.
var ErrPartitionBusy = errors.New("partition busy")

// beginner begins transactions.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// lockTimed begins transactions of pool whose locks wait at most timeout.
type lockTimed struct {
	pool    beginner
	timeout time.Duration
}

// Begin begins a transaction whose locks wait at most l.timeout.
func (l lockTimed) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if err := store.TxLockTimeoutSet(ctx, tx, l.timeout); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}

// lockEnded starts the swap of the ended partition name in tx: every lock
// tx takes from now on waits at most timeout, and the partition is locked
// against writes (SHARE), after those under way commit. What tx then counts
// in the partition is all it will ever hold until tx ends, so the counts a
// swap checks before it detaches the partition are those it drops.
func lockEnded(ctx context.Context, tx pgx.Tx, name string, timeout time.Duration) error {
	if err := store.TxLockTimeoutSet(ctx, tx, timeout); err != nil {
		return fmt.Errorf("lock %s: %w", name, err)
	}
	return store.EventPartitionLock(ctx, tx, name)
}

// busy marks err ErrPartitionBusy when it is a lock's timeout, or a
// deadlock with a transaction writing into the partition.
func busy(err error) error {
	if store.IsLockWait(err) {
		return fmt.Errorf("%w: %w", ErrPartitionBusy, err)
	}
	return err
}
