//go:build scenario

package api

// The on-chain evidence of the scale benchmarks' datasets (go tool task
// bench:index, bench:resources): 30 days of settlements into 1,000 sellers.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

// The evidence of a scale dataset: its sellers, the days of transfers and
// how many a day each seller receives (issue 45: 30 days at 100 a day for
// 1,000 sellers), on Base, whose blocks come every 2 seconds.
const (
	scaleSellers     = 1000
	scaleDays        = 30
	scalePerDay      = 100
	scaleNetwork     = "eip155:8453"
	scaleBlockTime   = 2 * time.Second
	scaleSinceBlock  = 30_000_000
	scaleWashEvery   = 25 // one seller in 25 washes its volume
	scaleSelfSettles = 50 // one seller in 50 sends its settlements itself
)

// scaleFacilitators are the senders of most settlements: known
// facilitators (index.KnownFacilitators), each seller using one of them
// mostly.
var scaleFacilitators = []string{"0x8f5cb67b49555e614892b7233cfddebfb746e531", "0x67b9ce703d9ce658d7c4ac3c289cea112fe662af",
	"0xc6699d2aada6c36dfea5c248dd70f9cb0235cb63", "0xb2bd29925cbbcea7628279c91945ca5b98bf371b", "0x97acce27d5069544480bde0f04d9f47d7422a016"}

// scaleTransfers writes $6 transfers a day for $5 days into each of the
// first $2 payTo addresses watched on network $1 in the order of their
// md5 (the sellers, s = 1, 2, ...), in the order of their blocks: a block
// every $10 seconds from block $3 at $4, the day's transfers evenly apart
// (864 seconds at 100 a day) give or take a random part, beginning an hour
// after $4.
// Payers are drawn from a pool of 20 to 10,240 (20 << s % 10) with a
// skew (payer j of the pool with j = pool size × r³: a few pay often, and
// the first of every pool pay many sellers). Each seller is paid its own
// price (0.001 to 0.1 USDC). Senders: a known facilitator ($7, each seller
// mostly one, EIP-3009), else one transfer in 20 a plain transfer sent by
// its payer and one in 50 an unknown relayer; one seller in $9
// (scaleSelfSettles) sends its settlements itself. One seller in $8
// (scaleWashEvery) washes: 70% of its transfers come from three payers of
// its own (which it funded: scaleChainPayers), 5% from its payTo itself.
const scaleTransfers = `
INSERT INTO index_transfers (network, tx_hash, log_index, block, block_hash, at, payer, pay_to, amount, sender, eip3009)
SELECT $1, '0x' || md5(s || '/' || n) || md5(n || '/' || s), 1 + 2 * (r.h1 % 4), b.block,
	'0x' || md5('b' || b.block) || md5('h' || b.block), $4::timestamptz + (b.block - $3::bigint) * $10::integer * interval '1 second', p.payer, sl.pay_to,
	(1 + s % 100) * 1000,
	CASE WHEN p.payer = sl.pay_to OR s % $9::integer = 7 THEN sl.pay_to WHEN r.r4 < 0.05 THEN p.payer
		WHEN r.r4 < 0.07 THEN '0x' || lpad(to_hex(61184 + s % 7), 40, '0')
		ELSE ($7::text[])[1 + (s + (r.r4 > 0.9)::integer) % cardinality($7::text[])] END,
	p.payer <> sl.pay_to AND (r.r4 >= 0.05 OR s % $9::integer = 7)
FROM (SELECT (row_number() OVER (ORDER BY md5(pay_to)))::integer AS s, pay_to FROM index_chain_watch WHERE network = $1
		ORDER BY md5(pay_to) LIMIT $2) sl,
	generate_series(0, $5::integer * $6::integer - 1) n,
	LATERAL (SELECT hashint8(s * 1000003::bigint + n) & 2147483647 AS h1) h,
	LATERAL (SELECT h.h1, (hashint8(h.h1) & 2147483647) / 2147483648.0 AS r2,
		(hashint8(h.h1::bigint + 1) & 2147483647) / 2147483648.0 AS r3, (hashint8(h.h1::bigint + 2) & 2147483647) / 2147483648.0 AS r4) r,
	LATERAL (SELECT $3::bigint + (3600 + (n / $6::integer) * 86400 + (n % $6::integer) * (86400 / $6::integer)
		+ r.h1 % (86400 / $6::integer)) / $10::integer AS block) b,
	LATERAL (SELECT CASE WHEN s % $8::integer = 0 AND r.r2 < 0.05 THEN sl.pay_to
		WHEN s % $8::integer = 0 AND r.r2 < 0.75 THEN '0xa5a5' || lpad(to_hex(s * 4 + r.h1 % 3), 36, '0')
		ELSE '0xba' || lpad(to_hex(floor((20 << s % 10) * r.r3 ^ 3)::integer), 38, '0') END AS payer) p
ORDER BY b.block, s`

