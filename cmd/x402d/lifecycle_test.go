package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPartsStopInReverse: the parts of the payment step stop as one, the
// last added first, a run's goroutine waited for before the parts added
// before it are closed; stopping twice does nothing.
func TestPartsStopInReverse(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var order []string
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, s)
	}
	var p parts
	p.closes(func() { record("first closed") })
	started := make(chan struct{})
	p.runs(t.Context(), func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		record("run ended")
	})
	p.closes(func() { record("last closed") })
	<-started
	p.Stop()
	require.Equal(t, []string{"last closed", "run ended", "first closed"}, order)
	p.Stop()
	require.Len(t, order, 3, "stopping twice does nothing")
}

// TestPartsRunOutlivesItsContext: a run of the parts ends at Stop, not when
// the context it was started with does (the devchain serves the processes
// that stop after it).
func TestPartsRunOutlivesItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	var p parts
	runCtx := make(chan context.Context, 1)
	ended := make(chan struct{})
	p.runs(ctx, func(ctx context.Context) {
		runCtx <- ctx
		<-ctx.Done()
		close(ended)
	})
	run := <-runCtx
	cancel()
	require.NoError(t, run.Err(), "the run's context ended with the one it was started with")
	p.Stop()
	require.Error(t, run.Err())
	select {
	case <-ended:
	default:
		t.Fatal("Stop returned before the run ended")
	}
}

// TestSideServer: a side server serves its handler once Start returns, and
// Stop shuts it down and waits for it: a request in flight is answered
// before Stop returns, its Done channel is then closed and its address
// refuses connections. An address in use fails Start, naming the setting.
func TestSideServer(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.DiscardHandler)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("pong")) })
	entered, release := make(chan struct{}), make(chan struct{})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = w.Write([]byte("done"))
	})
	srv := &sideServer{name: "test", setting: "TEST_ADDR", addr: "127.0.0.1:0", handler: mux, logger: logger}
	require.NoError(t, srv.Start(t.Context()))
	addr := srv.Addr().String()
	resp, err := http.Get("http://" + addr + "/ping")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, "pong", string(body))

	busy := &sideServer{name: "busy", setting: "TEST_ADDR", addr: addr, handler: mux, logger: logger}
	require.ErrorContains(t, busy.Start(t.Context()), "TEST_ADDR "+addr)

	slow := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/slow")
		if err != nil {
			slow <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		slow <- string(b)
	}()
	<-entered
	stopped := make(chan struct{})
	go func() {
		srv.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a request was in flight")
	default:
	}
	close(release)
	<-stopped
	require.Equal(t, "done", <-slow, "the request in flight is answered")
	select {
	case <-srv.Done():
	default:
		t.Fatal("Stop returned before the server's goroutines ended")
	}
	_, err = net.Dial("tcp", addr)
	require.Error(t, err, "the address is no longer listened on")
}
