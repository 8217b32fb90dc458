#!/usr/bin/env bash
# Installs the extension rl (sql/extension: rl.control and the rl--*.sql
# scripts, the history built from sql/migrations by make) into PostgreSQL
# 15's share directory with PGXS; the extension tests of sql/migrations
# (TestExtension*) CREATE EXTENSION rl and fail without it. PGXS comes with
# postgresql-server-dev-15, installed if its makefiles are missing.
# Installing again over the same files is harmless. Scripts an earlier
# install left that this one does not ship (the install script of an older
# default version, which CREATE EXTENSION rl VERSION would run instead of
# the update path) are removed.
set -euo pipefail
cd "$(dirname "$0")/.."
major=15
pg_config="/usr/lib/postgresql/$major/bin/pg_config"
pgxs=$("$pg_config" --pgxs 2>/dev/null || true)
if [ -z "$pgxs" ] || [ ! -f "$pgxs" ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-server-dev-$major"
fi
make -C sql/extension install PG_CONFIG="$pg_config"
# make install built the history into sql/extension: every script it
# installed is there.
share="$("$pg_config" --sharedir)/extension"
for f in "$share"/rl--*.sql; do
  if [ -e "$f" ] && [ ! -e "sql/extension/$(basename "$f")" ]; then
    rm -f "$f"
    echo "removed $f (not shipped anymore)"
  fi
done
test -f "$("$pg_config" --sharedir)/extension/rl.control"
