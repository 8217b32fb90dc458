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

.PHONY: test test-short test-setup

test: test-setup
	$(GO) test -race -count=1 -timeout 45m ./...

test-short:
	$(GO) test -short ./...

test-setup:
	bash scripts/test-setup.sh
