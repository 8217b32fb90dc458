package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCurrent: the committed core/dispatch_gen.go is what the generator
// writes from core.go, so no algorithm lacks its cases.
func TestCurrent(t *testing.T) {
	dir := filepath.Join("..", "..")
	want, err := render(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, output))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("core/%s is stale: run go generate in core (go run ./internal/dispatchgen)", output)
	}
}
