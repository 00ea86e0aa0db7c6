package evm

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
)

// relayChain is the relayer on one chain: its parts, each owning its state
// and its lock, in their own files.
//
//   - nonces (nonces.go): the chain's count of the relayer's mined
//     transactions, and this process's transactions in flight; allocation
//     and the records of signed transactions through the NonceStore
//     (noncestore.go).
//   - sender (sender.go): signs, sends and classifies the node's answer
//     (transmit, the one place a transaction is sent); reprices, replaces
//     and fills.
//   - keeper (keeper.go): its own goroutine, between Relayer.Start and
//     Stop: gives the node again what it lacks, so that no nonce stays a
//     gap.
//   - receipts (receipts.go): the settlements waiting for receipts, the
//     scans of new blocks that bring them.
//   - fees (fees.go): the fees of a send, the gas learnt for transfers, the
//     block gas limit, the wait for the base fee to fall under MaxFee.
//   - finality (finality.go): when a settlement is final, and the nonce at
//     the newest final block.
//   - batch (batch.go): the batcher, when the chain has Multicall3.
//
// The parts are built in that order (finality, nonces, fees, receipts,
// sender, keeper, batch), each given the parts built before it: none
// points back at a later one (receipts reach the keeper through the
// passRequests both are given). Each owns its lock; no part holds its lock
// while taking another's.
type relayChain struct {
	network string
	backend Backend

	finality *finality
	nonces   *nonces
	fees     *fees
	receipts *receipts
	sender   *sender
	keeper   *keeper
	// batch, when the chain has a Multicall3-compatible contract, sends
	// the transfers of concurrent settlements in shared transactions.
	batch *batcher
	// codes answers whether payers have code, once per block.
	codes *payerCodes
}

// newRelayChain returns the relayer's parts on network, reached through
// backend, with cfg's settings (defaults applied).
func newRelayChain(cfg *RelayerConfig, address common.Address, network string, id *big.Int, backend Backend, policy FinalityPolicy) *relayChain {
	c := &relayChain{network: network, backend: backend, finality: &finality{policy: policy}}
	c.nonces = &nonces{clock: cfg.Clock, network: network, address: address, backend: backend, store: cfg.Nonces, owner: cfg.Owner,
		finality: c.finality, logger: cfg.Logger, forgetEvery: cfg.KeepEvery, own: map[uint64]*ownTx{}}
	c.fees = newFees(network, backend, cfg)
	passes := newPassRequests()
	c.receipts = newReceipts(backend, c.nonces, passes, cfg)
	c.codes = &payerCodes{backend: backend, heads: c.receipts}
	c.sender = &sender{network: network, address: address, key: cfg.Key, signer: types.LatestSignerForChainID(id), backend: backend,
		nonces: c.nonces, fees: c.fees, receipts: c.receipts, logger: cfg.Logger}
	c.keeper = &keeper{clock: cfg.Clock, network: network, address: address, owner: cfg.Owner, backend: backend, nonces: c.nonces, sender: c.sender,
		logger: cfg.Logger, every: cfg.KeepEvery, idle: cfg.KeepIdle, replaceAfter: cfg.ReplaceAfter, orphanAfter: cfg.OrphanAfter,
		passes: passes}
	if multicall, ok := cfg.Multicall[network]; ok {
		c.batch = &batcher{multicall: multicall, maxBatch: cfg.MaxBatch, linger: cfg.BatchLinger, full: make(chan struct{}, 1), mined: make(chan struct{}, 1)}
	}
	return c
}
