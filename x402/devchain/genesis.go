package devchain

import (
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/state"
	"github.com/ethereum/go-ethereum/core/tracing"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/core/vm"
	"github.com/ethereum/go-ethereum/core/vm/runtime"
	"github.com/ethereum/go-ethereum/params"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/x402/evm/channel"
)

// ContractAlloc returns the accounts of the chain's contracts, as a genesis
// or another node (anvil, through anvil_setCode and anvil_setStorageAt)
// places them: DevUSDC at USDC, deployed by deployer and minted to the
// accounts of mints, DevMulticall at Multicall, DevWalletFactory at
// WalletFactory, and batch-settlement's BatchSettlement and
// ERC3009DepositCollector at their canonical addresses
// (channel.SettlementAddress, channel.CollectorAddress).
func ContractAlloc(config *params.ChainConfig, deployer common.Address, mints map[common.Address]*big.Int) (types.GenesisAlloc, error) {
	token, err := tokenAlloc(config, deployer, mints)
	if err != nil {
		return nil, err
	}
	multicall, err := contracts.Load(contracts.DevMulticall)
	if err != nil {
		return nil, err
	}
	factory, err := contracts.Load(contracts.DevWalletFactory)
	if err != nil {
		return nil, err
	}
	settlement, err := contracts.Load(contracts.BatchSettlement)
	if err != nil {
		return nil, err
	}
	collector, err := contracts.Load(contracts.ERC3009DepositCollector)
	if err != nil {
		return nil, err
	}
	return types.GenesisAlloc{
		USDC: token,
		// No constructor and no immutables: the runtime code is the account.
		Multicall:                 {Code: multicall.DeployedBytecode, Nonce: 1, Balance: new(big.Int)},
		WalletFactory:             {Code: factory.DeployedBytecode, Nonce: 1, Balance: new(big.Int)},
		channel.SettlementAddress: {Code: settlement.DeployedBytecode, Nonce: 1, Balance: new(big.Int)},
		channel.CollectorAddress:  {Code: collector.DeployedBytecode, Nonce: 1, Balance: new(big.Int)},
	}, nil
}

// tokenAlloc runs DevUSDC's constructor (deployer as sender) and its mint
// calls in a throwaway EVM, and returns the genesis account of the token:
// the runtime code the constructor returned and the storage it wrote. Placed
// at any address the code works unchanged, because the token rebuilds its
// EIP-712 domain separator from address(this) and block.chainid when they
// differ from the ones cached by the constructor.
func tokenAlloc(config *params.ChainConfig, deployer common.Address, mints map[common.Address]*big.Int) (types.Account, error) {
	token, err := contracts.Load(contracts.DevUSDC)
	if err != nil {
		return types.Account{}, err
	}
	statedb, err := state.New(types.EmptyRootHash, state.NewDatabaseForTesting())
	if err != nil {
		return types.Account{}, fmt.Errorf("token genesis: %w", err)
	}
	// Record the slots every SSTORE writes, to copy them out afterwards.
	written := map[common.Address]map[common.Hash]struct{}{}
	hooks := &tracing.Hooks{OnOpcode: func(_ uint64, op byte, _, _ uint64, scope tracing.OpContext, _ []byte, _ int, _ error) {
		if vm.OpCode(op) != vm.SSTORE {
			return
		}
		stack := scope.StackData()
		if len(stack) == 0 {
			return
		}
		slots := written[scope.Address()]
		if slots == nil {
			slots = map[common.Hash]struct{}{}
			written[scope.Address()] = slots
		}
		slots[common.Hash(stack[len(stack)-1].Bytes32())] = struct{}{}
	}}
	cfg := &runtime.Config{
		ChainConfig: config,
		Origin:      deployer,
		BlockNumber: big.NewInt(0),
		GasLimit:    30_000_000,
		BaseFee:     big.NewInt(0),
		Random:      &common.Hash{},
		State:       statedb,
		EVMConfig:   vm.Config{Tracer: hooks},
	}
	_, addr, _, err := runtime.Create(token.Bytecode, cfg)
	if err != nil {
		return types.Account{}, fmt.Errorf("token genesis: construct %s: %w", token.Name, err)
	}
	for to, amount := range mints {
		input, err := token.ABI.Pack("mint", to, amount)
		if err != nil {
			return types.Account{}, fmt.Errorf("token genesis: %w", err)
		}
		if _, _, err := runtime.Call(addr, input, cfg); err != nil {
			return types.Account{}, fmt.Errorf("token genesis: mint to %s: %w", to, err)
		}
	}
	storage := map[common.Hash]common.Hash{}
	for slot := range written[addr] {
		if v := statedb.GetState(addr, slot); v != (common.Hash{}) {
			storage[slot] = v
		}
	}
	return types.Account{Code: statedb.GetCode(addr), Storage: storage, Nonce: 1, Balance: new(big.Int)}, nil
}
