# The two test tiers (README.md, "The two commands"):
#
#   make test         the full suite, as CI runs it: scripts/test-setup.sh
#                     prepares the local PostgreSQL 15 (starts it, 300
#                     connections, PL/Proxy, plpgsql_check, the extensions
#                     rl and rl_native; installing needs root, a second run
#                     only checks), then every test with the race detector
#   make test-short   the quick tier: no PostgreSQL, Node.js or root needed
#                     (the tests that need them skip with -short)

GO ?= go

.PHONY: test test-short test-setup generate

test: test-setup
	$(GO) test -race -count=1 -timeout 45m ./...
	# The RLQS simulator's whole matrix (N up to 200 clients): the race
	# build above simulates N = 2 and 10 only (internal/request/quota, TestSimulation).
	$(GO) test -count=1 -timeout 30m -run '^TestSimulation$$' ./internal/request/quota

test-short:
	$(GO) test -short ./...

test-setup:
	bash scripts/test-setup.sh

# Every generated file, from its one source (each says so in its first lines;
# CI fails when one is stale): the core's dispatch to each algorithm
# (core/dispatch_gen.go) from its Algorithm constants; the SQL migrations
# from 0020 on, the extension's control file and the C algorithm table from
# sql/src and core.Algorithms(); the conformance vectors from their
# generator; the two WebAssembly modules from their pinned builds; the
# reference pages under docs/reference/ (the SQL functions' by sqlgen, the
# rest by docgen).
generate:
	$(GO) generate ./core
	$(GO) run ./sql/internal/sqlgen
	$(GO) run ./tests/docs/docgen
	$(GO) generate ./tests/vectors
	bash wasm/build.sh
	bash proxywasm/build.sh
