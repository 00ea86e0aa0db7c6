package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/brief"
	"github.com/x402d/x402d/jobs/codereview"
	"github.com/x402d/x402d/jobs/csvjson"
	"github.com/x402d/x402d/jobs/dataclean"
	"github.com/x402d/x402d/jobs/diff"
	"github.com/x402d/x402d/jobs/regex"
	"github.com/x402d/x402d/jobs/urlmeta"
	"github.com/x402d/x402d/x402"
)

const publicURL = "https://x402d.example"

// sevenOps are the operations the service sells, in catalogue order.
var sevenOps = []jobs.Operation{brief.Op, dataclean.Op, codereview.Op, urlmeta.Op, csvjson.Op, regex.Op, diff.Op}

// discoveryServer serves the discovery routes of a seller of the seven
// operations without a model key (the three model operations are listed,
// not sold), on loopback.
func discoveryServer(t *testing.T) (string, *x402.Seller) {
	t.Helper()
	specs := make([]jobs.Spec, len(sevenOps))
	for i, op := range sevenOps {
		specs[i] = op.Spec
	}
	cat, err := x402.NewCatalog(jobs.Offers(specs, false), &x402.CatalogConfig{PublicURL: publicURL, PayToEVM: "0x000000000000000000000000000000000000dEaD",
		EVMNetworks: []string{"eip155:8453", "eip155:42161"}})
	require.NoError(t, err)
	seller := x402.NewSeller(cat, nil)
	d, err := newDiscovery(sevenOps, seller, publicURL, time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC), false)
	require.NoError(t, err)
	s := &Server{discovery: d}
	e := echo.New()
	e.HTTPErrorHandler = errorHandler(slog.New(slog.DiscardHandler))
	s.registerDiscovery(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL, seller
}

func get(t testing.TB, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "application/json", strings.Split(resp.Header.Get("Content-Type"), ";")[0], url)
	return resp.StatusCode, body
}

// openAPISchemas compiles the component schemas of the OpenAPI document
// doc, so that answers can be checked against the document.
func openAPISchemas(t *testing.T, doc []byte) func(name string, body []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	require.NoError(t, c.AddResource("https://x402d.example/openapi.json", v))
	return func(name string, body []byte) error {
		sch, err := c.Compile("https://x402d.example/openapi.json#/components/schemas/" + name)
		require.NoError(t, err, name)
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
		require.NoError(t, err)
		return sch.Validate(inst)
	}
}

