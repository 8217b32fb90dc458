#!/bin/sh
# build.sh builds wasm/rl.wasm, the rate-limiting core compiled to a WASI
# reactor, reproducibly: the Go version is pinned in wasm/go.version and
# every setting that changes the output is fixed here.
#
#   wasm/build.sh          rebuild wasm/rl.wasm
#   wasm/build.sh -check   rebuild into a temporary file and fail unless it
#                          is byte-identical to the committed wasm/rl.wasm
#
# It refuses to run with a Go version other than the pinned one, because
# another compiler produces other bytes. RL_WASM_ANY_GO=1 overrides that
# for a plain build (with a loud warning), never for -check. To move to a
# new Go version: edit wasm/go.version, rebuild, and commit both.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
want=$(tr -d ' \n' <"$here/go.version")

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
		echo "wasm/build.sh: Go is $got but rl.wasm is pinned to $want (wasm/go.version); refusing." >&2
		echo "wasm/build.sh: install $want, or set RL_WASM_ANY_GO=1 to build anyway (not reproducible)." >&2
		exit 1
	fi
	echo "########################################################################" >&2
	echo "wasm/build.sh: WARNING: building with $got, pinned $want: rl.wasm will" >&2
	echo "wasm/build.sh: WARNING: not match a reproducible build. Do not commit it." >&2
	echo "########################################################################" >&2
fi

out="$here/rl.wasm"
if [ "$check" = 1 ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	out="$tmp/rl.wasm"
fi

# Everything that can change the bytes is set explicitly; the environment's
# GOFLAGS, GOWASM, GOEXPERIMENT, CGO_ENABLED and toolchain switching are not
# inherited.
cd "$root"
env GOOS=wasip1 GOARCH=wasm GOWASM= GOEXPERIMENT= GOFLAGS= CGO_ENABLED=0 GOTOOLCHAIN=local \
	go build -buildmode=c-shared -trimpath -buildvcs=false -ldflags="-s -w -buildid=" \
	-o "$out" ./wasm/guest

if [ "$check" = 1 ]; then
	if ! cmp -s "$out" "$here/rl.wasm"; then
		echo "wasm/build.sh -check: wasm/rl.wasm is stale or not reproducible:" >&2
		echo "  committed $(wc -c <"$here/rl.wasm") bytes, sha256 $(sha256sum "$here/rl.wasm" | cut -d' ' -f1)" >&2
		echo "  rebuilt   $(wc -c <"$out") bytes, sha256 $(sha256sum "$out" | cut -d' ' -f1)" >&2
		echo "Run wasm/build.sh and commit wasm/rl.wasm." >&2
		exit 1
	fi
	echo "wasm/build.sh -check: rl.wasm is up to date ($want, sha256 $(sha256sum "$out" | cut -d' ' -f1))"
else
	echo "wasm/build.sh: wrote wasm/rl.wasm ($want, $(wc -c <"$out") bytes, sha256 $(sha256sum "$out" | cut -d' ' -f1))"
fi
