// Package index builds the public index of x402 sellers: it crawls
// discovery listings in the Bazaar list format page by page from a saved
// cursor, groups resources under their hosts, probes each host's liveness
// with an unpaid request, and answers the summary and host queries of the
// /api/xindex endpoints and the /x402-index page.
//
// Every change is an event (store.Append); index_sources (the cursors),
// index_listings (which source lists what), index_resources and index_hosts
// are their projections. A resource is retired when a full pass of every
// source that listed it no longer does. Each host row keeps the counts of
// its live resources (services, priced, by price band), recounted whenever
// its resources change, so that the summary sums hosts, not resources.
//
// History is read from the same events, through projections kept in the
// transaction that appends them (so they never drift from the log, and the
// reads never scan it): each host.probed adds to the host's row of the hour
// in index_probe_hours (31 days kept) and recomputes from those rows the
// host's uptime over 24 hours, 7 and 30 days, its probe counts and its
// latency percentiles; each change of the market (a service added or
// retired, a price or networks changed, a host gone live or dead) is a row
// of index_changes, the changes feed and each host's timeline. Migration 011
// filled them from the log written before. The probes themselves stay in
// the log INDEX_PROBE_RETENTION (31 days; retention.PruneProbes), since
// nothing reads back an older one.
//
// Quality: the figures of use a listing reports of a resource (Bazaar's
// quality object: paid calls and distinct payers over 30 days, last call)
// travel in resource.indexed and are summed per host (calls summed, payers
// the most of any one service); null wherever no listing reports them. The
// hosts sort by them (sort=calls, the unreported last).
//
// On-chain evidence (ChainReader, the index.chain job): on each EVM network
// with RPC_URL_<CHAIN>, the USDC Transfer logs into the payTo addresses the
// listings name, read from a cursor up to the network's finality, with each
// transfer's sender and whether it was an EIP-3009 settlement; a
// reorganisation that replaced the cursor's block undoes what was read
// since. On Solana (RPC_URL_SOLANA), the USDC transfers into each payTo's
// token account, read at "finalized" from its signatures and transactions
// (evidence_svm.go), the fee payer as sender. Each host's figures over 24 hours, 7 and 30 days (transactions,
// volume, distinct payers, senders, the wash signal) are kept in
// index_host_evidence for the hosts' sorts and filters; null where no
// payTo of the host is read.
//
// Price honesty: a probe compares the 402 of the host's sample resource with
// the options its listing asks (network, asset, amount, payTo), and keeps
// the 402's options; a crawl that finds the sample's listing changed
// compares it again with them at once (host.quote_compared), so that a
// seller moving its listing and its 402 together is shown agreeing as soon
// as the index has read both, not at the next probe. A 402 that differs
// from a listing its origin alone lists (an OpenAPI document's
// x-payment-info price, else the options its 402 asked when discovered)
// has that listing read again at once, and is compared with it
// (Prober.listingNow). A 402 that moved and differs from a listing of a
// whole discovery list, as last read, is not compared (null, pending)
// until the crawl reads the listing again, changed or not (the listing may
// have moved too): within the next pass of the listings that list it, and
// a pass that retires it ends the wait (not compared). Both sides are
// compared under a lock per host
// (store.QuoteLock), each reading the other as it stands, so a probe
// written after a crawl that read the new listing meanwhile compares with
// that listing, not the one its run began with.
//
// Resources are first-class: each keeps what its listing (or its origin's
// 402) says beyond its price, as given: its options with their scheme and
// extra (the EIP-712 domain, the fee payer: what a buyer needs to pay from
// the listing alone), its tags, its call contract (the bazaar extension's
// info.input/info.output, or a v1 option's outputSchema) and its
// extensions. The resources search
// (Reader.Resources, /api/xindex/resources) matches text with Postgres's
// full-text search (a weighted tsvector of tags, description and URL, GIN
// indexed) and ranks by relevance times the evidence (host live, its
// uptime; on-chain figures join in store.resourceEvidence). The same resources are served in the official
// Bazaar discovery API's shapes (BazaarList, BazaarSearch) at
// /api/xindex/bazaar.
//
// Proof of ownership (ownership.go): x402scan's form, an origin's
// discovery document carrying its origin string signed by its receivers'
// keys; a receiver proved is kept per origin (host.ownership_checked,
// index_ownership) and marks the resources paying it verified.
//
// Schedules: the periodic jobs are unique by their schedule's own period
// (SchedulePeriod), so INDEX_CRON or LIVENESS_CRON of "@every 10s" runs
// every 10 seconds; a schedule they cannot keep (an "@every" finer than
// whole seconds) is refused at start.
//
// Discovery from the sellers' own origins (Discoverer) reads, politely, the
// origins of listed resources and INDEX_ORIGINS in x402scan's order: OpenAPI
// x-payment-info, /.well-known/x402, the DNS _x402 TXT record. A resource
// is indexed from its 402, its USDC options at the fixed price its OpenAPI
// operation lists, if any: what its origin lists of it.
//
// What the index keeps of a listing item, or of a seller's 402, is what
// Postgres can store, so that one broken or hostile seller never fails the
// page (or the origin, or the probe) that records everyone else: strings
// are kept without their NUL characters (keepText; a tag left empty is
// dropped); a JSON value kept as given (input and output schema,
// extensions, an option's extra) that jsonb cannot store (jsonbStorable: a
// \u0000 or a lone surrogate in any string, bytes that are not UTF-8, a
// number beyond numeric's range) is dropped, the item kept without it, as
// one too large is; an amount beyond 2^256-1 leaves its option unpriced;
// a time outside years 1 to 9999 is not read. Only an item the index
// cannot read at all (not an object of the listing's shape, no http(s)
// URL) is missing from the page's items, and Page.Count still counts it.
package index

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// Page is one page of a discovery listing.
type Page struct {
	Items []Resource
	// Count is the number of items the page carried (Items keeps only the
	// usable ones): the cursor advances by it.
	Count int
	// Total is the listing's total, or -1 when the page does not say.
	Total int
	// Limit is the page size the listing says it used, or -1 when the page
	// does not say: a listing may serve fewer items than asked.
	Limit int
}

