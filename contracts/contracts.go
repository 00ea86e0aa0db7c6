// Package contracts embeds the compiled Solidity contracts of the development
// chain: DevUSDC, a USDC-like EIP-3009 token, and DevWallet, a minimal
// EIP-1271 contract wallet used by tests, with DevWalletFactory, which deploys
// them at counterfactual addresses (ERC-6492); and DevMulticall, whose aggregate3
// (Multicall3's interface) lets the relayer settle many payments in one
// transaction.
//
// The sources are the .sol files of this directory; build.mjs compiles them
// with the npm solc pinned in compat/package.json into build/*.json, which are
// committed so that building Go never needs Node. Rebuild them with
// `go tool task contracts` after editing a source.
package contracts

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common/hexutil"
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
	// DeployedBytecode is the runtime code with immutables left as zeros.
	DeployedBytecode []byte
}

// Load returns the embedded artifact of the named contract.
func Load(name string) (*Artifact, error) {
	raw, err := artifacts.ReadFile("build/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("contract %s: %w", name, err)
	}
	var file struct {
		ABI              json.RawMessage `json:"abi"`
		Bytecode         hexutil.Bytes   `json:"bytecode"`
		DeployedBytecode hexutil.Bytes   `json:"deployedBytecode"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		return nil, fmt.Errorf("contract %s: decode artifact: %w", name, err)
	}
	parsed, err := abi.JSON(bytes.NewReader(file.ABI))
	if err != nil {
		return nil, fmt.Errorf("contract %s: decode ABI: %w", name, err)
	}
	if len(file.Bytecode) == 0 {
		return nil, fmt.Errorf("contract %s: artifact has no bytecode", name)
	}
	return &Artifact{Name: name, ABI: parsed, Bytecode: file.Bytecode, DeployedBytecode: file.DeployedBytecode}, nil
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
