// Package tabletest makes CSV inputs for the tests and benchmarks of the
// table-reading operations.
package tabletest

import (
	"fmt"
	"strings"
)

// SampleCSV returns about size bytes of CSV with a mix of integers,
// numbers, booleans, plain and quoted text (commas, newlines, doubled
// quotes), and empty cells.
func SampleCSV(size int) string {
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
