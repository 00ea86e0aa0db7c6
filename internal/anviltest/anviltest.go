// Package anviltest runs anvil, foundry's EVM node (pinned in compat/ and
// installed by `go tool task npm`), for tests that settle payments on a chain
// that is not ours: Base's chain id, blocks every few seconds, Circle's own
// USDC (FiatTokenV2_2 behind its proxy, deployed and initialized as Circle
// does) at the Base USDC address with the development accounts minted, and
// Multicall3 at its canonical address; and batch-settlement's channel and
// EIP-3009 deposit-collector contracts (contracts.BatchSettlement,
// contracts.ERC3009DepositCollector) at the canonical addresses the
// official x402 packages use.
//
// A Node is a real process on a loopback port; Restart stops it and starts it
// again from the state it dumped, as a node operator's restart does. A Proxy
// in front of it misbehaves as RPC providers do (lagging, 429, dying).
package anviltest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
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

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/internal/nodetest"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm/channel"
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
	// USDC is what each development account is minted. Defaults to
	// 1,000,000 USDC.
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
	compat, err := nodetest.Compat()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(compat, "node_modules", "@foundry-rs", "anvil-linux-amd64", "bin", "anvil")
	st, err := os.Stat(bin)
	if err != nil {
		return "", errors.New("anvil is not installed in compat/node_modules: run `go tool task npm`")
	}
	if st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not executable: run `go tool task npm` (it sets the run bit)", bin)
	}
	return bin, nil
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
	if n.cfg.GasLimit > 0 {
		// After the deployment, which needs more.
		require.NoError(t, n.Call(context.Background(), nil, "evm_setBlockGasLimit", hexutil.Uint64(n.cfg.GasLimit)))
	}
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

// ProxyAdmin is the admin of USDC's proxy on the node: an account that
// sends nothing, as Circle's proxy admin calls nothing but upgrades (the
// proxy refuses its admin any call to the token).
var ProxyAdmin = crypto.PubkeyToAddress(mustKey(11).PublicKey)

// place deploys and initializes Circle's USDC as Circle does, puts
// Multicall3's code at its canonical address, the test wallet factory at
// devchain.WalletFactory, and the batch-settlement contracts at theirs.
func (n *Node) place() {
	t := n.t
	t.Helper()
	ctx := context.Background()
	usdc := n.cfg.USDC
	if usdc == nil {
		usdc = new(big.Int).Mul(big.NewInt(1_000_000), big.NewInt(1_000_000))
	}
	for addr, name := range map[common.Address]string{
		devchain.Multicall: contracts.Multicall3, devchain.WalletFactory: contracts.DevWalletFactory,
		channel.SettlementAddress: contracts.BatchSettlement, channel.CollectorAddress: contracts.ERC3009DepositCollector,
	} {
		a, err := contracts.Load(name)
		require.NoError(t, err)
		// No constructor and no immutables: the runtime code is the account.
		require.NoError(t, n.RPC.CallContext(ctx, nil, "anvil_setCode", addr, hexutil.Bytes(a.DeployedBytecode)))
	}

	token, err := contracts.Load(contracts.FiatTokenV2_2)
	require.NoError(t, err)
	proxy, err := contracts.Load(contracts.FiatTokenProxy)
	require.NoError(t, err)
	lib, err := contracts.Load(contracts.SignatureChecker)
	require.NoError(t, err)
	owner := newSender(t, n, mustKey(devchain.DeployerAccount))

	// The library, the implementation linked to it, and the proxy, each
	// deployed by a transaction of the owner, as Circle's deploy script does.
	libAddr := owner.deploy(lib.Bytecode, 2_000_000)
	linked, err := token.Link(contracts.SignatureChecker, libAddr)
	require.NoError(t, err)
	impl := owner.deploy(linked, 8_000_000)
	proxyCode, err := proxy.Deployment(impl)
	require.NoError(t, err)
	deployed := owner.deploy(proxyCode, 2_000_000)
	owner.mined()

	// The proxy at the Base USDC address: its code and the two slots its
	// constructor wrote (implementation and admin, the zeppelinos slots).
	code, err := n.Client.CodeAt(ctx, deployed, nil)
	require.NoError(t, err)
	require.NotEmpty(t, code, "USDC's proxy was not deployed")
	require.NoError(t, n.RPC.CallContext(ctx, nil, "anvil_setCode", devchain.USDC, hexutil.Bytes(code)))
	for _, slot := range []common.Hash{
		crypto.Keccak256Hash([]byte("org.zeppelinos.proxy.implementation")),
		crypto.Keccak256Hash([]byte("org.zeppelinos.proxy.admin")),
	} {
		v, err := n.Client.StorageAt(ctx, deployed, slot, nil)
		require.NoError(t, err)
		require.NotEqual(t, common.Hash{}, common.BytesToHash(v))
		require.NoError(t, n.RPC.CallContext(ctx, nil, "anvil_setStorageAt", devchain.USDC, slot, common.BytesToHash(v)))
	}

	// Circle's sequence: hand the proxy to its admin, initialize through it
	// (v1, v2, v2.1, v2.2), make the owner a minter, mint.
	call := func(to common.Address, abiOf *contracts.Artifact, method string, args ...any) {
		input, err := abiOf.ABI.Pack(method, args...)
		require.NoError(t, err, method)
		owner.send(&to, input, 500_000)
	}
	call(devchain.USDC, proxy, "changeAdmin", ProxyAdmin)
	call(devchain.USDC, token, "initialize", "USD Coin", "USDC", "USD", uint8(6), owner.addr, owner.addr, owner.addr, owner.addr)
	call(devchain.USDC, token, "initializeV2", "USD Coin")
	// Circle sends tokens locked in the contract to a lost-and-found
	// account; there are none here.
	call(devchain.USDC, token, "initializeV2_1", owner.addr)
	call(devchain.USDC, token, "initializeV2_2", []common.Address{}, "USDC")
	total := new(big.Int).Mul(usdc, big.NewInt(10))
	call(devchain.USDC, token, "configureMinter", owner.addr, total)
	for i := range 10 {
		call(devchain.USDC, token, "mint", crypto.PubkeyToAddress(mustKey(i).PublicKey), usdc)
	}
	owner.mined()
}

