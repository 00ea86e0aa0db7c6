package evmtest

import (
	"context"
	"crypto/ecdsa"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402d/x402d/contracts"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
)

// CancelAuthorization cancels the EIP-3009 authorization (from, nonce) of
// chain's USDC, signed by from's key (cancelAuthorization, sent by the
// deployer account), as a payer who takes a payment back before it is
// settled would; tb fails if it cannot.
func CancelAuthorization(tb testing.TB, chain *devchain.Chain, key *ecdsa.PrivateKey, from common.Address, nonce common.Hash) {
	tb.Helper()
	typeHash := crypto.Keccak256Hash([]byte("CancelAuthorization(address authorizer,bytes32 nonce)"))
	structHash := crypto.Keccak256Hash(typeHash[:], common.LeftPadBytes(from.Bytes(), 32), nonce[:])
	domain := &evm.Domain{Name: devchain.TokenName, Version: devchain.TokenVersion, ChainID: chain.ChainID(), VerifyingContract: devchain.USDC}
	sep := domain.Separator()
	digest := crypto.Keccak256Hash([]byte{0x19, 0x01}, sep[:], structHash[:])
	sig, err := crypto.Sign(digest[:], key)
	if err != nil {
		tb.Fatalf("evmtest: sign cancelAuthorization: %v", err)
	}
	token, err := contracts.Load(contracts.DevUSDC)
	if err != nil {
		tb.Fatalf("evmtest: %v", err)
	}
	input, err := token.ABI.Pack("cancelAuthorization", from, nonce, sig[64]+27,
		common.BytesToHash(sig[:32]), common.BytesToHash(sig[32:64]))
	if err != nil {
		tb.Fatalf("evmtest: encode cancelAuthorization: %v", err)
	}
	usdc := devchain.USDC
	if _, err := chain.Transact(context.Background(), chain.Account(devchain.DeployerAccount), &usdc, nil, input); err != nil {
		tb.Fatalf("evmtest: send cancelAuthorization: %v", err)
	}
}
