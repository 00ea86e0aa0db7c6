package channel

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402d/x402d/contracts"
)

// settlementABI is the settlement contract's interface, the official
// x402BatchSettlement's (contracts.BatchSettlement is compiled from it).
var settlementABI = func() abi.ABI {
	a, err := contracts.Load(contracts.BatchSettlement)
	if err != nil {
		panic(err)
	}
	return a.ABI
}()

// abiConfig, abiVoucher and abiClaim are the contract's structs as
// go-ethereum's encoder takes them.
type (
	abiConfig struct {
		Payer              common.Address
		PayerAuthorizer    common.Address
		Receiver           common.Address
		ReceiverAuthorizer common.Address
		Token              common.Address
		WithdrawDelay      *big.Int
		Salt               [32]byte
	}
	abiVoucher struct {
		Channel            abiConfig
		MaxClaimableAmount *big.Int
	}
	abiClaim struct {
		Voucher      abiVoucher
		Signature    []byte
		TotalClaimed *big.Int
	}
)

func (c *Config) tuple() abiConfig {
	return abiConfig{c.Payer, c.PayerAuthorizer, c.Receiver, c.ReceiverAuthorizer, c.Token, new(big.Int).SetUint64(c.WithdrawDelay), c.Salt}
}

// Claim is one row of a claim: a channel's voucher and the cumulative
// total claimed with it.
type Claim struct {
	// Config is the channel's configuration.
	Config Config
	// Voucher is the payer's voucher claimed.
	Voucher Voucher
	// TotalClaimed is the channel's claimed total after the claim: at most
	// the voucher's amount (what the seller charged).
	TotalClaimed *big.Int
}

// ClaimBatchDigestOf returns the digest the receiver authorizer signs for
// claimWithSignature of claims.
func ClaimBatchDigestOf(chainID *big.Int, claims []Claim) common.Hash {
	entries := make([]ClaimEntry, len(claims))
	for i, c := range claims {
		entries[i] = ClaimEntry{ChannelID: c.Config.ID(chainID), MaxClaimable: c.Voucher.MaxClaimable, TotalClaimed: c.TotalClaimed}
	}
	return ClaimBatchDigest(chainID, entries)
}

// DepositInput returns the input of the settlement contract's deposit of a
// deposit payload through the EIP-3009 collector.
func DepositInput(p *Payload) ([]byte, error) {
	if p.Deposit == nil || p.Deposit.ERC3009 == nil {
		return nil, fmt.Errorf("deposit input: payload has no EIP-3009 deposit")
	}
	data, err := p.Deposit.ERC3009.CollectorData()
	if err != nil {
		return nil, err
	}
	return pack("deposit", p.Config.tuple(), p.Deposit.Amount, CollectorAddress, data)
}

// ClaimWithSignatureInput returns the input of claimWithSignature of
// claims, authorized by the receiver authorizer's signature of
// ClaimBatchDigestOf(claims).
func ClaimWithSignatureInput(claims []Claim, authorizerSignature []byte) ([]byte, error) {
	rows := make([]abiClaim, len(claims))
	for i, c := range claims {
		rows[i] = abiClaim{Voucher: abiVoucher{c.Config.tuple(), c.Voucher.MaxClaimable}, Signature: c.Voucher.Signature, TotalClaimed: c.TotalClaimed}
	}
	return pack("claimWithSignature", rows, authorizerSignature)
}

// SettleInput returns the input of settle: what receiver claimed in token
// goes to it.
func SettleInput(receiver, token common.Address) ([]byte, error) {
	return pack("settle", receiver, token)
}

// RefundWithSignatureInput returns the input of refundWithSignature of
// amount with the channel's refund nonce, authorized by the receiver
// authorizer's signature of RefundDigest.
func RefundWithSignatureInput(c *Config, amount, nonce *big.Int, authorizerSignature []byte) ([]byte, error) {
	return pack("refundWithSignature", c.tuple(), amount, nonce, authorizerSignature)
}

func pack(method string, args ...any) ([]byte, error) {
	input, err := settlementABI.Pack(method, args...)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", method, err)
	}
	return input, nil
}

// Sign signs digest with key as the contract's ECDSA check takes it (v 27
// or 28): the receiver authorizer's claims and refunds.
func Sign(key *ecdsa.PrivateKey, digest common.Hash) ([]byte, error) {
	sig, err := crypto.Sign(digest[:], key)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", digest.Hex(), err)
	}
	sig[64] += 27
	return sig, nil
}

