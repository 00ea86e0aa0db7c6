package fetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeResolver answers from a fixed table, the way a hostile DNS server
// would, and counts lookups.
type fakeResolver struct {
	names   map[string][]string
	lookups atomic.Int64
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.lookups.Add(1)
	list, ok := r.names[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]netip.Addr, len(list))
	for i, s := range list {
		out[i] = netip.MustParseAddr(s)
	}
	return out, nil
}

// countingServer is a loopback server on addr ("127.0.0.1:0") counting hits.
type countingServer struct {
	*httptest.Server
	hits atomic.Int64
}

func newCountingServer(t *testing.T, addr string, h http.HandlerFunc) *countingServer {
	t.Helper()
	s := &countingServer{}
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	s.Server = &httptest.Server{
		Listener: l,
		Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.hits.Add(1)
			h(w, r)
		})},
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func okHandler(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, "secret") }

func port(s *countingServer) string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

var loopbackOne = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

func TestLoopbackRefusedUnlessAllowed(t *testing.T) {
	t.Parallel()

	srv := newCountingServer(t, "127.0.0.1:0", okHandler)

	_, err := New(nil).Get(t.Context(), srv.URL)
	require.ErrorIs(t, err, ErrRefused)
	require.Zero(t, srv.hits.Load(), "a refused URL must not be fetched")

	resp, err := New(&Config{AllowCIDRs: loopbackOne}).Get(t.Context(), srv.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "secret", string(resp.Body))
	require.EqualValues(t, 1, srv.hits.Load())
}

func TestDialGuardResolvedNames(t *testing.T) {
	t.Parallel()

	srv := newCountingServer(t, "127.0.0.1:0", okHandler)
	res := &fakeResolver{names: map[string][]string{
		"loopback.test":       {"127.0.0.1"},
		"private.test":        {"10.0.0.1"},
		"metadata.test":       {"169.254.169.254"},
		"v6loopback.test":     {"::1"},
		"mapped.test":         {"::ffff:127.0.0.1"},
		"cgnat.test":          {"100.64.1.1"},
		"ula.test":            {"fd12:3456::1"},
		"public-private.test": {"8.8.8.8", "127.0.0.1"},
		"private-public.test": {"127.0.0.1", "8.8.8.8"},
	}}
	c := New(&Config{Resolver: res})
	for name, want := range map[string]string{
		"loopback.test":       "127.0.0.1",
		"private.test":        "10.0.0.1",
		"metadata.test":       "169.254.169.254",
		"v6loopback.test":     "::1",
		"mapped.test":         "127.0.0.1",
		"cgnat.test":          "100.64.1.1",
		"ula.test":            "fd12:3456::1",
		"public-private.test": "127.0.0.1",
		"private-public.test": "127.0.0.1",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// Nothing about the name itself is suspicious.
			u := "http://" + name + ":" + port(srv) + "/"
			require.NoError(t, CheckURL(u))
			_, err := c.Get(t.Context(), u)
			require.ErrorIs(t, err, ErrRefused)
			var re *RefusedError
			require.True(t, errors.As(err, &re))
			require.Equal(t, want, re.Addr.Unmap().String())
			require.Contains(t, err.Error(), name)
		})
	}
	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		_, err := c.Get(t.Context(), "http://nowhere.test/")
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrRefused)
		var dnsErr *net.DNSError
		require.True(t, errors.As(err, &dnsErr))
	})
	t.Cleanup(func() { require.Zero(t, srv.hits.Load(), "no refused name may reach the server") })
}

func TestDialGuardAllowedName(t *testing.T) {
	t.Parallel()

	srv := newCountingServer(t, "127.0.0.1:0", okHandler)
	res := &fakeResolver{names: map[string][]string{"app.test": {"127.0.0.1"}}}

	u := "http://app.test:" + port(srv) + "/x"
	_, err := New(&Config{Resolver: res}).Get(t.Context(), u)
	require.ErrorIs(t, err, ErrRefused)
	require.Zero(t, srv.hits.Load())

	resp, err := New(&Config{Resolver: res, AllowCIDRs: loopbackOne}).Get(t.Context(), u)
	require.NoError(t, err)
	require.Equal(t, "secret", string(resp.Body))
	require.Equal(t, u, resp.URL.String())
	require.EqualValues(t, 1, srv.hits.Load())
}