// Resource is one listed resource, normalised.
type Resource struct {
	// URL is the normalised resource URL: lower-case scheme and host,
	// default port and trailing slash dropped.
	URL string
	// Host is the lower-case host name, without port.
	Host        string
	Description string
	// Method is the declared HTTP method; GET when none is declared.
	Method   string
	Networks []string
	// PriceUSDC is the lowest price in USDC as decimal text, "" when the
	// resource is unpriced (no amount, unknown asset, a decimal-dollar
	// amount).
	PriceUSDC    string
	LastUpdated  time.Time
	Discoverable bool
	// Accepts are the payment options listed, on known networks, each
	// with its extra object as given: the item's extras together at most
	// maxSchema bytes, one that would pass it (or is not an object, or
	// cannot be stored: keepObject) left out.
	Accepts []store.Accept
	// FromOrigin is set for a resource found from its seller's origin
	// (Discoverer): what a listing says of it stands.
	FromOrigin bool
	// Quality is the use the listing reports (Bazaar's quality object),
	// nil when it reports none.
	Quality *store.Quality
	// Tags are the listing's topical tags, at most maxTags, each trimmed
	// and without NUL characters.
	Tags []string
	// InputSchema and OutputSchema are the call contract as given: the
	// bazaar extension's info.input and info.output, else a v1 option's
	// outputSchema.input and .output. Nil when not given or not kept
	// (keepObject).
	InputSchema, OutputSchema json.RawMessage
	// Extensions is the item's extensions object as given (nil when not
	// kept: keepObject).
	Extensions json.RawMessage
	// X402Version is the item's x402Version, 1 when it says none.
	X402Version int
	MimeType    string
}

// The bounds of what a listing item keeps beyond its price: a listing
// cannot grow a row past them. maxSchema bounds each of its input schema,
// output schema and extensions, and its options' extras together.
const (
	maxTags      = 20
	maxTagLength = 64
	maxSchema    = 16 << 10
)

