# sendlater: `make run` serves the demo on SQLite with two pollers, `make test` runs the suite
# (with the quick fault subset on PostgreSQL), `make faults` every fault scenario.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
HOST ?= 127.0.0.1
PORT ?= 8000

# Django 6.1 needs Python 3.12 or newer: take the first interpreter that is.
PYTHON ?= $(shell for p in python3.13 python3.12 python3 $$HOME/.pyenv/versions/3.1[2-9]*/bin/python3; do \
	  if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then \
	    command -v $$p; break; fi; done)

.PHONY: venv venv-runtime bench-deps lock upgrade-deps run serve test faults faults-failover \
	ha-up ha-down pgbouncer-up pgbouncer-down test-pgbouncer test-ts lint format migrate admin \
	api-key clean

# The venv in layers, each exactly as uv.lock has it (scripts/deps.sh, docs/operations.md
# "Dependencies"): the runtime dependencies (make run), then a group on top (make test:
# test, make lint: lint, make bench-deps: bench); `make venv` is a developer's test + lint.
# Through uv (installed into the venv from PyPI when there is none), plain pip otherwise.
DEPS := PYTHON="$(PYTHON)" VENV=$(VENV) scripts/deps.sh
$(BIN)/.deps-runtime: pyproject.toml uv.lock requirements.txt scripts/deps.sh
	@$(DEPS) install
	@touch $@
$(BIN)/.deps-%: $(BIN)/.deps-runtime requirements/%.txt clients/python/pyproject.toml
	@$(DEPS) install $*
	@touch $@

venv-runtime: $(BIN)/.deps-runtime
venv: $(BIN)/.deps-test $(BIN)/.deps-lint
bench-deps: $(BIN)/.deps-bench

# After editing pyproject.toml's dependencies: uv.lock and the requirements files again.
lock:
	@$(DEPS) lock
# Every dependency to the newest version pyproject.toml allows (then make test).
upgrade-deps:
	@$(DEPS) lock --upgrade

migrate: venv-runtime
	$(PY) manage.py migrate --noinput

admin: migrate
	$(PY) manage.py ensure_admin

# An API key for team $(TEAM) (created if needed) on the demo database.
api-key: export DEBUG ?= true
api-key: migrate
	@$(PY) manage.py create_api_key --team $(or $(TEAM),demo)

DEMO_PORT ?= 8001

run: export DEBUG ?= true
run: export SENDLATER_CALLBACK_ALLOWLIST ?= 127.0.0.1
run: admin
	$(PY) manage.py collectstatic --noinput -v 0
	$(PY) manage.py seed_demo --receiver http://127.0.0.1:$(DEMO_PORT)/hooks/demo
	@echo "sendlater on http://$(HOST):$(PORT)/  (admin at http://$(HOST):$(PORT)/admin/), 2 pollers,"
	@echo "demo receiver on 127.0.0.1:$(DEMO_PORT) (deliveries are logged below within a minute); Ctrl-C stops all"
	$(PY) manage.py runservice --bind $(HOST):$(PORT) --workers 2 --pollers 2 --demo-receiver $(DEMO_PORT)

test: export SECRET_KEY ?= test-only-not-a-secret
test: export SECURE_SSL_REDIRECT ?= false
# Tests (and the pollers they start) keep partitions a couple of days ahead, not the horizon:
# for speed only. A poller no longer stalls on a fresh database (it creates a few partitions
# per iteration), but in a test whose transaction is rolled back every poller iteration would
# spend its partition budget again on partitions that vanish with the test
# (tests/integration/test_poller_loop.py: 13 s instead of 5 s on PostgreSQL).
test: export SENDLATER_PARTITION_AHEAD_DAYS ?= 2
# The client kit's Django receiver app (clients/python), for its tests (tests/clients/).
test: export SENDLATER_EXTRA_APPS ?= sendlater_client.django
test: $(BIN)/.deps-test
	$(BIN)/pytest $(PYTEST_ARGS)

