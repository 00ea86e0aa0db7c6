package dbtest

import (
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Proxy is a TCP proxy on loopback in front of the tests' Postgres, which a
// test cuts as a failover does to the service (Cut: every connection
// through it closed at once, new ones closed as soon as they open) or hangs
// as a primary that vanished from the network does (Hang: nothing goes
// through, nothing is closed), until Restore.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	hung  bool
	flow  *sync.Cond // signaled when hung ends
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy starts a Proxy in front of the server of db's URL, closed when t
// ends.
func NewProxy(t testing.TB, db *DB) *Proxy {
	t.Helper()
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &Proxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	p.flow = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.Restore()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// URL returns db's URL through the proxy.
func (p *Proxy) URL(db *DB) string {
	u, err := url.Parse(db.URL)
	if err != nil {
		panic(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// Cut closes every connection through the proxy, and every one opened
// until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	p.flow.Broadcast()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// Hang stops every byte through the proxy, on the connections open and on
// those opened later, until Restore: a statement sent waits for an answer
// that does not come.
func (p *Proxy) Hang() {
	p.mu.Lock()
	p.hung = true
	p.mu.Unlock()
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.down, p.hung = false, false
	p.flow.Broadcast()
	p.mu.Unlock()
}

// wait returns once the proxy is not hung; false when it is cut.
func (p *Proxy) wait() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.hung && !p.down {
		p.flow.Wait()
	}
	return !p.down
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

// serve forwards client to the server until either side closes or the
// proxy is cut.
func (p *Proxy) serve(client net.Conn) {
	if !p.wait() {
		_ = client.Close()
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer func() {
			_ = dst.Close()
			_ = src.Close()
		}()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && (!p.wait() || write(dst, buf[:n]) != nil) {
				return
			}
			if err != nil {
				return
			}
		}
	}
	wg.Go(func() { pipe(server, client) })
	wg.Go(func() { pipe(client, server) })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

// write writes all of b to c.
func write(c net.Conn, b []byte) error {
	_, err := c.Write(b)
	return err
}
