// Package contracts embeds the compiled Solidity contracts of the development
// chain: DevUSDC, a USDC-like EIP-3009 token, and DevWallet, a minimal
// EIP-1271 contract wallet used by tests, with DevWalletFactory, which deploys
// them at counterfactual addresses (ERC-6492); DevBurnerWallet, a hostile
// one whose signature check burns gas; and DevMulticall, whose aggregate3
// (Multicall3's interface) lets the relayer settle many payments in one
// transaction; BatchSettlement and ERC3009DepositCollector, the payment
// channels of x402's batch-settlement scheme and their EIP-3009 deposit
// collector, with the interface and digests of the contracts the official
// x402 packages use at their canonical addresses.
//
// It also embeds the contracts of the independent test chain, built from
// their publishers' sources: Circle's USDC (FiatTokenV2_2 behind
// FiatTokenProxy, linked to the SignatureChecker library) and Multicall3.
//
// The sources are the .sol files of this directory and, for the published
// contracts, the npm packages pinned in compat/package.json; build.mjs
// compiles them with the npm solc into build/*.json, which are committed so
// that building Go never needs Node. Rebuild them with
// `go tool task contracts` after editing a source.
package contracts

import (
	"bytes"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
)

// Names of the embedded contracts.
const (
	// DevUSDC is the EIP-3009 token the devchain places at the Base USDC
	// address: ERC-20 with 6 decimals, EIP-712 domain "USD Coin" version
	// "2", mint(to, amount) for its deployer.
	DevUSDC = "DevUSDC"
	// DevWallet is a contract wallet whose isValidSignature (EIP-1271)
	// accepts the ECDSA signatures of the owner given to its constructor.
	DevWallet = "DevWallet"
	// DevMulticall runs several calls in one transaction
	// (aggregate3((address,bool,bytes)[]), Multicall3's interface), each
	// allowed to fail or not.
	DevMulticall = "DevMulticall"
	// DevWalletFactory deploys DevWallets at counterfactual addresses
	// (CREATE2: deploy(owner, salt), addressOf(owner, salt)), for tests of
	// ERC-6492 signatures of wallets not deployed yet.
	DevWalletFactory = "DevWalletFactory"
	// DevBurnerWallet is a hostile contract wallet (EIP-1271) whose
	// isValidSignature burns the gas of the rounds given to its
	// constructor and, while gasless is set (setGasless), accepts only
	// calls made at a gas price of zero: an eth_call passes, a mined
	// transaction reverts.
	DevBurnerWallet = "DevBurnerWallet"
	// BatchSettlement holds the payment channels of x402's batch-settlement
	// scheme: deposits through a collector, claims of payer-signed
	// cumulative vouchers (claim, claimWithSignature), settle to the
	// receiver, timed withdrawal and cooperative refund. Its functions,
	// events and EIP-712 digests are those of the x402 foundation's
	// x402BatchSettlement; it has no constructor and no immutables, so its
	// runtime code is placed as it is at the canonical address.
	BatchSettlement = "BatchSettlement"
	// ERC3009DepositCollector pulls a channel deposit with the payer's
	// EIP-3009 receiveWithAuthorization (nonce keccak256(channelId, salt))
	// and passes it to BatchSettlement at its canonical address, the only
	// caller it accepts.
	ERC3009DepositCollector = "ERC3009DepositCollector"

	// FiatTokenV2_2 is Circle's USDC implementation (circlefin/stablecoin-evm,
	// Apache-2.0), compiled as Circle compiles it; it links SignatureChecker.
	FiatTokenV2_2 = "FiatTokenV2_2"
	// FiatTokenProxy is Circle's upgradeability proxy, the contract that
	// holds USDC's address and state and delegates to FiatTokenV2_2.
	FiatTokenProxy = "FiatTokenProxy"
	// SignatureChecker is Circle's library of ECDSA and EIP-1271 signature
	// checks, deployed on its own and linked into FiatTokenV2_2.
	SignatureChecker = "SignatureChecker"
	// Multicall3 is mds1/multicall's Multicall3, which every chain has at
	// 0xcA11bde05977b3631167028862bE2a173976CA11.
	Multicall3 = "Multicall3"
)

//go:embed build/*.json
var artifacts embed.FS

