package svm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/nodetest"
	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/svm"
)

// TestVerifier_ComputeBudget checks the compute budget instructions of a
// payment, the compute unit price cap among them, against the table and
// against the official facilitator (@x402/svm's ExactSvmScheme, run by
// testdata/compute_budget_oracle.mjs on the same instruction data): a
// payment the official facilitator refuses at this step is refused with
// the same reason, and one it passes is not refused for its compute budget.
func TestVerifier_ComputeBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	limit := func(units uint32) []byte { return binary.LittleEndian.AppendUint32([]byte{2}, units) }
	price := func(microLamports uint64) []byte { return binary.LittleEndian.AppendUint64([]byte{3}, microLamports) }
	testCases := []struct {
		name         string
		limit, price []byte
		// wantReason is the refusal, "" for a payment accepted.
		wantReason string
	}{
		{name: "ok, price 0", limit: limit(20_000), price: price(0)},
		{name: "ok, price 1", limit: limit(20_000), price: price(1)},
		{name: "ok, price at the cap", limit: limit(20_000), price: price(svm.MaxComputeUnitPrice)},
		{name: "ok, data past the price is ignored", limit: limit(20_000), price: append(price(1), 0xff)},
		{name: "ok, data past the limit is ignored", limit: append(limit(20_000), 0xff), price: price(1)},
		{name: "nok, price one over the cap", limit: limit(20_000), price: price(svm.MaxComputeUnitPrice + 1), wantReason: svm.ReasonComputePriceTooHigh},
		{name: "nok, price in the high word", limit: limit(20_000), price: price(1 << 32), wantReason: svm.ReasonComputePriceTooHigh},
		{name: "nok, highest price", limit: limit(20_000), price: price(math.MaxUint64), wantReason: svm.ReasonComputePriceTooHigh},
		{name: "nok, price over the cap with data past it", limit: limit(20_000), price: append(price(svm.MaxComputeUnitPrice+1), 0), wantReason: svm.ReasonComputePriceTooHigh},
		{name: "nok, price of 7 bytes", limit: limit(20_000), price: price(1)[:8], wantReason: svm.ReasonComputePrice},
		{name: "nok, price without its integer", limit: limit(20_000), price: []byte{3}, wantReason: svm.ReasonComputePrice},
		{name: "nok, price without data", limit: limit(20_000), price: []byte{}, wantReason: svm.ReasonComputePrice},
		{name: "nok, heap frame request where the price goes", limit: limit(20_000), price: binary.LittleEndian.AppendUint32([]byte{1}, 32*1024), wantReason: svm.ReasonComputePrice},
		{name: "nok, limit of 3 bytes", limit: limit(20_000)[:4], price: price(1), wantReason: svm.ReasonComputeLimit},
		{name: "nok, limit without data", limit: []byte{}, price: price(1), wantReason: svm.ReasonComputeLimit},
		{name: "nok, a limit of 0 units fails in the runtime", limit: limit(0), price: price(1), wantReason: svm.ReasonSimulationFailed},
	}
	official := computeBudgetOracle(t, func(yield func(limit, price []byte) bool) {
		for _, tc := range testCases {
			if !yield(tc.limit, tc.price) {
				return
			}
		}
	})
	require.Len(t, official, len(testCases))
	for i, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			req := f.requirement()
			p := f.parts(t, req, svm.TokenProgram)
			p.ixs[0] = solana.NewInstruction(svm.ComputeBudgetProgram, nil, tc.limit)
			p.ixs[1] = solana.NewInstruction(svm.ComputeBudgetProgram, nil, tc.price)
			_, b64 := p.build(t)

			_, err := f.verifier.Verify(ctx, req, paymentPayload(req, b64))

			got := ""
			if err != nil {
				var refusal *x402.Refusal
				require.ErrorAs(t, err, &refusal)
				got = refusal.Reason
			}
			require.Equal(t, tc.wantReason, got, "%v", err)
			switch tc.wantReason {
			case svm.ReasonComputeLimit, svm.ReasonComputePrice, svm.ReasonComputePriceTooHigh:
				require.Equal(t, tc.wantReason, official[i], "the official facilitator's reason")
			default:
				require.Empty(t, official[i], "the official facilitator passes the compute budget")
			}
		})
	}
}

// computeBudgetOracle returns, for each pair of compute limit and price
// instruction data, the reason the official facilitator refuses them with
// ("" when it passes them).
func computeBudgetOracle(t *testing.T, cases func(yield func(limit, price []byte) bool)) []string {
	t.Helper()
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for limit, price := range cases {
		require.NoError(t, enc.Encode(map[string]string{"limit": hex.EncodeToString(limit), "price": hex.EncodeToString(price)}))
	}
	var reasons []string
	require.NoError(t, json.Unmarshal(runOfficial(t, "compute_budget_oracle.mjs", in.Bytes()), &reasons))
	return reasons
}

// runOfficial runs testdata/script, a Node.js script calling the official
// x402 packages, with compat/ (where `go tool task npm` installs them) and
// args as its arguments and in on its standard input, and returns what it
// prints.
func runOfficial(t *testing.T, script string, in []byte, args ...string) []byte {
	t.Helper()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node (v20+) is needed for the comparison with the official facilitator; run: go tool task npm")
	compat, err := nodetest.Compat()
	require.NoError(t, err)
	path, err := filepath.Abs(filepath.Join("testdata", script))
	require.NoError(t, err)
	cmd := exec.Command(node, append([]string{path, compat}, args...)...)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node %s (run: go tool task npm): %s", script, stderr.String())
	return out
}
