package index

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/x402d/x402d/store"
)

// ErrUnknownHost is returned for a host the index has never listed.
var ErrUnknownHost = errors.New("index: unknown host")

// Service is one resource of a host as its page shows it.
type Service struct {
	Resource     string   `json:"resource"`
	Method       string   `json:"method"`
	Description  string   `json:"description"`
	PriceUSDC    *float64 `json:"price_usdc"`
	Networks     []string `json:"networks"`
	Discoverable bool     `json:"discoverable"`
	// Sources are the listings (or origins) that list it now.
	Sources []string `json:"sources"`
	// Accepts are the payment options its listing asks; empty when the
	// listing was read before they were recorded.
	Accepts []store.Accept `json:"accepts"`
	// UpdatedAt is when its listing last changed.
	UpdatedAt time.Time `json:"updated_at"`
	// Quality is the use its listing reports (Bazaar's quality figures);
	// null when no listing of it reports any.
	Quality *store.Quality `json:"quality"`
}

// ProbeHour is what the probes of one hour found: how many gave a verdict,
// how many found the host live, and the median latency measured (nil when
// none was).
type ProbeHour struct {
	Hour         time.Time `json:"hour"`
	Probes       int       `json:"probes"`
	Live         int       `json:"live"`
	LatencyP50MS *int      `json:"latency_p50_ms"`
}

// HostDetail is a host's page as JSON (/api/xindex/hosts/<host>): its entry
// with its history, its services (the cheapest ServicesLimit), its probes
// by hour over 30 days (only the hours with probes), and its timeline of
// changes, newest first.
type HostDetail struct {
	OK   bool `json:"ok"`
	Host Host `json:"host"`
	// QuoteDifferences are how the sample resource's 402 differed from its
	// listing at the last probe that compared them.
	QuoteDifferences []store.QuoteDifference `json:"quote_differences"`
	// Services are the host's services, the cheapest first, at most
	// ServicesLimit of them (Host.Services counts them all).
	Services []Service `json:"services"`
	// ServicesLimit is the most services the page holds.
	ServicesLimit int         `json:"services_limit"`
	Probes        []ProbeHour `json:"probes"`
	Timeline      []Change    `json:"timeline"`
	// TimelineLimit is the most changes the timeline holds; older ones are
	// in the changes feed (?host=).
	TimelineLimit int `json:"timeline_limit"`
	// PayTos are the on-chain figures of each of its payTo addresses on
	// the networks read (Host.Evidence sums them up), counted now.
	PayTos []PayToEvidence `json:"pay_tos"`
}

// The bounds of a host's page: the rows a listing of many services, or a
// long history, cannot grow it past.
const (
	// timelineLimit bounds a host's timeline.
	timelineLimit = 200
	// servicesLimit bounds a host's services.
	servicesLimit = 500
)

// HostDetail returns the page of host, or ErrUnknownHost.
func (r *Reader) HostDetail(ctx context.Context, host string) (*HostDetail, error) {
	rows, err := r.pool.Query(ctx, "SELECT "+hostColumns+" FROM index_hosts WHERE host = $1", host)
	if err != nil {
		return nil, fmt.Errorf("index: host %s: %w", host, err)
	}
	hosts, err := scanHosts(rows)
	if err != nil {
		return nil, fmt.Errorf("index: host %s: %w", host, err)
	}
	if len(hosts) == 0 {
		return nil, ErrUnknownHost
	}
	d := &HostDetail{OK: true, Host: hosts[0], TimelineLimit: timelineLimit, ServicesLimit: servicesLimit}
	if err := r.pool.QueryRow(ctx, "SELECT coalesce(quote_differences, '[]') FROM index_hosts WHERE host = $1", host).Scan(&d.QuoteDifferences); err != nil {
		return nil, fmt.Errorf("index: quote of %s: %w", host, err)
	}

	rows, err = r.pool.Query(ctx, `SELECT r.resource, r.method, r.description, r.price_usdc::float8, r.networks, r.discoverable,
			coalesce((SELECT array_agg(l.source ORDER BY l.source) FROM index_listings l WHERE l.resource = r.resource), '{}'),
			coalesce(r.accepts, '[]'), r.updated_at, r.quality_calls_30d, r.quality_unique_payers_30d, r.quality_last_called_at
		FROM index_resources r WHERE r.host = $1 AND NOT r.retired ORDER BY r.price_usdc NULLS LAST, r.resource LIMIT $2`, host, servicesLimit)
	if err != nil {
		return nil, fmt.Errorf("index: services of %s: %w", host, err)
	}
	d.Services, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Service, error) {
		var s Service
		var q store.Quality
		err := row.Scan(&s.Resource, &s.Method, &s.Description, &s.PriceUSDC, &s.Networks, &s.Discoverable, &s.Sources, &s.Accepts, &s.UpdatedAt,
			&q.Calls30d, &q.UniquePayers30d, &q.LastCalledAt)
		if q.Calls30d != nil || q.UniquePayers30d != nil || q.LastCalledAt != nil {
			s.Quality = &q
		}
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("index: services of %s: %w", host, err)
	}
	if d.Services == nil {
		d.Services = []Service{}
	}

	rows, err = r.pool.Query(ctx, `SELECT hour, probes, live,
			(SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY l) FROM unnest(latencies) l)
		FROM index_probe_hours WHERE host = $1 AND hour > date_trunc('hour', now()) - interval '30 days' ORDER BY hour`, host)
	if err != nil {
		return nil, fmt.Errorf("index: probes of %s: %w", host, err)
	}
	d.Probes, err = pgx.CollectRows(rows, pgx.RowToStructByPos[ProbeHour])
	if err != nil {
		return nil, fmt.Errorf("index: probes of %s: %w", host, err)
	}
	if d.Probes == nil {
		d.Probes = []ProbeHour{}
	}
	if d.Timeline, err = r.LatestChanges(ctx, host, timelineLimit); err != nil {
		return nil, err
	}
	if err := r.withEvidence(ctx, hosts[:1]); err != nil {
		return nil, err
	}
	d.Host.Evidence = hosts[0].Evidence
	if d.PayTos, err = r.payToEvidence(ctx, host, d.Host.Evidence); err != nil {
		return nil, err
	}
	return d, nil
}
