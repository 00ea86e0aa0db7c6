package store

import (
	"encoding/hex"
	"encoding/json"

	"github.com/x402d/x402d/x402"
)

// EventSettlementMined is appended to a network's stream (ChainStream) with
// the settlement.confirmed events of the calls a transaction settled, in
// the same Append and before them: the block the transaction was mined in,
// once for all of its calls (a batch carries dozens), which their
// settlement.confirmed events then leave out. Each of those names the
// transaction (its response's), which links the call to it. Several
// transactions of the database may each record one for the same
// settlement transaction, each with the calls it records.
const EventSettlementMined = "settlement.mined"

// SettlementMined is the data of settlement.mined, written with its hashes
// of 32 bytes as their bytes (MarshalJSON).
type SettlementMined struct {
	// Transaction is the settlement transaction's hash.
	Transaction string
	// Block is the block it was mined in.
	Block x402.SettledBlock
	// Calls are the calls it settled whose settlement.confirmed the same
	// Append records. The event does not keep them (each call's event
	// names its transaction): its projection adds them to the
	// transaction's row of settlement_watch at once, as the confirmed
	// events after it each would add its own.
	Calls []string `json:"-"`
}

// minedJSON is the JSON form of SettlementMined: the transaction's hash and
// the block's, when 0x-prefixed lower-case hex of 32 bytes, as their bytes
// (44 characters of base64 against 66; Transaction and BlockHash are then
// empty), and the block's number.
type minedJSON struct {
	Tx          []byte `json:"tx,omitempty"`
	Transaction string `json:"transaction,omitempty"`
	Block       uint64 `json:"block"`
	Hash        []byte `json:"hash,omitempty"`
	BlockHash   string `json:"block_hash,omitempty"`
}

// validJSON marks SettlementMined's MarshalJSON as json.Marshal's (encodeData).
func (SettlementMined) validJSON() {}

// MarshalJSON encodes the transaction and the block (minedJSON).
func (m SettlementMined) MarshalJSON() ([]byte, error) {
	v := minedJSON{Transaction: m.Transaction, Block: m.Block.Number, BlockHash: m.Block.Hash}
	if tx, ok := x402.HashBytes(m.Transaction); ok {
		v.Tx, v.Transaction = tx, ""
	}
	if hash, ok := x402.HashBytes(m.Block.Hash); ok {
		v.Hash, v.BlockHash = hash, ""
	}
	return json.Marshal(v)
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (m *SettlementMined) UnmarshalJSON(b []byte) error {
	var v minedJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*m = SettlementMined{Transaction: v.Transaction, Block: x402.SettledBlock{Number: v.Block, Hash: v.BlockHash}}
	if v.Tx != nil {
		m.Transaction = "0x" + hex.EncodeToString(v.Tx)
	}
	if v.Hash != nil {
		m.Block.Hash = "0x" + hex.EncodeToString(v.Hash)
	}
	return nil
}
