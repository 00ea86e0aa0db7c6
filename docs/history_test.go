// Package docs_test checks the repository's prose: the Markdown files and
// the Go and shell comments describe the software as it is, not how it was
// written (git keeps that history).
package docs_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// diary matches text that narrates the project's history: numbered periods
// of work (a session, sprint or iteration followed by its number) and test
// machines named by a capital letter.
var diary = regexp.MustCompile(`(?i:\bsessions? [0-9]+|\bsprint [0-9]+|\biteration [0-9]+)|\b[Mm]achines? [A-H](?:[\s,.;:)]|$)`)

// session and machine are the words of the pattern's examples.
const session, machine = "session", "machine"

func TestDiaryPattern(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		text string
		want bool
	}{
		// The cases are built from parts, so that this file does not
		// itself contain what it forbids.
		{"measured in " + session + " 12 on a fast machine", true},
		{"Session" + "s 1–5 used " + machine + " A", true},
		{session + " 11's build", true},
		{"on " + machine + " H the goal held", true},
		{"Machine" + " B (Zen 5)", true},
		{"sprint 3 added the index", true},
		{"a River session is not a period of work", false},
		{"the machine class: 2 cores", false},
		{"SESSION_TTL is 12 hours", false},
		{"machine-readable output", false},
		{"a state " + machine + " A→B", false},
	} {
		if got := diary.MatchString(tt.text); got != tt.want {
			t.Errorf("%q: matched %v, want %v", tt.text, got, tt.want)
		}
	}
}

// TestNoDiary fails when a Markdown file, or a comment of a Go or shell
// file, of the repository names a period of work or a machine by letter.
func TestNoDiary(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(path)
		if ext != ".md" && ext != ".go" && ext != ".sh" {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			prose := line
			if ext != ".md" {
				// Only comments are prose in code.
				i := strings.Index(line, "//")
				if ext == ".sh" {
					i = strings.Index(line, "#")
				}
				if i < 0 {
					continue
				}
				prose = line[i:]
			}
			if m := diary.FindString(prose); m != "" {
				rel, _ := filepath.Rel(root, path)
				found = append(found, fmt.Sprintf("%s:%d: %q", rel, n, m))
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Errorf("the repository narrates its history (describe the software as it is; git keeps the history):\n%s", strings.Join(found, "\n"))
	}
}
