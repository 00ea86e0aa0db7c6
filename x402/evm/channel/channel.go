// Package channel is the verification core of x402's batch-settlement
// scheme on EVM (specs/schemes/batch-settlement in the x402 repository):
// payment channels a payer funds once and spends with off-chain cumulative
// vouchers.
//
// A channel is named by its configuration (Config): its id is the EIP-712
// hash of the ChannelConfig under the domain ("x402 Batch Settlement", "1",
// chain id, SettlementAddress), as the x402BatchSettlement contract and the
// official @x402/evm client compute it. A payer deposits into it through
// the EIP-3009 collector (CollectorAddress: receiveWithAuthorization whose
// nonce is DepositNonce(channelId, salt)), then signs one Voucher per call:
// an EIP-712 Voucher(channelId, maxClaimableAmount) whose amount is
// cumulative. The seller keeps, per channel, the cumulative amount it
// charged; a voucher pays for a call when its amount is that plus the
// call's price (CheckCumulative), its signature is the payer authorizer's
// ECDSA signature or, without one, the payer's (EIP-1271 for a contract
// wallet: VerifyVoucher), and the channel's escrow on chain covers it
// (CheckOnChain). A client whose cumulative amount is not the seller's is
// answered with the corrective 402 (Corrective, CorrectiveExtra), which
// carries the seller's ChannelState and the last voucher it holds.
// Terms.Verify runs these checks in the order a seller answers them;
// RefundAmount is what a refund payload gets back. State is the seller's
// record of a channel (what it charged, the last voucher, the chain's
// state), and VoucherResponse, DepositResponse and RefundResponse the
// PAYMENT-RESPONSE of a call (transaction "" for a voucher,
// extra.chargedAmount, extra.channelState).
//
// The seller's receiver authorizer signs claims of many channels at once
// (ClaimBatchDigest, for claimWithSignature) and cooperative refunds
// (RefundDigest). DepositInput, ClaimWithSignatureInput, SettleInput and
// RefundWithSignatureInput are the settlement contract's inputs for them;
// ReadState reads a channel's state, ParseWithdrawInitiated a payer's
// start of a timed withdrawal, after which the seller must claim before
// the delay ends, and ParseWithdrawFinalized its end.
//
// The package holds no state and does no I/O but eth_calls (a signer's
// code, EIP-1271, a channel's state) through the Caller given.
package channel

import (
	"encoding/binary"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
)

// Scheme is the scheme's name in payment requirements and payloads.
const Scheme = "batch-settlement"

// Canonical addresses of the scheme's contracts, the same on every chain,
// where the official packages call them and the devchain and the anvil
// tests place contracts.BatchSettlement and
// contracts.ERC3009DepositCollector.
var (
	// SettlementAddress is x402BatchSettlement's.
	SettlementAddress = common.HexToAddress("0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003")
	// CollectorAddress is the EIP-3009 deposit collector's.
	CollectorAddress = common.HexToAddress("0x4020806089470a89826cB9fB1f4059150b550004")
	// Permit2CollectorAddress is the Permit2 deposit collector's (not placed
	// here: deposits are EIP-3009).
	Permit2CollectorAddress = common.HexToAddress("0x4020425FAf3B746C082C2f942b4E5159887B0005")
)

// The EIP-712 domain of the settlement contract.
const (
	DomainName    = "x402 Batch Settlement"
	DomainVersion = "1"
)

// Bounds of a channel's withdrawDelay, in seconds: 15 minutes to 30 days.
const (
	MinWithdrawDelay = 900
	MaxWithdrawDelay = 2_592_000
)

// EIP-712 type hashes, as the contract declares them (its public
// constants of the same names, upper case).
var (
	// ConfigTypeHash is CHANNEL_CONFIG_TYPEHASH.
	ConfigTypeHash = crypto.Keccak256Hash([]byte("ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"))
	// VoucherTypeHash is VOUCHER_TYPEHASH.
	VoucherTypeHash = crypto.Keccak256Hash([]byte("Voucher(bytes32 channelId,uint128 maxClaimableAmount)"))
	// RefundTypeHash is REFUND_TYPEHASH.
	RefundTypeHash = crypto.Keccak256Hash([]byte("Refund(bytes32 channelId,uint256 nonce,uint128 amount)"))
	// ClaimEntryTypeHash is CLAIM_ENTRY_TYPEHASH.
	ClaimEntryTypeHash = crypto.Keccak256Hash([]byte("ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"))
	// ClaimBatchTypeHash is CLAIM_BATCH_TYPEHASH.
	ClaimBatchTypeHash = crypto.Keccak256Hash([]byte("ClaimBatch(ClaimEntry[] claims)ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"))
)

var (
	domainTypeHash      = crypto.Keccak256Hash([]byte("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"))
	receiveAuthTypeHash = crypto.Keccak256Hash([]byte("ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"))
	domainNameHash      = crypto.Keccak256Hash([]byte(DomainName))
	domainVersionHash   = crypto.Keccak256Hash([]byte(DomainVersion))
	maxUint128          = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1))
	maxUint256          = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
)

// Config is a channel's immutable configuration (the contract's
// ChannelConfig); its JSON is the payload's channelConfig.
type Config struct {
	// Payer funds the channel (an EOA or a contract wallet).
	Payer common.Address `json:"payer"`
	// PayerAuthorizer is the EOA whose ECDSA signatures are the payer's
	// vouchers; zero when the payer signs them itself (EIP-1271 for a
	// contract wallet).
	PayerAuthorizer common.Address `json:"payerAuthorizer"`
	// Receiver is the seller's payTo.
	Receiver common.Address `json:"receiver"`
	// ReceiverAuthorizer signs the seller's claims and refunds.
	ReceiverAuthorizer common.Address `json:"receiverAuthorizer"`
	// Token is the asset.
	Token common.Address `json:"token"`
	// WithdrawDelay is how long, in seconds, a payer's timed withdrawal
	// waits (a uint40 on chain).
	WithdrawDelay uint64 `json:"withdrawDelay"`
	// Salt tells apart channels otherwise alike.
	Salt common.Hash `json:"salt"`
}

