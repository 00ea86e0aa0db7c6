package index

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/jackc/pgx/v5"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/svm"
)

// SolanaChain is what the chain reader needs of a Solana node
// (*svm.History): the finalized signatures of the transactions naming an
// account, newest first, and those transactions' token transfers.
type SolanaChain interface {
	Signatures(ctx context.Context, account solana.PublicKey, before, until string, limit int) ([]svm.SignatureInfo, error)
	Transactions(ctx context.Context, signatures []string) ([]*svm.LandedTransaction, error)
}

var _ SolanaChain = (*svm.History)(nil)

// solanaBatch is the most getTransaction calls one JSON-RPC batch request
// of the Solana reading makes.
const solanaBatch = 25

// readSolana reads the USDC transfers into the payTo addresses of the
// Solana network (SolanaAccounts of them, the least recently read first,
// within SolanaTransactions transactions), and returns the payTo addresses
// whose transfers or fundings changed.
//
// Solana has no query of transfers into many addresses: each payTo's
// associated token account for the network's USDC (the account the exact
// scheme pays into) is read on its own. A payTo first read is read from
// its account's newest finalized transaction on (nothing before is
// counted, as on an EVM network). Then each run walks down from the newest
// finalized signatures (getSignaturesForAddress, SolanaPage a call, until
// the last one read), reads the transactions that did not fail
// (getTransaction, in batches) and records, page by page with the cursor,
// the transfers into the account, and the USDC the account sent to other
// owners (fundings). A walk cut short by the budget resumes from its
// oldest page (before) at the next run. Everything is read at "finalized":
// no finalized slot is ever replaced, so there is no reorganisation to
// undo on Solana.
func (r *ChainReader) readSolana(ctx context.Context, network string, run *ChainRun) ([]string, error) {
	node := r.cfg.Solana[network]
	n, ok := x402.NetworkByID(network)
	if !ok || n.Namespace() != "solana" {
		return nil, fmt.Errorf("network %s: not a Solana network of the network table (its USDC is not known)", network)
	}
	mint, err := solana.PublicKeyFromBase58(n.Asset)
	if err != nil {
		return nil, fmt.Errorf("network %s: USDC mint: %w", network, err)
	}
	due, err := store.SvmPayTosDue(ctx, r.cfg.Pool, network, r.cfg.SolanaAccounts)
	if err != nil {
		return nil, err
	}
	var touched []string
	budget := r.cfg.SolanaTransactions
	node = &pacedSolana{SolanaChain: node, pacer: pacer{clock: r.clock, gap: r.cfg.SolanaCallGap}}
	for i := range due {
		if budget <= 0 {
			break
		}
		changed, used, err := r.readSolanaPayTo(ctx, node, mint, &due[i], budget, run)
		budget -= used
		if changed {
			touched = append(touched, due[i].PayTo)
		}
		if err != nil {
			// A node that refuses (429) or fails is left for the next run.
			return touched, err
		}
	}
	return touched, nil
}

// readSolanaPayTo reads the transactions of c's token account from its
// cursor, at most budget of them (past it, after a whole page), and
// reports whether transfers or fundings were recorded and how many
// transactions were read.
func (r *ChainReader) readSolanaPayTo(ctx context.Context, node SolanaChain, mint solana.PublicKey, c *store.SvmCursor, budget int, run *ChainRun) (changed bool, used int, err error) {
	owner, err := solana.PublicKeyFromBase58(c.PayTo)
	if err != nil {
		// The listing's payTo is no Solana address: nothing to read.
		return false, 0, store.SvmCursorSet(ctx, r.cfg.Pool, c, r.clock.Now())
	}
	if !c.Known {
		account, err := svm.AssociatedTokenAddress(owner, mint, svm.TokenProgram)
		if err != nil {
			return false, 0, err
		}
		newest, err := node.Signatures(ctx, account, "", "", 1)
		if err != nil {
			return false, 0, err
		}
		c.Account = account.String()
		// Counted from the transaction after the newest one: a later one
		// may share its slot.
		var since uint64
		if len(newest) > 0 {
			c.Until, since = newest[0].Signature, newest[0].Slot-min(newest[0].Slot, 1)
		}
		now := r.clock.Now()
		err = pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
			if err := store.ChainWatch(ctx, tx, c.Network, []string{c.PayTo}, since, now); err != nil {
				return err
			}
			return store.SvmCursorSet(ctx, tx, c, now)
		})
		return false, 0, err
	}
	account, err := solana.PublicKeyFromBase58(c.Account)
	if err != nil {
		return false, 0, fmt.Errorf("token account of %s: %w", c.PayTo, err)
	}
	for {
		page, err := node.Signatures(ctx, account, c.Before, c.Until, r.cfg.SolanaPage)
		if err != nil {
			return changed, used, err
		}
		var sigs []string
		for _, s := range page {
			if !s.Failed() {
				sigs = append(sigs, s.Signature)
			}
		}
		var txs []*svm.LandedTransaction
		for chunk := range slices.Chunk(sigs, solanaBatch) {
			got, err := node.Transactions(ctx, chunk)
			if err != nil {
				return changed, used, err
			}
			txs = append(txs, got...)
		}
		used += len(sigs)
		transfers, fundings, err := r.solanaTransfers(c, account, mint, sigs, txs)
		if err != nil {
			return changed, used, err
		}
		next := *c
		if next.Top == "" && len(page) > 0 {
			next.Top = page[0].Signature
		}
		done := len(page) < r.cfg.SolanaPage
		if done {
			next.Until = cmp.Or(next.Top, next.Until)
			next.Top, next.Before = "", ""
		} else {
			next.Before = page[len(page)-1].Signature
		}
		err = pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
			if err := store.TransfersAdd(ctx, tx, transfers); err != nil {
				return err
			}
			if err := store.SvmFundingsAdd(ctx, tx, fundings); err != nil {
				return err
			}
			if err := store.SvmCursorSet(ctx, tx, &next, r.clock.Now()); err != nil {
				return err
			}
			if done {
				// Every transaction up to the newest is read: a payer's
				// funding, older than its payment, is too.
				return store.SvmPayersChecked(ctx, tx, c.Network, c.PayTo)
			}
			return nil
		})
		if err != nil {
			return changed, used, err
		}
		*c = next
		run.Pages++
		run.Transfers += len(transfers)
		changed = changed || len(transfers) > 0 || len(fundings) > 0
		if done || used >= budget {
			return changed, used, nil
		}
	}
}

