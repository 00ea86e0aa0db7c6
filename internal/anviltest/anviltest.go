// Package anviltest runs anvil, foundry's EVM node (pinned in compat/ and
// installed by `go tool task npm`), for tests that settle payments on a chain
// that is not ours: Base's chain id, blocks every few seconds, and the
// project's USDC and Multicall3 placed at their Base addresses with the
// development accounts funded.
//
// A Node is a real process on a loopback port; Restart stops it and starts it
// again from the state it dumped, as a node operator's restart does.
package anviltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402/devchain"
)

// ChainID is Base's chain id, which the node answers by default.
const ChainID = 8453

// Config configures a Node. The zero value is Base's shape: chain id 8453,
// 2-second blocks of 30M gas.
type Config struct {
	// BlockTime is the time between blocks. Defaults to 2 s; a negative
	// value mines a block for each transaction as it arrives.
	BlockTime time.Duration
	// GasLimit is the block gas limit. Defaults to anvil's 30,000,000.
	GasLimit uint64
	// Alloc replaces the accounts placed at start (code, storage, balance).
	// Defaults to devchain.ContractAlloc: DevUSDC at the Base USDC address,
	// minted to the ten development accounts, and DevMulticall at
	// Multicall3's address.
	Alloc types.GenesisAlloc
	// USDC is what each development account is minted when Alloc is nil.
	// Defaults to 1,000,000 USDC.
	USDC *big.Int
}

// Node is a running anvil.
type Node struct {
	// URL is the node's JSON-RPC endpoint on loopback.
	URL string
	// Client is a client of URL, closed with the node.
	Client *ethclient.Client
	// RPC is the raw RPC client under Client, for anvil's own methods.
	RPC *rpc.Client

	t     testing.TB
	bin   string
	cfg   Config
	port  int
	state string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *bytes.Buffer
}

// Binary returns the path of compat's anvil, found from the working
// directory up, or an error saying how to install it.
func Binary() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		bin := filepath.Join(dir, "compat", "node_modules", "@foundry-rs", "anvil-linux-amd64", "bin", "anvil")
		if st, err := os.Stat(bin); err == nil {
			if st.Mode()&0o111 == 0 {
				return "", fmt.Errorf("%s is not executable: run `go tool task npm` (it sets the run bit)", bin)
			}
			return bin, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("anvil is not installed in compat/node_modules: run `go tool task npm`")
		}
		dir = parent
	}
}

