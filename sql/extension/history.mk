# The rules building the frozen history of the extension (and pg_tle.sql)
# from the migrations; included by Makefile, and run alone by the tests of
# sql/extension (make -f history.mk OUT=dir), which need no PGXS.

OLDEST ?= 11
HISTORY ?= 11--12 12--13 13--14 14--15 15--16 16--17 17--18 18--19
MIGRATIONS ?= ../migrations
VERSION ?= $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" rl.control)
OUT ?= .

GUARD = \echo Use "CREATE EXTENSION rl" to load this file. \quit
# config_dump FILES: the tables the files create, marked for pg_dump.
config_dump = tables=$$(grep -ho '^CREATE TABLE rl\.[a-z_]*' $(1) | sed 's/^CREATE TABLE //'); \
	if [ -n "$$tables" ]; then echo; for t in $$tables; do echo "SELECT pg_catalog.pg_extension_config_dump('$$t', '');"; done; fi

history: $(OUT)/rl--$(OLDEST).sql $(HISTORY:%=$(OUT)/rl--%.sql) $(OUT)/pg_tle.sql

$(OUT)/rl--$(OLDEST).sql: $(sort $(wildcard $(MIGRATIONS)/00*.up.sql))
	files=$$(for v in $$(seq 1 $(OLDEST)); do ls $(MIGRATIONS)/$$(printf %04d $$v)_*.up.sql; done); \
	{ echo '-- Built from sql/migrations by make or by the Go package sql/extension; DO NOT EDIT.'; echo '--'; \
	  echo "-- The extension rl at version $(OLDEST), installed whole (CREATE EXTENSION rl VERSION '$(OLDEST)'):"; \
	  echo "-- the migrations 0001 to $$(printf %04d $(OLDEST)), in order."; echo; printf '%s\n' '$(GUARD)'; \
	  for f in $$files; do echo; echo "-- sql/migrations/$$(basename $$f)"; echo; cat $$f; done; \
	  $(call config_dump,$$files); } > $@

$(HISTORY:%=$(OUT)/rl--%.sql): $(OUT)/rl--%.sql: $(sort $(wildcard $(MIGRATIONS)/00*.up.sql))
	from=$(firstword $(subst --, ,$*)); to=$(lastword $(subst --, ,$*)); \
	f=$$(ls $(MIGRATIONS)/$$(printf %04d $$to)_*.up.sql); \
	{ echo '-- Built from sql/migrations by make or by the Go package sql/extension; DO NOT EDIT.'; echo '--'; \
	  echo "-- The update of the extension rl from version $$from to $$to (ALTER EXTENSION rl UPDATE):"; \
	  echo "-- the migration $$(printf %04d $$to)."; echo; printf '%s\n' '$(GUARD)'; \
	  echo; echo "-- sql/migrations/$$(basename $$f)"; echo; cat $$f; \
	  $(call config_dump,$$f); } > $@

$(OUT)/pg_tle.sql: rl--$(VERSION).sql
	{ echo '-- Built from rl--$(VERSION).sql by make pg_tle.sql or by the Go package sql/extension; DO NOT EDIT.'; \
	  echo '--'; \
	  echo '-- Registers the extension rl, version $(VERSION), with pg_tle (Trusted Language'; \
	  echo '-- Extensions for PostgreSQL) in the current database: for managed services,'; \
	  echo "-- where make install cannot put files into the server's share directory."; \
	  echo '-- Run it once per database, as a member of pgtle_admin, after'; \
	  echo '-- CREATE EXTENSION pg_tle; then, as the role that is to own the schema rl:'; \
	  echo '--'; echo '--   CREATE EXTENSION rl;'; echo '--'; \
	  echo '-- pg_tle runs the script as that role (a pg_tle extension is never'; \
	  echo '-- superuser or trusted), as the file-based extension does.'; echo; \
	  echo 'SELECT pgtle.install_extension('; echo "    'rl',"; echo "    '$(VERSION)',"; \
	  echo "    'rate limiting in schema rl: a state table and PL/pgSQL decision functions (github.com/rlcore/rl)',"; \
	  echo '$$_pgtle_$$'; grep -vxF '$(GUARD)' rl--$(VERSION).sql; echo '$$_pgtle_$$,'; \
	  echo "    ARRAY['plpgsql']"; echo ');'; } > $@

pg_tle.sql: $(OUT)/pg_tle.sql
.PHONY: history
