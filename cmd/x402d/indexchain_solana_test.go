package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/svmtest"
	"github.com/x402d/x402d/x402"
)

// TestSolanaIndexReadsOwnSales runs `x402d serve` offering Solana on a
// LiteSVM node with its own catalogue as the index's listing: the paid
// calls' Solana settlements are read by the index's chain job (run by the
// worker on INDEX_CHAIN_CRON, here every 2 seconds, through RPC_URL_SOLANA
// at finalized) and counted for the service's own host, each a settlement
// whose fee its fee payer paid.
func TestSolanaIndexReadsOwnSales(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	addr := freeAddr(t)
	origin := "http://" + addr
	env := map[string]string{"LISTEN_ADDR": addr, "PUBLIC_URL": origin, "INDEX_SOURCES": origin + "/api/x402/discovery/resources",
		"INDEX_CHAIN_CRON": "@every 2s"}
	s := startSolanaService(ctx, t, env)

	// The index lists the service's own operations (the crawl at start may
	// have come before the API listened).
	crawl := map[string]string{"DATABASE_URL": s.db.URL, "DB_MAX_CONNS": testMaxConns, "LOG_LEVEL": "warn",
		"FETCH_ALLOW_CIDRS": "127.0.0.1/32", "INDEX_SOURCES": env["INDEX_SOURCES"]}
	require.NoError(t, run(ctx, []string{"index", "crawl"}, func(k string) string { return crawl[k] }, io.Discard, io.Discard, &options{}))
	var listed struct{ Hosts []index.Host }
	getJSON(t, s.base+"/api/xindex/hosts", &listed)
	require.Len(t, listed.Hosts, 1, "the service's own host")
	host := listed.Hosts[0].Host
	require.Nil(t, listed.Hosts[0].Evidence, "nothing read yet")

	// Reading begins when a run first finds the listed payTo: pay after.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM index_svm_cursors`).Scan(&n))
		return n == 1
	}, 90*time.Second, 200*time.Millisecond, "the chain job did not read the listed Solana payTo")
	const calls = 3
	payer := svmtest.PayerKey(5)
	var amount uint64
	for i := range calls {
		req := solanaRequirement(t, s.base, "diff")
		tx := s.node.PaymentTransaction(ctx, req, payer, fmt.Sprintf("own sale %d", i))
		status, body, settled := postPaid(t, s.base, "diff", `{"a":"x\n","b":"y\n"}`, svmtest.PaymentHeader(t, req, tx))
		require.Equal(t, http.StatusOK, status, body)
		require.True(t, settled.Success)
		a, err := strconv.ParseUint(req.Amount, 10, 64)
		require.NoError(t, err)
		amount += a
	}

	// Once finalized (32 slots), a run counts them.
	var d index.HostDetail
	require.Eventually(t, func() bool {
		getJSON(t, s.base+"/api/xindex/hosts/"+host, &d)
		return d.Host.Evidence != nil && d.Host.Evidence.Last30d.Transactions >= calls
	}, 90*time.Second, time.Second, "the chain job did not count the settlements")
	e := d.Host.Evidence
	volume := fmt.Sprintf("%d.%06d", amount/1_000_000, amount%1_000_000)
	require.Equal(t, index.EvidenceWindow{Transactions: calls, VolumeUSDC: volume, Payers: 1}, e.Last30d)
	require.Equal(t, int64(calls), e.Settlements30d, "the payer signed, the service's fee payer sent")
	require.Equal(t, []index.EvidenceSender{{Address: s.feePayer.PublicKey().String(), Class: index.SenderOther, Transactions: calls, VolumeUSDC: volume}}, e.Senders)
	require.Equal(t, []string{x402.SolanaMainnet}, e.Networks)
	require.Equal(t, payer.PublicKey().String(), *e.Wash.TopPayer)
	require.Len(t, d.PayTos, 1)
	require.Equal(t, s.payTo.String(), d.PayTos[0].PayTo)

	// The resources search shows each of the host's resources with them.
	var found index.ResourcesAnswer
	getJSON(t, s.base+"/api/xindex/resources?network=solana&limit=100", &found)
	require.NotEmpty(t, found.Resources)
	for _, r := range found.Resources {
		require.Equal(t, host, r.Host)
		require.NotNil(t, r.Evidence.Transactions30d, r.Resource)
		require.Equal(t, int64(calls), *r.Evidence.Transactions30d, r.Resource)
		require.Equal(t, int64(1), *r.Evidence.Payers30d, r.Resource)
	}
}
