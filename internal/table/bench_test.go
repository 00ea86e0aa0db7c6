package table

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/x402d/x402d/internal/table/tabletest"
)

// BenchmarkParseCSVReference times the npm package csv-parse, the reference the
// differential test checks the parser against, over the same text as
// BenchmarkParseCSV (testdata/bench_csvparse.mjs, in node: its time a
// parse, process start not included, as ns/op).
func BenchmarkParseCSVReference(b *testing.B) {
	node, err := exec.LookPath("node")
	if err != nil {
		b.Fatal("node (v20+) is needed beside the benchmark: go tool task npm")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	text := tabletest.SampleCSV(10 << 20)
	file := filepath.Join(b.TempDir(), "sample.csv")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command(node, filepath.Join(root, "internal", "table", "testdata", "bench_csvparse.mjs"), root, file, strconv.Itoa(b.N)).Output()
	if err != nil {
		b.Fatalf("node bench_csvparse.mjs (run: go tool task npm): %v", err)
	}
	var got struct {
		NS      float64 `json:"ns"`
		Records int     `json:"records"`
	}
	if err := json.Unmarshal(out, &got); err != nil || got.Records == 0 {
		b.Fatalf("node bench_csvparse.mjs: %s (%v)", out, err)
	}
	b.ReportMetric(got.NS, "ns/op")
	b.ReportMetric(float64(len(text))/got.NS*1e9/1e6, "MB/s")
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