// pacer spaces calls by gap each.
type pacer struct {
	clock clock.Clock
	gap   time.Duration
	next  time.Time
}

// wait waits until calls more may be made, or ctx ends.
func (p *pacer) wait(ctx context.Context, calls int) error {
	if p.gap <= 0 {
		return nil
	}
	now := p.clock.Now()
	if err := clock.Sleep(ctx, p.clock, p.next.Sub(now)); err != nil {
		return err
	}
	if p.next.Before(now) {
		p.next = now
	}
	p.next = p.next.Add(time.Duration(calls) * p.gap)
	return nil
}

// pacedSolana is a Solana node whose calls a pacer spaces.
type pacedSolana struct {
	SolanaChain
	pacer pacer
}

func (p *pacedSolana) Signatures(ctx context.Context, account solana.PublicKey, before, until string, limit int) ([]svm.SignatureInfo, error) {
	if err := p.pacer.wait(ctx, 1); err != nil {
		return nil, err
	}
	return p.SolanaChain.Signatures(ctx, account, before, until, limit)
}

func (p *pacedSolana) Transactions(ctx context.Context, signatures []string) ([]*svm.LandedTransaction, error) {
	if err := p.pacer.wait(ctx, len(signatures)); err != nil {
		return nil, err
	}
	return p.SolanaChain.Transactions(ctx, signatures)
}

// errSolanaMissing is a finalized signature whose transaction the node
// does not answer.
var errSolanaMissing = errors.New("the node has no transaction of a finalized signature")

// solanaTransfers returns the transfers into account (c's token account
// for mint) that txs (of sigs) made, and what account sent to other
// owners. A transfer's payer is its source account's owner (else its
// authority), its sender the fee payer.
func (r *ChainReader) solanaTransfers(c *store.SvmCursor, account, mint solana.PublicKey, sigs []string, txs []*svm.LandedTransaction) ([]store.Transfer, []store.SvmFunding, error) {
	var transfers []store.Transfer
	var fundings []store.SvmFunding
	for i, tx := range txs {
		if tx == nil {
			return nil, nil, fmt.Errorf("%s: %w", sigs[i], errSolanaMissing)
		}
		at := tx.BlockTime
		if at.IsZero() {
			// A node that does not know the block's time: when it was read.
			at = r.clock.Now().UTC()
		}
		for _, t := range tx.Transfers {
			// The account holds only its mint: a Transfer into it (which
			// names none) moves it too.
			if !t.Mint.IsZero() && t.Mint != mint {
				continue
			}
			switch {
			case t.Destination == account:
				payer := t.SourceOwner
				if payer.IsZero() {
					payer = t.Authority
				}
				transfers = append(transfers, store.Transfer{
					Network: c.Network, TxHash: tx.Signature, LogIndex: uint(t.Index), Block: tx.Slot, At: at,
					Payer: payer.String(), PayTo: c.PayTo, Amount: strconv.FormatUint(t.Amount, 10),
					Sender: tx.FeePayer.String(), EIP3009: tx.FeePayer != payer,
				})
			case t.Source == account && !t.DestinationOwner.IsZero() && t.DestinationOwner.String() != c.PayTo:
				fundings = append(fundings, store.SvmFunding{Network: c.Network, Signature: tx.Signature, Position: t.Index,
					PayTo: c.PayTo, Recipient: t.DestinationOwner.String(), Slot: tx.Slot})
			}
		}
	}
	return transfers, fundings, nil
}
