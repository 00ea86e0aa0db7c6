package index

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/internal/svmtest"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/svm"
)

// svmChain sends USDC transfers on a LiteSVM node (svmtest), each with a
// memo of its own so that two alike are two transactions.
type svmChain struct {
	t    testing.TB
	node *svmtest.Node
	n    int
}

// transfer sends amount of USDC from payer's associated account to
// payTo's, its fee paid (and the transaction sent) by feePayer, signed by
// both: a settlement as the exact scheme makes it when feePayer is not
// payer, a plain transfer when it is. checked picks TransferChecked (the
// exact scheme's) over Transfer. It returns the signature.
func (c *svmChain) transfer(ctx context.Context, feePayer, payer solana.PrivateKey, payTo solana.PublicKey, amount uint64, checked bool) string {
	c.t.Helper()
	c.n++
	from := svmtest.ATA(c.t, payer.PublicKey(), svmtest.USDC)
	to := svmtest.ATA(c.t, payTo, svmtest.USDC)
	var ix solana.Instruction
	if checked {
		data := append(binary.LittleEndian.AppendUint64([]byte{12}, amount), 6)
		ix = solana.NewInstruction(svm.TokenProgram, solana.AccountMetaSlice{
			solana.Meta(from).WRITE(), solana.Meta(svmtest.USDC), solana.Meta(to).WRITE(), solana.Meta(payer.PublicKey()).SIGNER(),
		}, data)
	} else {
		ix = solana.NewInstruction(svm.TokenProgram, solana.AccountMetaSlice{
			solana.Meta(from).WRITE(), solana.Meta(to).WRITE(), solana.Meta(payer.PublicKey()).SIGNER(),
		}, binary.LittleEndian.AppendUint64([]byte{3}, amount))
	}
	memo := solana.NewInstruction(svm.MemoProgram, nil, fmt.Appendf(nil, "evidence %d", c.n))
	tx, err := solana.NewTransaction([]solana.Instruction{ix, memo}, c.node.LatestBlockhash(ctx, "confirmed").Hash, solana.TransactionPayer(feePayer.PublicKey()))
	require.NoError(c.t, err)
	_, err = tx.Sign(func(k solana.PublicKey) *solana.PrivateKey {
		switch k {
		case feePayer.PublicKey():
			return &feePayer
		case payer.PublicKey():
			return &payer
		}
		return nil
	})
	require.NoError(c.t, err)
	b64, err := tx.ToBase64()
	require.NoError(c.t, err)
	var sig string
	require.NoError(c.t, c.node.Call(ctx, &sig, "sendTransaction", b64, map[string]any{"encoding": "base64"}))
	return sig
}

// finalized waits until the node holds sig finalized.
func (c *svmChain) finalized(ctx context.Context, sig string) {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		var out struct {
			Value []*struct {
				Err                any
				ConfirmationStatus string
			}
		}
		require.NoError(c.t, c.node.Call(ctx, &out, "getSignatureStatuses", []string{sig}, map[string]bool{"searchTransactionHistory": true}))
		require.Len(c.t, out.Value, 1)
		require.NotNil(c.t, out.Value[0], "%s did not land", sig)
		require.Nil(c.t, out.Value[0].Err)
		return out.Value[0].ConfirmationStatus == "finalized"
	}, 30*time.Second, 10*time.Millisecond)
}

// svmItem is a listing's item of resource, paid to payTo on network in
// Solana's USDC.
func svmItem(resource, network string, payTo solana.PublicKey) map[string]any {
	return map[string]any{"resource": resource, "type": "http", "x402Version": 2, "description": "solana evidence",
		"accepts": []any{map[string]any{"scheme": "exact", "network": network, "amount": "10000", "asset": svmtest.USDC.String(), "payTo": payTo.String()}}}
}

