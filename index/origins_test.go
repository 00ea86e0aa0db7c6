package index

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/x402d/x402d/internal/dbtest"
)

// txtServer is a DNS server on loopback answering TXT records (name with
// its final dot), NXDOMAIN for any other name.
func txtServer(t *testing.T, records map[string]string) *net.Resolver {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			var q dnsmessage.Message
			if q.Unpack(buf[:n]) != nil || len(q.Questions) != 1 {
				continue
			}
			question := q.Questions[0]
			answer := dnsmessage.Message{Header: dnsmessage.Header{ID: q.ID, Response: true, Authoritative: true, RecursionDesired: q.RecursionDesired},
				Questions: q.Questions}
			rec, ok := records[strings.ToLower(question.Name.String())]
			switch {
			case !ok:
				answer.RCode = dnsmessage.RCodeNameError
			case question.Type == dnsmessage.TypeTXT:
				answer.Answers = []dnsmessage.Resource{{
					Header: dnsmessage.ResourceHeader{Name: question.Name, Type: dnsmessage.TypeTXT, Class: dnsmessage.ClassINET, TTL: 60},
					Body:   &dnsmessage.TXTResource{TXT: []string{rec}},
				}}
			}
			out, err := answer.Pack()
			if err == nil {
				_, _ = conn.WriteTo(out, from)
			}
		}
	}()
	addr := conn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

// origins is one loopback server playing sellers' origins, named by host:
// api.test declares an OpenAPI document, wk.test /.well-known/x402,
// dns.test a _x402 TXT record, none.test nothing, flaky.test fails. It
// records when each host was asked and whether two requests to one host
// overlapped (requests sent at once also arrive less than the gap apart,
// which the times asked show however fast the answers).
type origins struct {
	mu        sync.Mutex
	port      string
	asked     map[string][]time.Time
	inFlight  map[string]int
	overlaps  int
	withPaid  bool
	requested []string
}

