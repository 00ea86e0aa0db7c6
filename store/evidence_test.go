package store_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/store"
)

// TestEvidenceCompute counts the figures of keys over random transfers as
// the chain reader records them and requires what the transfers say,
// counted one by one: keys of several payTo addresses (on two networks),
// an address of two keys, addresses read from different blocks, transfers
// before an address's first block or older than 30 days left out, payers
// paying in several windows, self payments and funded payers, senders of
// each class; a key with no address read is left out.
func TestEvidenceCompute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	now := time.Now().Truncate(time.Microsecond)
	addr := func(n int) string { return fmt.Sprintf("0x%040x", n) }
	type watch struct {
		network, payTo string
		since          uint64
		sinceAt        time.Time
	}
	watches := []watch{
		{"eip155:8453", addr(0xa1), 100, now.Add(-40 * 24 * time.Hour)},
		{"eip155:8453", addr(0xa2), 200, now.Add(-20 * 24 * time.Hour)},
		{"eip155:137", addr(0xa3), 50, now.Add(-35 * 24 * time.Hour)},
		{"eip155:8453", addr(0xb1), 100, now.Add(-40 * 24 * time.Hour)},
	}
	for _, w := range watches {
		require.NoError(t, store.ChainWatch(ctx, db.Pool, w.network, []string{w.payTo}, w.since, w.sinceAt))
	}
	keys := map[string][]watch{"a": watches[:3], "b": watches[3:], "c": watches[:1]}
	var payTos []store.EvidencePayTo
	for key, ws := range keys {
		for _, w := range ws {
			payTos = append(payTos, store.EvidencePayTo{Key: key, Network: w.network, PayTo: w.payTo})
		}
	}
	payTos = append(payTos, store.EvidencePayTo{Key: "d", Network: "eip155:8453", PayTo: addr(0xd1)})

	// Payers: a few, a1 and b1 themselves; senders: a facilitator, the
	// payer, a1, a relayer.
	payers := []string{addr(1), addr(2), addr(3), addr(4), addr(5), addr(0xa1), addr(0xb1)}
	rng := rand.New(rand.NewPCG(5, 6))
	var transfers []store.Transfer
	for i := range 400 {
		w := watches[rng.IntN(len(watches))]
		payer := payers[rng.IntN(len(payers))]
		sender := []string{addr(0xfa), payer, addr(0xa1), addr(0xee)}[rng.IntN(4)]
		transfers = append(transfers, store.Transfer{Network: w.network, TxHash: fmt.Sprintf("0x%064x", i), LogIndex: uint(i % 3),
			Block: uint64(1 + rng.IntN(1000)), BlockHash: fmt.Sprintf("0x%064x", i), At: now.Add(-time.Duration(rng.Int64N(int64(40 * 24 * time.Hour)))).Truncate(time.Microsecond),
			Payer: payer, PayTo: w.payTo, Amount: strconv.Itoa(1 + rng.IntN(100_000)), Sender: sender, EIP3009: rng.IntN(3) > 0})
	}
	require.NoError(t, store.TransfersAdd(ctx, db.Pool, transfers))
	// Every payer looked at for a funding: a1 funded payers 2 and 3, b1
	// payer 3.
	checked := map[string][]store.ChainPayer{}
	for _, tr := range transfers {
		checked[tr.Network] = append(checked[tr.Network], store.ChainPayer{PayTo: tr.PayTo, Payer: tr.Payer})
	}
	checked["eip155:8453"] = append(checked["eip155:8453"], store.ChainPayer{PayTo: addr(0xa1), Payer: addr(2), FundedBlock: 10},
		store.ChainPayer{PayTo: addr(0xa1), Payer: addr(3), FundedBlock: 10}, store.ChainPayer{PayTo: addr(0xb1), Payer: addr(3), FundedBlock: 10})
	for network, ps := range checked {
		require.NoError(t, store.ChainPayersChecked(ctx, db.Pool, network, ps))
	}
	funded := map[[2]string]bool{{addr(0xa1), addr(2)}: true, {addr(0xa1), addr(3)}: true, {addr(0xb1), addr(3)}: true}

	got, err := store.EvidenceCompute(ctx, db.Pool, payTos, now)
	require.NoError(t, err)
	require.Len(t, got, len(keys), "d is not read")
	for key, ws := range keys {
		want := store.EvidenceRaw{Key: key, MeasuredSince: ws[0].sinceAt, FullySince: ws[0].sinceAt, CountedAt: now, Senders: []store.EvidenceSenderRaw{},
			FundedPayers: new(int64)}
		own := map[string]bool{}
		for _, w := range ws {
			own[w.payTo] = true
			if w.sinceAt.Before(want.MeasuredSince) {
				want.MeasuredSince = w.sinceAt
			}
			if w.sinceAt.After(want.FullySince) {
				want.FullySince = w.sinceAt
			}
			if !slices.Contains(want.Networks, w.network) {
				want.Networks = append(want.Networks, w.network)
			}
		}
		slices.Sort(want.Networks)
		var v24, v7, v30 int64
		type payerSum struct {
			v    int64
			last time.Time
		}
		byPayer := map[string]*payerSum{}
		bySender := map[string]*store.EvidenceSenderRaw{}
		for _, tr := range transfers {
			i := slices.IndexFunc(ws, func(w watch) bool { return w.network == tr.Network && w.payTo == tr.PayTo })
			if i < 0 || tr.Block <= ws[i].since || !tr.At.After(now.Add(-30*24*time.Hour)) {
				continue
			}
			amount, err := strconv.ParseInt(tr.Amount, 10, 64)
			require.NoError(t, err)
			want.Transactions30d++
			v30 += amount
			if tr.At.After(now.Add(-7 * 24 * time.Hour)) {
				want.Transactions7d++
				v7 += amount
			}
			if tr.At.After(now.Add(-24 * time.Hour)) {
				want.Transactions24h++
				v24 += amount
			}
			if tr.EIP3009 {
				want.Settlements30d++
			}
			if own[tr.Payer] {
				want.SelfPayments++
			}
			if want.LastTransferAt == nil || tr.At.After(*want.LastTransferAt) {
				want.LastTransferAt = &tr.At
			}
			p := byPayer[tr.Payer]
			if p == nil {
				p = &payerSum{}
				byPayer[tr.Payer] = p
			}
			p.v += amount
			if tr.At.After(p.last) {
				p.last = tr.At
			}
			s := bySender[tr.Sender]
			if s == nil {
				s = &store.EvidenceSenderRaw{Address: tr.Sender, Own: own[tr.Sender], Payer: true}
				bySender[tr.Sender] = s
			}
			s.Payer = s.Payer && tr.Sender == tr.Payer
			s.Transactions++
			vs, _ := strconv.ParseInt(cmp.Or(s.Volume, "0"), 10, 64)
			s.Volume = strconv.FormatInt(vs+amount, 10)
		}
		want.Volume24h, want.Volume7d, want.Volume30d = strconv.FormatInt(v24, 10), strconv.FormatInt(v7, 10), strconv.FormatInt(v30, 10)
		for payer, p := range byPayer {
			want.Payers30d++
			if p.last.After(now.Add(-7 * 24 * time.Hour)) {
				want.Payers7d++
			}
			if p.last.After(now.Add(-24 * time.Hour)) {
				want.Payers24h++
			}
			if want.TopPayer == nil || p.v > byPayer[*want.TopPayer].v || (p.v == byPayer[*want.TopPayer].v && payer < *want.TopPayer) {
				want.TopPayer = &payer
			}
			for _, w := range ws {
				if funded[[2]string{w.payTo, payer}] {
					*want.FundedPayers++
					break
				}
			}
		}
		if want.TopPayer != nil {
			share := float64(byPayer[*want.TopPayer].v) / float64(v30)
			want.TopPayerShare = &share
		}
		for _, s := range bySender {
			want.Senders = append(want.Senders, *s)
		}
		slices.SortFunc(want.Senders, func(a, b store.EvidenceSenderRaw) int {
			return cmp.Or(cmp.Compare(b.Transactions, a.Transactions), cmp.Compare(a.Address, b.Address))
		})
		require.Positive(t, want.Transactions30d, key)
		require.Positive(t, *want.FundedPayers+want.SelfPayments, key)

		g := got[key]
		require.NotNil(t, g, key)
		require.InDelta(t, *want.TopPayerShare, *g.TopPayerShare, 1e-9, key)
		g.TopPayerShare = want.TopPayerShare
		require.True(t, want.MeasuredSince.Equal(g.MeasuredSince), key)
		g.MeasuredSince = want.MeasuredSince
		require.True(t, want.FullySince.Equal(g.FullySince), key)
		g.FullySince = want.FullySince
		require.True(t, want.LastTransferAt.Equal(*g.LastTransferAt), key)
		g.LastTransferAt = want.LastTransferAt
		require.Equal(t, want, *g, key)
	}

	// A payer of a1 not looked at yet: a's and c's funded payers are not
	// known, b's are.
	_, err = db.Pool.Exec(ctx, "UPDATE index_chain_payers SET checked = false WHERE pay_to = $1 AND payer = $2", addr(0xa1), addr(5))
	require.NoError(t, err)
	got, err = store.EvidenceCompute(ctx, db.Pool, payTos, now)
	require.NoError(t, err)
	require.Nil(t, got["a"].FundedPayers)
	require.Nil(t, got["c"].FundedPayers)
	require.NotNil(t, got["b"].FundedPayers)
}

