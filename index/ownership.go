package index

import (
	"crypto/ed25519"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/mr-tron/base58"

	"github.com/x402d/x402d/store"
)

// Proof of ownership, in x402scan's form (Merit-Systems/x402scan,
// apps/scan/src/lib/ownership-proof.ts): an origin's discovery document
// carries ownershipProofs, a list of signatures of the origin string itself
// ("https://api.example.com": scheme and host, no path, no trailing slash),
// each made with the key of a receiver (payTo) of its resources. For an EVM
// receiver the signature is EIP-191 personal_sign (hex, 65 bytes); for a
// Solana receiver an ed25519 signature of the origin's bytes (base58, or
// hex). /.well-known/x402 carries them at its top level
// ({"version":1,"resources":[...],"ownershipProofs":[...]}); an OpenAPI
// document under x-discovery ({"x-discovery":{"ownershipProofs":[...]}}).
// A resource whose origin proves one of its receivers is verified.

// maxProofs bounds the proofs read from one document.
const maxProofs = 16

var evmAddress = regexp.MustCompile(`^0x[0-9a-fA-F]{40}$`)

// verifiedReceivers returns the receivers among payTos (ReceiverKey, each
// once, sorted) that one of proofs proves for origin.
func verifiedReceivers(origin string, proofs, payTos []string) []string {
	var out []string
	for _, payTo := range payTos {
		key := store.ReceiverKey(payTo)
		if slices.Contains(out, key) {
			continue
		}
		for _, proof := range proofs[:min(len(proofs), maxProofs)] {
			if proves(origin, strings.TrimSpace(proof), payTo) {
				out = append(out, key)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// proves reports whether proof is origin signed by the key of payTo.
func proves(origin, proof, payTo string) bool {
	if evmAddress.MatchString(payTo) {
		sig, err := hex.DecodeString(strings.TrimPrefix(strings.TrimPrefix(proof, "0x"), "0X"))
		if err != nil || len(sig) != crypto.SignatureLength {
			return false
		}
		if sig[crypto.RecoveryIDOffset] >= 27 {
			sig[crypto.RecoveryIDOffset] -= 27
		}
		pub, err := crypto.SigToPub(accounts.TextHash([]byte(origin)), sig)
		if err != nil {
			return false
		}
		return crypto.PubkeyToAddress(*pub) == common.HexToAddress(payTo)
	}
	pub, err := base58.Decode(payTo)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return false
	}
	sig, err := base58.Decode(proof)
	if err != nil || len(sig) != ed25519.SignatureSize {
		if sig, err = hex.DecodeString(strings.TrimPrefix(proof, "0x")); err != nil || len(sig) != ed25519.SignatureSize {
			return false
		}
	}
	return ed25519.Verify(pub, []byte(origin), sig)
}
