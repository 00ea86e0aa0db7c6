package x402

import (
	"encoding/json"
	"strings"
	"time"
)

// Network is one network the service lists, with the USDC it is paid in.
type Network struct {
	// ID is the CAIP-2 identifier ("eip155:8453").
	ID string
	// Asset is the USDC token contract (EVM, EIP-55 checksummed) or mint
	// (Solana, base58). The ledger's packed payments leave out an asset
	// equal to it and restore it from here (packPayment), as they do
	// Name and Version.
	Asset string
	// Decimals of the asset: 6 for USDC everywhere.
	Decimals int
	// Name and Version are the token's EIP-712 domain (EVM only), sent as
	// Requirements.extra (AssetExtra). The ledger's packed payments leave
	// out an extra equal to AssetExtra and restore it from here
	// (packPayment): a change to any of Asset, Name and Version must come
	// with a new packed form that reads the payments packed before with
	// the values they were packed under.
	Name, Version string
	// Finality is when a settlement on the network counts as final by
	// default (EVM only; FINALITY_<CHAIN> overrides it): "safe" or
	// "finalized" (the node's block of that tag has reached the
	// settlement's), or "depth:N" (N blocks mined on top of it). Base and
	// the other rollups take "safe": their blocks derived from data posted
	// on Ethereum, which a sequencer cannot reorganise; chains with
	// finality of their own (Polygon's milestones, Avalanche, Sei) take
	// "finalized".
	Finality string
}

// AssetExtra returns the Requirements.extra that the network's option
// states, the asset's EIP-712 domain as JSON ({"name":...,"version":...}),
// and whether it has one (EVM networks; Solana's extra is the seller's).
func (n Network) AssetExtra() (json.RawMessage, bool) {
	if n.Name == "" && n.Version == "" {
		return nil, false
	}
	// Two strings: json.Marshal cannot fail.
	extra, _ := json.Marshal(EVMExtra{Name: n.Name, Version: n.Version})
	return extra, true
}

// Namespace returns the CAIP-2 namespace of the network ("eip155",
// "solana").
func (n Network) Namespace() string {
	ns, _, _ := strings.Cut(n.ID, ":")
	return ns
}

// SolanaMainnet is the CAIP-2 identifier of Solana mainnet.
const SolanaMainnet = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"

// The life of a Solana payment: its transaction names a recent blockhash,
// and lands only while the chain's block height is at most that
// blockhash's lastValidBlockHeight, SolanaBlockhashBlocks blocks after the
// block that made it. A block takes at least SolanaSlotTime (skipped slots
// make none), so the blocks left are a lower bound of the time left.
const (
	SolanaBlockhashBlocks = 150
	SolanaSlotTime        = 400 * time.Millisecond
)

// SolanaMaxTimeoutSeconds is the payment window the Solana option offers
// (maxTimeoutSeconds): the life of a blockhash fetched as the client pays,
// 150 blocks of 400 ms.
const SolanaMaxTimeoutSeconds = int(SolanaBlockhashBlocks * SolanaSlotTime / time.Second)

// Networks returns the seven networks of the specification (spec 2.1),
// primary first: Base, Arbitrum One, Polygon, Avalanche C-Chain, Sei, X
// Layer, Solana mainnet.
//
// USDC contracts and EIP-712 domains follow the official x402 tables
// (x402.md §4): the v2 table for Base, Arbitrum and Polygon, the legacy one
// for Avalanche ("USD Coin") and Sei ("USDC"), whose version "2" the legacy
// package hard-codes. X Layer is in neither, and OKX's own x402 packages
// default it to USDT0, not USDC: its USDC is 0x74b7…6d22, which token lists
// name "USD Coin" with 6 decimals, and whose domain version "2" is
// FiatToken's (third-party x402 tables list the same domain); it is not
// confirmed from the chain here. At start-up each configured EVM chain is
// checked against this table (evm.CheckChain: its chain id, its token's
// name(), version() and decimals()), and a difference refuses to start.
// Solana's asset is the USDC mint.
func Networks() []Network {
	t := networkTable()
	return t[:]
}

