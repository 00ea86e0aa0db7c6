package fetch

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckURLRefuses(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		url  string
		addr string // the address the refusal names, if any
	}{
		// Schemes and URL shape.
		{name: "FileScheme", url: "file:///etc/passwd"},
		{name: "FTPScheme", url: "ftp://example.com/x"},
		{name: "GopherScheme", url: "gopher://example.com:70/_GET"},
		{name: "JavaScriptScheme", url: "javascript:alert(1)"},
		{name: "DataScheme", url: "data:text/html,<h1>hi</h1>"},
		{name: "NoScheme", url: "//example.com/"},
		{name: "RelativePath", url: "/etc/passwd"},
		{name: "Empty", url: ""},
		{name: "EmptyHost", url: "http:///path"},
		{name: "OpaqueHTTP", url: "http:example.com"},
		{name: "LeadingSpace", url: " http://example.com/"},
		{name: "BadPort", url: "http://example.com:99999/"},
		{name: "BackslashHost", url: `http://example.com\@127.0.0.1/`},
		// Credentials.
		{name: "UserPassword", url: "http://user:pass@example.com/"},
		{name: "UserOnly", url: "https://user@example.com/"},
		{name: "AtTrick", url: "http://example.com@127.0.0.1/", addr: ""},
		// Loopback in every IPv4 spelling browsers accept.
		{name: "Loopback", url: "http://127.0.0.1/", addr: "127.0.0.1"},
		{name: "LoopbackOtherHost", url: "http://127.5.6.7:8080/", addr: "127.5.6.7"},
		{name: "LoopbackShort", url: "http://127.1/", addr: "127.0.0.1"},
		{name: "LoopbackHexShort", url: "http://0x7f.1/", addr: "127.0.0.1"},
		{name: "LoopbackDecimal", url: "http://2130706433/", addr: "127.0.0.1"},
		{name: "LoopbackOctal", url: "http://017700000001/", addr: "127.0.0.1"},
		{name: "LoopbackHex", url: "http://0x7f000001/", addr: "127.0.0.1"},
		{name: "LoopbackOctalParts", url: "http://0177.0.0.01/", addr: "127.0.0.1"},
		{name: "LoopbackTrailingDot", url: "http://127.0.0.1./", addr: "127.0.0.1"},
		{name: "LoopbackPercentEncoded", url: "http://%31%32%37.0.0.1/"}, // Go refuses the escape; browsers decode it
		{name: "LoopbackFullWidth", url: "http://１２７.０.０.１/", addr: "127.0.0.1"},
		{name: "LoopbackIdeographicDots", url: "http://127。0。0。1/", addr: "127.0.0.1"},
		{name: "Unspecified", url: "http://0.0.0.0/", addr: "0.0.0.0"},
		{name: "UnspecifiedShort", url: "http://0/", addr: "0.0.0.0"},
		{name: "MalformedIPv4", url: "http://1.2.3.4.5/"},
		{name: "MalformedOctal", url: "http://09.1.1.1/"},
		{name: "IPv4OutOfRange", url: "http://256.1.1.1/"},
		// Private, link-local, CGNAT and special ranges.
		{name: "Private10", url: "http://10.0.0.1/", addr: "10.0.0.1"},
		{name: "Private172", url: "http://172.16.5.4/", addr: "172.16.5.4"},
		{name: "Private192", url: "https://192.168.1.1/admin", addr: "192.168.1.1"},
		{name: "Private10Decimal", url: "http://167772161/", addr: "10.0.0.1"},
		{name: "CGNAT", url: "http://100.64.0.1/", addr: "100.64.0.1"},
		{name: "Metadata", url: "http://169.254.169.254/latest/meta-data/", addr: "169.254.169.254"},
		{name: "MetadataDecimal", url: "http://2852039166/", addr: "169.254.169.254"},
		{name: "MetadataHex", url: "http://0xa9.0xfe.0xa9.0xfe/", addr: "169.254.169.254"},
		{name: "AlibabaMetadata", url: "http://100.100.100.200/", addr: "100.100.100.200"},
		{name: "Multicast", url: "http://224.0.0.1/", addr: "224.0.0.1"},
		{name: "Broadcast", url: "http://255.255.255.255/", addr: "255.255.255.255"},
		{name: "Reserved", url: "http://240.0.0.1/", addr: "240.0.0.1"},
		{name: "Benchmark", url: "http://198.18.0.1/", addr: "198.18.0.1"},
		{name: "Documentation", url: "http://192.0.2.10/", addr: "192.0.2.10"},
		{name: "IETFProtocol", url: "http://192.0.0.170/", addr: "192.0.0.170"},
		// IPv6.
		{name: "IPv6Loopback", url: "http://[::1]/", addr: "::1"},
		{name: "IPv6LoopbackLong", url: "http://[0:0:0:0:0:0:0:1]:8080/", addr: "::1"},
		{name: "IPv6Unspecified", url: "http://[::]/", addr: "::"},
		{name: "IPv6Mapped", url: "http://[::ffff:127.0.0.1]/", addr: "127.0.0.1"},
		{name: "IPv6MappedHex", url: "http://[::ffff:7f00:1]/", addr: "127.0.0.1"},
		{name: "IPv6MappedMetadata", url: "http://[::ffff:a9fe:a9fe]/", addr: "169.254.169.254"},
		{name: "IPv6Compatible", url: "http://[::127.0.0.1]/", addr: "127.0.0.1"},
		{name: "IPv6CompatiblePrivate", url: "http://[::a00:1]/", addr: "10.0.0.1"},
		{name: "NAT64Loopback", url: "http://[64:ff9b::7f00:1]/", addr: "127.0.0.1"},
		{name: "NAT64Metadata", url: "http://[64:ff9b::169.254.169.254]/", addr: "169.254.169.254"},
		{name: "SixToFourPrivate", url: "http://[2002:c0a8:101::1]/", addr: "192.168.1.1"},
		{name: "TeredoLoopback", url: "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", addr: "127.0.0.1"},
		{name: "ULA", url: "http://[fd00::1]/", addr: "fd00::1"},
		{name: "ULAfc", url: "http://[fc00::abcd]/", addr: "fc00::abcd"},
		{name: "IPv6LinkLocal", url: "http://[fe80::1]/", addr: "fe80::1"},
		{name: "IPv6LinkLocalZone", url: "http://[fe80::1%25eth0]/", addr: "fe80::1"},
		{name: "IPv6SiteLocal", url: "http://[fec0::1]/", addr: "fec0::1"},
		{name: "IPv6Multicast", url: "http://[ff02::1]/", addr: "ff02::1"},
		{name: "IPv6Documentation", url: "http://[2001:db8::1]/", addr: "2001:db8::1"},
		{name: "AWSMetadataIPv6", url: "http://[fd00:ec2::254]/", addr: "fd00:ec2::254"},
		// Names that mean this machine or a metadata service.
		{name: "Localhost", url: "http://localhost:8080/"},
		{name: "LocalhostUpper", url: "http://LOCALHOST/"},
		{name: "LocalhostTrailingDot", url: "http://localhost./"},
		{name: "SubdomainOfLocalhost", url: "http://api.localhost/"},
		{name: "GoogleMetadata", url: "http://metadata.google.internal/computeMetadata/v1/"},
		{name: "GoogleMetadataTrailingDot", url: "http://metadata.google.internal./"},
		{name: "GoogleMetadataMixedCase", url: "http://Metadata.Google.Internal/"},
		{name: "MetadataShortName", url: "http://metadata/"},
		{name: "EC2InstanceData", url: "http://instance-data/latest/"},
		// Special-use and private names, refused by name whatever a
		// resolver would answer (RFC 6761, 6762, 8375, 7686, 9476).
		{name: "LocalhostLocaldomain", url: "http://localhost.localdomain/"},
		{name: "Localdomain", url: "http://printer.localdomain/"},
		{name: "MDNS", url: "http://nas.local/"},
		{name: "MDNSTrailingDot", url: "http://NAS.Local./"},
		{name: "Internal", url: "http://db.internal:5432/"},
		{name: "CloudInternal", url: "http://ip-10-0-0-1.ec2.internal/"},
		{name: "HomeArpa", url: "http://router.home.arpa/"},
		{name: "Intranet", url: "http://wiki.intranet/"},
		{name: "Corp", url: "http://git.corp/"},
		{name: "Lan", url: "http://fritz.box.lan/"},
		{name: "Invalid", url: "http://x.invalid/"},
		{name: "Onion", url: "http://abc.onion/"},
		{name: "Alt", url: "http://name.alt/"},
		{name: "IP6Localhost", url: "http://ip6-localhost/"},
		{name: "SingleLabel", url: "http://router/"},
		{name: "SingleLabelPort", url: "https://gitlab:8443/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := CheckURL(tt.url)
			require.Error(t, err, tt.url)
			require.ErrorIs(t, err, ErrRefused)
			var re *RefusedError
			require.True(t, errors.As(err, &re))
			require.Regexp(t, "^refused: ", err.Error())
			if tt.addr != "" {
				require.Equal(t, netip.MustParseAddr(tt.addr), re.Addr, "refused address of %s", tt.url)
			}
		})
	}
	require.GreaterOrEqual(t, len(tests), 30)
}

