package regex

import "testing"

// BenchmarkPrepare parses and compiles patterns for a text, as Validate
// (at admission) and Run (in the operation's job) each do: one that never
// looks behind a position, one that does (\b), and a sticky one.
func BenchmarkPrepare(b *testing.B) {
	for _, in := range []Input{
		{Pattern: "o+", Text: "one two four\nfoo boo"},
		{Pattern: `\bfo+`, Text: "one two four\nfoo boo", Flags: "g"},
		{Pattern: "o+", Text: "one two four\nfoo boo", Flags: "y"},
	} {
		b.Run(in.Pattern+"/"+in.Flags, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := prepare(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
