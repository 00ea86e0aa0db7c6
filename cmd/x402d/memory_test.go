package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/stretchr/testify/require"
)

// TestDevchainDataDir runs `x402d devchain` with DEVCHAIN_DATA_DIR and
// PPROF_ADDR: the chain keeps its blocks and state in a directory of its
// own there, removed when it stops, and the process serves its heap profile.
// Unset, DEVCHAIN_DATA_DIR is the system's temporary directory.
func TestDevchainDataDir(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, os.TempDir(), cfg.DevchainDataDir)
	require.Empty(t, cfg.PprofAddr)

	ctx, cancel := context.WithCancel(context.Background())
	dir, rpc, prof := t.TempDir(), freeAddr(t), freeAddr(t)
	env := map[string]string{"DEVCHAIN_DATA_DIR": dir, "DEVCHAIN_RPC_ADDR": rpc, "PPROF_ADDR": prof, "LOG_LEVEL": "warn"}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"devchain"}, func(k string) string { return env[k] }, io.Discard, io.Discard, nil)
	}()
	t.Cleanup(cancel)

	var client *ethclient.Client
	require.Eventually(t, func() bool {
		c, err := ethclient.DialContext(ctx, "http://"+rpc)
		if err != nil {
			return false
		}
		if _, err := c.ChainID(ctx); err != nil {
			c.Close()
			return false
		}
		client = c
		return true
	}, 30*time.Second, 50*time.Millisecond, "the devchain did not answer")
	defer client.Close()
	own, err := filepath.Glob(filepath.Join(dir, "x402d-devchain-*"))
	require.NoError(t, err)
	require.Len(t, own, 1, "the chain's own directory")
	chaindata, err := filepath.Glob(filepath.Join(own[0], "*", "chaindata"))
	require.NoError(t, err)
	require.Len(t, chaindata, 1, "the chain's database on disk")

	resp, err := http.Get("http://" + prof + "/debug/pprof/heap?gc=1&debug=1")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "# HeapAlloc = ")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("x402d devchain did not stop")
	}
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left, "the chain's directory is removed when it stops")
}
