package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeMaxLines is how long the README may grow: what the service is, how
// to run it, what it sells and how to pay, and where the rest is.
const readmeMaxLines = 200

// TestReadmeShort fails when the README outgrows readmeMaxLines: design
// belongs in package docs, settings in configuration.md, operations in
// operating.md, figures in performance.md.
func TestReadmeShort(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, at most %d: move the detail where it belongs", n, readmeMaxLines)
	}
}

// link is a Markdown link or image to a file of the repository.
var link = regexp.MustCompile(`\]\(([^)#:\s]+)(?:#[^)]*)?\)`)

// TestDocsLinks fails when the README or a page of docs/ links to a file
// that does not exist.
func TestDocsLinks(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join("..", "README.md"))
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := filepath.Join(filepath.Dir(page), m[1])
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s links to %s, which does not exist", page, m[1])
			}
		}
	}
}
