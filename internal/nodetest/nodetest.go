// Package nodetest runs, from Go benchmarks, the Node.js scripts that time
// a reference implementation (V8's RegExp, the npm csv-parse) on the same
// input, so that the two are measured in the same run; finds compat/,
// where the Node.js scripts and their npm packages are; and ends the test
// nodes (anvil, LiteSVM) that the harnesses start.
package nodetest

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// Root returns the module's directory (the one holding go.mod), found from
// the working directory up.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Compat returns the module's compat directory: the Node.js scripts of the
// tests, and the npm packages `go tool task npm` installs there.
func Compat() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "compat"), nil
}

// Bench runs node script with args and then b.N: the script does its work
// b.N times and prints {"ns": <nanoseconds a pass took>, "count": <what the
// last pass found>}. Bench reports ns as the benchmark's ns/op (the
// script's own timing: process start and reading its input are not in it)
// and returns both, count for the caller to check that the work was done.
func Bench(b *testing.B, script string, args ...string) (ns float64, count int) {
	b.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		b.Fatal("node (v20+) is needed beside the benchmark: go tool task npm")
	}
	out, err := exec.Command(node, append(append([]string{script}, args...), strconv.Itoa(b.N))...).Output()
	if err != nil {
		b.Fatalf("node %s (run: go tool task npm): %v", script, err)
	}
	var got struct {
		NS    float64 `json:"ns"`
		Count int     `json:"count"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		b.Fatalf("node %s: %s (%v)", script, out, err)
	}
	b.ReportMetric(got.NS, "ns/op")
	return got.NS, got.Count
}
