package index

import (
	"context"
	"errors"
	"fmt"

	"github.com/x402d/x402d/store"
)

// ErrUnknownHost is returned for a host the index has never listed.
var ErrUnknownHost = errors.New("index: unknown host")

// Service is one resource of a host as its page shows it.
type Service = store.IndexService

// ProbeHour is what the probes of one hour found.
type ProbeHour = store.ProbeHour

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
	ServicesLimit int `json:"services_limit"`
	// Ownership are the receivers the host's origins proved they control
	// (x402scan's ownership proofs); a service whose receiver is among
	// them is verified (its verified_pay_to).
	Ownership []store.Ownership `json:"ownership"`
	Probes    []ProbeHour       `json:"probes"`
	Timeline  []Change          `json:"timeline"`
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
	h, err := store.HostGet(ctx, r.pool, host)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrUnknownHost
	}
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	d := &HostDetail{OK: true, Host: *h, TimelineLimit: timelineLimit, ServicesLimit: servicesLimit}
	if d.QuoteDifferences, err = store.HostQuoteDifferencesGet(ctx, r.pool, host); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if d.Services, err = store.HostServiceList(ctx, r.pool, host, servicesLimit); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if d.Ownership, err = store.HostOwnershipList(ctx, r.pool, host); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if d.Probes, err = store.HostProbeHourList(ctx, r.pool, host); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if d.Timeline, err = r.LatestChanges(ctx, host, timelineLimit); err != nil {
		return nil, err
	}
	hosts := []Host{d.Host}
	if err := r.withEvidence(ctx, hosts); err != nil {
		return nil, err
	}
	d.Host.Evidence = hosts[0].Evidence
	if d.PayTos, err = r.payToEvidence(ctx, host, d.Host.Evidence); err != nil {
		return nil, err
	}
	return d, nil
}
