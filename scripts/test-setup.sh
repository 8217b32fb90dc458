#!/usr/bin/env bash
# Prepares this machine's PostgreSQL for the full test suite (make test runs
# it before go test): on Debian 12 with PostgreSQL 15 at 127.0.0.1:5432
# (trust), it
#
#   1. starts the server if it is not running;
#   2. gives it room for 300 connections (the test packages run two at a
#      time, each with pools of its own; Debian's default is 100);
#   3. installs PL/Proxy (Debian postgresql-15-plproxy: the sharding tests of
#      sql/plproxy, pgstore and cmd/rl-migrate);
#   4. installs plpgsql_check (postgresql-15-plpgsql-check: TestPlpgsqlCheck
#      runs it over every PL/pgSQL function of the schema rl);
#   5. installs this repository's extension rl (make -C sql/extension
#      install: the TestExtension* tests CREATE EXTENSION rl);
#   6. builds and installs the native step rl_native (make -C sql/native
#      install: TestNative creates the extension rl_native);
#   7. checks for Node.js >= 20 (wasm's TestNode hosts the module in it);
#   8. installs Prometheus and promtool (Debian prometheus: tests/dashboard
#      scrapes rl-wasm-host with it and runs the alert rules' unit tests),
#      without starting the package's own server.
#
# Each step first checks what is there and changes nothing that is in
# place, so a second run only reads (a few seconds: it compiles rl_native to
# compare it with the installed one). Installing needs root; a run that
# finds everything in place does not. PG_CONFIG names another PostgreSQL's
# pg_config (default: PostgreSQL 15's).
set -euo pipefail
cd "$(dirname "$0")/.."

pg_config=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
[ -x "$pg_config" ] || { echo "test-setup: $pg_config not found: install PostgreSQL 15 (Debian: postgresql-15) or set PG_CONFIG" >&2; exit 1; }
major=$("$pg_config" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
sharedir=$("$pg_config" --sharedir)/extension
pkglibdir=$("$pg_config" --pkglibdir)
host=127.0.0.1 port=5432

say() { printf 'test-setup: %s\n' "$*"; }

# need_root explains why a step must install and fails unless we are root.
need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "test-setup: $* is missing or out of date and installing it needs root: run make test as root (or sudo bash scripts/test-setup.sh once)" >&2
    exit 1
  fi
}

apt_updated=
apt_install() {
  need_root "$*"
  if [ -z "$apt_updated" ]; then
    apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

cluster() { pg_ctlcluster --skip-systemctl-redirect "$major" main "$@"; }

wait_ready() {
  for _ in $(seq 1 120); do
    pg_isready -h "$host" -p "$port" -q && return 0
    sleep 0.5
  done
  pg_isready -h "$host" -p "$port"
}

sql() { psql -h "$host" -p "$port" -U postgres -d postgres -XAtqc "$1"; }

# 1. The server.
if pg_isready -h "$host" -p "$port" -q; then
  say "PostgreSQL at $host:$port: running"
else
  need_root "a running PostgreSQL $major"
  say "PostgreSQL at $host:$port: starting"
  cluster start
  wait_ready
fi

# 2. Connections.
if [ "$(sql 'SHOW max_connections')" -ge 300 ]; then
  say "max_connections $(sql 'SHOW max_connections'): enough"
else
  need_root "max_connections >= 300"
  say "max_connections $(sql 'SHOW max_connections'): raising to 300 (restarts the server)"
  sql 'ALTER SYSTEM SET max_connections = 300'
  cluster restart
  wait_ready
fi

# 3, 4. Extensions from Debian's packages: present when their control file
# and module are.
for ext in plproxy:postgresql-$major-plproxy plpgsql_check:postgresql-$major-plpgsql-check; do
  name=${ext%%:*} pkg=${ext#*:}
  if [ -f "$sharedir/$name.control" ] && [ -f "$pkglibdir/$name.so" ]; then
    say "$name: installed"
  else
    say "$name: missing, installing $pkg"
    apt_install "$pkg"
    [ -f "$sharedir/$name.control" ] && [ -f "$pkglibdir/$name.so" ]
  fi
done

# PGXS (postgresql-server-dev) and a C compiler build and install 5 and 6.
need_pgxs() {
  local pgxs
  pgxs=$("$pg_config" --pgxs 2>/dev/null || true)
  if [ -z "$pgxs" ] || [ ! -f "$pgxs" ] || [ ! -f "$("$pg_config" --includedir-server)/postgres.h" ] ||
    ! command -v gcc >/dev/null || ! command -v make >/dev/null; then
    say "PGXS or a C compiler: missing, installing postgresql-server-dev-$major gcc make"
    apt_install "postgresql-server-dev-$major" gcc make
  fi
}

# same DIR FILE... is true when every FILE of the repository's DIR is
# installed with the same bytes (.so in pkglibdir, the rest in sharedir).
same() {
  local dir=$1 f dest
  shift
  for f in "$@"; do
    case $f in
    *.so) dest=$pkglibdir/$(basename "$f") ;;
    *) dest=$sharedir/$(basename "$f") ;;
    esac
    cmp -s "$dir/$f" "$dest" || return 1
  done
}

