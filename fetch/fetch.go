// Package fetch is the one HTTP client for URLs that come from callers or
// from listings: url-meta's url, the pages a brief reads, the resources an
// index listing names. It fetches public http(s) only.
//
// The guard has two layers. [CheckURL] refuses before any I/O what the URL
// alone gives away: other schemes, credentials, metadata host names, and
// address literals in every spelling browsers accept. The real guard sits at
// dial time: the client resolves each name with its own [Resolver], refuses
// the connection when any resolved address is loopback, private, link-local,
// CGNAT, multicast, reserved or otherwise not public unicast (IPv4 forms
// embedded in IPv6 included), and dials the very address it checked. So a
// name resolving to 127.0.0.1, a DNS answer that changes between check and
// use, and a redirect to a private address are all refused. Redirects are
// followed by the client, each one checked again, up to a limit.
//
// Networks in [Config.AllowCIDRs] (FETCH_ALLOW_CIDRS) are reachable although
// private: tests on loopback, a private deployment. Production leaves it
// empty.
//
// Operator-configured URLs are trusted and do not use this package.
package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Resolver resolves host names to addresses. *net.Resolver implements it;
// tests replace it to make a name resolve wherever they need.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Client. The zero value is production's configuration.
type Config struct {
	// AllowCIDRs are networks reachable although not public (from
	// FETCH_ALLOW_CIDRS). Empty in production.
	AllowCIDRs []netip.Prefix
	// Resolver resolves host names. Defaults to net.DefaultResolver.
	Resolver Resolver
	// Timeout bounds one Get or Do: connection, redirects, headers and
	// body. Defaults to 10 s.
	Timeout time.Duration
	// MaxBodyBytes caps the body Get and Do read. Defaults to 2 MiB.
	MaxBodyBytes int64
	// MaxRedirects is how many redirects Get and Do follow. Defaults to 5;
	// a negative value follows none.
	MaxRedirects int
	// UserAgent is sent when a request sets none.
	UserAgent string
}

// DefaultUserAgent is the User-Agent sent when Config.UserAgent is empty.
const DefaultUserAgent = "x402d-fetch/1.0 (+https://github.com/x402d/x402d)"

// ParseAllowCIDRs parses FETCH_ALLOW_CIDRS: comma-separated networks, each a
// CIDR prefix or a single address. Empty input gives nil.
func ParseAllowCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("parse FETCH_ALLOW_CIDRS entry %q: %w", f, err)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("parse FETCH_ALLOW_CIDRS entry %q: %w", f, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Client fetches untrusted URLs through the address guard. It is safe for
// concurrent use.
type Client struct {
	cfg       Config
	dialer    *net.Dialer
	transport *http.Transport
}

// ErrTooManyRedirects is wrapped by the error of a fetch whose redirect chain
// is longer than Config.MaxRedirects.
var ErrTooManyRedirects = errors.New("too many redirects")

// New returns a Client for cfg (nil means the zero Config).
func New(cfg *Config) *Client {
	c := &Client{}
	if cfg != nil {
		c.cfg = *cfg
	}
	c.cfg.AllowCIDRs = append([]netip.Prefix(nil), c.cfg.AllowCIDRs...)
	if c.cfg.Resolver == nil {
		c.cfg.Resolver = net.DefaultResolver
	}
	if c.cfg.Timeout <= 0 {
		c.cfg.Timeout = 10 * time.Second
	}
	if c.cfg.MaxBodyBytes <= 0 {
		c.cfg.MaxBodyBytes = 2 << 20
	}
	switch {
	case c.cfg.MaxRedirects == 0:
		c.cfg.MaxRedirects = 5
	case c.cfg.MaxRedirects < 0:
		c.cfg.MaxRedirects = 0
	}
	if c.cfg.UserAgent == "" {
		c.cfg.UserAgent = DefaultUserAgent
	}
	c.dialer = &net.Dialer{
		Timeout:   c.cfg.Timeout,
		KeepAlive: 30 * time.Second,
		// The last line of defence: whatever address the socket is
		// about to connect to is checked once more.
		ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return refused(address, netip.Addr{}, "not an address")
			}
			return checkAddr("", ap.Addr(), c.cfg.AllowCIDRs)
		},
	}
	c.transport = &http.Transport{
		Proxy:                  nil, // never an environment proxy: it would bypass the guard
		DialContext:            c.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           64,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        30 * time.Second,
		TLSHandshakeTimeout:    c.cfg.Timeout,
		ResponseHeaderTimeout:  c.cfg.Timeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return c
}

// CheckURL is like the package's [CheckURL] with the client's allowance:
// an address literal inside Config.AllowCIDRs passes.
func (c *Client) CheckURL(rawURL string) error {
	_, err := parseURL(rawURL, c.cfg.AllowCIDRs)
	return err
}

