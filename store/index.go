package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Index event types. Resources and liveness are on host/<name> streams,
// crawl progress on crawl/<source URL> streams.
const (
	EventResourceIndexed = "resource.indexed"
	EventResourceRetired = "resource.retired"
	EventHostProbed      = "host.probed"
	EventCrawlPage       = "crawl.page"
	EventCrawlPassDone   = "crawl.pass_done"
	EventCrawlFailed     = "crawl.failed"
	// EventHostQuoteCompared is the sample resource's listing compared
	// again with the host's last 402, when the listing changed.
	EventHostQuoteCompared = "host.quote_compared"
	// EventOwnershipChecked is an origin's ownership proofs checked.
	EventOwnershipChecked = "host.ownership_checked"
)

// HostStream returns the event stream of an index host.
func HostStream(host string) string { return "host/" + host }

// CrawlStream returns the event stream of a discovery source's crawl.
func CrawlStream(source string) string { return "crawl/" + source }

// ResourceIndexed is a resource seen in a listing, new or changed.
type ResourceIndexed struct {
	Resource    string   `json:"resource"`
	Host        string   `json:"host"`
	Source      string   `json:"source"`
	Description string   `json:"description"`
	Method      string   `json:"method"`
	Networks    []string `json:"networks"`
	// PriceUSDC is the lowest price as decimal text, empty when unpriced.
	PriceUSDC    string `json:"price_usdc,omitempty"`
	Discoverable bool   `json:"discoverable"`
	// Accepts are the payment options the listing asks, compared with the
	// 402 the resource answers. Absent from events written before they
	// were recorded.
	Accepts []Accept `json:"accepts,omitempty"`
	// Quality is the use its listing reports, nil when the listing carries
	// none.
	Quality *Quality `json:"quality,omitempty"`
	// Tags are the listing's topical tags.
	Tags []string `json:"tags,omitempty"`
	// InputSchema and OutputSchema are the call contract as the listing
	// gives it (the bazaar extension's info.input/info.output, or a v1
	// option's outputSchema.input/output), nil when it gives none.
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	// Extensions are the listing item's extensions object, as given.
	Extensions json.RawMessage `json:"extensions,omitempty"`
	// X402Version is the listing item's x402 version (1 when it says
	// none).
	X402Version int    `json:"x402_version,omitempty"`
	MimeType    string `json:"mime_type,omitempty"`
}

// Quality is what a listing reports of a resource's use, as Bazaar's
// listings carry it (quality: l30DaysTotalCalls, l30DaysUniquePayers,
// lastCalledAt): its paid calls and its distinct payers over the last 30
// days, and when it was last called. A nil field was not reported.
type Quality struct {
	Calls30d        *int64     `json:"calls_30d"`
	UniquePayers30d *int64     `json:"unique_payers_30d"`
	LastCalledAt    *time.Time `json:"last_called_at"`
}

// Equal reports whether q and o report the same figures (both nil is
// equal).
func (q *Quality) Equal(o *Quality) bool {
	if q == nil || o == nil {
		return q == o
	}
	sameInt := func(a, b *int64) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }
	sameTime := func(a, b *time.Time) bool { return (a == nil && b == nil) || (a != nil && b != nil && a.Equal(*b)) }
	return sameInt(q.Calls30d, o.Calls30d) && sameInt(q.UniquePayers30d, o.UniquePayers30d) && sameTime(q.LastCalledAt, o.LastCalledAt)
}

// Accept is one payment option as a listing or a 402 states it: the
// network (CAIP-2), the asset, the amount in the asset's atomic units, and
// the receiver.
type Accept struct {
	Scheme  string `json:"scheme,omitempty"`
	Network string `json:"network"`
	Asset   string `json:"asset"`
	Amount  string `json:"amount"`
	PayTo   string `json:"pay_to"`
	// MaxTimeoutSeconds is the option's maxTimeoutSeconds, 0 when not
	// given.
	MaxTimeoutSeconds int `json:"max_timeout_seconds,omitempty"`
	// Extra is the option's extra object as its listing gives it (EVM
	// exact: the token's EIP-712 domain name and version; Solana: the fee
	// payer), what a buyer needs to pay from the listing alone; nil when
	// not given or not kept (a 402's options keep none).
	Extra json.RawMessage `json:"extra,omitempty"`
}

