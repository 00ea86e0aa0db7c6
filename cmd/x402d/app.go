package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/x402d/x402d/api"
	"github.com/x402d/x402d/browser"
	"github.com/x402d/x402d/fetch"
	"github.com/x402d/x402d/index"
	"github.com/x402d/x402d/internal/startstop"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/ops"
	"github.com/x402d/x402d/retention"
	"github.com/x402d/x402d/schema"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/worker"
)

// options are the seams tests use. Production passes none.
type options struct {
	// payments replaces the payment step built from the configuration.
	payments func(ctx context.Context, cfg *Config, specs []jobs.Spec, logger *slog.Logger) (*paymentStack, error)
	// ops are operations added to the catalogue.
	ops []opDef
	// listening is told the api's address once it accepts connections.
	listening func(addr string)
}

// app wires the service's parts for one subcommand.
type app struct {
	cfg    *Config
	logger *slog.Logger
	opts   *options
}

func newApp(cfg *Config, logOut io.Writer, opts *options) *app {
	return &app{cfg: cfg, logger: newLogger(cfg.LogFormat, logOut, cfg.LogLevel.Level()), opts: opts}
}

// newLogger returns the process's logger on out: text lines a person reads
// with format "text", or "auto" when out is a terminal; JSON lines, one
// object each, otherwise (for log collectors).
func newLogger(format LogFormat, out io.Writer, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == LogFormatText || format == LogFormatAuto && isTerminal(out) {
		return slog.New(slog.NewTextHandler(out, opts))
	}
	return slog.New(slog.NewJSONHandler(out, opts))
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (a *app) limits() jobs.Limits {
	return jobs.Limits{
		MaxBodyBytes:    a.cfg.MaxBodyBytes,
		MaxCodeChars:    a.cfg.MaxCodeChars,
		MaxPatternChars: a.cfg.MaxPatternChars,
		MaxRows:         a.cfg.MaxRows,
		FetchAllow:      a.cfg.FetchAllowCIDRs,
	}.WithDefaults()
}

// open creates the database if needed, connects and migrates. A warm pool
// (store.OpenWarm) opens its DB_MAX_CONNS connections at once, warms each
// and keeps them: for the processes that serve calls, not for one-shot
// commands.
func (a *app) open(ctx context.Context, warm bool) (*pgxpool.Pool, error) {
	if err := schema.EnsureDatabase(ctx, a.cfg.DatabaseURL); err != nil {
		return nil, err
	}
	poolCfg, err := schema.PoolConfig(a.cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	if a.cfg.DBMaxConns > 0 {
		poolCfg.MaxConns = int32(a.cfg.DBMaxConns)
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := schema.Migrate(ctx, pool, a.logger); err != nil {
		pool.Close()
		return nil, err
	}
	if err := retention.EnsurePartitions(ctx, pool, a.cfg.EventsPartition, 0, a.logger); err != nil {
		pool.Close()
		return nil, err
	}
	if !warm {
		return pool, nil
	}
	// Opened on demand, the connections would be paid for by the first
	// second of traffic after a start (docs/performance.md, Tuning
	// choices). The warm pool needs the migrated tables: the migration's
	// pool is closed first.
	pool.Close()
	return store.OpenWarm(ctx, poolCfg)
}

func (a *app) migrate(ctx context.Context) error {
	pool, err := a.open(ctx, false)
	if err != nil {
		return err
	}
	pool.Close()
	a.logger.InfoContext(ctx, "migrations applied")
	return nil
}

// serve runs the api, the workers, or both, until ctx ends.
func (a *app) serve(ctx context.Context, withAPI, withWorker bool) error {
	pool, err := a.open(ctx, true)
	if err != nil {
		return err
	}
	defer pool.Close()

	fetcher := fetch.New(&fetch.Config{AllowCIDRs: a.cfg.FetchAllowCIDRs})
	pages := browser.NewLazy(&browser.Config{Fetch: fetcher, Logger: a.logger})
	defer func() {
		if err := pages.Close(); err != nil {
			a.logger.Error("close browser", "error", err)
		}
	}()
	mc, err := newModel(ctx, a.cfg)
	if err != nil {
		return err
	}
	limits := a.limits()
	catalogue, bindings, err := operations(&opDeps{fetch: fetcher, browser: pages, model: mc, limits: &limits, logger: a.logger}, a.opts.ops)
	if err != nil {
		return err
	}
	specs := make([]jobs.Spec, len(catalogue))
	for i, op := range catalogue {
		specs[i] = op.Spec
	}
	m := metrics.New(&metrics.Config{Pool: pool})
	payments, err := a.payments(ctx, pool, specs, m, withAPI && withWorker)
	if err != nil {
		return fmt.Errorf("payments: %w", err)
	}
	defer payments.close()

	crawler, prober, discoverer := a.indexer(pool, fetcher, m)
	periodic, err := index.PeriodicJobs(a.cfg.IndexCron, a.cfg.LivenessCron)
	if err != nil {
		return err
	}
	sweeps, err := retention.PeriodicJobs(a.cfg.RetentionCron, a.cfg.ResultTTL, a.cfg.EventsPartition, a.cfg.IndexProbeRetention)
	if err != nil {
		return err
	}
	periodic = append(periodic, sweeps...)
	chainReader, chainJobs, err := a.chainReader(ctx, pool, withWorker)
	if err != nil {
		return err
	}
	periodic = append(periodic, chainJobs...)
	register := []func(*river.Workers) error{index.Register(crawler, prober, discoverer), retention.Register(pool, a.logger), index.RegisterChain(chainReader)}
	claimer, err := channelClaimer(a.cfg, pool, payments, m, a.logger)
	if err != nil {
		return fmt.Errorf("channel claims: %w", err)
	}
	if claimer != nil {
		// The channels' vouchers claimed, and settled to PAY_TO, by
		// periodic rounds per network.
		periodic = append(periodic, claimer.PeriodicJobs()...)
		register = append(register, claimer.Register)
	}
	running := worker.NewRunning(nil)
	client, err := worker.NewClient(&worker.Deps{
		Metrics:  m,
		Pool:     pool,
		Settler:  payments.settler,
		Logger:   a.logger,
		Ops:      bindings,
		Register: register,
	}, &worker.Config{
		PeriodicJobs:      periodic,
		Work:              withWorker,
		Concurrency:       a.cfg.concurrency(),
		JobTimeout:        a.cfg.JobTimeout,
		FetchPollInterval: a.cfg.FetchPollInterval,
		RescueAfter:       a.cfg.RescueAfter,
		SettleGrace:       a.cfg.SettleGrace,
		JobRetention:      a.cfg.JobRetention,
		LedgerForm1:       a.cfg.LedgerForm == LedgerForm1,
		Running:           running,
	})
	if err != nil {
		return err
	}
	if withWorker {
		if payments.relayer != nil {
			// Started before the workers settle, stopped after they
			// stopped (defers run last first): it refuses to settle
			// outside, and its keepers run in between.
			if err := payments.relayer.Start(ctx); err != nil {
				return fmt.Errorf("start relayer: %w", err)
			}
			defer payments.relayer.Stop()
		}
		// Present before the first job is fetched, gone after the last
		// ended (defers run last first).
		reclaimer, err := worker.NewReclaimer(&worker.ReclaimConfig{Pool: pool, ClientID: client.ID(), After: a.cfg.ReclaimAfter,
			Running: running, Logger: a.logger, Metrics: m})
		if err != nil {
			return err
		}
		if err := reclaimer.Start(ctx); err != nil {
			return fmt.Errorf("start reclaimer: %w", err)
		}
		defer reclaimer.Stop()
		if err := client.Start(ctx); err != nil {
			return fmt.Errorf("start workers: %w", err)
		}
		defer func() {
			if err := worker.Stop(client, a.cfg.ShutdownTimeout); err != nil {
				a.logger.Error("stop workers", "error", err)
			}
		}()
		a.logger.InfoContext(ctx, "workers started")
		var watchers startstop.Group
		if err := watchers.Start(ctx, payments.watchers(a.cfg, m, a.logger)...); err != nil {
			return err
		}
		defer watchers.Stop()
		if payments.relayer != nil {
			// Settlements are followed until final.
			follower, err := worker.NewFollower(&worker.FollowerConfig{Pool: pool, Finality: payments.relayer, Settler: payments.settler,
				Logger: a.logger, Metrics: m, LedgerForm1: a.cfg.LedgerForm == LedgerForm1})
			if err != nil {
				return err
			}
			if err := follower.Start(ctx); err != nil {
				return err
			}
			defer follower.Stop()
		}
	}
	if srv := a.metricsServer(m); srv != nil {
		if err := srv.Start(ctx); err != nil {
			return err
		}
		defer srv.Stop()
	}
	if !withAPI {
		<-ctx.Done()
		return nil
	}

	listener := store.NewListener(pool.Config().ConnConfig, a.logger)
	if err := listener.Start(ctx); err != nil {
		return err
	}
	defer listener.Stop()

	srv, err := api.New(&api.Config{
		Ops:              catalogue,
		Payments:         payments.verifier,
		Pool:             pool,
		River:            client,
		Listener:         listener,
		Limits:           a.limits(),
		CallWait:         a.cfg.CallWait,
		ToolWait:         a.cfg.JobTimeout + time.Minute,
		PaymentValidFor:  a.cfg.paymentValidFor(),
		Logger:           a.logger,
		Metrics:          m,
		PublicURL:        a.cfg.PublicURL,
		IndexSources:     a.indexSources(),
		MetricsElsewhere: a.cfg.MetricsAddr != "",
		Dashboard:        &ops.Config{Token: a.cfg.OpsToken, Relayer: relayerStatus(payments.relayer), RelayerLowWei: a.cfg.RelayerLowBalance},
		RefusedRate:      a.cfg.RefusedRate,
		RefusedBurst:     a.cfg.RefusedBurst,
		FreeRate:         a.cfg.FreeRate,
		FreeBurst:        a.cfg.FreeBurst,
		MCPMaxBatch:      a.cfg.MCPMaxBatch,
		UnpaidRate:       a.cfg.UnpaidRate,
		UnpaidBurst:      a.cfg.UnpaidBurst,
		TrustedProxies:   a.cfg.TrustedProxies,
		LedgerForm1:      a.cfg.LedgerForm == LedgerForm1,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", a.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", a.cfg.ListenAddr, err)
	}
	a.logger.InfoContext(ctx, "api listening", "addr", ln.Addr().String(), "public_url", a.cfg.PublicURL)
	if a.opts.listening != nil {
		a.opts.listening(ln.Addr().String())
	}
	err = srv.Serve(ctx, ln, a.cfg.ShutdownTimeout)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// metricsServer serves /metrics and /healthz on METRICS_ADDR, a listener
// of their own (nil when METRICS_ADDR is unset).
func (a *app) metricsServer(m *metrics.Metrics) *sideServer {
	if a.cfg.MetricsAddr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"ok":true}`)) })
	return &sideServer{name: "metrics", setting: "METRICS_ADDR", addr: a.cfg.MetricsAddr, handler: mux, logger: a.logger}
}

// sideServer serves handler on addr, a listener of its own (METRICS_ADDR,
// PPROF_ADDR), from Start until Stop or the end of Start's context: Start
// returns once the address is listened on; the server is then shut down,
// its requests given 5 s, and Stop waits for it.
type sideServer struct {
	startstop.Base
	// name names the server in logs, setting the variable of its address.
	name, setting string
	addr          string
	handler       http.Handler
	logger        *slog.Logger
	// bound is the address listened on, once Start returned.
	bound net.Addr
}

// Addr returns the address listened on (with the port chosen for port 0),
// once Start returned.
func (s *sideServer) Addr() net.Addr { return s.bound }

// Start listens on the address and serves it until Stop or ctx ends.
func (s *sideServer) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("%s %s: %w", s.setting, s.addr, err)
	}
	s.bound = ln.Addr()
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 5 * time.Second}
	s.logger.InfoContext(ctx, s.name+" listening", "addr", s.bound.String())
	s.Base.Start(ctx, func(ctx context.Context) {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, func(context.Context) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error(s.name+" stopped serving", "error", err)
		}
	})
	return nil
}

// indexSources returns the listing URLs the index crawls: INDEX_SOURCES,
// or the public listings and this service's own discovery listing.
func (a *app) indexSources() []string {
	if len(a.cfg.IndexSources) > 0 {
		return a.cfg.IndexSources
	}
	return append(append([]string{}, index.DefaultSources...), a.cfg.PublicURL+"/api/x402/discovery/resources")
}

// indexer returns the index's crawler, prober and discoverer.
func (a *app) indexer(pool *pgxpool.Pool, fetcher *fetch.Client, m *metrics.Metrics) (*index.Crawler, *index.Prober, *index.Discoverer) {
	crawler := index.NewCrawler(&index.CrawlerConfig{Pool: pool, Sources: a.indexSources(), Guard: fetcher, Gap: a.cfg.IndexPageGap, Logger: a.logger, Metrics: m})
	discoverer := index.NewDiscoverer(&index.DiscovererConfig{Pool: pool, Fetch: fetcher, Origins: a.cfg.IndexOrigins, Gap: a.cfg.IndexPageGap, Logger: a.logger})
	prober := index.NewProber(&index.ProberConfig{Pool: pool, Fetch: fetcher, Logger: a.logger, Metrics: m, Origins: discoverer})
	return crawler, prober, discoverer
}

// indexCrawl is `x402d index crawl`: one full pass of every source now,
// with a progress bar, then the summary.
func (a *app) indexCrawl(ctx context.Context, stdout io.Writer) error {
	pool, err := a.open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	crawler, _, _ := a.indexer(pool, fetch.New(&fetch.Config{AllowCIDRs: a.cfg.FetchAllowCIDRs}), nil)
	_, err = index.CrawlOnce(ctx, crawler, index.NewReader(pool, crawler.Sources()), stdout)
	return err
}

// payments builds the payment step: the test double when a test set one,
// else the configured settlement mode. embed is set for `x402d serve`, which
// runs the devchain in process.
func (a *app) payments(ctx context.Context, pool *pgxpool.Pool, specs []jobs.Spec, m *metrics.Metrics, embed bool) (*paymentStack, error) {
	if a.opts.payments != nil {
		return a.opts.payments(ctx, a.cfg, specs, a.logger)
	}
	return buildPayments(ctx, a.cfg, pool, specs, m, a.logger, embed)
}
