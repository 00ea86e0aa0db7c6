package devchain_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm/channel"
)

func TestDeriveKey(t *testing.T) {
	t.Parallel()
	// The well-known addresses of the standard development mnemonic, as
	// Hardhat and Anvil list them.
	want := map[uint32]string{
		0: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
		1: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
		8: "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",
		9: "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720",
	}
	for i, addr := range want {
		key, err := devchain.DeriveKey(devchain.Mnemonic, i)
		require.NoError(t, err)
		require.Equal(t, addr, crypto.PubkeyToAddress(key.PublicKey).Hex(), "account %d", i)
	}
	_, err := devchain.DeriveKey(devchain.Mnemonic, 1<<31)
	require.Error(t, err)
}

func TestChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Now()
	chain, err := devchain.New(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, chain.Close()) })
	t.Logf("devchain started in %s", time.Since(start))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- chain.Serve(serveCtx, ln) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-served)
	})
	url := "http://" + ln.Addr().String()
	remote, err := ethclient.DialContext(ctx, url)
	require.NoError(t, err)
	t.Cleanup(remote.Close)

	token, err := contracts.Load(contracts.DevUSDC)
	require.NoError(t, err)
	call := func(t *testing.T, method string, args ...any) []any {
		t.Helper()
		input, err := token.ABI.Pack(method, args...)
		require.NoError(t, err)
		out, err := remote.CallContract(ctx, ethereum.CallMsg{To: &devchain.USDC, Data: input}, nil)
		require.NoError(t, err)
		res, err := token.ABI.Unpack(method, out)
		require.NoError(t, err)
		return res
	}

	t.Run("ChainIDOverHTTP", func(t *testing.T) {
		id, err := remote.ChainID(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(8453), id.Int64())
		require.Equal(t, "eip155:8453", chain.Network())
	})

	t.Run("TokenAtBaseUSDCAddress", func(t *testing.T) {
		code, err := remote.CodeAt(ctx, devchain.USDC, nil)
		require.NoError(t, err)
		require.NotEmpty(t, code)
		require.Equal(t, "USD Coin", call(t, "name")[0])
		require.Equal(t, "USDC", call(t, "symbol")[0])
		require.Equal(t, "2", call(t, "version")[0])
		require.Equal(t, uint8(6), call(t, "decimals")[0])
		require.Equal(t, chain.Account(devchain.DeployerAccount).Address, call(t, "minter")[0])
		// eip712Domain (ERC-5267) reports the domain the contract signs
		// with: the real address and chain id, not the construction's.
		domain := call(t, "eip712Domain")
		require.Equal(t, "USD Coin", domain[1])
		require.Equal(t, "2", domain[2])
		require.Equal(t, int64(8453), domain[3].(*big.Int).Int64())
		require.Equal(t, devchain.USDC, domain[4])
	})

	t.Run("ChannelContractsAtCanonicalAddresses", func(t *testing.T) {
		for addr, name := range map[common.Address]string{
			channel.SettlementAddress: contracts.BatchSettlement, channel.CollectorAddress: contracts.ERC3009DepositCollector,
		} {
			a, err := contracts.Load(name)
			require.NoError(t, err)
			code, err := remote.CodeAt(ctx, addr, nil)
			require.NoError(t, err)
			require.Equal(t, a.DeployedBytecode, code, name)
		}
		settlement, err := contracts.Load(contracts.BatchSettlement)
		require.NoError(t, err)
		input, err := settlement.ABI.Pack("DOMAIN_SEPARATOR")
		require.NoError(t, err)
		out, err := remote.CallContract(ctx, ethereum.CallMsg{To: &channel.SettlementAddress, Data: input}, nil)
		require.NoError(t, err)
		require.Equal(t, channel.DomainSeparator(chain.ChainID()), common.BytesToHash(out), "the domain of this chain and address")
		collector, err := contracts.Load(contracts.ERC3009DepositCollector)
		require.NoError(t, err)
		input, err = collector.ABI.Pack("x402BatchSettlement")
		require.NoError(t, err)
		out, err = remote.CallContract(ctx, ethereum.CallMsg{To: &channel.CollectorAddress, Data: input}, nil)
		require.NoError(t, err)
		require.Equal(t, channel.SettlementAddress, common.BytesToAddress(out))
	})

	t.Run("AccountsFunded", func(t *testing.T) {
		accounts := chain.Accounts()
		require.Len(t, accounts, 10)
		million := big.NewInt(1_000_000_000_000)
		for _, a := range accounts {
			require.Equal(t, 0, million.Cmp(call(t, "balanceOf", a.Address)[0].(*big.Int)), a.Address.Hex())
			wei, err := remote.BalanceAt(ctx, a.Address, nil)
			require.NoError(t, err)
			require.Positive(t, wei.Sign())
		}
		total := call(t, "totalSupply")[0].(*big.Int)
		require.Equal(t, 0, new(big.Int).Mul(million, big.NewInt(10)).Cmp(total))
	})

	t.Run("SentTransactionIsMined", func(t *testing.T) {
		from := chain.Account(3)
		to := common.HexToAddress("0x000000000000000000000000000000000000bEEF")
		input, err := token.ABI.Pack("transfer", to, big.NewInt(1234))
		require.NoError(t, err)
		nonce, err := remote.PendingNonceAt(ctx, from.Address)
		require.NoError(t, err)
		head, err := remote.HeaderByNumber(ctx, nil)
		require.NoError(t, err)
		tip, err := remote.SuggestGasTipCap(ctx)
		require.NoError(t, err)
		tx, err := types.SignNewTx(from.Key, types.LatestSignerForChainID(chain.ChainID()), &types.DynamicFeeTx{
			ChainID: chain.ChainID(), Nonce: nonce, GasTipCap: tip,
			GasFeeCap: new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(2)), tip),
			Gas:       estimateGas(t, remote, from.Address, input), To: &devchain.USDC, Data: input,
		})
		require.NoError(t, err)
		require.NoError(t, remote.SendTransaction(ctx, tx))
		// No Commit: the chain mines on arrival.
		var receipt *types.Receipt
		require.Eventually(t, func() bool {
			receipt, err = remote.TransactionReceipt(ctx, tx.Hash())
			return err == nil
		}, 5*time.Second, 5*time.Millisecond)
		require.Equal(t, types.ReceiptStatusSuccessful, receipt.Status)
		require.Equal(t, int64(1234), call(t, "balanceOf", to)[0].(*big.Int).Int64())
	})

	t.Run("RawJSONRPC", func(t *testing.T) {
		// Wallets speak plain JSON-RPC, including batches and CORS.
		body := `[{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]},{"jsonrpc":"2.0","id":2,"method":"net_version","params":[]},{"jsonrpc":"2.0","id":3,"method":"eth_blockNumber","params":[]},{"jsonrpc":"2.0","id":4,"method":"eth_maxPriorityFeePerGas","params":[]},{"jsonrpc":"2.0","id":5,"method":"admin_nodeInfo","params":[]}]`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", "http://localhost:5173")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, "*", resp.Header.Get("Access-Control-Allow-Origin"))
		var out []struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		require.Len(t, out, 5)
		require.JSONEq(t, `"0x2105"`, string(out[0].Result))
		require.JSONEq(t, `"8453"`, string(out[1].Result))
		require.True(t, bytes.HasPrefix(out[2].Result, []byte(`"0x`)))
		require.Nil(t, out[3].Error)
		require.NotNil(t, out[4].Error, "admin namespace is not served")
	})
}