// Equal reports whether a and o are the same option, their extras
// compared by meaning (SameJSON).
func (a Accept) Equal(o Accept) bool {
	return a.Scheme == o.Scheme && a.Network == o.Network && a.Asset == o.Asset && a.Amount == o.Amount && a.PayTo == o.PayTo &&
		a.MaxTimeoutSeconds == o.MaxTimeoutSeconds && SameJSON(a.Extra, o.Extra)
}

// SameJSON compares JSON values by meaning (Postgres's jsonb reorders
// keys and spaces them): both absent, or equal once decoded.
func SameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

// ReceiverKey is a receiver as the index compares and filters it: an EVM
// address in lower case, any other (base58) as it is.
func ReceiverKey(payTo string) string {
	if strings.HasPrefix(payTo, "0x") || strings.HasPrefix(payTo, "0X") {
		return strings.ToLower(payTo)
	}
	return payTo
}

// acceptKeys returns the distinct receivers (ReceiverKey), schemes and
// assets (lower-case) of accepts, as the filters read them.
func acceptKeys(accepts []Accept) (payTos, schemes, assets []string) {
	payTos, schemes, assets = []string{}, []string{}, []string{}
	add := func(list []string, v string) []string {
		if v == "" || slices.Contains(list, v) {
			return list
		}
		return append(list, v)
	}
	for _, a := range accepts {
		payTos = add(payTos, ReceiverKey(a.PayTo))
		schemes = add(schemes, strings.ToLower(a.Scheme))
		assets = add(assets, strings.ToLower(a.Asset))
	}
	return payTos, schemes, assets
}

// QuoteDifference is one way the 402 a host answered differs from its
// listing: Field is network (the quote has no option on the listing's
// network and asset), amount or pay_to.
type QuoteDifference struct {
	Resource string `json:"resource"`
	Network  string `json:"network"`
	Asset    string `json:"asset"`
	Field    string `json:"field"`
	Listing  string `json:"listing"`
	Quote    string `json:"quote"`
}

// ResourceRetired is a resource that a full pass of a source no longer
// listed and that no other source lists.
type ResourceRetired struct {
	Resource string `json:"resource"`
	Host     string `json:"host"`
}

// HostProbed is one liveness measurement of a host. A nil field was not
// measured. Status 429 means "try later": it does not change Live.
type HostProbed struct {
	Live      *bool     `json:"live"`
	Status    *int      `json:"status"`
	LatencyMS *int      `json:"latency_ms"`
	Error     string    `json:"error,omitempty"`
	CheckedAt time.Time `json:"checked_at"`
	// QuoteMatchesListing says whether the 402 of the sample resource asked
	// what its listing says (network, asset, amount, payTo of every listed
	// option); nil when not compared (no valid quote, or a listing without
	// options). QuoteDifferences lists what differed.
	QuoteMatchesListing *bool             `json:"quote_matches_listing,omitempty"`
	QuoteDifferences    []QuoteDifference `json:"quote_differences,omitempty"`
	// QuoteAccepts are the options of the 402 (on networks the index
	// knows), kept to compare a listing that changes later.
	QuoteAccepts []Accept `json:"quote_accepts,omitempty"`
	// QuotePending is a 402 that moved since the last one and differs from
	// the listing as last read: the listing may have moved too and not be
	// read yet, so it is not compared (QuoteMatchesListing nil) until the
	// crawl reads the listing again (HostQuoteCompared), or a pass ends no
	// longer listing it (ResourceRetired: not compared). A listing its
	// origin alone lists is read again at once instead (index.Prober).
	QuotePending bool `json:"quote_pending,omitempty"`
}

// HostQuoteCompared is the listing of a host's sample resource, changed
// (or read again while its comparison is pending), compared with the last
// 402 the resource answered (HostProbed's QuoteAccepts), without probing
// again.
type HostQuoteCompared struct {
	Resource            string            `json:"resource"`
	QuoteMatchesListing *bool             `json:"quote_matches_listing"`
	QuoteDifferences    []QuoteDifference `json:"quote_differences,omitempty"`
}

// OwnershipChecked is an origin's ownership proofs checked against the
// receivers of its resources: Verified are the receivers (ReceiverKey) a
// proof was signed by, found Via its discovery document ("well-known",
// "openapi"). None verified clears the origin's proofs.
type OwnershipChecked struct {
	Origin    string    `json:"origin"`
	Verified  []string  `json:"verified"`
	Via       string    `json:"via,omitempty"`
	CheckedAt time.Time `json:"checked_at"`
}

