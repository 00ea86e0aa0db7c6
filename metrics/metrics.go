// Package metrics exposes the service's figures in the Prometheus text format
// (client_golang): HTTP requests per route and status with their latency,
// quotes served, payments verified and refused by reason, settlements by
// outcome, the paid calls whose run ended unpaid and those refused for it,
// River jobs by kind and outcome with their durations, the items and
// transactions of the group commits, the JSON-RPC calls to EVM chains by
// purpose, each JSON-RPC endpoint's calls, errors, latency, head lag and
// whether it is in, the free surfaces' requests and the operator's
// credentials refused, and, read from
// the database at each scrape, queue depths and the index's crawl and liveness
// figures.
//
// A nil *Metrics is valid and records nothing, so code paths that count work
// the same with metrics disabled.
package metrics

import (
	"math/big"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric of the service.
const Namespace = "x402d"

// Settlement outcomes, the values of the outcome label of
// x402d_settlements_total.
const (
	// SettlementConfirmed: the payment moved on chain.
	SettlementConfirmed = "confirmed"
	// SettlementFailed: the payment was refused for good (the result is
	// withheld).
	SettlementFailed = "failed"
	// SettlementError: the attempt could not be made (chain unreachable) and
	// is retried.
	SettlementError = "error"
)

// Config configures the metrics.
type Config struct {
	// Pool, when set, is read at each scrape for the queue depths and the
	// index's crawl and liveness figures.
	Pool *pgxpool.Pool
	// ScrapeTimeout bounds the database reads of one scrape. Defaults to 2 s.
	ScrapeTimeout time.Duration
}

// Metrics is the service's Prometheus registry and its collectors. Its
// methods are safe for concurrent use, and do nothing on a nil *Metrics.
type Metrics struct {
	registry *prometheus.Registry

	requests         *prometheus.CounterVec
	requestDuration  *prometheus.HistogramVec
	quotes           *prometheus.CounterVec
	verified         *prometheus.CounterVec
	refused          *prometheus.CounterVec
	settlements      *prometheus.CounterVec
	settlementGas    *prometheus.CounterVec
	revertedGas      *prometheus.CounterVec
	revenueFinal     *prometheus.CounterVec
	reorged          *prometheus.CounterVec
	reconciled       *prometheus.CounterVec
	jobsReclaimed    *prometheus.CounterVec
	relayerBalance   *prometheus.GaugeVec
	feePayerBalance  prometheus.Gauge
	feeWait          *prometheus.GaugeVec
	jobs             *prometheus.CounterVec
	jobDuration      *prometheus.HistogramVec
	crawlPages       *prometheus.CounterVec
	probes           *prometheus.CounterVec
	probeDuration    prometheus.Histogram
	commitItems      *prometheus.CounterVec
	commitTxs        *prometheus.CounterVec
	rpcCalls         *prometheus.CounterVec
	rpcEndpointCalls *prometheus.CounterVec
	rpcErrors        *prometheus.CounterVec
	rpcDuration      *prometheus.HistogramVec
	rpcLag           *prometheus.GaugeVec
	rpcIn            *prometheus.GaugeVec
	freeRefused      *prometheus.CounterVec
	opsLogins        *prometheus.CounterVec
	unpaidWork       *prometheus.CounterVec
	unpaidSeconds    *prometheus.CounterVec
	unpaidLimited    *prometheus.CounterVec
	channelTxs       *prometheus.CounterVec
	channelGas       *prometheus.CounterVec
	channelClaimed   *prometheus.CounterVec
	channelReorged   *prometheus.CounterVec

	// statuses are the label values of the HTTP statuses, made once.
	statuses [600]string
}

// New returns the metrics of one process, with Go runtime and process
// collectors registered beside the service's own.
func New(config *Config) *Metrics {
	cfg := *config
	if cfg.ScrapeTimeout <= 0 {
		cfg.ScrapeTimeout = 2 * time.Second
	}
	reg := prometheus.NewRegistry()
	m := &Metrics{
		registry: reg,
		requests: newCounterVec(reg, "http_requests_total",
			"HTTP requests answered, by method, route and status.",
			"method", "route", "status"),
		requestDuration: newHistogramVec(reg, "http_request_duration_seconds",
			"Time to answer HTTP requests, by method, route and status (paid calls include the wait for their result).",
			[]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60}, "method", "route", "status"),
		quotes: newCounterVec(reg, "quotes_served_total",
			"402 quotes answered to requests without a payment, by operation.",
			"op"),
		verified: newCounterVec(reg, "payments_verified_total",
			"Payments verified and accepted, by operation and network.",
			"op", "network"),
		refused: newCounterVec(reg, "payments_refused_total",
			"Payments refused, by operation and reason (the error code answered).",
			"op", "reason"),
		settlements: newCounterVec(reg, "settlements_total",
			"Settlement attempts, by network and outcome (confirmed, failed, error).",
			"network", "outcome"),
		settlementGas: newCounterVec(reg, "settlement_gas_spent_wei_total",
			"Gas the relayer spent settling payments, in wei of the network's native token, by network (a batch's gas shared among its transfers).",
			"network"),
		revertedGas: newCounterVec(reg, "settlement_reverted_gas_total",
			"Gas used by the relayer's settlement transactions that reverted on chain, by network (a payer's code that answered verification and not its transaction, a transfer whose gas ran out).",
			"network"),
		revenueFinal: newCounterVec(reg, "settlement_revenue_final_total",
			"Prices of the paid calls whose settlement became final, in the asset's atomic units (USDC: millionths), by network (at the receipt on a network final at once).",
			"network"),
		reorged: newCounterVec(reg, "settlement_reorganised_total",
			"Settlements a reorganisation undid, by network and what became of them (moved: the same transaction mined again; resent: made again in another; lost).",
			"network", "outcome"),
		reconciled: newCounterVec(reg, "settlement_reconciled_total",
			"Calls whose settlement jobs were all exhausted, reconciled from the chain, by network and outcome (paid, lost, refused).",
			"network", "outcome"),
		jobsReclaimed: newCounterVec(reg, "jobs_reclaimed_total",
			"Running jobs taken up again because the worker process running them was gone from the database, by kind.",
			"kind"),
		relayerBalance: newGaugeVec(reg, "relayer_balance_wei",
			"The relayer's native balance, in wei, by network, as last read.",
			"network"),
		feePayerBalance: newGauge(reg, "solana_fee_payer_balance_lamports",
			"The Solana fee payer's balance, in lamports, as last read."),
		feeWait: newGaugeVec(reg, "settlement_fee_wait",
			"1 while settlements on the network wait for the base fee to fall under SETTLEMENT_MAX_FEE_GWEI, else 0.",
			"network"),
		jobs: newCounterVec(reg, "jobs_total",
			"River job runs worked by this process, by kind and outcome (completed, error, discarded, cancelled, snoozed, panic).",
			"kind", "outcome"),
		jobDuration: newHistogramVec(reg, "job_duration_seconds",
			"Duration of River job runs, by kind and outcome.",
			[]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}, "kind", "outcome"),
		freeRefused: newCounterVec(reg, "free_requests_refused_total",
			"Requests of the free surfaces refused before any work, by surface (mcp, xindex, page) and reason (rate_limited: the client address past FREE_REQUESTS_PER_SECOND; batch_too_large: an MCP batch past MCP_MAX_BATCH).",
			"surface", "reason"),
		opsLogins: newCounterVec(reg, "ops_auth_failures_total",
			"Operator credentials refused, by outcome (wrong_token: a wrong token was checked; throttled: a client address past its failures was answered 429 without a check).",
			"outcome"),
		crawlPages: newCounterVec(reg, "crawl_pages_total",
			"Discovery listing pages read by the crawl, by outcome.",
			"outcome"),
		probes: newCounterVec(reg, "liveness_probes_total",
			"Liveness probes of index hosts, by outcome (live, dead, refused, error).",
			"outcome"),
		probeDuration: newHistogram(reg, "liveness_probe_duration_seconds",
			"Duration of liveness probes.",
			[]float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
		commitItems: newCounterVec(reg, "group_commit_items_total",
			"Items written by group commits (admission: paid calls; results; submission: settlement.submitted before a settlement's later attempt; settlement: settlement outcomes), by committer and outcome (committed, conflict, lock_wait: ended by a deadlock and written again, error); divided by x402d_group_commit_transactions_total, the items per transaction.",
			"committer", "outcome"),
		commitTxs: newCounterVec(reg, "group_commit_transactions_total",
			"Transactions written by group commits, by committer and outcome (committed, conflict, lock_wait: ended by a deadlock and written again, error).",
			"committer", "outcome"),
		rpcCalls: newCounterVec(reg, "rpc_calls_total",
			"JSON-RPC calls to EVM chains, by network, purpose (verify, reserve: payers' balances read to reserve their payments in flight, settle, relayer: the relayer's balance and status, other) and method.",
			"network", "purpose", "method"),
		rpcEndpointCalls: newCounterVec(reg, "rpc_endpoint_calls_total",
			"Calls to each JSON-RPC endpoint (RPC_URL_<CHAIN>), by network and endpoint (scheme://host[:port], #n when two share a host).",
			"network", "endpoint"),
		rpcErrors: newCounterVec(reg, "rpc_endpoint_errors_total",
			"Calls a JSON-RPC endpoint did not answer, by network, endpoint and kind (429, timeout, other); a node's JSON-RPC error (a revert) is an answer.",
			"network", "endpoint", "kind"),
		rpcDuration: newHistogramVec(reg, "rpc_endpoint_call_duration_seconds",
			"Duration of calls to each JSON-RPC endpoint, by network and endpoint.",
			[]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}, "network", "endpoint"),
		rpcLag: newGaugeVec(reg, "rpc_endpoint_head_lag_blocks",
			"Blocks a JSON-RPC endpoint's head is behind the highest head of the network's endpoints, as last read.",
			"network", "endpoint"),
		rpcIn: newGaugeVec(reg, "rpc_endpoint_in",
			"1 while a JSON-RPC endpoint takes calls, 0 while it is out (it failed several times running and is probed until it answers).",
			"network", "endpoint"),
		unpaidWork: newCounterVec(reg, "unpaid_work_total",
			"Paid calls whose run ended unpaid (never charged), by operation and reason (operation_failed, payment_expired).",
			"op", "reason"),
		unpaidSeconds: newCounterVec(reg, "unpaid_work_seconds_total",
			"Time the runs of calls that ended unpaid took (their last attempt), in seconds, by operation and reason.",
			"op", "reason"),
		unpaidLimited: newCounterVec(reg, "unpaid_work_limited_total",
			"Paid calls answered 429 before any work because their payer or client address had too many runs end unpaid, by operation and by what was limited (payer, client).",
			"op", "by"),
		channelTxs: newCounterVec(reg, "channel_transactions_total",
			"The seller's transactions of batch-settlement channels, by network, kind (claim: claimWithSignature of many channels; settle: the claimed funds to the receiver; refund: a cooperative refund) and outcome (mined, reverted).",
			"network", "kind", "outcome"),
		channelGas: newCounterVec(reg, "channel_transaction_gas_total",
			"Gas used by the seller's claim, settle and refund transactions of channels, by network and kind.",
			"network", "kind"),
		channelClaimed: newCounterVec(reg, "channel_claimed_channels_total",
			"Channels carried by mined claim transactions, by network; x402d_channel_transaction_gas_total{kind=\"claim\"} divided by it is the gas per claimed channel.",
			"network"),
		channelReorged: newCounterVec(reg, "channel_reorganised_total",
			"Claim and settle transactions a reorganisation undid and the node did not mine again, made again, by network and kind.",
			"network", "kind"),
	}
	for i := range m.statuses {
		m.statuses[i] = strconv.Itoa(i)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.Pool != nil {
		m.registry.MustRegister(newDBCollector(cfg.Pool, cfg.ScrapeTimeout))
	}
	return m
}

