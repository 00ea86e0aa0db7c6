package fetch

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// ErrRefused is wrapped by every error of a URL, host or address the guard
// refuses. Callers test it with errors.Is and answer a caller's URL with 400,
// a listing's URL with status "refused".
var ErrRefused = errors.New("refused")

// RefusedError says why the guard refused a URL, a host name or an address.
// It matches [ErrRefused] under errors.Is.
type RefusedError struct {
	// Host is the host name or address as the URL spelled it, if known.
	Host string
	// Addr is the address refused, or the zero Addr when the refusal came
	// before any address was known (a scheme, a name).
	Addr netip.Addr
	// Reason says why, for a person: "loopback", "scheme ftp is not http(s)".
	Reason string
}

func (e *RefusedError) Error() string {
	switch {
	case e.Addr.IsValid() && e.Host != "" && e.Host != e.Addr.String():
		return fmt.Sprintf("refused: %s (%s) is %s", e.Host, e.Addr, e.Reason)
	case e.Addr.IsValid():
		return fmt.Sprintf("refused: %s is %s", e.Addr, e.Reason)
	case e.Host != "":
		return fmt.Sprintf("refused: %s: %s", e.Host, e.Reason)
	default:
		return "refused: " + e.Reason
	}
}

// Is reports whether target is [ErrRefused].
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// refused returns a *RefusedError.
func refused(host string, addr netip.Addr, format string, args ...any) error {
	return &RefusedError{Host: host, Addr: addr, Reason: fmt.Sprintf(format, args...)}
}

// blockedRange is a network the guard refuses, with the reason it gives.
type blockedRange struct {
	prefix netip.Prefix
	reason string
}

