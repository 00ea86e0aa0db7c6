package svm_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/svmtest"
	"github.com/x402d/x402d/x402/svm"
)

// TestHistory reads, from the LiteSVM node in Solana's wire format, the
// finalized signatures of a token account newest first (paged with before
// and until, a failed transaction marked) and its transactions decoded:
// a TransferChecked in a v0 transaction and a Transfer (no mint named) in
// a legacy one, each with its fee payer, its accounts' owners and mint
// from the token balances; an unknown signature is nil. The node refuses
// what a node refuses: processed, and a v0 transaction asked for without
// maxSupportedTransactionVersion.
func TestHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := svmtest.Start(t, &svmtest.Config{SlotTime: 20 * time.Millisecond, Payers: 1})
	payer, feePayer, receiver := svmtest.PayerKey(0), svmtest.PayerKey(100), svmtest.PayerKey(101).PublicKey()
	node.FundSOL(ctx, feePayer.PublicKey(), 1_000_000_000)
	to := node.Fund(ctx, receiver, 0, 0, solana.PublicKey{})
	from := svmtest.ATA(t, payer.PublicKey(), svmtest.USDC)

	send := func(fee solana.PrivateKey, ix solana.Instruction, v0, preflight bool) string {
		t.Helper()
		tx, err := solana.NewTransaction([]solana.Instruction{ix}, node.LatestBlockhash(ctx, "confirmed").Hash, solana.TransactionPayer(fee.PublicKey()))
		require.NoError(t, err)
		if v0 {
			tx.Message.SetVersion(solana.MessageVersionV0)
		}
		_, err = tx.Sign(func(k solana.PublicKey) *solana.PrivateKey {
			for _, key := range []solana.PrivateKey{fee, payer} {
				if key.PublicKey() == k {
					return &key
				}
			}
			return nil
		})
		require.NoError(t, err)
		b64, err := tx.ToBase64()
		require.NoError(t, err)
		var sig string
		require.NoError(t, node.Call(ctx, &sig, "sendTransaction", b64, map[string]any{"encoding": "base64", "skipPreflight": !preflight}))
		return sig
	}
	checked := func(amount uint64) solana.Instruction {
		return solana.NewInstruction(svm.TokenProgram, solana.AccountMetaSlice{
			solana.Meta(from).WRITE(), solana.Meta(svmtest.USDC), solana.Meta(to).WRITE(), solana.Meta(payer.PublicKey()).SIGNER(),
		}, append(binary.LittleEndian.AppendUint64([]byte{12}, amount), 6))
	}
	plain := solana.NewInstruction(svm.TokenProgram, solana.AccountMetaSlice{
		solana.Meta(from).WRITE(), solana.Meta(to).WRITE(), solana.Meta(payer.PublicKey()).SIGNER(),
	}, binary.LittleEndian.AppendUint64([]byte{3}, 5_000))

	tx1 := send(feePayer, checked(10_000), true, true)
	tx2 := send(payer, plain, false, true)
	tx3 := send(feePayer, checked(1<<62), false, false) // more than the payer holds: lands, failed
	require.Eventually(t, func() bool {
		var out struct {
			Value []*struct{ ConfirmationStatus string }
		}
		require.NoError(t, node.Call(ctx, &out, "getSignatureStatuses", []string{tx3}))
		require.NotNil(t, out.Value[0])
		return out.Value[0].ConfirmationStatus == "finalized"
	}, 30*time.Second, 10*time.Millisecond)

	h := svm.NewHistory(node.URL, nil)
	sigs, err := h.Signatures(ctx, to, "", "", 10)
	require.NoError(t, err)
	require.Len(t, sigs, 3)
	require.Equal(t, []string{tx3, tx2, tx1}, []string{sigs[0].Signature, sigs[1].Signature, sigs[2].Signature}, "newest first")
	require.True(t, sigs[0].Failed())
	require.False(t, sigs[1].Failed())
	require.NotNil(t, sigs[2].BlockTime)
	for _, tc := range []struct {
		before, until string
		limit         int
		want          []string
	}{
		{"", "", 1, []string{tx3}},
		{tx3, "", 1, []string{tx2}},
		{tx3, tx1, 10, []string{tx2}},
		{"", tx2, 10, []string{tx3}},
		{tx1, "", 10, nil},
	} {
		got, err := h.Signatures(ctx, to, tc.before, tc.until, tc.limit)
		require.NoError(t, err)
		var names []string
		for _, s := range got {
			names = append(names, s.Signature)
		}
		require.Equal(t, tc.want, names, "%+v", tc)
	}

	unknown := solana.Signature{1, 2, 3}.String()
	txs, err := h.Transactions(ctx, []string{tx1, tx2, tx3, unknown})
	require.NoError(t, err)
	require.Len(t, txs, 4)
	require.Equal(t, sigs[2].Slot, txs[0].Slot)
	require.Equal(t, time.Unix(*sigs[2].BlockTime, 0).UTC(), txs[0].BlockTime)
	require.Equal(t, feePayer.PublicKey(), txs[0].FeePayer)
	require.Equal(t, []svm.TokenTransfer{{Index: 0, Program: svm.TokenProgram, Source: from, Destination: to, Authority: payer.PublicKey(),
		Mint: svmtest.USDC, SourceOwner: payer.PublicKey(), DestinationOwner: receiver, Amount: 10_000}}, txs[0].Transfers)
	require.Equal(t, payer.PublicKey(), txs[1].FeePayer)
	require.Equal(t, []svm.TokenTransfer{{Index: 0, Program: svm.TokenProgram, Source: from, Destination: to, Authority: payer.PublicKey(),
		Mint: svmtest.USDC, SourceOwner: payer.PublicKey(), DestinationOwner: receiver, Amount: 5_000}}, txs[1].Transfers, "the mint from the token balances")
	require.True(t, txs[2].Failed)
	require.Empty(t, txs[2].Transfers)
	require.Nil(t, txs[3])

	var rerr *svmtest.RPCError
	err = node.Call(ctx, nil, "getSignaturesForAddress", to.String(), map[string]any{"commitment": "processed"})
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, -32602, rerr.Code)
	err = node.Call(ctx, nil, "getTransaction", tx1, map[string]any{"encoding": "base64"})
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, -32015, rerr.Code)
}