// newCounterVec, newGaugeVec, newHistogramVec, newGauge and newHistogram
// make a collector of the service, named name under Namespace, with help
// and labels, and register it on reg.
func newCounterVec(reg *prometheus.Registry, name, help string, labels ...string) *prometheus.CounterVec {
	return register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels))
}

func newGaugeVec(reg *prometheus.Registry, name, help string, labels ...string) *prometheus.GaugeVec {
	return register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}, labels))
}

func newHistogramVec(reg *prometheus.Registry, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels))
}

func newGauge(reg *prometheus.Registry, name, help string) prometheus.Gauge {
	return register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}))
}

func newHistogram(reg *prometheus.Registry, name, help string, buckets []float64) prometheus.Histogram {
	return register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}))
}

// register registers c on reg and returns it.
func register[C prometheus.Collector](reg *prometheus.Registry, c C) C {
	reg.MustRegister(c)
	return c
}

// Registry returns the registry, for tests and for collectors added by
// other packages.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.registry
}

// Handler serves the metrics in the Prometheus text format. On a nil
// *Metrics it answers 404.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Middleware counts every request and its latency by method, route (the
// router's pattern, never the raw path, so the label set stays bounded) and
// status. On a nil *Metrics it passes requests through.
func (m *Metrics) Middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if m == nil {
			return next
		}
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil && !c.Response().Committed {
				// Have the error handler write the answer now, to
				// know its status; it skips committed responses, so
				// nothing is written twice.
				c.Error(err)
			}
			route := c.Path()
			if route == "" || route == "/*" {
				route = "unmatched"
			}
			m.ObserveRequest(methodLabel(c.Request().Method), route, c.Response().Status, time.Since(start))
			return err
		}
	}
}

