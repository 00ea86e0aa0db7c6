// Package api is the service's HTTP interface (echo): the paid operations
// under /api/x402/ with their quotes, the long-poll of paid calls, the health
// endpoints, and the routes other packages add (discovery, index, operators).
//
// The api never runs an operation. A paid request is validated, its payment
// verified, and the call recorded and queued in one transaction, shared with
// the calls that arrived at the same time (admit.go); then the request waits
// for the call's final event and answers with the result, or with 202 and a
// poll URL when the wait runs out. The MCP tools run paid calls through the
// same pipeline, and one mapping (outcome.go) turns a call's end or an error
// into the answer both give.
package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/mcp"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/ops"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// Config configures the api. Fields without a default are required.
type Config struct {
	// Ops are the operations sold, in catalogue order.
	Ops []jobs.Operation
	// Payments quotes and verifies payments.
	Payments x402.Verifier
	// Pool is the database.
	Pool *pgxpool.Pool
	// IndexSources are the listing URLs the index crawls: the index's
	// crawl state counts their rows only. Empty: every row.
	IndexSources []string
	// River inserts the jobs of paid calls (an insert-only client will do).
	River *river.Client[pgx.Tx]
	// Listener wakes requests waiting for a call.
	Listener *store.Listener
	// Limits bound request inputs. Defaults to jobs.DefaultLimits.
	Limits jobs.Limits
	// CallWait is how long a paid request is held open before it answers
	// 202. Defaults to DefaultCallWait.
	CallWait time.Duration
	// MaxPollWait caps the wait= of a poll. Defaults to 60 s.
	MaxPollWait time.Duration
	// ToolWait bounds how long an MCP tool call waits for its result: a
	// job's timeout and its settlement. Defaults to 3 minutes.
	ToolWait time.Duration
	// ProgressEvery is how often a waiting MCP tool call sends a progress
	// notification, when the client asked for them. Defaults to 5 s.
	ProgressEvery time.Duration
	// LedgerForm1 writes call.paid in ledger form 1, as releases before
	// migration 017 did (store.PaidCall.Form1), so that their workers
	// settle the calls this api admits while their processes are replaced
	// (docs/operating.md, Upgrades).
	LedgerForm1 bool
	// Version is the service's version, announced to MCP clients.
	Version string
	// Logger receives one line per request.
	Logger *slog.Logger
	// PublicURL is the service's base URL in discovery documents.
	PublicURL string
	// Metrics, when set, counts requests, quotes and payments. Unless
	// MetricsElsewhere, it is served at /metrics to operators only (the
	// Dashboard's token), and not at all without a token.
	Metrics *metrics.Metrics
	// MetricsElsewhere says Metrics are served on a listener of their own
	// (METRICS_ADDR): the api does not serve /metrics.
	MetricsElsewhere bool
	// Dashboard, when set, mounts the operator dashboard (/ops,
	// /ops/jobs). Its Pool, River and Logger default to the api's.
	Dashboard *ops.Config
	// RefusedRate is how many payments a second one client address may
	// have checked on chain that end refused; past it, and its burst, the
	// address's payments that cannot be refused without the chain are
	// answered 429 with Retry-After. Payments that verify count nothing.
	// Defaults to DefaultRefusedRate.
	RefusedRate float64
	// RefusedBurst is how many such refusals an address may have at once.
	// Defaults to DefaultRefusedBurst.
	RefusedBurst int
	// FreeRate is how many requests a second one client address may make
	// of the free surfaces: /mcp (each message of a request but paid tool
	// calls), /api/xindex/* and the index's pages (/x402-index*); past it,
	// and its burst, they are answered 429 rate_limited with Retry-After.
	// Paid calls (/api/x402/*) are not counted. Defaults to
	// DefaultFreeRate.
	FreeRate float64
	// FreeBurst is how many such requests an address may make at once.
	// Defaults to DefaultFreeBurst.
	FreeBurst int
	// MCPMaxBatch is the most messages a JSON-RPC batch to /mcp may hold.
	// Defaults to mcp.DefaultMaxBatch.
	MCPMaxBatch int
	// UnpaidRate is how many paid calls a second one payer, and one
	// client address, may have end unpaid (their run failed or passed
	// the payment's validBefore; for the payer, also their result's
	// settlement refused); past it, and its burst, their further paid
	// calls are answered 429 with Retry-After before any work. Defaults
	// to DefaultUnpaidRate.
	UnpaidRate float64
	// UnpaidBurst is how many such calls a payer or address may have at
	// once. Defaults to DefaultUnpaidBurst.
	UnpaidBurst int
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client's address. Defaults to none: the address the connection
	// comes from is the client's.
	TrustedProxies []netip.Prefix
	// PaymentValidFor is how long a payment's authorization must stay
	// valid after its verification: the operation's time budget (the job
	// timeout) and the settlement window. A payment that expires sooner
	// is refused before any work (x402.WithValidFor). Zero: only the
	// scheme's own margin.
	PaymentValidFor time.Duration
	// Clock is the time of the limits, the reservations and the waits.
	// Defaults to clock.Real().
	Clock clock.Clock
}

