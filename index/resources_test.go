package index

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/mr-tron/base58"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

// priceSeller is a seller of one resource on loopback whose 402 asks
// price (USDC atomic units, to 0xabc), listed either by a discovery
// source (setListing) or by its origin's OpenAPI document (setDeclared),
// with the index's crawler of the source, discoverer of the origin,
// prober (reading the origin's listing again when its 402 differs) and
// reader.
type priceSeller struct {
	t                  *testing.T
	host, resource     string
	price              atomic.Int64
	mu                 sync.Mutex
	declared, docPrice string // the OpenAPI document's listed price ("": no document)
	list               *listing
	crawler            *Crawler
	discoverer         *Discoverer
	prober             *Prober
	reader             *Reader
}

// noTXT finds no _x402 record.
type noTXT struct{}

func (noTXT) LookupTXT(_ context.Context, name string) ([]string, error) {
	return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

// newPriceSeller starts the seller named host on db's index, its 402
// asking price; before, when set, runs as each request arrives.
func newPriceSeller(t *testing.T, db *dbtest.DB, host string, price int64, before func()) *priceSeller {
	t.Helper()
	s := &priceSeller{t: t, host: host, list: &listing{}}
	s.price.Store(price)
	seller := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if before != nil {
			before()
		}
		if r.URL.Path == "/openapi.json" {
			s.mu.Lock()
			docPrice := s.docPrice
			s.mu.Unlock()
			if docPrice == "" {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"openapi": "3.1.0", "paths": map[string]any{"/r": map[string]any{"get": map[string]any{
				"x-payment-info": map[string]any{"price": map[string]any{"mode": "fixed", "currency": "USD", "amount": docPrice}, "protocols": []any{"x402"}}}}}})
			return
		}
		if r.URL.Path != "/r" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("PAYMENT-REQUIRED", quoteHeader(`{"scheme":"exact","network":"eip155:8453","amount":"`+
			big.NewInt(s.price.Load()).String()+`","asset":"`+usdc+`","payTo":"0xabc"}`))
		w.WriteHeader(http.StatusPaymentRequired)
	}))
	t.Cleanup(seller.Close)
	_, port, _ := net.SplitHostPort(seller.Listener.Addr().String())
	_, client, _ := sellers(t)
	src := httptest.NewServer(s.list)
	t.Cleanup(src.Close)
	origin := "http://" + host + ":" + port
	s.resource = origin + "/r"
	s.crawler, s.reader = newCrawler(db, src.URL, 100), NewReader(db.Pool, nil)
	s.discoverer = NewDiscoverer(&DiscovererConfig{Pool: db.Pool, Fetch: client, TXT: noTXT{}, Origins: []string{origin}, Gap: -1})
	s.prober = NewProber(&ProberConfig{Pool: db.Pool, Fetch: client, Timeout: time.Minute, Origins: s.discoverer})
	return s
}

// setListing has the source list the resource at amount, or list nothing
// (amount < 0).
func (s *priceSeller) setListing(amount int64) {
	var items []map[string]any
	if amount >= 0 {
		it := item(s.resource, big.NewInt(amount).String())
		it["accepts"].([]any)[0].(map[string]any)["payTo"] = "0xabc"
		items = append(items, it)
	}
	s.list.mu.Lock()
	s.list.items = items
	s.list.mu.Unlock()
}

// setDeclared has the origin's OpenAPI document list the resource at
// price (USDC decimal text), or serve no document ("").
func (s *priceSeller) setDeclared(price string) {
	s.mu.Lock()
	s.docPrice = price
	s.mu.Unlock()
}

// crawl reads the source in a full pass.
func (s *priceSeller) crawl(ctx context.Context) {
	s.t.Helper()
	require.NoError(s.t, s.crawler.FullPass(ctx, nil))
}

// probe probes every host.
func (s *priceSeller) probe(ctx context.Context) {
	s.t.Helper()
	_, err := s.prober.ProbeAll(ctx)
	require.NoError(s.t, err)
}

