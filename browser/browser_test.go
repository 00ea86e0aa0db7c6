package browser

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/fetch"
)

// The package's tests share one browser: starting Chromium is the slow part
// and the machine is shared. TestMain closes it and checks that no Chromium
// process and no profile directory is left behind.
var testPool *Pool

// allowed is the one loopback address the tests' guard lets through;
// 127.0.0.2 stands for "a private address" and must never be reached.
var allowed = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

// testResolver makes names resolve to the two loopback addresses.
type testResolver struct{}

func (testResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	switch host {
	case "app.test":
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	case "inside.test":
		return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestMain(m *testing.M) {
	code := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		fc := fetch.New(&fetch.Config{AllowCIDRs: allowed, Resolver: testResolver{}})
		var err error
		testPool, err = New(ctx, &Config{
			Fetch:         fc,
			MaxPages:      2,
			RenderTimeout: 10 * time.Second,
			IdleWait:      2 * time.Second,
			Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: start the test browser: %v\n(the browser tests need the system Chromium: apt-get update && apt-get install -y chromium)\n", err)
			return 1
		}
		profile, pid := testPool.ProfileDir(), testPool.PID()
		code := m.Run()
		if err := testPool.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: close the test browser: %v\n", err)
			return 1
		}
		if left := chromiumProcesses(profile); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: Chromium processes left behind after Close: %v\n", left)
			return 1
		}
		if processAlive(pid) {
			fmt.Fprintf(os.Stderr, "FAIL: Chromium (pid %d) still runs after Close\n", pid)
			return 1
		}
		if _, err := os.Stat(profile); !os.IsNotExist(err) {
			fmt.Fprintf(os.Stderr, "FAIL: profile dir %s left behind (%v)\n", profile, err)
			return 1
		}
		return code
	}()
	os.Exit(code)
}

// chromiumProcesses lists the pids whose command line names profile.
func chromiumProcesses(profile string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), profile) {
			out = append(out, strings.Split(f, "/")[2])
		}
	}
	return out
}

// processAlive reports whether pid is a running (not zombie) process.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b))
	return len(fields) > 2 && fields[2] != "Z"
}

// server is a test server on a chosen loopback address counting requests.
type server struct {
	*httptest.Server
	hits atomic.Int64
}

func newServer(t *testing.T, addr string, h http.HandlerFunc) *server {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	s := &server{}
	s.Server = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	})}}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *server) port() string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

func html(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.WriteString(w, body)
}

func TestRenderJavaScript(t *testing.T) {
	t.Parallel()

	srv := newServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/data":
			_, _ = io.WriteString(w, "from the API")
		default:
			html(w, `<!doctype html><html><head></head><body><div id="root"></div>
<script>
document.title = "Rendered by script";
fetch("/data").then(r => r.text()).then(t => { document.getElementById("root").textContent = t; });
</script></body></html>`)
		}
	})

	got, final, err := testPool.Render(t.Context(), srv.URL+"/page")
	require.NoError(t, err)
	require.Contains(t, got, "<title>Rendered by script</title>")
	require.Contains(t, got, `<div id="root">from the API</div>`)
	require.Equal(t, srv.URL+"/page", final)
}

func TestRenderFollowsRedirects(t *testing.T) {
	t.Parallel()

	srv := newServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/old":
			http.Redirect(w, r, "http://app.test:"+r.Host[strings.LastIndex(r.Host, ":")+1:]+"/new", http.StatusMovedPermanently)
		case "/new":
			html(w, `<title>new</title><script>history.replaceState(null, "", "/newer")</script>`)
		}
	})

	got, final, err := testPool.Render(t.Context(), srv.URL+"/old")
	require.NoError(t, err)
	require.Contains(t, got, "<title>new</title>")
	require.Equal(t, "http://app.test:"+srv.port()+"/newer", final)
}

// TestRenderGuardsScripts: a page on an allowed address whose scripts, images
// and sockets aim at a private address reach nothing, while the same calls to
// the allowed address work.
func TestRenderGuardsScripts(t *testing.T) {
	t.Parallel()

	private := newServer(t, "127.0.0.2:0", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		_, _ = io.WriteString(w, "SECRET")
	})
	pp := private.port()
	page := fmt.Sprintf(`<!doctype html><title>start</title>
<img src="http://127.0.0.2:%[1]s/img.png">
<iframe src="http://inside.test:%[1]s/frame"></iframe>
<script>
const probe = u => fetch(u).then(r => r.text()).catch(() => "blocked");
const ws = u => new Promise(res => {
  try {
    const s = new WebSocket(u);
    s.onopen = () => res("open");
    s.onerror = () => res("blocked");
  } catch (e) { res("blocked"); }
});
Promise.all([
  probe("/ok"),
  probe("http://127.0.0.2:%[1]s/a"),
  probe("http://inside.test:%[1]s/b"),
  probe("http://[::ffff:127.0.0.2]:%[1]s/c"),
  probe("http://2130706434:%[1]s/d"),
  probe("http://localhost:%[1]s/e"),
  ws("ws://127.0.0.2:%[1]s/ws"),
]).then(r => { document.title = r.join(","); });
</script>`, pp)
	srv := newServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		html(w, page)
	})

	got, _, err := testPool.Render(t.Context(), srv.URL+"/")
	require.NoError(t, err)
	require.Contains(t, got, "<title>ok,blocked,blocked,blocked,blocked,blocked,blocked</title>")
	require.Zero(t, private.hits.Load(), "the page reached a private address")
}

