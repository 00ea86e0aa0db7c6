package evm

import (
	"context"
	"io"
	"log/slog"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
)

// nonceNode is a node whose count of the relayer's mined transactions is
// count; during, when set, runs while a read is in flight.
type nonceNode struct {
	Backend
	count  uint64
	during func()
}

func (n *nonceNode) NonceAt(context.Context, common.Address, *big.Int) (uint64, error) {
	if n.during != nil {
		n.during()
	}
	return n.count, nil
}

// TestNonces_ReadMined reads the chain's count of mined transactions by the
// one rule: the node's answer, lower ones included (a reorganisation), but
// not lower than a count that changed while the read was in flight.
func TestNonces_ReadMined(t *testing.T) {
	t.Parallel()
	// minedTx raises the count to 8: the receipt of nonce 7 came.
	tx := types.NewTx(&types.DynamicFeeTx{Nonce: 7})
	for _, tc := range []struct {
		name   string
		known  uint64 // the count known before the read (0: none)
		node   uint64
		during bool // a receipt raises the count to 8 during the read
		want   uint64
	}{
		{name: "First", node: 5, want: 5},
		{name: "Higher", known: 5, node: 9, want: 9},
		{name: "Reorganised", known: 9, node: 4, want: 4},
		{name: "RaisedDuringRead", known: 5, node: 5, during: true, want: 8},
		{name: "HigherThanRaised", known: 5, node: 10, during: true, want: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			node := &nonceNode{count: tc.node}
			n := &nonces{clock: clock.Real(), backend: node, logger: slog.New(slog.NewTextHandler(io.Discard, nil)), own: map[uint64]*ownTx{}}
			if tc.known > 0 {
				n.mined, n.minedKnown = tc.known, true
			}
			if tc.during {
				n.track(tx)
				node.during = func() { n.minedTx(tx.Hash()) }
			}
			got, err := n.readMined(context.Background())
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			floor, err := n.floor(context.Background())
			require.NoError(t, err)
			require.Equal(t, tc.want, floor, "the count known after the read")
		})
	}
}