func TestCheckURLAccepts(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		url  string
		host string // canonical host parseURL gives
	}{
		{name: "Name", url: "https://example.com/path?q=1#frag", host: "example.com"},
		{name: "NameUpper", url: "HTTP://Example.COM/", host: "example.com"},
		{name: "NameTrailingDot", url: "http://example.com./", host: "example.com"},
		{name: "NamePort", url: "http://example.com:8080/", host: "example.com:8080"},
		{name: "IDN", url: "http://bücher.example/", host: "xn--bcher-kva.example"},
		{name: "Underscore", url: "http://my_host.example.org/", host: "my_host.example.org"},
		{name: "PublicIPv4", url: "http://93.184.215.14/", host: "93.184.215.14"},
		{name: "PublicIPv4Hex", url: "http://0x5d.0xb8.0xd7.0x0e/", host: "93.184.215.14"},
		{name: "PublicIPv4Decimal", url: "http://134744072/", host: "8.8.8.8"},
		{name: "PublicIPv6", url: "http://[2606:4700:4700::1111]/", host: "[2606:4700:4700::1111]"},
		{name: "PublicMapped", url: "http://[::ffff:8.8.8.8]/", host: "[::ffff:8.8.8.8]"},
		{name: "PublicNAT64", url: "http://[64:ff9b::808:808]/", host: "[64:ff9b::808:808]"},
		{name: "PublicSixToFour", url: "http://[2002:808:808::1]/", host: "[2002:808:808::1]"},
		{name: "NameStartingWithDigits", url: "http://1password.com/", host: "1password.com"},
		{name: "HexLookingName", url: "http://0xdeadbeef.example/", host: "0xdeadbeef.example"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, CheckURL(tt.url))
			u, err := parseURL(tt.url, nil)
			require.NoError(t, err)
			require.Equal(t, tt.host, u.Host)
		})
	}
}

