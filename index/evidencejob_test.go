package index

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

func TestEvidencePeriodicJobs(t *testing.T) {
	t.Parallel()
	periodic, err := ChainPeriodicJobs("* * * * *")
	require.NoError(t, err)
	require.Len(t, periodic, 1)
	_, err = ChainPeriodicJobs("now and then")
	require.ErrorContains(t, err, "INDEX_CHAIN_CRON")
	_, err = ChainPeriodicJobs("@every 10s")
	require.NoError(t, err)
	_, err = ChainPeriodicJobs("@every 1500ms")
	require.ErrorContains(t, err, "could not run as often as asked", "a schedule the job cannot keep is refused")
}

// TestEvidenceOneRunAtATime: a run started while another holds the chain
// reader's lock does nothing; once it is let go, the next run counts.
func TestEvidenceOneRunAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	_, err := db.Pool.Exec(ctx, `INSERT INTO index_resources (resource, host, updated_at, accepts) VALUES
		('https://one.test/pay', 'one.test', now(), '[{"network":"eip155:8453","asset":"x","amount":"1","pay_to":"0x00000000000000000000000000000000000000aa"}]')`)
	require.NoError(t, err)
	require.NoError(t, store.ChainWatch(ctx, db.Pool, "eip155:8453", []string{"0x00000000000000000000000000000000000000aa"}, 10, time.Now()))
	count := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM index_host_evidence`).Scan(&n))
		return n
	}
	reader := NewChainReader(&ChainReaderConfig{Pool: db.Pool})
	unlock, ok, err := store.ChainReaderLock(ctx, db.Pool)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok2, err := store.ChainReaderLock(ctx, db.Pool)
	require.NoError(t, err)
	require.False(t, ok2, "one holder at a time")
	_, err = reader.Run(ctx)
	require.NoError(t, err)
	require.Zero(t, count(), "another run holds the lock")
	unlock()
	run, err := reader.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, run.Hosts)
	require.Equal(t, 1, count())
}
