// Package chanpay accepts payments of x402's batch-settlement scheme on EVM
// networks: it verifies deposit, voucher and refund payloads against the
// seller's own requirement and the channel's record in Postgres
// (store.Channel), and settles them after the call's operation succeeded.
// x402/evm/channel is the pure verification core it applies; this package
// is where the record is read and its changes made.
//
// A voucher is charged off chain: its settlement sends nothing, and its
// charge (store.ChannelCharged) is appended with the call's
// settlement.confirmed, in the transaction that releases the result
// (x402.SettleResponse.Ledger). A deposit is sent on chain through the
// relayer (Sender: channel.DepositInput to channel.SettlementAddress) once
// the operation succeeded, as an exact payment's transfer is, then the
// channel opened (or topped up) and charged. A refund payload asks a
// cooperative refund of what the seller did not charge
// (channel.RefundAmount): no operation runs; Refund verifies it, holds the
// channel and queues its job (RefundArgs), which a worker runs (it signs
// the refund with the receiver authorizer and sends it through the
// relayer: worker/refund.go), and returns it pending.
//
// A channel the seller has no record of, named by a voucher, is taken up
// from the chain (channel.ReadState: store.EventChannelAdopted), charged
// what was claimed there: a seller that lost its state forfeits the
// vouchers it had not claimed, never charges a client twice.
package chanpay

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/evm/channel"
)

// Sender sends the seller's transactions: the relayer (evm.Relayer.Send,
// Await).
type Sender interface {
	// Send sends a transaction of the relayer's key to to with input on
	// network (gas estimated when 0) and returns its hash once it is
	// recorded and handed to the node.
	Send(ctx context.Context, network string, to common.Address, input []byte, gas uint64) (common.Hash, error)
	// Await waits for the receipt of a transaction Send sent.
	Await(ctx context.Context, network string, hash common.Hash) (*types.Receipt, error)
}

// Simulator is a Sender that runs a transaction before sending it, at the
// fees and gas limit it would be sent with (evm.Relayer.Call): a deposit
// is run first, so that a contract wallet's code that answers a free call
// (verification's) otherwise than a transaction is caught with nothing
// sent.
type Simulator interface {
	// Call runs input against to on network from the sender's address.
	Call(ctx context.Context, network string, to common.Address, input []byte) ([]byte, error)
}

// BlockNamer is a Sender whose network's transactions are followed until
// final (evm.Relayer.SettledBlock): a deposit's settlement names its block,
// and the worker follows it, and sends it again after a reorganisation,
// as an exact settlement's.
type BlockNamer interface {
	// SettledBlock returns the block of receipt to follow, nil when
	// network's transactions are final at their receipt.
	SettledBlock(network string, receipt *types.Receipt) (*x402.SettledBlock, error)
}

// Config configures a Scheme.
type Config struct {
	// Pool is the database of the channels' records.
	Pool *pgxpool.Pool
	// Chains reads each network's chain (channel state, signers' code).
	Chains map[string]channel.Caller
	// Sender sends deposits.
	Sender Sender
	// ReceiverAuthorizer is the seller's key whose address the quotes
	// name; the workers sign the claims and the refunds with it
	// (worker/claim.go, worker/refund.go).
	ReceiverAuthorizer *ecdsa.PrivateKey
	// Clock tells the time of deposits' authorizations and of refunds'
	// requests (nil: real).
	Clock clock.Clock
	// PayerCodeGasCap is the gas a payer's code checking a signature
	// (a contract wallet's isValidSignature) runs with at verification
	// (channel.GasCapped): the claims of its vouchers go under the same
	// cap (worker.ClaimConfig). PAYER_CODE_GAS_CAP; defaults to
	// evm.DefaultPayerCodeGasCap.
	PayerCodeGasCap uint64
	// Refusals tells which wallets' code is refused (evm.Verifier): a
	// voucher or deposit with no payer authorizer, whose check runs its
	// payer's code, is refused while its payer is. Optional.
	Refusals CodeRefusals
}

// CodeRefusals tells whether the code of a network's wallets is refused
// (evm.Verifier.RefusedCode, reading evm.PayerCodeRefusals): the first of
// addrs refused now and the end of its refusal.
type CodeRefusals interface {
	RefusedCode(ctx context.Context, network string, addrs ...common.Address) (common.Address, time.Time, bool, error)
}

