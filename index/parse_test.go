package index

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
