package codereview

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzStatic checks that the static rules never panic and keep every
// finding's lines inside the code, whatever the text.
func FuzzStatic(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "corpus", "*", "*"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), uint8(len(p)))
	}
	f.Fuzz(func(t *testing.T, code string, pick uint8) {
		lang := staticLanguages[int(pick)%len(staticLanguages)]
		lines := len(splitLines(code))
		for _, fd := range staticFindings(code, lang, nil) {
			if fd.Line < 1 || fd.EndLine < fd.Line || fd.Line > lines+1 {
				t.Fatalf("%s finding %+v outside 1..%d", lang, fd, lines)
			}
		}
	})
}
