package browser

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/go-rod/rod/lib/proto"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/fetch"
)

// TestCanonicalHostMatchesChromium compares the guard's reading of odd host
// spellings with Chromium's own URL parser (new URL(...).hostname): the
// address the guard checks must be the one the browser would connect to.
func TestCanonicalHostMatchesChromium(t *testing.T) {
	t.Parallel()

	hosts := []string{
		"127.0.0.1", "127.1", "127.0.1", "0x7f.1", "0X7F.0X0.0X0.0X1", "0x7f000001",
		"2130706433", "017700000001", "0177.0.0.01", "0177.1", "127.0.0.1.", "0x7F.1.",
		"0", "0x", "00", "0.0.0.0", "10.1", "167772161", "0xa.0xffffff", "192.168.257",
		"0xa9.0xfe.0xa9.0xfe", "2852039166", "4294967295", "255.255.255.255",
		"１２７.０.０.１", "127。0。0。1", "0ｘ7f.1",
		"[::1]", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]",
		"[::127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:c0a8:101::1]", "[fd00::1]", "[FE80::1]",
		"example.com", "EXAMPLE.com.", "bücher.example", "xn--bcher-kva.example",
		"1password.com", "0xdeadbeef.example", "a.b.c.d.e", "metadata.google.internal",
		"localhost", "sub.LOCALHOST", "my_host.example.org",
		// Refused by both (not a valid host).
		"4294967296", "1.2.3.4.5", "256.0.0.1", "08", "0x7g.1", "1.2.3.09",
	}

	page, err := testPool.browser.Page(proto.TargetCreateTarget{})
	require.NoError(t, err)
	defer func() { _ = page.Close() }()
	arg, err := json.Marshal(hosts)
	require.NoError(t, err)
	res, err := page.Eval(`hosts => hosts.map(h => { try { return new URL("http://" + h + "/").hostname } catch (e) { return "ERROR" } })`, json.RawMessage(arg))
	require.NoError(t, err)
	var chromium []string
	require.NoError(t, json.Unmarshal([]byte(res.Value.JSON("", "")), &chromium))
	require.Len(t, chromium, len(hosts))

	for i, h := range hosts {
		ours, err := fetch.CanonicalHost(h)
		theirs := chromium[i]
		if theirs == "ERROR" {
			require.Error(t, err, "%s: Chromium refuses it, the guard reads %q", h, ours)
			continue
		}
		require.NoError(t, err, "%s: Chromium reads %q", h, theirs)
		theirs = strings.TrimSuffix(strings.Trim(theirs, "[]"), ".")
		if a, err := netip.ParseAddr(theirs); err == nil {
			b, err := netip.ParseAddr(ours)
			require.NoError(t, err, "%s: Chromium reads the address %s, the guard the name %q", h, a, ours)
			require.Equal(t, a, b, "%s", h)
			continue
		}
		require.Equal(t, theirs, ours, "%s", h)
	}
}
