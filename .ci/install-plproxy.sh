#!/usr/bin/env bash
# Installs PL/Proxy for PostgreSQL 15 (the sharding tests of sql/plproxy need
# it on the local server) unless it is installed already.
set -euo pipefail
if ! dpkg -s postgresql-15-plproxy >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15-plproxy
fi
