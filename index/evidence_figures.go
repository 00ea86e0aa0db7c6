package index

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// Evidence is what the chain says of a seller (store.Evidence).
type Evidence = store.Evidence

// EvidenceWindow is the count of one window (store.EvidenceWindow).
type EvidenceWindow = store.EvidenceWindow

// EvidenceSender is one sender of a seller's transfers
// (store.EvidenceSender).
type EvidenceSender = store.EvidenceSender

// Wash is the wash signal of a seller over 30 days (store.Wash).
type Wash = store.Wash

// The classes of a transfer's sender (the transaction's from).
const (
	// SenderFacilitator is a known facilitator (KnownFacilitators).
	SenderFacilitator = "facilitator"
	// SenderSeller is one of the seller's own payTo addresses: a seller
	// that settles its payments itself.
	SenderSeller = "seller"
	// SenderPayer is the payer itself: a plain transfer.
	SenderPayer = "payer"
	// SenderOther is any other sender (an unknown facilitator or relayer).
	SenderOther = "other"
)

// PayToEvidence is the evidence of one payTo address of a host.
type PayToEvidence struct {
	Network  string    `json:"network"`
	PayTo    string    `json:"pay_to"`
	Evidence *Evidence `json:"evidence"`
}

// usdcText returns atomic units (decimal text) as USDC with 6 decimals.
func usdcText(atomic string) string {
	v, ok := new(big.Int).SetString(atomic, 10)
	if !ok {
		return atomic
	}
	q, m := new(big.Int).QuoRem(v, big.NewInt(1_000_000), new(big.Int))
	return fmt.Sprintf("%s.%06d", q, m.Int64())
}

// senderClass classifies a sender.
func senderClass(s store.EvidenceSenderRaw, facilitators map[string]string) (class, name string) {
	switch {
	case s.Own:
		return SenderSeller, ""
	case facilitators[s.Address] != "":
		return SenderFacilitator, facilitators[s.Address]
	case s.Payer:
		return SenderPayer, ""
	}
	return SenderOther, ""
}

// sendersLimit is the most senders an Evidence lists.
const sendersLimit = 10

// evidenceOf returns the Evidence of raw, its senders classified with
// facilitators.
func evidenceOf(raw *store.EvidenceRaw, facilitators map[string]string) *Evidence {
	window := func(transactions int64, volume string, payers int64, span time.Duration) EvidenceWindow {
		return EvidenceWindow{Transactions: transactions, VolumeUSDC: usdcText(volume), Payers: payers, Complete: raw.Complete(span)}
	}
	e := &Evidence{
		Networks: raw.Networks, MeasuredSince: raw.MeasuredSince, FullyMeasuredSince: raw.FullySince,
		Last24h:        window(raw.Transactions24h, raw.Volume24h, raw.Payers24h, store.EvidenceSpan24h),
		Last7d:         window(raw.Transactions7d, raw.Volume7d, raw.Payers7d, store.EvidenceSpan7d),
		Last30d:        window(raw.Transactions30d, raw.Volume30d, raw.Payers30d, store.EvidenceSpan30d),
		Settlements30d: raw.Settlements30d,
		Senders:        []EvidenceSender{},
		Wash:           Wash{TopPayer: raw.TopPayer, TopPayerShare: raw.TopPayerShare, FundedPayers: raw.FundedPayers, SelfPayments: raw.SelfPayments},
		LastTransferAt: raw.LastTransferAt,
	}
	for _, s := range raw.Senders[:min(len(raw.Senders), sendersLimit)] {
		class, name := senderClass(s, facilitators)
		e.Senders = append(e.Senders, EvidenceSender{Address: s.Address, Class: class, Name: name, Transactions: s.Transactions, VolumeUSDC: usdcText(s.Volume)})
	}
	return e
}

// evidenceNetworks are the networks of the network table whose payTo
// addresses the chain reader may read: the EVM networks and Solana.
func evidenceNetworks() []string {
	var out []string
	for _, n := range x402.Networks() {
		if ns := n.Namespace(); ns == "eip155" || ns == "solana" {
			out = append(out, n.ID)
		}
	}
	return out
}