func TestCheckURLAllowance(t *testing.T) {
	t.Parallel()

	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.1.0.0/16")}
	c := New(&Config{AllowCIDRs: allow})

	for _, u := range []string{"http://127.0.0.1:8080/", "http://0x7f.1/", "http://[::ffff:127.0.0.1]/", "http://10.1.2.3/"} {
		require.ErrorIs(t, CheckURL(u), ErrRefused, "without allowance: %s", u)
		require.NoError(t, c.CheckURL(u), "with allowance: %s", u)
	}
	// Outside the allowance stays refused, and so do names and credentials.
	for _, u := range []string{"http://10.2.0.1/", "http://169.254.169.254/", "http://localhost/", "http://u:p@127.0.0.1/", "file:///etc/passwd"} {
		require.ErrorIs(t, c.CheckURL(u), ErrRefused, u)
	}
}

func TestParseIPv4(t *testing.T) {
	t.Parallel()

	tests := []struct {
		host string
		want string // "" = a name; "error" = malformed
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"0X7F.0X0.0X0.0X1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0x", "0.0.0.0"},
		{"1.2.3.4.", "1.2.3.4"},
		{"192.168.257", "192.168.1.1"},
		{"4294967295", "255.255.255.255"},
		{"4294967296", "error"},
		{"1.256.0.0", "error"},
		{"08", "error"},
		{"1.2.3.4.5", "error"},
		{"foo.1", "error"},
		{"example.com", ""},
		{"1.2.3.x", ""},
		{"0xg", ""},
	}
	for _, tt := range tests {
		a, ok, err := parseIPv4(tt.host)
		switch tt.want {
		case "error":
			require.Error(t, err, tt.host)
		case "":
			require.NoError(t, err, tt.host)
			require.False(t, ok, tt.host)
		default:
			require.NoError(t, err, tt.host)
			require.True(t, ok, tt.host)
			require.Equal(t, tt.want, a.String(), tt.host)
		}
	}
}

func TestParseAllowCIDRs(t *testing.T) {
	t.Parallel()

	got, err := ParseAllowCIDRs(" 127.0.0.0/8, ::1 ,10.1.2.3/16,")
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("10.1.0.0/16"),
	}, got)

	got, err = ParseAllowCIDRs("")
	require.NoError(t, err)
	require.Empty(t, got)

	_, err = ParseAllowCIDRs("127.0.0.0/33")
	require.Error(t, err)
	_, err = ParseAllowCIDRs("localhost")
	require.Error(t, err)
}

// FuzzCanonicalHost: reading a host never panics, is idempotent (the
// canonical form reads as itself), and a refused address stays refused in
// its canonical spelling.
func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "0x7f.1", "2130706433", "017700000001", "127.1.", "[::ffff:7f00:1]",
		"::1", "１２７.０.０.１", "bücher.example", "a..b", "0x", "1.2.3.4.5", "example.com.", "fe80::1%eth0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		h, err := canonicalHost(host)
		if err != nil {
			return
		}
		again, err := canonicalHost(h.String())
		if err != nil {
			t.Fatalf("canonical form %q of %q does not read: %v", h.String(), host, err)
		}
		if again != h {
			t.Fatalf("%q reads as %v, its canonical form %q as %v", host, h, h.String(), again)
		}
		if h.addr.IsValid() {
			e1 := checkAddr("", h.addr, nil)
			e2 := CheckURL("http://" + bracket(h) + "/")
			if (e1 == nil) != (e2 == nil) {
				t.Fatalf("%q: address check %v, URL check %v", host, e1, e2)
			}
		}
	})
}

func bracket(h hostInfo) string {
	if h.addr.Is6() {
		return "[" + h.String() + "]"
	}
	return h.String()
}
