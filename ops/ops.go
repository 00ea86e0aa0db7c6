// Package ops is the operators' dashboard: server-rendered pages under /ops
// (overview, paid calls with their event timelines, the index's crawl state)
// and River's own job dashboard (riverqueue.com/riverui) under /ops/jobs,
// all behind the operator token.
//
// An operator authenticates with "Authorization: Bearer <token>", or with the
// login form at /ops/login, which sets an HttpOnly, SameSite=Strict session
// cookie signed with a key derived from the token. Tokens are compared in
// constant time. The login form carries an anti-forgery value, and every
// unsafe request authenticated by cookie must come from the dashboard's own
// origin. Without a token configured the dashboard is not mounted at all.
//
// The pages work without JavaScript; a small script refreshes their content
// in place every few seconds when it runs.
package ops

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math/big"
	"net/http"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/metrics"
)

//go:embed templates static
var files embed.FS

// JobsPrefix is where River UI is mounted.
const JobsPrefix = "/ops/jobs"

// Config configures the dashboard.
type Config struct {
	// Token is the operator token (OPS_TOKEN). Empty disables the
	// dashboard: Mount adds no route.
	Token string
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// River is the client River UI lists, retries and cancels jobs with (an
	// insert-only client will do). Required.
	River *river.Client[pgx.Tx]
	// Logger receives the dashboard's and River UI's logs. Required.
	Logger *slog.Logger
	// Refresh is how often the pages refresh their content in place when
	// JavaScript runs. Defaults to 5 s.
	Refresh time.Duration
	// SessionTTL is how long a login lasts. Defaults to 12 hours.
	SessionTTL time.Duration
	// Clock is the time of the sessions, the throttle of wrong tokens and
	// the pages. Defaults to clock.Real().
	Clock clock.Clock
	// Relayer, when set, reports the settlement relayer's state on each
	// chain for the overview: its balance, and whether settlements wait
	// for the base fee.
	Relayer func(ctx context.Context) ([]RelayerChain, error)
	// RelayerLowWei is the balance under which the overview warns. Nil:
	// never.
	RelayerLowWei *big.Int
	// TrustedProxies are the reverse proxies whose X-Forwarded-Proto says
	// whether a request came over HTTPS (the session cookie's Secure
	// flag); any other peer's is ignored. Empty: none.
	TrustedProxies []netip.Prefix
	// Metrics counts the operator credentials refused; nil counts nothing.
	Metrics *metrics.Metrics
	// ServeMetrics serves Metrics at /metrics, to operators only (bearer
	// token or session), as the Prometheus text format.
	ServeMetrics bool
}

// RelayerChain is the relayer's state on one chain.
type RelayerChain struct {
	// Network is the chain's CAIP-2 id.
	Network string
	// BalanceWei is the relayer's native balance.
	BalanceWei *big.Int
	// BaseFeeWei is the head block's base fee.
	BaseFeeWei *big.Int
	// MaxFeeWei is SETTLEMENT_MAX_FEE_GWEI in wei (nil: no cap).
	MaxFeeWei *big.Int
	// FeeWait is set while the base fee is above MaxFeeWei: settlements
	// wait.
	FeeWait bool
}

// dashboard serves the pages.
type dashboard struct {
	cfg   Config
	auth  *auth
	pages map[string]*template.Template
}

// Mount adds the dashboard's routes to e: /ops, /ops/login, /ops/logout,
// /ops/calls, /ops/calls/:id, /ops/index, /ops/static/* and River UI under
// /ops/jobs, and /metrics when config.ServeMetrics. With an empty config.Token it
// adds nothing and the paths answer 404. A token shorter than
// MinTokenBytes is refused.
func Mount(e *echo.Echo, config *Config) error {
	cfg := *config
	if cfg.Token == "" {
		switch {
		case cfg.Logger == nil:
		case cfg.ServeMetrics && cfg.Metrics != nil:
			cfg.Logger.Info("operator dashboard and /metrics disabled: OPS_TOKEN is not set (METRICS_ADDR would serve /metrics on a listener of its own)")
		default:
			cfg.Logger.Info("operator dashboard disabled: OPS_TOKEN is not set")
		}
		return nil
	}
	if len(cfg.Token) < MinTokenBytes {
		return fmt.Errorf("ops: the operator token has %d bytes, fewer than %d", len(cfg.Token), MinTokenBytes)
	}
	if cfg.Pool == nil || cfg.River == nil || cfg.Logger == nil {
		return errors.New("ops: Pool, River and Logger are required")
	}
	cfg.Refresh = cmp.Or(cfg.Refresh, 5*time.Second)
	cfg.SessionTTL = cmp.Or(cfg.SessionTTL, 12*time.Hour)
	cfg.Clock = clock.Or(cfg.Clock)
	d := &dashboard{cfg: cfg, auth: newAuth(cfg.Token, cfg.SessionTTL, cfg.Clock, cfg.TrustedProxies, cfg.Metrics)}
	var err error
	if d.pages, err = parsePages(); err != nil {
		return err
	}

	jobs, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(cfg.River, nil),
		Logger:    cfg.Logger,
		Prefix:    JobsPrefix,
	})
	if err != nil {
		return fmt.Errorf("ops: river ui: %w", err)
	}

	static, err := fs.Sub(files, "static")
	if err != nil {
		return fmt.Errorf("ops: static files: %w", err)
	}
	e.GET("/ops/static/*", echo.WrapHandler(http.StripPrefix("/ops/static/", staticHandler(static))))
	e.GET(loginPath, d.loginForm, noStore)
	e.POST(loginPath, d.login, noStore)

	g := e.Group("/ops", noStore, d.auth.require)
	g.GET("", d.overview, pageHeaders)
	g.GET("/", d.overview, pageHeaders)
	g.GET("/calls", d.calls, pageHeaders)
	g.GET("/calls/:id", d.call, pageHeaders)
	g.GET("/index", d.index, pageHeaders)
	g.POST("/logout", d.logout)
	jobsHandler := echo.WrapHandler(jobs)
	g.Any("/jobs", jobsHandler, frameDeny)
	g.Any("/jobs/*", jobsHandler, frameDeny)
	if cfg.ServeMetrics && cfg.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(cfg.Metrics.Handler()), noStore, d.auth.require)
	}
	return nil
}

