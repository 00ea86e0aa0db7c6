// Package svmtest runs a Solana JSON-RPC node built on LiteSVM
// (compat/svm_node.mjs, with npm litesvm pinned in compat/ and installed by
// `go tool task npm`) for tests that verify and settle payments on the real
// SVM runtime: the SPL Token, Token-2022, Memo and Associated Token Account
// programs, signatures verified, a block every 400 ms whose blockhash is
// valid for 150 blocks, USDC's mint at its mainnet address with 6 decimals
// and development payers funded with SOL and USDC.
//
// A Node is a real process on a loopback port; Restart stops it and starts it
// again from the state it saved, as a node operator's restart does.
package svmtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/nodetest"
	"github.com/x402d/x402d/x402"
)

// USDC is the mint of USDC on Solana mainnet, which the node holds.
var USDC = solana.MustPublicKeyFromBase58("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v")

// MaxProcessingAge is how many blocks a blockhash stays valid, as on
// mainnet.
const MaxProcessingAge = 150

// Config configures a Node. The zero value is mainnet's shape.
type Config struct {
	// SlotTime is the time between blocks. Defaults to 400 ms.
	SlotTime time.Duration
	// Payers is the number of development payers funded. Defaults to 10.
	Payers int
	// USDC is what each development payer holds, in atomic units.
	// Defaults to 1,000,000 USDC.
	USDC uint64
}

// Node is a running LiteSVM node.
type Node struct {
	// URL is the node's JSON-RPC endpoint on loopback.
	URL string

	t      testing.TB
	script string
	cfg    Config
	port   int
	state  string
	client *http.Client

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *bytes.Buffer
}

// Script returns the path of compat/svm_node.mjs, found from the working
// directory up, once node and the npm packages it needs are installed, or an
// error saying how to install them.
func Script() (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", errors.New("node (v20+) is needed for the Solana node: apt-get install -y nodejs npm, then go tool task npm")
	}
	compat, err := nodetest.Compat()
	if err != nil {
		return "", err
	}
	script := filepath.Join(compat, "svm_node.mjs")
	if _, err := os.Stat(script); err != nil {
		return "", errors.New("compat/svm_node.mjs not found in the module")
	}
	if _, err := os.Stat(filepath.Join(compat, "node_modules", "litesvm")); err != nil {
		return "", errors.New("litesvm is not installed in compat/node_modules: run `go tool task npm`")
	}
	return script, nil
}

// Start starts the node for t; it is stopped when t ends.
func Start(t testing.TB, cfg *Config) *Node {
	t.Helper()
	script, err := Script()
	require.NoError(t, err)
	n := &Node{t: t, script: script, state: filepath.Join(t.TempDir(), "svm-state.json"), client: &http.Client{Timeout: 30 * time.Second}}
	if cfg != nil {
		n.cfg = *cfg
	}
	if n.cfg.SlotTime <= 0 {
		n.cfg.SlotTime = 400 * time.Millisecond
	}
	if n.cfg.Payers <= 0 {
		n.cfg.Payers = 10
	}
	if n.cfg.USDC == 0 {
		n.cfg.USDC = 1_000_000_000_000
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	n.port = ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	n.URL = "http://127.0.0.1:" + strconv.Itoa(n.port)
	n.start()
	t.Cleanup(n.stop)
	return n
}

// start runs the process and waits until it listens.
func (n *Node) start() {
	t := n.t
	t.Helper()
	cmd := exec.Command("node", n.script,
		"--port", strconv.Itoa(n.port),
		"--slot-ms", strconv.FormatInt(n.cfg.SlotTime.Milliseconds(), 10),
		"--payers", strconv.Itoa(n.cfg.Payers),
		"--usdc", strconv.FormatUint(n.cfg.USDC, 10),
		"--state", n.state)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start(), "start node svm_node.mjs")
	exited := make(chan struct{})
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(exited) }()
	n.mu.Lock()
	n.cmd, n.exited, n.stderr = cmd, exited, stderr
	n.mu.Unlock()
	select {
	case line := <-ready:
		var hello struct{ URL string }
		if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.URL != n.URL {
			<-exited
			t.Fatalf("svm_node.mjs did not start on %s: %q %s", n.URL, line, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("svm_node.mjs did not listen on %s within 60 s: %s", n.URL, stderr.String())
	}
}

// stop ends the process; it saves its state first.
func (n *Node) stop() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	nodetest.Terminate(cmd.Process, exited, 10*time.Second)
}