// Scheme verifies and settles batch-settlement payments: the
// x402.SchemeVerifier, x402.Authenticator and x402.Settler of
// "eip155/batch-settlement", and the x402.SchemeRefunder of its refunds.
type Scheme struct {
	cfg Config
	// jobs inserts the refunds' jobs (an insert-only River client of
	// Pool: the workers that make them register RefundArgs).
	jobs *river.Client[pgx.Tx]
	// records reads the channels' records that payments being verified
	// at once ask for with one statement (newRecords).
	records *store.GroupCommitter[*recordRead]
	// configs decodes the payloads' channel configurations, each
	// channel's once while it is in use.
	configs *channel.Configs
}

// configsKept bounds the channel configurations a Scheme keeps decoded
// (channel.Configs): about 600 bytes each, key included.
const configsKept = 4096

// recordRead is a channel whose record Verify reads (Scheme.get): its
// row, nil when it has none.
type recordRead struct {
	key store.ChannelKey
	row *store.Channel
}

// newRecords returns what reads the channels' records of the payments
// being verified: those read at once are read with one statement
// (store.ChannelList), not one each.
func newRecords(pool *pgxpool.Pool, clk clock.Clock) *store.GroupCommitter[*recordRead] {
	return store.NewGroupReader(&store.GroupCommitConfig{Clock: clk}, func(ctx context.Context, reads []*recordRead) error {
		keys := make([]store.ChannelKey, len(reads))
		for i, r := range reads {
			keys[i] = r.key
		}
		rows, err := store.ChannelList(ctx, pool, keys)
		if err != nil {
			return err
		}
		byKey := make(map[store.ChannelKey]*store.Channel, len(rows))
		for _, row := range rows {
			byKey[store.ChannelKey{Network: row.Network, ID: row.State.ChannelID}] = row
		}
		for _, r := range reads {
			row, ok := byKey[r.key]
			if !ok || row == nil {
				// None, or handed to another read of the same channel
				// (one a caller may change): read again, alone.
				r.row = nil
				if ok {
					if r.row, err = store.ChannelGet(ctx, pool, r.key.Network, r.key.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
						return err
					}
				}
				continue
			}
			r.row, byKey[r.key] = row, nil
		}
		return nil
	})
}

// Wait returns once no read of the channels' records that Verify started
// still runs: its owner calls it on stop, after the last Verify, before
// the pool closes.
func (s *Scheme) Wait() { s.records.Wait() }

// get returns the record of channel id on network, read with the others
// being read then (newRecords), or store.ErrNotFound.
func (s *Scheme) get(ctx context.Context, network string, id common.Hash) (*store.Channel, error) {
	r := &recordRead{key: store.ChannelKey{Network: network, ID: id}}
	if err := s.records.Commit(ctx, r); err != nil {
		return nil, fmt.Errorf("get channel %s on %s: %w", id.Hex(), network, err)
	}
	if r.row == nil {
		return nil, fmt.Errorf("get channel %s on %s: %w", id.Hex(), network, store.ErrNotFound)
	}
	return r.row, nil
}

// New returns the Scheme of cfg.
func New(cfg *Config) (*Scheme, error) {
	if cfg.Pool == nil || cfg.ReceiverAuthorizer == nil || cfg.Sender == nil {
		return nil, errors.New("chanpay: Pool, Sender and ReceiverAuthorizer are required")
	}
	c := *cfg
	c.Clock = clock.Or(c.Clock)
	c.PayerCodeGasCap = cmp.Or(c.PayerCodeGasCap, evm.DefaultPayerCodeGasCap)
	inserter, err := river.NewClient(riverpgxv5.New(c.Pool), &river.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("chanpay: refund jobs: %w", err)
	}
	return &Scheme{cfg: c, jobs: inserter, records: newRecords(c.Pool, c.Clock), configs: channel.NewConfigs(configsKept)}, nil
}

// signatures returns the caller that checks signatures on network: its
// chain, the payers' code run within PayerCodeGasCap.
func (s *Scheme) signatures(network string) channel.Caller {
	return channel.GasCapped(s.cfg.Chains[network], s.cfg.PayerCodeGasCap)
}

// ReceiverAuthorizer returns the address of the receiver authorizer key.
func (s *Scheme) ReceiverAuthorizer() common.Address {
	return crypto.PubkeyToAddress(s.cfg.ReceiverAuthorizer.PublicKey)
}