// methodLabel returns method when it is one of HTTP's, "other" otherwise:
// a client may send any token as its method, and each would otherwise be a
// label set of its own, kept for the life of the process. The series are
// so bounded by the methods, the routes and the statuses.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return "other"
}

// ObserveRequest records one answered request.
func (m *Metrics) ObserveRequest(method, route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	var s string
	if status >= 0 && status < len(m.statuses) {
		s = m.statuses[status]
	} else {
		s = strconv.Itoa(status)
	}
	m.requests.WithLabelValues(method, route, s).Inc()
	m.requestDuration.WithLabelValues(method, route, s).Observe(d.Seconds())
}

// QuoteCounter returns the function that records a 402 quote answered for
// op, resolved once: for a path that counts every unpaid call.
func (m *Metrics) QuoteCounter(op string) func() {
	if m == nil {
		return func() {}
	}
	return m.quotes.WithLabelValues(op).Inc
}

// QuoteServed records a 402 quote answered for op.
func (m *Metrics) QuoteServed(op string) {
	if m == nil {
		return
	}
	m.quotes.WithLabelValues(op).Inc()
}

// PaymentVerified records a payment for op accepted on network.
func (m *Metrics) PaymentVerified(op, network string) {
	if m == nil {
		return
	}
	m.verified.WithLabelValues(op, network).Inc()
}