// Change kinds of the index's changes feed (index_changes).
const (
	ChangeServiceAdded    = "service.added"
	ChangeServiceRetired  = "service.retired"
	ChangePriceChanged    = "price.changed"
	ChangeNetworksChanged = "networks.changed"
	ChangeHostLive        = "host.live"
	ChangeHostDead        = "host.dead"
)

// ProbeHoursKept is how long the probes by hour are kept: the longest
// window of the history figures (30 days) and a day. No probe older than
// that is read back (migration 011 filled the probes by hour from the log's
// last 31 days), so it is also how long the event log keeps the probes
// unless configured (INDEX_PROBE_RETENTION).
const ProbeHoursKept = 31 * 24 * time.Hour

// CrawlPage is one page of a source read: the cursor moves from Offset to
// Offset+Count (a page read by another crawler meanwhile makes the append
// fail with ErrConflict), and Resources were seen in the source's Pass.
// Hosts are the hosts whose aggregates the page's resource events changed.
type CrawlPage struct {
	Source    string   `json:"source"`
	Pass      int      `json:"pass"`
	Offset    int      `json:"offset"`
	Count     int      `json:"count"`
	Total     int      `json:"total"`
	Resources []string `json:"resources"`
	Hosts     []string `json:"hosts"`
}

// CrawlPassDone ends a full pass of a source: its listings not seen in Pass
// are dropped, the cursor goes back to 0 and the next pass begins.
type CrawlPassDone struct {
	Source  string `json:"source"`
	Pass    int    `json:"pass"`
	Retired int    `json:"retired"`
}

// CrawlFailed is a page that could not be read; the source backs off.
type CrawlFailed struct {
	Source       string    `json:"source"`
	Status       int       `json:"status,omitempty"`
	Error        string    `json:"error"`
	BackoffUntil time.Time `json:"backoff_until"`
}

// refreshHosts recomputes the aggregates of hosts from their live resources.
// The sample is the cheapest priced resource (else the first by URL).
const refreshHosts = `
INSERT INTO index_hosts AS h (host, services, priced_services, price_min_usdc, price_max_usdc, networks,
	sample_resource, sample_method, sample, discoverable, updated_at, last_change, first_seen,
	quality_services, calls_30d, unique_payers_30d_max, last_called_at)
SELECT r.host, count(*), count(r.price_usdc), min(r.price_usdc), max(r.price_usdc),
	coalesce((SELECT array_agg(DISTINCT n ORDER BY n) FROM index_resources r2, unnest(r2.networks) n
	          WHERE r2.host = r.host AND NOT r2.retired), '{}'),
	(array_agg(r.resource ORDER BY r.price_usdc NULLS LAST, r.resource))[1],
	(array_agg(r.method ORDER BY r.price_usdc NULLS LAST, r.resource))[1],
	left((array_agg(r.description ORDER BY r.price_usdc NULLS LAST, r.resource))[1], 240),
	bool_or(r.discoverable),
	$2,
	(SELECT c.at FROM index_changes c WHERE c.host = r.host ORDER BY c.id DESC LIMIT 1),
	$2,
	count(*) FILTER (WHERE r.quality_calls_30d IS NOT NULL OR r.quality_unique_payers_30d IS NOT NULL OR r.quality_last_called_at IS NOT NULL),
	sum(r.quality_calls_30d), max(r.quality_unique_payers_30d), max(r.quality_last_called_at)
FROM index_resources r WHERE r.host = ANY($1) AND NOT r.retired GROUP BY r.host
ON CONFLICT (host) DO UPDATE SET services = EXCLUDED.services, priced_services = EXCLUDED.priced_services,
	price_min_usdc = EXCLUDED.price_min_usdc, price_max_usdc = EXCLUDED.price_max_usdc, networks = EXCLUDED.networks,
	sample_resource = EXCLUDED.sample_resource, sample_method = EXCLUDED.sample_method, sample = EXCLUDED.sample,
	discoverable = EXCLUDED.discoverable, updated_at = EXCLUDED.updated_at,
	last_change = coalesce(EXCLUDED.last_change, h.last_change),
	quality_services = EXCLUDED.quality_services, calls_30d = EXCLUDED.calls_30d,
	unique_payers_30d_max = EXCLUDED.unique_payers_30d_max, last_called_at = EXCLUDED.last_called_at`

