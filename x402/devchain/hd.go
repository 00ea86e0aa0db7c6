package devchain

import (
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/crypto"
)

// Mnemonic is the standard development mnemonic whose accounts local EVM
// development chains fund.
const Mnemonic = "test test test test test test test test test test test junk"

// hardened marks a hardened BIP-32 index.
const hardened = 1 << 31

// DeriveKey derives the private key of account index of a BIP-39 mnemonic
// (empty passphrase) along Ethereum's path m/44'/60'/0'/0/index. The
// mnemonic's checksum is not checked: it only seeds the derivation.
func DeriveKey(mnemonic string, index uint32) (*ecdsa.PrivateKey, error) {
	if index >= hardened {
		return nil, fmt.Errorf("derive key: index %d is out of range", index)
	}
	words := strings.Join(strings.Fields(mnemonic), " ")
	seed, err := pbkdf2.Key(sha512.New, words, []byte("mnemonic"), 2048, 64)
	if err != nil {
		return nil, fmt.Errorf("derive key: seed: %w", err)
	}
	mac := hmac.New(sha512.New, []byte("Bitcoin seed"))
	mac.Write(seed)
	sum := mac.Sum(nil)
	key, chain := new(big.Int).SetBytes(sum[:32]), sum[32:]
	for _, i := range []uint32{44 | hardened, 60 | hardened, 0 | hardened, 0, index} {
		key, chain, err = childKey(key, chain, i)
		if err != nil {
			return nil, fmt.Errorf("derive key %d: %w", index, err)
		}
	}
	return crypto.ToECDSA(key.FillBytes(make([]byte, 32)))
}

// childKey is BIP-32's CKDpriv.
func childKey(parent *big.Int, chain []byte, i uint32) (*big.Int, []byte, error) {
	n := crypto.S256().Params().N
	var data []byte
	if i >= hardened {
		data = append([]byte{0}, parent.FillBytes(make([]byte, 32))...)
	} else {
		priv, err := crypto.ToECDSA(parent.FillBytes(make([]byte, 32)))
		if err != nil {
			return nil, nil, err
		}
		data = crypto.CompressPubkey(&priv.PublicKey)
	}
	data = binary.BigEndian.AppendUint32(data, i)
	mac := hmac.New(sha512.New, chain)
	mac.Write(data)
	sum := mac.Sum(nil)
	il := new(big.Int).SetBytes(sum[:32])
	if il.Cmp(n) >= 0 {
		return nil, nil, errors.New("invalid child key (IL ≥ n)")
	}
	child := il.Add(il, parent)
	child.Mod(child, n)
	if child.Sign() == 0 {
		return nil, nil, errors.New("invalid child key (zero)")
	}
	return child, sum[32:], nil
}
