package csvjson

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/x402d/x402d/internal/table/tabletest"
)

// BenchmarkCSVToJSON converts about 10 MB of CSV to JSON: Work alone, and
// Work plus encoding the result object as the worker stores it.
func BenchmarkCSVToJSON(b *testing.B) {
	in := Input{Data: tabletest.SampleCSV(10 << 20), To: ToJSON}
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