// verdict returns whether the host's 402 matches its listing, how they
// differ, and whether the comparison waits for the listing.
func (s *priceSeller) verdict(ctx context.Context) (*bool, []store.QuoteDifference, bool) {
	s.t.Helper()
	d, err := s.reader.HostDetail(ctx, s.host)
	require.NoError(s.t, err)
	var pending bool
	require.NoError(s.t, s.reader.pool.QueryRow(ctx, "SELECT quote_pending FROM index_hosts WHERE host = $1", s.host).Scan(&pending))
	return d.Host.QuoteMatchesListing, d.QuoteDifferences, pending
}

// amountDiffers is how a 402 asking quote differs from resource's
// listing at listed.
func amountDiffers(resource, listed, quote string) []store.QuoteDifference {
	return []store.QuoteDifference{{Resource: resource, Network: "eip155:8453", Asset: usdc, Field: "amount", Listing: listed, Quote: quote}}
}

// TestPriceHonestyWhenPricesMove: an honest seller moves its listing and
// its 402 to a new price together, and the index reads the two sides in
// either order. Once it has read both, the host is shown as asking what it
// lists, without waiting for another probe; and a listing read after the
// 402 never shows the 402 asking more than the listing. A 402 that moves
// alone is compared within the next pass of the listing; a listing dropped
// ends the wait.
func TestPriceHonestyWhenPricesMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	s := newPriceSeller(t, db, "honest.test", 10, nil)
	setPrice := func(amount int64) {
		s.price.Store(amount)
		s.setListing(amount)
	}
	neverAsksMore := func(differences []store.QuoteDifference) {
		t.Helper()
		for _, d := range differences {
			if d.Field == "amount" {
				listed, _ := new(big.Int).SetString(d.Listing, 10)
				quoted, _ := new(big.Int).SetString(d.Quote, 10)
				require.LessOrEqual(t, quoted.Cmp(listed), 0, "shown asking more than it lists: %+v", d)
			}
		}
	}
	yes, no := true, false

	setPrice(10)
	s.crawl(ctx)
	s.probe(ctx)
	got, _, _ := s.verdict(ctx)
	require.Equal(t, &yes, got)

	// The 402 is read first: the listing as last read says less, and may
	// have moved too: not compared (never shown asking more than it
	// lists). Once the listing is read, the two agree, with no probe in
	// between.
	setPrice(20)
	s.probe(ctx)
	got, differences, pending := s.verdict(ctx)
	require.Nil(t, got, "%+v", differences)
	require.Empty(t, differences)
	require.True(t, pending)
	s.probe(ctx)
	got, _, _ = s.verdict(ctx)
	require.Nil(t, got, "still waiting for the listing")
	s.crawl(ctx)
	got, differences, pending = s.verdict(ctx)
	require.Equal(t, &yes, got, "%+v", differences)
	require.False(t, pending)

	// The listing is read first: compared with the last 402 at once, it
	// never shows the seller asking more than it lists; the next probe
	// finds them agreeing.
	setPrice(30)
	s.crawl(ctx)
	_, differences, _ = s.verdict(ctx)
	neverAsksMore(differences)
	s.probe(ctx)
	got, differences, _ = s.verdict(ctx)
	require.Equal(t, &yes, got, "%+v", differences)

	// A listing that moves to a price the 402 does not ask is shown as
	// differing at once.
	s.setListing(5)
	s.crawl(ctx)
	got, differences, _ = s.verdict(ctx)
	require.Equal(t, &no, got)
	require.Equal(t, amountDiffers(s.resource, "5", "30"), differences)

	// A 402 that moves alone: a whole listing cannot be read for one
	// resource, so not compared until the next pass reads the listing
	// again, unchanged; then shown differing.
	s.price.Store(50)
	s.probe(ctx)
	got, _, pending = s.verdict(ctx)
	require.Nil(t, got)
	require.True(t, pending)
	s.crawl(ctx)
	got, differences, pending = s.verdict(ctx)
	require.Equal(t, &no, got)
	require.Equal(t, amountDiffers(s.resource, "5", "50"), differences)
	require.False(t, pending)

	// A 402 that moves while its resource is dropped from the listing: the
	// pass that no longer lists it ends the wait (not compared, not
	// listed), rather than leaving it waiting for a listing that will not
	// come.
	s.price.Store(60)
	s.probe(ctx)
	_, _, pending = s.verdict(ctx)
	require.True(t, pending)
	s.setListing(-1)
	s.crawl(ctx)
	got, _, pending = s.verdict(ctx)
	require.Nil(t, got)
	require.False(t, pending, "no listing lists it any more")
}

