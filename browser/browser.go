// Package browser renders pages whose content needs JavaScript, in the
// system's headless Chromium driven by go-rod.
//
// It uses the Chromium installed on the machine (/usr/bin/chromium, found
// with exec.LookPath) and never downloads one. All of the browser's traffic
// goes through a proxy the pool runs in-process, which dials through the
// fetch guard: a page, its subresources and its scripts reach exactly the
// addresses the guarded client would, and nothing private.
//
// A Pool is one browser process with a bounded number of pages open at a
// time. Each render gets its own incognito context (no cookies or storage
// shared between renders) that is disposed of when the render ends, on every
// path.
package browser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/launcher/flags"
	"github.com/go-rod/rod/lib/proto"

	"github.com/x402d/x402d/fetch"
)

// ErrNoChromium is returned by New when no Chromium binary is installed.
var ErrNoChromium = errors.New("chromium not found: install Chromium: apt-get install -y chromium")

// Config configures a Pool.
type Config struct {
	// Fetch is the guarded client all page traffic goes through. Required.
	Fetch *fetch.Client
	// Bin is the Chromium binary. Defaults to exec.LookPath("chromium").
	Bin string
	// MaxPages bounds how many pages render at once. Defaults to 2.
	MaxPages int
	// RenderTimeout bounds one Render, from waiting for a page to reading
	// its HTML. Defaults to 15 s.
	RenderTimeout time.Duration
	// IdleWait is how long Render waits, after the load event, for the
	// page's requests to settle before it reads the DOM. Defaults to 3 s
	// (and never more than what is left of RenderTimeout).
	IdleWait time.Duration
	// MaxResponseBytes caps each response the proxy passes to the browser.
	// Defaults to 16 MiB.
	MaxResponseBytes int64
	// Logger receives the pool's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// Pool is one headless Chromium rendering at most Config.MaxPages pages at a
// time. It is safe for concurrent use.
type Pool struct {
	cfg        Config
	proxy      *proxy
	launcher   *launcher.Launcher
	browser    *rod.Browser
	profileDir string
	slots      chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// chromiumFlags are the Chromium switches the pool sets, besides rod's
// defaults, the proxy and the user data dir.
func chromiumFlags() []flags.Flag {
	return []flags.Flag{
		"headless", "no-sandbox", "disable-gpu", "disable-quic", "no-first-run",
		"disable-background-networking", "disable-component-update", "disable-sync",
		"disable-extensions", "disable-default-apps", "mute-audio", "no-pings",
		"disable-dev-shm-usage",
	}
}

// New starts Chromium and the proxy in front of it. ctx bounds the start
// only. The caller must Close the pool.
func New(ctx context.Context, config *Config) (*Pool, error) {
	cfg := *config
	if cfg.Fetch == nil {
		return nil, errors.New("browser: Config.Fetch is required")
	}
	if cfg.MaxPages <= 0 {
		cfg.MaxPages = 2
	}
	if cfg.RenderTimeout <= 0 {
		cfg.RenderTimeout = 15 * time.Second
	}
	if cfg.IdleWait <= 0 {
		cfg.IdleWait = 3 * time.Second
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = 16 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Bin == "" {
		bin, err := exec.LookPath("chromium")
		if err != nil {
			return nil, fmt.Errorf("%w (%v)", ErrNoChromium, err)
		}
		cfg.Bin = bin
	} else if _, err := os.Stat(cfg.Bin); err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrNoChromium, err)
	}

	p := &Pool{cfg: cfg, slots: make(chan struct{}, cfg.MaxPages)}
	var err error
	p.proxy, err = startProxy(cfg.Fetch, cfg.MaxResponseBytes, 2*cfg.RenderTimeout, cfg.Logger)
	if err != nil {
		return nil, err
	}
	p.profileDir, err = os.MkdirTemp("", "x402d-chromium-")
	if err != nil {
		_ = p.proxy.Close()
		return nil, fmt.Errorf("create chromium profile dir: %w", err)
	}

	// launcher.New only describes a process; with Bin set it never
	// downloads a browser.
	l := launcher.New().Context(ctx).Bin(cfg.Bin).UserDataDir(p.profileDir).Leakless(true)
	for _, f := range chromiumFlags() {
		l.Set(f)
	}
	l.Set("proxy-server", p.proxy.URL())
	// Send loopback through the proxy too: Chromium bypasses proxies
	// for loopback by default, and loopback is what the guard refuses.
	l.Set("proxy-bypass-list", "<-loopback>")
	// WebRTC's UDP does not go through proxies: allow none of it.
	l.Set("force-webrtc-ip-handling-policy", "disable_non_proxied_udp")
	p.launcher = l

	controlURL, err := l.Launch()
	if err != nil {
		p.cleanup()
		return nil, fmt.Errorf("launch chromium %s: %w", cfg.Bin, err)
	}
	b := rod.New().ControlURL(controlURL).NoDefaultDevice()
	if err := b.Connect(); err != nil {
		p.cleanup()
		return nil, fmt.Errorf("connect to chromium: %w", err)
	}
	p.browser = b
	if err := (proto.BrowserSetDownloadBehavior{Behavior: proto.BrowserSetDownloadBehaviorBehaviorDeny}).Call(b); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("deny downloads: %w", err)
	}
	return p, nil
}