// emptyHosts zeroes the aggregates of hosts left without a live resource.
const emptyHosts = `
UPDATE index_hosts h SET services = 0, priced_services = 0, price_min_usdc = NULL, price_max_usdc = NULL,
	networks = '{}', updated_at = $2,
	quality_services = 0, calls_30d = NULL, unique_payers_30d_max = NULL, last_called_at = NULL,
	last_change = coalesce((SELECT c.at FROM index_changes c WHERE c.host = h.host ORDER BY c.id DESC LIMIT 1), h.last_change)
WHERE h.host = ANY($1) AND NOT EXISTS (SELECT 1 FROM index_resources r WHERE r.host = h.host AND NOT r.retired)`

// queueHostAggregates queues the recount of hosts' aggregates from their
// live resources: services, prices, networks and sample (refreshHosts,
// emptyHosts), and the summary's price bands (index_host_price_bands,
// migration 014).
func queueHostAggregates(b *pgx.Batch, hosts []string, now time.Time) {
	b.Queue(refreshHosts, hosts, now)
	b.Queue(emptyHosts, hosts, now)
	b.Queue("SELECT index_host_price_bands($1::text[])", hosts)
}

// resourceChanges records the changes a resource.indexed event makes to
// the resource as it stands (before its projection): added (again, after a
// retirement), price changed, networks changed.
const resourceChanges = `
INSERT INTO index_changes (at, host, kind, resource, "from", "to")
SELECT $1, $2, c.kind, $3, c.f, c.t
FROM (SELECT 1) one LEFT JOIN index_resources r ON r.resource = $3 AND NOT r.retired
CROSS JOIN LATERAL (VALUES
	('` + ChangeServiceAdded + `', NULL::jsonb, to_jsonb($4::text), r.resource IS NULL),
	('` + ChangePriceChanged + `', to_jsonb(r.price_usdc::text), to_jsonb($4::text),
		r.resource IS NOT NULL AND r.price_usdc IS DISTINCT FROM $4::numeric),
	('` + ChangeNetworksChanged + `', to_jsonb(r.networks), to_jsonb($5::text[]),
		r.resource IS NOT NULL AND r.networks <> $5::text[])
) AS c(kind, f, t, happened)
WHERE c.happened`

// liveChange records a host going live or dead (or measured for the first
// time), before the probe's projection.
const liveChange = `
INSERT INTO index_changes (at, host, kind, "from", "to")
SELECT $1, $2, CASE WHEN $3::boolean THEN '` + ChangeHostLive + `' ELSE '` + ChangeHostDead + `' END, to_jsonb(h.live), to_jsonb($3::boolean)
FROM (SELECT 1) one LEFT JOIN index_hosts h ON h.host = $2
WHERE h.live IS DISTINCT FROM $3::boolean`

// lastChange is the time of a host's ($1) latest change.
const lastChange = `(SELECT c.at FROM index_changes c WHERE c.host = $1 ORDER BY c.id DESC LIMIT 1)`