// TestDialGuardRebinding: a DNS answer that changes between one lookup and
// the next cannot sneak a private address in, because every connection is
// made to the address that was checked for it.
func TestDialGuardRebinding(t *testing.T) {
	t.Parallel()

	srv := newCountingServer(t, "127.0.0.1:0", okHandler)
	var calls atomic.Int64
	res := resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		if calls.Add(1) == 1 {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil // allowed below
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil // not allowed
	})
	c := New(&Config{Resolver: res, AllowCIDRs: loopbackOne})
	u := "http://rebind.test:" + port(srv) + "/"

	resp, err := c.Get(t.Context(), u)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	c.transport.CloseIdleConnections() // force a new dial, hence a new lookup

	_, err = c.Get(t.Context(), u)
	require.ErrorIs(t, err, ErrRefused)
	require.Contains(t, err.Error(), "127.0.0.2")
	require.EqualValues(t, 1, srv.hits.Load())
}

type resolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

// TestDialerControl checks the socket-level hook on its own: even a caller
// that bypasses DialContext's checks cannot connect to a refused address.
func TestDialerControl(t *testing.T) {
	t.Parallel()

	srv := newCountingServer(t, "127.0.0.1:0", okHandler)
	_, err := New(nil).dialer.DialContext(t.Context(), "tcp", srv.Listener.Addr().String())
	require.ErrorIs(t, err, ErrRefused)

	conn, err := New(&Config{AllowCIDRs: loopbackOne}).dialer.DialContext(t.Context(), "tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	require.NoError(t, conn.Close())

	_, err = New(nil).DialContext(t.Context(), "udp", "8.8.8.8:53")
	require.ErrorIs(t, err, ErrRefused)
}

func TestRedirects(t *testing.T) {
	t.Parallel()

	private := newCountingServer(t, "127.0.0.2:0", okHandler)
	res := &fakeResolver{names: map[string][]string{
		"inside.test": {"127.0.0.2"},
		"ok.test":     {"127.0.0.1"},
	}}
	var self string
	front := newCountingServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/to":
			http.Redirect(w, r, r.URL.Query().Get("u"), http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/chain/"):
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/chain/"))
			if n == 0 {
				_, _ = fmt.Fprint(w, "end")
				return
			}
			http.Redirect(w, r, fmt.Sprintf("%s/chain/%d", self, n-1), http.StatusMovedPermanently)
		case r.URL.Path == "/loop":
			http.Redirect(w, r, "/loop", http.StatusTemporaryRedirect)
		default:
			_, _ = fmt.Fprint(w, "front")
		}
	})
	self = front.URL
	c := New(&Config{Resolver: res, AllowCIDRs: loopbackOne, MaxRedirects: 3})

	refusedTargets := map[string]string{
		"PrivateAddress":   "http://10.0.0.1/",
		"Metadata":         "http://169.254.169.254/latest/meta-data/iam/",
		"MetadataName":     "http://metadata.google.internal/computeMetadata/v1/",
		"LoopbackNotAllow": private.URL + "/",
		"NameToLoopback":   "http://inside.test:" + port(private) + "/",
		"OddSpelling":      "http://0x7f.0.0.2:" + port(private) + "/",
		"IPv6Loopback":     "http://[::1]:" + port(private) + "/",
		"FileScheme":       "file:///etc/passwd",
		"Credentials":      "http://user:pw@ok.test:" + port(front) + "/",
	}
	for name, target := range refusedTargets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := c.Get(t.Context(), front.URL+"/to?u="+target)
			require.ErrorIs(t, err, ErrRefused, target)
			require.Regexp(t, "^refused: ", err.Error())
		})
	}

	t.Run("AllowedTarget", func(t *testing.T) {
		t.Parallel()
		resp, err := c.Get(t.Context(), front.URL+"/to?u=http://ok.test:"+port(front)+"/page")
		require.NoError(t, err)
		require.Equal(t, "front", string(resp.Body))
		require.Equal(t, "http://ok.test:"+port(front)+"/page", resp.URL.String())
		require.Equal(t, 1, resp.Redirects)
	})
	t.Run("ChainAtLimit", func(t *testing.T) {
		t.Parallel()
		resp, err := c.Get(t.Context(), front.URL+"/chain/3")
		require.NoError(t, err)
		require.Equal(t, "end", string(resp.Body))
		require.Equal(t, 3, resp.Redirects)
		require.Equal(t, front.URL+"/chain/0", resp.URL.String())
	})
	t.Run("ChainOverLimit", func(t *testing.T) {
		t.Parallel()
		_, err := c.Get(t.Context(), front.URL+"/chain/4")
		require.ErrorIs(t, err, ErrTooManyRedirects)
		require.NotErrorIs(t, err, ErrRefused)
	})
	t.Run("Loop", func(t *testing.T) {
		t.Parallel()
		_, err := c.Get(t.Context(), front.URL+"/loop")
		require.ErrorIs(t, err, ErrTooManyRedirects)
	})
	t.Cleanup(func() { require.Zero(t, private.hits.Load(), "a refused redirect target was fetched") })
}