// TestPriceHonestyOriginListing: a seller listed by its own origin's
// OpenAPI document (its x-payment-info price) has that listing read again
// as soon as a probe finds its 402 differing, so a 402 raised alone is
// shown differing right after the probe, a seller moving both is shown
// agreeing, and a resource its document no longer declares is not
// compared, never left waiting.
func TestPriceHonestyOriginListing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	s := newPriceSeller(t, db, "origin-honest.test", 10, nil)
	s.setDeclared("0.000010")
	discover := func() {
		t.Helper()
		rep, err := s.discoverer.Run(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, rep.Origins)
	}
	yes, no := true, false

	discover()
	s.probe(ctx)
	got, differences, _ := s.verdict(ctx)
	require.Equal(t, &yes, got, "%+v", differences)

	// Only its 402 moves: its document, read again at once, still lists
	// the old price.
	s.price.Store(20)
	s.probe(ctx)
	got, differences, pending := s.verdict(ctx)
	require.Equal(t, &no, got)
	require.Equal(t, amountDiffers(s.resource, "10", "20"), differences)
	require.False(t, pending)

	// Both move: the document read again lists what the 402 asks, and
	// they stay agreeing at the next probe and the origin's next read.
	s.setDeclared("0.000030")
	s.price.Store(30)
	s.probe(ctx)
	got, differences, pending = s.verdict(ctx)
	require.Equal(t, &yes, got, "%+v", differences)
	require.False(t, pending)
	s.probe(ctx)
	got, differences, _ = s.verdict(ctx)
	require.Equal(t, &yes, got, "%+v", differences)
	discover()
	got, differences, _ = s.verdict(ctx)
	require.Equal(t, &yes, got, "%+v", differences)

	// Its document no longer declares it, and its 402 moves: not listed,
	// not compared, not waiting; the origin's next read retires it.
	s.setDeclared("")
	s.price.Store(40)
	s.probe(ctx)
	got, _, pending = s.verdict(ctx)
	require.Nil(t, got)
	require.False(t, pending)
	discover()
	d, err := s.reader.HostDetail(ctx, s.host)
	require.NoError(t, err)
	require.Zero(t, d.Host.Services)
}

// TestPriceHonestyProbeAcrossCrawl: a probe run reads its targets' listings
// when it begins; a crawl that reads the new listing while the probe waits
// for the new 402 compares it with the 402 before, and the probe, written
// after, compares its 402 with the listing as it stands then, not as it
// stood when the run began: the seller that moved both is shown agreeing.
func TestPriceHonestyProbeAcrossCrawl(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	var hold atomic.Bool
	s := newPriceSeller(t, db, "race.test", 10, func() {
		if hold.Load() {
			arrived <- struct{}{}
			<-release
		}
	})
	yes := true

	s.setListing(10)
	s.crawl(ctx)
	s.probe(ctx)
	got, _, _ := s.verdict(ctx)
	require.Equal(t, &yes, got)

	// The seller moves both to 20. A probe run begins (the listing it read
	// says 10) and its request is held; the crawl reads the new listing
	// meanwhile; then the probe gets the new 402 and writes.
	s.price.Store(20)
	hold.Store(true)
	probed := make(chan error, 1)
	go func() {
		_, err := s.prober.ProbeAll(ctx)
		probed <- err
	}()
	<-arrived
	hold.Store(false)
	s.setListing(20)
	s.crawl(ctx)
	close(release)
	require.NoError(t, <-probed)
	got, differences, _ := s.verdict(ctx)
	require.Equal(t, &yes, got, "%+v", differences)
}