// Start starts anvil for t, places the contracts and funds the development
// accounts; the node is stopped when t ends.
func Start(t testing.TB, cfg *Config) *Node {
	t.Helper()
	bin, err := Binary()
	require.NoError(t, err)
	n := &Node{t: t, bin: bin, state: filepath.Join(t.TempDir(), "state.json")}
	if cfg != nil {
		n.cfg = *cfg
	}
	if n.cfg.BlockTime == 0 {
		n.cfg.BlockTime = 2 * time.Second
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	n.port = ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	n.URL = "http://127.0.0.1:" + strconv.Itoa(n.port)

	n.start(false)
	t.Cleanup(n.stop)
	n.place()
	// Calls at the genesis block run with a clock of zero: every
	// authorization would be "not yet valid". A first block sets it.
	require.NoError(t, n.Mine(context.Background()))
	return n
}

// start runs the process and waits until it answers; with load it starts
// from the state the last stop dumped.
func (n *Node) start(load bool) {
	t := n.t
	t.Helper()
	args := []string{
		"--host", "127.0.0.1", "--port", strconv.Itoa(n.port),
		"--chain-id", strconv.Itoa(ChainID),
		"--mnemonic", devchain.Mnemonic, "--accounts", "10",
		"--dump-state", n.state,
		"--silent",
	}
	if n.cfg.BlockTime > 0 {
		// anvil takes whole seconds here; sub-second block times are not
		// Base's shape and no test needs them.
		secs := max(1, int(n.cfg.BlockTime/time.Second))
		args = append(args, "--block-time", strconv.Itoa(secs))
	}
	if n.cfg.GasLimit > 0 {
		args = append(args, "--gas-limit", strconv.FormatUint(n.cfg.GasLimit, 10))
	}
	if load {
		args = append(args, "--load-state", n.state)
	}
	cmd := exec.Command(n.bin, args...)
	stderr := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	require.NoError(t, cmd.Start(), "start anvil")
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	n.mu.Lock()
	n.cmd, n.exited, n.stderr = cmd, exited, stderr
	n.mu.Unlock()

	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := rpc.Dial(n.URL)
		if err == nil {
			client := ethclient.NewClient(c)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			id, err := client.ChainID(ctx)
			cancel()
			if err == nil {
				require.Equal(t, int64(ChainID), id.Int64())
				n.RPC, n.Client = c, client
				return
			}
			c.Close()
		}
		select {
		case <-exited:
			t.Fatalf("anvil exited at start: %s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("anvil did not answer on %s within 30 s: %s", n.URL, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// place puts the contracts' code and storage at their addresses.
func (n *Node) place() {
	t := n.t
	t.Helper()
	alloc := n.cfg.Alloc
	if alloc == nil {
		usdc := n.cfg.USDC
		if usdc == nil {
			usdc = new(big.Int).Mul(big.NewInt(1_000_000), big.NewInt(1_000_000))
		}
		mints := map[common.Address]*big.Int{}
		var deployer common.Address
		for i := range 10 {
			key, err := devchain.DeriveKey(devchain.Mnemonic, uint32(i))
			require.NoError(t, err)
			addr := crypto.PubkeyToAddress(key.PublicKey)
			if i == devchain.DeployerAccount {
				deployer = addr
			}
			mints[addr] = usdc
		}
		config := *params.AllDevChainProtocolChanges
		config.ChainID = big.NewInt(ChainID)
		var err error
		alloc, err = devchain.ContractAlloc(&config, deployer, mints)
		require.NoError(t, err)
	}
	ctx := context.Background()
	for addr, acct := range alloc {
		if len(acct.Code) > 0 {
			require.NoError(t, n.RPC.CallContext(ctx, nil, "anvil_setCode", addr, hexutil.Bytes(acct.Code)))
		}
		for slot, v := range acct.Storage {
			require.NoError(t, n.RPC.CallContext(ctx, nil, "anvil_setStorageAt", addr, slot, v))
		}
		if acct.Balance != nil && acct.Balance.Sign() > 0 {
			require.NoError(t, n.RPC.CallContext(ctx, nil, "anvil_setBalance", addr, (*hexutil.Big)(acct.Balance)))
		}
	}
}

// Restart stops the node, which dumps its state, and starts it again on the
// same port from that state. Transactions still in its pool are lost, as
// they are when a node restarts without persisting its pool.
func (n *Node) Restart() {
	n.t.Helper()
	n.stop()
	n.start(true)
}

// Stop stops the node (dumping its state) without starting it again; the
// port stays reserved for Start.
func (n *Node) Stop() { n.stop() }

// Resume starts a stopped node again from its dumped state.
func (n *Node) Resume() {
	n.t.Helper()
	n.start(true)
}

func (n *Node) stop() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	if n.Client != nil {
		n.Client.Close()
	}
	// SIGTERM lets anvil write --dump-state.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Call calls one of the node's RPC methods (anvil_*, evm_*, txpool_*).
func (n *Node) Call(ctx context.Context, result any, method string, args ...any) error {
	return n.RPC.CallContext(ctx, result, method, args...)
}

// TxPoolStatus is the node's count of pending and queued transactions; a
// queued one waits behind a nonce gap.
type TxPoolStatus struct {
	Pending hexutil.Uint64 `json:"pending"`
	Queued  hexutil.Uint64 `json:"queued"`
}

// TxPool returns the node's txpool_status.
func (n *Node) TxPool(ctx context.Context) (TxPoolStatus, error) {
	var st TxPoolStatus
	err := n.Call(ctx, &st, "txpool_status")
	return st, err
}

// Mine mines one block now.
func (n *Node) Mine(ctx context.Context) error {
	return n.Call(ctx, nil, "evm_mine")
}
