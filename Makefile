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

.PHONY: venv run serve test faults faults-failover ha-up ha-down pgbouncer-up pgbouncer-down \
	test-pgbouncer lint format migrate admin api-key clean

$(BIN)/.installed: requirements.txt clients/python/pyproject.toml
	@if [ -z "$(PYTHON)" ]; then echo "error: Python 3.12 or newer is required (Django 6.1); none found on PATH" >&2; exit 1; fi
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/pip install --quiet --disable-pip-version-check -e ./clients/python
	@touch $@

venv: $(BIN)/.installed

migrate: venv
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
test: venv
	$(BIN)/pytest $(PYTEST_ARGS)

# Every fault scenario (docs/reliability.md), up to ~20 minutes, PostgreSQL only. It
# restarts the PostgreSQL cluster once (pg_ctlcluster ... restart -m immediate):
# SENDLATER_FAULTS_PG_RESTART=0 leaves that scenario out on a shared server.
faults: export SECRET_KEY ?= test-only-not-a-secret
faults: export SECURE_SSL_REDIRECT ?= false
faults: export SENDLATER_FAULTS_FULL = 1
faults: export SENDLATER_FAULTS_STRICT_LAG ?= 1
faults: export SENDLATER_FAULTS_PG_RESTART ?= 1
faults: venv
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
faults-failover: venv
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
test-pgbouncer: venv
	@url=$$(scripts/pgbouncer.sh up | tail -n1); \
	DATABASE_URL="$${url%/*}/$(PGB_TEST_DB)" SENDLATER_PGBOUNCER=1 $(BIN)/pytest \
	  tests/api tests/integration tests/faults -m "not faults_full" --reuse-db $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) staticfiles db.sqlite3 db.sqlite3-* test_db.sqlite3*
