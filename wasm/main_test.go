package wasm_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/rlcore/rl/wasm"
)

// pool is shared by the tests of the package: New compiles the module once
// and every test draws instances from it.
var pool *wasm.Pool

func TestMain(m *testing.M) {
	ctx := context.Background()
	var err error
	pool, err = wasm.New(ctx, wasm.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "wasm.New:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := pool.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Close:", err)
		code = 1
	}
	os.Exit(code)
}
