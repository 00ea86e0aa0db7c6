package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/x402"
)

// bazaarClientReport is what compat/bazaar_client.mjs reports.
type bazaarClientReport struct {
	Listed []index.BazaarResource
	Pages  []struct {
		X402Version int
		Pagination  index.BazaarPagination
		Count       int
	}
	ByPayTo     index.BazaarList
	MCP         index.BazaarList
	ByExtension index.BazaarList
	Found       []index.BazaarResource
	SearchPages []struct {
		X402Version    int
		PartialResults bool
		Pagination     struct {
			Limit  int
			Cursor *string
		}
	}
	Filtered struct {
		All, ByExtension, OtherPayTo, OtherNetwork, OtherScheme, MCP index.BazaarSearch
	}
	Refused string
}

// TestBazaarOfficialClient serves an index crawled from a local listing
// and has the official Bazaar client (withBazaar(new
// HTTPFacilitatorClient({url})) from @x402/extensions 2.27.0 and
// @x402/core) list it page by page, filter it (by payTo, network, scheme,
// type and extension) and search it with and without every filter through
// /api/xindex/bazaar, as it would the Bazaar. The options reach it with
// their extra as listed, so that it can pay from the listing alone.
func TestBazaarOfficialClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	compat := compatDir(t, "@x402/extensions", "@x402/core")
	db := dbtest.Schema(ctx, t)
	usdc := "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
	// Five sellers: three translation services paying a1, two weather
	// forecasts paying b2; the last without the bazaar extension, the
	// first without an extra.
	const a1, b2 = "0x00000000000000000000000000000000000000a1", "0x00000000000000000000000000000000000000b2"
	extra := func(i int) string {
		if i == 0 {
			return `{}`
		}
		return fmt.Sprintf(`{"name":"USD Coin","version":"2","seller":%d}`, i)
	}
	var items []map[string]any
	for i := range 5 {
		payTo := a1
		description := fmt.Sprintf("Translation service %d", i)
		if i >= 3 {
			payTo, description = b2, fmt.Sprintf("Weather forecast for city %d", i)
		}
		accept := map[string]any{"scheme": "exact", "network": "eip155:8453", "amount": strconv.Itoa(1000 * (i + 1)), "asset": usdc,
			"payTo": payTo, "maxTimeoutSeconds": 60}
		if i > 0 {
			accept["extra"] = json.RawMessage(extra(i))
		}
		it := map[string]any{
			"resource": fmt.Sprintf("https://seller%d.example/api", i), "type": "http", "x402Version": 2, "description": description,
			"tags": []string{"demo"}, "accepts": []any{accept},
		}
		if i < 4 {
			it["extensions"] = map[string]any{"bazaar": map[string]any{"info": map[string]any{"input": map[string]any{"type": "http", "method": "GET"}}}}
		}
		items = append(items, it)
	}
	listing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		end := min(offset+limit, len(items))
		_ = json.NewEncoder(w).Encode(map[string]any{"x402Version": 2, "items": items[min(offset, end):end],
			"pagination": map[string]int{"limit": limit, "offset": offset, "total": len(items)}})
	}))
	defer listing.Close()
	// The service's crawl at start is left out: the command's pass is the
	// one read.
	_, err := db.Pool.Exec(ctx, `INSERT INTO index_sources (url, last_at) VALUES ($1, now())`, listing.URL)
	require.NoError(t, err)
	base := startInProcess(ctx, t, "serve", testEnv(db, map[string]string{"INDEX_SOURCES": listing.URL}))
	env := map[string]string{"DATABASE_URL": db.URL, "DB_MAX_CONNS": testMaxConns, "INDEX_SOURCES": listing.URL}
	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"index", "crawl"}, func(k string) string { return env[k] }, &out, io.Discard, &options{}))

	cmd := exec.CommandContext(ctx, "node", filepath.Join(compat, "bazaar_client.mjs"), base+"/api/xindex/bazaar", "weather forecast",
		"0x00000000000000000000000000000000000000B2", a1)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node bazaar_client.mjs: %s", stderr.String())
	var got bazaarClientReport
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &got), stdout.String())

	// Every resource, two a page, in three pages.
	require.Len(t, got.Listed, 5)
	require.Len(t, got.Pages, 3)
	for i, p := range got.Pages {
		require.Equal(t, 2, p.X402Version)
		require.Equal(t, index.BazaarPagination{Limit: 2, Offset: 2 * i, Total: 5}, p.Pagination)
	}
	for i, r := range got.Listed {
		require.Equal(t, fmt.Sprintf("https://seller%d.example/api", i), r.Resource)
		require.Equal(t, "http", r.Type)
		require.Equal(t, []string{"demo"}, r.Tags)
		if i < 4 {
			require.JSONEq(t, `{"bazaar":{"info":{"input":{"type":"http","method":"GET"}}}}`, string(r.Extensions))
		} else {
			require.Empty(t, r.Extensions)
		}
		require.Len(t, r.Accepts, 1)
		require.JSONEq(t, extra(i), string(r.Accepts[0].Extra), "seller%d: the listing's extra ({} when none)", i)
		r.Accepts[0].Extra = nil
		require.Equal(t, []index.BazaarAccept{{Requirements: x402.Requirements{Scheme: "exact", Network: "eip155:8453", Amount: strconv.Itoa(1000 * (i + 1)), Asset: usdc,
			PayTo: items[i]["accepts"].([]any)[0].(map[string]any)["payTo"].(string), MaxTimeoutSeconds: 60}}}, r.Accepts)
	}
	// Filtered by payTo (in another case), network and scheme.
	require.Equal(t, 2, got.ByPayTo.Pagination.Total)
	require.Len(t, got.ByPayTo.Items, 2)
	require.Equal(t, "https://seller3.example/api", got.ByPayTo.Items[0].Resource)
	require.Empty(t, got.MCP.Items, "the index holds http resources")
	// By extension: the four listings carrying the bazaar extension.
	require.Equal(t, 4, got.ByExtension.Pagination.Total)
	require.Equal(t, []string{"https://seller0.example/api", "https://seller1.example/api", "https://seller2.example/api", "https://seller3.example/api"},
		resourceURLs(got.ByExtension.Items))
	// The search finds the two weather services, one a page.
	require.Len(t, got.Found, 2)
	for _, r := range got.Found {
		require.Contains(t, r.Description, "Weather forecast")
	}
	require.Len(t, got.SearchPages, 2)
	require.NotNil(t, got.SearchPages[0].Pagination.Cursor)
	require.Nil(t, got.SearchPages[1].Pagination.Cursor)
	require.False(t, got.SearchPages[0].PartialResults)
	// The search with the filters: payTo (in another case), network,
	// scheme and type keep both weather services; the bazaar extension
	// only the first; another receiver, network or scheme, or type mcp,
	// none.
	require.ElementsMatch(t, []string{"https://seller3.example/api", "https://seller4.example/api"}, resourceURLs(got.Filtered.All.Resources))
	require.Equal(t, []string{"https://seller3.example/api"}, resourceURLs(got.Filtered.ByExtension.Resources))
	require.JSONEq(t, extra(3), string(got.Filtered.ByExtension.Resources[0].Accepts[0].Extra))
	for name, s := range map[string]index.BazaarSearch{"payTo": got.Filtered.OtherPayTo, "network": got.Filtered.OtherNetwork,
		"scheme": got.Filtered.OtherScheme, "type": got.Filtered.MCP} {
		require.Equal(t, 2, s.X402Version, name)
		require.Empty(t, s.Resources, "another %s: none", name)
	}
	require.Contains(t, got.Refused, "(400)")
	require.Contains(t, got.Refused, "invalid_request")
}

// resourceURLs returns the resources' URLs, in order.
func resourceURLs(rs []index.BazaarResource) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.Resource)
	}
	return out
}
