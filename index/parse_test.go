package index

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

func TestNormaliseURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, url, host string }{
		{"https://API.Example.com/pay/", "https://api.example.com/pay", "api.example.com"},
		{"https://api.example.com:443/pay", "https://api.example.com/pay", "api.example.com"},
		{"HTTP://api.example.com:80/pay#x", "http://api.example.com/pay", "api.example.com"},
		{"https://api.example.com:8443/pay?q=1", "https://api.example.com:8443/pay?q=1", "api.example.com"},
		{"https://example.com.", "https://example.com", "example.com"},
		{" https://user:pw@example.com/a ", "https://example.com/a", "example.com"},
	} {
		u, h, ok := NormaliseURL(tc.in)
		require.True(t, ok, tc.in)
		require.Equal(t, tc.url, u, tc.in)
		require.Equal(t, tc.host, h, tc.in)
	}
	for _, bad := range []string{"", "ftp://x.com/a", "/relative", "https://", "not a url"} {
		_, _, ok := NormaliseURL(bad)
		require.False(t, ok, bad)
	}
}

func TestParsePage(t *testing.T) {
	t.Parallel()
	const usdcBase = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
	body := `{"x402Version":2,"pagination":{"limit":10,"offset":0,"total":42},"unknown":{"x":1},"items":[
	 {"resource":"https://a.example/one","type":"http","x402Version":2,"lastUpdated":"2026-01-02T03:04:05Z",
	  "accepts":[{"scheme":"exact","network":"eip155:8453","amount":"10000","asset":"` + usdcBase + `","payTo":"0x1","extra":{ "name": "USD Coin", "version": "2" }},
	             {"scheme":"exact","network":"base","amount":"5000","asset":"` + usdcBase + `","payTo":"0x1","extra":"not an object"}],
	  "metadata":{"description":"first"},"extensions":{"bazaar":{"info":{"input":{"type":"http","method":"post"}}}}},
	 {"url":"https://b.example/two","lastUpdated":1767322800,
	  "accepts":[{"scheme":"exact","network":"base-sepolia","maxAmountRequired":"1000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x2","description":"v1 item",
	   "outputSchema":{"input":{"type":"http","method":"GET"}}}]},
	 {"resource":"https://c.example/three","lastUpdated":1767322800000,
	  "accepts":[{"scheme":"exact","network":"solana","amount":"0.01","asset":"EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v","payTo":"x","extra":{"feePayer":"fee"}}]},
	 {"resource":"https://d.example/four","accepts":[{"scheme":"exact","network":"eip155:8453","amount":"","asset":"` + usdcBase + `","payTo":"0x1"}]},
	 {"resource":"https://e.example/five","accepts":[{"scheme":"exact","network":"eip155:8453","amount":"100","asset":"0xUnknownToken","payTo":"0x1"}]},
	 {"resource":"https://f.example/six","accepts":[{"scheme":"exact","network":"eip155:8453","amount":"0","asset":"` + usdcBase + `","payTo":"0x1"}]},
	 {"resource":"mailto:nobody"},
	 "not an object"
	]}`
	p, err := ParsePage([]byte(body))
	require.NoError(t, err)
	require.Equal(t, 8, p.Count, "the cursor moves by every item the page carried")
	require.Equal(t, 42, p.Total)
	require.Len(t, p.Items, 6)

	a := p.Items[0]
	require.Equal(t, "https://a.example/one", a.URL)
	require.Equal(t, "a.example", a.Host)
	require.Equal(t, "first", a.Description)
	require.Equal(t, "POST", a.Method)
	require.Equal(t, []string{"eip155:8453"}, a.Networks, "a legacy name and its CAIP-2 form are one network")
	require.Equal(t, "0.005000", a.PriceUSDC, "the lowest price")
	require.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), a.LastUpdated)
	require.Equal(t, `{"name":"USD Coin","version":"2"}`, string(a.Accepts[0].Extra), "the extra as given, compacted")
	require.Nil(t, a.Accepts[1].Extra, "an extra that is not an object is left out")

	b := p.Items[1]
	require.Equal(t, "https://b.example/two", b.URL)
	require.Equal(t, "v1 item", b.Description)
	require.Equal(t, []string{"eip155:84532"}, b.Networks)
	require.Equal(t, "0.001000", b.PriceUSDC)
	require.Equal(t, time.Unix(1767322800, 0).UTC(), b.LastUpdated)

	c := p.Items[2]
	require.Equal(t, []string{"solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"}, c.Networks)
	require.Empty(t, c.PriceUSDC, "decimal-dollar amounts are unpriced")
	require.Equal(t, time.Unix(1767322800, 0).UTC(), c.LastUpdated, "milliseconds")
	require.Equal(t, `{"feePayer":"fee"}`, string(c.Accepts[0].Extra))

	require.Empty(t, p.Items[3].PriceUSDC, "empty amount")
	require.Empty(t, p.Items[4].PriceUSDC, "unknown asset")
	require.Equal(t, "0.000000", p.Items[5].PriceUSDC, "a measured zero is free, not unpriced")

	// The options' extras together are bounded as a schema is: the one
	// that would pass maxSchema is left out, the next that fits is kept.
	big := `{"pad":"` + strings.Repeat("x", maxSchema/2) + `"}`
	p, err = ParsePage([]byte(`{"items":[{"resource":"https://g.example/seven","accepts":[
	 {"scheme":"exact","network":"eip155:8453","amount":"1","asset":"` + usdcBase + `","payTo":"0x1","extra":` + big + `},
	 {"scheme":"exact","network":"eip155:8453","amount":"2","asset":"` + usdcBase + `","payTo":"0x1","extra":` + big + `},
	 {"scheme":"exact","network":"eip155:8453","amount":"3","asset":"` + usdcBase + `","payTo":"0x1","extra":{"name":"USDC"}}]}]}`))
	require.NoError(t, err)
	g := p.Items[0].Accepts
	require.Len(t, g, 3)
	require.Equal(t, big, string(g[0].Extra))
	require.Nil(t, g[1].Extra)
	require.Equal(t, `{"name":"USDC"}`, string(g[2].Extra))

	_, err = ParsePage([]byte(`[1,2]`))
	require.Error(t, err)
	p, err = ParsePage([]byte(`{"items":[]}`))
	require.NoError(t, err)
	require.Equal(t, -1, p.Total)
	var v any
	require.NoError(t, json.Unmarshal([]byte(body), &v))
}

