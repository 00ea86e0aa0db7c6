package table

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/x402d/x402d/internal/nodetest"
	"github.com/x402d/x402d/internal/table/tabletest"
)

// BenchmarkParseCSVReference times the npm package csv-parse, the reference the
// differential test checks the parser against, over the same text as
// BenchmarkParseCSV (testdata/bench_csvparse.mjs, in node: its time a
// parse, process start not included, as ns/op).
func BenchmarkParseCSVReference(b *testing.B) {
	root, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	text := tabletest.SampleCSV(10 << 20)
	file := filepath.Join(b.TempDir(), "sample.csv")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	ns, records := nodetest.Bench(b, filepath.Join(root, "internal", "table", "testdata", "bench_csvparse.mjs"), root, file)
	if records == 0 {
		b.Fatal("csv-parse read no record")
	}
	b.ReportMetric(float64(len(text))/ns*1e9/1e6, "MB/s")
}

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