func estimateGas(t *testing.T, c *ethclient.Client, from common.Address, input []byte) uint64 {
	t.Helper()
	gas, err := c.EstimateGas(context.Background(), ethereum.CallMsg{From: from, To: &devchain.USDC, Data: input})
	require.NoError(t, err)
	t.Logf("estimated gas %d", gas)
	return gas
}

func TestChain_BlocksKeepWallClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	chain, err := devchain.New(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, chain.Close()) })
	// Transactions sent one after another are each mined in a block of
	// their own at once, many in the same second, and no block's timestamp
	// runs ahead of the wall clock (proof-of-stake rules would put twenty
	// quick blocks twenty seconds ahead).
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	var last uint64
	start := time.Now()
	const n = 20
	for range n {
		receipt, err := chain.Transact(ctx, chain.Account(7), &to, big.NewInt(1), nil)
		require.NoError(t, err)
		require.Greater(t, receipt.BlockNumber.Uint64(), last, "each transaction waits for its own block")
		last = receipt.BlockNumber.Uint64()
		head, err := chain.Client().HeaderByHash(ctx, receipt.BlockHash)
		require.NoError(t, err)
		require.LessOrEqual(t, head.Time, uint64(time.Now().Unix()), "block %d is ahead of the wall clock", head.Number)
	}
	elapsed := time.Since(start)
	t.Logf("%d blocks mined one after another in %s", n, elapsed)
	require.Less(t, elapsed, 5*time.Second, "blocks are not limited to one a second")
}

func TestChain_Automine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	chain, err := devchain.New(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, chain.Close()) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go func() { _ = chain.Serve(serveCtx, ln) }()
	remote, err := ethclient.DialContext(ctx, "http://"+ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(remote.Close)

	// Many transactions sent at once over HTTP, from several accounts,
	// are all mined without anyone committing.
	const perAccount = 40
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	start := time.Now()
	var hashes []common.Hash
	head, err := remote.HeaderByNumber(ctx, nil)
	require.NoError(t, err)
	for _, a := range chain.Accounts()[1:6] {
		nonce, err := remote.PendingNonceAt(ctx, a.Address)
		require.NoError(t, err)
		for i := range perAccount {
			tx, err := types.SignNewTx(a.Key, types.LatestSignerForChainID(chain.ChainID()), &types.DynamicFeeTx{
				ChainID: chain.ChainID(), Nonce: nonce + uint64(i), GasTipCap: big.NewInt(1),
				GasFeeCap: new(big.Int).Mul(head.BaseFee, big.NewInt(2)), Gas: 21_000, To: &to, Value: big.NewInt(1),
			})
			require.NoError(t, err)
			require.NoError(t, remote.SendTransaction(ctx, tx))
			hashes = append(hashes, tx.Hash())
		}
	}
	for _, h := range hashes {
		require.Eventually(t, func() bool {
			r, err := remote.TransactionReceipt(ctx, h)
			return err == nil && r.Status == types.ReceiptStatusSuccessful
		}, 10*time.Second, time.Millisecond)
	}
	t.Logf("%d transfers sent over HTTP mined in %s", len(hashes), time.Since(start))
}

