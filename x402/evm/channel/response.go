package channel

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"
)

// Response is the settle response of a batch-settlement payment, sent
// base64-encoded (x402.EncodeHeader) in the PAYMENT-RESPONSE header. It
// tells an on-chain transfer (a deposit, a refund: Transaction and Amount
// set) from an off-chain charge (a voucher: both "").
type Response struct {
	Success     bool   `json:"success"`
	ErrorReason string `json:"errorReason,omitempty"`
	Transaction string `json:"transaction"`
	Network     string `json:"network"`
	Payer       string `json:"payer,omitempty"`
	// Amount is what moved on chain: the deposit, the refund; "" for a
	// voucher.
	Amount string         `json:"amount"`
	Extra  *ResponseExtra `json:"extra,omitempty"`
}

// VoucherResponse is the response of a call paid by a voucher and charged
// charged, with s the channel's record after the charge.
func VoucherResponse(network string, s *State, charged *big.Int) *Response {
	return &Response{Success: true, Network: network, Payer: s.Config.Payer.Hex(),
		Extra: &ResponseExtra{ChargedAmount: charged.String(), ChannelState: s.Snapshot()}}
}

// DepositResponse is the response of a call paid by a deposit (of amount,
// in transaction tx) and charged charged, with s the channel's record
// after both.
func DepositResponse(network string, s *State, tx common.Hash, amount, charged *big.Int) *Response {
	return &Response{Success: true, Network: network, Payer: s.Config.Payer.Hex(), Transaction: tx.Hex(), Amount: amount.String(),
		Extra: &ResponseExtra{ChargedAmount: charged.String(), ChannelState: s.Snapshot()}}
}

// RefundResponse is the response of a cooperative refund of amount in
// transaction tx, with s the channel's record after it (no charge).
func RefundResponse(network string, s *State, tx common.Hash, amount *big.Int) *Response {
	return &Response{Success: true, Network: network, Payer: s.Config.Payer.Hex(), Transaction: tx.Hex(), Amount: amount.String(),
		Extra: &ResponseExtra{ChannelState: s.Snapshot()}}
}