// blockedRanges are the networks that are not public unicast: the IANA
// special-purpose registries for IPv4 and IPv6 (RFC 6890 and successors).
// IPv6 forms that embed an IPv4 address (mapped, compatible, NAT64, 6to4,
// Teredo) are unwrapped and checked by embeddedIPv4 before this list.
var blockedRanges = func() []blockedRange {
	list := []struct{ cidr, reason string }{
		{"0.0.0.0/8", "unspecified (this network)"},
		{"10.0.0.0/8", "private (RFC 1918)"},
		{"100.64.0.0/10", "carrier-grade NAT (RFC 6598)"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local (cloud metadata)"},
		{"172.16.0.0/12", "private (RFC 1918)"},
		{"192.0.0.0/24", "IETF protocol assignments"},
		{"192.0.2.0/24", "documentation (TEST-NET-1)"},
		{"192.31.196.0/24", "AS112"},
		{"192.52.193.0/24", "AMT"},
		{"192.88.99.0/24", "6to4 relay anycast"},
		{"192.168.0.0/16", "private (RFC 1918)"},
		{"192.175.48.0/24", "AS112"},
		{"198.18.0.0/15", "benchmarking (RFC 2544)"},
		{"198.51.100.0/24", "documentation (TEST-NET-2)"},
		{"203.0.113.0/24", "documentation (TEST-NET-3)"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved"},
		{"255.255.255.255/32", "broadcast"},

		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"::/96", "IPv4-compatible (deprecated)"},
		{"64:ff9b:1::/48", "local-use NAT64"},
		{"100::/64", "discard-only"},
		{"2001::/23", "IETF protocol assignments"},
		{"2001:db8::/32", "documentation"},
		{"3fff::/20", "documentation"},
		{"5f00::/16", "segment routing SIDs"},
		{"fc00::/7", "unique local (ULA)"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "site-local (deprecated)"},
		{"ff00::/8", "multicast"},
	}
	out := make([]blockedRange, len(list))
	for i, b := range list {
		out[i] = blockedRange{prefix: netip.MustParsePrefix(b.cidr), reason: b.reason}
	}
	return out
}()

// specialUseSuffixes are domains whose names never name a public host,
// whatever a resolver answers for them: this machine (RFC 6761), the local
// link (mDNS, RFC 6762), home networks (RFC 8375), private networks'
// conventional names (RFC 6762 appendix G), cloud-internal zones, and names
// outside the DNS (RFC 6761's invalid, RFC 7686's onion, RFC 9476's alt).
var specialUseSuffixes = []struct{ suffix, reason string }{
	{"localhost", "loopback"},
	{"localdomain", "a local name"},
	{"local", "a link-local (mDNS) name"},
	{"home.arpa", "a home-network name"},
	{"internal", "an internal name"},
	{"intranet", "a private-network name"},
	{"private", "a private-network name"},
	{"corp", "a private-network name"},
	{"home", "a private-network name"},
	{"lan", "a private-network name"},
	{"invalid", "a special-use name"},
	{"onion", "a special-use name"},
	{"alt", "a special-use name"},
}

// blockedName returns why a host name is refused before resolution, by name
// alone: cloud metadata services, names that always mean this machine,
// special-use and private domains (specialUseSuffixes), and single-label
// names, which resolvers complete with the machine's own search domains.
// Any other name is judged by the addresses it resolves to.
func blockedName(name string) (reason string, ok bool) {
	switch name {
	case "localhost", "ip6-localhost", "ip6-loopback":
		return "loopback", true
	case "metadata", "metadata.google.internal", "metadata.goog",
		"metadata.azure.internal", "instance-data", "instance-data.ec2.internal",
		"metadata.tencentyun.com", "100-100-100-200":
		return "a cloud metadata name", true
	case "kubernetes.default", "kubernetes.default.svc":
		return "a cluster-internal name", true
	}
	for _, d := range specialUseSuffixes {
		if name == d.suffix || strings.HasSuffix(name, "."+d.suffix) {
			return d.reason, true
		}
	}
	if !strings.Contains(name, ".") {
		return "a single-label name (completed by this machine's search domains)", true
	}
	return "", false
}

// embeddedIPv4 returns the IPv4 address an IPv6 address carries by one of the
// transition mechanisms that make a host reach it: IPv4-mapped ::ffff:0:0/96,
// IPv4-compatible ::/96, NAT64 64:ff9b::/96, 6to4 2002::/16 and Teredo
// 2001::/32 (the client address, stored inverted).
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	var v4 [4]byte
	switch {
	case a.Is4In6():
		return a.Unmap(), true
	case netip.MustParsePrefix("::/96").Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		copy(v4[:], b[12:])
	case netip.MustParsePrefix("64:ff9b::/96").Contains(a):
		copy(v4[:], b[12:])
	case netip.MustParsePrefix("2002::/16").Contains(a):
		copy(v4[:], b[2:6])
	case netip.MustParsePrefix("2001::/32").Contains(a):
		for i := range v4 {
			v4[i] = b[12+i] ^ 0xff
		}
	default:
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(v4), true
}

// checkAddr returns a *RefusedError when a is not a public unicast address,
// unless a lies inside one of allow. host names the address in the error.
func checkAddr(host string, a netip.Addr, allow []netip.Prefix) error {
	if !a.IsValid() {
		return refused(host, a, "not an address")
	}
	if a.Zone() != "" {
		return refused(host, a.WithZone(""), "a scoped address (zone %q)", a.Zone())
	}
	if inAllowed(a, allow) {
		return nil
	}
	if v4, ok := embeddedIPv4(a); ok {
		if inAllowed(v4, allow) {
			return nil
		}
		if err := checkAddr4(host, v4); err != nil {
			var re *RefusedError
			if errors.As(err, &re) {
				re.Reason += " (embedded in " + a.String() + ")"
			}
			return err
		}
		if a.Is4In6() {
			return nil
		}
	}
	for _, b := range blockedRanges {
		if b.prefix.Contains(a) {
			return refused(host, a, "%s", b.reason)
		}
	}
	return nil
}

// checkAddr4 checks an IPv4 address against the IPv4 part of blockedRanges.
func checkAddr4(host string, a netip.Addr) error {
	for _, b := range blockedRanges {
		if b.prefix.Addr().Is4() && b.prefix.Contains(a) {
			return refused(host, a, "%s", b.reason)
		}
	}
	return nil
}

// inAllowed reports whether a, or the IPv4 address it maps, is inside allow.
func inAllowed(a netip.Addr, allow []netip.Prefix) bool {
	for _, p := range allow {
		if p.Contains(a) || (a.Is4In6() && p.Contains(a.Unmap())) {
			return true
		}
	}
	return false
}

// checkName refuses host names that mean this machine or a metadata service
// whatever they resolve to. name is canonical (see canonicalHost).
func checkName(name string) error {
	if reason, ok := blockedName(name); ok {
		return refused(name, netip.Addr{}, "%s", reason)
	}
	return nil
}

// hostInfo is a URL host in canonical form: an address, or an ASCII name.
type hostInfo struct {
	addr netip.Addr // valid when the host is an address literal
	name string     // lower-case ASCII name without trailing dot, else ""
}

// String returns the host as it is dialled: the address or the name.
func (h hostInfo) String() string {
	if h.addr.IsValid() {
		return h.addr.String()
	}
	return h.name
}

// canonicalHost parses a URL host (without port, IPv6 in brackets or not)
// the way browsers do (the WHATWG URL host parser): IDNA mapping (so
// full-width digits and dots become ASCII), then any host whose last label is
// a number is an IPv4 address in the forms inet_aton accepts ("127.1",
// "0x7f.0.0.1", "2130706433", "017700000001"), or an error.
func canonicalHost(raw string) (hostInfo, error) {
	if raw == "" {
		return hostInfo{}, refused("", netip.Addr{}, "empty host")
	}
	if strings.HasPrefix(raw, "[") {
		if !strings.HasSuffix(raw, "]") {
			return hostInfo{}, refused(raw, netip.Addr{}, "malformed IPv6 literal")
		}
		raw = raw[1 : len(raw)-1]
	}
	if strings.Contains(raw, ":") {
		a, err := netip.ParseAddr(raw)
		if err != nil {
			return hostInfo{}, refused(raw, netip.Addr{}, "malformed IPv6 literal")
		}
		return hostInfo{addr: a}, nil
	}
	ascii, err := idna.Lookup.ToASCII(raw)
	if err != nil {
		// Lookup refuses some ASCII names browsers take (underscores,
		// long labels); take those as they are, and nothing else.
		if !isPlainASCIIHost(raw) {
			return hostInfo{}, refused(raw, netip.Addr{}, "invalid host name")
		}
		ascii = raw
	}
	ascii = strings.ToLower(ascii)
	if !isPlainASCIIHost(ascii) {
		return hostInfo{}, refused(raw, netip.Addr{}, "invalid host name")
	}
	if a, ok, err := parseIPv4(ascii); err != nil {
		return hostInfo{}, refused(raw, netip.Addr{}, "%v", err)
	} else if ok {
		return hostInfo{addr: a}, nil
	}
	name := strings.TrimSuffix(ascii, ".")
	if name == "" || strings.HasSuffix(name, ".") || strings.HasPrefix(name, ".") || strings.Contains(name, "..") {
		return hostInfo{}, refused(raw, netip.Addr{}, "invalid host name")
	}
	return hostInfo{name: name}, nil
}

// isPlainASCIIHost reports whether s is made only of ASCII letters, digits,
// '-', '_' and '.'.
func isPlainASCIIHost(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return s != ""
}

// parseIPv4 implements the WHATWG "ends in a number" rule and IPv4 parser.
// It returns ok=false for a name, and an error for a host that ends in a
// number but is not a valid address (browsers refuse those too).
func parseIPv4(host string) (netip.Addr, bool, error) {
	parts := strings.Split(host, ".")
	if parts[len(parts)-1] == "" && len(parts) > 1 {
		parts = parts[:len(parts)-1]
	}
	last := parts[len(parts)-1]
	if !endsInNumber(last) {
		return netip.Addr{}, false, nil
	}
	if len(parts) > 4 {
		return netip.Addr{}, false, errors.New("malformed IPv4 address (more than 4 parts)")
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, err := parseIPv4Number(p)
		if err != nil {
			return netip.Addr{}, false, fmt.Errorf("malformed IPv4 address: %w", err)
		}
		nums[i] = n
	}
	for _, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, false, errors.New("malformed IPv4 address (part above 255)")
		}
	}
	if nums[len(nums)-1] >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, false, errors.New("malformed IPv4 address (out of range)")
	}
	v := nums[len(nums)-1]
	for i, n := range nums[:len(nums)-1] {
		v += n << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true, nil
}