func mustKey(i int) *ecdsa.PrivateKey {
	key, err := devchain.DeriveKey(devchain.Mnemonic, uint32(i))
	if err != nil {
		panic(err)
	}
	return key
}

// sender sends a development account's transactions one after another
// without waiting, and waits for all of them at once (mined mines a block
// at once rather than waiting for the node's clock).
type sender struct {
	t     testing.TB
	n     *Node
	key   *ecdsa.PrivateKey
	addr  common.Address
	nonce uint64
	sent  []common.Hash
}

func newSender(t testing.TB, n *Node, key *ecdsa.PrivateKey) *sender {
	t.Helper()
	addr := crypto.PubkeyToAddress(key.PublicKey)
	nonce, err := n.Client.PendingNonceAt(context.Background(), addr)
	require.NoError(t, err)
	return &sender{t: t, n: n, key: key, addr: addr, nonce: nonce}
}

// send signs and sends a transaction; to nil creates a contract.
func (s *sender) send(to *common.Address, data []byte, gas uint64) {
	s.t.Helper()
	tx := types.NewTx(&types.DynamicFeeTx{
		ChainID: big.NewInt(ChainID), Nonce: s.nonce, To: to, Data: data, Gas: gas,
		GasTipCap: big.NewInt(params.GWei), GasFeeCap: big.NewInt(100 * params.GWei),
	})
	signed, err := types.SignTx(tx, types.LatestSignerForChainID(big.NewInt(ChainID)), s.key)
	require.NoError(s.t, err)
	require.NoError(s.t, s.n.Client.SendTransaction(context.Background(), signed))
	s.nonce++
	s.sent = append(s.sent, signed.Hash())
}

// deploy sends a contract creation and returns the contract's address.
func (s *sender) deploy(code []byte, gas uint64) common.Address {
	addr := crypto.CreateAddress(s.addr, s.nonce)
	s.send(nil, code, gas)
	return addr
}

// mined mines a block and requires every transaction sent to have
// succeeded.
func (s *sender) mined() {
	s.t.Helper()
	ctx := context.Background()
	require.NoError(s.t, s.n.Mine(ctx))
	for _, h := range s.sent {
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, err := s.n.Client.TransactionReceipt(ctx, h)
			if err == nil {
				require.Equal(s.t, types.ReceiptStatusSuccessful, r.Status, "transaction %s of the USDC deployment reverted", h)
				break
			}
			require.True(s.t, time.Now().Before(deadline), "transaction %s of the USDC deployment not mined: %v", h, err)
			time.Sleep(20 * time.Millisecond)
		}
	}
	s.sent = nil
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

// PID returns the process id of the running anvil, or 0 when it is
// stopped.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
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
	nodetest.Terminate(cmd.Process, exited, 10*time.Second)
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

// Transact sends a transaction of key to to with data, mines a block and
// returns its receipt, failing t if it reverted.
func (n *Node) Transact(key *ecdsa.PrivateKey, to common.Address, data []byte) *types.Receipt {
	n.t.Helper()
	s := newSender(n.t, n, key)
	s.send(&to, data, 1_000_000)
	h := s.sent[0]
	s.mined()
	r, err := n.Client.TransactionReceipt(context.Background(), h)
	require.NoError(n.t, err)
	return r
}

// Deploy sends code (creation code and constructor arguments) from key,
// mines a block and returns the contract's address, failing t if the
// creation reverted.
func (n *Node) Deploy(key *ecdsa.PrivateKey, code []byte) common.Address {
	n.t.Helper()
	s := newSender(n.t, n, key)
	addr := s.deploy(code, 3_000_000)
	s.mined()
	return addr
}

// Mine mines one block now.
func (n *Node) Mine(ctx context.Context) error {
	return n.Call(ctx, nil, "evm_mine")
}

// usdcNameSlot is the storage slot of FiatToken's name: after Ownable's
// owner, Pausable's pauser and paused, and Blacklistable's blacklister and
// blacklisted.
const usdcNameSlot = 4

// RenameUSDC sets the name() of the node's USDC, shorter than 32 bytes, in
// its storage: a token whose EIP-712 domain is not the one a table says.
func (n *Node) RenameUSDC(ctx context.Context, name string) error {
	if len(name) >= 32 {
		return fmt.Errorf("rename USDC: %q is not a short string", name)
	}
	// A short string is stored left-aligned, its length times two in the
	// last byte.
	var value common.Hash
	copy(value[:], name)
	value[31] = byte(2 * len(name))
	return n.Call(ctx, nil, "anvil_setStorageAt", devchain.USDC, common.BigToHash(big.NewInt(usdcNameSlot)), value)
}
