package svmtest_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/svmtest"
)

var tokenProgram = solana.MustPublicKeyFromBase58("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA")

// transfer returns a signed TransferChecked of amount USDC from payer to
// dest's token account, fee paid by feePayer, with blockhash.
func transfer(t *testing.T, feePayer, payer solana.PrivateKey, dest solana.PublicKey, amount uint64, blockhash solana.Hash) *solana.Transaction {
	t.Helper()
	data := binary.LittleEndian.AppendUint64([]byte{12}, amount)
	data = append(data, 6)
	ix := solana.NewInstruction(tokenProgram, solana.AccountMetaSlice{
		solana.Meta(svmtest.ATA(t, payer.PublicKey(), svmtest.USDC)).WRITE(), solana.Meta(svmtest.USDC),
		solana.Meta(svmtest.ATA(t, dest, svmtest.USDC)).WRITE(), solana.Meta(payer.PublicKey()).SIGNER(),
	}, data)
	tx, err := solana.NewTransaction([]solana.Instruction{ix}, blockhash, solana.TransactionPayer(feePayer.PublicKey()))
	require.NoError(t, err)
	_, err = tx.Sign(func(k solana.PublicKey) *solana.PrivateKey {
		for _, key := range []solana.PrivateKey{feePayer, payer} {
			if key.PublicKey() == k {
				return &key
			}
		}
		return nil
	})
	require.NoError(t, err)
	return tx
}

type status struct {
	Err                any
	ConfirmationStatus string
}

func statusOf(ctx context.Context, t *testing.T, n *svmtest.Node, sig solana.Signature) *status {
	var out struct{ Value []*status }
	require.NoError(t, n.Call(ctx, &out, "getSignatureStatuses", []string{sig.String()}))
	return out.Value[0]
}

