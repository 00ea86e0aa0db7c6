package metrics

import (
	"context"
	"math/big"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/x402d/x402d/store"
)

// dbCollector reads, at each scrape, the figures that live in the database:
// River's queue depths and the index's crawl and liveness state. Every
// process sharing the database reports the same values.
type dbCollector struct {
	pool    *pgxpool.Pool
	timeout time.Duration

	queueJobs     *prometheus.Desc
	oldestWaiting *prometheus.Desc
	up            *prometheus.Desc
	sources       *prometheus.Desc
	fullScans     *prometheus.Desc
	resources     *prometheus.Desc
	hosts         *prometheus.Desc
	pending       *prometheus.Desc
	pendingCalls  *prometheus.Desc
	lost          *prometheus.Desc
	lostCalls     *prometheus.Desc
	channels      *prometheus.Desc
	unclaimed     *prometheus.Desc
	unclaimedAge  *prometheus.Desc
	claimed       *prometheus.Desc
	settled       *prometheus.Desc
	refunded      *prometheus.Desc
}

func newDBCollector(pool *pgxpool.Pool, timeout time.Duration) *dbCollector {
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "", n) }
	return &dbCollector{
		pool:    pool,
		timeout: timeout,
		queueJobs: prometheus.NewDesc(name("queue_jobs"),
			"River jobs not finalized, by queue and state (available, scheduled, retryable, running).", []string{"queue", "state"}, nil),
		oldestWaiting: prometheus.NewDesc(name("queue_oldest_available_seconds"),
			"Age of the oldest job waiting to run (available), by queue.", []string{"queue"}, nil),
		up: prometheus.NewDesc(name("database_scrape_ok"),
			"1 when the database figures of this scrape were read, 0 when the database did not answer.", nil, nil),
		sources: prometheus.NewDesc(name("index_sources"),
			"Discovery listings the index crawls.", nil, nil),
		fullScans: prometheus.NewDesc(name("index_full_scans_total"),
			"Complete passes over all discovery listings.", nil, nil),
		resources: prometheus.NewDesc(name("index_resources"),
			"Resources in the index.", nil, nil),
		hosts: prometheus.NewDesc(name("index_hosts"),
			"Hosts in the index, by liveness (live, dead, unmeasured).", []string{"liveness"}, nil),
		pending: prometheus.NewDesc(name("settlement_revenue_pending"),
			"Prices of the paid calls whose settlement awaits finality, in the asset's atomic units, by network.", []string{"network"}, nil),
		pendingCalls: prometheus.NewDesc(name("settlement_pending_calls"),
			"Paid calls whose settlement awaits finality, by network.", []string{"network"}, nil),
		lost: prometheus.NewDesc(name("settlement_revenue_lost"),
			"Prices of the paid calls whose settlement a reorganisation undid for good, in the asset's atomic units, by network.", []string{"network"}, nil),
		lostCalls: prometheus.NewDesc(name("settlement_lost_calls"),
			"Paid calls whose settlement a reorganisation undid for good, by network.", []string{"network"}, nil),
		channels: prometheus.NewDesc(name("channels"),
			"Batch-settlement channels the seller holds, by network.", []string{"network"}, nil),
		unclaimed: prometheus.NewDesc(name("channel_unclaimed"),
			"What the channels' vouchers charged and no claim took yet, in the asset's atomic units, by network.", []string{"network"}, nil),
		unclaimedAge: prometheus.NewDesc(name("channel_unclaimed_oldest_seconds"),
			"Age of the oldest unclaimed charge of the channels, by network (0 when none).", []string{"network"}, nil),
		claimed: prometheus.NewDesc(name("channel_claimed"),
			"The channels' claimed totals on chain as last known, in atomic units, by network (a claim a reorganisation undid taken back).", []string{"network"}, nil),
		settled: prometheus.NewDesc(name("channel_settled"),
			"What settles paid the receivers in all, in atomic units, by network, as the claim rounds last read it from the chain.", []string{"network"}, nil),
		refunded: prometheus.NewDesc(name("channel_refunded"),
			"What cooperative refunds returned to the payers in all, in atomic units, by network.", []string{"network"}, nil),
	}
}

// Describe sends the descriptors of every figure.
func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.queueJobs, c.oldestWaiting, c.up, c.sources, c.fullScans, c.resources, c.hosts, c.pending, c.pendingCalls, c.lost, c.lostCalls,
		c.channels, c.unclaimed, c.unclaimedAge, c.claimed, c.settled, c.refunded} {
		ch <- d
	}
}

