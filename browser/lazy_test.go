package browser

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/fetch"
)

func TestLazyStartsOnFirstRender(t *testing.T) {
	t.Parallel()
	srv := newServer(t, "127.0.0.1:0", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, `<html><body><script>document.title="lazy"</script></body></html>`)
	})
	lazy := NewLazy(&Config{
		Fetch:    fetch.New(&fetch.Config{AllowCIDRs: allowed, Resolver: testResolver{}}),
		Logger:   slog.New(slog.DiscardHandler),
		IdleWait: 500 * time.Millisecond,
	})
	require.Nil(t, lazy.pool, "nothing starts before the first Render")
	html, _, err := lazy.Render(context.Background(), srv.URL)
	require.NoError(t, err)
	require.True(t, strings.Contains(html, "<title>lazy</title>"), html)
	profile := lazy.pool.ProfileDir()
	require.NoError(t, lazy.Close())
	require.Empty(t, chromiumProcesses(profile))
	_, _, err = lazy.Render(context.Background(), srv.URL)
	require.Error(t, err, "a closed pool renders nothing")
}

func TestLazyRemembersAFailedStart(t *testing.T) {
	t.Parallel()
	lazy := NewLazy(&Config{Fetch: fetch.New(&fetch.Config{}), Bin: "/nonexistent/chromium"})
	_, _, err := lazy.Render(context.Background(), "http://example.com/")
	require.True(t, errors.Is(err, ErrNoChromium), err)
	first := lazy.failedAt
	_, _, err = lazy.Render(context.Background(), "http://example.com/")
	require.True(t, errors.Is(err, ErrNoChromium), err)
	require.Equal(t, first, lazy.failedAt, "no second start within RetryAfter")
	require.NoError(t, lazy.Close())
}
