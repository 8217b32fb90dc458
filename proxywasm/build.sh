#!/bin/sh
# build.sh builds proxywasm/rl-filter.wasm, the proxy-wasm HTTP filter,
# reproducibly, exactly as wasm/build.sh builds rl.wasm: the Go version is
# the one pinned in wasm/go.version and every setting that changes the
# output is fixed here.
#
#   proxywasm/build.sh          rebuild rl-filter.wasm
#   proxywasm/build.sh -check   rebuild into a temporary file and fail
#                                    unless it is byte-identical to the
#                                    committed rl-filter.wasm
#
# RL_WASM_ANY_GO=1 builds with another Go version (with a loud warning),
# never for -check.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
want=$(tr -d ' \n' <"$root/wasm/go.version")

check=0
case "${1:-}" in
"") ;;
-check) check=1 ;;
*)
	echo "usage: $0 [-check]" >&2
	exit 2
	;;
esac

got=$(cd "$root" && GOTOOLCHAIN=local go env GOVERSION)
if [ "$got" != "$want" ]; then
	if [ "$check" = 1 ] || [ "${RL_WASM_ANY_GO:-}" != 1 ]; then
		echo "proxywasm/build.sh: Go is $got but rl-filter.wasm is pinned to $want (wasm/go.version); refusing." >&2
		echo "proxywasm/build.sh: install $want, or set RL_WASM_ANY_GO=1 to build anyway (not reproducible)." >&2
		exit 1
	fi
	echo "########################################################################" >&2
	echo "proxywasm/build.sh: WARNING: building with $got, pinned $want:" >&2
	echo "proxywasm/build.sh: WARNING: rl-filter.wasm will not match a" >&2
	echo "proxywasm/build.sh: WARNING: reproducible build. Do not commit it." >&2
	echo "########################################################################" >&2
fi

out="$here/rl-filter.wasm"
if [ "$check" = 1 ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	out="$tmp/rl-filter.wasm"
fi

# Everything that can change the bytes is set explicitly; the environment's
# GOFLAGS, GOWASM, GOEXPERIMENT, CGO_ENABLED and toolchain switching are not
# inherited. -mod=readonly: the SDK's version is go.mod's, never upgraded.
cd "$root"
env GOOS=wasip1 GOARCH=wasm GOWASM= GOEXPERIMENT= GOFLAGS=-mod=readonly CGO_ENABLED=0 GOTOOLCHAIN=local \
	go build -buildmode=c-shared -trimpath -buildvcs=false -ldflags="-s -w -buildid=" \
	-o "$out" ./proxywasm

sum() { sha256sum "$1" | cut -d' ' -f1; }
if [ "$check" = 1 ]; then
	if ! cmp -s "$out" "$here/rl-filter.wasm"; then
		echo "proxywasm/build.sh -check: proxywasm/rl-filter.wasm is stale or not reproducible:" >&2
		echo "  committed $(wc -c <"$here/rl-filter.wasm") bytes, sha256 $(sum "$here/rl-filter.wasm")" >&2
		echo "  rebuilt   $(wc -c <"$out") bytes, sha256 $(sum "$out")" >&2
		echo "Run proxywasm/build.sh and commit proxywasm/rl-filter.wasm." >&2
		exit 1
	fi
	echo "proxywasm/build.sh -check: rl-filter.wasm is up to date ($want, sha256 $(sum "$out"))"
else
	echo "proxywasm/build.sh: wrote proxywasm/rl-filter.wasm ($want, $(wc -c <"$out") bytes, sha256 $(sum "$out"))"
fi