// Render loads rawURL in a fresh incognito page, waits for the load event
// and for its requests to settle (at most Config.IdleWait), and returns the
// DOM serialized as HTML with the URL the page ended on. The whole call is
// bounded by Config.RenderTimeout and by ctx. A navigation the guard refused
// or that failed on the network is an error.
func (p *Pool) Render(ctx context.Context, rawURL string) (html, finalURL string, err error) {
	if err := p.cfg.Fetch.CheckURL(rawURL); err != nil {
		return "", "", err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RenderTimeout)
	defer cancel()

	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return "", "", fmt.Errorf("wait for a browser page: %w", ctx.Err())
	}
	defer func() { <-p.slots }()

	incognito, err := p.browser.Incognito()
	if err != nil {
		return "", "", fmt.Errorf("create browser context: %w", err)
	}
	defer func() {
		// Disposing of the context closes its pages, popups included.
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := incognito.Context(closeCtx).Close(); err != nil {
			p.cfg.Logger.Warn("browser: dispose of render context", "err", err)
		}
	}()

	page, err := incognito.Context(ctx).Page(proto.TargetCreateTarget{})
	if err != nil {
		return "", "", fmt.Errorf("open page: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = page.Context(closeCtx).Close()
	}()

	// Dismiss alert/confirm/prompt: they would block the page's scripts.
	go page.EachEvent(func(*proto.PageJavascriptDialogOpening) {
		_ = proto.PageHandleJavaScriptDialog{Accept: false}.Call(page)
	})()

	idleCtx, idleCancel := context.WithTimeout(ctx, p.cfg.IdleWait)
	defer idleCancel()
	waitIdle := page.Context(idleCtx).WaitRequestIdle(300*time.Millisecond, nil, nil, nil)

	if err := page.Navigate(rawURL); err != nil {
		return "", "", fmt.Errorf("navigate to %s: %w", rawURL, err)
	}
	if err := page.WaitLoad(); err != nil {
		return "", "", fmt.Errorf("wait for load of %s: %w", rawURL, err)
	}
	waitIdle() // returns at idle or when IdleWait is over, both fine

	// The document's own URL, not the target's: a navigation that failed
	// (a refused redirect, a script sending the page to a private address)
	// leaves the target URL at the attempted address over an error page.
	res, err := page.Eval(`() => document.URL`)
	if err != nil {
		return "", "", fmt.Errorf("read URL of %s: %w", rawURL, err)
	}
	finalURL = res.Value.Str()
	if !strings.HasPrefix(finalURL, "http:") && !strings.HasPrefix(finalURL, "https:") {
		return "", "", fmt.Errorf("render %s: the page failed to load (%s)", rawURL, finalURL)
	}
	html, err = page.HTML()
	if err != nil {
		return "", "", fmt.Errorf("read DOM of %s: %w", rawURL, err)
	}
	return html, finalURL, nil
}

// Close closes the browser, waits for its process to exit (killing it if it
// does not), stops the proxy and removes the profile directory. It is safe to
// call more than once.
func (p *Pool) Close() error {
	p.closeOnce.Do(func() {
		if p.browser != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = p.browser.Context(ctx).Close()
			cancel()
		}
		p.cleanup()
	})
	return p.closeErr
}

// cleanup waits for the Chromium process to exit, kills it after a grace
// period, stops the proxy and removes the profile.
func (p *Pool) cleanup() {
	if p.launcher != nil && p.launcher.PID() != 0 {
		exited := make(chan struct{})
		go func() {
			p.launcher.Cleanup() // waits for exit, removes the profile
			close(exited)
		}()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			p.launcher.Kill()
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				p.closeErr = errors.New("browser: chromium did not exit after kill")
			}
		}
	}
	if p.proxy != nil {
		_ = p.proxy.Close()
	}
	if p.profileDir != "" {
		if err := os.RemoveAll(p.profileDir); err != nil && p.closeErr == nil {
			p.closeErr = fmt.Errorf("remove chromium profile: %w", err)
		}
	}
}

// ProfileDir is the pool's Chromium user data directory, removed by Close.
func (p *Pool) ProfileDir() string { return p.profileDir }

// PID is the Chromium browser process id.
func (p *Pool) PID() int { return p.launcher.PID() }