// endsInNumber reports whether the last label of a host makes it an IPv4
// address for a browser: all decimal digits, or 0x followed by hex digits.
func endsInNumber(label string) bool {
	if label == "" {
		return false
	}
	if isDigits(label, 10) {
		return true
	}
	if len(label) >= 2 && label[0] == '0' && (label[1] == 'x' || label[1] == 'X') {
		return label == "0x" || label == "0X" || isDigits(label[2:], 16)
	}
	return false
}

// parseIPv4Number parses one part: 0x hex, leading-zero octal, or decimal.
func parseIPv4Number(p string) (uint64, error) {
	if p == "" {
		return 0, errors.New("empty part")
	}
	base := 10
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		p, base = p[2:], 16
		if p == "" {
			return 0, nil
		}
	case len(p) >= 2 && p[0] == '0':
		p, base = p[1:], 8
	}
	if !isDigits(p, base) {
		return 0, fmt.Errorf("part %q is not a base-%d number", p, base)
	}
	n, err := strconv.ParseUint(p, base, 64)
	if err != nil || n > 1<<32 {
		return 1 << 33, nil // out of range for every position
	}
	return n, nil
}

// isDigits reports whether s is non-empty and made of digits of base.
func isDigits(s string, base int) bool {
	if s == "" {
		return false
	}
	for _, c := range strings.ToLower(s) {
		switch {
		case c >= '0' && c <= '7':
		case c >= '8' && c <= '9' && base >= 10:
		case c >= 'a' && c <= 'f' && base == 16:
		default:
			return false
		}
	}
	return true
}

