#!/usr/bin/env bash
# build-image.sh builds rl's container images with podman, from this
# checkout, needing no registry (both are FROM scratch):
#
#   rl         deploy/Containerfile: rl-wasm-host and rl-migrate, statically
#              linked (CGO_ENABLED=0, built here on the host), the sample
#              rules as /etc/rl/rules.yaml, CA certificates, LICENSE and
#              NOTICE; user 65532; a HEALTHCHECK (rl-wasm-host -health).
#   rl-filter  deploy/Containerfile.filter: proxywasm/rl-filter.wasm as
#              plugin.wasm, the image Istio's WasmPlugin pulls.
#
#   deploy/build-image.sh                  both
#   deploy/build-image.sh rl               the service image only
#   deploy/build-image.sh rl-filter        the filter image only
#   deploy/build-image.sh -push rl-filter  and push it (podman push: the registry must be reachable)
#
# Names: $RL_REGISTRY/rl:<version> and $RL_REGISTRY/rl-filter:<version>, and
# :latest, RL_REGISTRY defaulting to localhost:5000/rlcore (a local
# registry, such as kind's). <version> is the module version the built
# rl-wasm-host reports (rl-wasm-host -version): the tag v0.1.0 when HEAD is
# tagged, a pseudo-version past a tag, or RL_VERSION (given to the build
# with -ldflags -X) where go build stamps none, else "devel"; a "+" is
# written "-" in the tag. After the build the script inspects each image
# and fails unless its labels, user, entry point and health check are the
# ones above. podman is installed with apt-get when missing.
#
# Containers cannot run everywhere (a sandbox without user namespaces or
# cgroups refuses "podman run"); building needs neither.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

push=0
targets=()
for a in "$@"; do
	case "$a" in
	-push) push=1 ;;
	rl | rl-filter) targets+=("$a") ;;
	*)
		echo "usage: $0 [-push] [rl] [rl-filter]" >&2
		exit 2
		;;
	esac
done
[ ${#targets[@]} -gt 0 ] || targets=(rl rl-filter)

registry=${RL_REGISTRY:-localhost:5000/rlcore}

if ! command -v podman >/dev/null; then
	echo "build-image.sh: installing podman (apt-get)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q podman ca-certificates
fi
if [ ! -r /etc/ssl/certs/ca-certificates.crt ]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q ca-certificates
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

# The binaries: static, the module version stamped by go build from the
# checkout (-buildvcs=auto overrides a GOFLAGS=-buildvcs=false), RL_VERSION
# or the checkout's exact v* tag as the fallback.
fallback=${RL_VERSION:-$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null || true)}
ldflags="-s -w"
[ -z "$fallback" ] || ldflags="$ldflags -X github.com/rlcore/rl/internal/request/version.version=$fallback"
mkdir -p "$ctx/bin"
for c in rl-wasm-host rl-migrate; do
	CGO_ENABLED=0 go build -trimpath -buildvcs=auto -ldflags "$ldflags" -o "$ctx/bin/$c" "./cmd/$c"
	if ! go version -m "$ctx/bin/$c" | grep -q 'CGO_ENABLED=0'; then
		echo "build-image.sh: $c is not statically linked (CGO_ENABLED=0)" >&2
		exit 1
	fi
done
"$ctx/bin/rl-wasm-host" -version | sed 's/^/build-image.sh: /' >&2
version=$("$ctx/bin/rl-wasm-host" -version | sed -n '1s/^rl-wasm-host //p')
revision=$("$ctx/bin/rl-wasm-host" -version | sed -n 's/^commit: //p')
if [ "$revision" = unknown ]; then
	revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
fi
created=$(git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
tag=${version//+/-}

# --no-cache: podman's layer cache can keep a LABEL built with another
# --build-arg value (the version), and these images take seconds to build.
build() { # name containerfile
	local name=$1 file=$2
	podman build --pull=never --no-cache --format docker \
		--build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg CREATED="$created" \
		-f "$file" -t "$registry/$name:$tag" -t "$registry/$name:latest" "$ctx" >&2
}

# check NAME FORMAT WANT: the inspected field equals WANT.
check() {
	local got
	got=$(podman image inspect --format "$2" "$registry/$1:$tag")
	if [ "$got" != "$3" ]; then
		echo "build-image.sh: $registry/$1:$tag: $2 is '$got', want '$3'" >&2
		exit 1
	fi
}

for t in "${targets[@]}"; do
	case "$t" in
	rl)
		cp cmd/rl-wasm-host/sample.yaml "$ctx/rules.yaml"
		cp LICENSE NOTICE "$ctx/"
		cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
		build rl deploy/Containerfile
		check rl '{{.Config.User}}' 65532:65532
		check rl '{{json .Config.Entrypoint}}' '["/usr/local/bin/rl-wasm-host"]'
		check rl '{{json .Config.Cmd}}' '["-config","/etc/rl/rules.yaml"]'
		check rl '{{json .Config.Healthcheck.Test}}' '["CMD","/usr/local/bin/rl-wasm-host","-health","http://127.0.0.1:8081/readyz"]'
		;;
	rl-filter)
		cp proxywasm/rl-filter.wasm "$ctx/plugin.wasm"
		build rl-filter deploy/Containerfile.filter
		;;
	esac
	check "$t" '{{index .Config.Labels "org.opencontainers.image.licenses"}}' Apache-2.0
	check "$t" '{{index .Config.Labels "org.opencontainers.image.version"}}' "$version"
	check "$t" '{{index .Config.Labels "org.opencontainers.image.revision"}}' "$revision"
	echo "built $registry/$t:$tag ($(podman image inspect --format '{{.Size}}' "$registry/$t:$tag") bytes)"
	if [ "$push" = 1 ]; then
		podman push "$registry/$t:$tag"
		podman push "$registry/$t:latest"
	fi
done
