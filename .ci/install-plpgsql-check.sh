#!/usr/bin/env bash
# Installs plpgsql_check for PostgreSQL 15 (sql/migrations/plpgsql_check_test.go
# runs it over every PL/pgSQL function of the schema rl and fails without it)
# unless the extension's control file is installed already.
set -euo pipefail
major=15
sharedir=$("/usr/lib/postgresql/$major/bin/pg_config" --sharedir 2>/dev/null || echo "/usr/share/postgresql/$major")
if [ ! -f "$sharedir/extension/plpgsql_check.control" ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-$major-plpgsql-check"
fi
test -f "$sharedir/extension/plpgsql_check.control"
