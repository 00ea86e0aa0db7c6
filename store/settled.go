package store

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/x402d/x402d/x402"
)

// settledOneString is settlement.confirmed's data in one string, its block
// beside: "<network> <transaction> <gas used> <gas price in wei> <batch>",
// the transaction's 32 bytes in unpadded base64url (SettlementDone.MarshalJSON).
type settledOneString struct {
	S     string             `json:"s"`
	Block *x402.SettledBlock `json:"block,omitempty"`
}

// settledString returns d as settledOneString's string, and whether d has
// that form: a settlement that succeeded with an EVM transaction (32 bytes
// of 0x-prefixed lower-case hex) and a cost, on a network and at a gas
// price that hold no space (a CAIP-2 name, a canonical decimal), written
// in ledger form 2 (not Form1).
func settledString(d *SettlementDone) (string, bool) {
	r := &d.Response
	if !r.Success || r.ErrorReason != "" || r.Amount != "" || len(r.Extra) > 0 || d.Cost == nil || d.Form1 || r.Network == "" || strings.ContainsRune(r.Network, ' ') || d.Cost.Batch < 0 {
		return "", false
	}
	tx, ok := x402.HashBytes(r.Transaction)
	if !ok {
		return "", false
	}
	if p := d.Cost.GasPriceWei; p == "" || strings.TrimLeft(p, "0123456789") != "" || (len(p) > 1 && p[0] == '0') {
		return "", false
	}
	return fmt.Sprintf("%s %s %d %s %d", r.Network, base64.RawURLEncoding.EncodeToString(tx), d.Cost.GasUsed, d.Cost.GasPriceWei, d.Cost.Batch), true
}

// parseSettled decodes settledString's string s into d (with block).
func parseSettled(s string, block *x402.SettledBlock, d *SettlementDone) error {
	f := strings.Split(s, " ")
	if len(f) != 5 {
		return fmt.Errorf("decode settlement %q: %d fields, want 5", s, len(f))
	}
	tx, err := base64.RawURLEncoding.DecodeString(f[1])
	if err != nil {
		return fmt.Errorf("decode settlement %q: transaction: %w", s, err)
	}
	gas, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return fmt.Errorf("decode settlement %q: gas: %w", s, err)
	}
	batch, err := strconv.Atoi(f[4])
	if err != nil {
		return fmt.Errorf("decode settlement %q: batch: %w", s, err)
	}
	*d = SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x" + hex.EncodeToString(tx), Network: f[0]},
		Cost: &x402.SettleCost{GasUsed: gas, GasPriceWei: f[3], Batch: batch}, Block: block}
	return nil
}