// StructHash returns the EIP-712 hashStruct of the configuration.
func (c *Config) StructHash() common.Hash {
	var delay [32]byte
	binary.BigEndian.PutUint64(delay[24:], c.WithdrawDelay)
	return crypto.Keccak256Hash(ConfigTypeHash[:],
		word(c.Payer), word(c.PayerAuthorizer), word(c.Receiver), word(c.ReceiverAuthorizer), word(c.Token),
		delay[:], c.Salt[:])
}

// ID returns the channel's id on the chain chainID: the EIP-712 digest of
// the configuration under the settlement contract's domain (getChannelId).
func (c *Config) ID(chainID *big.Int) common.Hash {
	return typedDigest(chainID, c.StructHash())
}

// DomainSeparator returns the settlement contract's EIP-712 domain
// separator on the chain chainID.
func DomainSeparator(chainID *big.Int) common.Hash {
	return crypto.Keccak256Hash(domainTypeHash[:], domainNameHash[:], domainVersionHash[:],
		common.BigToHash(chainID).Bytes(), word(SettlementAddress))
}

// VoucherDigest returns the digest a payer signs for a voucher of
// maxClaimable on the channel channelID (getVoucherDigest).
func VoucherDigest(chainID *big.Int, channelID common.Hash, maxClaimable *big.Int) common.Hash {
	return typedDigest(chainID, crypto.Keccak256Hash(VoucherTypeHash[:], channelID[:], common.BigToHash(maxClaimable).Bytes()))
}

// RefundDigest returns the digest the receiver authorizer signs for a
// cooperative refund of amount with the channel's refund nonce
// (getRefundDigest, refundWithSignature).
func RefundDigest(chainID *big.Int, channelID common.Hash, nonce, amount *big.Int) common.Hash {
	return typedDigest(chainID, crypto.Keccak256Hash(RefundTypeHash[:], channelID[:],
		common.BigToHash(nonce).Bytes(), common.BigToHash(amount).Bytes()))
}

// ClaimEntry is one row of a claim batch as the receiver authorizer signs
// it.
type ClaimEntry struct {
	// ChannelID is the channel claimed.
	ChannelID common.Hash
	// MaxClaimable is the voucher's signed cumulative ceiling.
	MaxClaimable *big.Int
	// TotalClaimed is the channel's cumulative claimed total after the claim.
	TotalClaimed *big.Int
}

// ClaimBatchDigest returns the digest the receiver authorizer signs for
// claimWithSignature of the rows entries, in order (getClaimBatchDigest).
func ClaimBatchDigest(chainID *big.Int, entries []ClaimEntry) common.Hash {
	hashes := make([]byte, 0, 32*len(entries))
	for _, e := range entries {
		h := crypto.Keccak256(ClaimEntryTypeHash[:], e.ChannelID[:],
			common.BigToHash(e.MaxClaimable).Bytes(), common.BigToHash(e.TotalClaimed).Bytes())
		hashes = append(hashes, h...)
	}
	return typedDigest(chainID, crypto.Keccak256Hash(ClaimBatchTypeHash[:], crypto.Keccak256(hashes)))
}

// DepositNonce returns the EIP-3009 nonce of a deposit's
// receiveWithAuthorization: keccak256(abi.encode(channelId, salt)), which
// binds the payer's authorization to one channel.
func DepositNonce(channelID, salt common.Hash) common.Hash {
	return crypto.Keccak256Hash(channelID[:], salt[:])
}

// ReceiveAuthorization is an EIP-3009 ReceiveWithAuthorization of a
// deposit, to the collector.
type ReceiveAuthorization struct {
	From        common.Address
	Value       *big.Int
	ValidAfter  *big.Int
	ValidBefore *big.Int
	Nonce       common.Hash
}

// ReceiveAuthorizationDigest returns the digest the payer signs for a
// deposit's receiveWithAuthorization to the collector, under the token's
// EIP-712 domain (name, version, chainID, token).
func ReceiveAuthorizationDigest(chainID *big.Int, token common.Address, name, version string, a *ReceiveAuthorization) common.Hash {
	domain := crypto.Keccak256Hash(domainTypeHash[:], crypto.Keccak256([]byte(name)), crypto.Keccak256([]byte(version)),
		common.BigToHash(chainID).Bytes(), word(token))
	msg := crypto.Keccak256Hash(receiveAuthTypeHash[:], word(a.From), word(CollectorAddress),
		common.BigToHash(a.Value).Bytes(), common.BigToHash(a.ValidAfter).Bytes(), common.BigToHash(a.ValidBefore).Bytes(),
		a.Nonce[:])
	return crypto.Keccak256Hash([]byte{0x19, 0x01}, domain[:], msg[:])
}

// typedDigest is the EIP-712 digest of a struct hash under the settlement
// contract's domain.
func typedDigest(chainID *big.Int, structHash common.Hash) common.Hash {
	sep := DomainSeparator(chainID)
	return crypto.Keccak256Hash([]byte{0x19, 0x01}, sep[:], structHash[:])
}

// word is an address as an ABI word.
func word(a common.Address) []byte { return common.BytesToHash(a[:]).Bytes() }
