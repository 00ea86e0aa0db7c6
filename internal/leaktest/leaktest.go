// Package leaktest fails tests that leave goroutines behind. It looks with
// go.uber.org/goleak, for longer than goleak does alone (a loaded machine
// takes a while to let a stopped goroutine end), after closing the idle
// keep-alive connections of the default HTTP transport (pooled by a client
// that is done, they are not goroutines the code under test left).
package leaktest

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Grace is how long the goroutines of the code under test have to end
// after it stopped.
const Grace = 10 * time.Second

// processWide are the goroutines libraries start once, on first use, for
// the life of the process: not left behind by a test.
var processWide = []goleak.Option{
	// go-ethereum's sender cache (core.SenderCacher), started by the
	// first block the devchain processes.
	goleak.IgnoreTopFunction("github.com/ethereum/go-ethereum/core.(*txSenderCacher).cache"),
}

// Snapshot records the goroutines running now, which Left and Check do
// not count.
type Snapshot struct{ ignore []goleak.Option }

// settle waits until the number of goroutines has not changed for a
// while (at most a few seconds): the goroutines that what the caller just
// started starts in turn are then running, and are counted in a snapshot.
func settle() {
	const still, most = 200 * time.Millisecond, 5 * time.Second
	n, since, deadline := runtime.NumGoroutine(), time.Now(), time.Now().Add(most)
	for time.Since(since) < still && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		if m := runtime.NumGoroutine(); m != n {
			n, since = m, time.Now()
		}
	}
}

// Now returns a Snapshot of the goroutines running now, once their number
// has settled.
func Now() Snapshot {
	settle()
	return Snapshot{ignore: append([]goleak.Option{goleak.IgnoreCurrent()}, processWide...)}
}

// Left returns an error naming the goroutines running beyond s's once
// Grace has passed, and nil as soon as none does.
func (s Snapshot) Left() error {
	deadline := time.Now().Add(Grace)
	for {
		if t, ok := http.DefaultTransport.(*http.Transport); ok {
			t.CloseIdleConnections()
		}
		err := goleak.Find(s.ignore...)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("goroutines left behind: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Main runs a package's tests for its TestMain: setup (when not nil) makes
// what they share and returns what closes it, closed once they ran; then
// the run fails if goroutines that were not running before setup are
// left: the tests, parallel ones included, left them behind. It returns
// the exit code.
//
//	func TestMain(m *testing.M) { os.Exit(leaktest.Main(m, setup)) }
func Main(m *testing.M, setup func() (close func() error, err error)) int {
	before := Now()
	var closeFn func() error
	if setup != nil {
		var err error
		if closeFn, err = setup(); err != nil {
			fmt.Fprintln(os.Stderr, "leaktest: setup:", err)
			return 1
		}
	}
	// What setup started is running in full before the tests: a test's
	// Check does not count it.
	settle()
	code := m.Run()
	if closeFn != nil {
		if err := closeFn(); err != nil {
			fmt.Fprintln(os.Stderr, "leaktest: close:", err)
		}
	}
	if code != 0 {
		return code
	}
	if err := before.Left(); err != nil {
		fmt.Fprintln(os.Stderr, "leaktest:", err)
		return 1
	}
	return 0
}

// Check fails t if goroutines it started are still running at its end
// (after its later cleanups, which run first). Call it first in a test that
// does not run in parallel with others: their goroutines would count.
func Check(t testing.TB) {
	t.Helper()
	before := Now()
	t.Cleanup(func() {
		if err := before.Left(); err != nil {
			t.Error(err)
		}
	})
}