var (
	_ x402.SchemeVerifier  = (*Scheme)(nil)
	_ x402.Authenticator   = (*Scheme)(nil)
	_ x402.Settler         = (*Scheme)(nil)
	_ x402.SchemeRefunder  = (*Scheme)(nil)
	_ x402.OffChainSettler = (*Scheme)(nil)
)

// Identify returns the payer and the nonce of a batch-settlement payload
// with no I/O: the channel's payer (EIP-55), and
// "channel/<0x id>/<maxClaimableAmount>" for a deposit or a voucher (one
// voucher pays one call), "channel/<0x id>/refund/<maxClaimableAmount>"
// for a refund.
func Identify(p *x402.PaymentPayload) (payer, nonce string, err error) {
	d, err := channel.Decode(p.Payload)
	if err != nil {
		return "", "", err
	}
	return d.Config.Payer.Hex(), nonceOf(d), nil
}

// nonceOf is a payload's payment nonce (Identify).
func nonceOf(d *channel.Payload) string {
	id := strings.ToLower(d.Voucher.ChannelID.Hex())
	if d.Type == channel.TypeRefund {
		return x402.ChannelNoncePrefix + id + "/refund/" + d.Voucher.MaxClaimable.String()
	}
	return x402.ChannelNoncePrefix + id + "/" + d.Voucher.MaxClaimable.String()
}

// refuse is a refusal of reason.
func refuse(reason, format string, args ...any) *x402.Refusal {
	return &x402.Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Authenticate checks that payload answers req and that its voucher is
// its payer's: for a new payment sent under a payment identifier used
// before (x402.Authenticator). Nothing of the channel's record is read.
func (s *Scheme) Authenticate(ctx context.Context, req *x402.Requirements, payload *x402.PaymentPayload) (string, error) {
	d, terms, err := s.decode(req, payload)
	if err != nil {
		return "", err
	}
	if err := channel.VerifyVoucher(ctx, s.signatures(req.Network), terms.ChainID, &d.Config, &d.Voucher); err != nil {
		return "", err
	}
	return d.Config.Payer.Hex(), nil
}

// decode decodes payload and checks its channel's configuration against
// req.
func (s *Scheme) decode(req *x402.Requirements, payload *x402.PaymentPayload) (*channel.Payload, *channel.Terms, error) {
	d, err := s.configs.Decode(payload.Payload)
	if err != nil {
		return nil, nil, err
	}
	terms, err := channel.TermsOf(req)
	if err != nil {
		return nil, nil, err
	}
	if err := terms.CheckConfig(d); err != nil {
		return nil, nil, err
	}
	return d, terms, nil
}

// record returns the seller's record of the payload's channel: its row,
// or, when it has none, the channel as the chain shows it (row nil),
// taken up (adopted) when it has a balance there and adopt is set.
func (s *Scheme) record(ctx context.Context, network string, chainID *big.Int, d *channel.Payload, adopt bool) (*channel.State, *store.Channel, error) {
	for range 2 {
		row, err := s.get(ctx, network, d.Voucher.ChannelID)
		if err == nil {
			return &row.State, row, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, nil, err
		}
		caller := s.cfg.Chains[network]
		if caller == nil {
			return nil, nil, fmt.Errorf("no chain reader for %s", network)
		}
		onchain, err := channel.ReadState(ctx, caller, d.Voucher.ChannelID, nil)
		if err != nil {
			return nil, nil, err
		}
		st := channel.NewState(&d.Config, chainID, onchain)
		if !adopt || onchain.Balance.Sign() == 0 {
			return st, nil, nil
		}
		err = pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error { return store.ChannelAdopt(ctx, tx, network, st) })
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return nil, nil, err
		}
		// Adopted, here or by another process meanwhile: read its row.
	}
	return nil, nil, fmt.Errorf("channel %s on %s: adopted and not found", d.Voucher.ChannelID.Hex(), network)
}

