package wasm_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNode runs every vector file through rl.wasm under Node.js
// (node/run-vectors.mjs, which hosts the module from ABI.md alone). A missing
// node fails the test: the Node.js host is part of the conformance suite
// (the quick tier, go test -short, needs no Node.js and skips it).
func TestNode(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Node.js: not run in the quick tier (go test -short)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node (Node.js ≥ 20) is required for the Node.js conformance run: %v", err)
	}
	out, err := exec.Command(node, "--no-warnings", "node/run-vectors.mjs", "rl.wasm", "../tests/vectors").CombinedOutput()
	t.Logf("%s", strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("node/run-vectors.mjs: %v", err)
	}
}
