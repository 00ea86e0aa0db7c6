package index

import (
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/fetch"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

// sellerLog records how the sellers were asked.
type sellerLog struct {
	mu       sync.Mutex
	requests map[string][]string // host -> "METHOD body"
	// quick are the hosts that answer at once and have not yet; fast is
	// closed once each has. slowHeld is how long slow.test held its
	// answer, waiting for them.
	quick    map[string]bool
	fast     chan struct{}
	slowHeld time.Duration
}

func (l *sellerLog) add(host, entry string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests[host] = append(l.requests[host], entry)
}

// answered notes that host has answered.
func (l *sellerLog) answered(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.quick[host] {
		delete(l.quick, host)
		if len(l.quick) == 0 {
			close(l.fast)
		}
	}
}

// sellers answers as the resources of hosts named after their behaviour,
// all on one loopback server; the fetch client resolves every .test name to
// it (private.test to a private address the guard refuses). slow.test
// answers once paid, v1, bogus402, missing, broken and busy.test have: a
// prober asking one host at a time gets no answer from it.
func sellers(t *testing.T) (*httptest.Server, *fetch.Client, *sellerLog) {
	t.Helper()
	quote := base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"resource":{"url":"x"},"accepts":[{"scheme":"exact","network":"eip155:8453","amount":"10","asset":"` + usdc + `","payTo":"0x1","maxTimeoutSeconds":60}]}`))
	log := &sellerLog{requests: map[string][]string{}, fast: make(chan struct{}), quick: map[string]bool{}}
	for _, h := range []string{"paid", "v1", "bogus402", "missing", "broken", "busy"} {
		log.quick[h+".test"] = true
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.Host)
		body, _ := io.ReadAll(r.Body)
		log.add(host, r.Method+" "+string(body))
		defer log.answered(host)
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		if r.Method == http.MethodPost && (r.Header.Get("Content-Type") != "application/json" || string(body) != "{}") {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		paid := func() {
			w.Header().Set("PAYMENT-REQUIRED", quote)
			w.WriteHeader(http.StatusPaymentRequired)
			_, _ = w.Write([]byte("{}"))
		}
		switch {
		case host == "paid.test" || strings.HasPrefix(host, "live"):
			paid()
		case host == "slow.test":
			arrived := time.Now()
			select {
			case <-log.fast:
			case <-r.Context().Done():
				return
			}
			log.mu.Lock()
			log.slowHeld = time.Since(arrived)
			log.mu.Unlock()
			paid()
		case host == "v1.test":
			w.WriteHeader(http.StatusPaymentRequired)
			_, _ = w.Write([]byte(`{"x402Version":1,"accepts":[{"scheme":"exact","network":"base","maxAmountRequired":"10","payTo":"0x1"}]}`))
		case host == "nul.test":
			w.WriteHeader(http.StatusPaymentRequired)
			_, _ = w.Write([]byte(`{"x402Version":1,"accepts":[{"scheme":"ex\u0000act","network":"base","maxAmountRequired":"10","asset":"` + usdc + `","payTo":"0x\u00002","extra":{"x":"\u0000"}}]}`))
		case host == "bogus402.test":
			w.WriteHeader(http.StatusPaymentRequired)
			_, _ = w.Write([]byte("pay me"))
		case host == "missing.test":
			w.WriteHeader(http.StatusNotFound)
		case host == "broken.test":
			w.WriteHeader(http.StatusInternalServerError)
		case host == "busy.test":
			w.WriteHeader(http.StatusTooManyRequests)
		case host == "never.test" || strings.HasPrefix(host, "never"):
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, fetch.New(&fetch.Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Resolver: loopbackResolver{}}), log
}

// listedSellers is the sellers (see sellers) and a discovery source on
// loopback listing resources of theirs.
type listedSellers struct {
	client *fetch.Client // reaches the sellers under any .test name
	log    *sellerLog    // how the sellers were asked
	port   string        // the sellers' port
	list   *listing      // the source's items and requests
	src    string        // the source's URL
}

// newListedSellers starts the sellers and a source listing nothing until
// setItems.
func newListedSellers(t *testing.T) *listedSellers {
	t.Helper()
	srv, client, log := sellers(t)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	list := &listing{}
	src := httptest.NewServer(list)
	t.Cleanup(src.Close)
	return &listedSellers{client: client, log: log, port: port, list: list, src: src.URL}
}

// url returns the URL of path on the seller named host.test.
func (s *listedSellers) url(host, path string) string {
	return "http://" + host + ".test:" + s.port + path
}

// setItems sets the items the source lists.
func (s *listedSellers) setItems(items ...map[string]any) {
	s.list.mu.Lock()
	defer s.list.mu.Unlock()
	s.list.items = items
}

// newProber returns a prober of db's hosts through client, with a 1 s
// timeout.
func newProber(db *dbtest.DB, client *fetch.Client) *Prober {
	return NewProber(&ProberConfig{Pool: db.Pool, Fetch: client, Timeout: time.Second})
}

// loopbackResolver resolves every .test name to 127.0.0.1 and
// private.test to a private address the guard refuses.
type loopbackResolver struct{}

func (loopbackResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "private.test" {
		return []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// TestLiveness probes sellers that answer 402 with a quote (v2 header, v1
// body, slowly), 402 without one, 404, 500, 429, never, on a closed port,
// and on a private address.
func TestLiveness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	listed := newListedSellers(t)
	client, log := listed.client, listed.log
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, closedPort, _ := net.SplitHostPort(closed.Addr().String())
	require.NoError(t, closed.Close())

	var items []map[string]any
	for _, h := range []string{"paid", "v1", "slow", "bogus402", "missing", "broken", "busy", "never", "closed", "private"} {
		resource := listed.url(h, "/r")
		if h == "closed" {
			resource = "http://closed.test:" + closedPort + "/r"
		}
		it := item(resource, "10")
		if h == "paid" {
			it["extensions"] = map[string]any{"bazaar": map[string]any{"info": map[string]any{"input": map[string]any{"method": "POST"}}}}
		}
		items = append(items, it)
	}
	listed.setItems(items...)
	require.NoError(t, newCrawler(db, listed.src, 100).FullPass(ctx, nil))

	r := NewReader(db.Pool, nil)
	hosts, err := r.Hosts(ctx, "", "host", 50)
	require.NoError(t, err)
	for _, h := range hosts {
		require.Nil(t, h.Live, "not measured yet: null")
		require.Nil(t, h.Status)
		require.Nil(t, h.LatencyMS)
		require.Nil(t, h.CheckedAt)
	}

	// A first measurement makes busy.test live; a 429 later leaves it so.
	require.NoError(t, recordProbe(ctx, db, "busy.test", true))
	p := newProber(db, client)
	start := time.Now()
	rep, err := p.ProbeAll(ctx)
	require.NoError(t, err)
	require.Less(t, time.Since(start), 5*time.Second, "the probes run at once, each bounded by its timeout")
	require.Equal(t, ProbeReport{Probed: 10, Live: 3, Dead: 6, Later: 1}, *rep)

	hosts, err = r.Hosts(ctx, "", "host", 50)
	require.NoError(t, err)
	got := map[string]Host{}
	for _, h := range hosts {
		got[h.Host] = h
	}
	check := func(host string, live bool, status int) {
		t.Helper()
		h := got[host]
		require.NotNil(t, h.Live, host)
		require.Equal(t, live, *h.Live, host)
		require.NotNil(t, h.CheckedAt, host)
		if status == 0 {
			require.Nil(t, h.Status, host)
			require.Nil(t, h.LatencyMS, host)
			return
		}
		require.Equal(t, status, *h.Status, host)
		require.NotNil(t, h.LatencyMS, host)
	}
	check("paid.test", true, 402)
	check("v1.test", true, 402)
	check("slow.test", true, 402)
	log.mu.Lock()
	held := log.slowHeld
	log.mu.Unlock()
	require.Positive(t, held, "slow.test answered after the others")
	require.GreaterOrEqual(t, *got["slow.test"].LatencyMS, int(held.Milliseconds()), "the latency counts the seller's wait")
	check("bogus402.test", false, 402)
	check("missing.test", false, 404)
	check("broken.test", false, 500)
	check("busy.test", true, 429)
	check("never.test", false, 0)
	check("closed.test", false, 0)
	check("private.test", false, 0)
	errs := map[string]string{}
	rows, err := db.Pool.Query(ctx, "SELECT host, coalesce(probe_error, '') FROM index_hosts")
	require.NoError(t, err)
	for rows.Next() {
		var h, e string
		require.NoError(t, rows.Scan(&h, &e))
		errs[h] = e
	}
	require.NoError(t, rows.Err())
	require.Equal(t, "refused", errs["private.test"])
	require.Equal(t, "timeout", errs["never.test"])
	require.Contains(t, errs["closed.test"], "unreachable")

	// Declared method, never HEAD, {} for POST; the refused host was never
	// asked.
	log.mu.Lock()
	require.Equal(t, []string{"POST {}"}, log.requests["paid.test"])
	require.Equal(t, []string{"GET "}, log.requests["missing.test"])
	require.Empty(t, log.requests["private.test"])
	log.mu.Unlock()

	s, err := r.Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, Liveness{Measured: 10, Live: 4, Dead: 6}, s.Liveness)
}

// probeOne crawls a listing of one resource of the listed seller name
// (name.test/r, 10 atomic units) and probes it, and returns the report.
func probeOne(ctx context.Context, t *testing.T, name string) (*dbtest.DB, *listedSellers, ProbeReport) {
	t.Helper()
	db := dbtest.Schema(ctx, t)
	listed := newListedSellers(t)
	listed.setItems(item(listed.url(name, "/r"), "10"))
	require.NoError(t, newCrawler(db, listed.src, 100).FullPass(ctx, nil))
	rep, err := newProber(db, listed.client).ProbeAll(ctx)
	require.NoError(t, err)
	return db, listed, *rep
}

// TestLivenessFirst429 leaves a host never measured before unmeasured when
// it answers 429: try later is no verdict.
func TestLivenessFirst429(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _, rep := probeOne(ctx, t, "busy")
	require.Equal(t, ProbeReport{Probed: 1, Later: 1}, rep)
	hosts, err := NewReader(db.Pool, nil).Hosts(ctx, "busy", "host", 5)
	require.NoError(t, err)
	require.Len(t, hosts, 1)
	require.Nil(t, hosts[0].Live)
	require.Equal(t, 429, *hosts[0].Status)
	s, err := NewReader(db.Pool, nil).Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, Liveness{Unmeasured: 1}, s.Liveness)
}

// TestLivenessHostileQuote probes a seller whose 402 carries NUL
// characters in its option's strings: the probe is recorded, the strings
// without them, and compared with the listing.
func TestLivenessHostileQuote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, listed, rep := probeOne(ctx, t, "nul")
	require.Equal(t, ProbeReport{Probed: 1, Live: 1}, rep)
	var matches bool
	var differences, accepts string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT quote_matches_listing, quote_differences::text, quote_accepts::text FROM index_hosts WHERE host = 'nul.test'").
		Scan(&matches, &differences, &accepts))
	require.False(t, matches)
	require.JSONEq(t, `[{"resource":"`+listed.url("nul", "/r")+`","network":"eip155:8453","asset":"`+usdc+`","field":"pay_to","listing":"0x1","quote":"0x2"}]`, differences)
	require.JSONEq(t, `[{"scheme":"exact","network":"eip155:8453","asset":"`+usdc+`","amount":"10","pay_to":"0x2"}]`, accepts)
}

// recordProbe records a first liveness measurement of host.
func recordProbe(ctx context.Context, db *dbtest.DB, host string, live bool) error {
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	status := 402
	if err := store.Append(ctx, tx, store.NewEvent{Stream: store.HostStream(host), Type: store.EventHostProbed,
		Data: store.HostProbed{Live: &live, Status: &status, CheckedAt: time.Now()}}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// TestProbeVerdict: a probe's 402 is compared with the listing as it
// stands, unless it moved and differs (the listing may have moved too, not
// read yet) or its comparison already waits for the listing: then it is
// not compared (nil) and pending. A listing read again after the 402 is
// compared, never waited for; one no longer listed is not compared.
func TestProbeVerdict(t *testing.T) {
	at := func(amount string) []store.Accept {
		return []store.Accept{{Scheme: "exact", Network: "eip155:8453", Asset: usdc, Amount: amount, PayTo: "0xabc"}}
	}
	yes, no := true, false
	for _, tc := range []struct {
		name           string
		listing, last  []store.Accept
		quote          []store.Accept
		pending, fresh bool
		want           *bool
		wantPending    bool
		wantDifference bool
	}{
		{name: "no quote", listing: at("10"), last: at("10")},
		{name: "agree", listing: at("10"), last: at("10"), quote: at("10"), want: &yes},
		{name: "first quote differs", listing: at("10"), quote: at("20"), want: &no, wantDifference: true},
		{name: "moved and differs", listing: at("10"), last: at("10"), quote: at("20"), wantPending: true},
		{name: "differs as before", listing: at("10"), last: at("20"), quote: at("20"), want: &no, wantDifference: true},
		{name: "still waiting", listing: at("10"), last: at("20"), quote: at("20"), pending: true, wantPending: true},
		{name: "agree while waiting", listing: at("20"), last: at("20"), quote: at("20"), pending: true, want: &yes},
		{name: "moved and agrees", listing: at("20"), last: at("10"), quote: at("20"), want: &yes},
		{name: "moved and differs from a listing read after it", listing: at("10"), last: at("10"), quote: at("20"), fresh: true, want: &no, wantDifference: true},
		{name: "waiting, then the listing read after it differs", listing: at("10"), last: at("20"), quote: at("20"), pending: true, fresh: true, want: &no, wantDifference: true},
		{name: "no longer listed, read after it", last: at("10"), quote: at("20"), pending: true, fresh: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := store.HostProbed{QuoteAccepts: tc.quote}
			probeVerdict(&m, "https://r.test/x", tc.listing, tc.last, tc.pending, tc.fresh)
			require.Equal(t, tc.want, m.QuoteMatchesListing)
			require.Equal(t, tc.wantPending, m.QuotePending)
			require.Equal(t, tc.wantDifference, len(m.QuoteDifferences) > 0)
		})
	}
}
