package devchain_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/x402d/x402d/x402/devchain"
)

func Example() {
	ctx := context.Background()
	chain, err := devchain.New(ctx, &devchain.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	defer chain.Close()

	balance, err := chain.BalanceOf(ctx, chain.Account(0).Address)
	if err != nil {
		panic(err)
	}
	fmt.Println("network:", chain.Network())
	fmt.Println("USDC:", devchain.USDC.Hex())
	fmt.Println("account 0:", chain.Account(0).Address.Hex(), "holds", balance, "atomic units")
	fmt.Println("relayer:", chain.Account(devchain.RelayerAccount).Address.Hex())
	fmt.Println("pay to:", chain.Account(devchain.PayToAccount).Address.Hex())
	// Output:
	// network: eip155:8453
	// USDC: 0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913
	// account 0: 0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266 holds 1000000000000 atomic units
	// relayer: 0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f
	// pay to: 0xa0Ee7A142d267C1f36714E4a8F75612F20a79720
}