// parseURL parses rawURL and checks what can be checked before any I/O with
// the allowance allow: scheme, credentials, host and, for an address literal,
// the address. It returns the URL with its host in canonical form.
func parseURL(rawURL string, allow []netip.Prefix) (*url.URL, error) {
	if strings.TrimSpace(rawURL) != rawURL {
		return nil, refused("", netip.Addr{}, "URL has surrounding white space")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &RefusedError{Reason: "malformed URL: " + strings.TrimPrefix(err.Error(), "parse "+strconv.Quote(rawURL)+": ")}
	}
	if err := checkParsed(u, allow); err != nil {
		return nil, err
	}
	return u, nil
}

// checkParsed checks u (see parseURL) and rewrites u.Host canonically.
func checkParsed(u *url.URL, allow []netip.Prefix) error {
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return refused("", netip.Addr{}, "URL has no scheme (want http or https)")
	default:
		return refused("", netip.Addr{}, "scheme %q is not http or https", u.Scheme)
	}
	if u.Opaque != "" {
		return refused("", netip.Addr{}, "URL has no host")
	}
	if u.User != nil {
		return refused(u.Hostname(), netip.Addr{}, "URL carries credentials")
	}
	port := u.Port()
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return refused(u.Hostname(), netip.Addr{}, "invalid port %q", port)
		}
	}
	h, err := canonicalHost(u.Hostname())
	if err != nil {
		return err
	}
	if h.addr.IsValid() {
		if err := checkAddr(u.Hostname(), h.addr, allow); err != nil {
			return err
		}
	} else if err := checkName(h.name); err != nil {
		return err
	}
	host := h.String()
	if h.addr.Is6() {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	u.Scheme = strings.ToLower(u.Scheme)
	u.Host = host
	return nil
}

// CanonicalHost returns a URL host (without port) as the guard, and
// browsers, read it: an IPv4 address in dotted form whatever its spelling
// ("0x7f.1" is 127.0.0.1), an IPv6 address without brackets, or a lower-case
// ASCII (punycode) name without trailing dot. It checks nothing else.
func CanonicalHost(host string) (string, error) {
	h, err := canonicalHost(host)
	if err != nil {
		return "", err
	}
	return h.String(), nil
}

// CheckURLAllowing is [CheckURL] with an allowance (FETCH_ALLOW_CIDRS): an
// address literal inside allow passes.
func CheckURLAllowing(rawURL string, allow []netip.Prefix) error {
	_, err := parseURL(rawURL, allow)
	return err
}

// CheckURL refuses, before any I/O, a URL the guarded client would never
// fetch with no allowance configured: a scheme other than http(s),
// credentials, an empty or malformed host, a host name of a metadata service
// or of this machine, and an address literal (in any spelling a browser
// accepts) that is not public unicast. The error wraps [ErrRefused]. A URL
// that passes may still be refused at dial time, once its name is resolved.
func CheckURL(rawURL string) error {
	_, err := parseURL(rawURL, nil)
	return err
}