// Defaults of Config.
const (
	// DefaultCallWait is Config.CallWait's default.
	DefaultCallWait = 25 * time.Second
	// DefaultRefusedRate is Config.RefusedRate's default.
	DefaultRefusedRate = 1
	// DefaultRefusedBurst is Config.RefusedBurst's default.
	DefaultRefusedBurst = 10
	// DefaultFreeRate is Config.FreeRate's default.
	DefaultFreeRate = 10
	// DefaultFreeBurst is Config.FreeBurst's default.
	DefaultFreeBurst = 100
	// DefaultUnpaidRate is Config.UnpaidRate's default: one every 20 s.
	DefaultUnpaidRate = 0.05
	// DefaultUnpaidBurst is Config.UnpaidBurst's default.
	DefaultUnpaidBurst = 5
)

// Server is the api's HTTP server.
type Server struct {
	echo      *echo.Echo
	discovery *discovery
	cfg       Config
	ops       map[string]*opEntry
	logger    *slog.Logger
	admitter  *store.GroupCommitter[*admission]
	// answers reads the calls that requests wait for (answer).
	answers    *store.GroupCommitter[*answerRead]
	refused    *refusedLimiter
	free       *freeLimiter
	unpaidWork *unpaidLimiter
	// balances reads payers' balances for the reservations of their
	// payments in flight: Payments, when it can (nil otherwise).
	balances x402.BalanceReader
	// balanceCache keeps the balances read moments ago.
	balanceCache balanceCache
}