// projectHost updates index_resources, index_hosts, index_changes and
// index_probe_hours for a host event.
func projectHost(b *pgx.Batch, _ *projectedRows, e *NewEvent, _ []byte, now time.Time) (bool, error) {
	host := strings.TrimPrefix(e.Stream, "host/")
	switch v := e.Data.(type) {
	case ResourceIndexed:
		var price any
		if v.PriceUSDC != "" {
			price = v.PriceUSDC
		}
		networks := v.Networks
		if networks == nil {
			networks = []string{}
		}
		accepts, err := jsonList(v.Accepts, "accepts")
		if err != nil {
			return false, err
		}
		var q Quality
		if v.Quality != nil {
			q = *v.Quality
		}
		tags := v.Tags
		if tags == nil {
			tags = []string{}
		}
		payTos, schemes, assets := acceptKeys(v.Accepts)
		tagKeys := make([]string, len(tags))
		for i, t := range tags {
			tagKeys[i] = strings.ToLower(t)
		}
		version := v.X402Version
		if version == 0 {
			version = 1
		}
		b.Queue(resourceChanges, now, host, v.Resource, price, networks)
		b.Queue(`INSERT INTO index_resources (resource, host, description, method, networks, price_usdc, discoverable, updated_at, accepts,
				quality_calls_30d, quality_unique_payers_30d, quality_last_called_at,
				tags, input_schema, output_schema, extensions, x402_version, mime_type, pay_tos, schemes, assets, tag_keys)
			VALUES ($1, $2, $3, $4, $5, $6::numeric, $7, $8, $9::jsonb, $10, $11, $12, $13, $14::jsonb, $15::jsonb, $16::jsonb, $17, $18, $19, $20, $21, $22)
			ON CONFLICT (resource) DO UPDATE SET host = $2, description = $3, method = $4, networks = $5,
				price_usdc = $6::numeric, discoverable = $7, retired = false, updated_at = $8, accepts = $9::jsonb,
				quality_calls_30d = $10, quality_unique_payers_30d = $11, quality_last_called_at = $12,
				tags = $13, input_schema = $14::jsonb, output_schema = $15::jsonb, extensions = $16::jsonb,
				x402_version = $17, mime_type = $18, pay_tos = $19, schemes = $20, assets = $21, tag_keys = $22`,
			v.Resource, host, v.Description, v.Method, networks, price, v.Discoverable, now, accepts,
			q.Calls30d, q.UniquePayers30d, q.LastCalledAt,
			tags, rawJSON(v.InputSchema), rawJSON(v.OutputSchema), rawJSON(v.Extensions), version, v.MimeType, payTos, schemes, assets, tagKeys)
		return false, nil
	case ResourceRetired:
		b.Queue(`INSERT INTO index_changes (at, host, kind, resource, "from")
			SELECT $1, $2, '`+ChangeServiceRetired+`', resource, to_jsonb(price_usdc::text) FROM index_resources WHERE resource = $3 AND NOT retired`,
			now, host, v.Resource)
		b.Queue("UPDATE index_resources SET retired = true, updated_at = $2 WHERE resource = $1", v.Resource, now)
		// A comparison waiting for the listing of the host's sample ends
		// with it: no listing lists it any more (not compared), before the
		// host takes another sample.
		b.Queue("UPDATE index_hosts SET quote_pending = false WHERE host = $1 AND sample_resource = $2 AND quote_pending", host, v.Resource)
		queueHostAggregates(b, []string{host}, now)
		return false, nil
	case HostProbed:
		// A 429 says "try later": no verdict, the last one stands.
		verdict := v.Live != nil && (v.Status == nil || *v.Status != http.StatusTooManyRequests)
		// Postgres keeps microseconds, rounding the event's JSON time: the
		// projection rounds alike, so that the log read again agrees.
		checkedAt := v.CheckedAt.Round(time.Microsecond)
		if verdict {
			b.Queue(liveChange, checkedAt, host, *v.Live)
		}
		differences, err := jsonList(v.QuoteDifferences, "quote differences")
		if err != nil {
			return false, err
		}
		quoteAccepts, err := jsonList(v.QuoteAccepts, "quote accepts")
		if err != nil {
			return false, err
		}
		b.Queue(`INSERT INTO index_hosts AS h (host, live, status, latency_ms, checked_at, probe_error,
				quote_matches_listing, quote_differences, last_change, first_seen, quote_accepts, quote_pending)
			VALUES ($1, CASE WHEN $7 THEN $2::boolean END, $3, $4, $5, NULLIF($6, ''),
				CASE WHEN $7 THEN $8::boolean END, CASE WHEN $7 THEN $9::jsonb END, `+lastChange+`, $10, CASE WHEN $7 THEN $11::jsonb END,
				$7 AND $12::boolean)
			ON CONFLICT (host) DO UPDATE SET
				live = CASE WHEN $7 THEN $2::boolean ELSE h.live END,
				status = $3, latency_ms = $4, checked_at = $5, probe_error = NULLIF($6, ''),
				quote_matches_listing = CASE WHEN $7 THEN $8::boolean ELSE h.quote_matches_listing END,
				quote_differences = CASE WHEN $7 THEN $9::jsonb ELSE h.quote_differences END,
				quote_accepts = CASE WHEN $7 THEN $11::jsonb ELSE h.quote_accepts END,
				quote_pending = CASE WHEN $7 THEN $12::boolean ELSE h.quote_pending END,
				last_change = coalesce(`+lastChange+`, h.last_change)`,
			host, v.Live, v.Status, v.LatencyMS, checkedAt, v.Error, verdict, v.QuoteMatchesListing, differences, now, quoteAccepts, v.QuotePending)
		if verdict {
			live := 0
			if *v.Live {
				live = 1
			}
			b.Queue(`INSERT INTO index_probe_hours AS x (host, hour, probes, live, latencies)
				VALUES ($1, date_trunc('hour', $2::timestamptz, 'UTC'), 1, $3, CASE WHEN $4::integer IS NULL THEN '{}' ELSE ARRAY[$4::integer] END)
				ON CONFLICT (host, hour) DO UPDATE SET probes = x.probes + 1, live = x.live + EXCLUDED.live,
					latencies = x.latencies || EXCLUDED.latencies`,
				host, checkedAt, live, v.LatencyMS)
			b.Queue("DELETE FROM index_probe_hours WHERE host = $1 AND hour < $2::timestamptz - $3::integer * interval '1 hour'",
				host, checkedAt, int(ProbeHoursKept/time.Hour))
			b.Queue("SELECT index_host_history(ARRAY[$1::text], $2::timestamptz)", host, checkedAt)
		}
		return false, nil
	case HostQuoteCompared:
		differences, err := jsonList(v.QuoteDifferences, "quote differences")
		if err != nil {
			return false, err
		}
		// Only while the resource is still the host's sample: the verdict
		// is of the sample's quote.
		b.Queue(`UPDATE index_hosts SET quote_matches_listing = $3, quote_differences = $4::jsonb, quote_pending = false
			WHERE host = $1 AND sample_resource = $2`, host, v.Resource, v.QuoteMatchesListing, differences)
		return false, nil
	case OwnershipChecked:
		b.Queue("DELETE FROM index_ownership WHERE origin = $1", v.Origin)
		if len(v.Verified) > 0 {
			b.Queue(`INSERT INTO index_ownership (origin, pay_to, via, verified_at) SELECT $1, unnest($2::text[]), $3, $4
				ON CONFLICT DO NOTHING`, v.Origin, v.Verified, v.Via, v.CheckedAt.Round(time.Microsecond))
		}
		return false, nil
	}
	return false, fmt.Errorf("no projection of %s with %T", e.Type, e.Data)
}