// TestEvidenceHostsDue finds the hosts whose figures are due: those naming
// an address whose transfers changed, never counted, or counted before
// the stale time, at most the limit; and the hosts whose figures are kept
// though they name no address read (not read, or retired).
func TestEvidenceHostsDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	now := time.Now()
	addr := func(n int) string { return fmt.Sprintf("0x%040x", n) }
	// h<n> names payTo n; h4's is not read; h6's resource is retired.
	for n := 1; n <= 6; n++ {
		_, err := db.Pool.Exec(ctx, `INSERT INTO index_resources (resource, host, updated_at, retired, accepts)
			VALUES ($1, $2, now(), $3, jsonb_build_array(jsonb_build_object('network', 'eip155:8453', 'pay_to', upper($4))))`,
			fmt.Sprintf("https://h%d.test/r", n), fmt.Sprintf("h%d.test", n), n == 6, addr(n))
		require.NoError(t, err)
		if n != 4 {
			require.NoError(t, store.ChainWatch(ctx, db.Pool, "eip155:8453", []string{addr(n)}, 1, now))
		}
	}
	saved := func(at time.Time, hosts ...string) {
		t.Helper()
		var rows []store.HostEvidenceRow
		for _, h := range hosts {
			rows = append(rows, store.HostEvidenceRow{EvidenceRaw: store.EvidenceRaw{Key: h, MeasuredSince: now, Networks: []string{"eip155:8453"},
				Volume24h: "0", Volume7d: "0", Volume30d: "0"}, SendersJSON: []byte("[]")})
		}
		require.NoError(t, store.HostEvidenceSave(ctx, db.Pool, rows, nil, at))
	}
	saved(now, "h1.test", "h4.test", "h5.test", "h6.test")
	saved(now.Add(-time.Hour), "h3.test")
	networks := []string{"eip155:8453", "eip155:137"}

	due, gone, err := store.EvidenceHostsDue(ctx, db.Pool, networks, []string{addr(5)}, now.Add(-10*time.Minute), 10)
	require.NoError(t, err)
	slices.Sort(due)
	slices.Sort(gone)
	require.Equal(t, []string{"h2.test", "h3.test", "h5.test"}, due)
	require.Equal(t, []string{"h4.test", "h6.test"}, gone)

	due, _, err = store.EvidenceHostsDue(ctx, db.Pool, networks, nil, now.Add(-10*time.Minute), 1)
	require.NoError(t, err)
	require.Len(t, due, 1)
	require.Subset(t, []string{"h2.test", "h3.test"}, due)

	due, gone, err = store.EvidenceHostsDue(ctx, db.Pool, networks, nil, now.Add(-2*time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"h2.test"}, due)
	require.Len(t, gone, 2)
}