// ReadState reads the channel's state from the settlement contract
// (channels, pendingWithdrawals, refundNonce) at block (nil: the latest).
func ReadState(ctx context.Context, caller Caller, channelID common.Hash, block *big.Int) (*OnChain, error) {
	call := func(method string) ([]any, error) {
		input, err := pack(method, channelID)
		if err != nil {
			return nil, err
		}
		out, err := caller.CallContract(ctx, ethereum.CallMsg{To: &SettlementAddress, Data: input}, block)
		if err != nil {
			return nil, fmt.Errorf("read %s of channel %s: %w", method, channelID.Hex(), err)
		}
		v, err := settlementABI.Unpack(method, out)
		if err != nil {
			return nil, fmt.Errorf("decode %s of channel %s: %w", method, channelID.Hex(), err)
		}
		return v, nil
	}
	ch, err := call("channels")
	if err != nil {
		return nil, err
	}
	wd, err := call("pendingWithdrawals")
	if err != nil {
		return nil, err
	}
	nonce, err := call("refundNonce")
	if err != nil {
		return nil, err
	}
	return &OnChain{
		Balance: ch[0].(*big.Int), TotalClaimed: ch[1].(*big.Int),
		WithdrawRequestedAt: wd[1].(*big.Int).Uint64(), RefundNonce: nonce[0].(*big.Int),
	}, nil
}

// WithdrawInitiated is a payer's start of a timed withdrawal: the seller
// must claim the channel's vouchers before FinalizeAfter.
type WithdrawInitiated struct {
	// ChannelID is the channel.
	ChannelID common.Hash
	// Amount is the amount the payer asked for.
	Amount *big.Int
	// FinalizeAfter is when (Unix seconds) the payer may take it.
	FinalizeAfter uint64
}

// WithdrawInitiatedTopic is the topic of the settlement contract's
// WithdrawInitiated event, for log filters.
var WithdrawInitiatedTopic = settlementABI.Events["WithdrawInitiated"].ID

// ParseWithdrawInitiated decodes a WithdrawInitiated log of the settlement
// contract; ok is false for any other log.
func ParseWithdrawInitiated(l *types.Log) (w *WithdrawInitiated, ok bool, err error) {
	if l.Address != SettlementAddress || len(l.Topics) != 2 || l.Topics[0] != WithdrawInitiatedTopic {
		return nil, false, nil
	}
	v, err := settlementABI.Unpack("WithdrawInitiated", l.Data)
	if err != nil {
		return nil, false, fmt.Errorf("decode WithdrawInitiated: %w", err)
	}
	return &WithdrawInitiated{ChannelID: l.Topics[1], Amount: v[0].(*big.Int), FinalizeAfter: v[1].(*big.Int).Uint64()}, true, nil
}

// WithdrawFinalized is the end of a payer's timed withdrawal: Amount went
// back to the payer, and the channel has no withdrawal pending.
type WithdrawFinalized struct {
	// ChannelID is the channel.
	ChannelID common.Hash
	// Amount is what the payer took back.
	Amount *big.Int
}

// WithdrawFinalizedTopic is the topic of the settlement contract's
// WithdrawFinalized event, for log filters.
var WithdrawFinalizedTopic = settlementABI.Events["WithdrawFinalized"].ID

// ParseWithdrawFinalized decodes a WithdrawFinalized log of the
// settlement contract; ok is false for any other log.
func ParseWithdrawFinalized(l *types.Log) (w *WithdrawFinalized, ok bool, err error) {
	if l.Address != SettlementAddress || len(l.Topics) != 3 || l.Topics[0] != WithdrawFinalizedTopic {
		return nil, false, nil
	}
	v, err := settlementABI.Unpack("WithdrawFinalized", l.Data)
	if err != nil {
		return nil, false, fmt.Errorf("decode WithdrawFinalized: %w", err)
	}
	return &WithdrawFinalized{ChannelID: l.Topics[1], Amount: v[0].(*big.Int)}, true, nil
}

// Refunded is a cooperative refund mined (refundWithSignature, whoever
// sent it): Amount went back to the channel's payer, and the channel's
// refund nonce moved past the one signed.
type Refunded struct {
	// ChannelID is the channel.
	ChannelID common.Hash
	// Sender is the transaction's sender.
	Sender common.Address
	// Amount is what was paid back.
	Amount *big.Int
}

// RefundedTopic is the topic of the settlement contract's Refunded event,
// for log filters.
var RefundedTopic = settlementABI.Events["Refunded"].ID

// ParseRefunded decodes a Refunded log of the settlement contract; ok is
// false for any other log.
func ParseRefunded(l *types.Log) (r *Refunded, ok bool, err error) {
	if l.Address != SettlementAddress || len(l.Topics) != 3 || l.Topics[0] != RefundedTopic {
		return nil, false, nil
	}
	v, err := settlementABI.Unpack("Refunded", l.Data)
	if err != nil {
		return nil, false, fmt.Errorf("decode Refunded: %w", err)
	}
	return &Refunded{ChannelID: l.Topics[1], Sender: common.BytesToAddress(l.Topics[2].Bytes()), Amount: v[0].(*big.Int)}, true, nil
}