// jsonList is a list as a jsonb parameter: NULL when empty.
func jsonList[T any](list []T, what string) (any, error) {
	if len(list) == 0 {
		return nil, nil
	}
	raw, err := json.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return string(raw), nil
}

// rawJSON is a JSON value as a jsonb parameter: NULL when absent.
func rawJSON(raw json.RawMessage) any {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return string(raw)
}

// projectCrawl updates index_sources, index_listings and the aggregates of
// the hosts a page changed, for a crawl event. Page and pass moves must
// start from the saved cursor and pass: two crawlers reading one source at
// once cannot both record the same page (ErrConflict).
func projectCrawl(b *pgx.Batch, _ *projectedRows, e *NewEvent, _ []byte, now time.Time) (bool, error) {
	switch v := e.Data.(type) {
	case CrawlPage:
		if len(v.Resources) > 0 {
			b.Queue(`INSERT INTO index_listings (source, resource, seen_pass) SELECT $1, unnest($2::text[]), $3
				ON CONFLICT (source, resource) DO UPDATE SET seen_pass = EXCLUDED.seen_pass`, v.Source, v.Resources, v.Pass)
		}
		if len(v.Hosts) > 0 {
			queueHostAggregates(b, v.Hosts, now)
		}
		b.Queue("INSERT INTO index_sources (url) VALUES ($1) ON CONFLICT (url) DO NOTHING", v.Source)
		b.Queue(`UPDATE index_sources SET cursor = $2::integer + $3::integer, total = $4, pages_done = pages_done + 1,
				last_at = $6, failures = 0, backoff_until = NULL, last_error = NULL
			WHERE url = $1 AND cursor = $2 AND pass = $5`,
			v.Source, v.Offset, v.Count, v.Total, v.Pass, now)
		return true, nil
	case CrawlPassDone:
		b.Queue("DELETE FROM index_listings WHERE source = $1 AND seen_pass < $2", v.Source, v.Pass)
		b.Queue(`UPDATE index_sources SET cursor = 0, pages_done = 0, pass = $2 + 1,
				full_scans = full_scans + 1, last_at = $3, last_full_at = $3
			WHERE url = $1 AND pass = $2`,
			v.Source, v.Pass, now)
		return true, nil
	case CrawlFailed:
		b.Queue(`INSERT INTO index_sources AS s (url, failures, backoff_until, last_error, last_at) VALUES ($1, 1, $2, $3, $4)
			ON CONFLICT (url) DO UPDATE SET failures = s.failures + 1, backoff_until = $2, last_error = $3, last_at = $4`,
			v.Source, v.BackoffUntil, v.Error, now)
		return false, nil
	}
	return false, fmt.Errorf("no projection of %s with %T", e.Type, e.Data)
}