// Artifact is a compiled contract.
type Artifact struct {
	// Name is the contract's name.
	Name string
	// ABI is the contract's interface.
	ABI abi.ABI
	// Bytecode is the creation code, to which constructor arguments are
	// appended.
	Bytecode []byte
	// DeployedBytecode is the runtime code with immutables and linked
	// libraries' addresses left as zeros.
	DeployedBytecode []byte
	// Links are the places in Bytecode where a library's address goes,
	// by library name; Link fills them.
	Links map[string][]LinkRef
}

// LinkRef is one place in a contract's creation code that holds a library's
// address.
type LinkRef struct {
	// Start is the byte offset of the address.
	Start int `json:"start"`
	// Length is its length, 20.
	Length int `json:"length"`
}

// Load returns the embedded artifact of the named contract.
func Load(name string) (*Artifact, error) {
	raw, err := artifacts.ReadFile("build/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("contract %s: %w", name, err)
	}
	var file struct {
		ABI                    json.RawMessage                 `json:"abi"`
		Bytecode               json.RawMessage                 `json:"bytecode"`
		DeployedBytecode       json.RawMessage                 `json:"deployedBytecode"`
		LinkReferences         map[string]map[string][]LinkRef `json:"linkReferences"`
		DeployedLinkReferences map[string]map[string][]LinkRef `json:"deployedLinkReferences"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		return nil, fmt.Errorf("contract %s: decode artifact: %w", name, err)
	}
	parsed, err := abi.JSON(bytes.NewReader(file.ABI))
	if err != nil {
		return nil, fmt.Errorf("contract %s: decode ABI: %w", name, err)
	}
	a := &Artifact{Name: name, ABI: parsed}
	if a.Bytecode, a.Links, err = decodeCode(file.Bytecode, file.LinkReferences); err != nil {
		return nil, fmt.Errorf("contract %s: bytecode: %w", name, err)
	}
	if a.DeployedBytecode, _, err = decodeCode(file.DeployedBytecode, file.DeployedLinkReferences); err != nil {
		return nil, fmt.Errorf("contract %s: deployed bytecode: %w", name, err)
	}
	if len(a.Bytecode) == 0 {
		return nil, fmt.Errorf("contract %s: artifact has no bytecode", name)
	}
	return a, nil
}

// decodeCode decodes compiled code whose library references are
// placeholders (__$…$__, not hex until linked): they become zeros, and the
// references are returned by library name.
func decodeCode(raw json.RawMessage, refsByFile map[string]map[string][]LinkRef) ([]byte, map[string][]LinkRef, error) {
	var code string
	if err := json.Unmarshal(raw, &code); err != nil {
		return nil, nil, err
	}
	code = strings.TrimPrefix(code, "0x")
	var links map[string][]LinkRef
	for _, libs := range refsByFile {
		for lib, refs := range libs {
			for _, ref := range refs {
				if ref.Length != common.AddressLength || ref.Start < 0 || 2*(ref.Start+ref.Length) > len(code) {
					return nil, nil, fmt.Errorf("link reference %+v out of range", ref)
				}
				code = code[:2*ref.Start] + strings.Repeat("0", 2*ref.Length) + code[2*(ref.Start+ref.Length):]
			}
			if links == nil {
				links = map[string][]LinkRef{}
			}
			links[lib] = append(links[lib], refs...)
		}
	}
	b, err := hex.DecodeString(code)
	return b, links, err
}

// Link returns the creation code with the named library's address in each
// place that refers to it; it fails for a library the contract does not
// link.
func (a *Artifact) Link(lib string, addr common.Address) ([]byte, error) {
	refs, ok := a.Links[lib]
	if !ok {
		return nil, fmt.Errorf("contract %s: links no library %s", a.Name, lib)
	}
	code := append([]byte{}, a.Bytecode...)
	for _, ref := range refs {
		copy(code[ref.Start:ref.Start+ref.Length], addr.Bytes())
	}
	return code, nil
}

// Deployment returns the creation transaction data of the contract: its
// bytecode followed by the ABI-encoded constructor arguments.
func (a *Artifact) Deployment(args ...any) ([]byte, error) {
	enc, err := a.ABI.Pack("", args...)
	if err != nil {
		return nil, fmt.Errorf("contract %s: encode constructor arguments: %w", a.Name, err)
	}
	return append(append([]byte{}, a.Bytecode...), enc...), nil
}