// PaymentRefused records a payment for op refused with reason, the error code
// answered (invalid_exact_evm_signature, payment_already_used, ...).
func (m *Metrics) PaymentRefused(op, reason string) {
	if m == nil {
		return
	}
	m.refused.WithLabelValues(op, reason).Inc()
}

// UnpaidWork records a paid call of op whose run ended unpaid with reason
// (the failure's code) after d.
func (m *Metrics) UnpaidWork(op, reason string, d time.Duration) {
	if m == nil {
		return
	}
	m.unpaidWork.WithLabelValues(op, reason).Inc()
	m.unpaidSeconds.WithLabelValues(op, reason).Add(d.Seconds())
}

// UnpaidWorkLimited records a paid call of op refused before any work
// because its payer or client address (by) had too much unpaid work.
func (m *Metrics) UnpaidWorkLimited(op, by string) {
	if m == nil {
		return
	}
	m.unpaidLimited.WithLabelValues(op, by).Inc()
}

// Settlement records a settlement attempt on network with outcome, one of
// SettlementConfirmed, SettlementFailed and SettlementError.
func (m *Metrics) Settlement(network, outcome string) {
	if m == nil {
		return
	}
	m.settlements.WithLabelValues(network, outcome).Inc()
}

// JobReclaimed counts a running job of kind taken up again because its
// worker process was gone.
func (m *Metrics) JobReclaimed(kind string) {
	if m == nil {
		return
	}
	m.jobsReclaimed.WithLabelValues(kind).Inc()
}