# Every fault scenario (docs/reliability.md), up to ~20 minutes, PostgreSQL only. It
# restarts the PostgreSQL cluster once (pg_ctlcluster ... restart -m immediate):
# SENDLATER_FAULTS_PG_RESTART=0 leaves that scenario out on a shared server.
faults: export SECRET_KEY ?= test-only-not-a-secret
faults: export SECURE_SSL_REDIRECT ?= false
faults: export SENDLATER_FAULTS_FULL = 1
faults: export SENDLATER_FAULTS_STRICT_LAG ?= 1
faults: export SENDLATER_FAULTS_PG_RESTART ?= 1
faults: $(BIN)/.deps-test
	@case "$$DATABASE_URL" in postgres*) ;; \
	  *) echo "error: make faults needs DATABASE_URL=postgres://... (PostgreSQL)" >&2; exit 2;; esac
	$(BIN)/pytest tests/faults -m faults $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory faults-failover

# The failover scenario (docs/ha.md): a pg_auto_failover formation of its own (make
# ha-up), the primary killed with kill -9 mid-burst, the formation removed after.
# If the formation cannot start the scenario is skipped, and says why.
faults-failover: export SECRET_KEY ?= test-only-not-a-secret
faults-failover: export SECURE_SSL_REDIRECT ?= false
faults-failover: export SENDLATER_FAULTS_FULL = 1
faults-failover: $(BIN)/.deps-test
	@if url=$$(scripts/ha.sh up | tail -n1) && [ -n "$$url" ]; then \
	  DATABASE_URL="$$url" SENDLATER_FAULTS_HA=1 $(BIN)/pytest tests/faults/test_failover_faults.py \
	    -m faults $(PYTEST_ARGS); rc=$$?; scripts/ha.sh down; exit $$rc; \
	else \
	  echo "faults: the pg_auto_failover formation did not start (scripts/ha.sh up)" >&2; \
	  scripts/ha.sh down; $(BIN)/pytest tests/faults/test_failover_faults.py -m faults -rs $(PYTEST_ARGS); \
	fi

# A local pg_auto_failover formation: monitor, primary, synchronous secondary (ports
# HA_PORT .. +2, default 25432-25434, below Linux's ephemeral range 32768-60999; a
# taken port stops it at once, named; data under HA_DIR, default /tmp/sendlater-ha).
# Prints the multi-host DATABASE_URL. ha-down stops it and removes its data.
ha-up:
	@scripts/ha.sh up
ha-down:
	@scripts/ha.sh down

# pgbouncer in transaction pooling on PGB_PORT (default 55440) in front of the local
# server; prints the DATABASE_URL to use with SENDLATER_PGBOUNCER=1 (docs/postgres.md).
pgbouncer-up:
	@scripts/pgbouncer.sh up
pgbouncer-down:
	@scripts/pgbouncer.sh down

# The API, integration and quick fault tests through pgbouncer (docs/postgres.md).
# --reuse-db: pgbouncer keeps server connections to the test database, which
# DROP DATABASE would refuse; the test database is kept between runs instead.
PGB_TEST_DB ?= sendlater_pgbouncer
test-pgbouncer: export SECRET_KEY ?= test-only-not-a-secret
test-pgbouncer: export SECURE_SSL_REDIRECT ?= false
test-pgbouncer: export SENDLATER_PARTITION_AHEAD_DAYS ?= 2
test-pgbouncer: export SENDLATER_EXTRA_APPS ?= sendlater_client.django
test-pgbouncer: $(BIN)/.deps-test
	@url=$$(scripts/pgbouncer.sh up | tail -n1); \
	DATABASE_URL="$${url%/*}/$(PGB_TEST_DB)" SENDLATER_PGBOUNCER=1 $(BIN)/pytest \
	  tests/api tests/integration tests/faults -m "not faults_full" --reuse-db $(PYTEST_ARGS)

# The TypeScript client (clients/typescript, docs/clients.md): npm ci, build, then node's
# test runner against the service it starts (runservice from .venv) on a scratch database:
# "<name>_tsclient" beside DATABASE_URL's on PostgreSQL, a temporary file on SQLite.
# Needs Node 20+ and npm.
test-ts: export SECRET_KEY ?= test-only-not-a-secret
test-ts: venv-runtime
	@command -v npm >/dev/null || { echo "error: make test-ts needs Node 20+ and npm" >&2; exit 1; }
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npm test

lint: $(BIN)/.deps-lint
	@$(DEPS) check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(BIN)/.deps-lint
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) staticfiles db.sqlite3 db.sqlite3-* test_db.sqlite3*
