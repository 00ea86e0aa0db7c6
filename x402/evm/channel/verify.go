package channel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/x402d/x402d/x402"
)

// Extra is the "extra" of a batch-settlement option in a 402's accepts.
type Extra struct {
	// ReceiverAuthorizer is the seller's key that signs claims and refunds.
	ReceiverAuthorizer common.Address `json:"receiverAuthorizer"`
	// WithdrawDelay is the channels' withdraw delay, in seconds.
	WithdrawDelay uint64 `json:"withdrawDelay"`
	// Name and Version are the token's EIP-712 domain.
	Name    string `json:"name"`
	Version string `json:"version"`
	// MinDeposit is the deposit the seller suggests, if any.
	MinDeposit string `json:"minDeposit,omitempty"`
	// ChannelState and VoucherState are set in a corrective 402 only.
	ChannelState *ChannelState `json:"channelState,omitempty"`
	VoucherState *VoucherState `json:"voucherState,omitempty"`
}

// ChannelState is the seller's snapshot of a channel, in a corrective 402's
// extra.channelState and a payment response's extra.channelState.
type ChannelState struct {
	ChannelID           common.Hash `json:"channelId"`
	Balance             string      `json:"balance"`
	TotalClaimed        string      `json:"totalClaimed"`
	WithdrawRequestedAt uint64      `json:"withdrawRequestedAt"`
	RefundNonce         string      `json:"refundNonce"`
	// ChargedCumulativeAmount is what the seller has charged the channel
	// in all.
	ChargedCumulativeAmount string `json:"chargedCumulativeAmount,omitempty"`
}

// VoucherState is the last voucher the seller holds for a channel, in a
// corrective 402's extra.voucherState: the client checks its signature
// before adopting the seller's chargedCumulativeAmount.
type VoucherState struct {
	SignedMaxClaimable string        `json:"signedMaxClaimable"`
	Signature          hexutil.Bytes `json:"signature"`
}

// ResponseExtra is the "extra" of a batch-settlement payment response.
type ResponseExtra struct {
	// ChargedAmount is what this call was charged; omitted for a refund.
	ChargedAmount string `json:"chargedAmount,omitempty"`
	// ChannelState is the channel after the call.
	ChannelState *ChannelState `json:"channelState,omitempty"`
}

// CorrectiveExtra returns the extra of the corrective 402's batch-settlement
// option: the option's own extra with the seller's channel snapshot and the
// last voucher it holds.
func CorrectiveExtra(extra *Extra, state *ChannelState, last *VoucherState) *Extra {
	out := *extra
	out.ChannelState, out.VoucherState = state, last
	return &out
}

// Terms are what the seller offers for batch-settlement on one network: a
// channel must be configured with them.
type Terms struct {
	// ChainID is the network's chain id.
	ChainID *big.Int
	// Asset is the token.
	Asset common.Address
	// PayTo is the channels' receiver.
	PayTo common.Address
	// ReceiverAuthorizer is the seller's authorizer key's address.
	ReceiverAuthorizer common.Address
	// WithdrawDelay is the channels' withdraw delay, in seconds.
	WithdrawDelay uint64
	// Name and Version are the token's EIP-712 domain, for deposits.
	Name, Version string
}

