package csvjson

import (
	"context"
	"encoding/json"
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

// BenchmarkCSVToJSON converts about 10 MB of CSV to JSON: Work alone, and
// Work plus encoding the result object as the worker stores it.
func BenchmarkCSVToJSON(b *testing.B) {
	in := Input{Data: sampleCSV(10 << 20), To: ToJSON}
	ctx := context.Background()
	b.Run("Work", func(b *testing.B) {
		b.SetBytes(int64(len(in.Data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Work(ctx, in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("WorkAndEncode", func(b *testing.B) {
		b.SetBytes(int64(len(in.Data)))
		b.ReportAllocs()
		for b.Loop() {
			res, err := Work(ctx, in)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(res); err != nil {
				b.Fatal(err)
			}
		}
	})
}
