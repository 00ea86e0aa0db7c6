package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/model/modeltest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402/evm/channel"
)

// startChannelService starts `serve` on the devchain, as
// startDevchainServiceIn does, and returns its base URL, the devchain's
// JSON-RPC URL, a client of it and the service's database.
func startChannelService(ctx context.Context, t *testing.T) (base, rpcURL string, chain *ethclient.Client, db *dbtest.DB) {
	t.Helper()
	db = dbtest.Schema(ctx, t)
	fake := modeltest.NewServer(t)
	rpc := freeAddr(t)
	env := map[string]string{
		"DATABASE_URL": db.URL, "DB_MAX_CONNS": testMaxConns, "LISTEN_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn",
		"DEVCHAIN_RPC_ADDR": rpc, "GEMINI_API_KEY": modeltest.APIKey, "GEMINI_BASE_URL": fake.URL,
	}
	base = startInProcessWith(ctx, t, "serve", func(k string) string { return env[k] }, &options{})
	chain, err := ethclient.DialContext(ctx, "http://"+rpc)
	require.NoError(t, err)
	t.Cleanup(chain.Close)
	return base, "http://" + rpc, chain, db
}

// batchStep is one step's result as compat/batch_pay.mjs reports it.
type batchStep struct {
	Status     int
	Body       string
	Error      string
	Type       string
	Sent       string
	PaymentID  string
	Settlement *struct {
		Success     bool
		ErrorReason string
		Transaction string
		Network     string
		Payer       string
		Amount      string
		Extra       *channel.ResponseExtra
	}
}

// payWithBatchClient runs compat/batch_pay.mjs (the official
// batch-settlement client) against base as development account payer,
// each deposit deposit atomic units ("" for the client's sizing).
func payWithBatchClient(ctx context.Context, t *testing.T, base, rpcURL string, payer int, deposit string, steps []map[string]any) []batchStep {
	t.Helper()
	compat := compatDir(t, "@x402/fetch", "@x402/evm", "@x402/extensions")
	raw, err := json.Marshal(steps)
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, "node", filepath.Join(compat, "batch_pay.mjs"), base, string(raw))
	cmd.Env = append(os.Environ(), "RPC_URL="+rpcURL, "PAYER="+strconv.Itoa(payer))
	if deposit != "" {
		cmd.Env = append(cmd.Env, "DEPOSIT="+deposit)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node batch_pay.mjs: %s", stderr.String())
	var out struct{ Steps []batchStep }
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	require.Len(t, out.Steps, len(steps))
	return out.Steps
}

// channelOf returns the one channel row of payer in db.
func channelOf(ctx context.Context, t *testing.T, db *dbtest.DB, payer common.Address) *store.Channel {
	t.Helper()
	var id []byte
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT channel_id FROM channels WHERE payer = $1", payer.Bytes()).Scan(&id))
	c, err := store.ChannelGet(ctx, db.Pool, devchainNetwork, common.BytesToHash(id))
	require.NoError(t, err)
	return c
}

// TestOfficialBatchClientPays has the official batch-settlement client
// (compat/batch_pay.mjs) pay regex calls of `serve` on the devchain: a
// deposit (sent on chain once the operation succeeded), vouchers (charged
// off chain, transaction ""), a top-up when the channel's balance runs
// out, a voucher from a client that lost its state (it recovers through the
// corrective 402 and is charged once), and a cooperative refund of what
// was not charged. The channel's record and the chain agree.
func TestOfficialBatchClientPays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, rpcURL, chain, db := startChannelService(ctx, t)
	const account = 3
	payer := devAddress(t, account)
	before := usdcBalance(ctx, t, chain, payer)
	regex := map[string]any{"op": "regex", "body": `{"pattern":"\\d+","text":"a1b22","flags":"g"}`}
	steps := payWithBatchClient(ctx, t, base, rpcURL, account, "30000", []map[string]any{
		regex, regex, regex, regex, {"forget": true}, regex, {"refund": "regex"},
	})
	wantTypes := []string{"deposit", "voucher", "voucher", "deposit", "", "voucher", "refund"}
	for i, s := range steps {
		if i == 4 {
			continue
		}
		require.Equal(t, 200, s.Status, "step %d: %s %s", i, s.Body, s.Error)
		require.NotNil(t, s.Settlement, "step %d", i)
		require.True(t, s.Settlement.Success, "step %d", i)
		if i < 6 {
			require.Equal(t, wantTypes[i], s.Type, "step %d", i)
			require.Equal(t, "10000", s.Settlement.Extra.ChargedAmount, "step %d", i)
			require.Equal(t, s.Sent, s.Settlement.Extra.ChannelState.ChargedCumulativeAmount, "step %d", i)
		}
		if s.Type == "voucher" {
			require.Empty(t, s.Settlement.Transaction, "step %d: a voucher sends nothing", i)
		} else {
			require.Len(t, s.Settlement.Transaction, 66, "step %d", i)
		}
	}
	require.Equal(t, "50000", steps[5].Sent, "the client that lost its state signed on the seller's charge")

	c := channelOf(ctx, t, db, payer)
	require.Equal(t, "50000", c.State.Charged.String())
	require.Equal(t, "50000", c.State.Signed.String())
	require.Empty(t, c.BusyCall)
	onchain, err := channel.ReadState(ctx, chain, c.State.ChannelID, nil)
	require.NoError(t, err)
	require.Equal(t, "1", onchain.RefundNonce.String())
	require.Equal(t, onchain.Balance.String(), c.State.OnChain.Balance.String())
	require.Equal(t, "50000", onchain.Balance.String(), "the refund left what was charged")
	require.Equal(t, big.NewInt(50_000), new(big.Int).Sub(before, usdcBalance(ctx, t, chain, payer)), "deposits less the refund")
	require.Equal(t, "10000", steps[6].Settlement.Amount)

	events, err := store.EventListByStream(ctx, db.Pool, store.ChannelStream(devchainNetwork, c.State.ChannelID))
	require.NoError(t, err)
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	require.Equal(t, []string{store.EventChannelOpened, store.EventChannelCharged, store.EventChannelCharged, store.EventChannelCharged,
		store.EventChannelDeposited, store.EventChannelCharged, store.EventChannelCharged, store.EventChannelRefunded}, types)
}
