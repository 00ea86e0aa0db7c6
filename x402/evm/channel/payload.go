package channel

import (
	"encoding/json"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"

	"github.com/x402d/x402d/internal/bounded"
	"github.com/x402d/x402d/x402"
)

// Payload types.
const (
	// TypeDeposit funds the channel (first call or top-up) and carries a
	// voucher for the call.
	TypeDeposit = "deposit"
	// TypeVoucher pays a call with a voucher only.
	TypeVoucher = "voucher"
	// TypeRefund asks for a cooperative refund, with a zero-charge voucher.
	TypeRefund = "refund"
)

// Payload is a batch-settlement payment payload, decoded and checked for
// form by Decode.
type Payload struct {
	// Type is TypeDeposit, TypeVoucher or TypeRefund.
	Type string
	// Config is the channel's configuration.
	Config Config
	// Voucher is the payer's signed cumulative voucher.
	Voucher Voucher
	// Deposit is the deposit of a TypeDeposit payload, nil otherwise.
	Deposit *Deposit
	// RefundAmount is the amount a TypeRefund payload asks back; nil asks
	// for all the unclaimed escrow.
	RefundAmount *big.Int
}

// Voucher is a payer's signed cumulative ceiling on a channel.
type Voucher struct {
	// ChannelID is the channel's id.
	ChannelID common.Hash
	// MaxClaimable is the cumulative amount the receiver may claim.
	MaxClaimable *big.Int
	// Signature is the EIP-712 signature of VoucherDigest.
	Signature []byte
}

// Deposit is the deposit of a deposit payload: amount, pulled with the
// payer's EIP-3009 authorization to the collector.
type Deposit struct {
	// Amount is the amount deposited.
	Amount *big.Int
	// ERC3009 is the payer's receiveWithAuthorization; nil when the
	// payload carries another authorization (Permit2), which this package
	// does not take.
	ERC3009 *ERC3009Authorization
}

// ERC3009Authorization is a deposit's EIP-3009 authorization: the nonce
// signed is DepositNonce(channelId, Salt), the recipient the collector.
type ERC3009Authorization struct {
	ValidAfter  *big.Int
	ValidBefore *big.Int
	// Salt is the uint256 hashed into the nonce, as a word.
	Salt common.Hash
	// Signature is the payer's signature of ReceiveAuthorizationDigest.
	Signature []byte
}

// wire forms, as the official client sends them.
type (
	wirePayload struct {
		Type          string          `json:"type"`
		ChannelConfig json.RawMessage `json:"channelConfig"`
		Voucher       *wireVoucher    `json:"voucher"`
		Deposit       *wireDeposit    `json:"deposit"`
		Amount        *string         `json:"amount"`
	}
	wireVoucher struct {
		ChannelID          string `json:"channelId"`
		MaxClaimableAmount string `json:"maxClaimableAmount"`
		Signature          string `json:"signature"`
	}
	wireDeposit struct {
		Amount        string `json:"amount"`
		Authorization struct {
			ERC3009 *struct {
				ValidAfter  string `json:"validAfter"`
				ValidBefore string `json:"validBefore"`
				Salt        string `json:"salt"`
				Signature   string `json:"signature"`
			} `json:"erc3009Authorization"`
			Permit2 json.RawMessage `json:"permit2Authorization"`
		} `json:"authorization"`
	}
)

// isWord reports whether s is a word as the wire spells it: 0x and 64
// hex digits, of either case.
func isWord(s string) bool { return isHexOf(s, 64) }

// isAddress reports whether s is an address as the wire spells it: 0x and
// 40 hex digits, of either case (no checksum required).
func isAddress(s string) bool { return isHexOf(s, 40) }

