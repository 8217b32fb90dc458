# The rules building the extension's scripts (and pg_tle.sql): the install
# script of OLDEST and every update script from the migrations, the install
# script of the default version from sql/src (with Go); included by
# Makefile, and run alone by the tests of sql/extension
# (make -f history.mk OUT=dir), which need no PGXS.

OLDEST = 11
MIGRATIONS = ../migrations
SRC = ../src
GO ?= go
# The default version, of rl.control (PGXS's VERSION is PostgreSQL's).
DEFAULT_VERSION := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" rl.control)
# The update scripts: OLDEST--OLDEST+1 to the default version, one
# migration each.
HISTORY := $(shell v=$(OLDEST); while [ $$v -lt $(DEFAULT_VERSION) ]; do echo $$v--$$((v+1)); v=$$((v+1)); done)
OUT ?= .

GUARD = \echo Use "CREATE EXTENSION rl" to load this file. \quit
# The check every script runs first (a superuser is refused unless
# rl.allow_superuser is on): prologue.sql, its placeholder @ACTION@
# replaced by what the script does. sqlsrc.InstallScript writes the same
# file into the install script of the default version.
PROLOGUE = prologue.sql
prologue = sed "s/@ACTION@/$(1)/" $(PROLOGUE)
HISTORY_HEAD = echo '-- First the check of sql/extension/prologue.sql (a superuser is refused'; \
	echo '-- unless rl.allow_superuser is on); the migration files are unchanged.'
# config_dump FILES: the tables the files create, marked for pg_dump.
config_dump = tables=$$(grep -hoE '^CREATE (UNLOGGED )?TABLE rl\.[a-z_]*' $(1) | sed -E 's/^CREATE (UNLOGGED )?TABLE //'); \
	if [ -n "$$tables" ]; then echo; for t in $$tables; do echo "SELECT pg_catalog.pg_extension_config_dump('$$t', '');"; done; fi

history: $(OUT)/rl--$(OLDEST).sql $(HISTORY:%=$(OUT)/rl--%.sql) $(OUT)/rl--$(DEFAULT_VERSION).sql $(OUT)/pg_tle.sql

# Without the migrations and sql/src (an unpacked distribution of make
# dist, which carries the built files), there is nothing to build them
# from: make installs them as they are.
ifneq ($(wildcard $(MIGRATIONS)/0001_*.up.sql),)
$(OUT)/rl--$(OLDEST).sql: $(sort $(wildcard $(MIGRATIONS)/00*.up.sql)) $(PROLOGUE)
	files=$$(for v in $$(seq 1 $(OLDEST)); do ls $(MIGRATIONS)/$$(printf %04d $$v)_*.up.sql; done); \
	{ echo '-- Built from sql/migrations by make or by the Go package sql/extension; DO NOT EDIT.'; echo '--'; \
	  echo "-- The extension rl at version $(OLDEST), installed whole (CREATE EXTENSION rl VERSION '$(OLDEST)'):"; \
	  echo "-- the migrations 0001 to $$(printf %04d $(OLDEST)), in order."; $(HISTORY_HEAD); echo; printf '%s\n' '$(GUARD)'; \
	  echo; $(call prologue,install the extension rl); \
	  for f in $$files; do echo; echo "-- sql/migrations/$$(basename $$f)"; echo; cat $$f; done; \
	  $(call config_dump,$$files); } > $@

$(HISTORY:%=$(OUT)/rl--%.sql): $(OUT)/rl--%.sql: $(sort $(wildcard $(MIGRATIONS)/00*.up.sql)) $(PROLOGUE)
	from=$(firstword $(subst --, ,$*)); to=$(lastword $(subst --, ,$*)); \
	f=$$(ls $(MIGRATIONS)/$$(printf %04d $$to)_*.up.sql); \
	{ echo '-- Built from sql/migrations by make or by the Go package sql/extension; DO NOT EDIT.'; echo '--'; \
	  echo "-- The update of the extension rl from version $$from to $$to (ALTER EXTENSION rl UPDATE):"; \
	  echo "-- the migration $$(printf %04d $$to)."; $(HISTORY_HEAD); echo; printf '%s\n' '$(GUARD)'; \
	  echo; $(call prologue,update the extension rl to version $$to); \
	  echo; echo "-- sql/migrations/$$(basename $$f)"; echo; cat $$f; \
	  $(call config_dump,$$f); } > $@
endif

# The install script of the default version is the current schema, not the
# history: the objects of sql/src in the order their calls need, which the
# Go package sql/internal/sqlsrc works out (go run ./sql/internal/sqlgen
# -install N prints it; the Go package sql/extension builds the same file).
ifneq ($(wildcard $(SRC)/schema.sql),)
$(OUT)/rl--$(DEFAULT_VERSION).sql: $(wildcard $(SRC)/*.sql $(SRC)/functions/*.sql) $(PROLOGUE) \
		$(filter-out %_test.go,$(wildcard ../internal/sqlsrc/*.go ../internal/sqltext/*.go ../internal/sqlgen/*.go))
	@command -v $(GO) >/dev/null || { echo "make: $@ is built from sql/src with Go ($(GO) run ./sql/internal/sqlgen -install $(DEFAULT_VERSION)), which is not on PATH (GO=...); a distribution of make dist carries it built" >&2; exit 1; }
	$(GO) run ../internal/sqlgen -install $(DEFAULT_VERSION) > $@.tmp && mv $@.tmp $@
endif

$(OUT)/pg_tle.sql: $(OUT)/rl--$(DEFAULT_VERSION).sql
	{ echo '-- Built from rl--$(DEFAULT_VERSION).sql by make pg_tle.sql or by the Go package sql/extension; DO NOT EDIT.'; \
	  echo '--'; \
	  echo '-- Registers the extension rl, version $(DEFAULT_VERSION), with pg_tle (Trusted Language'; \
	  echo '-- Extensions for PostgreSQL) in the current database: for managed services,'; \
	  echo "-- where make install cannot put files into the server's share directory."; \
	  echo '-- Run it once per database, as a member of pgtle_admin, after'; \
	  echo '-- CREATE EXTENSION pg_tle; then, as the role that is to own the schema rl:'; \
	  echo '--'; echo '--   CREATE EXTENSION rl;'; echo '--'; \
	  echo '-- pg_tle runs the script as that role (a pg_tle extension is never'; \
	  echo '-- superuser or trusted), as the file-based extension does. sql/README.md'; \
	  echo '-- ("The extension", "On managed services: pg_tle") says how to update it.'; \
	  echo "-- Not tested by rl's CI, which has no pg_tle (tried by hand with pg_tle"; \
	  echo '-- 1.5.3: sql/README.md): the script is the one the tests install from'; \
	  echo '-- rl--$(DEFAULT_VERSION).sql.'; echo; \
	  echo 'SELECT pgtle.install_extension('; echo "    'rl',"; echo "    '$(DEFAULT_VERSION)',"; \
	  echo "    'rate limiting in schema rl: a state table and PL/pgSQL decision functions (github.com/rlcore/rl)',"; \
	  echo '$$_pgtle_$$'; grep -vxF '$(GUARD)' $<; echo '$$_pgtle_$$,'; \
	  echo "    ARRAY['plpgsql']"; echo ');'; } > $@

ifneq ($(OUT),.)
pg_tle.sql: $(OUT)/pg_tle.sql
endif
.PHONY: history