// DialContext dials address (host:port) through the guard: a name is
// resolved with the client's Resolver, every address is checked, and only a
// checked address is dialled. Any refused address refuses the whole name, so
// a name with one public and one private address is not reached. Errors
// wrap [ErrRefused] when the guard refused.
func (c *Client) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, refused(address, netip.Addr{}, "network %q is not tcp", network)
	}
	hostPort, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, refused(address, netip.Addr{}, "malformed address")
	}
	h, err := canonicalHost(hostPort)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if h.addr.IsValid() {
		addrs = []netip.Addr{h.addr}
	} else {
		if err := checkName(h.name); err != nil {
			return nil, err
		}
		addrs, err = c.cfg.Resolver.LookupNetIP(ctx, "ip", h.name)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", h.name, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", h.name)
		}
	}
	for _, a := range addrs {
		if err := checkAddr(h.name, a, c.cfg.AllowCIDRs); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, a := range addrs {
		conn, err := c.dialer.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return conn, nil
		}
		if errors.Is(err, ErrRefused) || ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// guardedTransport checks each request's URL (scheme, credentials, host
// literal) and puts its host in canonical form before the dialer sees it.
type guardedTransport struct{ c *Client }

func (t guardedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	u := *req.URL
	if err := checkParsed(&u, t.c.cfg.AllowCIDRs); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	if u.Host != req.URL.Host || u.Scheme != req.URL.Scheme {
		req = req.Clone(req.Context())
		req.URL = &u
	}
	if !headerPresent(req.Header, "User-Agent") {
		req = cloneOnce(req)
		req.Header.Set("User-Agent", t.c.cfg.UserAgent)
	}
	return t.c.transport.RoundTrip(req)
}

// headerPresent reports whether h has key at all (an explicitly empty
// User-Agent means "send none").
func headerPresent(h http.Header, key string) bool {
	_, ok := h[http.CanonicalHeaderKey(key)]
	return ok
}

// cloneOnce returns a copy of req whose header may be changed.
func cloneOnce(req *http.Request) *http.Request {
	r := req.Clone(req.Context())
	if r.Header == nil {
		r.Header = http.Header{}
	}
	return r
}

// Transport returns an http.RoundTripper through the guard that follows no
// redirects and does not cap bodies: for proxies (the browser's) that pass
// each response on as it is. Prefer Get and Do.
func (c *Client) Transport() http.RoundTripper { return guardedTransport{c} }

// Response is a fetched response with its body read, up to
// Config.MaxBodyBytes.
type Response struct {
	// StatusCode and Status are the final response's.
	StatusCode int
	Status     string
	// Header is the final response's header.
	Header http.Header
	// URL is the final URL, after redirects.
	URL *url.URL
	// Redirects is how many redirects were followed.
	Redirects int
	// Body is the body, at most Config.MaxBodyBytes long.
	Body []byte
	// Truncated reports that the body was longer than Body.
	Truncated bool
}

// Get fetches rawURL with GET, following redirects through the guard.
func (c *Client) Get(ctx context.Context, rawURL string) (*Response, error) {
	u, err := parseURL(rawURL, c.cfg.AllowCIDRs)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("new request: %w", err)
	}
	return c.Do(ctx, req)
}

// Do sends req through the guard, following redirects, and reads the
// response body up to Config.MaxBodyBytes. A refused URL, address or
// redirect target is an error wrapping [ErrRefused]; a 4xx or 5xx response
// is not an error.
func (c *Client) Do(ctx context.Context, req *http.Request) (*Response, error) {
	req = req.WithContext(ctx)
	redirects := 0
	hc := &http.Client{
		// guardedTransport checks every request's URL, redirects
		// included; the dialer checks every address.
		Transport: guardedTransport{c},
		Timeout:   c.cfg.Timeout,
		CheckRedirect: func(_ *http.Request, via []*http.Request) error {
			if len(via) > c.cfg.MaxRedirects {
				return fmt.Errorf("%w (more than %d)", ErrTooManyRedirects, c.cfg.MaxRedirects)
			}
			redirects = len(via)
			return nil
		},
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, unwrapURLError(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read body of %s: %w", resp.Request.URL.Redacted(), err)
	}
	truncated := int64(len(body)) > c.cfg.MaxBodyBytes
	if truncated {
		body = body[:c.cfg.MaxBodyBytes]
	}
	return &Response{
		StatusCode: resp.StatusCode,
		Status:     resp.Status,
		Header:     resp.Header,
		URL:        resp.Request.URL,
		Redirects:  redirects,
		Body:       body,
		Truncated:  truncated,
	}, nil
}

// unwrapURLError keeps a *url.Error's context but puts a refusal first, so
// err.Error() of a refused redirect reads "refused: ..." with the URL after.
func unwrapURLError(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	var re *RefusedError
	if errors.As(err, &re) {
		return fmt.Errorf("%w (fetching %s)", re, ue.URL)
	}
	return fmt.Errorf("%s %s: %w", ue.Op, ue.URL, ue.Err)
}