// TestSchedules: a schedule's jobs are unique by its own period, so every
// run of an "@every 10s" inserts its job (unique per minute, the second
// would be dropped), and a schedule whose runs come closer than a second is
// refused at start, saying why.
func TestSchedules(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for spec, want := range map[string]time.Duration{
		"@every 10s": 10 * time.Second, "*/15 * * * *": 15 * time.Minute, "*/7 * * * *": 4 * time.Minute, "@hourly": time.Hour, "0 3 * * *": 24 * time.Hour,
	} {
		sched, err := cron.ParseStandard(spec)
		require.NoError(t, err)
		require.Equal(t, want, SchedulePeriod(sched, now), spec)
	}
	_, err := PeriodicJobs("@every 10s", "@every 10s")
	require.NoError(t, err)
	_, err = PeriodicJobs("@every 500ms", "*/30 * * * *")
	require.ErrorContains(t, err, `INDEX_CRON "@every 500ms": runs 500ms apart`)
	require.ErrorContains(t, CheckSchedule("INDEX_CRON", "@every 1500ms"), "whole seconds")
	require.ErrorContains(t, err, "could not run as often as asked")
	require.ErrorContains(t, CheckSchedule("LIVENESS_CRON", "@every 100ms"), "LIVENESS_CRON")

	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Logger: nil})
	require.NoError(t, err)
	// Two runs of the schedule, 10 s apart.
	run := time.Now().Add(time.Hour).Truncate(time.Minute)
	insert := func(at time.Time, opts *river.InsertOpts) bool {
		t.Helper()
		o := river.InsertOpts{ScheduledAt: at}
		if opts != nil {
			o.UniqueOpts = opts.UniqueOpts
		}
		res, err := rc.Insert(ctx, LivenessArgs{}, &o)
		require.NoError(t, err)
		return !res.UniqueSkippedAsDuplicate
	}
	require.True(t, insert(run, uniqueBy(10*time.Second)))
	require.True(t, insert(run.Add(10*time.Second), uniqueBy(10*time.Second)), "the second run of @every 10s is inserted")
	require.False(t, insert(run.Add(10*time.Second), uniqueBy(10*time.Second)), "one insertion per run")
	// Unique per minute (the job's own options), the second run is lost.
	require.True(t, insert(run.Add(2*time.Minute), nil))
	require.False(t, insert(run.Add(2*time.Minute+10*time.Second), nil))
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = $1", LivenessArgs{}.Kind()).Scan(&n))
	require.Equal(t, 3, n)
}

// signEVM signs origin with key as EIP-191 personal_sign (v 27/28).
func signEVM(t *testing.T, key *ecdsa.PrivateKey, origin string) string {
	t.Helper()
	sig, err := crypto.Sign(accounts.TextHash([]byte(origin)), key)
	require.NoError(t, err)
	sig[crypto.RecoveryIDOffset] += 27
	return "0x" + hex.EncodeToString(sig)
}

