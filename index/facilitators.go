package index

// KnownFacilitators returns the addresses that send the settlements of the
// best-known public facilitators, by name, as the chain reader records
// senders (EVM: lower-case hex; Solana: base58): the senders it calls a
// facilitator (ChainReaderConfig.Facilitators adds others). On Base they
// send the EIP-3009 settlements; on Solana they are the fee payers of the
// settlement transactions. The addresses are those x402scan attributes to
// each facilitator (github.com/Merit-Systems/x402scan,
// packages/external/facilitators/src/facilitators/coinbase.ts and
// payai.ts: the addresses not marked deprecated), read in 2026; a
// facilitator that adds signers or fee payers is known by the new ones
// once they are added here. A settlement sent by any other address is the
// seller's own (sent by one of the host's payTo addresses), the payer's (a
// plain transfer), or other.
func KnownFacilitators() map[string]string {
	return map[string]string{
		// Coinbase (CDP facilitator), Base.
		"0x8f5cb67b49555e614892b7233cfddebfb746e531": "Coinbase",
		"0x67b9ce703d9ce658d7c4ac3c289cea112fe662af": "Coinbase",
		"0x68a96f41ff1e9f2e7b591a931a4ad224e7c07863": "Coinbase",
		"0x97acce27d5069544480bde0f04d9f47d7422a016": "Coinbase",
		"0xa32ccda98ba7529705a059bd2d213da8de10d101": "Coinbase",
		// Coinbase, Solana fee payers.
		"BENrLoUbndxoNMUS5JXApGMtNykLjFXXixMtpDwDR9SP": "Coinbase",
		"BFK9TLC3edb13K6v4YyH3DwPb5DSUpkWvb7XnqCL9b4F": "Coinbase",
		"D6ZhtNQ5nT9ZnTHUbqXZsTx5MH2rPFiBBggX4hY1WePM": "Coinbase",
		"GVJJ7rdGiXr5xaYbRwRbjfaJL7fmwRygFi1H6aGqDveb": "Coinbase",
		"Hc3sdEAsCGQcpgfivywog9uwtk8gUBUZgsxdME1EJy88": "Coinbase",
		// PayAI, Base.
		"0xc6699d2aada6c36dfea5c248dd70f9cb0235cb63": "PayAI",
		"0xb2bd29925cbbcea7628279c91945ca5b98bf371b": "PayAI",
		"0x25659315106580ce2a787ceec5efb2d347b539c9": "PayAI",
		"0xb8f41cb13b1f213da1e94e1b742ec1323235c48f": "PayAI",
		"0xe575fa51af90957d66fab6d63355f1ed021b887b": "PayAI",
		// PayAI, Solana fee payers.
		"2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4": "PayAI",
		"CjNFTjvBhbJJd2B5ePPMHRLx1ELZpa8dwQgGL727eKww": "PayAI",
		"8B5UKhwfAyFW67h58cBkQj1Ur6QXRgwWJJcQp8ZBsDPa": "PayAI",
	}
}