// TermsOf returns the terms of a batch-settlement option of a 402.
func TermsOf(req *x402.Requirements) (*Terms, error) {
	if req.Scheme != Scheme {
		return nil, refuse(ReasonScheme, "scheme %q is not %s", req.Scheme, Scheme)
	}
	id, ok := strings.CutPrefix(req.Network, "eip155:")
	chain, err := strconv.ParseUint(id, 10, 64)
	if !ok || err != nil || chain == 0 {
		return nil, refuse(ReasonNetworkMismatch, "network %q is not eip155:<chain id>", req.Network)
	}
	var extra Extra
	if err := json.Unmarshal(req.Extra, &extra); err != nil {
		return nil, fmt.Errorf("batch-settlement extra: %w", err)
	}
	if extra.ReceiverAuthorizer == (common.Address{}) {
		return nil, refuse(ReasonAuthorizerNotConfigured, "extra.receiverAuthorizer is missing")
	}
	if extra.Name == "" || extra.Version == "" {
		return nil, refuse(ReasonMissingEIP712Domain, "extra.name and extra.version are required")
	}
	if !isAddress(req.Asset) || !isAddress(req.PayTo) {
		return nil, fmt.Errorf("batch-settlement requirements: asset %q or payTo %q is not an address", req.Asset, req.PayTo)
	}
	return &Terms{
		ChainID: new(big.Int).SetUint64(chain), Asset: common.HexToAddress(req.Asset), PayTo: common.HexToAddress(req.PayTo),
		ReceiverAuthorizer: extra.ReceiverAuthorizer, WithdrawDelay: extra.WithdrawDelay, Name: extra.Name, Version: extra.Version,
	}, nil
}

// CheckConfig checks that the payload's channel is one of the terms: its
// configuration hashes to the voucher's channel id on the terms' chain,
// and its receiver, receiver authorizer, token and withdraw delay are the
// terms'.
func (t *Terms) CheckConfig(p *Payload) error {
	c := &p.Config
	if c.ID(t.ChainID) != p.Voucher.ChannelID {
		return refuse(ReasonChannelIDMismatch, "channelConfig does not hash to channel %s", p.Voucher.ChannelID.Hex())
	}
	switch {
	case c.Receiver != t.PayTo:
		return refuse(ReasonReceiverMismatch, "channel receiver %s is not payTo %s", c.Receiver.Hex(), t.PayTo.Hex())
	case c.ReceiverAuthorizer != t.ReceiverAuthorizer:
		return refuse(ReasonReceiverAuthorizerMismatch, "channel receiverAuthorizer %s is not %s", c.ReceiverAuthorizer.Hex(), t.ReceiverAuthorizer.Hex())
	case c.Token != t.Asset:
		return refuse(ReasonTokenMismatch, "channel token %s is not %s", c.Token.Hex(), t.Asset.Hex())
	case c.WithdrawDelay != t.WithdrawDelay:
		return refuse(ReasonWithdrawDelayMismatch, "channel withdrawDelay %d is not %d", c.WithdrawDelay, t.WithdrawDelay)
	case c.WithdrawDelay < MinWithdrawDelay || c.WithdrawDelay > MaxWithdrawDelay:
		return refuse(ReasonWithdrawDelayOutOfRange, "withdrawDelay %d is outside %d-%d seconds", c.WithdrawDelay, MinWithdrawDelay, MaxWithdrawDelay)
	}
	return nil
}

// Caller reads the chain for the checks of contract wallets' signatures:
// the signer's code and its EIP-1271 isValidSignature (an eth_call).
type Caller interface {
	CodeAt(ctx context.Context, account common.Address, blockNumber *big.Int) ([]byte, error)
	CallContract(ctx context.Context, call ethereum.CallMsg, blockNumber *big.Int) ([]byte, error)
}

// VerifyVoucher checks the voucher's signature as the settlement contract
// will when it is claimed: with a payer authorizer, an ECDSA signature of
// that key only (no chain read, caller may be nil); without one, the
// payer's signature, ECDSA if the payer has no code and EIP-1271
// isValidSignature through caller if it has. A bad signature is an
// *x402.Refusal (ReasonVoucherSignature); other errors are the chain's.
func VerifyVoucher(ctx context.Context, caller Caller, chainID *big.Int, c *Config, v *Voucher) error {
	digest := VoucherDigest(chainID, v.ChannelID, v.MaxClaimable)
	signer := c.PayerAuthorizer
	if signer == (common.Address{}) {
		signer = c.Payer
	}
	ok, err := signatureValid(ctx, caller, c.PayerAuthorizer == (common.Address{}), signer, digest, v.Signature)
	if err != nil {
		return fmt.Errorf("verify voucher of channel %s: %w", v.ChannelID.Hex(), err)
	}
	if !ok {
		return refuse(ReasonVoucherSignature, "voucher of channel %s is not signed by %s", v.ChannelID.Hex(), signer.Hex())
	}
	return nil
}

