package table

import (
	"fmt"
	"strings"
	"testing"
)

// sampleCSV returns about size bytes of CSV with a mix of integers,
// numbers, booleans, plain and quoted text, and empty cells.
func sampleCSV(size int) string {
	var b strings.Builder
	b.Grow(size + 256)
	b.WriteString("id,name,price,in_stock,note,updated\n")
	for i := 0; b.Len() < size; i++ {
		note := "plain note"
		switch i % 4 {
		case 1:
			note = `"with, comma"`
		case 2:
			note = "\"multi\nline \"\"quoted\"\"\""
		case 3:
			note = ""
		}
		fmt.Fprintf(&b, "%d,Product %d,%d.%02d,%t,%s,2024-%02d-%02d\n", i, i%977, i%1000, i%100, i%3 == 0, note, i%12+1, i%28+1)
	}
	return b.String()
}

func BenchmarkParseCSV(b *testing.B) {
	text := sampleCSV(10 << 20)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(text, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeCSV(b *testing.B) {
	text := sampleCSV(10 << 20)
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
