package channel

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"
)

// State is the seller's record of a channel, the per-channel state the
// spec's server keeps: what it charged in all, the last voucher the payer
// signed, and the channel's state on chain as last read. It is a value:
// Charge returns the next one, and the caller keeps it durably (a State in
// memory only is not the seller's record).
type State struct {
	// Config is the channel's configuration.
	Config Config
	// ChannelID is its id.
	ChannelID common.Hash
	// Charged is chargedCumulativeAmount: what the seller charged in all.
	Charged *big.Int
	// Signed is signedMaxClaimable, the last voucher's amount; nil before
	// the first voucher.
	Signed *big.Int
	// Signature is the last voucher's signature.
	Signature []byte
	// OnChain is the channel's state on chain as last read.
	OnChain OnChain
}

// NewState returns the record of a channel the seller has none of: its
// baseline is what was claimed on chain (st.TotalClaimed), never what the
// client's voucher says; vouchers the seller lost unclaimed are forfeited.
func NewState(c *Config, chainID *big.Int, st *OnChain) *State {
	return &State{Config: *c, ChannelID: c.ID(chainID), Charged: new(big.Int).Set(st.TotalClaimed), OnChain: *st}
}

// Charge returns the record after a call paid by p was charged amount (at
// most the price; a refund is charged 0): the charge must stay within the
// voucher (CheckCharge), which becomes the last voucher.
func (s *State) Charge(p *Payload, amount *big.Int) (*State, error) {
	if err := CheckCharge(s.Charged, amount, p.Voucher.MaxClaimable); err != nil {
		return nil, err
	}
	next := *s
	next.Charged = new(big.Int).Add(s.Charged, amount)
	next.Signed = new(big.Int).Set(p.Voucher.MaxClaimable)
	next.Signature = append([]byte(nil), p.Voucher.Signature...)
	return &next, nil
}

// Unclaimed is what the seller charged and has not claimed on chain yet.
func (s *State) Unclaimed() *big.Int {
	return new(big.Int).Sub(s.Charged, s.OnChain.TotalClaimed)
}

// Claim returns the claim of everything charged, with the last voucher;
// ok is false when nothing is left to claim.
func (s *State) Claim() (c Claim, ok bool) {
	if s.Signed == nil || s.Unclaimed().Sign() <= 0 {
		return Claim{}, false
	}
	return Claim{
		Config:       s.Config,
		Voucher:      Voucher{ChannelID: s.ChannelID, MaxClaimable: new(big.Int).Set(s.Signed), Signature: append([]byte(nil), s.Signature...)},
		TotalClaimed: new(big.Int).Set(s.Charged),
	}, true
}

// Snapshot returns the channel's state as the corrective 402 and payment
// responses carry it (extra.channelState).
func (s *State) Snapshot() *ChannelState {
	nonce := "0"
	if s.OnChain.RefundNonce != nil {
		nonce = s.OnChain.RefundNonce.String()
	}
	return &ChannelState{
		ChannelID: s.ChannelID, Balance: s.OnChain.Balance.String(), TotalClaimed: s.OnChain.TotalClaimed.String(),
		WithdrawRequestedAt: s.OnChain.WithdrawRequestedAt, RefundNonce: nonce, ChargedCumulativeAmount: s.Charged.String(),
	}
}

// LastVoucher returns the last voucher as the corrective 402 carries it
// (extra.voucherState), or nil before the first.
func (s *State) LastVoucher() *VoucherState {
	if s.Signed == nil {
		return nil
	}
	return &VoucherState{SignedMaxClaimable: s.Signed.String(), Signature: append([]byte(nil), s.Signature...)}
}