// TestOwnershipProof: origins on loopback declare their resources in
// /.well-known/x402 with ownership proofs: good.test's is its origin signed
// by its EVM payTo's key, sol.test's by its Solana payTo's key; forged.test
// signs with another key, and copied.test serves good.test's proof (signed
// for another origin). Only good.test's and sol.test's resources are
// verified, on the host page (its JSON and its HTML: the service's owner
// cell and the ownership note) and in the resources search; a proof taken
// down unverifies. The resources keep their 402's options with their extra.
func TestOwnershipProof(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	owner, err := crypto.GenerateKey()
	require.NoError(t, err)
	other, err := crypto.GenerateKey()
	require.NoError(t, err)
	solPub, solKey, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	payTo := crypto.PubkeyToAddress(owner.PublicKey).Hex()
	solPayTo := base58.Encode(solPub)

	var port string
	var takenDown atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.Host)
		origin := "http://" + host + ":" + port
		receiver, network, asset, extra := payTo, "eip155:8453", usdc, `{"name":"USD Coin","version":"2"}`
		if host == "sol.test" {
			receiver, network, asset, extra = solPayTo, "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", `{"feePayer":"`+solPayTo+`"}`
		}
		switch r.URL.Path {
		case "/.well-known/x402":
			var proof string
			switch host {
			case "good.test":
				proof = signEVM(t, owner, origin)
			case "forged.test":
				proof = signEVM(t, other, origin)
			case "copied.test":
				proof = signEVM(t, owner, "http://good.test:"+port)
			case "sol.test":
				proof = base58.Encode(ed25519.Sign(solKey, []byte(origin)))
			}
			doc := map[string]any{"version": 1, "resources": []string{origin + "/api"}}
			if !takenDown.Load() {
				doc["ownershipProofs"] = []string{proof}
			}
			_ = json.NewEncoder(w).Encode(doc)
		case "/api":
			w.Header().Set("PAYMENT-REQUIRED", quoteHeader(`{"scheme":"exact","network":"`+network+`","amount":"1000","asset":"`+asset+`","payTo":"`+receiver+`","maxTimeoutSeconds":60,"extra":`+extra+`}`))
			w.WriteHeader(http.StatusPaymentRequired)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	_, port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	_, client, _ := sellers(t)
	d := NewDiscoverer(&DiscovererConfig{Pool: db.Pool, Fetch: client, Gap: -1, TXT: txtServer(t, nil)})
	hosts := []string{"good.test", "sol.test", "forged.test", "copied.test"}
	for _, h := range hosts {
		via, n, err := d.Origin(ctx, "http://"+h+":"+port)
		require.NoError(t, err)
		require.Equal(t, "well-known", via, h)
		require.Equal(t, 1, n, h)
	}
	r := NewReader(db.Pool, nil)
	verified := func() map[string][]string {
		t.Helper()
		got := map[string][]string{}
		for _, h := range hosts {
			detail, err := r.HostDetail(ctx, h)
			require.NoError(t, err)
			require.Len(t, detail.Services, 1)
			got[h] = detail.Services[0].VerifiedPayTo
			require.Len(t, detail.Ownership, len(got[h]), h)
		}
		return got
	}
	require.Equal(t, map[string][]string{"good.test": {strings.ToLower(payTo)}, "sol.test": {solPayTo}, "forged.test": {}, "copied.test": {}}, verified())
	detail, err := r.HostDetail(ctx, "good.test")
	require.NoError(t, err)
	require.Equal(t, "well-known", detail.Ownership[0].Via)

	// The host page as served: the service's owner cell, and the note
	// naming the origin, the receiver and where the proof was found.
	html, err := NewHTMLPage()
	require.NoError(t, err)
	hostPage := func(host string) string {
		t.Helper()
		detail, err := r.HostDetail(ctx, host)
		require.NoError(t, err)
		var buf bytes.Buffer
		require.NoError(t, html.RenderHost(&buf, detail, time.Now()))
		return buf.String()
	}
	good := hostPage("good.test")
	require.Contains(t, good, `>verified</span> `+strings.ToLower(payTo)+`</td>`)
	require.NotContains(t, good, "not proved")
	require.Contains(t, good, `<p class="note" id="ownership">Ownership proved: http://good.test:`+port+` for `+strings.ToLower(payTo)+
		` (proof in its well-known discovery document, checked `)
	require.Contains(t, hostPage("sol.test"), `>verified</span> `+solPayTo+`</td>`)
	for _, h := range []string{"forged.test", "copied.test"} {
		page := hostPage(h)
		require.Contains(t, page, `<td class="sample owner">not proved</td>`, h)
		require.NotContains(t, page, ">verified</span>", h)
		require.Contains(t, page, `<p class="note" id="ownership">No origin of this host proves ownership of a receiver.`, h)
	}

	q := ResourceQuery{PayTo: strings.ToUpper(payTo[2:])}
	q.PayTo = "0x" + q.PayTo
	require.NoError(t, q.Check())
	page, err := r.Resources(ctx, q)
	require.NoError(t, err)
	require.Len(t, page.Resources, 3, "good, forged and copied pay the same receiver")
	for _, res := range page.Resources {
		require.Equal(t, res.Host == "good.test", len(res.VerifiedPayTo) == 1, res.Host)
		require.Len(t, res.Accepts, 1)
		require.JSONEq(t, `{"name":"USD Coin","version":"2"}`, string(res.Accepts[0].Extra), "the 402's extra")
	}
	q = ResourceQuery{Network: "solana"}
	require.NoError(t, q.Check())
	page, err = r.Resources(ctx, q)
	require.NoError(t, err)
	require.Len(t, page.Resources, 1)
	require.JSONEq(t, `{"feePayer":"`+solPayTo+`"}`, string(page.Resources[0].Accepts[0].Extra))

	takenDown.Store(true)
	_, _, err = d.Origin(ctx, "http://good.test:"+port)
	require.NoError(t, err)
	require.Empty(t, verified()["good.test"])
	require.Equal(t, []string{solPayTo}, verified()["sol.test"])
	good = hostPage("good.test")
	require.Contains(t, good, `<td class="sample owner">not proved</td>`)
	require.Contains(t, good, `<p class="note" id="ownership">No origin of this host proves ownership of a receiver.`)
}

