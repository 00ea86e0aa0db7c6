package evm_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// TestAnvil_EndpointsLying settles on anvil through three endpoints,
// proxies on loopback in front of the one node, one of which lies: it
// reports a receipt for a transaction the node never saw, and a head a
// hundred blocks ahead of the node's. Neither is believed, as no other
// endpoint reports it: the made-up receipt is not found, the head is the
// node's, and payments settle through the endpoints with their real
// receipts, which the honest endpoints agree on.
func TestAnvil_EndpointsLying(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAnvil(t, &anviltest.Config{BlockTime: time.Second})
	liar, honest, other := anviltest.NewProxy(t, b.node.URL), anviltest.NewProxy(t, b.node.URL), anviltest.NewProxy(t, b.node.URL)
	e, err := ethrpc.New(ctx, &ethrpc.Config{
		Network:     "eip155:8453",
		URLs:        []string{liar.URL, honest.URL, other.URL},
		CallTimeout: time.Second,
		ProbeEvery:  200 * time.Millisecond,
		Logger:      slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(e.Stop)
	r := b.relayer(t, e)

	// A payment settled through the endpoints while they are honest: its
	// receipt is the model of the one the liar makes up.
	resp := settleAllOK(t, b.payments(t, 1), r)[0]
	real, err := b.node.Client.TransactionReceipt(ctx, common.HexToHash(resp.Transaction))
	require.NoError(t, err)
	raw, err := json.Marshal(real)
	require.NoError(t, err)
	made := common.HexToHash("0x5eed" + strings.Repeat("ab", 30))
	fake := strings.ReplaceAll(string(raw), strings.ToLower(real.TxHash.Hex()), strings.ToLower(made.Hex()))
	liar.LieReceipt(strings.ToLower(made.Hex()), json.RawMessage(fake))
	liar.Ahead.Store(100)

	_, err = e.TransactionReceipt(ctx, made)
	require.True(t, errors.Is(err, ethereum.NotFound), "a receipt one endpoint made up is not believed: %v", err)
	got, err := e.TransactionReceipt(ctx, real.TxHash)
	require.NoError(t, err, "a receipt the endpoints agree on")
	require.Equal(t, real.BlockHash, got.BlockHash)
	receipts, err := e.BlockReceipts(ctx, rpc.BlockNumberOrHashWithNumber(rpc.BlockNumber(real.BlockNumber.Int64())))
	require.NoError(t, err)
	require.NotEmpty(t, receipts)

	// The liar's head is seen, and not believed.
	require.Eventually(t, func() bool { return e.Status()[0].Head > e.Status()[1].Head+50 }, 10*time.Second, 50*time.Millisecond)
	head, err := e.BlockNumber(ctx)
	require.NoError(t, err)
	nodeHead, err := b.node.Client.BlockNumber(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, head, nodeHead, "a head only one endpoint reports is not believed")

	// Settlements go on with the liar among the endpoints.
	settleAllOK(t, b.payments(t, 3), r)
	b.requireClean(t, 4)
}
