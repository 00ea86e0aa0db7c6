package devchain

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/x402d/x402d/contracts"
)

// Transact sends a transaction from a development account and waits for
// its receipt; a nil to deploys data as a contract. It returns an error if
// the transaction reverts. Tests and demos use it to move the chain.
func (c *Chain) Transact(ctx context.Context, from Account, to *common.Address, value *big.Int, data []byte) (*types.Receipt, error) {
	if value == nil {
		value = new(big.Int)
	}
	gas, err := c.client.EstimateGas(ctx, ethereum.CallMsg{From: from.Address, To: to, Value: value, Data: data})
	if err != nil {
		return nil, fmt.Errorf("devchain transact: estimate gas: %w", err)
	}
	head, err := c.client.HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("devchain transact: %w", err)
	}
	tip := big.NewInt(1_000_000)
	c.txMu.Lock()
	pending, err := c.client.PendingNonceAt(ctx, from.Address)
	if err != nil {
		c.txMu.Unlock()
		return nil, fmt.Errorf("devchain transact: %w", err)
	}
	// The pool's pending nonce can lag a transaction sent an instant ago.
	nonce := max(pending, c.nonces[from.Address])
	tx, err := types.SignNewTx(from.Key, types.LatestSignerForChainID(c.chainID), &types.DynamicFeeTx{
		ChainID: c.chainID, Nonce: nonce, GasTipCap: tip,
		GasFeeCap: new(big.Int).Add(tip, new(big.Int).Mul(head.BaseFee, big.NewInt(2))),
		Gas:       gas + gas/5, To: to, Value: value, Data: data,
	})
	if err == nil {
		err = c.client.SendTransaction(ctx, tx)
	}
	if err == nil {
		c.nonces[from.Address] = nonce + 1
	}
	c.txMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("devchain transact: send: %w", err)
	}
	receipt, err := c.WaitMined(ctx, tx.Hash())
	if err != nil {
		return nil, fmt.Errorf("devchain transact: %w", err)
	}
	if receipt.Status != types.ReceiptStatusSuccessful {
		return receipt, fmt.Errorf("devchain transact: transaction %s reverted", tx.Hash().Hex())
	}
	return receipt, nil
}

// WaitMined waits for the receipt of the transaction hash, until its
// block is the head that reads at "latest" see, or until ctx ends.
func (c *Chain) WaitMined(ctx context.Context, hash common.Hash) (*types.Receipt, error) {
	for {
		receipt, err := c.client.TransactionReceipt(ctx, hash)
		if err == nil && c.backend.BlockChain().CurrentBlock().Number.Cmp(receipt.BlockNumber) < 0 {
			// The receipt can be found an instant before its block becomes
			// the head that reads at "latest" see: wait for it, so that
			// the caller reads what the transaction did.
			err = ethereum.NotFound
		}
		if err == nil {
			return receipt, nil
		}
		if !errors.Is(err, ethereum.NotFound) && !strings.Contains(err.Error(), "transaction indexing is in progress") {
			return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("receipt of %s: %w", hash.Hex(), ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// Mint creates amount of the token's atomic units for to (sent by the
// deployer account, the token's minter).
func (c *Chain) Mint(ctx context.Context, to common.Address, amount *big.Int) error {
	token, err := contracts.Load(contracts.DevUSDC)
	if err != nil {
		return err
	}
	input, err := token.ABI.Pack("mint", to, amount)
	if err != nil {
		return fmt.Errorf("devchain mint: %w", err)
	}
	usdc := USDC
	if _, err := c.Transact(ctx, c.accounts[DeployerAccount], &usdc, nil, input); err != nil {
		return fmt.Errorf("devchain mint: %w", err)
	}
	return nil
}

// BalanceOf returns the token balance of account, in atomic units.
func (c *Chain) BalanceOf(ctx context.Context, account common.Address) (*big.Int, error) {
	token, err := contracts.Load(contracts.DevUSDC)
	if err != nil {
		return nil, err
	}
	input, err := token.ABI.Pack("balanceOf", account)
	if err != nil {
		return nil, fmt.Errorf("devchain balance: %w", err)
	}
	usdc := USDC
	out, err := c.client.CallContract(ctx, ethereum.CallMsg{To: &usdc, Data: input}, nil)
	if err != nil {
		return nil, fmt.Errorf("devchain balance of %s: %w", account.Hex(), err)
	}
	return new(big.Int).SetBytes(out), nil
}