// SettlementGas adds the gas a confirmed settlement on network spent, in
// wei.
func (m *Metrics) SettlementGas(network string, wei *big.Int) {
	if m == nil {
		return
	}
	f, _ := new(big.Float).SetInt(wei).Float64()
	m.settlementGas.WithLabelValues(network).Add(f)
}

// SettlementReverted adds the gas used by a settlement transaction on
// network that reverted on chain (evm.RelayerConfig.Reverted).
func (m *Metrics) SettlementReverted(network string, gasUsed uint64) {
	if m == nil {
		return
	}
	m.revertedGas.WithLabelValues(network).Add(float64(gasUsed))
}

// What became of a settlement a reorganisation undid, the values of the
// outcome label of x402d_settlement_reorganised_total.
const (
	// ReorgMoved: its transaction was mined again, in another block.
	ReorgMoved = "moved"
	// ReorgResent: it was made again in another transaction.
	ReorgResent = "resent"
	// ReorgLost: it could not be made again; its amount is lost.
	ReorgLost = "lost"
)

// RevenueFinal adds amount (atomic units, a decimal string) to the
// revenue of network whose settlement is final.
func (m *Metrics) RevenueFinal(network, amount string) {
	if m == nil {
		return
	}
	f, ok := new(big.Float).SetString(amount)
	if !ok {
		return
	}
	v, _ := f.Float64()
	m.revenueFinal.WithLabelValues(network).Add(v)
}

// SettlementReorganised counts a settlement on network that a
// reorganisation undid, with outcome: ReorgMoved, ReorgResent or ReorgLost.
func (m *Metrics) SettlementReorganised(network, outcome string) {
	if m == nil {
		return
	}
	m.reorged.WithLabelValues(network, outcome).Inc()
}

// SettlementReconciled counts a call on network whose settlement jobs
// were all exhausted, reconciled from the chain with outcome: "paid",
// "lost" or "refused" (x402.Reconciliation's names).
func (m *Metrics) SettlementReconciled(network, outcome string) {
	if m == nil {
		return
	}
	m.reconciled.WithLabelValues(network, outcome).Inc()
}

// RelayerState records the relayer's native balance on network (wei) and
// whether its settlements wait for the base fee to fall.
func (m *Metrics) RelayerState(network string, balanceWei *big.Int, feeWait bool) {
	if m == nil {
		return
	}
	f, _ := new(big.Float).SetInt(balanceWei).Float64()
	m.relayerBalance.WithLabelValues(network).Set(f)
	wait := 0.0
	if feeWait {
		wait = 1
	}
	m.feeWait.WithLabelValues(network).Set(wait)
}

// ChannelTx counts a claim, settle or refund transaction (kind) of
// channels on network with outcome ("mined", "reverted"), the gas it used
// and the channels a claim carried.
func (m *Metrics) ChannelTx(network, kind, outcome string, gasUsed uint64, channels int) {
	if m == nil {
		return
	}
	m.channelTxs.WithLabelValues(network, kind, outcome).Inc()
	m.channelGas.WithLabelValues(network, kind).Add(float64(gasUsed))
	if outcome == "mined" && channels > 0 {
		m.channelClaimed.WithLabelValues(network).Add(float64(channels))
	}
}

// ChannelReorganised counts a claim or settle transaction (kind) on
// network that a reorganisation undid, made again.
func (m *Metrics) ChannelReorganised(network, kind string) {
	if m == nil {
		return
	}
	m.channelReorged.WithLabelValues(network, kind).Inc()
}

// SolanaFeePayerBalance records the Solana fee payer's balance, in
// lamports.
func (m *Metrics) SolanaFeePayerBalance(lamports uint64) {
	if m == nil {
		return
	}
	m.feePayerBalance.Set(float64(lamports))
}