// Collect reads the figures. A database that does not answer is reported by
// x402d_database_scrape_ok 0, not by a failed scrape.
func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	ok := 1.0
	if err := c.collectQueues(ctx, ch); err != nil {
		ok = 0
	}
	if err := c.collectIndex(ctx, ch); err != nil {
		ok = 0
	}
	if err := c.collectFinality(ctx, ch); err != nil {
		ok = 0
	}
	if err := c.collectChannels(ctx, ch); err != nil {
		ok = 0
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, ok)
}

func (c *dbCollector) collectQueues(ctx context.Context, ch chan<- prometheus.Metric) error {
	depths, err := store.QueueDepthList(ctx, c.pool)
	if err != nil {
		return err
	}
	for _, d := range depths {
		for state, n := range map[string]int64{"available": d.Available, "scheduled": d.Scheduled, "retryable": d.Retryable, "running": d.Running} {
			ch <- prometheus.MustNewConstMetric(c.queueJobs, prometheus.GaugeValue, float64(n), d.Queue, state)
		}
		oldest := 0.0
		if d.OldestAvailable != nil {
			oldest = time.Since(*d.OldestAvailable).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(c.oldestWaiting, prometheus.GaugeValue, oldest, d.Queue)
	}
	return nil
}

func (c *dbCollector) collectIndex(ctx context.Context, ch chan<- prometheus.Metric) error {
	s, err := store.IndexFiguresGet(ctx, c.pool)
	if err != nil || s == nil {
		return err
	}
	ch <- prometheus.MustNewConstMetric(c.sources, prometheus.GaugeValue, float64(s.Sources))
	ch <- prometheus.MustNewConstMetric(c.fullScans, prometheus.CounterValue, float64(s.FullScans))
	ch <- prometheus.MustNewConstMetric(c.resources, prometheus.GaugeValue, float64(s.Resources))
	ch <- prometheus.MustNewConstMetric(c.hosts, prometheus.GaugeValue, float64(s.Live), "live")
	ch <- prometheus.MustNewConstMetric(c.hosts, prometheus.GaugeValue, float64(s.Dead), "dead")
	ch <- prometheus.MustNewConstMetric(c.hosts, prometheus.GaugeValue, float64(s.Unmeasured), "unmeasured")
	return nil
}

func (c *dbCollector) collectFinality(ctx context.Context, ch chan<- prometheus.Metric) error {
	list, err := store.FinalityList(ctx, c.pool)
	if err != nil {
		return err
	}
	for _, f := range list {
		pending, _ := strconv.ParseFloat(f.PendingAmount, 64)
		lost, _ := strconv.ParseFloat(f.LostAmount, 64)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, pending, f.Network)
		ch <- prometheus.MustNewConstMetric(c.pendingCalls, prometheus.GaugeValue, float64(f.PendingCalls), f.Network)
		ch <- prometheus.MustNewConstMetric(c.lost, prometheus.GaugeValue, lost, f.Network)
		ch <- prometheus.MustNewConstMetric(c.lostCalls, prometheus.GaugeValue, float64(f.LostCalls), f.Network)
	}
	return nil
}

func (c *dbCollector) collectChannels(ctx context.Context, ch chan<- prometheus.Metric) error {
	list, err := store.ChannelTotalsList(ctx, c.pool)
	if err != nil {
		return err
	}
	amount := func(v *big.Int) float64 {
		f, _ := new(big.Float).SetInt(v).Float64()
		return f
	}
	for _, t := range list {
		age := 0.0
		if !t.OldestUnclaimed.IsZero() {
			age = time.Since(t.OldestUnclaimed).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(c.channels, prometheus.GaugeValue, float64(t.Channels), t.Network)
		ch <- prometheus.MustNewConstMetric(c.unclaimed, prometheus.GaugeValue, amount(t.Unclaimed), t.Network)
		ch <- prometheus.MustNewConstMetric(c.unclaimedAge, prometheus.GaugeValue, age, t.Network)
		ch <- prometheus.MustNewConstMetric(c.claimed, prometheus.GaugeValue, amount(t.Claimed), t.Network)
		ch <- prometheus.MustNewConstMetric(c.settled, prometheus.GaugeValue, amount(t.Settled), t.Network)
		ch <- prometheus.MustNewConstMetric(c.refunded, prometheus.GaugeValue, amount(t.Refunded), t.Network)
	}
	return nil
}