func TestBodyCap(t *testing.T) {
	t.Parallel()

	big := strings.Repeat("0123456789", 300_000) // 3 MB
	srv := newCountingServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/small" {
			_, _ = fmt.Fprint(w, "small")
			return
		}
		_, _ = fmt.Fprint(w, big)
	})
	c := New(&Config{AllowCIDRs: loopbackOne, MaxBodyBytes: 1 << 20})

	resp, err := c.Get(t.Context(), srv.URL+"/big")
	require.NoError(t, err)
	require.True(t, resp.Truncated)
	require.Len(t, resp.Body, 1<<20)
	require.Equal(t, big[:1<<20], string(resp.Body))

	resp, err = c.Get(t.Context(), srv.URL+"/small")
	require.NoError(t, err)
	require.False(t, resp.Truncated)
	require.Equal(t, "small", string(resp.Body))

	// The default cap is 2 MiB.
	resp, err = New(&Config{AllowCIDRs: loopbackOne}).Get(t.Context(), srv.URL+"/big")
	require.NoError(t, err)
	require.True(t, resp.Truncated)
	require.Len(t, resp.Body, 2<<20)
}

func TestStatusIsData(t *testing.T) {
	t.Parallel()

	srv := newCountingServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "tester/1", r.Header.Get("User-Agent"))
		http.Error(w, "gone", http.StatusNotFound)
	})
	resp, err := New(&Config{AllowCIDRs: loopbackOne, UserAgent: "tester/1"}).Get(t.Context(), srv.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, "gone\n", string(resp.Body))
}

func TestDoPostAndDefaultUserAgent(t *testing.T) {
	t.Parallel()

	srv := newCountingServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "%s %s", r.Method, r.Header.Get("User-Agent"))
	})
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	require.NoError(t, err)
	resp, err := New(&Config{AllowCIDRs: loopbackOne}).Do(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, "POST "+DefaultUserAgent, string(resp.Body))

	req, err = http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
	require.NoError(t, err)
	_, err = New(nil).Do(t.Context(), req)
	require.ErrorIs(t, err, ErrRefused)
}

func TestTimeout(t *testing.T) {
	t.Parallel()

	release := make(chan struct{})
	srv := newCountingServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) })

	c := New(&Config{AllowCIDRs: loopbackOne, Timeout: 200 * time.Millisecond})
	_, err := c.Get(t.Context(), srv.URL)
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrRefused)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "want a timeout, got %v", err)

	// The caller's context bounds it too.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = New(&Config{AllowCIDRs: loopbackOne}).Get(ctx, srv.URL)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestSpecialUseNamesNotLooked refuses special-use and private names by
// name: the resolver, which here would answer a public address, is never
// asked, neither for the URL nor for a redirect to one.
func TestSpecialUseNamesNotLooked(t *testing.T) {
	t.Parallel()
	names := []string{"localhost.localdomain", "nas.local", "db.internal", "metadata.google.internal", "router.home.arpa", "wiki.intranet", "router"}
	res := &fakeResolver{names: map[string][]string{}}
	for _, n := range names {
		res.names[n] = []string{"93.184.215.14"}
	}
	c := New(&Config{Resolver: res})
	for _, n := range names {
		_, err := c.Get(t.Context(), "http://"+n+"/")
		require.ErrorIs(t, err, ErrRefused, n)
	}
	// A public page redirecting to one of them.
	srv := newCountingServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://nas.local/admin", http.StatusFound)
	})
	_, err := New(&Config{Resolver: res, AllowCIDRs: loopbackOne}).Get(t.Context(), srv.URL)
	require.ErrorIs(t, err, ErrRefused)
	require.Zero(t, res.lookups.Load(), "a special-use name was looked up")
}