// scaleChainPayers records each payer's first payment of each payTo, as
// the chain reader does, each looked at for a funding: the wash payers
// (0xa5a5…) were funded by their seller 50 blocks before.
const scaleChainPayers = `
INSERT INTO index_chain_payers (network, pay_to, payer, first_block, checked, funded_block)
SELECT network, pay_to, payer, min(block), true, CASE WHEN payer LIKE '0xa5a5%' THEN min(block) - 50 END
FROM index_transfers GROUP BY network, pay_to, payer`

// scaleEvidenceKey is what the evidence of a dataset is made of, for its
// cache key (dbtest.Cache).
var scaleEvidenceKey = scaleTransfers + scaleChainPayers

// generateEvidence gives the index in db (its hosts and resources made)
// the chain reader's evidence of 30 days: every payTo of its live
// resources on scaleNetwork watched from scaleSinceBlock, 30 days and an
// hour ago (store.ChainPayTos, store.ChainWatch), the network's cursor at
// its head, 3,000,000 transfers into scaleSellers of them
// (scaleTransfers) and their payers (scaleChainPayers); then each host's
// figures counted as the chain reader counts them after a run (runs of
// index.ChainReader with no network to read, until no host is due).
func generateEvidence(ctx context.Context, b *testing.B, db *dbtest.DB) {
	began := time.Now()
	now := time.Now()
	since := now.Add(-(scaleDays*24 + 1) * time.Hour)
	payTos, err := store.ChainPayTos(ctx, db.Pool, scaleNetwork)
	require.NoError(b, err)
	require.NoError(b, store.ChainWatch(ctx, db.Pool, scaleNetwork, payTos, scaleSinceBlock, since))
	head := scaleSinceBlock + uint64(now.Sub(since)/scaleBlockTime)
	require.NoError(b, store.ChainCursorSet(ctx, db.Pool, &store.ChainCursor{Network: scaleNetwork, Block: head, BlockHash: fmt.Sprintf("0x%064x", head),
		StartedBlock: scaleSinceBlock, StartedAt: since}, now))
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(b, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET work_mem = '256MB'")
	require.NoError(b, err)
	tag, err := conn.Exec(ctx, scaleTransfers, scaleNetwork, scaleSellers, scaleSinceBlock, since, scaleDays, scalePerDay, scaleFacilitators,
		scaleWashEvery, scaleSelfSettles, int(scaleBlockTime/time.Second))
	require.NoError(b, err)
	_, err = conn.Exec(ctx, scaleChainPayers)
	require.NoError(b, err)
	_, err = conn.Exec(ctx, "VACUUM ANALYZE index_transfers, index_chain_payers, index_chain_watch")
	require.NoError(b, err)
	b.Logf("watched %d payTo addresses; %d transfers into %d sellers written in %.0f s", len(payTos), tag.RowsAffected(),
		min(scaleSellers, len(payTos)), time.Since(began).Seconds())

	began = time.Now()
	reader := index.NewChainReader(&index.ChainReaderConfig{Pool: db.Pool})
	hosts, runs := 0, 0
	for {
		run, err := reader.Run(ctx)
		require.NoError(b, err)
		if run.Hosts == 0 {
			break
		}
		hosts += run.Hosts
		runs++
	}
	_, err = db.Pool.Exec(ctx, "VACUUM ANALYZE index_host_evidence, index_resource_search")
	require.NoError(b, err)
	b.Logf("figures of %d hosts counted in %d runs, %.0f s", hosts, runs, time.Since(began).Seconds())
}

// scaleSellerHosts returns the hosts of the dataset's sellers: those
// naming a payTo with transfers, the most paid first.
func scaleSellerHosts(ctx context.Context, b *testing.B, db *dbtest.DB) []string {
	rows, err := db.Pool.Query(ctx, `SELECT host FROM index_host_evidence WHERE transactions_30d > 0 ORDER BY volume_30d DESC, host`)
	require.NoError(b, err)
	hosts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(b, err)
	require.NotEmpty(b, hosts)
	return hosts
}

// timeEvidenceRefresh times a run of the chain reader that counts again
// the figures of the hosts of n sellers (those of sellers, drawn in turn),
// reps times, as a run does after reading their new transfers: the hosts
// due, their payTo addresses, their figures and their keeping (with the
// copy of their payers onto their resources' search rows). It returns
// the runs' durations, sorted.
func timeEvidenceRefresh(ctx context.Context, b *testing.B, db *dbtest.DB, sellers []string, n, reps int) []time.Duration {
	// No host is stale but those marked so: the dataset is at most a day
	// old (dbtest.Cache).
	reader := index.NewChainReader(&index.ChainReaderConfig{Pool: db.Pool, StaleAfter: 48 * time.Hour, RefreshLimit: max(n, 2000)})
	var took []time.Duration
	for i := range reps {
		var hosts []string
		for j := range n {
			hosts = append(hosts, sellers[(i*n+j)%len(sellers)])
		}
		_, err := db.Pool.Exec(ctx, `UPDATE index_host_evidence SET refreshed_at = '-infinity' WHERE host = ANY($1)`, hosts)
		require.NoError(b, err)
		t0 := time.Now()
		run, err := reader.Run(ctx)
		took = append(took, time.Since(t0))
		require.NoError(b, err)
		require.Equal(b, len(hosts), run.Hosts)
	}
	slices.Sort(took)
	return took
}