// VerifyDepositAuthorization checks a deposit's EIP-3009 authorization
// against the terms at the time now (Unix seconds): valid now, and signed
// by the payer (ECDSA, or EIP-1271 through caller for a contract wallet)
// for Value deposit.Amount to the collector with the nonce of the
// channel.
func (t *Terms) VerifyDepositAuthorization(ctx context.Context, caller Caller, p *Payload, now int64) error {
	if p.Deposit == nil || p.Deposit.ERC3009 == nil {
		return refuse(ReasonERC3009AuthorizationRequired, "the deposit has no erc3009Authorization")
	}
	a := p.Deposit.ERC3009
	if a.ValidBefore.Cmp(big.NewInt(now)) <= 0 {
		return refuse(ReasonValidBefore, "the deposit authorization expired at %s", a.ValidBefore)
	}
	if a.ValidAfter.Cmp(big.NewInt(now)) > 0 {
		return refuse(ReasonValidAfter, "the deposit authorization is valid from %s", a.ValidAfter)
	}
	digest := ReceiveAuthorizationDigest(t.ChainID, t.Asset, t.Name, t.Version, &ReceiveAuthorization{
		From: p.Config.Payer, Value: p.Deposit.Amount, ValidAfter: a.ValidAfter, ValidBefore: a.ValidBefore,
		Nonce: DepositNonce(p.Voucher.ChannelID, a.Salt),
	})
	ok, err := signatureValid(ctx, caller, true, p.Config.Payer, digest, a.Signature)
	if err != nil {
		return fmt.Errorf("verify deposit authorization of channel %s: %w", p.Voucher.ChannelID.Hex(), err)
	}
	if !ok {
		return refuse(ReasonReceiveAuthorizationSignature, "the deposit authorization is not signed by %s", p.Config.Payer.Hex())
	}
	return nil
}

// secp256k1HalfN is half the curve order: the contract (OpenZeppelin's
// ECDSA) refuses signatures whose s is above it.
var secp256k1HalfN = new(big.Int).Rsh(crypto.S256().Params().N, 1)

// Recover returns the signer of a 65-byte ECDSA signature (r, s, v with v
// 27 or 28 and s in the lower half) of digest, as OpenZeppelin's ECDSA
// recovers it, or false.
func Recover(digest common.Hash, sig []byte) (common.Address, bool) {
	if len(sig) != crypto.SignatureLength || (sig[64] != 27 && sig[64] != 28) {
		return common.Address{}, false
	}
	if new(big.Int).SetBytes(sig[32:64]).Cmp(secp256k1HalfN) > 0 {
		return common.Address{}, false
	}
	rsv := append(append([]byte{}, sig[:64]...), sig[64]-27)
	pub, err := crypto.SigToPub(digest[:], rsv)
	if err != nil {
		return common.Address{}, false
	}
	return crypto.PubkeyToAddress(*pub), true
}

// signatureValid checks sig of digest by signer: ECDSA only unless
// contracts is set, in which case a signer with code is asked through
// EIP-1271 (OpenZeppelin's SignatureChecker.isValidSignatureNow).
func signatureValid(ctx context.Context, caller Caller, contracts bool, signer common.Address, digest common.Hash, sig []byte) (bool, error) {
	if contracts {
		if caller == nil {
			return false, errors.New("a contract wallet's signature needs a chain reader")
		}
		code, err := caller.CodeAt(ctx, signer, nil)
		if err != nil {
			return false, fmt.Errorf("read code of %s: %w", signer.Hex(), err)
		}
		if len(code) > 0 {
			return isValidSignature(ctx, caller, signer, digest, sig)
		}
	}
	got, ok := Recover(digest, sig)
	return ok && got == signer, nil
}