func TestRenderRefusesNavigation(t *testing.T) {
	t.Parallel()

	private := newServer(t, "127.0.0.2:0", func(w http.ResponseWriter, _ *http.Request) {
		html(w, "<title>SECRET</title>")
	})
	srv := newServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, private.URL+"/", http.StatusFound)
		case "/js-redirect":
			html(w, fmt.Sprintf(`<title>leaving</title><script>location.href = "http://inside.test:%s/";</script>`, private.port()))
		}
	})

	for name, u := range map[string]string{
		"Direct":        private.URL + "/",
		"DirectName":    "http://inside.test:" + private.port() + "/",
		"HTTPRedirect":  srv.URL + "/redirect",
		"PrivateScheme": "file:///etc/passwd",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, _, err := testPool.Render(t.Context(), u)
			require.Error(t, err)
			require.NotContains(t, got, "SECRET")
		})
	}
	t.Run("ScriptRedirect", func(t *testing.T) {
		t.Parallel()
		got, _, err := testPool.Render(t.Context(), srv.URL+"/js-redirect")
		require.Error(t, err)
		// The refused navigation either ends the load with an error page
		// or replaces the target while Render waits for it.
		require.Regexp(t, "failed to load|navigated or closed", err.Error())
		require.NotContains(t, got, "SECRET")
	})
	t.Cleanup(func() { require.Zero(t, private.hits.Load(), "a refused navigation reached the private server") })
}

func TestRenderTimeoutFreesThePage(t *testing.T) {
	t.Parallel()

	release := make(chan struct{})
	srv := newServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			html(w, "<title>fine</title>")
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)

	// More hung renders than pages: each must give its page back.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, _, err := testPool.Render(ctx, srv.URL+"/hang")
			require.Error(t, err)
		})
	}
	wg.Wait()

	got, _, err := testPool.Render(t.Context(), srv.URL+"/ok")
	require.NoError(t, err)
	require.Contains(t, got, "<title>fine</title>")
}

// TestRenderBoundsPages renders more pages at once than the pool holds,
// each answered only when the test lets it: the pages in flight are never
// more than MaxPages. The test lets one answer go each time the pool's
// pages are all waiting, then the rest.
func TestRenderBoundsPages(t *testing.T) {
	t.Parallel()

	const renders = 5
	var inFlight, most atomic.Int64
	arrived := make(chan struct{}, renders)
	release := make(chan struct{})
	srv := newServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/favicon.ico" {
			http.NotFound(w, r)
			return
		}
		n := inFlight.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		arrived <- struct{}{}
		<-release
		inFlight.Add(-1)
		html(w, "<title>slow</title>")
	})

	var wg sync.WaitGroup
	for i := range renders {
		wg.Go(func() {
			_, _, err := testPool.Render(t.Context(), fmt.Sprintf("%s/p%d", srv.URL, i))
			require.NoError(t, err)
		})
	}
	// Each page arrived takes the place of one let go.
	pages := testPool.cfg.MaxPages
	for range pages {
		<-arrived
	}
	for range renders - pages {
		release <- struct{}{}
		<-arrived
	}
	for range pages {
		release <- struct{}{}
	}
	wg.Wait()
	require.LessOrEqual(t, most.Load(), int64(testPool.cfg.MaxPages))
	require.GreaterOrEqual(t, most.Load(), int64(1))
}

// TestProxyTunnel drives the proxy's CONNECT path with a Go client, the way
// Chromium uses it for https: allowed targets are tunnelled, others get 403.
func TestProxyTunnel(t *testing.T) {
	t.Parallel()

	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "over tls")
	}))
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)

	var privateHits atomic.Int64
	l, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	privateSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		privateHits.Add(1)
	}))
	privateSrv.Listener = l
	privateSrv.StartTLS()
	t.Cleanup(privateSrv.Close)

	p, err := startProxy(fetch.New(&fetch.Config{AllowCIDRs: allowed}), 1<<20, 5*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	proxyURL, err := url.Parse(p.URL())
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(proxyURL),
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test certificates
	}}
	t.Cleanup(client.CloseIdleConnections)

	resp, err := client.Get(tlsSrv.URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, "over tls", string(body))

	_, err = client.Get(privateSrv.URL)
	require.Error(t, err)
	require.Contains(t, err.Error(), "Forbidden")
	require.Zero(t, privateHits.Load())

	// Plain http through the forward path: a refused target is a dropped
	// connection, not a made-up page.
	_, err = client.Get("http://169.254.169.254/latest/meta-data/")
	require.Error(t, err)
}

func TestNewWithoutChromium(t *testing.T) {
	t.Parallel()

	_, err := New(t.Context(), &Config{Fetch: fetch.New(nil), Bin: "/nonexistent/chromium"})
	require.ErrorIs(t, err, ErrNoChromium)
	require.Contains(t, err.Error(), "apt-get install -y chromium")

	_, err = New(t.Context(), &Config{})
	require.Error(t, err)
}