// rawItem is a listing item, v1 or v2 shaped; unknown keys are ignored.
type rawItem struct {
	Resource    string          `json:"resource"`
	URL         string          `json:"url"`
	Type        string          `json:"type"`
	Accepts     []rawAccept     `json:"accepts"`
	LastUpdated json.RawMessage `json:"lastUpdated"`
	Metadata    json.RawMessage `json:"metadata"`
	Description string          `json:"description"`
	Quality     json.RawMessage `json:"quality"`
	Tags        []string        `json:"tags"`
	Extensions  json.RawMessage `json:"extensions"`
	X402Version int             `json:"x402Version"`
	MimeType    string          `json:"mimeType"`
}

type rawAccept struct {
	Scheme            string          `json:"scheme"`
	Network           string          `json:"network"`
	Amount            json.RawMessage `json:"amount"`
	MaxAmountRequired json.RawMessage `json:"maxAmountRequired"`
	Asset             string          `json:"asset"`
	Description       string          `json:"description"`
	Resource          string          `json:"resource"`
	OutputSchema      *struct {
		Input struct {
			Method string `json:"method"`
		} `json:"input"`
	} `json:"outputSchema"`
	Extra             json.RawMessage `json:"extra"`
	PayTo             string          `json:"payTo"`
	MaxTimeoutSeconds int             `json:"maxTimeoutSeconds"`
	MimeType          string          `json:"mimeType"`
}

// accept returns the option as the index records it, without its extra:
// the network in CAIP-2, the amount in atomic units as text (amount, else
// v1's maxAmountRequired), its other strings without NUL characters
// (keepText). ok is false for a network the index does not know.
func (a rawAccept) accept() (store.Accept, bool) {
	network, ok := x402.NormalizeNetwork(a.Network)
	if !ok {
		return store.Accept{}, false
	}
	amount := a.Amount
	if len(amount) == 0 || string(amount) == `""` || string(amount) == "null" {
		amount = a.MaxAmountRequired
	}
	if string(amount) == "null" {
		amount = nil
	}
	return store.Accept{Scheme: keepText(a.Scheme), Network: network, Asset: keepText(a.Asset),
		Amount: strings.Trim(string(amount), `"`), PayTo: keepText(a.PayTo), MaxTimeoutSeconds: max(a.MaxTimeoutSeconds, 0)}, true
}