var (
	bytes32Type, _ = abi.NewType("bytes32", "", nil)
	bytesType, _   = abi.NewType("bytes", "", nil)
	// isValidSignatureSelector is EIP-1271's isValidSignature(bytes32,bytes),
	// also the magic value it returns.
	isValidSignatureSelector = crypto.Keccak256([]byte("isValidSignature(bytes32,bytes)"))[:4]
)

// GasCapped returns caller with each of its calls that names no gas of its
// own run with gas: the signature checks of payers' code (a contract
// wallet's isValidSignature) within PAYER_CODE_GAS_CAP, so that a wallet
// whose check needs more (and whose vouchers' claims would) is refused at
// verification. caller nil, or gas 0, is caller unchanged.
func GasCapped(caller Caller, gas uint64) Caller {
	if caller == nil || gas == 0 {
		return caller
	}
	return gasCapped{Caller: caller, gas: gas}
}

// gasCapped is GasCapped's caller.
type gasCapped struct {
	Caller
	gas uint64
}

// CallContract runs msg with at most the cap's gas.
func (c gasCapped) CallContract(ctx context.Context, msg ethereum.CallMsg, blockNumber *big.Int) ([]byte, error) {
	if msg.Gas == 0 || msg.Gas > c.gas {
		msg.Gas = c.gas
	}
	return c.Caller.CallContract(ctx, msg, blockNumber)
}

// isValidSignature asks wallet whether it accepts sig for digest
// (EIP-1271); a reverting wallet does not.
func isValidSignature(ctx context.Context, caller Caller, wallet common.Address, digest common.Hash, sig []byte) (bool, error) {
	args, err := abi.Arguments{{Type: bytes32Type}, {Type: bytesType}}.Pack(digest, sig)
	if err != nil {
		return false, fmt.Errorf("encode isValidSignature: %w", err)
	}
	out, err := caller.CallContract(ctx, ethereum.CallMsg{To: &wallet, Data: append(append([]byte{}, isValidSignatureSelector...), args...)}, nil)
	if err != nil {
		var de rpc.DataError
		// A wallet that reverts, or runs out of the gas it is given
		// (GasCapped), does not accept the signature.
		if errors.As(err, &de) || strings.Contains(err.Error(), "execution reverted") || strings.Contains(strings.ToLower(err.Error()), "out of gas") {
			return false, nil
		}
		return false, fmt.Errorf("call isValidSignature on %s: %w", wallet.Hex(), err)
	}
	return len(out) >= 4 && bytes.Equal(out[:4], isValidSignatureSelector), nil
}

// CheckCumulative checks a payload's voucher against the seller's
// cumulative charge of the channel: a deposit or voucher must sign exactly
// charged + price, a refund exactly charged (a zero-charge voucher). Any
// other amount is the client's cumulative amount out of step with the
// seller's, refused with ReasonCumulativeAmountMismatch: answer it with the
// corrective 402 (CorrectiveExtra).
func CheckCumulative(p *Payload, charged, price *big.Int) error {
	want := new(big.Int).Set(charged)
	if p.Type != TypeRefund {
		want.Add(want, price)
	}
	if p.Voucher.MaxClaimable.Cmp(want) != 0 {
		return refuse(ReasonCumulativeAmountMismatch, "voucher signs %s cumulative, the channel's is %s", p.Voucher.MaxClaimable, want)
	}
	return nil
}

// OnChain is a channel's state on chain.
type OnChain struct {
	// Balance is the escrow (channels(id).balance).
	Balance *big.Int
	// TotalClaimed is what was claimed from it (channels(id).totalClaimed).
	TotalClaimed *big.Int
	// WithdrawRequestedAt is when a timed withdrawal started, 0 if none.
	WithdrawRequestedAt uint64
	// RefundNonce is the nonce the next signed refund carries.
	RefundNonce *big.Int
}

