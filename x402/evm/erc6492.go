package evm

import (
	"bytes"
	"context"
	"fmt"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
)

// erc6492Magic ends an ERC-6492 signature: the signature of a smart-contract
// wallet that is not deployed yet, wrapped with how to deploy it.
var erc6492Magic = common.FromHex("0x6492649264926492649264926492649264926492649264926492649264926492")

// erc6492Args is the encoding of a wrapped signature before its magic:
// abi.encode(address factory, bytes factoryCalldata, bytes signature).
var erc6492Args = func() abi.Arguments {
	address, _ := abi.NewType("address", "", nil)
	bytesT, _ := abi.NewType("bytes", "", nil)
	return abi.Arguments{{Type: address}, {Type: bytesT}, {Type: bytesT}}
}()

// wrapped6492 is an ERC-6492 signature: calling factory with
// factoryCalldata deploys the wallet, which then accepts signature
// (EIP-1271).
type wrapped6492 struct {
	factory         common.Address
	factoryCalldata []byte
	signature       []byte
}

// parse6492 unwraps an ERC-6492 signature. ok is false for a signature of
// another kind; err is set for one that ends with the magic but does not
// decode.
func parse6492(sig []byte) (w *wrapped6492, ok bool, err error) {
	if len(sig) < len(erc6492Magic) || !bytes.Equal(sig[len(sig)-len(erc6492Magic):], erc6492Magic) {
		return nil, false, nil
	}
	vals, err := erc6492Args.Unpack(sig[:len(sig)-len(erc6492Magic)])
	if err != nil || len(vals) != 3 {
		return nil, true, refuse(ReasonPayload, "the ERC-6492 signature does not decode: %v", err)
	}
	factory, ok1 := vals[0].(common.Address)
	calldata, ok2 := vals[1].([]byte)
	inner, ok3 := vals[2].([]byte)
	if !ok1 || !ok2 || !ok3 {
		return nil, true, refuse(ReasonPayload, "the ERC-6492 signature does not decode")
	}
	return &wrapped6492{factory: factory, factoryCalldata: calldata, signature: inner}, true, nil
}

// Wrap6492 wraps signature as ERC-6492 does for a wallet that calling
// factory with factoryCalldata deploys (for clients and tests).
func Wrap6492(factory common.Address, factoryCalldata, signature []byte) ([]byte, error) {
	packed, err := erc6492Args.Pack(factory, factoryCalldata, signature)
	if err != nil {
		return nil, fmt.Errorf("wrap ERC-6492 signature: %w", err)
	}
	return append(packed, erc6492Magic...), nil
}

// undeployed6492 returns the wrapped signature of a payment whose payer is
// a wallet not deployed yet (nil for any other payment, the inner signature
// of a wrapped one whose wallet is deployed by now replacing sig).
func undeployed6492(ctx context.Context, reader Reader, from common.Address, sig *[]byte) (*wrapped6492, error) {
	w, ok, err := parse6492(*sig)
	if !ok || err != nil {
		return nil, err
	}
	code, err := reader.CodeAt(ctx, from, nil)
	if err != nil {
		return nil, fmt.Errorf("read code of %s: %w", from.Hex(), err)
	}
	if len(code) > 0 {
		// Deployed since it signed: its own signature is checked as any
		// contract wallet's (EIP-1271).
		*sig = w.signature
		return nil, nil
	}
	return w, nil
}

// deployAndTransfer is the aggregate3 call, to Multicall3, that deploys the
// wallet of w and then makes the transfer of auth signed by it; each must
// succeed.
func deployAndTransfer(w *wrapped6492, asset common.Address, auth *Authorization) ([]byte, error) {
	transfer, err := transferInput(auth, w.signature)
	if err != nil {
		return nil, err
	}
	input, err := multicallABI.Pack("aggregate3", []call3{
		{Target: w.factory, AllowFailure: false, CallData: w.factoryCalldata},
		{Target: asset, AllowFailure: false, CallData: transfer},
	})
	if err != nil {
		return nil, fmt.Errorf("encode deployment and transfer: %w", err)
	}
	return input, nil
}

// check6492 checks, without deploying anything, that the wallet w deploys
// accepts its signature for digest: its deployment and isValidSignature
// run in one eth_call through Multicall3.
func check6492(ctx context.Context, reader Reader, w *wrapped6492, wallet common.Address, digest common.Hash) (bool, error) {
	isValid, err := token.Pack("isValidSignature", digest, w.signature)
	if err != nil {
		return false, fmt.Errorf("encode isValidSignature: %w", err)
	}
	input, err := multicallABI.Pack("aggregate3", []call3{
		{Target: w.factory, AllowFailure: false, CallData: w.factoryCalldata},
		{Target: wallet, AllowFailure: true, CallData: isValid},
	})
	if err != nil {
		return false, fmt.Errorf("encode ERC-6492 check: %w", err)
	}
	multicall := Multicall3
	out, err := reader.CallContract(ctx, ethereum.CallMsg{To: &multicall, Data: input}, nil)
	if err != nil {
		if isRevert(err) {
			// The factory did not deploy it.
			return false, nil
		}
		return false, fmt.Errorf("run ERC-6492 check: %w", err)
	}
	vals, err := multicallABI.Unpack("aggregate3", out)
	if err != nil || len(vals) != 1 {
		return false, fmt.Errorf("decode ERC-6492 check: %v", err)
	}
	results, ok := vals[0].([]struct {
		Success    bool   `json:"success"`
		ReturnData []byte `json:"returnData"`
	})
	if !ok || len(results) != 2 {
		return false, fmt.Errorf("decode ERC-6492 check: %T", vals[0])
	}
	r := results[1]
	return r.Success && len(r.ReturnData) >= 4 && bytes.Equal(r.ReturnData[:4], eip1271Magic[:]), nil
}