// ParsePage reads a discovery listing page: {x402Version, items,
// pagination:{limit, offset, total}}; items may also be under "resources".
func ParsePage(body []byte) (*Page, error) {
	var doc struct {
		Items      []json.RawMessage `json:"items"`
		Resources  []json.RawMessage `json:"resources"`
		Pagination *struct {
			Limit *int `json:"limit"`
			Total *int `json:"total"`
		} `json:"pagination"`
		Total *int `json:"total"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(body), &doc); err != nil {
		return nil, fmt.Errorf("listing is not a JSON object with items: %w", err)
	}
	items := doc.Items
	if items == nil {
		items = doc.Resources
	}
	p := &Page{Count: len(items), Total: -1, Limit: -1}
	if doc.Pagination != nil && doc.Pagination.Limit != nil && *doc.Pagination.Limit > 0 {
		p.Limit = *doc.Pagination.Limit
	}
	switch {
	case doc.Pagination != nil && doc.Pagination.Total != nil:
		p.Total = *doc.Pagination.Total
	case doc.Total != nil:
		p.Total = *doc.Total
	}
	for _, raw := range items {
		var it rawItem
		if json.Unmarshal(raw, &it) != nil {
			continue
		}
		if r, ok := it.normalise(raw); ok {
			p.Items = append(p.Items, r)
		}
	}
	return p, nil
}

func (it *rawItem) normalise(raw json.RawMessage) (Resource, bool) {
	link := it.Resource
	if link == "" {
		link = it.URL
	}
	if link == "" {
		for _, a := range it.Accepts {
			if a.Resource != "" {
				link = a.Resource
				break
			}
		}
	}
	u, host, ok := NormaliseURL(link)
	if !ok {
		return Resource{}, false
	}
	r := Resource{URL: u, Host: host, Method: "GET", Discoverable: true, LastUpdated: parseTime(it.LastUpdated),
		Quality: parseQuality(it.Quality)}
	r.Description = it.Description
	var meta struct {
		Description string `json:"description"`
		Method      string `json:"method"`
	}
	_ = json.Unmarshal(it.Metadata, &meta)
	if r.Description == "" {
		r.Description = meta.Description
	}
	if m := declaredMethod(raw); m != "" {
		r.Method = m
	} else if meta.Method != "" {
		r.Method = strings.ToUpper(meta.Method)
	}
	r.X402Version = max(it.X402Version, 1)
	r.MimeType = it.MimeType
	r.Tags = cleanTags(it.Tags)
	r.Extensions = keepObject(it.Extensions, maxSchema)
	r.InputSchema, r.OutputSchema = callContract(raw)
	var lowest *big.Rat
	extraLeft := maxSchema
	for _, a := range it.Accepts {
		if r.Description == "" {
			r.Description = a.Description
		}
		if r.MimeType == "" {
			r.MimeType = a.MimeType
		}
		if a.OutputSchema != nil && a.OutputSchema.Input.Method != "" && r.Method == "GET" {
			r.Method = strings.ToUpper(a.OutputSchema.Input.Method)
		}
		acc, ok := a.accept()
		if !ok {
			continue
		}
		if extra := keepObject(a.Extra, extraLeft); extra != nil {
			acc.Extra, extraLeft = extra, extraLeft-len(extra)
		}
		r.Accepts = append(r.Accepts, acc)
		if !slices.Contains(r.Networks, acc.Network) {
			r.Networks = append(r.Networks, acc.Network)
		}
		if price, ok := priceUSDC(acc.Network, acc.Asset, acc.Amount); ok && (lowest == nil || price.Cmp(lowest) < 0) {
			lowest = price
		}
	}
	slices.Sort(r.Networks)
	if lowest != nil {
		r.PriceUSDC = lowest.FloatString(6)
	}
	r.Description, r.Method, r.MimeType = keepText(r.Description), keepText(r.Method), keepText(r.MimeType)
	return r, true
}

// parseQuality reads a listing item's quality object, as Bazaar's listings
// carry it: {"l30DaysTotalCalls": n, "l30DaysUniquePayers": n,
// "lastCalledAt": time}. A figure that is not a whole number at least 0 (or
// a time parseTime cannot read) is not reported; nil when none is, so that a
// malformed quality never drops the item nor stands for a measured zero.
func parseQuality(raw json.RawMessage) *store.Quality {
	var doc struct {
		Calls        json.RawMessage `json:"l30DaysTotalCalls"`
		UniquePayers json.RawMessage `json:"l30DaysUniquePayers"`
		LastCalledAt json.RawMessage `json:"lastCalledAt"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &doc) != nil {
		return nil
	}
	q := store.Quality{Calls30d: count(doc.Calls), UniquePayers30d: count(doc.UniquePayers)}
	if t := parseTime(doc.LastCalledAt); !t.IsZero() {
		t = t.Round(time.Microsecond) // as Postgres keeps it
		q.LastCalledAt = &t
	}
	if q.Calls30d == nil && q.UniquePayers30d == nil && q.LastCalledAt == nil {
		return nil
	}
	return &q
}

// count reads a JSON whole number at least 0 (a number, or a number as
// text); nil for anything else.
func count(raw json.RawMessage) *int64 {
	n, err := strconv.ParseInt(strings.Trim(string(raw), `"`), 10, 64)
	if err != nil || n < 0 {
		return nil
	}
	return &n
}

// cleanTags returns tags without NUL characters (keepText) and trimmed,
// without empty or repeated ones, at most maxTags of at most maxTagLength
// bytes.
func cleanTags(tags []string) []string {
	var out []string
	for _, t := range tags {
		t = strings.TrimSpace(keepText(t))
		if t == "" || len(t) > maxTagLength || slices.Contains(out, t) {
			continue
		}
		if out = append(out, t); len(out) == maxTags {
			break
		}
	}
	return out
}

// keepText returns a string of a listing or a 402 as the index keeps it:
// without NUL characters, which neither Postgres's text nor its jsonb can
// hold. (A string decoded from JSON is otherwise valid UTF-8.)
func keepText(s string) string {
	return strings.ReplaceAll(s, "\x00", "")
}