// CheckOnChain checks a payload's voucher against the channel's state on
// chain, as the spec's facilitator rules 7, 9 and 10 say: the channel
// exists (a positive balance, counting a deposit's amount); the voucher is
// at most the balance (plus the deposit); a deposit's or voucher's is at
// least totalClaimed + price, a refund's at least totalClaimed.
func CheckOnChain(p *Payload, st *OnChain, price *big.Int) error {
	balance := new(big.Int).Set(st.Balance)
	if p.Deposit != nil {
		balance.Add(balance, p.Deposit.Amount)
	}
	if balance.Sign() == 0 {
		return refuse(ReasonChannelNotFound, "channel %s has no balance", p.Voucher.ChannelID.Hex())
	}
	if p.Voucher.MaxClaimable.Cmp(balance) > 0 {
		return refuse(ReasonCumulativeExceedsBalance, "voucher of %s exceeds the channel's balance %s", p.Voucher.MaxClaimable, balance)
	}
	floor := new(big.Int).Set(st.TotalClaimed)
	if p.Type != TypeRefund {
		floor.Add(floor, price)
	}
	if p.Voucher.MaxClaimable.Cmp(floor) < 0 {
		return refuse(ReasonCumulativeBelowClaimed, "voucher of %s is below %s (claimed %s)", p.Voucher.MaxClaimable, floor, st.TotalClaimed)
	}
	return nil
}

// CheckCharge checks that charging amount more keeps the channel within
// its signed voucher: charged + amount must not exceed signed.
func CheckCharge(charged, amount, signed *big.Int) error {
	if new(big.Int).Add(charged, amount).Cmp(signed) > 0 {
		return refuse(ReasonChargeExceedsSignedCumulative, "charging %s more than %s exceeds the voucher's %s", amount, charged, signed)
	}
	return nil
}

// Verify runs every check of a payload that pays a call of price (or, for
// a refund, asks one) in the order a seller answers them: the channel is
// one of the terms (CheckConfig); with the seller's cumulative charge of
// the channel (charged; nil when the seller has no record of it), the
// voucher is in step with it (CheckCumulative, answered with the corrective
// 402); the voucher is the payer's (VerifyVoucher), a deposit's
// authorization too, valid at now (Unix seconds); and the chain's state
// st covers it (CheckOnChain). The first failure is returned: an
// *x402.Refusal, or the chain's error.
func (t *Terms) Verify(ctx context.Context, caller Caller, p *Payload, charged, price *big.Int, st *OnChain, now int64) error {
	if err := t.CheckConfig(p); err != nil {
		return err
	}
	if charged != nil {
		if err := CheckCumulative(p, charged, price); err != nil {
			return err
		}
	}
	if err := VerifyVoucher(ctx, caller, t.ChainID, &p.Config, &p.Voucher); err != nil {
		return err
	}
	if p.Type == TypeDeposit {
		if err := t.VerifyDepositAuthorization(ctx, caller, p, now); err != nil {
			return err
		}
	}
	return CheckOnChain(p, st, price)
}

// RefundAmount returns what a refund payload gets back from a channel of
// balance the seller has charged charged: the amount asked, at most the
// remainder balance - charged (all of it when none is asked). No remainder
// is ReasonRefundNoBalance.
func RefundAmount(p *Payload, balance, charged *big.Int) (*big.Int, error) {
	remainder := new(big.Int).Sub(balance, charged)
	if remainder.Sign() <= 0 {
		return nil, refuse(ReasonRefundNoBalance, "channel %s has nothing left to refund (balance %s, charged %s)", p.Voucher.ChannelID.Hex(), balance, charged)
	}
	if p.RefundAmount == nil || p.RefundAmount.Cmp(remainder) > 0 {
		return remainder, nil
	}
	return new(big.Int).Set(p.RefundAmount), nil
}