func TestDiscovery(t *testing.T) {
	t.Parallel()
	base, seller := discoveryServer(t)
	status, docBytes := get(t, base+"/openapi.json")
	require.Equal(t, http.StatusOK, status)
	validate := openAPISchemas(t, docBytes)

	t.Run("WellKnown", func(t *testing.T) {
		status, body := get(t, base+"/.well-known/x402.json")
		require.Equal(t, http.StatusOK, status)
		require.NoError(t, validate("WellKnown", body))
		var doc map[string]any
		require.NoError(t, json.Unmarshal(body, &doc))
		require.EqualValues(t, 2, doc["x402Version"])
		require.Contains(t, doc, "facilitator")
		require.Nil(t, doc["facilitator"])
		require.Equal(t, []any{"eip155:8453", "eip155:42161", "eip155:137", "eip155:43114", "eip155:1329", "eip155:196",
			"solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"}, doc["networks"])
		resources := doc["resources"].([]any)
		require.Len(t, resources, 7)
		for i, r := range resources {
			r := r.(map[string]any)
			op := sevenOps[i]
			require.Equal(t, op.Name, r["name"])
			require.Equal(t, publicURL+"/api/x402/"+op.Name, r["resource"])
			require.Equal(t, map[string]any{"mode": "fixed", "currency": "USD", "amount": op.Price}, r["price"])
			if op.UsesModel {
				require.Equal(t, false, r["sellable"], op.Name)
				require.Equal(t, "model not configured (GEMINI_API_KEY unset)", r["blocked_reason"], op.Name)
				require.Empty(t, r["accepts"])
				continue
			}
			require.Equal(t, true, r["sellable"], op.Name)
			require.Nil(t, r["blocked_reason"], op.Name)
			require.Len(t, r["accepts"], 2)
		}
		require.Equal(t, map[string]any{
			"endpoint": publicURL + "/mcp", "transport": "streamable-http", "payment": doc["mcp"].(map[string]any)["payment"],
			"tools": []any{"url-meta", "csv-json", "regex", "diff", "index_search", "index_summary", "index_host", "index_changes"},
		}, doc["mcp"], "the operations sold now and the free tools")
	})

	t.Run("WellKnownFanOut", func(t *testing.T) {
		status, body := get(t, base+"/.well-known/x402")
		require.Equal(t, http.StatusOK, status)
		require.NoError(t, validate("WellKnownFanOut", body))
		var doc struct {
			Version   int      `json:"version"`
			Resources []string `json:"resources"`
		}
		require.NoError(t, json.Unmarshal(body, &doc))
		require.Equal(t, 1, doc.Version)
		var want []string
		for _, op := range sevenOps[3:] {
			q, err := seller.Quote(op.Name)
			require.NoError(t, err)
			var required x402.PaymentRequired
			require.NoError(t, x402.DecodeHeader(q.PaymentRequired, &required))
			want = append(want, required.Resource.URL)
		}
		require.Equal(t, want, doc.Resources, "the four operations sold without a model")
	})

	t.Run("Resources", func(t *testing.T) {
		status, body := get(t, base+"/api/x402/discovery/resources")
		require.Equal(t, http.StatusOK, status)
		require.NoError(t, validate("DiscoveryList", body))
		var list struct {
			X402Version int `json:"x402Version"`
			Items       []struct {
				Resource    string              `json:"resource"`
				Type        string              `json:"type"`
				X402Version int                 `json:"x402Version"`
				Accepts     []x402.Requirements `json:"accepts"`
				LastUpdated string              `json:"lastUpdated"`
				Metadata    map[string]any      `json:"metadata"`
			} `json:"items"`
			Pagination struct{ Limit, Offset, Total int } `json:"pagination"`
		}
		require.NoError(t, json.Unmarshal(body, &list))
		require.Equal(t, 2, list.X402Version)
		require.Equal(t, struct{ Limit, Offset, Total int }{20, 0, 4}, list.Pagination)
		require.Len(t, list.Items, 4, "the four operations sold without a model")
		for i, it := range list.Items {
			op := sevenOps[3+i]
			q, err := seller.Quote(op.Name)
			require.NoError(t, err)
			var required x402.PaymentRequired
			require.NoError(t, x402.DecodeHeader(q.PaymentRequired, &required))
			require.Equal(t, required.Resource.URL, it.Resource)
			require.Equal(t, "http", it.Type)
			require.Equal(t, 2, it.X402Version)
			require.Equal(t, required.Accepts, it.Accepts, "the list offers what the quote offers")
			_, err = time.Parse(time.RFC3339, it.LastUpdated)
			require.NoError(t, err)
			require.Equal(t, op.Name, it.Metadata["name"])
			require.Contains(t, it.Metadata["extensions"], "bazaar")
		}

		for _, tc := range []struct {
			query              string
			items, limit, from int
		}{
			{"?limit=2", 2, 2, 0},
			{"?limit=2&offset=3", 1, 2, 3},
			{"?offset=4", 0, 20, 4},
			{"?offset=2147483647&limit=100", 0, 100, 2147483647},
			{"?type=http&limit=100", 4, 100, 0},
			{"?type=mcp", 0, 20, 0},
		} {
			status, body := get(t, base+"/api/x402/discovery/resources"+tc.query)
			require.Equal(t, http.StatusOK, status, tc.query)
			require.NoError(t, validate("DiscoveryList", body), tc.query)
			var page map[string]any
			require.NoError(t, json.Unmarshal(body, &page))
			require.Len(t, page["items"], tc.items, tc.query)
			require.NotNil(t, page["items"], "%s: items is a list, never null", tc.query)
			p := page["pagination"].(map[string]any)
			require.EqualValues(t, tc.limit, p["limit"], tc.query)
			require.EqualValues(t, tc.from, p["offset"], tc.query)
		}
		for _, bad := range []string{"limit=0", "limit=101", "limit=-1", "limit=abc", "limit=1.5", "offset=-1", "offset=x", "offset=2147483648"} {
			status, body := get(t, base+"/api/x402/discovery/resources?"+bad)
			require.Equal(t, http.StatusBadRequest, status, bad)
			require.NoError(t, validate("Error", body), bad)
			var e map[string]any
			require.NoError(t, json.Unmarshal(body, &e))
			require.Equal(t, "invalid_request", e["error"], bad)
			require.Equal(t, strings.Split(bad, "=")[0], e["field"], bad)
		}
	})

	t.Run("QuotesMeetTheDocument", func(t *testing.T) {
		for _, op := range sevenOps[3:] {
			q, err := seller.Quote(op.Name)
			require.NoError(t, err)
			require.NoError(t, validate("Quote", q.Body), op.Name)
			refused, err := seller.QuoteWithError(op.Name, "invalid_exact_evm_signature", "m")
			require.NoError(t, err)
			require.NoError(t, validate("Quote", refused.Body), op.Name)
		}
		require.Error(t, validate("Quote", []byte(`{"x402Version":2,"resource":{"url":"u"},"accepts":[]}`)), "the schema can fail")
	})
}

