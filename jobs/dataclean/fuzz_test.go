package dataclean

import (
	"testing"

	"github.com/x402d/x402d/internal/table"
)

// FuzzClean checks that cleaning never panics and that the cleaned CSV
// reads back as the table the quality checks describe.
func FuzzClean(f *testing.F) {
	for _, s := range []string{messy, exampleData, "a,b\n1\n1,2,3\n", `[{"a":" x "},{}]`, "x\ty\n\"q\r\n\"\t2\r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		tb, err := parse(data, 1000)
		if err != nil {
			return
		}
		c := clean(tb, data)
		if c.before.Rows-c.before.EmptyRows-c.before.DuplicateRows != c.after.Rows {
			t.Fatalf("before %+v, after %+v", c.before, c.after)
		}
		back, err := table.ParseCSV(c.csv, &table.Options{Delimiter: ','})
		if err != nil {
			t.Fatalf("cleaned CSV %q does not read back: %v", c.csv, err)
		}
		if len(back.Rows) != c.after.Rows || len(back.Header) != c.after.Columns {
			t.Fatalf("cleaned CSV %q reads back as %d rows of %d columns, want %d of %d", c.csv, len(back.Rows), len(back.Header), c.after.Rows, c.after.Columns)
		}
		for i, row := range back.Rows {
			for j, v := range row {
				if v.Text != c.rows[i][j].Text {
					t.Fatalf("row %d column %d: %q read back as %q", i, j, c.rows[i][j].Text, v.Text)
				}
			}
		}
	})
}
