package channel

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWireForms: the spellings of words, addresses and decimal strings the
// payloads' fields take and refuse.
func TestWireForms(t *testing.T) {
	t.Parallel()
	word, addr := "0x"+strings.Repeat("aB", 32), "0x"+strings.Repeat("0F", 20)
	for _, tc := range []struct {
		s                     string
		word, address, digits bool
	}{
		{s: word, word: true},
		{s: addr, address: true},
		{s: "0x" + strings.Repeat("a", 63)},
		{s: word + "0"},
		{s: word + "\n"},
		{s: "0X" + word[2:]},
		{s: "0x" + strings.Repeat("g", 64)},
		{s: " " + addr[1:]},
		{s: "0x"},
		{s: ""},
		{s: "0", digits: true},
		{s: "0123456789", digits: true},
		{s: "-1"},
		{s: "1.5"},
		{s: "1\n"},
		{s: "+1"},
	} {
		require.Equal(t, tc.word, isWord(tc.s), "word %q", tc.s)
		require.Equal(t, tc.address, isAddress(tc.s), "address %q", tc.s)
		require.Equal(t, tc.digits, isDigits(tc.s), "digits %q", tc.s)
	}
}