# 5. The extension rl: SQL scripts only, compared with the installed ones.
# The scripts are built by make, not committed (from the migrations, and
# the install script of the default version from sql/src with Go): build
# them first, as this user, then compare every script.
# Scripts installed earlier that the repository no longer ships are removed
# (a stale rl--19.sql would make CREATE EXTENSION rl VERSION '19' skip the
# history).
need_pgxs
(
  cd sql/extension
  make -s PG_CONFIG="$pg_config" >/dev/null
  files=(rl.control rl--*.sql)
  stale=()
  for f in "$sharedir"/rl--*.sql; do
    [ -e "$f" ] && [ ! -e "$(basename "$f")" ] && stale+=("$f")
  done
  if same . "${files[@]}" && [ ${#stale[@]} -eq 0 ]; then
    say "extension rl: installed, up to date"
  else
    need_root "the extension rl"
    say "extension rl: missing or out of date, installing (make -C sql/extension install)"
    make -s install PG_CONFIG="$pg_config"
    for f in "${stale[@]}"; do
      rm -f "$f"
      say "extension rl: removed $(basename "$f") (no longer shipped)"
    done
    same . "${files[@]}"
  fi
)

# 6. rl_native: built outside the work tree (with its path mapped away, so
# that the same sources give the same bytes wherever they are checked out)
# and compared with the installed module.
need_pgxs
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
cp -R sql/native/. "$build"/
(
  cd "$build"
  rm -f ./*.o ./*.bc ./*.so # an in-tree build's leftovers: built afresh
  make -s PG_CONFIG="$pg_config" PG_CFLAGS="-ffile-prefix-map=$build=sql/native" >/dev/null
  files=(rl_native.so rl_native.control rl_native--*.sql)
  if same . "${files[@]}"; then
    say "rl_native: installed, up to date"
  else
    need_root "rl_native"
    say "rl_native: missing or out of date, installing (make -C sql/native install)"
    make -s install PG_CONFIG="$pg_config" PG_CFLAGS="-ffile-prefix-map=$build=sql/native" >/dev/null
    same . "${files[@]}"
  fi
)

# 7. Node.js.
if ! command -v node >/dev/null; then
  echo "test-setup: node not found: the full suite needs Node.js >= 20 (wasm's TestNode); go test -short needs none" >&2
  exit 1
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "test-setup: node $(node --version) is too old: the full suite needs Node.js >= 20" >&2
  exit 1
fi
say "node $(node --version): ok"

# 8. Prometheus and promtool, from one Debian package. Its service is not
# started: the tests run their own server on a free port.
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  say "prometheus $(prometheus --version 2>&1 | sed -nE '1s/^prometheus, version ([^ ]+).*/\1/p'), promtool: installed"
else
  need_root "Prometheus (Debian prometheus)"
  say "prometheus, promtool: missing, installing prometheus (its service not started)"
  policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    policy=1
  fi
  apt_install --no-install-recommends prometheus
  if [ -n "$policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
  command -v prometheus >/dev/null && command -v promtool >/dev/null
fi
