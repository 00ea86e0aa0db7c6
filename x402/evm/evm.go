// Package evm implements the x402 "exact" scheme on EVM networks (EIP-3009
// transferWithAuthorization, as USDC offers it) for a seller that verifies
// and settles itself.
//
// Verifier checks a payment against the seller's own requirement (x402.md
// §5): first what needs no chain (the payload's shape, the scheme, the
// EIP-712 domain, the network, the recipient, the validity window and the
// exact value), then, after the caller's chain guard (x402.GuardChain),
// simulates the transfer with eth_call; when it fails, the signature
// (ECDSA, or EIP-1271 for a deployed contract wallet) is checked and the
// chain read to name the reason, unless the revert names the balance.
// Payers found unable to pay are refused again from memory for a moment.
// Refusals carry the reason strings of the official packages.
//
// Relayer settles verified payments: it sends transferWithAuthorization
// from one key that pays the gas, keeps that key's transaction nonce itself
// so that concurrent settlements do not collide, and waits for the receipt.
// Settling is idempotent: a payment whose authorization an earlier attempt
// already used on chain is reported settled with that attempt's
// transaction. Relayer.Settle (settle.go) reads as prepare, send and
// classify. The relayer settles between Start and Stop (internal/startstop),
// which the worker calls with its own: its keeper, which gives a node the
// transactions it lost, runs on a goroutine of each chain in between, and
// Stop waits for every goroutine it started. Its parts on a chain
// (finality, nonces, fees, receipts, sender, keeper, batcher) are each a
// type in a file of its name, built in that order by newRelayChain
// (chain.go) with no pointer back, each owning its lock. Its pauses, caches and expiries
// follow RelayerConfig.Clock (internal/clock), which tests move.
// Relayer.Send and Await (transact.go) send any call from the same key on
// the same nonces (a payment channel's deposit, claim, settle or refund),
// recorded, re-sent and replaced as settlements are.
//
// Both work on any eip155:<chain id> network through a JSON-RPC client per
// network: package ethrpc, below this one, is that client over several
// endpoints (health, lag, 429s, timeouts, agreement of two endpoints) and
// its Meter, which counts the calls by purpose and lets settlement's go
// before verification's; *ethclient.Client satisfies Reader and Backend
// too, for a public chain as for the embedded devchain. ethrpc.go names
// the parts of ethrpc the service's wiring takes from evm.
package evm

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// Reasons a payment is refused, spelled as the official x402 packages spell
// them (x402.md §5).
const (
	ReasonScheme               = "invalid_exact_evm_scheme"
	ReasonMissingDomain        = "invalid_exact_evm_missing_eip712_domain"
	ReasonNetworkMismatch      = "invalid_exact_evm_network_mismatch"
	ReasonPayload              = "invalid_exact_evm_payload"
	ReasonMissingSignature     = "invalid_exact_evm_payload_missing_signature"
	ReasonSignature            = "invalid_exact_evm_signature"
	ReasonUndeployedWallet     = "invalid_exact_evm_payload_undeployed_smart_wallet"
	ReasonRecipientMismatch    = "invalid_exact_evm_recipient_mismatch"
	ReasonValidBefore          = "invalid_exact_evm_payload_authorization_valid_before"
	ReasonValidAfter           = "invalid_exact_evm_payload_authorization_valid_after"
	ReasonValueMismatch        = "invalid_exact_evm_payload_authorization_value_mismatch"
	ReasonAssetNotDeployed     = "asset_not_deployed_contract"
	ReasonEIP3009NotSupported  = "invalid_exact_evm_eip3009_not_supported"
	ReasonNonceAlreadyUsed     = "invalid_exact_evm_nonce_already_used"
	ReasonTokenNameMismatch    = "invalid_exact_evm_token_name_mismatch"
	ReasonTokenVersionMismatch = "invalid_exact_evm_token_version_mismatch"
	ReasonInsufficientBalance  = "invalid_exact_evm_insufficient_balance"
	ReasonSimulationFailed     = "invalid_exact_evm_transaction_simulation_failed"
	ReasonTransactionFailed    = "invalid_exact_evm_transaction_failed"
)

// Reader is what verification reads from a chain. *ethclient.Client
// satisfies it.
type Reader interface {
	ethereum.ChainIDReader
	ethereum.ContractCaller
	CodeAt(ctx context.Context, account common.Address, blockNumber *big.Int) ([]byte, error)
}

// tokenABI is the part of an EIP-3009 token (FiatTokenV2) and of EIP-1271
// that x402 uses. The (v,r,s) overload of transferWithAuthorization comes
// first, so go-ethereum names it transferWithAuthorization and the (bytes)
// overload transferWithAuthorization0.
const tokenABI = `[
{"type":"function","name":"transferWithAuthorization","stateMutability":"nonpayable","outputs":[],"inputs":[
 {"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"value","type":"uint256"},
 {"name":"validAfter","type":"uint256"},{"name":"validBefore","type":"uint256"},{"name":"nonce","type":"bytes32"},
 {"name":"v","type":"uint8"},{"name":"r","type":"bytes32"},{"name":"s","type":"bytes32"}]},
{"type":"function","name":"transferWithAuthorization","stateMutability":"nonpayable","outputs":[],"inputs":[
 {"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"value","type":"uint256"},
 {"name":"validAfter","type":"uint256"},{"name":"validBefore","type":"uint256"},{"name":"nonce","type":"bytes32"},
 {"name":"signature","type":"bytes"}]},
{"type":"function","name":"authorizationState","stateMutability":"view","inputs":[
 {"name":"authorizer","type":"address"},{"name":"nonce","type":"bytes32"}],"outputs":[{"name":"","type":"bool"}]},
{"type":"function","name":"balanceOf","stateMutability":"view","inputs":[{"name":"account","type":"address"}],"outputs":[{"name":"","type":"uint256"}]},
{"type":"function","name":"name","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"string"}]},
{"type":"function","name":"version","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"string"}]},
{"type":"function","name":"decimals","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"uint8"}]},
{"type":"function","name":"isValidSignature","stateMutability":"view","inputs":[
 {"name":"hash","type":"bytes32"},{"name":"signature","type":"bytes"}],"outputs":[{"name":"","type":"bytes4"}]},
{"type":"event","name":"AuthorizationUsed","anonymous":false,"inputs":[
 {"name":"authorizer","type":"address","indexed":true},{"name":"nonce","type":"bytes32","indexed":true}]},
{"type":"error","name":"ERC20InsufficientBalance","inputs":[
 {"name":"sender","type":"address"},{"name":"balance","type":"uint256"},{"name":"needed","type":"uint256"}]}
]`