// JobDone records one run of a job of kind, its outcome and duration.
// JobMiddleware calls it for every job a River client works.
func (m *Metrics) JobDone(kind, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.jobs.WithLabelValues(kind, outcome).Inc()
	m.jobDuration.WithLabelValues(kind, outcome).Observe(d.Seconds())
}

// FreeRefused records a request of a free surface (mcp, xindex, page)
// refused with reason (rate_limited, batch_too_large) before any work.
func (m *Metrics) FreeRefused(surface, reason string) {
	if m == nil {
		return
	}
	m.freeRefused.WithLabelValues(surface, reason).Inc()
}

// OpsAuthFailure records operator credentials refused, with outcome
// wrong_token or throttled.
func (m *Metrics) OpsAuthFailure(outcome string) {
	if m == nil {
		return
	}
	m.opsLogins.WithLabelValues(outcome).Inc()
}

// CrawlPage records one discovery listing page read by the crawl, with
// outcome "ok" or "error".
func (m *Metrics) CrawlPage(outcome string) {
	if m == nil {
		return
	}
	m.crawlPages.WithLabelValues(outcome).Inc()
}

// LivenessProbe records one liveness probe, its outcome (live, dead,
// refused, error) and duration.
func (m *Metrics) LivenessProbe(outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.probes.WithLabelValues(outcome).Inc()
	m.probeDuration.Observe(d.Seconds())
}

// GroupCommitObserver returns what a group committer (store.GroupCommitConfig.
// Observe) named committer reports its transactions to; nil on a nil
// *Metrics.
func (m *Metrics) GroupCommitObserver(committer string) func(items int, outcome string) {
	if m == nil {
		return nil
	}
	return func(items int, outcome string) {
		m.commitItems.WithLabelValues(committer, outcome).Add(float64(items))
		m.commitTxs.WithLabelValues(committer, outcome).Inc()
	}
}

// RPCEndpoint is the figures of one JSON-RPC endpoint of a network, its
// series resolved once. It satisfies evm.EndpointObserver; a nil
// *RPCEndpoint records nothing.
type RPCEndpoint struct {
	calls    prometheus.Counter
	errors   *prometheus.CounterVec
	network  string
	endpoint string
	duration prometheus.Observer
	lag      prometheus.Gauge
	in       prometheus.Gauge
}

// RPCEndpoint returns the figures of the endpoint named endpoint (never
// its URL, which may carry an API key) on network; nil on a nil *Metrics.
func (m *Metrics) RPCEndpoint(network, endpoint string) *RPCEndpoint {
	if m == nil {
		return nil
	}
	return &RPCEndpoint{
		calls:    m.rpcEndpointCalls.WithLabelValues(network, endpoint),
		errors:   m.rpcErrors,
		network:  network,
		endpoint: endpoint,
		duration: m.rpcDuration.WithLabelValues(network, endpoint),
		lag:      m.rpcLag.WithLabelValues(network, endpoint),
		in:       m.rpcIn.WithLabelValues(network, endpoint),
	}
}

// ObserveCall records one call and its duration; kind is "" for an
// answer, else the kind of error (429, timeout, other).
func (r *RPCEndpoint) ObserveCall(d time.Duration, kind string) {
	if r == nil {
		return
	}
	r.calls.Inc()
	r.duration.Observe(d.Seconds())
	if kind != "" {
		r.errors.WithLabelValues(r.network, r.endpoint, kind).Inc()
	}
}

// SetLag records how many blocks the endpoint is behind the highest head.
func (r *RPCEndpoint) SetLag(blocks uint64) {
	if r == nil {
		return
	}
	r.lag.Set(float64(blocks))
}

// SetIn records whether the endpoint takes calls.
func (r *RPCEndpoint) SetIn(in bool) {
	if r == nil {
		return
	}
	v := 0.0
	if in {
		v = 1
	}
	r.in.Set(v)
}

// RPCObserver returns what counts the JSON-RPC calls to network's chain
// (evm.MeterConfig.Observe), by purpose and method; nil on a nil *Metrics.
func (m *Metrics) RPCObserver(network string) func(purpose, method string) {
	if m == nil {
		return nil
	}
	return func(purpose, method string) {
		m.rpcCalls.WithLabelValues(network, purpose, method).Inc()
	}
}
