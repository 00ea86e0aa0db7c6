package store

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/x402"
)

// TestSettlementDoneJSON: settlement.confirmed and settlement.failed keep
// their response without the payer (the call's payment states it) and
// without a success that is true, and read back what the events written
// before kept whole.
func TestSettlementDoneJSON(t *testing.T) {
	t.Parallel()
	cost := &x402.SettleCost{GasUsed: 45031, GasPriceWei: "9", Batch: 5}
	block := &x402.SettledBlock{Number: 10, Hash: "0xb10"}
	for _, tc := range []struct {
		name string
		done SettlementDone
		// data is the event's data; back is what it reads as.
		data string
		back SettlementDone
	}{
		{"confirmed", SettlementDone{Response: x402.SettleResponse{Success: true, Payer: "0xabc", Transaction: "0x1", Network: "eip155:8453"}, Cost: cost, Block: block},
			`{"response":{"transaction":"0x1","network":"eip155:8453"},"cost":"45031 9 5","block":{"number":10,"hash":"0xb10"}}`,
			SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x1", Network: "eip155:8453"}, Cost: cost, Block: block}},
		{"failed", SettlementDone{Response: x402.SettleResponse{ErrorReason: "insufficient_funds", Payer: "0xabc", Network: "eip155:8453"}},
			`{"response":{"success":false,"errorReason":"insufficient_funds","transaction":"","network":"eip155:8453"}}`,
			SettlementDone{Response: x402.SettleResponse{ErrorReason: "insufficient_funds", Network: "eip155:8453"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.done)
			require.NoError(t, err)
			require.JSONEq(t, tc.data, string(raw))
			var back SettlementDone
			require.NoError(t, json.Unmarshal(raw, &back))
			require.Equal(t, tc.back, back)
		})
	}
	// The whole response and the cost as an object, as written before.
	var old SettlementDone
	require.NoError(t, json.Unmarshal([]byte(`{"response":{"success":true,"transaction":"0x1","network":"n"},"cost":{"gas_used":45031,"gas_price_wei":"9","batch":5}}`), &old))
	require.Equal(t, SettlementDone{Response: x402.SettleResponse{Success: true, Transaction: "0x1", Network: "n"}, Cost: cost}, old)
	require.NoError(t, json.Unmarshal([]byte(`{"response":{"payer":"0xabc","network":"eip155:8453","success":true,"transaction":"0x1"}}`), &old))
	require.Equal(t, SettlementDone{Response: x402.SettleResponse{Success: true, Payer: "0xabc", Transaction: "0x1", Network: "eip155:8453"}}, old)
	require.NoError(t, json.Unmarshal([]byte(`{"response":{"payer":"0xabc","network":"eip155:8453","success":false,"errorReason":"x","transaction":""}}`), &old))
	require.Equal(t, SettlementDone{Response: x402.SettleResponse{Payer: "0xabc", ErrorReason: "x", Network: "eip155:8453"}}, old)
}