// refresh counts again and keeps the figures of the hosts naming one of
// touched (payTo addresses whose transfers changed) and of the hosts whose
// figures are missing or older than StaleAfter (RefreshLimit at most), and
// forgets those of hosts that name no address read any more.
func (r *ChainReader) refresh(ctx context.Context, touched []string, run *ChainRun) error {
	now := r.clock.Now()
	slices.Sort(touched)
	touched = slices.Compact(touched)
	networks := evidenceNetworks()
	due, gone, err := store.EvidenceHostsDue(ctx, r.cfg.Pool, networks, touched, now.Add(-r.cfg.StaleAfter), r.cfg.RefreshLimit)
	if err != nil || (len(due) == 0 && len(gone) == 0) {
		return err
	}
	payTos, err := store.HostPayTos(ctx, r.cfg.Pool, due, networks)
	if err != nil {
		return err
	}
	raws, err := store.EvidenceCompute(ctx, r.cfg.Pool, payTos, now)
	if err != nil {
		return err
	}
	rows := make([]store.HostEvidenceRow, 0, len(raws))
	for _, host := range due {
		raw := raws[host]
		if raw == nil {
			gone = append(gone, host)
			continue
		}
		e := evidenceOf(raw, r.facilitators)
		senders, err := json.Marshal(e.Senders)
		if err != nil {
			return fmt.Errorf("index: senders of %s: %w", host, err)
		}
		rows = append(rows, store.HostEvidenceRow{EvidenceRaw: *raw, SendersJSON: senders})
	}
	run.Hosts += len(rows)
	return store.HostEvidenceSave(ctx, r.cfg.Pool, rows, gone, now)
}

// hostEvidence returns the kept figures of hosts, by host.
func (r *Reader) hostEvidence(ctx context.Context, hosts []string) (map[string]*Evidence, error) {
	rows, err := store.HostEvidenceGet(ctx, r.pool, hosts)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	out := make(map[string]*Evidence, len(rows))
	for host, row := range rows {
		e := evidenceOf(&row.EvidenceRaw, nil)
		// The senders were classified when counted.
		if err := json.Unmarshal(row.SendersJSON, &e.Senders); err != nil {
			return nil, fmt.Errorf("index: senders of %s: %w", host, err)
		}
		out[host] = e
	}
	return out, nil
}

// withEvidence sets the Evidence of hosts from their kept figures.
func (r *Reader) withEvidence(ctx context.Context, hosts []Host) error {
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = h.Host
	}
	ev, err := r.hostEvidence(ctx, names)
	if err != nil {
		return err
	}
	for i := range hosts {
		hosts[i].Evidence = ev[hosts[i].Host]
	}
	return nil
}

// payToEvidence returns the evidence of each payTo address of host on the
// networks read, counted now; an address never read has none. Senders are
// classified as the host's kept figures classified them (the reader's
// facilitators), else with KnownFacilitators.
func (r *Reader) payToEvidence(ctx context.Context, host string, hostEv *Evidence) ([]PayToEvidence, error) {
	networks := evidenceNetworks()
	pts, err := store.HostPayTos(ctx, r.pool, []string{host}, networks)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	for i := range pts {
		pts[i].Key = pts[i].Network + "/" + pts[i].PayTo
	}
	raws, err := store.EvidenceCompute(ctx, r.pool, pts, time.Now())
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	facilitators := KnownFacilitators()
	if hostEv != nil {
		for _, s := range hostEv.Senders {
			if s.Class == SenderFacilitator {
				facilitators[s.Address] = s.Name
			}
		}
	}
	out := []PayToEvidence{}
	for _, p := range pts {
		pe := PayToEvidence{Network: p.Network, PayTo: p.PayTo}
		if raw := raws[p.Key]; raw != nil {
			pe.Evidence = evidenceOf(raw, facilitators)
		}
		out = append(out, pe)
	}
	return out, nil
}
