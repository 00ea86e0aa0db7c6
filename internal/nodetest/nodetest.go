// Package nodetest runs, from Go benchmarks, the Node.js scripts that time
// a reference implementation (V8's RegExp, the npm csv-parse) on the same
// input, so that the two are measured in the same run.
package nodetest

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"testing"
)

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