// bazaarItem is a Bazaar v2 listing item with a description, tags, the
// bazaar extension's call contract, and its option's extra (USDC's EIP-712
// domain).
func bazaarItem(resource, amount, payTo, description string, tags ...string) map[string]any {
	it := item(resource, amount)
	it["accepts"].([]any)[0].(map[string]any)["payTo"] = payTo
	it["accepts"].([]any)[0].(map[string]any)["maxTimeoutSeconds"] = 120
	it["accepts"].([]any)[0].(map[string]any)["extra"] = map[string]any{"version": "2", "name": "USD Coin", "assetTransferMethod": "eip3009"}
	it["description"] = description
	it["tags"] = tags
	it["extensions"] = map[string]any{"bazaar": map[string]any{
		"info":   map[string]any{"input": map[string]any{"type": "http", "method": "GET", "queryParams": map[string]any{"city": "Paris"}}, "output": map[string]any{"type": "json", "example": map[string]any{"temp": 21}}},
		"schema": map[string]any{"type": "object"},
	}}
	return it
}

// TestResourcesSearch crawls resources with their call contracts (a v2
// item's bazaar extension, a v1 option's outputSchema), probes their
// hosts, and searches them by text, filters and sorts, and pages; bad
// parameters are refused by field.
func TestResourcesSearch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	listed := newListedSellers(t)
	v1 := map[string]any{"resource": listed.url("live2", "/quote"), "x402Version": 1, "accepts": []any{map[string]any{
		"scheme": "exact", "network": "base", "maxAmountRequired": "5000", "asset": usdc, "payTo": "0xCCC", "description": "Stock quotes",
		"mimeType": "application/json", "outputSchema": map[string]any{"input": map[string]any{"type": "http", "method": "post", "bodyType": "json"}, "output": map[string]any{"price": "number"}}}}}
	listed.setItems(
		bazaarItem(listed.url("live0", "/weather"), "1000", "0xAAA", "Weather forecasts by city", "weather", "Forecast"),
		bazaarItem(listed.url("live1", "/weather"), "20000", "0xBBB", "Historical weather archive", "weather"),
		bazaarItem(listed.url("dead", "/weather"), "500", "0xBBB", "Weather now", "weather"),
		v1,
	)
	require.NoError(t, newCrawler(db, listed.src, 100).FullPass(ctx, nil))
	_, err := newProber(db, listed.client).ProbeAll(ctx)
	require.NoError(t, err)
	r := NewReader(db.Pool, nil)
	search := func(q ResourceQuery) *ResourcesAnswer {
		t.Helper()
		require.NoError(t, q.Check())
		a, err := r.Resources(ctx, q)
		require.NoError(t, err)
		return a
	}
	urls := func(a *ResourcesAnswer) []string {
		var out []string
		for _, res := range a.Resources {
			out = append(out, strings.TrimPrefix(strings.Split(res.Resource, ":")[1], "//"))
		}
		return out
	}

	// The live hosts rank above the dead one; the dead one still matches.
	a := search(ResourceQuery{Q: "weather"})
	require.Equal(t, []string{"live0.test", "live1.test", "dead.test"}, urls(a))
	first := a.Resources[0]
	require.Equal(t, []string{"weather", "Forecast"}, first.Tags)
	require.Equal(t, "Weather forecasts by city", first.Description)
	require.JSONEq(t, `{"type":"http","method":"GET","queryParams":{"city":"Paris"}}`, string(first.InputSchema))
	require.JSONEq(t, `{"type":"json","example":{"temp":21}}`, string(first.OutputSchema))
	// The options as listed, their extra with them (as the resources
	// search answers them).
	accepts, err := json.Marshal(first.Accepts)
	require.NoError(t, err)
	require.JSONEq(t, `[{"scheme":"exact","network":"eip155:8453","asset":"`+usdc+`","amount":"1000","pay_to":"0xAAA","max_timeout_seconds":120,
		"extra":{"name":"USD Coin","version":"2","assetTransferMethod":"eip3009"}}]`, string(accepts))
	yes := true
	require.Equal(t, &yes, first.HostLiveness.Live)
	require.Nil(t, first.Evidence.Transactions30d, "not measured is null")
	require.Greater(t, first.Score, a.Resources[2].Score)

	// The v1 option's outputSchema is its call contract.
	a = search(ResourceQuery{Q: "stock quotes"})
	require.Len(t, a.Resources, 1)
	require.JSONEq(t, `{"type":"http","method":"post","bodyType":"json"}`, string(a.Resources[0].InputSchema))
	require.Equal(t, "POST", a.Resources[0].Method)
	require.Equal(t, 1, a.Resources[0].X402Version)

	// Filters.
	require.Equal(t, []string{"dead.test", "live1.test"}, urls(search(ResourceQuery{PayTo: "0xbbb", Sort: "url"})), "pay_to in any case")
	require.Equal(t, []string{"dead.test", "live0.test"}, urls(search(ResourceQuery{Q: "weather", MaxUSD: "0.001", Sort: "price"})))
	require.Equal(t, []string{"live0.test"}, urls(search(ResourceQuery{Tags: []string{"forecast,WEATHER"}})))
	require.Equal(t, []string{"dead.test"}, urls(search(ResourceQuery{Live: "false"})))
	require.Len(t, search(ResourceQuery{Network: "base"}).Resources, 4, "a network by name")
	require.Len(t, search(ResourceQuery{Scheme: "EXACT", Asset: strings.ToUpper(usdc)}).Resources, 4)
	require.Empty(t, search(ResourceQuery{Scheme: "upto"}).Resources)

	// Pages.
	p1 := search(ResourceQuery{Sort: "url", Limit: 3})
	require.Len(t, p1.Resources, 3)
	require.NotNil(t, p1.Next)
	p2 := search(ResourceQuery{Sort: "url", Limit: 3, Cursor: *p1.Next})
	require.Len(t, p2.Resources, 1)
	require.Nil(t, p2.Next)
	require.Equal(t, "dead.test", urls(p1)[0])

	for _, bad := range []struct {
		q     ResourceQuery
		field string
	}{
		{ResourceQuery{Network: "moon"}, "network"},
		{ResourceQuery{MaxUSD: "-1"}, "max_usd"},
		{ResourceQuery{MaxUSD: "cheap"}, "max_usd"},
		{ResourceQuery{Live: "maybe"}, "live"},
		{ResourceQuery{Sort: "random"}, "sort"},
		{ResourceQuery{Limit: 1000}, "limit"},
		{ResourceQuery{Cursor: "nope"}, "cursor"},
		{ResourceQuery{Q: strings.Repeat("x", 201)}, "q"},
		{ResourceQuery{Q: "weather", Cursor: encodeCursor(store.ResourceRankCap)}, "cursor"},
	} {
		var qe *QueryError
		require.ErrorAs(t, bad.q.Check(), &qe, bad.field)
		require.Equal(t, bad.field, qe.Field)
	}

	// The Bazaar's shapes.
	lq := BazaarListQuery{PayTo: "0xBBB"}
	require.NoError(t, lq.Check())
	list, err := r.BazaarList(ctx, lq)
	require.NoError(t, err)
	require.Equal(t, 2, list.Pagination.Total)
	require.Len(t, list.Items, 2)
	raw, err := json.Marshal(list.Items[0])
	require.NoError(t, err)
	require.JSONEq(t, `{"resource":"`+listed.url("dead", "/weather")+`","type":"http","x402Version":2,
		"accepts":[{"scheme":"exact","network":"eip155:8453","amount":"500","asset":"`+usdc+`","payTo":"0xBBB","maxTimeoutSeconds":120,
			"extra":{"name":"USD Coin","version":"2","assetTransferMethod":"eip3009"}}],
		"lastUpdated":"`+list.Items[0].LastUpdated+`","description":"Weather now","tags":["weather"],
		"extensions":{"bazaar":{"info":{"input":{"type":"http","method":"GET","queryParams":{"city":"Paris"}},"output":{"type":"json","example":{"temp":21}}},"schema":{"type":"object"}}}}`, string(raw))
	sq := BazaarSearchQuery{Query: "stock", Limit: 1}
	require.NoError(t, sq.Check())
	found, err := r.BazaarSearch(ctx, sq)
	require.NoError(t, err)
	require.Len(t, found.Resources, 1)
	require.Nil(t, found.Pagination.Cursor)
	require.JSONEq(t, `{"bazaar":{"info":{"input":{"type":"http","method":"post","bodyType":"json"},"output":{"price":"number"}}}}`, string(found.Resources[0].Extensions))
	require.Equal(t, "5000", found.Resources[0].Accepts[0].MaxAmountRequired)
	require.JSONEq(t, `{}`, string(found.Resources[0].Accepts[0].Extra), "none listed")
	empty := BazaarSearchQuery{}
	require.ErrorContains(t, empty.Check(), "query")

	// More matches than are ranked: two of the three, in their order
	// among all, said partial; as many as are ranked: all, whole.
	all := []string{"live0.test", "live1.test", "dead.test"}
	for _, c := range []struct {
		rankCap int
		partial bool
	}{{2, true}, {3, false}} {
		sq := BazaarSearchQuery{Query: "weather"}
		require.NoError(t, sq.Check())
		sq.resources.params.RankCap = c.rankCap
		found, err := r.BazaarSearch(ctx, sq)
		require.NoError(t, err)
		var got []string
		for _, res := range found.Resources {
			got = append(got, strings.TrimPrefix(strings.Split(res.Resource, ":")[1], "//"))
		}
		require.Len(t, got, c.rankCap)
		var ranked []string
		for _, u := range all {
			if slices.Contains(got, u) {
				ranked = append(ranked, u)
			}
		}
		require.Equal(t, ranked, got, c.rankCap)
		require.Equal(t, c.partial, found.PartialResults, c.rankCap)
		rq := ResourceQuery{Q: "weather", Limit: 1}
		require.NoError(t, rq.Check())
		rq.params.RankCap = c.rankCap
		a, err := r.Resources(ctx, rq)
		require.NoError(t, err)
		require.Equal(t, got[:1], urls(a))
		require.Equal(t, c.partial, a.Partial, c.rankCap)
		require.NotNil(t, a.Next)
	}
}