// TestHostListByEvidence lists the hosts by each on-chain figure: the
// measured hosts by the figure, the highest first (a tie by name, a
// measured zero among them), then the hosts not measured by name, at every
// limit; with a filter on the figures, the measured only; with a text, its
// hosts only.
func TestHostListByEvidence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	// h1 to h4 measured (h4 a measured zero), h5 and h6 not, h7 without
	// services.
	_, err := db.Pool.Exec(ctx, `INSERT INTO index_hosts (host, services) SELECT 'h' || n || '.test', CASE WHEN n = 7 THEN 0 ELSE 1 END
		FROM generate_series(1, 7) n`)
	require.NoError(t, err)
	figures := map[string][2]int64{"h1.test": {5, 3}, "h2.test": {9, 1}, "h3.test": {5, 7}, "h4.test": {0, 0}, "h7.test": {20, 20}}
	var rows []store.HostEvidenceRow
	for host, f := range figures {
		v := strconv.FormatInt(f[0], 10)
		rows = append(rows, store.HostEvidenceRow{EvidenceRaw: store.EvidenceRaw{Key: host, MeasuredSince: time.Now(), Networks: []string{"eip155:8453"},
			Transactions24h: f[0], Transactions7d: f[0], Transactions30d: f[0], Volume24h: v, Volume7d: v, Volume30d: v,
			Payers24h: f[1], Payers7d: f[1], Payers30d: f[1]}, SendersJSON: []byte("[]")})
	}
	require.NoError(t, store.HostEvidenceSave(ctx, db.Pool, rows, nil, time.Now()))
	byVolume := []string{"h2.test", "h1.test", "h3.test", "h4.test", "h5.test", "h6.test"}
	byPayers := []string{"h3.test", "h1.test", "h2.test", "h4.test", "h5.test", "h6.test"}
	for _, tc := range []struct {
		sort, q, evidence string
		want              []string
	}{
		{"volume_24h", "", "", byVolume},
		{"volume_7d", "", "", byVolume},
		{"volume_30d", "", "", byVolume},
		{"transactions_30d", "", "", byVolume},
		{"payers_30d", "", "", byPayers},
		{"volume_30d", "", "e.payers_30d >= 1", []string{"h2.test", "h1.test", "h3.test"}},
		{"payers_30d", "", "e.payers_30d >= 3", []string{"h3.test", "h1.test"}},
		{"volume_30d", "h3", "", []string{"h3.test"}},
		{"volume_30d", "h6", "", []string{"h6.test"}},
	} {
		for limit := 1; limit <= len(tc.want)+1; limit++ {
			hosts, err := store.HostList(ctx, db.Pool, &store.HostListParams{Sort: tc.sort, Q: tc.q, Evidence: tc.evidence, Limit: limit})
			require.NoError(t, err)
			var got []string
			for _, h := range hosts {
				got = append(got, h.Host)
			}
			require.Equal(t, tc.want[:min(limit, len(tc.want))], got, "%+v, limit %d", tc, limit)
		}
	}
}