// isHexOf reports whether s is 0x and digits hex digits.
func isHexOf(s string, digits int) bool {
	if len(s) != 2+digits || s[0] != '0' || s[1] != 'x' {
		return false
	}
	for i := 2; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// isDigits reports whether s is one decimal digit or more.
func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// refuse returns a refusal with reason.
func refuse(reason, format string, args ...any) *x402.Refusal {
	return &x402.Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Decode decodes the payload of a batch-settlement PaymentPayload and checks
// its form: every number a decimal string within its type, every address and
// word well formed, the withdraw delay within the spec's bounds. A malformed
// payload is an *x402.Refusal with the reason of its type
// (ReasonDepositPayload, ...); an unknown type is ReasonPayloadType.
func Decode(raw json.RawMessage) (*Payload, error) {
	return (*Configs)(nil).Decode(raw)
}

// Configs decodes channel configurations (a payload's channelConfig),
// keeping the decoded form of the latest ones: each voucher of a channel
// carries the same configuration, decoded once while the channel is in
// use. The zero Configs (or nil) keeps none. Its methods are safe for
// concurrent use.
type Configs struct {
	kept *bounded.Map[string, Config]
}

// NewConfigs returns Configs that keeps at most limit configurations.
func NewConfigs(limit int) *Configs {
	return &Configs{kept: bounded.New[string, Config](limit)}
}

// Decode is the package's Decode, the channelConfig decoded through cs.
func (cs *Configs) Decode(raw json.RawMessage) (*Payload, error) {
	var w wirePayload
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, refuse(ReasonPayloadType, "payload is not a batch-settlement payload: %v", err)
	}
	var malformed string
	switch w.Type {
	case TypeDeposit:
		malformed = ReasonDepositPayload
	case TypeVoucher:
		malformed = ReasonVoucherPayload
	case TypeRefund:
		malformed = ReasonRefundPayload
	default:
		return nil, refuse(ReasonPayloadType, "payload type %q is not deposit, voucher or refund", w.Type)
	}
	p := &Payload{Type: w.Type}
	if err := cs.config(w.ChannelConfig, &p.Config); err != nil {
		return nil, refuse(malformed, "channelConfig: %v", err)
	}
	if p.Config.WithdrawDelay < MinWithdrawDelay || p.Config.WithdrawDelay > MaxWithdrawDelay {
		return nil, refuse(ReasonWithdrawDelayOutOfRange, "withdrawDelay %d is outside %d-%d seconds", p.Config.WithdrawDelay, MinWithdrawDelay, MaxWithdrawDelay)
	}
	if w.Voucher == nil {
		return nil, refuse(malformed, "voucher is missing")
	}
	if !isWord(w.Voucher.ChannelID) {
		return nil, refuse(ReasonChannelIDInvalid, "voucher.channelId %q is not 32 bytes of hex", w.Voucher.ChannelID)
	}
	p.Voucher.ChannelID = common.HexToHash(w.Voucher.ChannelID)
	var err error
	if p.Voucher.MaxClaimable, err = parseUint(w.Voucher.MaxClaimableAmount, maxUint128); err != nil {
		return nil, refuse(malformed, "voucher.maxClaimableAmount: %v", err)
	}
	if p.Voucher.Signature, err = hexutil.Decode(w.Voucher.Signature); err != nil || len(p.Voucher.Signature) == 0 {
		return nil, refuse(malformed, "voucher.signature is not hex bytes")
	}
	switch w.Type {
	case TypeDeposit:
		if w.Deposit == nil {
			return nil, refuse(malformed, "deposit is missing")
		}
		d := &Deposit{}
		if d.Amount, err = parseUint(w.Deposit.Amount, maxUint128); err != nil || d.Amount.Sign() == 0 {
			return nil, refuse(malformed, "deposit.amount %q is not a positive uint128", w.Deposit.Amount)
		}
		if a := w.Deposit.Authorization.ERC3009; a != nil {
			e := &ERC3009Authorization{}
			if e.ValidAfter, err = parseUint(a.ValidAfter, maxUint256); err != nil {
				return nil, refuse(malformed, "validAfter: %v", err)
			}
			if e.ValidBefore, err = parseUint(a.ValidBefore, maxUint256); err != nil {
				return nil, refuse(malformed, "validBefore: %v", err)
			}
			if !isWord(a.Salt) {
				return nil, refuse(malformed, "erc3009Authorization.salt %q is not 32 bytes of hex", a.Salt)
			}
			e.Salt = common.HexToHash(a.Salt)
			if e.Signature, err = hexutil.Decode(a.Signature); err != nil || len(e.Signature) == 0 {
				return nil, refuse(malformed, "erc3009Authorization.signature is not hex bytes")
			}
			d.ERC3009 = e
		} else if len(w.Deposit.Authorization.Permit2) == 0 || string(w.Deposit.Authorization.Permit2) == "null" {
			return nil, refuse(ReasonERC3009AuthorizationRequired, "deposit.authorization has no erc3009Authorization")
		}
		p.Deposit = d
	case TypeRefund:
		if w.Amount != nil {
			if p.RefundAmount, err = parseUint(*w.Amount, maxUint128); err != nil || p.RefundAmount.Sign() == 0 {
				return nil, refuse(ReasonRefundAmountInvalid, "refund amount %q is not a positive integer", *w.Amount)
			}
		}
	}
	return p, nil
}

// config decodes raw into c (decodeConfig), or copies the configuration
// kept for the same bytes.
func (cs *Configs) config(raw json.RawMessage, c *Config) error {
	if cs == nil || cs.kept == nil {
		return decodeConfig(raw, c)
	}
	if kept, ok := cs.kept.Get(string(raw)); ok {
		*c = kept
		return nil
	}
	if err := decodeConfig(raw, c); err != nil {
		return err
	}
	cs.kept.Put(string(raw), *c)
	return nil
}

// decodeConfig decodes a channelConfig strictly: every field present,
// addresses 20 bytes of hex, the salt 32, the withdraw delay a JSON
// integer.
func decodeConfig(raw json.RawMessage, c *Config) error {
	var w struct {
		Payer, PayerAuthorizer, Receiver, ReceiverAuthorizer, Token *string
		WithdrawDelay                                               json.RawMessage
		Salt                                                        *string
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    *string
		to   *common.Address
	}{
		{"payer", w.Payer, &c.Payer}, {"payerAuthorizer", w.PayerAuthorizer, &c.PayerAuthorizer},
		{"receiver", w.Receiver, &c.Receiver}, {"receiverAuthorizer", w.ReceiverAuthorizer, &c.ReceiverAuthorizer},
		{"token", w.Token, &c.Token},
	} {
		if f.v == nil || !isAddress(*f.v) {
			return fmt.Errorf("%s is not an address", f.name)
		}
		*f.to = common.HexToAddress(*f.v)
	}
	if w.Salt == nil || !isWord(*w.Salt) {
		return fmt.Errorf("salt is not 32 bytes of hex")
	}
	c.Salt = common.HexToHash(*w.Salt)
	// A JSON integer, not a string or a fraction.
	d, ok := new(big.Int).SetString(string(w.WithdrawDelay), 10)
	if !ok || d.Sign() < 0 || d.BitLen() > 40 {
		return fmt.Errorf("withdrawDelay %s is not a uint40", w.WithdrawDelay)
	}
	c.WithdrawDelay = d.Uint64()
	if c.Payer == (common.Address{}) || c.Receiver == (common.Address{}) || c.ReceiverAuthorizer == (common.Address{}) || c.Token == (common.Address{}) {
		return fmt.Errorf("payer, receiver, receiverAuthorizer and token must not be zero")
	}
	return nil
}

// parseUint parses a decimal string of at most max.
func parseUint(s string, max *big.Int) (*big.Int, error) {
	if !isDigits(s) || len(s) > 78 {
		return nil, fmt.Errorf("%q is not a non-negative integer", s)
	}
	v, _ := new(big.Int).SetString(s, 10)
	if v.Cmp(max) > 0 {
		return nil, fmt.Errorf("%s is out of range", s)
	}
	return v, nil
}

// ParseAmount parses an amount of the scheme (a decimal uint128 string, as
// payment requirements' amount and the payloads' amounts are).
func ParseAmount(s string) (*big.Int, error) { return parseUint(s, maxUint128) }

// collectorArgs is the ABI of the collector's data.
var collectorArgs = func() abi.Arguments {
	u, _ := abi.NewType("uint256", "", nil)
	b, _ := abi.NewType("bytes", "", nil)
	return abi.Arguments{{Type: u}, {Type: u}, {Type: u}, {Type: b}}
}()

// CollectorData returns the collectorData that deposit passes to the
// EIP-3009 collector: abi.encode(validAfter, validBefore, salt, signature).
func (a *ERC3009Authorization) CollectorData() ([]byte, error) {
	data, err := collectorArgs.Pack(a.ValidAfter, a.ValidBefore, new(big.Int).SetBytes(a.Salt[:]), a.Signature)
	if err != nil {
		return nil, fmt.Errorf("encode collector data: %w", err)
	}
	return data, nil
}
