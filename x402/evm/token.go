package evm

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402d/x402d/x402"
)

// CheckChain checks, before the first payment, that the client r of
// network serves that chain and, when the network is in the network table
// (x402.Networks), that its token answers the table's EIP-712 domain
// (name(), version()) and decimals(): a quote carries the table's values,
// and a payer signs the domain they name, so a difference would refuse
// every payment as a bad signature, or price it in the wrong unit. Each
// difference is named with the chain's value and the table's.
func CheckChain(ctx context.Context, network string, r Reader) error {
	if err := checkChainID(ctx, network, r); err != nil {
		return err
	}
	n, ok := x402.NetworkByID(network)
	if !ok {
		return nil
	}
	return CheckToken(ctx, r, n)
}

// checkChainID checks that r serves the chain network names.
func checkChainID(ctx context.Context, network string, r Reader) error {
	want, err := ChainID(network)
	if err != nil {
		return fmt.Errorf("check %s: %w", network, err)
	}
	got, err := r.ChainID(ctx)
	if err != nil {
		return fmt.Errorf("check %s: %w", network, err)
	}
	if got.Cmp(want) != 0 {
		return fmt.Errorf("check %s: the RPC endpoint serves chain %s, the network's is %s", network, got, want)
	}
	return nil
}

// CheckToken reads name(), version() and decimals() of n's token (its
// Asset) through r and compares them with n's Name, Version and Decimals.
// A difference is an error naming the network, the chain's value and the
// table's; every difference is reported.
func CheckToken(ctx context.Context, r Reader, n x402.Network) error {
	asset := common.HexToAddress(n.Asset)
	name, err := callToken[string](ctx, r, asset, "name")
	if err != nil {
		return fmt.Errorf("check %s: token %s: %w", n.ID, n.Asset, err)
	}
	version, err := callToken[string](ctx, r, asset, "version")
	if err != nil {
		return fmt.Errorf("check %s: token %s: %w", n.ID, n.Asset, err)
	}
	decimals, err := callToken[uint8](ctx, r, asset, "decimals")
	if err != nil {
		return fmt.Errorf("check %s: token %s: %w", n.ID, n.Asset, err)
	}
	var errs []error
	for _, d := range []struct{ what, chain, table string }{
		{"name()", name, n.Name},
		{"version()", version, n.Version},
		{"decimals()", strconv.Itoa(int(decimals)), strconv.Itoa(n.Decimals)},
	} {
		if d.chain != d.table {
			errs = append(errs, fmt.Errorf("check %s: token %s: %s is %q on chain, %q in the network table", n.ID, n.Asset, d.what, d.chain, d.table))
		}
	}
	return errors.Join(errs...)
}

// callToken calls the view method of token, which takes no argument and
// returns one value of type T.
func callToken[T any](ctx context.Context, r Reader, tok common.Address, method string) (T, error) {
	var zero T
	input, err := token.Pack(method)
	if err != nil {
		return zero, fmt.Errorf("%s(): %w", method, err)
	}
	out, err := r.CallContract(ctx, ethereum.CallMsg{To: &tok, Data: input}, nil)
	if err != nil {
		return zero, fmt.Errorf("%s(): %w", method, err)
	}
	values, err := token.Unpack(method, out)
	if err != nil || len(values) != 1 {
		return zero, fmt.Errorf("%s(): the contract answers no %T (%d bytes): is it the network's token?", method, zero, len(out))
	}
	v, ok := values[0].(T)
	if !ok {
		return zero, fmt.Errorf("%s(): the contract answers a %T, not a %T", method, values[0], zero)
	}
	return v, nil
}