// New returns the api server for config, of which it keeps a copy. It
// precomputes every quote.
func New(config *Config) (*Server, error) {
	cfg := *config
	if cfg.Payments == nil || cfg.Pool == nil || cfg.River == nil || cfg.Listener == nil || cfg.Logger == nil {
		return nil, errors.New("api: Payments, Pool, River, Listener and Logger are required")
	}
	cfg.Limits = cfg.Limits.WithDefaults()
	cfg.CallWait = cmp.Or(cfg.CallWait, DefaultCallWait)
	cfg.MaxPollWait = cmp.Or(cfg.MaxPollWait, 60*time.Second)
	cfg.ToolWait = cmp.Or(cfg.ToolWait, 3*time.Minute)
	cfg.ProgressEvery = cmp.Or(cfg.ProgressEvery, 5*time.Second)
	cfg.Version = cmp.Or(cfg.Version, "dev")
	cfg.RefusedRate = cmp.Or(cfg.RefusedRate, DefaultRefusedRate)
	cfg.RefusedBurst = cmp.Or(cfg.RefusedBurst, DefaultRefusedBurst)
	cfg.FreeRate = cmp.Or(cfg.FreeRate, DefaultFreeRate)
	cfg.FreeBurst = cmp.Or(cfg.FreeBurst, DefaultFreeBurst)
	cfg.UnpaidRate = cmp.Or(cfg.UnpaidRate, DefaultUnpaidRate)
	cfg.UnpaidBurst = cmp.Or(cfg.UnpaidBurst, DefaultUnpaidBurst)
	cfg.Clock = clock.Or(cfg.Clock)

	s := &Server{cfg: cfg, logger: cfg.Logger, ops: map[string]*opEntry{}, admitter: newAdmitter(cfg.Pool, cfg.River, cfg.Metrics, cfg.LedgerForm1, cfg.Clock),
		answers:    newAnswers(cfg.Pool, cfg.Clock),
		refused:    newRefusedLimiter(cfg.RefusedRate, cfg.RefusedBurst, cfg.Clock),
		free:       newFreeLimiter(cfg.FreeRate, cfg.FreeBurst, cfg.Clock),
		unpaidWork: newUnpaidLimiter(cfg.UnpaidRate, cfg.UnpaidBurst, cfg.ToolWait, cfg.Pool, cfg.Listener, cfg.Logger, cfg.Clock)}
	s.balances, _ = cfg.Payments.(x402.BalanceReader)
	for _, op := range cfg.Ops {
		entry, err := newOpEntry(op, cfg.Payments)
		if err != nil {
			return nil, err
		}
		entry.quoted = cfg.Metrics.QuoteCounter(op.Name)
		s.ops[op.Name] = entry
	}

	var err error
	withOps := cfg.Dashboard != nil && cfg.Dashboard.Token != ""
	if s.discovery, err = newDiscovery(cfg.Ops, cfg.Payments, strings.TrimRight(cfg.PublicURL, "/"), cfg.Clock.Now(), withOps); err != nil {
		return nil, err
	}

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = errorHandler(cfg.Logger)
	e.IPExtractor = ipExtractor(cfg.TrustedProxies)
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{
		LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
			cfg.Logger.ErrorContext(c.Request().Context(), "panic", "error", err, "stack", string(stack))
			return err
		},
	}))
	e.Use(middleware.RequestID())
	if cfg.Metrics != nil {
		e.Use(cfg.Metrics.Middleware())
	}
	e.Use(requestLogger(cfg.Logger))
	e.Use(middleware.BodyLimit(fmt.Sprintf("%dB", cfg.Limits.MaxBodyBytes)))

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.POST("/api/x402/:op", s.paid)
	e.GET("/api/x402/:op", s.refund)
	e.GET("/api/x402/calls/:id", s.poll)
	s.registerDiscovery(e)
	page, err := index.NewHTMLPage()
	if err != nil {
		return nil, err
	}
	xi := &xindex{reader: index.NewReader(cfg.Pool, cfg.IndexSources), page: page, publicURL: strings.TrimRight(cfg.PublicURL, "/")}
	var sold []jobs.Operation
	for _, op := range cfg.Ops {
		if s.ops[op.Name].sold() {
			sold = append(sold, op)
		}
	}
	tools, err := mcp.New(&mcp.Config{
		Ops: sold, Payments: cfg.Payments, Calls: toolCalls{s}, Index: xi.reader,
		Wait: cfg.ToolWait, Logger: cfg.Logger, Version: cfg.Version,
		MaxBatch: cfg.MCPMaxBatch, Admit: s.admitMCP, Metrics: cfg.Metrics,
	})
	if err != nil {
		return nil, err
	}
	e.Any(mcp.Path, func(c echo.Context) error {
		r := c.Request()
		tools.ServeHTTP(c.Response(), r.WithContext(withClient(r.Context(), c.RealIP())))
		return nil
	})
	xi.register(e, s.limitFree)
	if cfg.Dashboard != nil {
		oc := *cfg.Dashboard
		oc.Pool = cmp.Or(oc.Pool, cfg.Pool)
		oc.River = cmp.Or(oc.River, cfg.River)
		oc.Logger = cmp.Or(oc.Logger, cfg.Logger)
		oc.Metrics = cmp.Or(oc.Metrics, cfg.Metrics)
		oc.ServeMetrics = !cfg.MetricsElsewhere
		if oc.TrustedProxies == nil {
			oc.TrustedProxies = cfg.TrustedProxies
		}
		if err := ops.Mount(e, &oc); err != nil {
			return nil, err
		}
	}
	s.echo = e
	return s, nil
}