// keepObject returns raw as the index keeps a JSON value a listing gives
// as it is (a schema, the extensions, an extra): without insignificant
// space, when it is a JSON object of at most limit bytes so written and
// Postgres's jsonb can store it (jsonbStorable); nil otherwise.
func keepObject(raw json.RawMessage, limit int) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil || buf.Len() > limit || !jsonbStorable(buf.Bytes()) {
		return nil
	}
	return buf.Bytes()
}

// jsonbStorable reports whether Postgres's jsonb can store raw, valid
// JSON: its bytes are UTF-8, no string in it (a key or a value) has a
// \u0000 escape (jsonb's text cannot hold NUL) or a surrogate escape not in
// a high-low pair, and each of its numbers is within numeric's range
// (numericStorable).
func jsonbStorable(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	// hex reads the escape \uXXXX at raw[i:].
	hex := func(i int) rune {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return -1
		}
		n, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		if err != nil {
			return -1
		}
		return rune(n)
	}
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] != '\\' {
					continue
				}
				r := hex(i)
				switch {
				case r == 0:
					return false
				case r >= 0xd800 && r < 0xdc00: // high: a low must follow
					if low := hex(i + 6); utf16.DecodeRune(r, low) == utf8.RuneError {
						return false
					}
					i += 11
				case utf16.IsSurrogate(r): // low, alone
					return false
				default:
					i++ // past the escaped character, or into \uXXXX's digits
				}
			}
		case c == '-' || c >= '0' && c <= '9':
			j := i
			for j < len(raw) && strings.IndexByte("+-.eE0123456789", raw[j]) >= 0 {
				j++
			}
			if !numericStorable(string(raw[i:j])) {
				return false
			}
			i = j - 1
		}
	}
	return true
}

// The range of Postgres's numeric, in which jsonb keeps its numbers: at
// most 131072 digits before the decimal point and 16383 after it, an
// exponent less than 2^30-1 in magnitude.
const (
	numericWholeDigits = 131072
	numericFracDigits  = 16383
	numericExponent    = 1<<30 - 1
)

// numericStorable reports whether Postgres's numeric holds the JSON number
// num, as written: its digits after the decimal point, less its exponent,
// at most numericFracDigits, and, unless it is zero, its leading digit
// less than numericWholeDigits places before the point.
func numericStorable(num string) bool {
	mantissa, exp := num, int64(0)
	if i := strings.IndexAny(num, "eE"); i >= 0 {
		e, err := strconv.ParseInt(num[i+1:], 10, 64)
		if err != nil || e >= numericExponent || e <= -numericExponent {
			return false
		}
		mantissa, exp = num[:i], e
	}
	whole, frac, _ := strings.Cut(strings.TrimPrefix(mantissa, "-"), ".")
	if int64(len(frac))-exp > numericFracDigits {
		return false
	}
	first := strings.IndexFunc(whole+frac, func(r rune) bool { return r != '0' })
	return first < 0 || int64(len(whole)-1-first)+exp < numericWholeDigits
}

// callContract finds a listing item's input and output schema: the bazaar
// extension's info.input and info.output (in the item or its metadata),
// else the first v1 option's outputSchema.input and .output: of each, the
// first the index keeps (keepObject, at most maxSchema bytes).
func callContract(raw json.RawMessage) (input, output json.RawMessage) {
	type info struct {
		Info struct {
			Input  json.RawMessage `json:"input"`
			Output json.RawMessage `json:"output"`
		} `json:"info"`
	}
	var doc struct {
		Extensions map[string]info `json:"extensions"`
		Metadata   struct {
			Extensions map[string]info `json:"extensions"`
		} `json:"metadata"`
		Accepts []struct {
			OutputSchema struct {
				Input  json.RawMessage `json:"input"`
				Output json.RawMessage `json:"output"`
			} `json:"outputSchema"`
		} `json:"accepts"`
	}
	_ = json.Unmarshal(raw, &doc)
	keep := func(parts ...json.RawMessage) json.RawMessage {
		for _, p := range parts {
			if kept := keepObject(p, maxSchema); kept != nil {
				return kept
			}
		}
		return nil
	}
	var v1In, v1Out json.RawMessage
	for _, a := range doc.Accepts {
		if v1In == nil {
			v1In = keepObject(a.OutputSchema.Input, maxSchema)
		}
		if v1Out == nil {
			v1Out = keepObject(a.OutputSchema.Output, maxSchema)
		}
	}
	b, m := doc.Extensions["bazaar"].Info, doc.Metadata.Extensions["bazaar"].Info
	return keep(b.Input, m.Input, v1In), keep(b.Output, m.Output, v1Out)
}

