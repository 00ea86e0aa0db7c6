package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/dbtest"
)

// TestXIndexSortByCalls sorts the hosts by the paid calls over 30 days
// their listings report (Bazaar's quality figures), the most first, a
// reported zero before the hosts whose listings report none; and the list
// page shows the calls, payers and last call, "–" where none is reported.
func TestXIndexSortByCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	base := xindexServer(t, db)
	quality := map[string]map[string]any{
		"busy.example":  {"l30DaysTotalCalls": 900, "l30DaysUniquePayers": 40, "lastCalledAt": "2026-11-24T10:00:00Z"},
		"quiet.example": {"l30DaysTotalCalls": 3},
		"idle.example":  {"l30DaysTotalCalls": 0, "l30DaysUniquePayers": 0},
	}
	var items []map[string]any
	for _, host := range []string{"unknown-a.example", "busy.example", "quiet.example", "idle.example", "unknown-b.example"} {
		it := map[string]any{
			"resource": fmt.Sprintf("https://%s/api", host), "type": "http", "x402Version": 2,
			"accepts": []any{map[string]any{"scheme": "exact", "network": "eip155:8453", "amount": "1000", "asset": baseUSDC, "payTo": "0x1"}},
		}
		if q, ok := quality[host]; ok {
			it["quality"] = q
		}
		items = append(items, it)
	}
	c := index.NewCrawler(&index.CrawlerConfig{Pool: db.Pool, Sources: []string{pagedListing(t, items)}, Gap: -1})
	require.NoError(t, c.FullPass(ctx, nil))

	want := []string{"busy.example", "quiet.example", "idle.example", "unknown-a.example", "unknown-b.example"}
	var got struct{ Hosts []index.Host }
	getJSON(t, base+"/api/xindex/hosts?sort=calls", &got)
	var names []string
	for _, h := range got.Hosts {
		names = append(names, h.Host)
	}
	require.Equal(t, want, names)
	require.Equal(t, int64(0), *got.Hosts[2].Quality.Calls30d, "a reported zero")
	require.Nil(t, got.Hosts[3].Quality, "none reported: null")

	resp, err := http.Get(base + "/x402-index?sort=calls")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	page := string(body)
	var order []int
	for _, h := range want {
		order = append(order, strings.Index(page, `<td class="host"><a href="/x402-index/hosts/`+h+`">`))
	}
	require.IsIncreasing(t, order, "the page in the order of the calls")
	require.Contains(t, page, `class="on" title="paid calls over 30 days`)
	for _, cell := range []string{
		`<td class="num quality">900 <span class="sample nowrap" title="the most distinct payers of any one service">· 40 payers</span> <span class="sample nowrap">· last 2026-11-24</span></td>`,
		`<td class="num quality">3</td>`,
		`<td class="num quality">0 <span class="sample nowrap" title="the most distinct payers of any one service">· 0 payers</span></td>`,
	} {
		require.Contains(t, page, cell)
	}
	require.Equal(t, 2, strings.Count(page, `<td class="num quality">–</td>`), "the hosts no listing reports: not measured")
}

// TestXIndexSortKeysDocumented: the OpenAPI document offers the hosts
// list's sorts, calls among them.
func TestXIndexSortKeysDocumented(t *testing.T) {
	t.Parallel()
	raw, err := openAPIDocument(nil, nil, "http://127.0.0.1")
	require.NoError(t, err)
	var doc struct {
		Paths map[string]struct {
			Get struct {
				Parameters []struct {
					Name   string
					Schema struct{ Enum []string }
				}
			}
		}
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	var sorts []string
	for _, p := range doc.Paths["/api/xindex/hosts"].Get.Parameters {
		if p.Name == "sort" {
			sorts = p.Schema.Enum
		}
	}
	require.Equal(t, index.SortKeys, sorts)
	require.Contains(t, sorts, "calls")
}
