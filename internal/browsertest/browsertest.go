// Package browsertest starts the system Chromium, headless, for tests that
// drive pages. It never downloads a browser: without the system Chromium the
// test fails saying how to install it.
package browsertest

import (
	"os"
	"os/exec"
	"testing"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/stretchr/testify/require"
)

// New starts a headless system Chromium with a profile of its own and
// returns a connected browser, closed when the test ends.
func New(t testing.TB) *rod.Browser {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		bin = "/usr/bin/chromium"
	}
	_, err = os.Stat(bin)
	require.NoError(t, err, "the browser tests need the system Chromium: run `go tool task chromium` (apt-get install -y chromium)")
	// The flags keep Chromium off the network it would reach by itself
	// (this machine refuses it) and fit a container (no sandbox, no /dev/shm).
	l := launcher.New().Bin(bin).UserDataDir(t.TempDir()).Leakless(false).Headless(true).
		Set("no-sandbox").Set("disable-gpu").Set("disable-background-networking").Set("disable-component-update").
		Set("disable-sync").Set("no-first-run").Set("disable-dev-shm-usage")
	u, err := l.Launch()
	require.NoError(t, err)
	b := rod.New().ControlURL(u)
	require.NoError(t, b.Connect())
	t.Cleanup(func() {
		_ = b.Close()
		l.Kill()
		l.Cleanup()
	})
	return b
}
