package svm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"

	"github.com/gagliardetto/solana-go"

	"github.com/x402d/x402d/x402"
)

// TokenBalances reads the balances of token accounts from a Solana node.
// Concurrent reads go together in JSON-RPC batches (rpcClient). It is safe
// for concurrent use.
type TokenBalances struct {
	rpc *rpcClient
}

// NewTokenBalances returns TokenBalances asking the JSON-RPC endpoint at
// url (RPC_URL_SOLANA) through client; a nil client is an http.Client with
// a 15-second timeout.
func NewTokenBalances(url string, client *http.Client) *TokenBalances {
	return &TokenBalances{rpc: newRPCClient(url, client)}
}

// Balance returns what the token account holds, in its mint's atomic
// units, at the "confirmed" commitment (getTokenAccountBalance).
func (b *TokenBalances) Balance(ctx context.Context, account solana.PublicKey) (*big.Int, error) {
	var out struct {
		Value struct {
			Amount string `json:"amount"`
		} `json:"value"`
	}
	if err := b.rpc.call(ctx, "getTokenAccountBalance", []any{account.String(), map[string]string{"commitment": "confirmed"}}, &out); err != nil {
		return nil, fmt.Errorf("balance of token account %s: %w", account, err)
	}
	amount, ok := new(big.Int).SetString(out.Value.Amount, 10)
	if !ok || amount.Sign() < 0 {
		return nil, fmt.Errorf("balance of token account %s: amount %q is not a count", account, out.Value.Amount)
	}
	return amount, nil
}

// Balance reads what p's payer holds to pay p now, for the reservation of
// the payments in flight (x402.BalanceReader): the balance, at
// "confirmed", of the token account its TransferChecked moves funds from
// (VerifierConfig.Balances). A smart wallet's transfer is known only from
// a simulation (verifySmartWallet): its transaction is simulated again,
// and the least balance of the accounts its transfers of the payment's
// amount and mint move funds from is its payer's; a transaction that no
// longer simulates is refused as verification refuses it.
func (v *Verifier) Balance(ctx context.Context, p *x402.Payment) (*big.Int, error) {
	if v.balances == nil {
		return nil, errors.New("svm verifier: no token balances configured")
	}
	sources, err := v.sources(ctx, p)
	if err != nil {
		return nil, err
	}
	var least *big.Int
	for _, source := range sources {
		b, err := v.balances.Balance(ctx, source)
		if err != nil {
			return nil, err
		}
		if least == nil || b.Cmp(least) < 0 {
			least = b
		}
	}
	return least, nil
}

// sources returns the token accounts the transfers paying p move funds
// from: the exact scheme's TransferChecked (instruction 2), or a smart
// wallet's transfers of p's amount of p's mint, found by simulation.
func (v *Verifier) sources(ctx context.Context, p *x402.Payment) ([]solana.PublicKey, error) {
	var payload x402.PaymentPayload
	if err := json.Unmarshal(p.Payload, &payload); err != nil {
		return nil, fmt.Errorf("payment payload: %w", err)
	}
	ptx, err := decodeTransaction(payload.Payload)
	if err != nil {
		return nil, fmt.Errorf("payment transaction: %w", err)
	}
	mint, err := solana.PublicKeyFromBase58(p.Asset)
	if err != nil {
		return nil, fmt.Errorf("payment asset %q: %w", p.Asset, err)
	}
	if ixs := ptx.instructions(); len(ixs) >= 3 {
		if tr, ok := parseTransfer(ixs[2]); ok && tr.mint == mint {
			return []solana.PublicKey{tr.source}, nil
		}
	}
	inner, ok := v.simulator.(innerSimulator)
	if v.smartWallets == nil || !ok {
		return nil, fmt.Errorf("payment %s: no TransferChecked of %s at instruction 2", p.Key(), mint)
	}
	var sp x402.ExactSVMPayload
	if err := json.Unmarshal(payload.Payload, &sp); err != nil {
		return nil, fmt.Errorf("payment payload: %w", err)
	}
	ins, err := inner.SimulateInner(ctx, sp.Transaction)
	if se, ok := errors.AsType[*SimulationError](err); ok {
		return nil, refuse(ReasonSmartWalletSimulationFailed, "%s", se.Err)
	}
	if err != nil {
		return nil, fmt.Errorf("balance of %s: %w", p.Payer, err)
	}
	var transfers []*transfer
	for _, ix := range ptx.instructions() {
		if tr, ok := parseTransfer(ix); ok {
			transfers = append(transfers, tr)
		}
	}
	transfers = append(transfers, innerTransfers(ins, ptx.tx.Message.AccountKeys)...)
	var sources []solana.PublicKey
	for _, tr := range transfers {
		if tr.mint == mint && fmt.Sprint(tr.amount) == p.Amount {
			sources = append(sources, tr.source)
		}
	}
	if len(sources) == 0 {
		return nil, refuse(ReasonSmartWalletNoTransfer, "the simulation makes no TransferChecked of %s %s", p.Amount, mint)
	}
	return sources, nil
}
