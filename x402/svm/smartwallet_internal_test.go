package svm

import (
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/mr-tron/base58"
	"github.com/stretchr/testify/require"
)

// TestInnerTransfers reads TransferChecked instructions from inner
// instructions in each form a node answers them in: parsed (jsonParsed, as
// simulateTransaction and getTransaction answer SPL Token's), partially
// decoded (another program's, or any with encoding json in some nodes) and
// compiled (indexes of the transaction's keys); other instructions are not
// transfers.
func TestInnerTransfers(t *testing.T) {
	t.Parallel()
	source, mint, dest, authority := solana.NewWallet().PublicKey(), solana.NewWallet().PublicKey(), solana.NewWallet().PublicKey(), solana.NewWallet().PublicKey()
	data := base58.Encode(append(binary.LittleEndian.AppendUint64([]byte{12}, 10_000), 6))
	keys := []solana.PublicKey{solana.NewWallet().PublicKey(), source, mint, dest, authority, Token2022Program}
	want := transfer{source: source, mint: mint, destination: dest, authority: authority, amount: 10_000, decimals: 6}
	testCases := []struct {
		name        string
		instruction string
		// program is the transfer's token program (zero: not a transfer).
		program solana.PublicKey
	}{
		{
			name: "ok, parsed",
			instruction: `{"program":"spl-token","programId":"` + TokenProgram.String() + `","stackHeight":2,"parsed":{"type":"transferChecked","info":{"source":"` + source.String() +
				`","mint":"` + mint.String() + `","destination":"` + dest.String() + `","authority":"` + authority.String() +
				`","tokenAmount":{"amount":"10000","decimals":6,"uiAmount":0.01,"uiAmountString":"0.01"}}}}`,
			program: TokenProgram,
		},
		{
			name: "ok, parsed with a multisig authority",
			instruction: `{"program":"spl-token","programId":"` + TokenProgram.String() + `","parsed":{"type":"transferChecked","info":{"source":"` + source.String() +
				`","mint":"` + mint.String() + `","destination":"` + dest.String() + `","multisigAuthority":"` + authority.String() +
				`","signers":["` + source.String() + `"],"tokenAmount":{"amount":"10000","decimals":6}}}}`,
			program: TokenProgram,
		},
		{
			name:        "ok, partially decoded",
			instruction: `{"programId":"` + Token2022Program.String() + `","accounts":["` + source.String() + `","` + mint.String() + `","` + dest.String() + `","` + authority.String() + `"],"data":"` + data + `","stackHeight":2}`,
			program:     Token2022Program,
		},
		{
			name:        "ok, compiled",
			instruction: `{"programIdIndex":5,"accounts":[1,2,3,4],"data":"` + data + `","stackHeight":2}`,
			program:     Token2022Program,
		},
		{
			name: "nok, a parsed transfer without its check",
			instruction: `{"program":"spl-token","programId":"` + TokenProgram.String() + `","parsed":{"type":"transfer","info":{"source":"` + source.String() +
				`","destination":"` + dest.String() + `","authority":"` + authority.String() + `","amount":"10000"}}}`,
		},
		{
			name: "nok, parsed by another program",
			instruction: `{"program":"spl-token","programId":"` + MemoProgram.String() + `","parsed":{"type":"transferChecked","info":{"source":"` + source.String() +
				`","mint":"` + mint.String() + `","destination":"` + dest.String() + `","authority":"` + authority.String() + `","tokenAmount":{"amount":"10000","decimals":6}}}}`,
		},
		{
			name:        "nok, partially decoded, another program",
			instruction: `{"programId":"` + MemoProgram.String() + `","accounts":["` + source.String() + `","` + mint.String() + `","` + dest.String() + `","` + authority.String() + `"],"data":"` + data + `"}`,
		},
		{name: "nok, compiled, index out of range", instruction: `{"programIdIndex":5,"accounts":[1,2,3,9],"data":"` + data + `"}`},
		{name: "nok, compiled, program index out of range", instruction: `{"programIdIndex":6,"accounts":[1,2,3,4],"data":"` + data + `"}`},
		{name: "nok, data not base58", instruction: `{"programIdIndex":5,"accounts":[1,2,3,4],"data":"0OIl"}`},
		{name: "nok, a CloseAccount", instruction: `{"programIdIndex":5,"accounts":[1,2,3],"data":"` + base58.Encode([]byte{9}) + `"}`},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			var groups []InnerInstructions
			require.NoError(t, json.Unmarshal([]byte(`[{"index":2,"instructions":[`+tc.instruction+`]}]`), &groups))

			got := innerTransfers(groups, keys)

			if tc.program.IsZero() {
				require.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			w := want
			w.program = tc.program
			require.Equal(t, w, *got[0])
		})
	}
}