func TestOpenAPI(t *testing.T) {
	t.Parallel()
	base, _ := discoveryServer(t)
	status, raw := get(t, base+"/openapi.json")
	require.Equal(t, http.StatusOK, status)

	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	require.NoError(t, err)
	require.Equal(t, "3.1.0", doc.OpenAPI)
	require.Equal(t, "2.0.0", doc.Info.Version)
	// Validates the document, and every example against its schema: the
	// operations' input examples against their request schemas, their
	// output examples against the result layouts, the quotes against the
	// Quote schema.
	require.NoError(t, doc.Validate(context.Background(), openapi3.IsOpenAPI31OrLater(), openapi3.EnableExamplesValidation()))
	require.NotNil(t, doc.Security, "security is declared")
	require.Empty(t, doc.Security, "no authentication header")

	want := []string{"/api/x402/calls/{id}", "/.well-known/x402.json", "/.well-known/x402", "/api/x402/discovery/resources", "/openapi.json",
		"/api/xindex/summary", "/api/xindex/hosts", "/api/xindex/changes", "/api/xindex/changes.atom", "/api/xindex/hosts/{host}", "/x402-index/hosts/{host}", "/x402-index/changes", "/x402-index", "/mcp", "/healthz", "/readyz",
		"/api/xindex/resources", "/api/xindex/bazaar/discovery/resources", "/api/xindex/bazaar/discovery/search"}
	for _, op := range sevenOps {
		want = append(want, "/api/x402/"+op.Name)
		post := doc.Paths.Value("/api/x402/" + op.Name).Post
		require.NotNil(t, post, op.Name)
		require.NotNil(t, post.RequestBody.Value.Content.Get("application/json").Schema.Value, op.Name)
		result := post.Responses.Value("200").Value.Content.Get("application/json").Schema.Value
		require.Contains(t, result.Properties, "call_id", op.Name)
		require.Contains(t, result.Properties, "op", op.Name)
		for _, code := range []string{"200", "202", "400", "402", "503"} {
			require.NotNil(t, post.Responses.Value(code), "%s %s", op.Name, code)
		}
		require.NotNil(t, post.Responses.Value("402").Value.Headers["PAYMENT-REQUIRED"], op.Name)
		require.NotNil(t, post.Responses.Value("402").Value.Headers["WWW-Authenticate"], op.Name)
		info, err := json.Marshal(post.Extensions["x-payment-info"])
		require.NoError(t, err)
		require.JSONEq(t, `{"protocols":[{"x402":{}}],"pricingMode":"fixed","price":{"mode":"fixed","currency":"USD","amount":"`+op.Price+`"}}`, string(info), op.Name)
	}
	var got []string
	for path := range doc.Paths.Map() {
		got = append(got, path)
	}
	require.ElementsMatch(t, want, got)

	// The examples are checked: a wrong one makes the document invalid.
	var broken map[string]any
	require.NoError(t, json.Unmarshal(raw, &broken))
	post := broken["paths"].(map[string]any)["/api/x402/regex"].(map[string]any)["post"].(map[string]any)
	post["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["example"] = map[string]any{"pattern": 5}
	rawBroken, err := json.Marshal(broken)
	require.NoError(t, err)
	bad, err := openapi3.NewLoader().LoadFromData(rawBroken)
	require.NoError(t, err)
	require.Error(t, bad.Validate(context.Background(), openapi3.IsOpenAPI31OrLater(), openapi3.EnableExamplesValidation()))
}

// TestIndexAnswersMeetTheDocument checks the index endpoints' answers over
// a small crawled index against the document's schemas (spec 2.2, 2.3).
func TestIndexAnswersMeetTheDocument(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, base := smallIndexServer(ctx, t)
	disc, _ := discoveryServer(t)
	_, doc := get(t, disc+"/openapi.json")
	validate := openAPISchemas(t, doc)

	_, summary := get(t, base+"/api/xindex/summary")
	require.NoError(t, validate("IndexSummary", summary), string(summary))
	var s map[string]any
	require.NoError(t, json.Unmarshal(summary, &s))
	require.NotEmpty(t, s["top_by_size"], "the index is not empty: host entries are checked")
	for _, q := range []string{"", "?sort=price&limit=2", "?q=shop1"} {
		status, hosts := get(t, base+"/api/xindex/hosts"+q)
		require.Equal(t, http.StatusOK, status, q)
		require.NoError(t, validate("IndexHosts", hosts), "%s: %s", q, hosts)
	}
	status, body := get(t, base+"/api/xindex/hosts?limit=0")
	require.Equal(t, http.StatusBadRequest, status)
	require.NoError(t, validate("Error", body))
	status, body = get(t, base+"/api/xindex/changes?limit=5")
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, validate("IndexChanges", body), string(body))
	for _, host := range []string{"shop1.example", "free-form.example"} {
		status, body = get(t, base+"/api/xindex/hosts/"+host)
		require.Equal(t, http.StatusOK, status)
		require.NoError(t, validate("IndexHostDetail", body), string(body))
	}
	status, body = get(t, base+"/api/xindex/hosts/nowhere.example")
	require.Equal(t, http.StatusNotFound, status)
	require.NoError(t, validate("Error", body))

	// The resources search and the Bazaar API answer as documented; bad
	// parameters are refused with a stable code naming them.
	for _, q := range []string{"", "?q=weather&network=base&max_usd=0.01&sort=relevance", "?tags=x&live=true", "?pay_to=0x1&limit=2"} {
		status, body = get(t, base+"/api/xindex/resources"+q)
		require.Equal(t, http.StatusOK, status, q)
		require.NoError(t, validate("IndexResources", body), "%s: %s", q, body)
	}
	var found struct{ Resources []map[string]any }
	_, body = get(t, base+"/api/xindex/resources?q=weather+report+3")
	require.NoError(t, json.Unmarshal(body, &found))
	require.NotEmpty(t, found.Resources)
	require.Equal(t, "https://shop3.example/api/3", found.Resources[0]["resource"], "the best match first")
	// The options' extras as listed: in the resources search, the host's
	// services and the Bazaar's items ({} where none is listed).
	_, body = get(t, base+"/api/xindex/resources?q=weather+report+0&limit=1")
	require.NoError(t, json.Unmarshal(body, &found))
	require.Equal(t, "https://shop0.example/api/0", found.Resources[0]["resource"])
	require.Equal(t, map[string]any{"name": "USD Coin", "version": "2"}, found.Resources[0]["accepts"].([]any)[0].(map[string]any)["extra"])
	var detail struct{ Services []map[string]any }
	_, body = get(t, base+"/api/xindex/hosts/free-form.example")
	require.NoError(t, json.Unmarshal(body, &detail))
	require.Equal(t, map[string]any{"feePayer": "z"}, detail.Services[0]["accepts"].([]any)[0].(map[string]any)["extra"])
	var listed struct{ Items []index.BazaarResource }
	_, body = get(t, base+"/api/xindex/bazaar/discovery/resources?limit=3")
	require.NoError(t, json.Unmarshal(body, &listed))
	require.Equal(t, "https://free-form.example/x", listed.Items[0].Resource)
	require.JSONEq(t, `{"feePayer":"z"}`, string(listed.Items[0].Accepts[0].Extra))
	require.Equal(t, "https://shop0.example/api/0", listed.Items[1].Resource)
	require.JSONEq(t, `{"name":"USD Coin","version":"2"}`, string(listed.Items[1].Accepts[0].Extra))
	require.JSONEq(t, `{}`, string(listed.Items[2].Accepts[0].Extra))
	for _, bad := range []struct{ query, field string }{
		{"network=moon", "network"}, {"max_usd=-1", "max_usd"}, {"live=maybe", "live"}, {"sort=random", "sort"},
		{"limit=0", "limit"}, {"limit=many", "limit"}, {"cursor=zzz", "cursor"},
	} {
		status, body = get(t, base+"/api/xindex/resources?"+bad.query)
		require.Equal(t, http.StatusBadRequest, status, bad.query)
		require.NoError(t, validate("Error", body))
		var e map[string]any
		require.NoError(t, json.Unmarshal(body, &e))
		require.Equal(t, "invalid_request", e["error"], bad.query)
		require.Equal(t, bad.field, e["field"], bad.query)
	}
	status, body = get(t, base+"/api/xindex/bazaar/discovery/resources?limit=5&payTo=0x1")
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, validate("BazaarList", body), string(body))
	status, body = get(t, base+"/api/xindex/bazaar/discovery/search?query=weather&limit=3")
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, validate("BazaarSearch", body), string(body))
	for _, bad := range []string{"discovery/search", "discovery/search?query=x&limit=101", "discovery/resources?offset=-1", "discovery/resources?type=ftp"} {
		status, body = get(t, base+"/api/xindex/bazaar/"+bad)
		require.Equal(t, http.StatusBadRequest, status, bad)
		require.NoError(t, validate("Error", body))
	}
}

