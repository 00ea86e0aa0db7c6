package index

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
)

// TestHostDetailBounded: a host listing more services than a page holds
// gets the cheapest servicesLimit of them on its page (JSON and HTML),
// which says how many there are.
func TestHostDetailBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.Schema(ctx, t)
	n := servicesLimit + 25
	items := make([]map[string]any, n)
	for i := range items {
		items[i] = item(fmt.Sprintf("https://many.example/api/%04d", i), strconv.Itoa(1000*(n-i)))
	}
	src := httptest.NewServer(&listing{items: items})
	defer src.Close()
	c := NewCrawler(&CrawlerConfig{Pool: db.Pool, Sources: []string{src.URL}, PagesPerRun: 100, Gap: -1})
	require.NoError(t, c.FullPass(ctx, nil))

	d, err := NewReader(db.Pool, nil).HostDetail(ctx, "many.example")
	require.NoError(t, err)
	require.Equal(t, n, d.Host.Services)
	require.Equal(t, servicesLimit, len(d.Services))
	require.Equal(t, servicesLimit, d.ServicesLimit)
	require.Equal(t, fmt.Sprintf("https://many.example/api/%04d", n-1), d.Services[0].Resource, "the cheapest first")

	page, err := NewHTMLPage()
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, page.RenderHost(&buf, d, time.Now()))
	require.Equal(t, servicesLimit, strings.Count(buf.String(), `<tr class="service">`))
	require.Contains(t, buf.String(), fmt.Sprintf("The cheapest %d of %d services.", servicesLimit, n))
}
