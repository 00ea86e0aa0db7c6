package evm

import (
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"
)

func TestUnpaidCache(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	payer := unpaidKey{network: "eip155:8453", asset: common.HexToAddress("0xA"), payer: common.HexToAddress("0x1")}
	other := payer
	other.payer = common.HexToAddress("0x2")
	otherNet := payer
	otherNet.network = "eip155:1"
	testCases := []struct {
		name  string
		key   unpaidKey
		value int64
		at    time.Duration
		want  bool
	}{
		{name: "nok to pay, same amount at once", key: payer, value: 10_000, at: 0, want: true},
		{name: "nok to pay, a larger amount", key: payer, value: 20_000, at: time.Second, want: true},
		{name: "may pay, a smaller amount", key: payer, value: 9_999, at: time.Second, want: false},
		{name: "may pay, after the time", key: payer, value: 10_000, at: 4 * time.Second, want: false},
		{name: "may pay, another payer", key: other, value: 10_000, at: 0, want: false},
		{name: "may pay, another network", key: otherNet, value: 10_000, at: 0, want: false},
	}
	c := newUnpaidCache(4*time.Second, 100)
	c.remember(payer, big.NewInt(10_000), t0)
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, c.cannotPay(tc.key, big.NewInt(tc.value), t0.Add(tc.at)))
		})
	}
}

func TestUnpaidCache_Bounded(t *testing.T) {
	t.Parallel()
	c := newUnpaidCache(time.Minute, 1000)
	now := time.Now()
	for i := range 100_000 {
		c.remember(unpaidKey{network: "eip155:8453", payer: common.BigToAddress(big.NewInt(int64(i)))}, big.NewInt(1), now)
	}
	require.LessOrEqual(t, c.entries.Len(), 1000)
}

func TestRevertsForBalance(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		msg  string
		want bool
	}{
		{"ERC20: transfer amount exceeds balance", true},
		{"ERC20InsufficientBalance", true},
		{"FiatTokenV2: invalid signature", false},
		{"FiatTokenV2: authorization is used or canceled", false},
		{"execution reverted", false},
	}
	for _, tc := range testCases {
		require.Equal(t, tc.want, revertsForBalance(tc.msg), tc.msg)
	}
}
