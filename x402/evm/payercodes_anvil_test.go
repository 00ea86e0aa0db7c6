package evm_test

import (
	"context"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/anviltest"
	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/x402/evm"
)

// codeReads is a chain client that counts the reads of code.
type codeReads struct {
	evm.Backend
	n atomic.Int32
}

func (c *codeReads) CodeAt(ctx context.Context, account common.Address, block *big.Int) ([]byte, error) {
	c.n.Add(1)
	return c.Backend.CodeAt(ctx, account, block)
}

// TestAnvil_PayerCodeOncePerBlock: while the newest block the relayer
// read is fresh, a payer's code is read once for that block, however many
// of its settlements ask; a payer that gets code (an EIP-7702
// delegation) is seen with code from the first block the relayer reads
// after it; with no fresh head (no settlement awaiting a receipt) the
// code is read each time.
func TestAnvil_PayerCodeOncePerBlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := anviltest.Start(t, &anviltest.Config{BlockTime: -1})
	backend := &codeReads{Backend: node.Client}
	clk := clock.NewFake(time.Now())
	const maxPoll = 50 * time.Millisecond
	hasCode, sawHead := evm.PayerCodes(backend, clk, maxPoll)
	payer := common.HexToAddress("0x00000000000000000000000000000000000007a1")
	requireCode := func(want bool, reads int32, msg string) {
		t.Helper()
		has, err := hasCode(ctx, payer)
		require.NoError(t, err)
		require.Equal(t, want, has, msg)
		require.Equal(t, reads, backend.n.Load(), msg)
	}

	head, err := node.Client.BlockNumber(ctx)
	require.NoError(t, err)
	sawHead(head)
	for range 3 {
		requireCode(false, 1, "one read for the block")
	}

	// A delegation (EIP-7702: 0xef0100 and the delegate's address) in the
	// next block.
	delegation := append(hexutil.MustDecode("0xef0100"), common.HexToAddress("0xde1e9a7e").Bytes()...)
	require.NoError(t, node.Call(ctx, nil, "anvil_setCode", payer, hexutil.Encode(delegation)))
	require.NoError(t, node.Mine(ctx))
	sawHead(head + 1)
	for range 2 {
		requireCode(true, 2, "read again for the block after")
	}

	clk.Advance(maxPoll)
	requireCode(true, 3, "no fresh head: read each time")
	requireCode(true, 4, "no fresh head: read each time")
}
