package evm

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
)

// NonceStore allocates a relayer's nonces on a chain among every process
// that sends with the same key, and keeps each allocated nonce's signed
// transaction until the chain has mined one of that nonce. The service's
// implementation is in Postgres (store.RelayerNonces), shared by every
// worker; without one a Relayer keeps its nonces in memory, which is right
// only for a key no other process uses.
type NonceStore interface {
	// AllocateNonce returns a nonce of address on network that no caller
	// was given before, at least floor (the chain's count of the address's
	// mined transactions), and records it as owner's, with no transaction
	// yet.
	AllocateNonce(ctx context.Context, network string, address common.Address, floor uint64, owner string) (uint64, error)
	// RecordNonce records raw, a signed transaction of nonce, as the one to
	// send again for it, and owner as the process that last acted on it.
	RecordNonce(ctx context.Context, network string, address common.Address, nonce uint64, owner string, raw []byte) error
	// TouchNonces records that owner, alive, still awaits nonces: they are
	// not another process's to send again or fill.
	TouchNonces(ctx context.Context, network string, address common.Address, owner string, nonces []uint64) error
	// OutstandingNonces forgets the nonces below final (mined in blocks
	// held final: no reorganisation gives them back) and returns those
	// from floor on (not mined, as far as the chain says now), lowest
	// first. The nonces in between are kept with their transactions, to be
	// given to the node again if a reorganisation undoes them.
	OutstandingNonces(ctx context.Context, network string, address common.Address, final, floor uint64) ([]OutstandingNonce, error)
}

// OutstandingNonce is an allocated nonce the chain has not mined yet.
type OutstandingNonce struct {
	// Nonce is the nonce.
	Nonce uint64
	// Owner is the process that last acted on it.
	Owner string
	// Raw is its last signed transaction; nil when none was recorded (the
	// process that allocated it died before signing).
	Raw []byte
	// UpdatedAt is when it was allocated or last recorded.
	UpdatedAt time.Time
}

// memNonces is the NonceStore of a Relayer given none: the nonces of this
// process only.
type memNonces struct {
	mu   sync.Mutex
	next map[string]uint64
	out  map[string]map[uint64]*OutstandingNonce
}

func newMemNonces() *memNonces {
	return &memNonces{next: map[string]uint64{}, out: map[string]map[uint64]*OutstandingNonce{}}
}

func (m *memNonces) AllocateNonce(_ context.Context, network string, address common.Address, floor uint64, owner string) (uint64, error) {
	key := network + "/" + address.Hex()
	m.mu.Lock()
	defer m.mu.Unlock()
	n := max(m.next[key], floor)
	m.next[key] = n + 1
	if m.out[key] == nil {
		m.out[key] = map[uint64]*OutstandingNonce{}
	}
	m.out[key][n] = &OutstandingNonce{Nonce: n, Owner: owner, UpdatedAt: time.Now()}
	return n, nil
}

func (m *memNonces) RecordNonce(_ context.Context, network string, address common.Address, nonce uint64, owner string, raw []byte) error {
	key := network + "/" + address.Hex()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.out[key] == nil {
		m.out[key] = map[uint64]*OutstandingNonce{}
	}
	m.out[key][nonce] = &OutstandingNonce{Nonce: nonce, Owner: owner, Raw: raw, UpdatedAt: time.Now()}
	return nil
}

func (m *memNonces) TouchNonces(_ context.Context, network string, address common.Address, owner string, nonces []uint64) error {
	key := network + "/" + address.Hex()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range nonces {
		if o := m.out[key][n]; o != nil {
			o.Owner, o.UpdatedAt = owner, time.Now()
		}
	}
	return nil
}