// TestEvidenceSolana makes, on a LiteSVM node (the real SVM runtime behind
// Solana's JSON-RPC), settlements whose fees two fee payers paid (a known
// facilitator and another), one the seller sent itself, a plain transfer
// (SPL Token's Transfer, not TransferChecked), a payment of the seller to
// itself and a payer funded by the seller; the chain reader, run as River
// runs it, reads them at "finalized" two signatures a page, over runs of
// at most four transactions, and counts them per seller with their
// senders and wash signal, shown by the host and the resources search. A
// transfer before the seller was first read is not counted; a node that
// loses an answer in the middle of a page costs a run, not a transfer.
// There is no reorganisation case: reading at "finalized", no slot read is
// ever replaced.
func TestEvidenceSolana(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := svmtest.Start(t, &svmtest.Config{SlotTime: 20 * time.Millisecond, Payers: 3})
	const callGap = 10 * time.Millisecond // paced (TestPacer)
	db := dbtest.Schema(ctx, t)
	counter := newRPCCounter(t, node.URL)
	chain := &svmChain{t: t, node: node}

	key := func(i int) solana.PrivateKey { return svmtest.PayerKey(200 + i) }
	sellerA, sellerB, facilitator, relayer, wash := key(0), key(1), key(2), key(3), key(4)
	payer1, payer2 := svmtest.PayerKey(0), svmtest.PayerKey(1)
	for _, k := range []solana.PrivateKey{sellerA, sellerB, wash} {
		node.Fund(ctx, k.PublicKey(), 1_000_000_000, 1_000_000, solana.PublicKey{})
	}
	for _, k := range []solana.PrivateKey{facilitator, relayer} {
		node.FundSOL(ctx, k.PublicKey(), 1_000_000_000)
	}

	// The index lists alpha (paid to A), beta (paid to B) and gamma (paid
	// to A on devnet, a network without a node).
	src := &listing{items: []map[string]any{
		svmItem("https://alpha.test/pay", x402.SolanaMainnet, sellerA.PublicKey()),
		svmItem("https://beta.test/pay", x402.SolanaMainnet, sellerB.PublicKey()),
		svmItem("https://gamma.test/pay", "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", sellerA.PublicKey()),
	}}
	srv := httptest.NewServer(src)
	t.Cleanup(srv.Close)
	require.NoError(t, newCrawler(db, srv.URL, 100).FullPass(ctx, nil))

	// Before A is first read: not counted.
	chain.finalized(ctx, chain.transfer(ctx, payer1, payer1, sellerA.PublicKey(), 777, true))

	reader := NewChainReader(&ChainReaderConfig{Pool: db.Pool,
		Solana:       map[string]SolanaChain{x402.SolanaMainnet: svm.NewHistory(counter.URL, nil)},
		Facilitators: map[string]string{facilitator.PublicKey().String(): "TestFac"},
		SolanaPage:   2, SolanaTransactions: 4, SolanaCallGap: callGap})
	runJob := chainRiver(ctx, t, db, reader)
	r := NewReader(db.Pool, nil)
	d, err := r.HostDetail(ctx, "alpha.test")
	require.NoError(t, err)
	require.Nil(t, d.Host.Evidence, "not measured before any read")
	runJob() // each payTo's newest transaction: where it is read from
	calls, _, _ := counter.take()
	require.Equal(t, 2, calls["getSignaturesForAddress"], "one a payTo")
	require.Zero(t, calls["getTransaction"])

	chain.transfer(ctx, facilitator, payer1, sellerA.PublicKey(), 10_000, true)
	chain.transfer(ctx, facilitator, payer1, sellerA.PublicKey(), 10_000, true)
	chain.transfer(ctx, relayer, payer2, sellerA.PublicKey(), 20_000, true)
	chain.transfer(ctx, payer2, payer2, sellerA.PublicKey(), 5_000, false)
	chain.transfer(ctx, sellerB, payer1, sellerB.PublicKey(), 30_000, true)
	// The wash: A funds a new payer, which pays A (A sends it), and A pays
	// itself.
	chain.transfer(ctx, sellerA, sellerA, wash.PublicKey(), 100_000, true)
	chain.transfer(ctx, sellerA, wash, sellerA.PublicKey(), 50_000, true)
	chain.finalized(ctx, chain.transfer(ctx, sellerA, sellerA, sellerA.PublicKey(), 1_000, true))

	// A has 7 new transactions: read four a run at most, a page of two at
	// a time, newest first, resumed where the last run stopped.
	runs := 0
	for {
		runJob()
		runs++
		var c []store.SvmCursor
		c, err = store.SvmPayTosDue(ctx, db.Pool, x402.SolanaMainnet, 10)
		require.NoError(t, err)
		walking := false
		for _, cur := range c {
			walking = walking || cur.Top != ""
		}
		if !walking {
			break
		}
		// A's payers are looked at for a funding once its walk is done:
		// until then, not known (null), not 0.
		d, err = r.HostDetail(ctx, "alpha.test")
		require.NoError(t, err)
		require.NotZero(t, d.Host.Evidence.Last30d.Payers)
		require.Nil(t, d.Host.Evidence.Wash.FundedPayers, "A's walk is under way: its payers' fundings are not known yet")
		require.Less(t, runs, 5)
	}
	require.Equal(t, 2, runs, "8 transactions at 4 a run: A's 7, B's 1")
	calls, _, _ = counter.take()
	require.Equal(t, 8, calls["getTransaction"], "each transaction once")

	d, err = r.HostDetail(ctx, "alpha.test")
	require.NoError(t, err)
	a := d.Host.Evidence
	require.NotNil(t, a)
	require.Equal(t, []string{x402.SolanaMainnet}, a.Networks)
	require.Equal(t, EvidenceWindow{Transactions: 6, VolumeUSDC: "0.096000", Payers: 4}, a.Last30d)
	require.Equal(t, a.Last30d, a.Last24h)
	require.Equal(t, int64(4), a.Settlements30d, "the plain transfer and the self-payment are sent by their payer")
	senders := map[string]EvidenceSender{}
	for _, s := range a.Senders {
		senders[s.Address] = s
	}
	pk := func(k solana.PrivateKey) string { return k.PublicKey().String() }
	require.Equal(t, EvidenceSender{Address: pk(facilitator), Class: SenderFacilitator, Name: "TestFac", Transactions: 2, VolumeUSDC: "0.020000"}, senders[pk(facilitator)])
	require.Equal(t, EvidenceSender{Address: pk(relayer), Class: SenderOther, Transactions: 1, VolumeUSDC: "0.020000"}, senders[pk(relayer)])
	require.Equal(t, EvidenceSender{Address: pk(payer2), Class: SenderPayer, Transactions: 1, VolumeUSDC: "0.005000"}, senders[pk(payer2)])
	require.Equal(t, EvidenceSender{Address: pk(sellerA), Class: SenderSeller, Transactions: 2, VolumeUSDC: "0.051000"}, senders[pk(sellerA)])
	require.Len(t, a.Senders, 4)
	require.Equal(t, pk(wash), *a.Wash.TopPayer)
	require.InDelta(t, 50_000.0/96_000, *a.Wash.TopPayerShare, 1e-9)
	require.Equal(t, new(int64(1)), a.Wash.FundedPayers, "the payer A funded before it paid")
	require.Equal(t, int64(1), a.Wash.SelfPayments, "A paid itself")
	require.Len(t, d.PayTos, 1)
	require.Equal(t, PayToEvidence{Network: x402.SolanaMainnet, PayTo: pk(sellerA), Evidence: d.PayTos[0].Evidence}, d.PayTos[0])
	require.Equal(t, a.Last30d, d.PayTos[0].Evidence.Last30d)

	d, err = r.HostDetail(ctx, "beta.test")
	require.NoError(t, err)
	b := d.Host.Evidence
	require.NotNil(t, b)
	require.Equal(t, EvidenceWindow{Transactions: 1, VolumeUSDC: "0.030000", Payers: 1}, b.Last30d)
	require.Equal(t, []EvidenceSender{{Address: pk(sellerB), Class: SenderSeller, Transactions: 1, VolumeUSDC: "0.030000"}}, b.Senders)
	require.Equal(t, Wash{TopPayer: new(pk(payer1)), TopPayerShare: new(1.0), FundedPayers: new(int64(0))}, b.Wash)
	d, err = r.HostDetail(ctx, "gamma.test")
	require.NoError(t, err)
	require.Nil(t, d.Host.Evidence, "a network without a node: not measured")

	// The resources search shows the host's figures, and its sorts and
	// filters take them.
	q := ResourceQuery{Network: "solana", Sort: "url"}
	require.NoError(t, q.Check())
	res, err := r.Resources(ctx, q)
	require.NoError(t, err)
	require.Len(t, res.Resources, 2, "on Solana mainnet")
	byURL := map[string]store.ResourceEvidence{}
	for _, rs := range res.Resources {
		byURL[rs.Resource] = rs.Evidence
	}
	require.Equal(t, store.ResourceEvidence{Transactions30d: new(int64(6)), VolumeUSDC30d: new(0.096), Payers30d: new(int64(4)), Complete30d: new(false)}, byURL["https://alpha.test/pay"])
	require.Equal(t, store.ResourceEvidence{Transactions30d: new(int64(1)), VolumeUSDC30d: new(0.03), Payers30d: new(int64(1)), Complete30d: new(false)}, byURL["https://beta.test/pay"])
	ans, err := r.Search(ctx, HostQuery{Sort: "payers_30d", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"alpha.test", "beta.test"}, hostNames(ans.Hosts)[:2])

	// Nothing new: a run reads one page a payTo, and no transaction.
	runJob()
	calls, _, _ = counter.take()
	require.Equal(t, 2, calls["getSignaturesForAddress"])
	require.Zero(t, calls["getTransaction"])

	// A node that fails in the middle of a page (its answer lost) fails
	// the run and records nothing of the page; the next run reads it.
	chain.transfer(ctx, facilitator, payer2, sellerB.PublicKey(), 4_000, true)
	chain.finalized(ctx, chain.transfer(ctx, facilitator, payer2, sellerB.PublicKey(), 6_000, true))
	node.DropAnswers(ctx, "getTransaction", 1)
	_, err = reader.Run(ctx)
	require.Error(t, err)
	d, err = r.HostDetail(ctx, "beta.test")
	require.NoError(t, err)
	require.Equal(t, int64(1), d.Host.Evidence.Last30d.Transactions)
	run, err := reader.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, run.Transfers)
	d, err = r.HostDetail(ctx, "beta.test")
	require.NoError(t, err)
	require.Equal(t, EvidenceWindow{Transactions: 3, VolumeUSDC: "0.040000", Payers: 2}, d.Host.Evidence.Last30d)
}

// TestPacer: calls are spaced by the gap, a batch of n counting n; the
// first waits for none, and one made after a pause waits for none.
func TestPacer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fake := clock.NewFake(start)
	p := &pacer{clock: fake, gap: time.Second}
	require.NoError(t, p.wait(ctx, 1), "the first at once")
	waited := func(calls int) time.Duration {
		t.Helper()
		done := make(chan error, 1)
		began := fake.Now()
		go func() { done <- p.wait(ctx, calls) }()
		for {
			select {
			case err := <-done:
				require.NoError(t, err)
				return fake.Now().Sub(began)
			default:
			}
			if next, ok := fake.Next(); ok {
				fake.Set(next)
			} else {
				runtime.Gosched() // not waiting yet, or done
			}
		}
	}
	require.Equal(t, time.Second, waited(3), "a gap after the one call")
	require.Equal(t, 3*time.Second, waited(1), "three gaps after the batch of three")
	fake.Advance(time.Hour)
	require.Zero(t, waited(1), "after a pause, at once")
	unpaced := &pacer{clock: fake}
	require.NoError(t, unpaced.wait(ctx, 100))
	require.NoError(t, unpaced.wait(ctx, 100))
}