func (o *origins) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, _ := net.SplitHostPort(r.Host)
	o.mu.Lock()
	o.asked[host] = append(o.asked[host], time.Now())
	o.inFlight[host]++
	if o.inFlight[host] > 1 {
		o.overlaps++
	}
	o.requested = append(o.requested, r.Method+" "+host+r.URL.Path)
	withPaid := o.withPaid
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.inFlight[host]--
		o.mu.Unlock()
	}()
	base := "http://" + host + ":" + o.port
	quote := func(amount, description string) {
		w.Header().Set("PAYMENT-REQUIRED", base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"resource":{"url":"`+base+r.URL.Path+`","description":"`+description+`"},"accepts":[{"scheme":"exact","network":"eip155:8453","amount":"`+amount+`","asset":"`+usdc+`","payTo":"0x1"}]}`)))
		w.WriteHeader(http.StatusPaymentRequired)
	}
	switch host + " " + r.Method + " " + r.URL.Path {
	case "api.test GET /openapi.json":
		paths := map[string]any{
			"/free": map[string]any{"get": map[string]any{"responses": map[string]any{"200": map[string]any{"description": "OK"}}}},
			"/quoted": map[string]any{"get": map[string]any{"x-payment-info": map[string]any{"protocols": []any{"x402"}, "pricingMode": "fixed", "price": "0.000020"},
				"responses": map[string]any{"402": map[string]any{"description": "Payment Required"}}}},
		}
		if withPaid {
			paths["/paid"] = map[string]any{"post": map[string]any{"x-payment-info": map[string]any{"price": map[string]any{"mode": "fixed", "currency": "USD", "amount": "0.000010"},
				"protocols": []any{map[string]any{"x402": map[string]any{}}}}, "responses": map[string]any{"402": map[string]any{"description": "Payment Required"}}}}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"openapi": "3.1.0", "info": map[string]any{"title": "api", "version": "1"}, "paths": paths})
	case "api.test POST /paid":
		quote("10", "a paid thing")
	case "api.test GET /quoted":
		quote("20", "a quoted thing")
	case "wk.test GET /.well-known/x402":
		_ = json.NewEncoder(w).Encode(map[string]any{"version": 1, "resources": []string{base + "/a", "http://elsewhere.test:" + o.port + "/x", base + "/listed"}})
	case "wk.test GET /listed":
		quote("99", "what the origin says")
	case "wk.test POST /a":
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = w.Write([]byte(`{"x402Version":1,"accepts":[{"scheme":"exact","network":"base","maxAmountRequired":"30","resource":"` + base + `/a","description":"posted","asset":"` + usdc + `","payTo":"0x1"}]}`))
	case "dns.test GET /x402.json":
		_ = json.NewEncoder(w).Encode(map[string]any{"version": 1, "resources": []string{base + "/d"}})
	case "dns.test GET /d":
		quote("40", "found by dns")
	case "hostile.test GET /.well-known/x402":
		_ = json.NewEncoder(w).Encode(map[string]any{"version": 1, "resources": []string{base + "/bad", base + "/good"}})
	case "hostile.test GET /good":
		quote("10", "good")
	case "hostile.test GET /bad":
		w.Header().Set("PAYMENT-REQUIRED", base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"resource":{"url":"`+base+`/bad","description":"b\u0000ad"},`+
			`"extensions":{"bazaar":{"info":{"input":{"type":"http"},"output":{"n":1e200000}}}},`+
			`"accepts":[{"scheme":"exact","network":"eip155:8453","amount":"20","asset":"`+usdc+`","payTo":"0x1","extra":{"name":"\u0000"}}]}`)))
		w.WriteHeader(http.StatusPaymentRequired)
	case "flaky.test GET /openapi.json":
		w.Header().Set("Retry-After", "7200")
		w.WriteHeader(http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// TestDiscovery finds resources from their sellers' origins: from an
// OpenAPI document's paid operations, from /.well-known/x402, from a DNS
// _x402 record; each asked for its quote through the guarded client, one
// request at a time per origin, a gap apart; a failing origin backs off; an
// operation no longer declared is retired.
func TestDiscovery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	o := &origins{asked: map[string][]time.Time{}, inFlight: map[string]int{}, withPaid: true}
	srv := httptest.NewServer(o)
	defer srv.Close()
	_, o.port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	_, client, _ := sellers(t)
	origin := func(h string) string { return "http://" + h + ".test:" + o.port }
	resolver := txtServer(t, map[string]string{"_x402.dns.test.": "v=x4021;url=" + origin("dns") + "/x402.json"})

	// wk.test and dns.test are found from a listing; the others are
	// configured.
	src := httptest.NewServer(&listing{items: []map[string]any{item(origin("wk")+"/listed", "50"), item(origin("dns")+"/listed", "50")}})
	defer src.Close()
	require.NoError(t, newCrawler(db, src.URL, 100).FullPass(ctx, nil))
	configured, err := ParseOrigins(origin("api") + "/some/path, " + origin("none") + "," + origin("flaky") + "," + origin("api"))
	require.NoError(t, err)
	require.Equal(t, []string{origin("api"), origin("none"), origin("flaky")}, configured)
	_, err = ParseOrigins("ftp://x.test")
	require.Error(t, err)

	gap := 40 * time.Millisecond
	d := NewDiscoverer(&DiscovererConfig{Pool: db.Pool, Fetch: client, TXT: resolver, Origins: configured, Gap: gap})
	rep, err := d.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, rep.Origins)
	require.Equal(t, map[string]int{"openapi": 1, "well-known": 1, "dns": 1}, rep.Found)
	require.Equal(t, 5, rep.Indexed)

	type found struct{ method, description, price, source string }
	read := func() map[string]found {
		rows, err := db.Pool.Query(ctx, `SELECT r.resource, r.method, r.description, coalesce(r.price_usdc::text, ''), coalesce(string_agg(l.source, ' '), '')
			FROM index_resources r LEFT JOIN index_listings l ON l.resource = r.resource WHERE NOT r.retired GROUP BY 1, 2, 3, 4`)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]found{}
		for rows.Next() {
			var u string
			var f found
			require.NoError(t, rows.Scan(&u, &f.method, &f.description, &f.price, &f.source))
			out[u] = f
		}
		require.NoError(t, rows.Err())
		return out
	}
	got := read()
	require.Equal(t, found{"POST", "a paid thing", "0.000010", "origin:" + origin("api")}, got[origin("api")+"/paid"])
	require.Equal(t, found{"GET", "a quoted thing", "0.000020", "origin:" + origin("api")}, got[origin("api")+"/quoted"])
	require.Equal(t, found{"POST", "posted", "0.000030", "origin:" + origin("wk")}, got[origin("wk")+"/a"], "GET then POST")
	require.Equal(t, found{"GET", "found by dns", "0.000040", "origin:" + origin("dns")}, got[origin("dns")+"/d"])
	require.Len(t, got, 6, "the 4 found and the 2 listed; nothing of another host, nothing free")
	listed := got[origin("wk")+"/listed"]
	require.Equal(t, "0.000050", listed.price, "what the listing says stands over the origin's quote")
	require.Empty(t, listed.description)
	require.ElementsMatch(t, []string{src.URL, "origin:" + origin("wk")}, strings.Fields(listed.source), "listed by both")

	o.mu.Lock()
	require.Zero(t, o.overlaps, "one request at a time per origin")
	for host, times := range o.asked {
		for i := 1; i < len(times); i++ {
			require.GreaterOrEqual(t, times[i].Sub(times[i-1]), gap-5*time.Millisecond, "%s asked twice within the gap", host)
		}
	}
	require.Empty(t, o.asked["elsewhere.test"])
	require.NotContains(t, o.requested, "GET api.test/free")
	o.mu.Unlock()

	var backoff *time.Time
	var failures int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT backoff_until, failures FROM index_sources WHERE url = $1", OriginSource(origin("flaky"))).Scan(&backoff, &failures))
	require.Equal(t, 1, failures)
	require.WithinDuration(t, time.Now().Add(6*time.Hour), *backoff, time.Minute, "the default backoff; its Retry-After was shorter")

	// The next run reads again the origins not backing off; /paid is no
	// longer declared and is retired.
	o.mu.Lock()
	o.withPaid = false
	o.mu.Unlock()
	rep, err = d.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, rep.Origins, "flaky.test is backing off")
	got = read()
	require.NotContains(t, got, origin("api")+"/paid")
	require.Contains(t, got, origin("api")+"/quoted")

	changes, err := NewReader(db.Pool, nil).LatestChanges(ctx, "api.test", 1)
	require.NoError(t, err)
	require.Equal(t, "service.retired", changes[0].Kind)
}