func (m *memNonces) OutstandingNonces(_ context.Context, network string, address common.Address, final, floor uint64) ([]OutstandingNonce, error) {
	key := network + "/" + address.Hex()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []OutstandingNonce
	for n, o := range m.out[key] {
		if n < final {
			delete(m.out[key], n)
			continue
		}
		if n >= floor {
			out = append(out, *o)
		}
	}
	slices.SortFunc(out, func(a, b OutstandingNonce) int { return cmpUint64(a.Nonce, b.Nonce) })
	return out, nil
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ownTx is a transaction this process sent and still awaits: its latest
// version (a replacement has the same nonce and call, higher fees), every
// hash it had, and when it was last sent.
type ownTx struct {
	tx     *types.Transaction
	hashes []common.Hash
	sentAt time.Time
	// failed is set when its last send got no answer or an error that may
	// pass: the keeper sends it again.
	failed bool
}

// minedNonce returns the chain's count of the relayer's mined transactions,
// as last read (reading it when never read).
func (r *Relayer) minedNonce(ctx context.Context, chain *relayChain) (uint64, error) {
	chain.ownMu.Lock()
	n, known := chain.mined, chain.minedKnown
	chain.ownMu.Unlock()
	if known {
		return n, nil
	}
	return r.readMined(ctx, chain)
}

// readMined reads the chain's count of the relayer's mined transactions.
func (r *Relayer) readMined(ctx context.Context, chain *relayChain) (uint64, error) {
	n, err := chain.backend.NonceAt(ctx, r.address, nil)
	if err != nil {
		return 0, fmt.Errorf("read relayer nonce: %w", err)
	}
	chain.ownMu.Lock()
	if !chain.minedKnown || n > chain.mined {
		chain.mined, chain.minedKnown = n, true
	}
	n = chain.mined
	chain.ownMu.Unlock()
	return n, nil
}

// readMinedAfterReorg reads the chain's count of the relayer's mined
// transactions as readMined does, and also takes a count lower than the
// one known: a reorganisation undid the transactions from it on, which
// the keeper then gives to the node again from their records.
func (r *Relayer) readMinedAfterReorg(ctx context.Context, chain *relayChain) (uint64, error) {
	n, err := chain.backend.NonceAt(ctx, r.address, nil)
	if err != nil {
		return 0, fmt.Errorf("read relayer nonce: %w", err)
	}
	chain.ownMu.Lock()
	before, known := chain.mined, chain.minedKnown
	chain.mined, chain.minedKnown = n, true
	chain.ownMu.Unlock()
	if known && n < before {
		r.logger.WarnContext(ctx, "the relayer's mined transactions went back: a reorganisation undid them, and they are given to the node again",
			"network", chain.network, "mined", n, "was", before)
	}
	return n, nil
}

// send signs and sends a transaction to with input and gas, at a nonce
// allocated by the NonceStore, and records it before it goes, so that this
// process or another can send it again. A send that gets no answer (a
// timeout, a cut connection) returns the transaction all the same: its nonce
// is not abandoned, the keeper sends it again until it is mined. A nonce
// found used by another transaction is given up for a new one.
func (r *Relayer) send(ctx context.Context, chain *relayChain, to common.Address, input []byte, gas uint64) (*types.Transaction, error) {
	for attempt := 0; ; attempt++ {
		tip, feeCap, err := r.fees(ctx, chain)
		if err != nil {
			return nil, err
		}
		floor, err := r.minedNonce(ctx, chain)
		if err != nil {
			return nil, err
		}
		nonce, err := r.nonces.AllocateNonce(ctx, chain.network, r.address, floor, r.owner)
		if err != nil {
			return nil, fmt.Errorf("allocate relayer nonce: %w", err)
		}
		tx, err := r.sign(chain, &types.DynamicFeeTx{Nonce: nonce, GasTipCap: tip, GasFeeCap: feeCap, Gas: gas, To: &to, Data: input})
		if err != nil {
			return nil, err
		}
		if err := r.record(ctx, chain, tx); err != nil {
			// Not sent: the nonce has no transaction, and the keeper of
			// any process fills it once it is found behind later ones.
			return nil, err
		}
		outcome, err := r.transmit(ctx, chain, tx)
		for try := 0; outcome == sendUnderpriced && try < maxFeeRetries; try++ {
			// Priced under the base fee of the block to come (it rose
			// meanwhile): the same nonce again, at the chain's fees of now
			// and at least twice the fee cap refused.
			next, rerr := r.reprice(ctx, chain, tx, 2)
			if rerr != nil {
				outcome, err = sendRefused, rerr
				break
			}
			tx = next
			outcome, err = r.transmit(ctx, chain, tx)
		}
		switch outcome {
		case sendTaken:
			return tx, nil
		case sendNonceUsed, sendOutbid:
			// Used by another transaction: mined already (the chain's
			// count is past what this process read), or held in the pool
			// by one this process did not send. Either way this nonce is
			// not ours to wait for: read the count again and take another.
			chain.untrack(tx.Nonce())
			if _, rerr := r.readMined(ctx, chain); rerr != nil {
				return nil, fmt.Errorf("send transaction: %w (then %w)", err, rerr)
			}
			if attempt >= maxNonceRetries {
				return nil, fmt.Errorf("send transaction: %w", err)
			}
			r.logger.DebugContext(ctx, "relayer nonce used by another transaction", "network", chain.network, "nonce", nonce, "error", err)
		case sendUnanswered:
			// The node may have it. Keep the nonce: the keeper sends the
			// same transaction again, and the receipt is awaited as usual.
			r.logger.WarnContext(ctx, "relayer send unanswered; the same transaction is sent again", "network", chain.network, "nonce", nonce, "transaction", tx.Hash().Hex(), "error", err)
			return tx, nil
		default:
			// Refused (fees the cap does not allow, funds for gas): the
			// nonce is kept, its transaction sent again and repriced by
			// the keeper, so that it is no gap; this settlement is tried
			// again and finds its transfer when that transaction goes.
			chain.markFailed(tx.Nonce())
			r.logger.WarnContext(ctx, "relayer send refused; the nonce is kept and its transaction sent again", "network", chain.network, "nonce", nonce, "error", err)
			return nil, fmt.Errorf("send transaction: %w", err)
		}
	}
}

// sign signs a dynamic-fee transaction of the chain with the relayer's key.
func (r *Relayer) sign(chain *relayChain, tx *types.DynamicFeeTx) (*types.Transaction, error) {
	tx.ChainID = chain.signer.ChainID()
	signed, err := types.SignNewTx(r.cfg.Key, chain.signer, tx)
	if err != nil {
		return nil, fmt.Errorf("sign transaction: %w", err)
	}
	return signed, nil
}

// record writes tx to the NonceStore and tracks it as this process's.
func (r *Relayer) record(ctx context.Context, chain *relayChain, tx *types.Transaction) error {
	raw, err := tx.MarshalBinary()
	if err != nil {
		return fmt.Errorf("encode transaction: %w", err)
	}
	if err := r.nonces.RecordNonce(ctx, chain.network, r.address, tx.Nonce(), r.owner, raw); err != nil {
		return fmt.Errorf("record relayer transaction %d: %w", tx.Nonce(), err)
	}
	chain.track(tx)
	return nil
}

// track records tx as this process's latest transaction of its nonce.
func (c *relayChain) track(tx *types.Transaction) {
	c.ownMu.Lock()
	defer c.ownMu.Unlock()
	o := c.own[tx.Nonce()]
	if o == nil {
		o = &ownTx{}
		c.own[tx.Nonce()] = o
	}
	o.tx, o.sentAt, o.failed = tx, time.Now(), false
	o.hashes = append(o.hashes, tx.Hash())
}

func (c *relayChain) untrack(nonce uint64) {
	c.ownMu.Lock()
	delete(c.own, nonce)
	c.ownMu.Unlock()
}

func (c *relayChain) markFailed(nonce uint64) {
	c.ownMu.Lock()
	if o := c.own[nonce]; o != nil {
		o.failed = true
	}
	c.ownMu.Unlock()
}

// keep resolves the relayer's outstanding nonces on chain, at most once per
// KeepEvery and by one caller at a time (the settlements waiting for
// receipts call it): nonces the chain mined are forgotten, and this
// process's others touched; a transaction of this process that got no
// answer, or is unmined after ReplaceAfter, and one of another process left
// untouched for OrphanAfter (its process died, or died before sending), is
// sent again as it is while its fee cap covers the base fee, and replaced
// with fees the chain takes otherwise; a nonce with no transaction recorded
// is filled with a transfer of nothing to the relayer itself. So no nonce
// stays a gap behind later ones.
func (r *Relayer) keep(ctx context.Context, chain *relayChain) {
	if !chain.keepMu.TryLock() {
		return
	}
	defer chain.keepMu.Unlock()
	if time.Since(chain.lastKeep) < r.cfg.KeepEvery {
		return
	}
	chain.lastKeep = time.Now()
	if err := r.keepOnce(ctx, chain); err != nil {
		r.logger.WarnContext(ctx, "relayer nonce keeping failed", "network", chain.network, "error", err)
	}
}

func (r *Relayer) keepOnce(ctx context.Context, chain *relayChain) error {
	mined, err := r.readMinedAfterReorg(ctx, chain)
	if err != nil {
		return err
	}
	var mine []uint64
	chain.ownMu.Lock()
	for n := range chain.own {
		if n < mined {
			delete(chain.own, n)
			continue
		}
		mine = append(mine, n)
	}
	chain.ownMu.Unlock()
	// This process is alive and awaits these: they are not orphans, however
	// long a congested chain keeps them waiting.
	if len(mine) > 0 {
		if err := r.nonces.TouchNonces(ctx, chain.network, r.address, r.owner, mine); err != nil {
			return fmt.Errorf("touch outstanding nonces: %w", err)
		}
	}
	outstanding, err := r.nonces.OutstandingNonces(ctx, chain.network, r.address, chain.forgetBelow(mined), mined)
	if err != nil {
		return fmt.Errorf("read outstanding nonces: %w", err)
	}
	// The processes sending with this key now: the owners of the nonces
	// outstanding, each of which a live process touches on every pass.
	// They share the gas a batcher may leave unmined.
	senders := map[string]bool{r.owner: true}
	for _, o := range outstanding {
		if time.Since(o.UpdatedAt) < r.cfg.OrphanAfter {
			senders[o.Owner] = true
		}
	}
	chain.senders.Store(int64(len(senders)))
	if len(outstanding) == 0 {
		return nil
	}
	head, err := chain.backend.HeaderByNumber(ctx, nil)
	if err != nil {
		return fmt.Errorf("read head block: %w", err)
	}
	baseFee := cmpOr(head.BaseFee, new(big.Int))
	// The node's count of the relayer's transactions, those it holds ready
	// to mine included: the first nonce it does not hold. Outstanding, it
	// is a gap that every later transaction waits behind, however many
	// there are: a node loses transactions at times (anvil drops one whose
	// fee cap a rising base fee passed, and with it those that follow).
	gap, gapErr := chain.backend.PendingNonceAt(ctx, r.address)
	for i, o := range outstanding {
		chain.ownMu.Lock()
		own := chain.own[o.Nonce]
		var tx *types.Transaction
		var sentAt time.Time
		due := false
		if own != nil {
			sentAt = own.sentAt
			// Due when it got no answer, when it waited ReplaceAfter, and
			// at once when the base fee rose above its fee cap: the node
			// holds it back, and every later nonce behind it.
			tx = own.tx
			due = own.failed || time.Since(own.sentAt) >= r.cfg.ReplaceAfter || tx.GasFeeCap().Cmp(baseFee) < 0
		}
		chain.ownMu.Unlock()
		// A nonce with no transaction recorded is filled sooner: its
		// process records one within milliseconds of the allocation, or
		// died in between.
		if own == nil && (time.Since(o.UpdatedAt) >= r.cfg.OrphanAfter || o.Raw == nil && time.Since(o.UpdatedAt) >= unsentAfter) {
			// Another process's, untouched for OrphanAfter: it died, or
			// died before sending. Its own transaction goes on if there is
			// one (the settlements in it then complete); a nothing fills
			// the nonce otherwise.
			due = true
			if o.Raw != nil {
				tx = new(types.Transaction)
				if err := tx.UnmarshalBinary(o.Raw); err != nil {
					tx = nil
				}
			}
		}
		if !due {
			// A node that lost transactions is given them again at once,
			// whoever sent them: from the first nonce it says it lacks.
			// A node that cannot say is given the lowest few, which hold
			// every later one, once they have waited two passes (a node
			// that has them says so).
			lost := o.Nonce >= gap
			if gapErr != nil {
				lost = i < resendLowest && o.Nonce == mined+uint64(i) && (own == nil || time.Since(sentAt) >= 2*r.cfg.KeepEvery)
			}
			if lost && o.Raw != nil {
				head := tx
				if head == nil {
					head = new(types.Transaction)
					if err := head.UnmarshalBinary(o.Raw); err != nil {
						continue
					}
				}
				_ = r.resend(ctx, chain, head)
			}
			continue
		}
		if tx == nil {
			if err := r.fill(ctx, chain, o.Nonce, nil); err != nil {
				r.logger.WarnContext(ctx, "relayer could not fill an orphaned nonce", "network", chain.network, "nonce", o.Nonce, "error", err)
			}
			continue
		}
		if tx.GasFeeCap().Cmp(baseFee) >= 0 {
			// Priced to be mined: it waits for room in a block, or the node
			// lost it. Sent again as it is (a node that has it says so);
			// raising its fees would only bid against our own.
			err := r.resend(ctx, chain, tx)
			if err == nil {
				if own == nil {
					_ = r.nonces.RecordNonce(ctx, chain.network, r.address, o.Nonce, r.owner, o.Raw)
				}
				continue
			}
			if !isFeeTooLow(err) {
				continue
			}
		}
		// Priced under the base fee: not minable now. The same call again
		// at fees the chain takes.
		if err := r.replace(ctx, chain, tx); err != nil {
			r.logger.WarnContext(ctx, "relayer replacement failed", "network", chain.network, "nonce", o.Nonce, "error", err)
		}
	}
	return nil
}

// resend sends tx again; a node that has it or mined it already is fine.
// It returns the node's refusal otherwise.
func (r *Relayer) resend(ctx context.Context, chain *relayChain, tx *types.Transaction) error {
	switch outcome, err := r.transmit(ctx, chain, tx); outcome {
	case sendTaken, sendNonceUsed:
		return nil
	default:
		r.logger.WarnContext(ctx, "relayer resend failed", "network", chain.network, "nonce", tx.Nonce(), "error", err)
		return err
	}
}

// sendOutcome is what a node's answer to a transaction sent to it means.
type sendOutcome int

const (
	// sendTaken: the node took it, or had it already.
	sendTaken sendOutcome = iota
	// sendNonceUsed: its nonce is used by a mined transaction.
	sendNonceUsed
	// sendOutbid: the node holds another transaction of its nonce that it
	// does not outbid.
	sendOutbid
	// sendUnderpriced: its fee cap is under the base fee of the block to
	// come.
	sendUnderpriced
	// sendUnanswered: no answer, or an error that may pass: the node may
	// have it.
	sendUnanswered
	// sendRefused: refused otherwise (funds for gas, fees the cap does not
	// allow).
	sendRefused
)

// classifySend reads a node's answer to a sent transaction (nil: taken).
func classifySend(err error) sendOutcome {
	switch {
	case err == nil || isAlreadyKnown(err):
		return sendTaken
	case isNonceTooLow(err):
		return sendNonceUsed
	case isUnderpriced(err):
		return sendOutbid
	case isFeeTooLow(err):
		return sendUnderpriced
	case isTransient(err):
		return sendUnanswered
	}
	return sendRefused
}

// transmit sends tx to chain's node and classifies its answer: the one
// place the relayer sends a transaction. It notes what the answer says of
// tx's nonce in what this process awaits: taken, sent now; used by a mined
// transaction, no longer awaited; unanswered or refused, to be sent again
// by the keeper. It returns the node's error with the outcome.
func (r *Relayer) transmit(ctx context.Context, chain *relayChain, tx *types.Transaction) (sendOutcome, error) {
	err := chain.backend.SendTransaction(ctx, tx)
	outcome := classifySend(err)
	chain.ownMu.Lock()
	defer chain.ownMu.Unlock()
	switch o := chain.own[tx.Nonce()]; {
	case outcome == sendNonceUsed:
		delete(chain.own, tx.Nonce())
	case o == nil:
	case outcome == sendTaken:
		o.failed, o.sentAt = false, time.Now()
	case outcome == sendUnanswered || outcome == sendRefused:
		o.failed = true
	}
	return outcome, err
}

// reprice signs tx again at the chain's fees of now and at least factor
// times its fee cap and tip (never above MaxFee), records it and returns it.
func (r *Relayer) reprice(ctx context.Context, chain *relayChain, tx *types.Transaction, factor int64) (*types.Transaction, error) {
	chain.staleFees()
	tip, feeCap, err := r.fees(ctx, chain)
	if err != nil {
		return nil, err
	}
	f := big.NewInt(factor)
	tip = bigMax(tip, new(big.Int).Mul(tx.GasTipCap(), f))
	feeCap = bigMax(feeCap, new(big.Int).Mul(tx.GasFeeCap(), f))
	if r.cfg.MaxFee != nil {
		feeCap = bigMin(feeCap, r.cfg.MaxFee)
		tip = bigMin(tip, feeCap)
	}
	next, err := r.sign(chain, &types.DynamicFeeTx{Nonce: tx.Nonce(), GasTipCap: tip, GasFeeCap: feeCap, Gas: tx.Gas(), To: tx.To(), Value: tx.Value(), Data: tx.Data()})
	if err != nil {
		return nil, err
	}
	if err := r.record(ctx, chain, next); err != nil {
		return nil, err
	}
	chain.follow(tx.Hash(), next.Hash())
	return next, nil
}

// replace sends tx again with fees raised by at least the replacement bump
// nodes ask (a tenth; an eighth here), and at least those the chain asks
// now; the settlements awaiting tx await the replacement too.
func (r *Relayer) replace(ctx context.Context, chain *relayChain, tx *types.Transaction) error {
	chain.staleFees()
	tip, feeCap, err := r.fees(ctx, chain)
	if err != nil {
		return err
	}
	tip = bigMax(tip, bump(tx.GasTipCap()))
	feeCap = bigMax(feeCap, bump(tx.GasFeeCap()))
	if r.cfg.MaxFee != nil && feeCap.Cmp(r.cfg.MaxFee) > 0 {
		if bump(tx.GasFeeCap()).Cmp(r.cfg.MaxFee) > 0 {
			// The cap allows no higher bid: the transaction waits for
			// the base fee to fall.
			_ = r.resend(ctx, chain, tx)
			return nil
		}
		feeCap = new(big.Int).Set(r.cfg.MaxFee)
		tip = bigMin(tip, feeCap)
	}
	next, err := r.sign(chain, &types.DynamicFeeTx{Nonce: tx.Nonce(), GasTipCap: tip, GasFeeCap: feeCap, Gas: tx.Gas(), To: tx.To(), Value: tx.Value(), Data: tx.Data()})
	if err != nil {
		return err
	}
	if err := r.record(ctx, chain, next); err != nil {
		return err
	}
	chain.follow(tx.Hash(), next.Hash())
	switch outcome, err := r.transmit(ctx, chain, next); outcome {
	case sendTaken:
		r.logger.InfoContext(ctx, "relayer transaction replaced with higher fees", "network", chain.network, "nonce", tx.Nonce(), "transaction", next.Hash().Hex(), "replaces", tx.Hash().Hex(), "fee_cap", feeCap.String())
		return nil
	case sendNonceUsed, sendUnanswered:
		// Mined meanwhile (the first, or this one): the waiters find it.
		// Unanswered: the keeper sends it again.
		return nil
	default:
		return fmt.Errorf("replace transaction %d: %w", tx.Nonce(), err)
	}
}

// fill sends a transfer of nothing from the relayer to itself at nonce, so
// that the nonce, whose own transaction will not come (its process died, or
// the node refused it for good), is no gap: over prev's fees when prev, a
// transaction of that nonce, may still sit in the pool. The fill is sent
// first as prev itself when prev is known and has never been seen by this
// process: a pool that lost it takes it back at no cost.
func (r *Relayer) fill(ctx context.Context, chain *relayChain, nonce uint64, prev *types.Transaction) error {
	chain.staleFees()
	tip, feeCap, err := r.fees(ctx, chain)
	if err != nil {
		return err
	}
	if prev != nil {
		tip = bigMax(tip, bump(prev.GasTipCap()))
		feeCap = bigMax(feeCap, bump(prev.GasFeeCap()))
	}
	self := r.address
	tx, err := r.sign(chain, &types.DynamicFeeTx{Nonce: nonce, GasTipCap: tip, GasFeeCap: feeCap, Gas: 21_000, To: &self})
	if err != nil {
		return err
	}
	if err := r.record(ctx, chain, tx); err != nil {
		return err
	}
	switch outcome, err := r.transmit(ctx, chain, tx); outcome {
	case sendTaken:
		r.logger.InfoContext(ctx, "relayer nonce filled", "network", chain.network, "nonce", nonce, "transaction", tx.Hash().Hex())
		return nil
	case sendNonceUsed, sendUnanswered:
		return nil
	default:
		chain.untrack(nonce)
		return fmt.Errorf("fill nonce %d: %w", nonce, err)
	}
}

// follow makes the settlements awaiting the receipt of old await that of
// next too (a replacement: whichever is mined is the one).
func (c *relayChain) follow(old, next common.Hash) {
	c.receiptsMu.Lock()
	defer c.receiptsMu.Unlock()
	if w, ok := c.waiters[old]; ok {
		c.waiters[next] = w
		w.hashes = append(w.hashes, next)
	}
}

// bump returns v raised by an eighth (and at least 1): above the tenth
// geth and anvil ask of a replacement.
func bump(v *big.Int) *big.Int {
	b := new(big.Int).Div(v, big.NewInt(8))
	if b.Sign() == 0 {
		b.SetInt64(1)
	}
	return b.Add(b, v)
}

func bigMax(a, b *big.Int) *big.Int {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

func bigMin(a, b *big.Int) *big.Int {
	if a.Cmp(b) <= 0 {
		return a
	}
	return b
}

// unsentAfter is how long a nonce allocated by another process may stay
// without a recorded transaction before it is filled.
const unsentAfter = 5 * time.Second

// resendLowest is how many of the lowest outstanding nonces each keeping
// pass sends again when the node cannot say which it lacks.
const resendLowest = 8

// maxFeeRetries bounds how often one send is signed again at fresher fees
// after a node refused it as priced under the base fee.
const maxFeeRetries = 6

// isFeeTooLow reports whether a node refused a transaction because its fee
// cap is under the base fee of the block to come (anvil refuses those;
// geth keeps them until the fee falls).
func isFeeTooLow(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "less than block base fee") || strings.Contains(msg, "fee cap less than") ||
		strings.Contains(msg, "transaction underpriced") && !strings.Contains(msg, "replacement")
}

// isNonceTooLow reports whether a node refused a transaction because its
// nonce was used already.
func isNonceTooLow(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "nonce too low")
}

// isUnderpriced reports whether a node refused a transaction because it
// holds another of the same nonce that this one does not outbid.
func isUnderpriced(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "replacement transaction underpriced")
}

// isTransient reports whether a send's error leaves it unknown whether the
// node took the transaction: no answer in time, a cut connection, a server
// error.
func isTransient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"connection reset", "connection refused", "eof", "broken pipe", "timeout", "502 bad gateway", "503 service unavailable", "504 gateway"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// staleFees makes the next fees read the chain again: a transaction that
// sat unmined was priced by fees the chain has moved past.
func (c *relayChain) staleFees() {
	c.gasMu.Lock()
	c.fees.readAt = time.Time{}
	c.gasMu.Unlock()
}