// TestFrontPage serves / as a page for a browser (what is sold, at what
// price, on which networks, how to pay, the links) and as the manifest for
// a client asking for JSON.
func TestFrontPage(t *testing.T) {
	t.Parallel()
	base, _ := discoveryServer(t)
	fetch := func(accept string) (string, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+"/", nil)
		require.NoError(t, err)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return strings.Split(resp.Header.Get("Content-Type"), ";")[0], string(body)
	}
	for _, accept := range []string{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "*/*", ""} {
		ctype, page := fetch(accept)
		require.Equal(t, "text/html", ctype, accept)
		require.NotContains(t, page, "%!", "a template failed to format")
		for _, op := range sevenOps {
			require.Contains(t, page, "POST /api/x402/"+op.Name)
			require.Contains(t, page, op.Price)
		}
		require.Contains(t, page, "Not sold now: model not configured (GEMINI_API_KEY unset).", "model operations without a key")
		require.Contains(t, page, "<code>eip155:8453</code>")
		require.Contains(t, page, "<code>eip155:42161</code>")
		require.Contains(t, page, "PAYMENT-SIGNATURE")
		require.Contains(t, page, `href="/x402-index"`)
		require.Contains(t, page, `href="/openapi.json"`)
		require.NotContains(t, page, `href="/ops"`, "no operator link without OPS_TOKEN")
	}
	ctype, manifest := fetch("application/json")
	require.Equal(t, "application/json", ctype)
	_, want := get(t, base+"/.well-known/x402.json")
	require.JSONEq(t, string(want), manifest)
}

// TestFrontPageOperatorLink links the operator login only when the
// dashboard is mounted (OPS_TOKEN set).
func TestFrontPageOperatorLink(t *testing.T) {
	t.Parallel()
	for _, withOps := range []bool{false, true} {
		page, err := frontPage(publicURL, []resourceDoc{{Name: "diff", Resource: publicURL + "/api/x402/diff", Sellable: true, Price: price{Amount: "0.010000"}}}, withOps)
		require.NoError(t, err)
		require.Equal(t, withOps, strings.Contains(string(page), `href="/ops"`))
		require.NotContains(t, string(page), "%!")
	}
}

// TestDiscoveryNotCached: the documents that carry quotes are not stored by
// caches, as a 402 is not; the front page may be.
func TestDiscoveryNotCached(t *testing.T) {
	t.Parallel()
	base, _ := discoveryServer(t)
	for _, tt := range []struct {
		path, cache string
	}{
		{"/.well-known/x402.json", "no-store"},
		{"/api/x402/discovery/resources", "no-store"},
		{"/openapi.json", "no-store"},
		{"/", ""},
	} {
		resp, err := http.Get(base + tt.path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, tt.cache, resp.Header.Get("Cache-Control"), tt.path)
	}
}