func FuzzParsePage(f *testing.F) {
	f.Add([]byte(`{"items":[{"resource":"https://a.b/c","accepts":[{"network":"base","amount":"1","asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"}]}]}`))
	f.Add([]byte(`{"resources":[{"url":"http://x"}],"total":3}`))
	f.Add([]byte(`{"items":[{"resource":"https://a.b/c","description":"\u0000","tags":["\u0000x"],"extensions":{"a":[1e200000,"\ud800"]},` +
		`"accepts":[{"network":"base","amount":"1","asset":"x","payTo":"\u0000","extra":{"b":"\u0000"}}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := ParsePage(body)
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(p.Items), p.Count)
		for _, r := range p.Items {
			u, h, ok := NormaliseURL(r.URL)
			require.True(t, ok)
			require.Equal(t, r.URL, u, "normalising is idempotent")
			require.Equal(t, r.Host, h)
			// What is kept can be stored.
			texts := []string{r.Description, r.Method, r.MimeType}
			raws := []json.RawMessage{r.InputSchema, r.OutputSchema, r.Extensions}
			for _, a := range r.Accepts {
				texts = append(texts, a.Scheme, a.Asset, a.PayTo)
				raws = append(raws, a.Extra)
			}
			for _, s := range append(texts, r.Tags...) {
				require.NotContains(t, s, "\x00")
			}
			for _, raw := range raws {
				require.True(t, raw == nil || jsonbStorable(raw), "%s", raw)
			}
		}
	})
}

// TestParseQuality reads Bazaar's quality figures from a listing page in
// the discovery format (testdata/bazaar-quality.json): figures as given,
// a measured zero kept as zero, nil where the item carries none or only
// unreadable ones (and the item still listed).
func TestParseQuality(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("testdata/bazaar-quality.json")
	require.NoError(t, err)
	p, err := ParsePage(body)
	require.NoError(t, err)
	require.Len(t, p.Items, 4)
	n := func(v int64) *int64 { return &v }
	at := time.Date(2026, 11, 24, 21, 3, 11, 508_000_000, time.UTC)
	for i, want := range []*store.Quality{
		{Calls30d: n(1284), UniquePayers30d: n(37), LastCalledAt: &at},
		{Calls30d: n(0), UniquePayers30d: n(0)},
		nil,
		nil,
	} {
		got := p.Items[i].Quality
		require.True(t, want.Equal(got), "%s: want %+v, got %+v", p.Items[i].URL, want, got)
	}
	require.Equal(t, "https://odd.example/api/thing", p.Items[3].URL)
	require.Equal(t, "0.010000", p.Items[0].PriceUSDC, "quality leaves the rest of the item as it was")
}

func TestParseQualityFigures(t *testing.T) {
	t.Parallel()
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		raw  string
		want *store.Quality
	}{
		{``, nil},
		{`null`, nil},
		{`{}`, nil},
		{`[1,2]`, nil},
		{`{"l30DaysTotalCalls":5}`, &store.Quality{Calls30d: n(5)}},
		{`{"l30DaysTotalCalls":"7","l30DaysUniquePayers":2}`, &store.Quality{Calls30d: n(7), UniquePayers30d: n(2)}},
		{`{"l30DaysTotalCalls":1.5,"l30DaysUniquePayers":null}`, nil},
		{`{"lastCalledAt":1767322800}`, &store.Quality{LastCalledAt: ptr(time.Unix(1767322800, 0).UTC())}},
	} {
		require.True(t, tc.want.Equal(parseQuality(json.RawMessage(tc.raw))), tc.raw)
	}
}

func ptr[T any](v T) *T { return &v }

// TestParsePageStorable reads listing items carrying what Postgres cannot
// store: each is kept, without the strings' NUL characters and without the
// JSON values jsonb cannot hold, the rest as given.
func TestParsePageStorable(t *testing.T) {
	t.Parallel()
	const option = `{"scheme":"exact","network":"eip155:8453","amount":"1000","asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","payTo":"0x1"`
	bazaar := func(input, output string) string {
		return `{"bazaar":{"info":{"input":` + input + `,"output":` + output + `}}}`
	}
	for _, tc := range []struct {
		name, item string
		check      func(t *testing.T, r Resource)
	}{
		{"NUL in the description", `"description":"bad\u0000text","accepts":[` + option + `}]`, func(t *testing.T, r Resource) {
			require.Equal(t, "badtext", r.Description)
		}},
		{"NUL in a tag", `"tags":["ok","t\u0000ag","\u0000"," ok "]`, func(t *testing.T, r Resource) {
			require.Equal(t, []string{"ok", "tag"}, r.Tags)
		}},
		{"NUL in the method and the mime type", `"mimeType":"text/\u0000plain","extensions":{"bazaar":{"info":{"input":{"method":"p\u0000ut"}}}}`,
			func(t *testing.T, r Resource) {
				require.Equal(t, "PUT", r.Method)
				require.Equal(t, "text/plain", r.MimeType)
				require.Nil(t, r.Extensions)
				require.Nil(t, r.InputSchema)
			}},
		{"NUL in the input schema", `"extensions":` + bazaar(`{"type":"http","q":"\u0000"}`, `{"ok":true}`), func(t *testing.T, r Resource) {
			require.Nil(t, r.InputSchema)
			require.Equal(t, `{"ok":true}`, string(r.OutputSchema))
			require.Nil(t, r.Extensions)
		}},
		{"NUL in a key of the extensions", `"extensions":{"bazaar":{"info":{"input":{"type":"http"}}},"x\u0000":1}`, func(t *testing.T, r Resource) {
			require.Equal(t, `{"type":"http"}`, string(r.InputSchema), "the schema within is kept")
			require.Nil(t, r.Extensions)
		}},
		{"the bazaar schema unstorable, the v1 one kept", `"extensions":` + bazaar(`{"n":1e200000}`, `{}`) + `,"accepts":[` + option + `,"outputSchema":{"input":{"type":"http"}}}]`,
			func(t *testing.T, r Resource) {
				require.Equal(t, `{"type":"http"}`, string(r.InputSchema))
				require.Equal(t, `{}`, string(r.OutputSchema))
			}},
		{"NUL in an option's strings and extra", `"accepts":[{"scheme":"ex\u0000act","network":"base","amount":"1000","asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","payTo":"0x\u00001","extra":{"name":"USD\u0000C"}},` + option + `,"extra":{"name":"USDC"}}]`,
			func(t *testing.T, r Resource) {
				require.Len(t, r.Accepts, 2)
				require.Equal(t, store.Accept{Scheme: "exact", Network: "eip155:8453", Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", Amount: "1000", PayTo: "0x1"}, r.Accepts[0])
				require.Equal(t, `{"name":"USDC"}`, string(r.Accepts[1].Extra))
				require.Equal(t, "0.001000", r.PriceUSDC)
			}},
		{"1e200000 in a schema", `"extensions":` + bazaar(`{"type":"http"}`, `{"max":1e200000}`), func(t *testing.T, r Resource) {
			require.Equal(t, `{"type":"http"}`, string(r.InputSchema))
			require.Nil(t, r.OutputSchema)
			require.Nil(t, r.Extensions)
		}},
		{"1e200000 in an extra", `"accepts":[` + option + `,"extra":{"version":1e200000}}]`, func(t *testing.T, r Resource) {
			require.Len(t, r.Accepts, 1)
			require.Nil(t, r.Accepts[0].Extra)
			require.Equal(t, "0.001000", r.PriceUSDC)
		}},
		{"a huge integer amount", `"accepts":[{"scheme":"exact","network":"base","amount":"1` + strings.Repeat("0", 140_000) + `","asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","payTo":"0x1"}]`,
			func(t *testing.T, r Resource) {
				require.Len(t, r.Accepts, 1, "the option as given")
				require.Empty(t, r.PriceUSDC, "beyond 2^256-1: unpriced")
			}},
		{"an amount of 2^256-1", `"accepts":[{"scheme":"exact","network":"base","amount":"115792089237316195423570985008687907853269984665640564039457584007913129639935","asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","payTo":"0x1"}]`,
			func(t *testing.T, r Resource) {
				require.Equal(t, "115792089237316195423570985008687907853269984665640564039457584007913129.639935", r.PriceUSDC)
			}},
		{"lone surrogates", `"extensions":{"x":"\ud800"},"accepts":[` + option + `,"extra":{"y":"\udc00"}}]`, func(t *testing.T, r Resource) {
			require.Nil(t, r.Extensions)
			require.Nil(t, r.Accepts[0].Extra)
		}},
		{"bytes that are not UTF-8", "\"extensions\":{\"x\":\"\xff\"}", func(t *testing.T, r Resource) {
			require.Nil(t, r.Extensions)
		}},
		{"times beyond what JSON holds", `"lastUpdated":1e300,"quality":{"l30DaysTotalCalls":5,"lastCalledAt":"-1e15"}`, func(t *testing.T, r Resource) {
			require.True(t, r.LastUpdated.IsZero())
			require.Equal(t, &store.Quality{Calls30d: ptr(int64(5))}, r.Quality)
		}},
		{"what jsonb stores is kept", `"extensions":{"x":"\\u0000 \ud83d\ude00 \u00e9","n":[-0.5e-3,1e131071,0e9999999]}`, func(t *testing.T, r Resource) {
			require.Equal(t, `{"x":"\\u0000 \ud83d\ude00 \u00e9","n":[-0.5e-3,1e131071,0e9999999]}`, string(r.Extensions))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePage([]byte(`{"items":[{"resource":"https://a.example/x",` + tc.item + `}]}`))
			require.NoError(t, err)
			require.Len(t, p.Items, 1)
			tc.check(t, p.Items[0])
		})
	}
}

// TestJSONBStorable checks jsonbStorable against Postgres: it says a
// value can be stored exactly when jsonb takes it.
func TestJSONBStorable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	for _, tc := range []struct {
		raw  string
		want bool
	}{
		{`{}`, true},
		{`{"a":"b","c":[1,-2.5,true,null]}`, true},
		{`"\u0000"`, false},
		{`{"a\u0000":1}`, false},
		{`"\\u0000"`, true},
		{`"\\\u0000"`, false},
		{`"\"\u0000"`, false},
		{`"\ud83d\ude00"`, true},
		{`"\ud800"`, false},
		{`"\ud800x"`, false},
		{`"\ud800\u0041"`, false},
		{`"\ud800\ud800"`, false},
		{`"\udc00"`, false},
		{`"\\ud800"`, true},
		{`"\u00e9\u0001"`, true},
		{"\"\xff\"", false},
		{"\"\xed\xa0\x80\"", false},
		{`1e131071`, true},
		{`1e131072`, false},
		{`-1e131072`, false},
		{`1000e131068`, true},
		{`1000e131069`, false},
		{`0.001e131074`, true},
		{`0.001e131075`, false},
		{`1E+131071`, true},
		{`1e200000`, false},
		{`1e-16383`, true},
		{`1e-16384`, false},
		{`1.5e-16383`, false},
		{`1.000e-16380`, true},
		{`1.000e-16381`, false},
		{`0e-16383`, true},
		{`0e-200000`, false},
		{`0e200000`, true},
		{`0e1073741822`, true},
		{`0e1073741823`, false},
		{`0e-1073741822`, false},
		{`1e99999999999999999999`, false},
		{`0.0e000000000000000000000001`, true},
		{`[1e5,{"x":[1e200000]}]`, false},
		{`"1e200000"`, true},
	} {
		got := jsonbStorable([]byte(tc.raw))
		require.Equal(t, tc.want, got, tc.raw)
		var ok bool
		err := db.Pool.QueryRow(ctx, "SELECT $1::jsonb IS NOT NULL", tc.raw).Scan(&ok)
		require.Equal(t, tc.want, err == nil, "Postgres on %s: %v", tc.raw, err)
	}
}