// Verify checks a deposit or voucher payload against req and the
// channel's record, in the order the spec's server answers: the channel's
// configuration, the channel busy with another call (channel_busy), the
// cumulative amount (the corrective 402: the refusal's Option carries the
// channel's state and last voucher), the voucher's signature, a deposit's
// authorization, the escrow on chain. The payment it returns holds the
// channel (x402.Payment.Hold) unless it opens it. A refund payload is
// refused here: it is no payment for a call (Refund).
func (s *Scheme) Verify(ctx context.Context, req *x402.Requirements, payload *x402.PaymentPayload) (*x402.Payment, error) {
	d, terms, err := s.decode(req, payload)
	if err != nil {
		return nil, err
	}
	if d.Type == channel.TypeRefund {
		return nil, refuse(channel.ReasonRefundPayload, "a refund pays for no call: send it to the resource with GET")
	}
	price, ok := new(big.Int).SetString(req.Amount, 10)
	if !ok {
		return nil, fmt.Errorf("requirement amount %q", req.Amount)
	}
	st, row, err := s.record(ctx, req.Network, terms.ChainID, d, d.Type == channel.TypeVoucher)
	if err != nil {
		return nil, err
	}
	if d.Type == channel.TypeVoucher && row == nil {
		return nil, refuse(channel.ReasonChannelNotFound, "channel %s has no balance on chain: deposit first", d.Voucher.ChannelID.Hex())
	}
	if row != nil && row.BusyCall != "" {
		return nil, refuse(channel.ReasonChannelBusy, "another call of channel %s is running: send this one when it has ended", d.Voucher.ChannelID.Hex())
	}
	if err := s.checkRefused(ctx, req.Network, &d.Config); err != nil {
		return nil, err
	}
	now := s.cfg.Clock.Now()
	if err := terms.Verify(ctx, s.signatures(req.Network), d, st.Charged, price, &st.OnChain, now.Unix()); err != nil {
		var r *x402.Refusal
		if errors.As(err, &r) && channel.Corrective(r.Reason) {
			return nil, s.corrective(req, st, r)
		}
		return nil, err
	}
	ledger, err := payload.Ledger()
	if err != nil {
		return nil, err
	}
	p := &x402.Payment{Network: req.Network, Payer: d.Config.Payer.Hex(), Nonce: nonceOf(d), Amount: req.Amount, Asset: req.Asset,
		Payload: ledger, VerifiedAt: now.UTC()}
	if row != nil {
		p.Hold = &x402.ChannelHold{ChannelID: d.Voucher.ChannelID, Charged: new(big.Int).Set(st.Charged)}
	}
	return p, nil
}

// checkRefused refuses a payment of a channel with no payer authorizer
// (its signatures checked by its payer's code, when the payer is a
// contract wallet) while its payer's code is refused.
func (s *Scheme) checkRefused(ctx context.Context, network string, c *channel.Config) error {
	if s.cfg.Refusals == nil || c.PayerAuthorizer != (common.Address{}) {
		return nil
	}
	refused, until, ok, err := s.cfg.Refusals.RefusedCode(ctx, network, c.Payer)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if ok {
		return refuse(channel.ReasonPayerCodeRefused, "%s's code made a claim or settlement of this seller fail after it accepted; its payments are refused until %s",
			refused.Hex(), until.UTC().Format(time.RFC3339))
	}
	return nil
}

// corrective returns refusal r with the corrective option: req's extra
// with the channel's state and its last voucher.
func (s *Scheme) corrective(req *x402.Requirements, st *channel.State, r *x402.Refusal) error {
	var extra map[string]json.RawMessage
	if err := json.Unmarshal(req.Extra, &extra); err != nil {
		return fmt.Errorf("corrective 402: extra: %w", err)
	}
	state, err := json.Marshal(st.Snapshot())
	if err != nil {
		return fmt.Errorf("corrective 402: %w", err)
	}
	extra["channelState"] = state
	if last := st.LastVoucher(); last != nil {
		if extra["voucherState"], err = json.Marshal(last); err != nil {
			return fmt.Errorf("corrective 402: %w", err)
		}
	}
	raw, err := json.Marshal(extra)
	if err != nil {
		return fmt.Errorf("corrective 402: %w", err)
	}
	option := *req
	option.Extra = raw
	out := *r
	out.Option = &option
	return &out
}

// OffChain reports whether p is a voucher's payment, whose settlement is
// a charge in the database only (x402.OffChainSettler).
func (s *Scheme) OffChain(p *x402.Payment) bool {
	d, err := s.decodePayment(p)
	return err == nil && d.Type == channel.TypeVoucher
}

