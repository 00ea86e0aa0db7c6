package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

// TestXIndexEvidence serves the hosts' on-chain figures: in the hosts list
// (sorted by volume, filtered by payers, volume and top payer's share), in
// a host's page as JSON and HTML, each answer as the OpenAPI document
// says; a host whose payTo is not read is null, not zero. The transfers
// are recorded as the chain reader records them (index's anvil test reads
// them from a chain); its run counts the figures.
func TestXIndexEvidence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	base := xindexServer(t, db)
	const network = "eip155:8453"
	payTo := func(host string) string { return fmt.Sprintf("0x%040x", len(host)*1000+int(host[5])) }
	var items []map[string]any
	for _, host := range []string{"shop-a.example", "shop-b.example", "shop-c.example", "shop-d.example"} {
		items = append(items, map[string]any{
			"resource": "https://" + host + "/api", "type": "http", "x402Version": 2,
			"accepts": []any{map[string]any{"scheme": "exact", "network": network, "amount": "1000", "asset": baseUSDC, "payTo": payTo(host)}},
		})
	}
	c := index.NewCrawler(&index.CrawlerConfig{Pool: db.Pool, Sources: []string{pagedListing(t, items)}, Gap: -1})
	require.NoError(t, c.FullPass(ctx, nil))

	// a, b and c are read from block 100 (d is not): a and c from an hour
	// ago (each window only partly read), b from 8 days ago (its 24 h and
	// 7 d windows read whole, not its 30 d); a has three payers, b one, c
	// none.
	now := time.Now()
	watched := []string{payTo("shop-a.example"), payTo("shop-b.example"), payTo("shop-c.example")}
	require.NoError(t, store.ChainWatch(ctx, db.Pool, network, watched[1:2], 100, now.Add(-8*24*time.Hour)))
	require.NoError(t, store.ChainWatch(ctx, db.Pool, network, watched, 100, now.Add(-time.Hour)))
	transfer := func(i int, payTo, payer string, amount string, ago time.Duration) store.Transfer {
		return store.Transfer{Network: network, TxHash: fmt.Sprintf("0x%064x", i), Block: uint64(100 + i), BlockHash: fmt.Sprintf("0x%064x", 1000+i),
			At: now.Add(-ago), Payer: payer, PayTo: payTo, Amount: amount, Sender: "0x00000000000000000000000000000000000000fa", EIP3009: true}
	}
	require.NoError(t, store.TransfersAdd(ctx, db.Pool, []store.Transfer{
		transfer(1, watched[0], "0x0000000000000000000000000000000000000001", "10000", time.Minute),
		transfer(2, watched[0], "0x0000000000000000000000000000000000000002", "20000", 2*24*time.Hour),
		transfer(3, watched[0], "0x0000000000000000000000000000000000000003", "30000", 3*24*time.Hour),
		transfer(4, watched[1], "0x0000000000000000000000000000000000000004", "1000000", 10*24*time.Hour),
	}))
	_, err := index.NewChainReader(&index.ChainReaderConfig{Pool: db.Pool}).Run(ctx)
	require.NoError(t, err)

	disc, _ := discoveryServer(t)
	_, doc := get(t, disc+"/openapi.json")
	validate := openAPISchemas(t, doc)
	hosts := func(query string) []index.Host {
		t.Helper()
		status, body := get(t, base+"/api/xindex/hosts?"+query)
		require.Equal(t, http.StatusOK, status, string(body))
		require.NoError(t, validate("IndexHosts", body), string(body))
		var got struct{ Hosts []index.Host }
		getJSON(t, base+"/api/xindex/hosts?"+query, &got)
		return got.Hosts
	}
	names := func(hs []index.Host) []string {
		out := []string{}
		for _, h := range hs {
			out = append(out, h.Host)
		}
		return out
	}

	all := hosts("sort=volume_30d")
	require.Equal(t, []string{"shop-b.example", "shop-a.example", "shop-c.example", "shop-d.example"}, names(all))
	a := all[1].Evidence
	require.NotNil(t, a)
	require.Equal(t, index.EvidenceWindow{Transactions: 1, VolumeUSDC: "0.010000", Payers: 1}, a.Last24h)
	require.Equal(t, index.EvidenceWindow{Transactions: 3, VolumeUSDC: "0.060000", Payers: 3}, a.Last7d)
	require.Equal(t, a.Last7d, a.Last30d)
	require.InDelta(t, 0.5, *a.Wash.TopPayerShare, 1e-9)
	require.Equal(t, []index.EvidenceSender{{Address: "0x00000000000000000000000000000000000000fa", Class: index.SenderOther, Transactions: 3, VolumeUSDC: "0.060000"}}, a.Senders)
	require.Equal(t, index.EvidenceWindow{Transactions: 0, VolumeUSDC: "0.000000", Payers: 0}, all[2].Evidence.Last30d, "read, nothing received: a measured zero")
	require.Nil(t, all[2].Evidence.Wash.TopPayerShare, "no volume: no share")
	require.Nil(t, all[3].Evidence, "not read: null")
	// Windows that began before an address was first read are not
	// complete.
	b := all[0].Evidence
	require.Equal(t, index.EvidenceWindow{Transactions: 1, VolumeUSDC: "1.000000", Payers: 1, Complete: false}, b.Last30d)
	require.True(t, b.Last24h.Complete)
	require.True(t, b.Last7d.Complete)
	require.WithinDuration(t, now.Add(-8*24*time.Hour), b.FullyMeasuredSince, time.Second)
	require.WithinDuration(t, now.Add(-time.Hour), a.FullyMeasuredSince, time.Second)
	// The payers are not looked at for a funding yet: not known (null),
	// never 0; c has no payer: 0.
	require.Nil(t, a.Wash.FundedPayers, "a's payers are not checked yet")
	require.Nil(t, b.Wash.FundedPayers)
	require.Equal(t, new(int64(0)), all[2].Evidence.Wash.FundedPayers, "no payer: none funded")
	require.Equal(t, []string{"shop-a.example", "shop-b.example", "shop-c.example", "shop-d.example"}, names(hosts("sort=volume_24h"))[:4])

	for query, want := range map[string][]string{
		"min_payers=2":                     {"shop-a.example"},
		"min_payers=1":                     {"shop-a.example", "shop-b.example"},
		"min_volume_usdc=0.06":             {"shop-a.example", "shop-b.example"},
		"min_volume_usdc=0.5":              {"shop-b.example"},
		"min_volume_usdc=0":                {"shop-a.example", "shop-b.example", "shop-c.example"},
		"max_top_payer_share=0.5":          {"shop-a.example"},
		"max_top_payer_share=1":            {"shop-a.example", "shop-b.example"},
		"min_payers=1&min_volume_usdc=0.1": {"shop-b.example"},
	} {
		require.Equal(t, want, names(hosts("sort=host&"+query)), query)
	}
	for _, bad := range []string{"min_payers=-1", "min_payers=x", "min_volume_usdc=abc", "min_volume_usdc=0.1234567", "min_volume_usdc=-1",
		"max_top_payer_share=2", "max_top_payer_share=-0.1", "max_top_payer_share=x", "max_top_payer_share=NaN"} {
		getError(t, base+"/api/xindex/hosts?"+bad, http.StatusBadRequest, "invalid_request")
	}

	// The resources search sorts and filters by its host's figures as the
	// hosts list does, those not measured last.
	resources := func(query string) []string {
		t.Helper()
		status, body := get(t, base+"/api/xindex/resources?"+query)
		require.Equal(t, http.StatusOK, status, string(body))
		require.NoError(t, validate("IndexResources", body), string(body))
		var got index.ResourcesAnswer
		getJSON(t, base+"/api/xindex/resources?"+query, &got)
		out := []string{}
		for _, r := range got.Resources {
			out = append(out, r.Host)
		}
		return out
	}
	for query, want := range map[string][]string{
		"sort=payers_30d":                {"shop-a.example", "shop-b.example", "shop-c.example", "shop-d.example"},
		"sort=volume_30d":                {"shop-b.example", "shop-a.example", "shop-c.example", "shop-d.example"},
		"sort=transactions_30d":          {"shop-a.example", "shop-b.example", "shop-c.example", "shop-d.example"},
		"sort=payers_30d&q=shop":         {"shop-a.example", "shop-b.example", "shop-c.example", "shop-d.example"},
		"sort=url&min_payers=1":          {"shop-a.example", "shop-b.example"},
		"sort=url&min_payers=2":          {"shop-a.example"},
		"sort=volume_30d&min_payers=1":   {"shop-b.example", "shop-a.example"},
		"q=shop&min_payers=1&sort=url":   {"shop-a.example", "shop-b.example"},
		"q=shop&min_payers=1":            {"shop-a.example", "shop-b.example"},
		"sort=url&min_payers=0":          {"shop-a.example", "shop-b.example", "shop-c.example", "shop-d.example"},
		"sort=transactions_30d&limit=10": {"shop-a.example", "shop-b.example", "shop-c.example", "shop-d.example"},
	} {
		require.Equal(t, want, resources(query), query)
	}
	var found index.ResourcesAnswer
	getJSON(t, base+"/api/xindex/resources?sort=payers_30d", &found)
	require.Equal(t, store.ResourceEvidence{Transactions30d: new(int64(3)), VolumeUSDC30d: new(0.06), Payers30d: new(int64(3)), Complete30d: new(false)},
		found.Resources[0].Evidence, "a's 30 days are read since an hour ago")
	require.Equal(t, store.ResourceEvidence{}, found.Resources[3].Evidence, "d not measured: null")
	for _, bad := range []string{"min_payers=-1", "min_payers=x", "sort=payers"} {
		getError(t, base+"/api/xindex/resources?"+bad, http.StatusBadRequest, "invalid_request")
	}

	for _, host := range []string{"shop-a.example", "shop-d.example"} {
		status, body := get(t, base+"/api/xindex/hosts/"+host)
		require.Equal(t, http.StatusOK, status)
		require.NoError(t, validate("IndexHostDetail", body), string(body))
	}
	var d index.HostDetail
	getJSON(t, base+"/api/xindex/hosts/shop-a.example", &d)
	require.Equal(t, []index.PayToEvidence{{Network: network, PayTo: watched[0], Evidence: d.PayTos[0].Evidence}}, d.PayTos)
	require.Equal(t, a.Last30d, d.PayTos[0].Evidence.Last30d)

	page := getPage(t, base+"/x402-index/hosts/shop-a.example")
	require.Contains(t, string(page), `<b id="volume-30d">0.060000</b>`)
	require.Contains(t, string(page), `<span id="funded-payers">payers funded by the seller: not known yet`)
	require.Contains(t, string(page), `<div class="card" id="windows"><b>partial</b><span>the 24 h, 7 d, 30 d windows count only since `+
		a.FullyMeasuredSince.UTC().Format("2006-01-02 15:04")+` UTC`)
	require.Contains(t, string(page), `<b id="payers-30d">3</b>`)
	require.Contains(t, string(page), `<tr class="sender other">`)
	page = getPage(t, base+"/x402-index/hosts/shop-d.example")
	require.Contains(t, string(page), `<p id="evidence"><span class="badge unmeasured">not measured</span>`)
	page = getPage(t, base+"/x402-index?sort=volume_30d")
	require.Less(t, strings.Index(string(page), "shop-b.example"), strings.Index(string(page), "shop-a.example"))
	require.Contains(t, string(page), `<td class="num evidence">0.060000 <span class="sample nowrap">· 3 payers</span></td>`)
	// The list page's sort links keep the search and its filters, and its
	// form offers the filters on the on-chain figures, as asked.
	page = getPage(t, base+"/x402-index?q=shop&sort=host&min_payers=1&min_volume_usdc=0.05&max_top_payer_share=1&quote_matches_listing=null")
	require.Equal(t, 2, strings.Count(string(page), `<tr class="host-row">`), "a and b")
	for _, key := range []string{"host", "services", "price", "uptime", "latency", "calls", "volume_30d", "payers_30d", "checked"} {
		require.Contains(t, string(page), `href="/x402-index?max_top_payer_share=1&amp;min_payers=1&amp;min_volume_usdc=0.05&amp;q=shop&amp;quote_matches_listing=null&amp;sort=`+key+`"`, key)
	}
	for _, input := range []string{
		`<input type="number" name="min_payers" value="1"`,
		`<input type="text" name="min_volume_usdc" value="0.05"`,
		`<input type="number" class="wide" name="max_top_payer_share" value="1"`,
	} {
		require.Contains(t, string(page), input)
	}
	page = getPage(t, base+"/x402-index?sort=payers_30d")
	require.Contains(t, string(page), `href="/x402-index?sort=volume_30d"`, "no filter asked, none kept")
	require.Contains(t, string(page), `<input type="number" name="min_payers" value=""`)
	page = getPage(t, base+"/x402-index/hosts/shop-b.example")
	require.Contains(t, string(page), `<div class="card" id="windows"><b>partial</b><span>the 30 d window counts only since `)

	// Once every payer of the 30 days is looked at, the count is known: a's
	// first payer was funded by the seller, its others not.
	require.NoError(t, store.ChainPayersChecked(ctx, db.Pool, network, []store.ChainPayer{
		{PayTo: watched[0], Payer: "0x0000000000000000000000000000000000000001", FundedBlock: 99},
		{PayTo: watched[0], Payer: "0x0000000000000000000000000000000000000002"},
	}))
	recount := func() {
		t.Helper()
		_, err := index.NewChainReader(&index.ChainReaderConfig{Pool: db.Pool, StaleAfter: time.Nanosecond}).Run(ctx)
		require.NoError(t, err)
	}
	recount()
	getJSON(t, base+"/api/xindex/hosts/shop-a.example", &d)
	require.Nil(t, d.Host.Evidence.Wash.FundedPayers, "one payer of the 30 days is still not looked at")
	require.NoError(t, store.ChainPayersChecked(ctx, db.Pool, network, []store.ChainPayer{{PayTo: watched[0], Payer: "0x0000000000000000000000000000000000000003"}}))
	recount()
	getJSON(t, base+"/api/xindex/hosts/shop-a.example", &d)
	require.Equal(t, new(int64(1)), d.Host.Evidence.Wash.FundedPayers)
	page = getPage(t, base+"/x402-index/hosts/shop-a.example")
	require.Contains(t, string(page), `<span id="funded-payers">1 payers funded by the seller</span>`)
	for _, host := range []string{"shop-a.example", "shop-b.example"} {
		status, body := get(t, base+"/api/xindex/hosts/"+host)
		require.Equal(t, http.StatusOK, status)
		require.NoError(t, validate("IndexHostDetail", body), string(body))
	}
}

// getPage returns the HTML page at url, answered 200.
func getPage(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
	return body
}