// Restart stops the node and starts it again on the same port from the
// state it saved: accounts, blocks and transaction statuses survive.
func (n *Node) Restart() {
	n.t.Helper()
	n.stop()
	n.start()
}

// Stop stops the node until Resume (a node that is down).
func (n *Node) Stop() { n.stop() }

// Resume starts a stopped node again from its saved state.
func (n *Node) Resume() {
	n.t.Helper()
	n.start()
}

// RPCError is an error answer of the node.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("RPC error %d: %s", e.Code, e.Message) }

// Call makes one JSON-RPC call and decodes its result into result (nil:
// ignored). An error answer is a *RPCError.
func (n *Node) Call(ctx context.Context, result any, method string, params ...any) error {
	if params == nil {
		params = []any{}
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	defer resp.Body.Close()
	var out struct {
		Result json.RawMessage `json:"result"`
		Error  *RPCError       `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	if out.Error != nil {
		return fmt.Errorf("%s: %w", method, out.Error)
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(out.Result, result); err != nil {
		return fmt.Errorf("%s: result: %w", method, err)
	}
	return nil
}

// Fund adds lamports to owner and gives it an associated token account of
// mint (USDC when zero) holding amount, replacing any it had; it returns
// that account.
func (n *Node) Fund(ctx context.Context, owner solana.PublicKey, lamports, amount uint64, mint solana.PublicKey) solana.PublicKey {
	n.t.Helper()
	if mint.IsZero() {
		mint = USDC
	}
	var out struct{ ATA string }
	require.NoError(n.t, n.Call(ctx, &out, "litesvm_fund", map[string]any{
		"address": owner.String(), "lamports": lamports, "amount": strconv.FormatUint(amount, 10), "mint": mint.String(),
	}))
	return solana.MustPublicKeyFromBase58(out.ATA)
}

// FundSOL adds lamports to owner, with no token account.
func (n *Node) FundSOL(ctx context.Context, owner solana.PublicKey, lamports uint64) {
	n.t.Helper()
	require.NoError(n.t, n.Call(ctx, nil, "litesvm_fund", map[string]any{"address": owner.String(), "lamports": lamports}))
}

// Mint places a mint of decimals at address, owned by tokenProgram (SPL
// Token or Token-2022).
func (n *Node) Mint(ctx context.Context, address, tokenProgram solana.PublicKey, decimals uint8) {
	n.t.Helper()
	require.NoError(n.t, n.Call(ctx, nil, "litesvm_mint", map[string]any{
		"address": address.String(), "tokenProgram": tokenProgram.String(), "decimals": decimals,
	}))
}

// TokenBalance returns the amount held by the token account account.
func (n *Node) TokenBalance(ctx context.Context, account solana.PublicKey) uint64 {
	n.t.Helper()
	var out struct {
		Value struct{ Amount string }
	}
	require.NoError(n.t, n.Call(ctx, &out, "getTokenAccountBalance", account.String(), map[string]string{"commitment": "confirmed"}))
	v, err := strconv.ParseUint(out.Value.Amount, 10, 64)
	require.NoError(n.t, err)
	return v
}

// Balance returns the lamports of address.
func (n *Node) Balance(ctx context.Context, address solana.PublicKey) uint64 {
	n.t.Helper()
	var out struct{ Value uint64 }
	require.NoError(n.t, n.Call(ctx, &out, "getBalance", address.String(), map[string]string{"commitment": "confirmed"}))
	return out.Value
}

// Blockhash is a blockhash with the last block height it may land at.
type Blockhash struct {
	Hash                 solana.Hash
	LastValidBlockHeight uint64
}

// LatestBlockhash returns the newest blockhash at commitment.
func (n *Node) LatestBlockhash(ctx context.Context, commitment string) Blockhash {
	n.t.Helper()
	var out struct {
		Value struct {
			Blockhash            string
			LastValidBlockHeight uint64
		}
	}
	require.NoError(n.t, n.Call(ctx, &out, "getLatestBlockhash", map[string]string{"commitment": commitment}))
	return Blockhash{Hash: solana.MustHashFromBase58(out.Value.Blockhash), LastValidBlockHeight: out.Value.LastValidBlockHeight}
}

// BlockHeight returns the block height at commitment.
func (n *Node) BlockHeight(ctx context.Context, commitment string) uint64 {
	n.t.Helper()
	var h uint64
	require.NoError(n.t, n.Call(ctx, &h, "getBlockHeight", map[string]string{"commitment": commitment}))
	return h
}

// DropAnswers makes the node lose its next count answers to method after
// doing the work (the connection closes), as a flaky provider does.
func (n *Node) DropAnswers(ctx context.Context, method string, count int) {
	n.t.Helper()
	require.NoError(n.t, n.Call(ctx, nil, "litesvm_drop", map[string]any{"method": method, "count": count}))
}

// IgnoreSends makes the node answer its next count sendTransaction calls
// with the signature and land nothing, as a transaction a leader dropped.
func (n *Node) IgnoreSends(ctx context.Context, count int) {
	n.t.Helper()
	require.NoError(n.t, n.Call(ctx, nil, "litesvm_ignore", map[string]any{"count": count}))
}

// Pause makes the node produce no block for d: transactions sent meanwhile
// are processed but none is confirmed until blocks resume.
func (n *Node) Pause(ctx context.Context, d time.Duration) {
	n.t.Helper()
	require.NoError(n.t, n.Call(ctx, nil, "litesvm_pause", map[string]any{"ms": d.Milliseconds()}))
}

// HoldSends makes the node hold each of the next count sendTransaction
// calls for d before it handles them: the sender waits for its answer
// meanwhile, and Held names them.
func (n *Node) HoldSends(ctx context.Context, count int, d time.Duration) {
	n.t.Helper()
	require.NoError(n.t, n.Call(ctx, nil, "litesvm_hold", map[string]any{"count": count, "ms": d.Milliseconds()}))
}

// Held returns the signatures of the sendTransaction calls the node holds
// now (HoldSends).
func (n *Node) Held(ctx context.Context) []string {
	n.t.Helper()
	var held []string
	require.NoError(n.t, n.Call(ctx, &held, "litesvm_held"))
	return held
}

// PayerKey returns development payer i's key: an ed25519 key whose seed is
// SHA-256("x402d svm development payer <i>"), as the node derives it. The
// first Config.Payers of them hold SOL and USDC.
func PayerKey(i int) solana.PrivateKey {
	seed := sha256.Sum256([]byte("x402d svm development payer " + strconv.Itoa(i)))
	return solana.PrivateKey(ed25519.NewKeyFromSeed(seed[:]))
}

// ATA returns the associated token account of owner for mint under the
// SPL Token program.
func ATA(t testing.TB, owner, mint solana.PublicKey) solana.PublicKey {
	t.Helper()
	a, _, err := solana.FindAssociatedTokenAddress(owner, mint)
	require.NoError(t, err)
	return a
}

// Programs of a payment transaction.
var (
	computeBudgetProgram = solana.MustPublicKeyFromBase58("ComputeBudget111111111111111111111111111111")
	tokenProgram         = solana.MustPublicKeyFromBase58("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA")
	memoProgram          = solana.MustPublicKeyFromBase58("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr")
)

// PaymentTransaction returns the transaction the official client builds to
// pay req from payer (USDC of the SPL Token program): compute limit,
// compute price, TransferChecked to the associated account of req.PayTo,
// memo; signed by payer, the fee payer's slot (extra.feePayer) left empty.
// It names the blockhash extra.recentBlockhash, else the node's newest.
func (n *Node) PaymentTransaction(ctx context.Context, req *x402.Requirements, payer solana.PrivateKey, memo string) *solana.Transaction {
	n.t.Helper()
	tx, err := n.paymentTransaction(ctx, req, payer, memo)
	require.NoError(n.t, err)
	return tx
}

// paymentTransaction is PaymentTransaction returning its error, for
// goroutines other than the test's.
func (n *Node) paymentTransaction(ctx context.Context, req *x402.Requirements, payer solana.PrivateKey, memo string) (*solana.Transaction, error) {
	var extra x402.SVMExtra
	if err := json.Unmarshal(req.Extra, &extra); err != nil {
		return nil, fmt.Errorf("extra: %w", err)
	}
	var blockhash solana.Hash
	if extra.RecentBlockhash != "" {
		h, err := solana.HashFromBase58(extra.RecentBlockhash)
		if err != nil {
			return nil, fmt.Errorf("extra.recentBlockhash: %w", err)
		}
		blockhash = h
	} else {
		var out struct{ Value struct{ Blockhash string } }
		if err := n.Call(ctx, &out, "getLatestBlockhash", map[string]string{"commitment": "confirmed"}); err != nil {
			return nil, err
		}
		h, err := solana.HashFromBase58(out.Value.Blockhash)
		if err != nil {
			return nil, fmt.Errorf("getLatestBlockhash: %w", err)
		}
		blockhash = h
	}
	amount, err := strconv.ParseUint(req.Amount, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("amount: %w", err)
	}
	mint, err := solana.PublicKeyFromBase58(req.Asset)
	if err != nil {
		return nil, fmt.Errorf("asset: %w", err)
	}
	payTo, err := solana.PublicKeyFromBase58(req.PayTo)
	if err != nil {
		return nil, fmt.Errorf("payTo: %w", err)
	}
	feePayer, err := solana.PublicKeyFromBase58(extra.FeePayer)
	if err != nil {
		return nil, fmt.Errorf("extra.feePayer: %w", err)
	}
	owner := payer.PublicKey()
	from, _, err := solana.FindAssociatedTokenAddress(owner, mint)
	if err != nil {
		return nil, err
	}
	to, _, err := solana.FindAssociatedTokenAddress(payTo, mint)
	if err != nil {
		return nil, err
	}
	transfer := binary.LittleEndian.AppendUint64([]byte{12}, amount)
	transfer = append(transfer, 6)
	ixs := []solana.Instruction{
		solana.NewInstruction(computeBudgetProgram, nil, binary.LittleEndian.AppendUint32([]byte{2}, 20_000)),
		solana.NewInstruction(computeBudgetProgram, nil, binary.LittleEndian.AppendUint64([]byte{3}, 1)),
		solana.NewInstruction(tokenProgram, solana.AccountMetaSlice{
			solana.Meta(from).WRITE(), solana.Meta(mint), solana.Meta(to).WRITE(), solana.Meta(owner).SIGNER(),
		}, transfer),
		solana.NewInstruction(memoProgram, nil, []byte(memo)),
	}
	tx, err := solana.NewTransaction(ixs, blockhash, solana.TransactionPayer(feePayer))
	if err != nil {
		return nil, fmt.Errorf("payment transaction: %w", err)
	}
	tx.Message.SetVersion(solana.MessageVersionV0)
	if _, err = tx.PartialSign(func(k solana.PublicKey) *solana.PrivateKey {
		if k == owner {
			return &payer
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("sign payment: %w", err)
	}
	return tx, nil
}

// Payer pays calls on the node as the official client does, one
// transaction per call with a memo of its own (it implements loadgen's
// Payer). Each transaction names the node's newest blockhash rather than
// the quote's, so that a payment made late in a run has its whole window.
type Payer struct {
	node *Node
	key  solana.PrivateKey
	n    atomic.Int64
}

// Payer returns a Payer paying from key (one of PayerKey's, funded).
func (n *Node) Payer(key solana.PrivateKey) *Payer { return &Payer{node: n, key: key} }

// Pay returns the PAYMENT-SIGNATURE header of a new payment of the Solana
// option of paymentRequired (a PAYMENT-REQUIRED header value).
func (p *Payer) Pay(ctx context.Context, paymentRequired string) (string, error) {
	var pr x402.PaymentRequired
	if err := x402.DecodeHeader(paymentRequired, &pr); err != nil {
		return "", fmt.Errorf("PAYMENT-REQUIRED: %w", err)
	}
	i := slices.IndexFunc(pr.Accepts, func(r x402.Requirements) bool { return r.Network == x402.SolanaMainnet })
	if i < 0 {
		return "", errors.New("no Solana option in the quote")
	}
	req := pr.Accepts[i]
	var extra x402.SVMExtra
	if err := json.Unmarshal(req.Extra, &extra); err != nil {
		return "", fmt.Errorf("extra: %w", err)
	}
	extra.RecentBlockhash, extra.LastValidBlockHeight = "", 0
	raw, err := json.Marshal(extra)
	if err != nil {
		return "", err
	}
	unpinned := req
	unpinned.Extra = raw
	tx, err := p.node.paymentTransaction(ctx, &unpinned, p.key, fmt.Sprintf("%s-%d", p.key.PublicKey(), p.n.Add(1)))
	if err != nil {
		return "", err
	}
	b64, err := tx.ToBase64()
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(x402.ExactSVMPayload{Transaction: b64})
	if err != nil {
		return "", err
	}
	return x402.EncodeHeader(x402.PaymentPayload{X402Version: x402.Version, Accepted: req, Payload: payload})
}

// SignatureStatus returns the status of a transaction's signature, as
// getSignatureStatuses (transaction history searched) answers it: its
// confirmation status ("" when the node does not know it) and its error
// (empty when it succeeded).
func (n *Node) SignatureStatus(ctx context.Context, signature string) (confirmation string, txErr string) {
	n.t.Helper()
	var out struct {
		Value []*struct {
			Err                json.RawMessage
			ConfirmationStatus string
		}
	}
	require.NoError(n.t, n.Call(ctx, &out, "getSignatureStatuses", []string{signature}, map[string]bool{"searchTransactionHistory": true}))
	require.Len(n.t, out.Value, 1)
	if out.Value[0] == nil {
		return "", ""
	}
	if e := string(out.Value[0].Err); e != "" && e != "null" {
		txErr = e
	}
	return out.Value[0].ConfirmationStatus, txErr
}

// PaymentHeader returns the PAYMENT-SIGNATURE header paying req with tx.
func PaymentHeader(t testing.TB, req *x402.Requirements, tx *solana.Transaction) string {
	t.Helper()
	b64, err := tx.ToBase64()
	require.NoError(t, err)
	payload, err := json.Marshal(x402.ExactSVMPayload{Transaction: b64})
	require.NoError(t, err)
	h, err := x402.EncodeHeader(x402.PaymentPayload{X402Version: x402.Version, Accepted: *req, Payload: payload})
	require.NoError(t, err)
	return h
}

// Stats is what the node has done since its stats were last reset.
type Stats struct {
	// Seconds is the time since the reset.
	Seconds float64
	// EventLoopUtilization is the share of that time the node's single
	// thread was busy (0 to 1).
	EventLoopUtilization float64
	// Requests is the number of HTTP requests (a batch is one).
	Requests int
	// JSONMs is the time spent parsing requests and writing answers.
	JSONMs float64
	// Methods are the JSON-RPC calls by method, and "(slot)" the blocks
	// made: how many and the time spent in them.
	Methods map[string]MethodStats
}

// MethodStats is the calls of one method and the time spent in them.
type MethodStats struct {
	Calls int
	Ms    float64
}

// Stats returns what the node has done since its stats were last reset,
// and resets them when reset is set.
func (n *Node) Stats(ctx context.Context, reset bool) Stats {
	n.t.Helper()
	var s Stats
	require.NoError(n.t, n.Call(ctx, &s, "litesvm_stats", map[string]any{"reset": reset}))
	return s
}