// TestNode checks the node against what mainnet does: development payers
// hold USDC, a transfer signed by its authority lands and moves exactly its
// amount, its status goes processed, confirmed, finalized; a transaction
// missing a signature is refused at preflight; a blockhash dies 150 blocks
// after it was the newest; a restart keeps accounts and statuses.
func TestNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := svmtest.Start(t, &svmtest.Config{SlotTime: 20 * time.Millisecond, Payers: 2, USDC: 5_000_000})

	payer := svmtest.PayerKey(1)
	var dev struct{ Address, Secret string }
	require.NoError(t, n.Call(ctx, &dev, "litesvm_payer", map[string]int{"index": 1}))
	require.Equal(t, payer.PublicKey().String(), dev.Address)
	require.Equal(t, payer.String(), dev.Secret)
	payerATA := svmtest.ATA(t, payer.PublicKey(), svmtest.USDC)
	require.Equal(t, uint64(5_000_000), n.TokenBalance(ctx, payerATA))

	feePayer := svmtest.PayerKey(100)
	n.FundSOL(ctx, feePayer.PublicKey(), 1_000_000_000)
	receiver := svmtest.PayerKey(101).PublicKey()
	receiverATA := n.Fund(ctx, receiver, 0, 0, solana.PublicKey{})
	require.Equal(t, svmtest.ATA(t, receiver, svmtest.USDC), receiverATA)

	bh := n.LatestBlockhash(ctx, "confirmed")
	tx := transfer(t, feePayer, payer, receiver, 10_000, bh.Hash)
	b64, err := tx.ToBase64()
	require.NoError(t, err)
	var sig string
	require.NoError(t, n.Call(ctx, &sig, "sendTransaction", b64, map[string]any{"encoding": "base64"}))
	require.Equal(t, tx.Signatures[0].String(), sig)
	seen := map[string]bool{}
	require.Eventually(t, func() bool {
		st := statusOf(ctx, t, n, tx.Signatures[0])
		require.NotNil(t, st)
		require.Nil(t, st.Err)
		seen[st.ConfirmationStatus] = true
		return st.ConfirmationStatus == "finalized"
	}, 10*time.Second, 5*time.Millisecond)
	require.True(t, seen["confirmed"])
	require.Equal(t, uint64(4_990_000), n.TokenBalance(ctx, payerATA))
	require.Equal(t, uint64(10_000), n.TokenBalance(ctx, receiverATA))

	// The same transaction again: already processed.
	err = n.Call(ctx, &sig, "sendTransaction", b64, map[string]any{"encoding": "base64"})
	var rerr *svmtest.RPCError
	require.ErrorAs(t, err, &rerr)
	require.Contains(t, rerr.Message, "already been processed")

	// Unsigned by the fee payer: the simulation without sigVerify runs it,
	// with sigVerify and at send it is refused.
	unsigned := transfer(t, feePayer, payer, receiver, 1, n.LatestBlockhash(ctx, "confirmed").Hash)
	unsigned.Signatures[0] = solana.Signature{}
	ub64, err := unsigned.ToBase64()
	require.NoError(t, err)
	var sim struct{ Value struct{ Err any } }
	require.NoError(t, n.Call(ctx, &sim, "simulateTransaction", ub64, map[string]any{"encoding": "base64", "sigVerify": false}))
	require.Nil(t, sim.Value.Err)
	err = n.Call(ctx, &sim, "simulateTransaction", ub64, map[string]any{"encoding": "base64", "sigVerify": true})
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, -32003, rerr.Code)
	err = n.Call(ctx, &sig, "sendTransaction", ub64, map[string]any{"encoding": "base64"})
	require.ErrorAs(t, err, &rerr, "sent %s", sig)

	// More than the balance: the token program's InsufficientFunds at
	// preflight.
	tooMuch := transfer(t, feePayer, payer, receiver, 5_000_000, n.LatestBlockhash(ctx, "confirmed").Hash)
	tb64, err := tooMuch.ToBase64()
	require.NoError(t, err)
	err = n.Call(ctx, &sig, "sendTransaction", tb64, map[string]any{"encoding": "base64"})
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, -32002, rerr.Code)
	require.Contains(t, string(rerr.Data), `"InstructionError":[0,{"Custom":1}]`)

	// A blockhash lives until its last valid block height, then is gone.
	before := n.BlockHeight(ctx, "processed")
	old := n.LatestBlockhash(ctx, "processed")
	after := n.BlockHeight(ctx, "processed") // a block may pass between the calls
	require.GreaterOrEqual(t, old.LastValidBlockHeight, before+svmtest.MaxProcessingAge)
	require.LessOrEqual(t, old.LastValidBlockHeight, after+svmtest.MaxProcessingAge)
	valid := func() bool {
		var out struct{ Value bool }
		require.NoError(t, n.Call(ctx, &out, "isBlockhashValid", old.Hash.String(), map[string]string{"commitment": "processed"}))
		return out.Value
	}
	require.True(t, valid())
	late := transfer(t, feePayer, payer, receiver, 1, old.Hash)
	require.Eventually(t, func() bool { return n.BlockHeight(ctx, "processed") > old.LastValidBlockHeight }, 20*time.Second, 10*time.Millisecond)
	require.False(t, valid())
	lb64, err := late.ToBase64()
	require.NoError(t, err)
	require.NoError(t, n.Call(ctx, &sim, "simulateTransaction", lb64, map[string]any{"encoding": "base64"}))
	require.Equal(t, "BlockhashNotFound", sim.Value.Err)
	err = n.Call(ctx, &sig, "sendTransaction", lb64, map[string]any{"encoding": "base64"})
	require.ErrorAs(t, err, &rerr)
	require.Contains(t, rerr.Message, "BlockhashNotFound")

	// A restart keeps balances and statuses; blocks go on.
	h := n.BlockHeight(ctx, "processed")
	n.Restart()
	require.Equal(t, uint64(10_000), n.TokenBalance(ctx, receiverATA))
	require.Equal(t, "finalized", statusOf(ctx, t, n, tx.Signatures[0]).ConfirmationStatus)
	require.GreaterOrEqual(t, n.BlockHeight(ctx, "processed"), h)

	// A lost answer: the work is done, the caller gets no answer.
	n.DropAnswers(ctx, "getBlockHeight", 1)
	err = n.Call(ctx, nil, "getBlockHeight")
	require.Error(t, err)
	require.False(t, errors.As(err, &rerr))
	require.NoError(t, n.Call(ctx, nil, "getBlockHeight"))
}
