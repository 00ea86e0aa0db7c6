package store

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// warmSQL reads, with no rows to find, the tables and indexes that a paid
// call's statements use: calls by id and by payment key, a stream's events,
// and River's available jobs in fetch order.
const warmSQL = `SELECT 1 FROM calls WHERE id = 'warm';
SELECT 1 FROM calls WHERE payment_key = 'warm';
SELECT 1 FROM events WHERE stream = 'warm' ORDER BY id;
SELECT id FROM river_job WHERE state = 'available' AND queue = 'warm' ORDER BY priority, scheduled_at, id LIMIT 1`

// OpenWarm connects a pool of cfg that keeps its cfg.MaxConns connections
// open and warm: every connection it opens runs the reads of warmSQL before
// the pool hands it out, so that its Postgres backend has loaded the
// descriptions of the service's hot tables and indexes before a call's
// statements need them. A new backend loads them on its first statements,
// and a process that starts under load brings many backends into use at
// once, slowing the first second's calls (docs/performance.md, Tuning
// choices). Connections that replace others later (pgxpool
// retires each after cfg.MaxConnLifetime, and one that broke) are warmed
// the same way. Without cfg.MaxConnLifetimeJitter, connections are retired
// at times spread over a second MaxConnLifetime (pgxpool draws the extra in
// whole seconds): opened together, they would all be replaced at once, and
// the calls of that moment would wait while every new backend connects.
// The schema must be migrated. OpenWarm returns once every connection is
// open and warm, or the first error; cfg is not changed.
func OpenWarm(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	cfg = cfg.Copy()
	cfg.MinConns = cfg.MaxConns
	if cfg.MaxConnLifetimeJitter == 0 {
		cfg.MaxConnLifetimeJitter = cfg.MaxConnLifetime
	}
	next := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if next != nil {
			if err := next(ctx, conn); err != nil {
				return err
			}
		}
		if _, err := conn.Exec(ctx, warmSQL); err != nil {
			return fmt.Errorf("warm connection: %w", err)
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open warm pool: %w", err)
	}
	if err := fill(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open warm pool: %w", err)
	}
	return pool, nil
}

// fill returns once pool holds as many open connections as it may.
func fill(ctx context.Context, pool *pgxpool.Pool) error {
	n := int(pool.Config().MaxConns)
	conns := make([]*pgxpool.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		// Each holds its connection until all are open: n distinct
		// connections.
		wg.Go(func() { conns[i], errs[i] = pool.Acquire(ctx) })
	}
	wg.Wait()
	for _, c := range conns {
		if c != nil {
			c.Release()
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
