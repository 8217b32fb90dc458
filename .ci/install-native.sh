#!/usr/bin/env bash
# Builds and installs the optional native step rl_native (sql/native: rl._eval
# in C, as the extension rl_native) into PostgreSQL 15 with PGXS; TestNative
# (sql/migrations) creates the extension and fails without it. Needs a C
# compiler and postgresql-server-dev-15 (the server headers and PGXS),
# installed if missing. Installing again is harmless.
set -euo pipefail
cd "$(dirname "$0")/.."
major=15
pg_config="/usr/lib/postgresql/$major/bin/pg_config"
if [ ! -f "$("$pg_config" --includedir-server)/postgres.h" ] || ! command -v gcc >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-server-dev-$major" gcc make
fi
make -C sql/native install PG_CONFIG="$pg_config"
make -C sql/native clean PG_CONFIG="$pg_config"
test -f "$("$pg_config" --pkglibdir)/rl_native.so"
test -f "$("$pg_config" --sharedir)/extension/rl_native.control"
