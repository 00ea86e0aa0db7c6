package index

import "github.com/ethereum/go-ethereum/common"

// KnownFacilitators returns the addresses that send the settlements of the
// best-known public facilitators on Base, by name: the senders the chain
// reader calls a facilitator (ChainReaderConfig.Facilitators adds others).
// The addresses are those x402scan attributes to each facilitator
// (github.com/Merit-Systems/x402scan, packages/external/facilitators/src/
// facilitators/coinbase.ts and payai.ts: the addresses not marked
// deprecated), read in 2026; a facilitator that adds signers is known by
// the new ones once they are added here. A settlement sent by any other
// address is the seller's own (sent by one of the host's payTo addresses),
// the payer's (a plain transfer), or other.
func KnownFacilitators() map[common.Address]string {
	return map[common.Address]string{
		// Coinbase (CDP facilitator).
		common.HexToAddress("0x8f5cb67b49555e614892b7233cfddebfb746e531"): "Coinbase",
		common.HexToAddress("0x67b9ce703d9ce658d7c4ac3c289cea112fe662af"): "Coinbase",
		common.HexToAddress("0x68a96f41ff1e9f2e7b591a931a4ad224e7c07863"): "Coinbase",
		common.HexToAddress("0x97acce27d5069544480bde0f04d9f47d7422a016"): "Coinbase",
		common.HexToAddress("0xa32ccda98ba7529705a059bd2d213da8de10d101"): "Coinbase",
		// PayAI.
		common.HexToAddress("0xc6699d2aada6c36dfea5c248dd70f9cb0235cb63"): "PayAI",
		common.HexToAddress("0xb2bd29925cbbcea7628279c91945ca5b98bf371b"): "PayAI",
		common.HexToAddress("0x25659315106580ce2a787ceec5efb2d347b539c9"): "PayAI",
		common.HexToAddress("0xb8f41cb13b1f213da1e94e1b742ec1323235c48f"): "PayAI",
		common.HexToAddress("0xe575fa51af90957d66fab6d63355f1ed021b887b"): "PayAI",
	}
}
