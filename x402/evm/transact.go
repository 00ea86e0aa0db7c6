package evm

import (
	"context"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/evm/ethrpc"
)

// Send sends a transaction of the relayer's key to `to` with input on
// network. Its gas is estimated from the relayer when gas is 0 (the
// estimate and a quarter more: a limit set high costs nothing, only the gas
// used is paid, and the state may move between the estimate and the
// block). It returns once the signed transaction is recorded (nonce store,
// so a crash re-sends it) and handed to the node: the nonce, the keeper's
// re-sends and replacements are the settlements' own (sender.send), so
// these transactions and the settlements' share one nonce sequence.
//
// A call that would revert is refused by the estimate (an error naming the
// revert, isRevert tells it) and nothing is sent; with gas given, the
// transaction is sent without a look.
func (r *Relayer) Send(ctx context.Context, network string, to common.Address, input []byte, gas uint64) (common.Hash, error) {
	tx, err := r.SendTx(ctx, network, to, input, gas)
	if err != nil {
		return common.Hash{}, err
	}
	return tx.Hash(), nil
}

// SendTx is Send returning the transaction signed: its nonce is the
// relayer's (Address) nonce it took, which no other transaction of the
// relayer's can be mined with.
func (r *Relayer) SendTx(ctx context.Context, network string, to common.Address, input []byte, gas uint64) (*types.Transaction, error) {
	ctx, leave, err := r.life.Enter(ctx)
	if err != nil {
		return nil, fmt.Errorf("send to %s on %s: %w", to.Hex(), network, err)
	}
	defer leave()
	ctx = ethrpc.WithPurpose(ctx, ethrpc.PurposeSettle)
	chain := r.chains[network]
	if chain == nil {
		return nil, fmt.Errorf("send to %s: no chain client for %s", to.Hex(), network)
	}
	if gas == 0 {
		estimate, err := chain.backend.EstimateGas(ctx, ethereum.CallMsg{From: r.address, To: &to, Data: input})
		if err != nil {
			return nil, fmt.Errorf("send to %s on %s: estimate gas: %w", to.Hex(), network, err)
		}
		gas = estimate + estimate/4
	}
	tx, err := chain.sender.send(ctx, to, input, gas)
	if err != nil {
		return nil, fmt.Errorf("send to %s on %s: %w", to.Hex(), network, err)
	}
	r.logger.DebugContext(ctx, "relayer transaction sent", "network", network, "to", to.Hex(), "transaction", tx.Hash().Hex(),
		"nonce", tx.Nonce(), "gas", gas)
	return tx, nil
}

// Await waits for the receipt of a transaction Send sent (replaced with
// higher fees if left unmined, like settlements: the receipt returned is
// then the replacement's, whose hash is not hash) and returns it. It waits
// at most RelayerConfig.ReceiptTimeout; past it, or when ctx ends, it
// returns an error and the transaction stays the keeper's to send again,
// so a later Await of the same hash finds it.
func (r *Relayer) Await(ctx context.Context, network string, hash common.Hash) (*types.Receipt, error) {
	ctx, leave, err := r.life.Enter(ctx)
	if err != nil {
		return nil, fmt.Errorf("await %s on %s: %w", hash.Hex(), network, err)
	}
	defer leave()
	ctx = ethrpc.WithPurpose(ctx, ethrpc.PurposeSettle)
	chain := r.chains[network]
	if chain == nil {
		return nil, fmt.Errorf("await %s: no chain client for %s", hash.Hex(), network)
	}
	receipt, err := chain.receipts.wait(ctx, hash)
	if err != nil {
		return nil, fmt.Errorf("await on %s: %w", network, err)
	}
	return receipt, nil
}

// ChainID returns network's chain id (for EIP-712 digests), or an error
// when the relayer has no client of network.
func (r *Relayer) ChainID(network string) (*big.Int, error) {
	if r.chains[network] == nil {
		return nil, fmt.Errorf("chain id: no chain client for %s", network)
	}
	return ChainID(network)
}

// SettledBlock returns the block of a receipt as the relayer's settlements
// carry it (x402.SettleResponse.Block), to be followed with Follow: nil
// when network's transactions are final at their receipt.
func (r *Relayer) SettledBlock(network string, receipt *types.Receipt) (*x402.SettledBlock, error) {
	chain := r.chains[network]
	if chain == nil {
		return nil, fmt.Errorf("settled block: no chain client for %s", network)
	}
	return chain.finality.settledBlock(receipt), nil
}

// Call runs input against `to` on network from the relayer's address at
// the latest block (eth_call), as a transaction Send sent would run now:
// at the fees the relayer would send it with and the gas limit Send would
// give it (a payer's code that answers a call at a gas price of zero
// otherwise than a transaction is run as the transaction would run it): a
// claim's simulation. A revert is an error IsRevert tells.
func (r *Relayer) Call(ctx context.Context, network string, to common.Address, input []byte) ([]byte, error) {
	chain, msg, estimate, err := r.estimate(ctx, network, to, input)
	if err != nil {
		return nil, fmt.Errorf("call %s on %s: %w", to.Hex(), network, err)
	}
	msg.Gas = estimate + estimate/4
	out, err := chain.backend.CallContract(ctx, msg, nil)
	if err != nil {
		return nil, fmt.Errorf("call %s on %s: %w", to.Hex(), network, err)
	}
	return out, nil
}

// Estimate returns the gas a transaction of input to `to` on network would
// use now, sent by the relayer at the fees it would send it with (as Call
// runs it). A revert is an error IsRevert tells.
func (r *Relayer) Estimate(ctx context.Context, network string, to common.Address, input []byte) (uint64, error) {
	_, _, estimate, err := r.estimate(ctx, network, to, input)
	if err != nil {
		return 0, fmt.Errorf("estimate %s on %s: %w", to.Hex(), network, err)
	}
	return estimate, nil
}

// estimate is Estimate, with the chain and the message it estimated.
func (r *Relayer) estimate(ctx context.Context, network string, to common.Address, input []byte) (*relayChain, ethereum.CallMsg, uint64, error) {
	chain := r.chains[network]
	if chain == nil {
		return nil, ethereum.CallMsg{}, 0, fmt.Errorf("no chain client for %s", network)
	}
	tip, feeCap, err := chain.fees.current(ctx)
	if err != nil {
		return nil, ethereum.CallMsg{}, 0, err
	}
	msg := ethereum.CallMsg{From: r.address, To: &to, Data: input, GasTipCap: tip, GasFeeCap: feeCap}
	estimate, err := chain.backend.EstimateGas(ctx, msg)
	if err != nil {
		return nil, ethereum.CallMsg{}, 0, fmt.Errorf("estimate gas: %w", err)
	}
	return chain, msg, estimate, nil
}

// IsRevert reports whether err is a node's answer that a call or a gas
// estimate reverted (not a failure to reach the node).
func IsRevert(err error) bool { return isRevert(err) }

// Backends returns the client of each network the relayer sends through,
// by network, for the reads that go with its transactions (a channel's
// state, the settlement contract's logs).
func (r *Relayer) Backends() map[string]Backend {
	out := make(map[string]Backend, len(r.chains))
	for network, chain := range r.chains {
		out[network] = chain.backend
	}
	return out
}