// decodePayment returns the batch-settlement payload of p, a payment
// Verify accepted, decoded once for OffChain and Settle
// (x402.Payment.Decoded). A payload that is not one is an
// *x402.Refusal; a payment that is no PaymentPayload another error.
func (s *Scheme) decodePayment(p *x402.Payment) (*channel.Payload, error) {
	if d, ok := p.Decoded.(*channel.Payload); ok {
		return d, nil
	}
	var pp struct {
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(p.Payload, &pp); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	d, err := s.configs.Decode(pp.Payload)
	if err != nil {
		return nil, err
	}
	p.Decoded = d
	return d, nil
}

// Settle settles a payment Verify accepted, after its call's operation
// succeeded: a voucher is charged off chain, a deposit sent on chain
// first. The charge is the response's Ledger (store events), which the
// worker appends with the call's settlement.confirmed; the call must be
// named in ctx (x402.WithCall). The channel's record is the one read with
// the call's payment when the transaction that settles it did so
// (x402.Payment.Record), else read here.
func (s *Scheme) Settle(ctx context.Context, p *x402.Payment) (*x402.SettleResponse, error) {
	d, err := s.decodePayment(p)
	if err != nil {
		if _, ok := errors.AsType[*x402.Refusal](err); ok {
			return failed(p, err)
		}
		return nil, fmt.Errorf("settle: %w", err)
	}
	price, ok := new(big.Int).SetString(p.Amount, 10)
	if !ok {
		return nil, fmt.Errorf("settle: amount %q", p.Amount)
	}
	chainID, err := chainIDOf(p.Network)
	if err != nil {
		return nil, err
	}
	callID := x402.CallOf(ctx)
	stream := store.ChannelStream(p.Network, d.Voucher.ChannelID)
	row, err := s.settleRecord(ctx, p, d.Voucher.ChannelID)
	if err != nil {
		return nil, fmt.Errorf("settle: %w", err)
	}
	var events []store.NewEvent
	var st *channel.State
	var tx common.Hash
	var block *x402.SettledBlock
	if row != nil && row.State.Charged.Cmp(d.Voucher.MaxClaimable) >= 0 && d.Type != channel.TypeRefund {
		// Charged already: a settlement made again (its deposit undone by
		// a reorganisation, sent again if its authorization is unused).
		// Nothing is charged twice.
		return s.settledAgain(ctx, p, d, row, price)
	}
	switch d.Type {
	case channel.TypeVoucher:
		if row == nil {
			return failed(p, refuse(channel.ReasonMissingChannel, "channel %s has no record", d.Voucher.ChannelID.Hex()))
		}
		st = &row.State
	case channel.TypeDeposit:
		var onchain *channel.OnChain
		tx, block, onchain, err = s.deposit(ctx, p.Network, d)
		if err != nil {
			var r *x402.Refusal
			if errors.As(err, &r) {
				return failed(p, r)
			}
			return nil, err
		}
		amount := d.Deposit.Amount.String()
		if row == nil {
			st = channel.NewState(&d.Config, chainID, onchain)
			events = append(events, store.NewEvent{Stream: stream, Type: store.EventChannelOpened, Data: store.ChannelOpened{Config: &d.Config,
				CallID: callID, Transaction: tx.Hex(), Amount: amount, Balance: onchain.Balance.String(), TotalClaimed: onchain.TotalClaimed.String()}})
		} else {
			st = &row.State
			st.OnChain.Balance = onchain.Balance
			events = append(events, store.NewEvent{Stream: stream, Type: store.EventChannelDeposited, Data: store.ChannelOpened{
				CallID: callID, Transaction: tx.Hex(), Amount: amount, Balance: onchain.Balance.String()}})
		}
	default:
		return failed(p, refuse(channel.ReasonPayloadType, "a %s payload pays for no call", d.Type))
	}
	next, err := st.Charge(d, price)
	if err != nil {
		return failed(p, err)
	}
	events = append(events, store.NewEvent{Stream: stream, Type: store.EventChannelCharged, Data: store.ChannelCharged{
		CallID: callID, Amount: price.String(), Charged: next.Charged.String(), Signed: next.Signed.String(), Signature: next.Signature}})
	var resp *channel.Response
	if d.Type == channel.TypeDeposit {
		resp = channel.DepositResponse(p.Network, next, tx, d.Deposit.Amount, price)
	} else {
		resp = channel.VoucherResponse(p.Network, next, price)
	}
	out, err := settleResponse(resp)
	if err != nil {
		return nil, err
	}
	out.Ledger, out.Block = events, block
	return out, nil
}

// settleRecord returns the record of the channel id p is charged to, nil
// when there is none: the one read with p's call in the transaction that
// settles it (x402.Payment.Record, taken once), or else read now.
func (s *Scheme) settleRecord(ctx context.Context, p *x402.Payment, id common.Hash) (*store.Channel, error) {
	rec, _ := p.Record.(*store.Channel)
	p.Record = nil
	if rec != nil && rec.Network == p.Network && rec.State.ChannelID == id {
		return rec, nil
	}
	row, err := store.ChannelGet(ctx, s.cfg.Pool, p.Network, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return row, err
}

// settledAgain answers the settlement of p made again once its voucher was
// charged (row): a voucher's response as it was, a deposit sent again when
// a reorganisation undid it. It records nothing.
func (s *Scheme) settledAgain(ctx context.Context, p *x402.Payment, d *channel.Payload, row *store.Channel, price *big.Int) (*x402.SettleResponse, error) {
	if d.Type != channel.TypeDeposit {
		return settleResponse(channel.VoucherResponse(p.Network, &row.State, price))
	}
	tx, block, onchain, err := s.deposit(ctx, p.Network, d)
	if err != nil {
		var r *x402.Refusal
		if errors.As(err, &r) {
			return failed(p, r)
		}
		return nil, err
	}
	st := row.State
	st.OnChain = *onchain
	out, err := settleResponse(channel.DepositResponse(p.Network, &st, tx, d.Deposit.Amount, price))
	if err != nil {
		return nil, err
	}
	out.Block = block
	return out, nil
}

// settleResponse is r as the x402 settle response.
func settleResponse(r *channel.Response) (*x402.SettleResponse, error) {
	out := &x402.SettleResponse{Success: r.Success, ErrorReason: r.ErrorReason, Payer: r.Payer, Transaction: r.Transaction,
		Network: r.Network, Amount: r.Amount}
	if r.Extra != nil {
		extra, err := json.Marshal(r.Extra)
		if err != nil {
			return nil, fmt.Errorf("settle response: %w", err)
		}
		out.Extra = extra
	}
	return out, nil
}

// failed is the refused settlement of p for err, a refusal (any other
// error is returned: tried again).
func failed(p *x402.Payment, err error) (*x402.SettleResponse, error) {
	var r *x402.Refusal
	if !errors.As(err, &r) {
		return nil, err
	}
	return &x402.SettleResponse{ErrorReason: r.Reason, Payer: p.Payer, Network: p.Network}, nil
}

// chainIDOf returns the chain id of an eip155 network.
func chainIDOf(network string) (*big.Int, error) {
	id, ok := strings.CutPrefix(network, "eip155:")
	n, err := strconv.ParseUint(id, 10, 64)
	if !ok || err != nil {
		return nil, fmt.Errorf("network %q is not eip155:<chain id>", network)
	}
	return new(big.Int).SetUint64(n), nil
}

// authorizationStateSelector is EIP-3009's authorizationState(address,bytes32).
var authorizationStateSelector = crypto.Keccak256([]byte("authorizationState(address,bytes32)"))[:4]

// deposit sends d's deposit, unless its authorization was used already
// (an earlier attempt's, mined), and returns its transaction (zero when
// found used), the block to follow it in (nil: none) and the channel's
// state on chain after it.
func (s *Scheme) deposit(ctx context.Context, network string, d *channel.Payload) (common.Hash, *x402.SettledBlock, *channel.OnChain, error) {
	tx, block, onchain, err := s.sendDeposit(ctx, network, d)
	if err != nil && evm.IsRevert(err) {
		return tx, nil, nil, refuse(channel.ReasonDepositSimulationFailed, "the deposit would revert: %v", err)
	}
	return tx, block, onchain, err
}

// sendDeposit is deposit, its revert an error.
func (s *Scheme) sendDeposit(ctx context.Context, network string, d *channel.Payload) (common.Hash, *x402.SettledBlock, *channel.OnChain, error) {
	caller := s.cfg.Chains[network]
	if caller == nil {
		return common.Hash{}, nil, nil, fmt.Errorf("deposit: no chain reader for %s", network)
	}
	nonce := channel.DepositNonce(d.Voucher.ChannelID, d.Deposit.ERC3009.Salt)
	input := append(append(append([]byte{}, authorizationStateSelector...), common.LeftPadBytes(d.Config.Payer.Bytes(), 32)...), nonce[:]...)
	used, err := caller.CallContract(ctx, ethereum.CallMsg{To: &d.Config.Token, Data: input}, nil)
	if err != nil {
		return common.Hash{}, nil, nil, fmt.Errorf("deposit: read its authorization's state: %w", err)
	}
	var tx common.Hash
	var at *big.Int
	var block *x402.SettledBlock
	if new(big.Int).SetBytes(used).Sign() == 0 {
		input, err := channel.DepositInput(d)
		if err != nil {
			return common.Hash{}, nil, nil, err
		}
		if sim, ok := s.cfg.Sender.(Simulator); ok {
			if _, err := sim.Call(ctx, network, channel.SettlementAddress, input); err != nil {
				return common.Hash{}, nil, nil, fmt.Errorf("deposit: run: %w", err)
			}
		}
		if tx, err = s.cfg.Sender.Send(ctx, network, channel.SettlementAddress, input, 0); err != nil {
			return common.Hash{}, nil, nil, fmt.Errorf("deposit: send: %w", err)
		}
		receipt, err := s.cfg.Sender.Await(ctx, network, tx)
		if err != nil {
			return common.Hash{}, nil, nil, fmt.Errorf("deposit: await %s: %w", tx.Hex(), err)
		}
		tx = receipt.TxHash
		if receipt.Status != types.ReceiptStatusSuccessful {
			return tx, nil, nil, refuse(channel.ReasonDepositTransactionFailed, "deposit transaction %s reverted", tx.Hex())
		}
		at = receipt.BlockNumber
		if namer, ok := s.cfg.Sender.(BlockNamer); ok {
			if block, err = namer.SettledBlock(network, receipt); err != nil {
				return common.Hash{}, nil, nil, err
			}
		}
	}
	onchain, err := channel.ReadState(ctx, caller, d.Voucher.ChannelID, at)
	if err != nil {
		return common.Hash{}, nil, nil, fmt.Errorf("deposit: %w", err)
	}
	return tx, block, onchain, nil
}

// RefundArgs are the args of the job that makes a cooperative refund
// (worker.Claimer's refund job), inserted by Refund with the refund's
// request: refund CallID of Amount on the channel ChannelID of Network,
// signed with refund nonce Nonce, asked at RequestedAt.
type RefundArgs struct {
	Network     string      `json:"network"`
	ChannelID   common.Hash `json:"channel_id"`
	CallID      string      `json:"call_id"`
	Amount      string      `json:"amount"`
	Nonce       string      `json:"nonce"`
	RequestedAt time.Time   `json:"requested_at"`
}

// Kind is the River job kind.
func (RefundArgs) Kind() string { return "channel.refund" }

// InsertOpts puts refunds on the settlement queue. The job waits for its
// transaction by snoozing, which spends no attempt; the attempts are for
// the errors (the chain or the database out of reach): with River's
// backoff, ten take about four hours, after which the refund is recorded
// failed and its channel freed.
func (RefundArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueSettlement, MaxAttempts: 10}
}

// refundPrefix is the start of the ids of the refunds payload d asks with
// refund nonce nonce: "refund/<payment nonce>/<refund nonce>/<amount asked,
// or all>/"; each request's id (the channel's busy_call while it runs)
// ends with a random part of its own.
func refundPrefix(d *channel.Payload, nonce *big.Int) string {
	amount := "all"
	if d.RefundAmount != nil {
		amount = d.RefundAmount.String()
	}
	return "refund/" + nonceOf(d) + "/" + nonce.String() + "/" + amount + "/"
}

// newRefundID returns the id of a new refund request of prefix.
func newRefundID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Refund has the cooperative refund a refund payload asks made: what the
// channel holds beyond what the seller charged (channel.RefundAmount),
// once the payload's voucher matches the seller's charge (the corrective
// 402 otherwise). In one transaction it holds the channel busy with the
// refund, appends store.EventChannelRefundRequested and inserts the
// refund's job (RefundArgs), which signs it with the receiver authorizer,
// sends it through the relayer and records its outcome; it returns the
// refund pending, whose outcome the caller awaits. The same payload sent
// again while its refund is being made awaits that refund.
func (s *Scheme) Refund(ctx context.Context, req *x402.Requirements, payload *x402.PaymentPayload) (*x402.PendingRefund, error) {
	d, terms, err := s.decode(req, payload)
	if err != nil {
		return nil, err
	}
	if d.Type != channel.TypeRefund {
		return nil, refuse(channel.ReasonPayloadType, "a %s payload is no refund", d.Type)
	}
	st, row, err := s.record(ctx, req.Network, terms.ChainID, d, true)
	if err != nil {
		return nil, err
	}
	if row == nil {
		return nil, refuse(channel.ReasonChannelNotFound, "channel %s has no balance on chain", d.Voucher.ChannelID.Hex())
	}
	if row.BusyCall != "" {
		if strings.HasPrefix(row.BusyCall, refundPrefix(d, st.OnChain.RefundNonce)) {
			// This very refund, asked again while it is being made.
			return s.pending(req.Network, d, row.BusyCall), nil
		}
		return nil, refuse(channel.ReasonChannelBusy, "a call of channel %s is running", d.Voucher.ChannelID.Hex())
	}
	if err := terms.Verify(ctx, s.signatures(req.Network), d, st.Charged, new(big.Int), &st.OnChain, s.cfg.Clock.Now().Unix()); err != nil {
		var r *x402.Refusal
		if errors.As(err, &r) && channel.Corrective(r.Reason) {
			return nil, s.corrective(req, st, r)
		}
		return nil, err
	}
	// The chain's state now: the escrow claimed since, the refund nonce.
	onchain, err := channel.ReadState(ctx, s.cfg.Chains[req.Network], d.Voucher.ChannelID, nil)
	if err != nil {
		return nil, err
	}
	amount, err := channel.RefundAmount(d, onchain.Balance, st.Charged)
	if err != nil {
		return nil, err
	}
	id := newRefundID(refundPrefix(d, onchain.RefundNonce))
	err = pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		err := store.ChannelRefundRequest(ctx, tx, req.Network, d.Voucher.ChannelID, store.ChannelRefundRequested{CallID: id,
			Amount: amount.String(), Nonce: onchain.RefundNonce.String(), Charged: st.Charged.String()})
		if errors.Is(err, store.ErrConflict) {
			return refuse(channel.ReasonChannelBusy, "a call of channel %s is running", d.Voucher.ChannelID.Hex())
		}
		if err != nil {
			return err
		}
		_, err = s.jobs.InsertTx(ctx, tx, RefundArgs{Network: req.Network, ChannelID: d.Voucher.ChannelID, CallID: id,
			Amount: amount.String(), Nonce: onchain.RefundNonce.String(), RequestedAt: s.cfg.Clock.Now().UTC()}, nil)
		if err != nil {
			return fmt.Errorf("refund %s: insert its job: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.pending(req.Network, d, id), nil
}

// pending returns refund id of payload d's channel, pending: its outcome
// is read from the channel's events (store.ChannelRefundGet).
func (s *Scheme) pending(network string, d *channel.Payload, id string) *x402.PendingRefund {
	return &x402.PendingRefund{Stream: store.ChannelStream(network, d.Voucher.ChannelID), Outcome: func(ctx context.Context) (*x402.SettleResponse, error) {
		rec, err := store.ChannelRefundGet(ctx, s.cfg.Pool, network, d.Voucher.ChannelID, id)
		switch {
		case err != nil:
			return nil, err
		case rec.Failed != nil:
			return nil, refuse(rec.Failed.Reason, "%s", rec.Failed.Message)
		case rec.Refunded == nil:
			return nil, nil
		}
		return refundedResponse(network, &d.Config, d.Voucher.ChannelID, rec.Refunded)
	}}
}

// refundedResponse returns the answer of the refund of the channel id
// (of config) on network that r records.
func refundedResponse(network string, config *channel.Config, id common.Hash, r *store.ChannelRefunded) (*x402.SettleResponse, error) {
	st := channel.State{Config: *config, ChannelID: id}
	st.OnChain.WithdrawRequestedAt = r.WithdrawRequestedAt
	var nonce, amount *big.Int
	for _, f := range []struct {
		dst **big.Int
		v   string
	}{{&st.Charged, r.Charged}, {&st.OnChain.Balance, r.Balance}, {&st.OnChain.TotalClaimed, r.TotalClaimed}, {&nonce, r.Nonce}, {&amount, r.Amount}} {
		n, ok := new(big.Int).SetString(cmp.Or(f.v, "0"), 10)
		if !ok {
			return nil, fmt.Errorf("refund %s: %q is not a number", r.CallID, f.v)
		}
		*f.dst = n
	}
	st.OnChain.RefundNonce = nonce.Add(nonce, big.NewInt(1))
	return settleResponse(channel.RefundResponse(network, &st, common.HexToHash(r.Transaction), amount))
}
