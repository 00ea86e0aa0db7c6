package svm_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/svmtest"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/svm"
)

// TestVerifier_Deadline checks that a verified payment's ValidBefore is
// when its blockhash dies: 150 blocks of 400 ms after the block that made
// it, less the blocks made since; and its ReserveUntil when it dies at the
// latest, with a block every svm.SlowestBlockTime.
func TestVerifier_Deadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	bhs := svm.NewBlockhashes(f.node.URL, nil)
	v, err := svm.NewVerifier(&svm.VerifierConfig{FeePayer: f.feePayer.PublicKey(), Simulator: svm.NewRPCSimulator(f.node.URL, nil), Blockhashes: bhs})
	require.NoError(t, err)

	testCases := []struct {
		name      string
		blockhash func() (solana.Hash, uint64)
	}{
		{
			name: "ok, a blockhash the service handed out",
			blockhash: func() (solana.Hash, uint64) {
				bh, err := bhs.Latest(ctx)
				require.NoError(t, err)
				return bh.Hash, bh.LastValidBlockHeight
			},
		},
		{
			name: "ok, the newest finalized blockhash, as the official client fetches it",
			blockhash: func() (solana.Hash, uint64) {
				bh := f.node.LatestBlockhash(ctx, "finalized")
				return bh.Hash, bh.LastValidBlockHeight
			},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			req := f.requirement()
			p := f.parts(t, req, svm.TokenProgram)
			var last uint64
			p.blockhash, last = tc.blockhash()
			_, b64 := p.build(t)

			payment, err := v.Verify(ctx, req, paymentPayload(req, b64))
			require.NoError(t, err)
			after := time.Now()
			height := f.node.BlockHeight(ctx, "confirmed")
			// Verification saw a height between the one read before and
			// after it, a block of 400 ms each.
			require.Less(t, height, last)
			latest := after.Add(time.Duration(last-height+2) * x402.SolanaSlotTime)
			earliest := after.Add(-2 * time.Second).Add(time.Duration(last-height) * x402.SolanaSlotTime)
			require.WithinRange(t, payment.ValidBefore, earliest, latest)
			// Its reservation counts until the blockhash dies with a block
			// every other slot: from its own last valid height when the
			// service knew it, from the newest a blockhash could have
			// otherwise.
			require.WithinRange(t, payment.ReserveUntil,
				after.Add(-2*time.Second).Add(time.Duration(last-height)*svm.SlowestBlockTime),
				after.Add(time.Duration(x402.SolanaBlockhashBlocks+2)*svm.SlowestBlockTime))
			require.True(t, payment.ReserveUntil.After(payment.ValidBefore))

			// The ledger keeps it.
			raw, err := json.Marshal(payment)
			require.NoError(t, err)
			var back x402.Payment
			require.NoError(t, json.Unmarshal(raw, &back))
			require.True(t, payment.ValidBefore.Equal(back.ValidBefore))
		})
	}
}

// TestBlockhashes_Life checks the life of blockhashes on a node of fast
// blocks: the newest one lives 150 blocks, then is dead.
func TestBlockhashes_Life(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := svmtest.Start(t, &svmtest.Config{SlotTime: 10 * time.Millisecond, Payers: 1})
	bhs := svm.NewBlockhashes(node.URL, nil)
	bh, err := bhs.Latest(ctx)
	require.NoError(t, err)

	life, err := bhs.Life(ctx, bh.Hash)
	require.NoError(t, err)
	require.True(t, life.Valid)
	require.True(t, life.Known)
	require.Equal(t, bh.LastValidBlockHeight, life.LastValidBlockHeight)
	require.LessOrEqual(t, life.LastValidBlockHeight-life.Height, uint64(x402.SolanaBlockhashBlocks))

	stranger := solana.HashFromBytes([]byte("not a blockhash of this chain!!!"))
	life, err = bhs.Life(ctx, stranger)
	require.NoError(t, err)
	require.False(t, life.Valid)

	require.Eventually(t, func() bool { return node.BlockHeight(ctx, "confirmed") > bh.LastValidBlockHeight }, 20*time.Second, 20*time.Millisecond)
	life, err = bhs.Life(ctx, bh.Hash)
	require.NoError(t, err)
	require.False(t, life.Valid)
}

// TestSettler_LostSend checks that a transaction a leader dropped is sent
// again while its blockhash lives and lands once; and that one whose
// blockhash died before any send landed fails at once, charging nothing.
func TestSettler_LostSend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	settler, err := svm.NewSettler(&svm.SettlerConfig{Key: f.feePayer, URL: f.node.URL, Poll: 100 * time.Millisecond, Polls: 100})
	require.NoError(t, err)
	dest := ata(t, f.payTo, f.mint, svm.TokenProgram)
	pay := func(blockhash solana.Hash) *x402.Payment {
		req := f.requirement()
		p := f.parts(t, req, svm.TokenProgram)
		if !blockhash.IsZero() {
			p.blockhash = blockhash
		}
		_, b64 := p.build(t)
		raw, err := json.Marshal(paymentPayload(req, b64))
		require.NoError(t, err)
		return &x402.Payment{Network: x402.SolanaMainnet, Payer: f.authority.PublicKey().String(), Payload: raw}
	}

	f.node.IgnoreSends(ctx, 2)
	res, err := settler.Settle(ctx, pay(solana.Hash{}))
	require.NoError(t, err)
	require.True(t, res.Success, res.ErrorReason)
	require.Equal(t, uint64(10_000), f.node.TokenBalance(ctx, dest))

	// A node of fast blocks: the blockhash dies while every send is lost.
	fast := svmtest.Start(t, &svmtest.Config{SlotTime: 10 * time.Millisecond, Payers: 1})
	fast.FundSOL(ctx, f.feePayer.PublicKey(), 1_000_000_000)
	fast.Fund(ctx, f.authority.PublicKey(), 0, buyerBalance, solana.PublicKey{})
	fastDest := fast.Fund(ctx, f.payTo, 0, 0, solana.PublicKey{})
	fastSettler, err := svm.NewSettler(&svm.SettlerConfig{Key: f.feePayer, URL: fast.URL, Poll: 100 * time.Millisecond, Polls: 100})
	require.NoError(t, err)
	fast.IgnoreSends(ctx, 1000)
	start := time.Now()
	res, err = fastSettler.Settle(ctx, pay(fast.LatestBlockhash(ctx, "confirmed").Hash))
	require.NoError(t, err)
	require.False(t, res.Success)
	require.Equal(t, svm.ReasonTransactionFailed, res.ErrorReason)
	require.Less(t, time.Since(start), 8*time.Second, "failed once the blockhash died, not after every check")
	require.Zero(t, fast.TokenBalance(ctx, fastDest))
}
