package store

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
)

// warmSQL reads, with no rows to find, the tables and indexes that a paid
// call's statements use: calls by id and by payment key, a stream's events,
// and River's available jobs in fetch order.
const warmSQL = `SELECT 1 FROM calls WHERE id = 'warm';
SELECT 1 FROM calls WHERE payment_key = 'warm';
SELECT 1 FROM events WHERE stream = 'warm' ORDER BY id;
SELECT id FROM river_job WHERE state = 'available' AND queue = 'warm' ORDER BY priority, scheduled_at, id LIMIT 1`

// Warm opens every connection pool may hold and runs on each the reads of
// warmSQL, so that each Postgres backend has loaded the descriptions of the
// service's hot tables and indexes before traffic comes. A new backend
// loads them on its first statements, and a process that starts under load
// brings many backends into use at once: at a steady 100 paid calls/s on
// two cores (docs/performance.md) the first second's slowest call took
// 160–440 ms with cold backends and 90–250 ms with warm ones. It returns
// once every connection is warm, or ctx's error.
func Warm(ctx context.Context, pool *pgxpool.Pool) error {
	n := int(pool.Config().MaxConns)
	conns := make([]*pgxpool.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Each holds its connection until all are warm: n distinct
			// connections.
			c, err := pool.Acquire(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			conns[i] = c
			_, errs[i] = c.Exec(ctx, warmSQL)
		})
	}
	wg.Wait()
	for _, c := range conns {
		if c != nil {
			c.Release()
		}
	}
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("warm connections: %w", err)
		}
	}
	return nil
}
