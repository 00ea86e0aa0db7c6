package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/x402/devchain"
)

// TestAnvil_IndexReadsOwnSales runs `x402d serve` settling in rpc mode on
// anvil with its own catalogue as the index's listing: the paid calls'
// settlements are read from the chain by the index's chain job (run by the
// worker on INDEX_CHAIN_CRON, here every 2 seconds) and counted for the service's own host, each
// an EIP-3009 settlement sent by its relayer.
func TestAnvil_IndexReadsOwnSales(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, nil)
	db := dbtest.Schema(ctx, t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	origin := "http://" + addr
	env := anvilEnv(t, node, db)
	env["DB_MAX_CONNS"], env["LOG_LEVEL"], env["LISTEN_ADDR"], env["PUBLIC_URL"] = testMaxConns, "warn", addr, origin
	env["FINALITY_EIP155_8453"], env["FETCH_ALLOW_CIDRS"] = "receipt", "127.0.0.1/32"
	env["INDEX_SOURCES"] = origin + "/api/x402/discovery/resources"
	env["INDEX_CHAIN_CRON"] = "@every 2s"
	base := startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})

	// The index lists the service's own operations (the crawl at start may
	// have come before the API listened).
	require.NoError(t, run(ctx, []string{"index", "crawl"}, func(k string) string { return env[k] }, io.Discard, io.Discard, &options{}))
	var listed struct{ Hosts []index.Host }
	getJSON(t, base+"/api/xindex/hosts", &listed)
	require.Len(t, listed.Hosts, 1, "the service's own host")
	host := listed.Hosts[0].Host
	// The chain job (at start and every 2 s) may have read the payTo
	// already: nothing is counted before the first payment.
	if ev := listed.Hosts[0].Evidence; ev != nil {
		require.Zero(t, ev.Last30d.Transactions, "nothing counted before paying")
	}

	// Reading begins when a run of the chain job (every 2 seconds, and at
	// start) first finds the listed payTo: pay after it did.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM index_chain_watch`).Scan(&n))
		return n == 1
	}, 90*time.Second, 200*time.Millisecond, "the chain job did not read the listed payTo")
	const calls = 3
	payDiffs(ctx, t, base, devPayer(t, 6), calls)

	// The next run counts them.
	var d index.HostDetail
	require.Eventually(t, func() bool {
		getJSON(t, base+"/api/xindex/hosts/"+host, &d)
		return d.Host.Evidence != nil && d.Host.Evidence.Last30d.Transactions >= calls
	}, 90*time.Second, time.Second, "the chain job did not count the settlements")
	e := d.Host.Evidence
	require.Equal(t, index.EvidenceWindow{Transactions: calls, VolumeUSDC: fmt.Sprintf("0.0%d0000", calls), Payers: 1}, e.Last30d)
	require.Equal(t, int64(calls), e.Settlements30d)
	relayer := strings.ToLower(devAddress(t, devchain.RelayerAccount).Hex())
	require.Equal(t, []index.EvidenceSender{{Address: relayer, Class: index.SenderOther, Transactions: calls, VolumeUSDC: e.Last30d.VolumeUSDC}}, e.Senders)
	require.Equal(t, []string{"eip155:8453"}, e.Networks)
	require.Len(t, d.PayTos, 1)
	require.Equal(t, strings.ToLower(devAddress(t, devchain.PayToAccount).Hex()), d.PayTos[0].PayTo)
}
