package index

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
)

// TestScale crawls a simulated source of 20,000 items over 1,500 hosts,
// answers q queries over it (p50 under 20 ms), and measures the liveness of
// the 1,500 hosts with the real 10 s timeout while a tenth of them never
// answer (within 3 minutes).
func TestScale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	srv, client := sellers(t)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	const nItems, nHosts = 20_000, 1_500
	items := make([]map[string]any, nItems)
	for i := range items {
		h := i % nHosts
		name := fmt.Sprintf("live%04d", h)
		if h%10 == 0 {
			name = fmt.Sprintf("never%04d", h) // a tenth never answer
		}
		items[i] = item(fmt.Sprintf("http://%s.test:%s/svc/%d", name, port, i), fmt.Sprint(1000+i), fmt.Sprintf("service %d of %s", i, name))
	}
	src := httptest.NewServer(&listing{items: items})
	defer src.Close()

	start := time.Now()
	c := NewCrawler(CrawlerConfig{Pool: db.Pool, Sources: []string{src.URL}, PageSize: 500, Gap: -1})
	require.NoError(t, c.FullPass(ctx, nil))
	crawl := time.Since(start)

	r := NewReader(db.Pool)
	s, err := r.Summary(ctx)
	require.NoError(t, err)
	require.Equal(t, nItems, s.ServicesIndexed)
	require.Equal(t, nHosts, s.HostsKnown)

	var lat []time.Duration
	for i := range 50 {
		q := fmt.Sprintf("live%04d", (i*37)%nHosts)
		if i%5 == 0 {
			q = "service 1"
		}
		t0 := time.Now()
		hosts, err := r.Hosts(ctx, q, []string{"services", "price", "latency", "host", "checked"}[i%5], 50)
		lat = append(lat, time.Since(t0))
		require.NoError(t, err)
		require.NotEmpty(t, hosts, q)
	}
	slices.Sort(lat)
	p50 := lat[len(lat)/2]
	require.Less(t, p50, 20*time.Millisecond, "hosts q p50")

	start = time.Now()
	p := NewProber(ProberConfig{Pool: db.Pool, Fetch: client, Concurrency: 150, Timeout: 10 * time.Second})
	rep, err := p.ProbeAll(ctx)
	require.NoError(t, err)
	probe := time.Since(start)
	require.Equal(t, ProbeReport{Probed: nHosts, Live: nHosts - nHosts/10, Dead: nHosts / 10}, *rep)
	require.Less(t, probe, 3*time.Minute)
	t.Logf("crawl of %d items over %d hosts: %s; hosts q p50 %s p max %s; liveness of %d hosts (10%% time out at 10 s): %s",
		nItems, nHosts, crawl.Round(time.Millisecond), p50, lat[len(lat)-1], nHosts, probe.Round(time.Millisecond))
}