// networkTable is the table Networks returns, as an array: a lookup
// (NetworkByID, on every packed payment written or read) ranges over it on
// the stack, with no slice made.
func networkTable() [7]Network {
	return [7]Network{
		{ID: "eip155:8453", Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", Decimals: 6, Name: "USD Coin", Version: "2", Finality: "safe"},
		{ID: "eip155:42161", Asset: "0xaf88d065e77c8cC2239327C5EDb3A432268e5831", Decimals: 6, Name: "USD Coin", Version: "2", Finality: "safe"},
		{ID: "eip155:137", Asset: "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359", Decimals: 6, Name: "USD Coin", Version: "2", Finality: "finalized"},
		{ID: "eip155:43114", Asset: "0xB97EF9Ef8734C71904D8002F8b6Bc66Dd9c48a6E", Decimals: 6, Name: "USD Coin", Version: "2", Finality: "finalized"},
		{ID: "eip155:1329", Asset: "0xe15fC38F6D8c56aF07bbCBe3BAf5708A2Bf42392", Decimals: 6, Name: "USDC", Version: "2", Finality: "finalized"},
		{ID: "eip155:196", Asset: "0x74b7F16337b8972027F6196A17a631aC6dE26d22", Decimals: 6, Name: "USD Coin", Version: "2", Finality: "safe"},
		{ID: SolanaMainnet, Asset: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", Decimals: 6},
	}
}

// NetworkIDs returns the CAIP-2 identifiers of Networks, in order: the
// "networks" of every quote and discovery document.
func NetworkIDs() []string {
	ns := Networks()
	ids := make([]string, len(ns))
	for i, n := range ns {
		ids[i] = n.ID
	}
	return ids
}

// NetworkByID returns the listed network id.
func NetworkByID(id string) (Network, bool) {
	for _, n := range networkTable() {
		if n.ID == id {
			return n, true
		}
	}
	return Network{}, false
}

// legacyNetworks maps x402 v1 network names to CAIP-2 (x402.md §9), plus
// the names third parties use for the two listed chains that have no
// official v1 name (Arbitrum One, X Layer).
var legacyNetworks = map[string]string{
	"base": "eip155:8453", "base-sepolia": "eip155:84532", "polygon": "eip155:137",
	"polygon-amoy": "eip155:80002", "avalanche": "eip155:43114", "avalanche-fuji": "eip155:43113",
	"sei": "eip155:1329", "sei-testnet": "eip155:1328", "ethereum": "eip155:1", "sepolia": "eip155:11155111",
	"abstract": "eip155:2741", "abstract-testnet": "eip155:11124", "iotex": "eip155:4689", "peaq": "eip155:3338",
	"story": "eip155:1514", "educhain": "eip155:41923", "skale-base-sepolia": "eip155:324705682",
	"megaeth": "eip155:4326", "monad": "eip155:143", "stable": "eip155:988", "stable-testnet": "eip155:2201",
	"arbitrum": "eip155:42161", "arbitrum-one": "eip155:42161", "xlayer": "eip155:196", "x-layer": "eip155:196",
	"solana": SolanaMainnet, "solana-devnet": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
	"solana-testnet": "solana:4uhcVJyU9pJkvQyS88uRDiswHXSCkY3z",
}

// NormalizeNetwork returns the CAIP-2 form of a network name, for the index
// crawler: a CAIP-2 identifier passes through with its namespace
// lower-cased (the reference is kept as is: Solana's is case-sensitive
// base58), an x402 v1 name ("base", "solana-devnet") is mapped, case and
// surrounding spaces ignored. ok is false for anything else.
func NormalizeNetwork(name string) (id string, ok bool) {
	name = strings.TrimSpace(name)
	if ns, ref, found := strings.Cut(name, ":"); found {
		if !validCAIP2(ns, ref) {
			return "", false
		}
		return strings.ToLower(ns) + ":" + ref, true
	}
	id, ok = legacyNetworks[strings.ToLower(name)]
	return id, ok
}

// validCAIP2 reports whether namespace and reference have the CAIP-2 forms
// [-a-z0-9]{3,8} (any case accepted) and [-_a-zA-Z0-9]{1,32}, the reference
// allowed up to 64 characters because some listings use whole hashes.
func validCAIP2(namespace, reference string) bool {
	if len(namespace) < 3 || len(namespace) > 8 || len(reference) < 1 || len(reference) > 64 {
		return false
	}
	for _, r := range namespace {
		if !(r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	for _, r := range reference {
		if !(r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
