package browser

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/x402d/x402d/fetch"
	"github.com/x402d/x402d/internal/startstop"
)

// proxy is the HTTP proxy Chromium sends all its traffic to. Plain http
// requests are forwarded through the fetch guard's transport; https and
// WebSocket traffic arrives as CONNECT and is tunnelled over a connection
// the guard dialled. So every address a page (or its JavaScript) reaches
// has passed the same check as a static fetch.
type proxy struct {
	fetch     *fetch.Client
	transport http.RoundTripper
	maxBytes  int64
	maxTunnel time.Duration
	logger    *slog.Logger

	ln  net.Listener
	srv *http.Server
	// base is the span of the server's goroutine and of every request it
	// serves, tunnels included: Close waits for them.
	base startstop.Base

	mu      sync.Mutex
	tunnels map[net.Conn]struct{}
	closed  bool
}

// startProxy listens on a loopback port and serves the proxy.
func startProxy(fc *fetch.Client, maxBytes int64, maxTunnel time.Duration, logger *slog.Logger) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the browser proxy: %w", err)
	}
	p := &proxy{
		fetch:     fc,
		transport: fc.Transport(),
		maxBytes:  maxBytes,
		maxTunnel: maxTunnel,
		logger:    logger,
		ln:        ln,
		tunnels:   map[net.Conn]struct{}{},
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	p.base.Start(context.Background(), func(context.Context) { _ = p.srv.Serve(ln) })
	return p, nil
}

// URL is the proxy's address for Chromium's --proxy-server.
func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Close stops the proxy and every tunnel it holds, and waits for the
// requests it was serving.
func (p *proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.tunnels {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.srv.Close()
	p.base.Stop()
	return err
}

// hopHeaders are the hop-by-hop headers a proxy does not forward.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for name := range strings.SplitSeq(f, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Counted in the proxy's span, and ended with it (Close).
	ctx, leave, err := p.base.Enter(r.Context())
	if err != nil {
		p.fail(w)
		return
	}
	defer leave()
	r = r.WithContext(ctx)
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	if !r.URL.IsAbs() {
		http.Error(w, "this is a forward proxy", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	removeHopHeaders(out.Header)
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		p.logger.DebugContext(r.Context(), "browser proxy: request failed", "url", r.URL.Redacted(), "err", err)
		p.fail(w)
		return
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	n, err := io.Copy(w, io.LimitReader(resp.Body, p.maxBytes))
	if err == nil && n == p.maxBytes {
		var one [1]byte
		if m, _ := resp.Body.Read(one[:]); m > 0 {
			// Over the cap: end the response abruptly rather than
			// pass a silently shortened body on as whole.
			panic(http.ErrAbortHandler)
		}
	}
}

// fail drops the client connection without an answer, so the browser sees a
// network error (as for an unreachable host) and not a page the proxy made
// up under the site's URL.
func (p *proxy) fail(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// tunnel serves CONNECT: dial the target through the guard, answer 200, and
// copy bytes both ways until either side closes or maxTunnel passes.
func (p *proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), p.maxTunnel)
	defer cancel()
	upstream, err := p.fetch.DialContext(ctx, "tcp", r.Host)
	if err != nil {
		p.logger.DebugContext(r.Context(), "browser proxy: CONNECT refused", "host", r.Host, "err", err)
		status := http.StatusBadGateway
		if errors.Is(err, fetch.ErrRefused) {
			status = http.StatusForbidden
		}
		http.Error(w, "proxy: "+err.Error(), status)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = upstream.Close()
		http.Error(w, "proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	if !p.track(client, upstream) {
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	defer p.untrack(client, upstream)
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
		return
	}
	stop := time.AfterFunc(p.maxTunnel, func() {
		_ = client.Close()
		_ = upstream.Close()
	})
	defer stop.Stop()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(upstream, buf.Reader) // buffered bytes first, then the socket
		closeWrite(upstream)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, io.LimitReader(upstream, p.maxBytes))
		closeWrite(client)
		done <- struct{}{}
	}()
	<-done
	<-done
}

// closeWrite half-closes c when it can, so the other direction may finish.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

func (p *proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range conns {
		p.tunnels[c] = struct{}{}
	}
	return true
}

func (p *proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.tunnels, c)
		_ = c.Close()
	}
}
