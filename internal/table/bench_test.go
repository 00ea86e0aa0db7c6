package table

import (
	"testing"

	"github.com/x402d/x402d/internal/table/tabletest"
)

func BenchmarkParseCSV(b *testing.B) {
	text := tabletest.SampleCSV(10 << 20)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(text, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeCSV(b *testing.B) {
	text := tabletest.SampleCSV(10 << 20)
	tab, err := Parse(text, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		_ = Encode(tab.Header, tab.Rows, '\t')
	}
}
