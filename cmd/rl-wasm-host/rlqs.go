package main

import "github.com/rlcore/rl/internal/frontend/rlqs"

// newRLQS loads -rlqs-config and returns the RLQS server it configures, its
// state in memory.
func newRLQS(path string) (*rlqs.Server, error) {
	cfg, err := rlqs.LoadConfig(path)
	if err != nil {
		return nil, err
	}
	return rlqs.New(cfg)
}