// Echo returns the router, for other packages to add their routes before the
// server starts.
func (s *Server) Echo() *echo.Echo { return s.echo }

// ServeHTTP answers the unpaid calls of sold operations with their quote
// at once, the most numerous and cheapest requests, and every other request
// through the router (Echo): a quote needs neither the middleware chain
// (its request ID, per-request metrics and log line) nor the router. Quotes
// are counted by x402d_quotes_served_total.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && len(r.Header[headerPaymentSignature]) == 0 && r.ContentLength <= s.cfg.Limits.MaxBodyBytes {
		if name, ok := strings.CutPrefix(r.URL.Path, "/api/x402/"); ok {
			if entry := s.ops[name]; entry.sold() {
				h := w.Header()
				q := entry.current()
				h[headerPaymentRequired] = q.required
				h[headerWWWAuthenticate] = q.wwwAuth
				h["Content-Type"] = entry.contentType
				h[headerCacheControl] = noStore
				w.WriteHeader(http.StatusPaymentRequired)
				_, _ = w.Write(q.quote.Body)
				entry.quoted()
				return
			}
		}
	}
	s.echo.ServeHTTP(w, r)
}

// Serve accepts connections on ln until ctx ends, then shuts down gracefully
// (waiting requests get up to shutdownTimeout to finish). While it serves,
// it follows the unpaid work the workers record (unpaidLimiter).
func (s *Server) Serve(ctx context.Context, ln net.Listener, shutdownTimeout time.Duration) error {
	s.unpaidWork.start(ctx)
	defer s.unpaidWork.stop()
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.cfg.MaxPollWait + 15*time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("api: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc // Serve returns once Shutdown has closed the listener.
	// The admissions of the last requests may still be written by a
	// writer of their own, and their answers read.
	s.admitter.Wait()
	s.answers.Wait()
	if err != nil {
		return fmt.Errorf("api: shutdown: %w", err)
	}
	return nil
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]any{"ok": true})
}

func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Pool.Ping(ctx); err != nil {
		return &Error{Status: http.StatusServiceUnavailable, Code: "database_unreachable", Message: "the database does not answer"}
	}
	return c.JSON(http.StatusOK, map[string]any{"ok": true})
}

// requestLogger logs one line per request, with the call id when there is one.
func requestLogger(logger *slog.Logger) echo.MiddlewareFunc {
	return middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		LogStatus:    true,
		LogLatency:   true,
		LogMethod:    true,
		LogURIPath:   true,
		LogRequestID: true,
		LogError:     true,
		HandleError:  true,
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			// Unpaid quotes are the most numerous and cheapest requests:
			// /metrics counts them (x402d_quotes_served_total), and they are
			// logged at debug only, so that they cost no log line at info.
			level := slog.LevelInfo
			if v.Status == http.StatusPaymentRequired && c.Request().Header.Get(headerPaymentSignature) == "" {
				level = slog.LevelDebug
			}
			ctx := c.Request().Context()
			if !logger.Enabled(ctx, level) {
				return nil
			}
			attrs := []slog.Attr{
				slog.String("method", v.Method),
				slog.String("path", v.URIPath),
				slog.Int("status", v.Status),
				slog.Float64("latency_ms", float64(v.Latency.Microseconds())/1000),
				slog.String("request_id", v.RequestID),
			}
			if id, ok := c.Get(callIDKey).(string); ok {
				attrs = append(attrs, slog.String("call_id", id))
			}
			logger.LogAttrs(ctx, level, "request", attrs...)
			return nil
		},
	})
}