// TestChain_AutomineBurst sends thousands of transactions at once in
// process: the pool announces them in more events than a subscriber buffers
// while the miner waits for the pool, and every one must still be mined.
func TestChain_AutomineBurst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	chain, err := devchain.New(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, chain.Close()) })
	client := chain.Client()
	head, err := client.HeaderByNumber(ctx, nil)
	require.NoError(t, err)

	const perAccount = 400
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	signer := types.LatestSignerForChainID(chain.ChainID())
	accounts := chain.Accounts()[1:9]
	hashes := make([][]common.Hash, len(accounts))
	var g errgroup.Group
	for i, a := range accounts {
		g.Go(func() error {
			for n := range uint64(perAccount) {
				tx, err := types.SignNewTx(a.Key, signer, &types.DynamicFeeTx{
					ChainID: chain.ChainID(), Nonce: n, GasTipCap: big.NewInt(1),
					GasFeeCap: new(big.Int).Mul(head.BaseFee, big.NewInt(4)), Gas: 21_000, To: &to, Value: big.NewInt(1),
				})
				if err != nil {
					return err
				}
				if err := client.SendTransaction(ctx, tx); err != nil {
					return err
				}
				hashes[i] = append(hashes[i], tx.Hash())
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	mined, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, hs := range hashes {
		for _, h := range hs {
			r, err := chain.WaitMined(mined, h)
			require.NoError(t, err, "transaction %s not mined in time", h.Hex())
			require.Equal(t, types.ReceiptStatusSuccessful, r.Status)
		}
	}
}

// TestChain_ViemWallet uses the chain over HTTP with viem, as wallets and
// browser pages do: chain id, a token read, a transfer sent with viem's own
// gas and fee estimation, and its receipt.
func TestChain_ViemWallet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	compat, err := filepath.Abs("../../compat")
	require.NoError(t, err)
	_, err = exec.LookPath("node")
	require.NoError(t, err, "node (v20+) is needed for the wallet test; run: go tool task npm (or install Node.js)")
	_, err = os.Stat(filepath.Join(compat, "node_modules", "viem"))
	require.NoError(t, err, "viem is missing; run: go tool task npm")

	chain, err := devchain.New(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, chain.Close()) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go func() { _ = chain.Serve(serveCtx, ln) }()

	to := common.HexToAddress("0x000000000000000000000000000000000000C0DE")
	cmd := exec.CommandContext(ctx, "node", "testdata/viem_wallet.mjs", "http://"+ln.Addr().String(), to.Hex())
	cmd.Env = append(os.Environ(), "COMPAT_DIR="+compat)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node viem_wallet.mjs failed (run: go tool task npm): %s", stderr.String())
	require.JSONEq(t, `{"chainId":8453,"name":"USD Coin","status":"success","balance":"4242"}`, stdout.String())
	got, err := chain.BalanceOf(ctx, to)
	require.NoError(t, err)
	require.Equal(t, int64(4242), got.Int64())
}

// TestChain_FinalAtOnce checks that the chain tags its newest block safe
// and finalized, from its genesis on: it never reorganises, so that a
// client waiting for a node's safe or finalized block (the relayer's
// default finality on Base) holds each block final as soon as it is mined.
func TestChain_FinalAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	chain, err := devchain.New(ctx, &devchain.Config{DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, chain.Close()) })
	client := chain.Client()
	tagged := func(t *testing.T, tag rpc.BlockNumber) *types.Header {
		t.Helper()
		h, err := client.HeaderByNumber(ctx, big.NewInt(int64(tag)))
		require.NoError(t, err, "%s block", tag)
		return h
	}
	for _, tag := range []rpc.BlockNumber{rpc.SafeBlockNumber, rpc.FinalizedBlockNumber} {
		require.Zero(t, tagged(t, tag).Number.Uint64(), "the genesis is %s before any block is mined", tag)
	}
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	for range 3 {
		receipt, err := chain.Transact(ctx, chain.Account(7), &to, big.NewInt(1), nil)
		require.NoError(t, err)
		head, err := client.HeaderByNumber(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, receipt.BlockHash, head.Hash())
		// Tagged right after the block is inserted: a receipt may be read
		// a moment before.
		for _, tag := range []rpc.BlockNumber{rpc.SafeBlockNumber, rpc.FinalizedBlockNumber} {
			require.Eventually(t, func() bool { return tagged(t, tag).Hash() == head.Hash() }, 5*time.Second, time.Millisecond,
				"the %s block is the head", tag)
		}
	}
}