// TestListedPrice reads the fixed price an OpenAPI operation's
// x-payment-info lists, in either form, and none for a range or another
// currency.
func TestListedPrice(t *testing.T) {
	t.Parallel()
	for op, want := range map[string]string{
		`{"x-payment-info":{"price":{"mode":"fixed","currency":"USD","amount":"0.05"}}}`: "0.05",
		`{"x-payment-info":{"pricingMode":"fixed","price":"0.000020"}}`:                  "0.000020",
		`{"x-payment-info":{"price":"$0.01"}}`:                                           "0.01",
		`{"x-payment-info":{"price":{"amount":"1","currency":"USDC"}}}`:                  "1",
		`{"x-payment-info":{"pricingMode":"range","minPrice":"0.01","maxPrice":"0.1"}}`:  "",
		`{"x-payment-info":{"price":{"mode":"fixed","currency":"EUR","amount":"0.05"}}}`: "",
		`{"x-payment-info":{"price":"0.1234567"}}`:                                       "",
		`{"x-payment-info":{"protocols":["x402"]}}`:                                      "",
		`{}`: "",
	} {
		require.Equal(t, want, listedPrice(json.RawMessage(op)), op)
	}
	atomic, ok := usdcAtomic("0.05")
	require.True(t, ok)
	require.Equal(t, "50000", atomic)
}

// TestDiscoveryHostileQuote reads an origin one of whose resources answers
// a 402 carrying what Postgres cannot store: both resources are indexed,
// that one without it.
func TestDiscoveryHostileQuote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	o := &origins{asked: map[string][]time.Time{}, inFlight: map[string]int{}}
	srv := httptest.NewServer(o)
	defer srv.Close()
	_, o.port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	_, client, _ := sellers(t)
	origin := "http://hostile.test:" + o.port
	d := NewDiscoverer(&DiscovererConfig{Pool: db.Pool, Fetch: client, Gap: -1})
	via, indexed, err := d.Origin(ctx, origin)
	require.NoError(t, err)
	require.Equal(t, "well-known", via)
	require.Equal(t, 2, indexed)
	var description, price string
	var input, output, extensions, accepts []byte
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT description, price_usdc::text, input_schema, output_schema, extensions, accepts
		FROM index_resources WHERE resource = $1`, origin+"/bad").Scan(&description, &price, &input, &output, &extensions, &accepts))
	require.Equal(t, "bad", description)
	require.Equal(t, "0.000020", price)
	require.JSONEq(t, `{"type":"http"}`, string(input))
	require.Nil(t, output)
	require.Nil(t, extensions)
	require.NotContains(t, string(accepts), "extra")
}