// token is the parsed tokenABI.
var token = func() abi.ABI {
	parsed, err := abi.JSON(strings.NewReader(tokenABI))
	if err != nil {
		panic(err)
	}
	return parsed
}()

// Function names in token.
const (
	fnTransferVRS   = "transferWithAuthorization"
	fnTransferBytes = "transferWithAuthorization0"
)

// eip1271Magic is what isValidSignature returns for a valid signature.
var eip1271Magic = [4]byte{0x16, 0x26, 0xba, 0x7e}

// ChainID returns the chain id of a CAIP-2 eip155 network name such as
// eip155:8453 (ethrpc.ChainID).
func ChainID(network string) (*big.Int, error) { return ethrpc.ChainID(network) }

// Network returns the CAIP-2 name of an EVM chain id, eip155:<id>.
func Network(chainID *big.Int) string { return "eip155:" + chainID.String() }

// Domain is the EIP-712 domain of an EIP-3009 token.
type Domain struct {
	// Name and Version are the token's EIP-712 name and version (the
	// requirement's extra).
	Name    string
	Version string
	// ChainID is the chain id of the network.
	ChainID *big.Int
	// VerifyingContract is the token (the requirement's asset).
	VerifyingContract common.Address
}

// Separator returns the EIP-712 domain separator.
func (d *Domain) Separator() common.Hash {
	return crypto.Keccak256Hash(
		domainTypeHash[:],
		crypto.Keccak256([]byte(d.Name)),
		crypto.Keccak256([]byte(d.Version)),
		common.BigToHash(d.ChainID).Bytes(),
		common.BytesToHash(d.VerifyingContract.Bytes()).Bytes(),
	)
}

var (
	domainTypeHash = crypto.Keccak256Hash([]byte(
		"EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"))
	transferTypeHash = crypto.Keccak256Hash([]byte(
		"TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"))
)

// Authorization is a decoded EIP-3009 TransferWithAuthorization message.
type Authorization struct {
	From        common.Address
	To          common.Address
	Value       *big.Int
	ValidAfter  *big.Int
	ValidBefore *big.Int
	Nonce       common.Hash
}

// Digest returns the EIP-712 hash of the authorization in domain d: what the
// payer signs.
func (a *Authorization) Digest(d *Domain) common.Hash {
	structHash := crypto.Keccak256Hash(
		transferTypeHash[:],
		common.BytesToHash(a.From.Bytes()).Bytes(),
		common.BytesToHash(a.To.Bytes()).Bytes(),
		common.BigToHash(a.Value).Bytes(),
		common.BigToHash(a.ValidAfter).Bytes(),
		common.BigToHash(a.ValidBefore).Bytes(),
		a.Nonce[:],
	)
	sep := d.Separator()
	return crypto.Keccak256Hash([]byte{0x19, 0x01}, sep[:], structHash[:])
}

// Sign signs the authorization with key in domain d and returns the 65-byte
// signature r‖s‖v with v 27 or 28, as wallets produce it.
func (a *Authorization) Sign(key *ecdsa.PrivateKey, d *Domain) ([]byte, error) {
	digest := a.Digest(d)
	sig, err := crypto.Sign(digest[:], key)
	if err != nil {
		return nil, fmt.Errorf("sign authorization: %w", err)
	}
	sig[64] += 27
	return sig, nil
}

// maxUint256 bounds decimal amounts.
var maxUint256 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))

// parseUint256 parses a decimal string of at most 256 bits.
func parseUint256(field, s string) (*big.Int, error) {
	if s == "" || len(s) > 78 || strings.TrimLeft(s, "0123456789") != "" {
		return nil, fmt.Errorf("%s %q is not a decimal number", field, s)
	}
	n, _ := new(big.Int).SetString(s, 10)
	if n.Cmp(maxUint256) > 0 {
		return nil, fmt.Errorf("%s %q does not fit in 256 bits", field, s)
	}
	return n, nil
}

// parseAddress parses a 0x-prefixed 20-byte hex address.
func parseAddress(field, s string) (common.Address, error) {
	if !strings.HasPrefix(s, "0x") && !strings.HasPrefix(s, "0X") || !common.IsHexAddress(s) {
		return common.Address{}, fmt.Errorf("%s %q is not an address", field, s)
	}
	return common.HexToAddress(s), nil
}

// abiUnpackRevert decodes Error(string) revert data.
func abiUnpackRevert(data []byte) (string, error) { return abi.UnpackRevert(data) }