// noStore keeps operator pages and answers out of caches.
func noStore(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
		return next(c)
	}
}

// pageHeaders sets the headers of the dashboard's own pages: a strict
// content security policy (scripts and styles from the dashboard only).
func pageHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set(echo.HeaderXContentTypeOptions, "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		return next(c)
	}
}

// frameDeny keeps River UI out of other sites' frames.
func frameDeny(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set(echo.HeaderXFrameOptions, "DENY")
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		return next(c)
	}
}

func staticHandler(static fs.FS) http.Handler {
	files := http.FileServerFS(static)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(echo.HeaderCacheControl, "public, max-age=300")
		w.Header().Set(echo.HeaderXContentTypeOptions, "nosniff")
		files.ServeHTTP(w, r)
	})
}

// loginForm is GET /ops/login.
func (d *dashboard) loginForm(c echo.Context) error {
	return d.renderLogin(c, http.StatusOK, c.QueryParam("next"), "")
}

func (d *dashboard) renderLogin(c echo.Context, status int, next, problem string) error {
	csrf := newCSRF()
	c.SetCookie(&http.Cookie{
		Name: csrfCookie, Value: csrf, Path: loginPath, MaxAge: 3600,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: d.auth.secure(c.Request()),
	})
	c.Response().Header().Set(echo.HeaderXFrameOptions, "DENY")
	return d.render(c, status, "login", map[string]any{
		"Title": "Log in", "CSRF": csrf, "Next": safeNext(next), "Problem": problem,
	})
}

// login is POST /ops/login: the form's anti-forgery value must match its
// cookie, the request must come from this origin, and the token must be
// right; then the session cookie is set.
func (d *dashboard) login(c echo.Context) error {
	r := c.Request()
	if err := d.auth.origin.Check(r); err != nil {
		return echo.NewHTTPError(http.StatusForbidden, "cross-origin login refused")
	}
	ck, err := r.Cookie(csrfCookie)
	form := c.FormValue("csrf")
	if err != nil || form == "" || subtle32(ck.Value, form) != 1 {
		return d.renderLogin(c, http.StatusForbidden, c.FormValue("next"), "The form expired. Please try again.")
	}
	if wait := d.auth.throttled(c.RealIP()); wait > 0 {
		d.cfg.Metrics.OpsAuthFailure("throttled")
		secs := retryAfter(c, wait)
		return d.renderLogin(c, http.StatusTooManyRequests, c.FormValue("next"),
			fmt.Sprintf("Too many wrong tokens from this address: try again in %d s.", secs))
	}
	if !d.auth.check(c.RealIP(), c.FormValue("token")) {
		d.cfg.Logger.WarnContext(r.Context(), "operator login refused", "remote", c.RealIP())
		return d.renderLogin(c, http.StatusUnauthorized, c.FormValue("next"), "Wrong token.")
	}
	d.auth.clearCookie(c, csrfCookie, loginPath)
	d.auth.setSession(c)
	d.cfg.Logger.InfoContext(r.Context(), "operator logged in", "remote", c.RealIP())
	return c.Redirect(http.StatusSeeOther, safeNext(c.FormValue("next")))
}

// logout is POST /ops/logout.
func (d *dashboard) logout(c echo.Context) error {
	d.auth.clearCookie(c, sessionCookie, "/ops")
	return c.Redirect(http.StatusSeeOther, loginPath)
}

// render writes page name with data.
func (d *dashboard) render(c echo.Context, status int, name string, data map[string]any) error {
	t, ok := d.pages[name]
	if !ok {
		return fmt.Errorf("ops: no page %q", name)
	}
	data["Refresh"] = int(d.cfg.Refresh / time.Millisecond)
	data["Page"] = name
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", data); err != nil {
		return fmt.Errorf("ops: render %s: %w", name, err)
	}
	return c.HTMLBlob(status, buf.Bytes())
}