// declaredMethod finds a bazaar-declared method in a v2 item
// (extensions.bazaar.info.input.method, in the item or its metadata).
func declaredMethod(raw json.RawMessage) string {
	type extensions map[string]struct {
		Info struct {
			Input struct {
				Method string `json:"method"`
			} `json:"input"`
		} `json:"info"`
	}
	var doc struct {
		Extensions extensions `json:"extensions"`
		Metadata   struct {
			Extensions extensions `json:"extensions"`
		} `json:"metadata"`
	}
	if json.Unmarshal(raw, &doc) != nil {
		return ""
	}
	if m := doc.Extensions["bazaar"].Info.Input.Method; m != "" {
		return strings.ToUpper(m)
	}
	return strings.ToUpper(doc.Metadata.Extensions["bazaar"].Info.Input.Method)
}

// usdcAssets are the USDC contracts and mints whose amounts are priced (6
// decimals), lower-case.
func usdcAsset(network, asset string) bool {
	asset = strings.ToLower(asset)
	if n, ok := x402.NetworkByID(network); ok && strings.ToLower(n.Asset) == asset {
		return true
	}
	switch network + "/" + asset {
	case "eip155:84532/0x036cbd53842c5426634e7929541ec2318f3dcf7e", // Base Sepolia
		"solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1/4zmmc9srt5ri5x14gagxhaii3gnpaeerypjgzjdncdu": // Solana devnet
		return true
	}
	return false
}

// priceUSDC converts an atomic amount of a known USDC asset to USDC.
// Decimal-dollar amounts ("0.01"), empty amounts, amounts beyond 2^256-1
// (what no token holds, and a price past numeric's range) and unknown
// assets are unpriced.
func priceUSDC(network, asset, amount string) (*big.Rat, bool) {
	if !usdcAsset(network, asset) {
		return nil, false
	}
	s := amount
	if s == "" || strings.ContainsAny(s, ".eE-+") {
		return nil, false
	}
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || n.BitLen() > 256 {
		return nil, false
	}
	return new(big.Rat).SetFrac(n, big.NewInt(1_000_000)), true
}

// parseTime reads lastUpdated: ISO 8601 text, Unix seconds or milliseconds
// (as a number or as text). The zero time when absent or unreadable, or
// outside years 1 to 9999 (an event's JSON time holds no later one).
func parseTime(raw json.RawMessage) time.Time {
	s := strings.Trim(string(raw), `"`)
	if s == "" || s == "null" {
		return time.Time{}
	}
	inRange := func(t time.Time) time.Time {
		if t.Year() < 1 || t.Year() > 9999 {
			return time.Time{}
		}
		return t.UTC()
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(n) || n < -1e17 || n > 1e17 { // beyond those years as seconds or milliseconds
			return time.Time{}
		}
		if n > 1e12 {
			return inRange(time.UnixMilli(int64(n)))
		}
		return inRange(time.Unix(int64(n), 0))
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return inRange(t)
		}
	}
	return time.Time{}
}

// NormaliseURL returns the normalised form of a resource URL and its host:
// http(s) only, lower-case scheme and host, no default port, no trailing
// slash, no fragment. ok is false for anything else.
func NormaliseURL(raw string) (normalised, host string, ok bool) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		return "", "", false
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", "", false
	}
	host = strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return "", "", false
	}
	port := u.Port()
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		port = ""
	}
	u.Host = host
	if port != "" {
		u.Host = host + ":" + port
	}
	if strings.Contains(host, ":") { // IPv6 literal
		u.Host = "[" + host + "]"
		if port != "" {
			u.Host += ":" + port
		}
	}
	u.Fragment, u.RawFragment, u.User = "", "", nil
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u.String(), host, true
}
